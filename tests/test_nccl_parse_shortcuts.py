"""The per-line shortcuts of the NCCL parser give the answers of the plain code, over the whole format matrix.

* :func:`torch_nccl.pg_prefix_before` / :func:`torch_nccl.parse_pg_prefix` keep their answer per span: compared with
  the plain search (``finditer`` over the line between ``start`` and ``pos``) at every position of every line of the
  matrix (torch 2.0-2.14 message families x no prefix / ``[rankN]:`` / srun / Ray / ANSI / docker x hard wraps), cold
  (memo emptied) and warm, also when the memo is full and starts over.
* The positional constructors (``frozen.positional``) make objects equal to the dataclasses' own, hashing and pickling alike.
* :func:`torch_nccl.parse_line` gives equal results cold and warm on every line and re-joined wrap of the matrix (the
  timeout message is kept per text: the watchdog repeats it in its ``thread terminated`` line and ``what():`` copy).
"""

from __future__ import annotations

import pickle
import re
from dataclasses import fields

import pytest

from debug_training_logs.analysis import nccl_hits, nccl_sink
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_patterns as tnp
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats import torch_nccl_wraps as tnw
from debug_training_logs.frozen import positional
from tests.nccl_render import TORCH, all_cases


def _plain_before(text: str, pos: int, start: int) -> tnt.PGPrefix | None:
    """pg_prefix_before as written before the memo: the last PG prefix in text[start:pos], if only blanks follow."""
    last: re.Match[str] | None = None
    for m in tnp._PG_PREFIX.finditer(text, start, pos):
        last = m
    if last is None or text[last.end() : pos].strip():
        return None
    return tn._pg_build(last)


def _plain_first(text: str) -> tnt.PGPrefix | None:
    m = tnp._PG_PREFIX.search(text)
    return tn._pg_build(m) if m else None


def _texts(version: str) -> list[str]:
    out: list[str] = []
    for case in all_cases(version):
        out.extend(case.lines)
        out.append(tnw.join_wrapped(case.lines))
    return out


def _clear() -> None:
    tn._BEFORE_SEEN.clear()
    tn._FIRST_SEEN.clear()
    tn._PG_SEEN.clear()
    tn._TIMEOUT_SEEN.clear()


@pytest.mark.parametrize("version", TORCH)
def test_pg_prefix_answers_match_the_plain_search_everywhere(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tn, "_SHARED_MAX", 64)  # the memo fills and starts over many times in one version
    checked = 0
    for text in _texts(version):
        _header, start = tn.find_header(tn._text(text))
        # every place a message can start: after each "]" and blank, and the ends
        cuts = sorted({start, len(text)} | {i + k for i, ch in enumerate(text) if ch == "]" for k in (1, 2, 3)})
        for pos in cuts:
            if pos > len(text):
                continue
            for st in {0, min(start, pos)}:
                for _round in range(2):  # cold, then from the memo
                    assert tn.pg_prefix_before(text, pos, st) == _plain_before(text, pos, st), (text, st, pos)
                checked += 1
            assert tn.parse_pg_prefix(text[start:pos]) == _plain_first(text[start:pos])
            assert tn.parse_pg_prefix(text[start:pos]) == _plain_first(text[start:pos])
    assert checked > 1000


def test_a_prefix_seen_in_one_line_is_not_reused_for_a_different_span() -> None:
    _clear()
    a = "[rank3]:[E521 08:02:12.442821787 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 3]  "
    b = "[rank3]:[E521 08:02:12.442821787 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 3] x "
    _h, start = tn.find_header(a)
    got = tn.pg_prefix_before(a, len(a), start)
    assert got is not None and got.pg_rank == 3 and got.key == "0"
    assert tn.pg_prefix_before(b, len(b), start) is None  # text between the prefix and the message
    assert tn.pg_prefix_before(a, len(a) - 1, start) is got  # one blank fewer: the same prefix object
    long_span = "x" * (tn._SPAN_MAX + 10) + " [Rank 9] "
    assert tn.pg_prefix_before(long_span, len(long_span)) == tnt.PGPrefix("rank", None, None, None, 9)
    assert long_span not in tn._BEFORE_SEEN  # long spans are answered, not kept


@pytest.mark.parametrize("version", TORCH)
def test_parse_line_is_the_same_cold_and_warm(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also the timeout a ``watchdog thread terminated`` line and its ``what():`` copy repeat (kept per text)."""
    monkeypatch.setattr(tn, "_TIMEOUT_SEEN_MAX", 8)  # full and started over within one version
    texts = _texts(version)
    cold = []
    for text in texts:
        _clear()
        cold.append(tn.parse_line(text))
    warm = [tn.parse_line(text) for text in texts]
    again = [tn.parse_line(text) for text in texts]
    assert cold == warm == again
    assert sum(p is not None for p in cold) > 200  # the messages (the rest: filler lines and cut pieces)


_SAMPLES: list[object] = [
    tnt.Header("c10_2.4+", "E", 5, 21, "08:02:12", 3, "ProcessGroupNCCL.cpp:689", "0521 08:02:12"),
    tnt.Header("c10_<=2.1", "E", None, None, None, None, "ProcessGroupNCCL.cpp:475", None),
    tnt.WatchdogTimeout(tnt.Work(4118, "ALLREDUCE", 8, 8, None, 600000), 600123, 2, None, False),
    tnt.StatusLine("failure_detected", 7, 7, 6, tnt.PGPrefix("guid", "0", "0", "default_pg", 2)),
    tnt.DumpSignal("remote", 5, 9, 8, "2.5+", None),
    tnt.FirstToDump("2.7+", tnt.PGPrefix("rank", None, None, None, 1)),
    tnt.Teardown("take_down", None),
    tnt.FatalTerminate("collective timeout or exception", None),
]


@pytest.mark.parametrize("obj", _SAMPLES, ids=lambda o: type(o).__name__)
def test_positional_constructors_make_equal_objects(obj: object) -> None:
    cls = type(obj)
    values = [getattr(obj, f.name) for f in fields(cls)]  # type: ignore[arg-type]
    made = positional(cls)(*values)
    assert type(made) is cls and made == obj and hash(made) == hash(obj) and repr(made) == repr(obj)
    assert pickle.loads(pickle.dumps(made)) == obj
    parsed = tn._new_parsed(None, 4, made)
    assert parsed == tnt.Parsed(header=None, global_rank=4, event=obj)  # type: ignore[arg-type]


def test_positional_constructor_refuses_a_wrong_count_and_the_hit_maker_matches_hit() -> None:
    with pytest.raises(TypeError):
        tn._new_header("c10_2.4+", "E")
    ev = tnt.Teardown("some_failed", None)
    assert nccl_sink._new_hit(3, 1, None, ev, "line", 2) == nccl_hits.Hit(3, 1, None, ev, "line", joined=2)


def test_a_repeated_timeout_message_parses_alike_in_its_three_lines() -> None:
    _clear()
    msg = (
        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4118, OpType=ALLREDUCE, "
        "NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600099 milliseconds before timing out."
    )
    pg = "[PG ID 0 PG GUID 0(default_pg) Rank 2]"
    first = tn.parse_line(f"[rank2]:[E521 08:02:12.442641787 ProcessGroupNCCL.cpp:689] {msg}")
    wrapper = tn.parse_line(
        f"[rank2]:[E521 08:02:13.442641787 ProcessGroupNCCL.cpp:1899] {pg} Process group watchdog thread terminated "
        f"with exception: {msg}"
    )
    copy = tn.parse_line(f"  what():  {pg} Process group watchdog thread terminated with exception: {msg}")
    assert first is not None and wrapper is not None and copy is not None
    assert isinstance(wrapper.event, tnt.WatchdogTerminated) and isinstance(copy.event, tnt.WatchdogTerminated)
    assert wrapper.event.embedded == copy.event.embedded == first.event
    assert isinstance(first.event, tnt.WatchdogTimeout) and first.event.ran_for_ms == 600099
    assert first.event.work_rank == 2 and first.event.pg is None
    assert not wrapper.event.headerless and copy.event.headerless and copy.global_rank is None
    other = tn.parse_line(
        f"[rank2]:[E521 08:02:12.442641787 ProcessGroupNCCL.cpp:689] {msg.replace('600099', '600098')}"
    )
    assert other is not None and isinstance(other.event, tnt.WatchdogTimeout) and other.event.ran_for_ms == 600098
