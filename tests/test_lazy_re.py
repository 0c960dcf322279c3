"""``LazyPattern``: the regex it stands for, compiled on first use and only once."""

from __future__ import annotations

import pickle
import re

from debug_training_logs.formats.lazy_re import LazyPattern


def test_a_lazy_pattern_answers_as_the_compiled_regex() -> None:
    text = "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE)"
    source = r"SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+)"
    lazy, rx = LazyPattern(source), re.compile(source)
    assert lazy._compiled is None  # nothing compiled until it is used
    m, want = lazy.search(text), rx.search(text)
    assert m is not None and want is not None and m.groupdict() == want.groupdict() == {"seq": "41", "op": "ALLREDUCE"}
    assert lazy.search(text, 60, 70) is None and rx.search(text, 60, 70) is None
    assert [x.span() for x in lazy.finditer(text)] == [x.span() for x in rx.finditer(text)]
    assert lazy.match(text) is None and lazy.fullmatch("SeqNum=1, OpType=X") is not None
    assert lazy.sub("#", text, count=1) == rx.sub("#", text, count=1)
    assert lazy.compiled is lazy.compiled  # compiled once, then kept
    assert LazyPattern("a b", re.IGNORECASE).search("A B") is not None


def test_a_lazy_pattern_pickles_as_its_source() -> None:
    back = pickle.loads(pickle.dumps(LazyPattern(r"x\d+", re.IGNORECASE)))
    assert back.pattern == r"x\d+" and back.search("X12") is not None
