"""``Finder.hits``: the native finder checking its own candidate lines (``logs/_linescan.c``), against a plain Python
reference of the same contract (the loop ``scan_matcher._native_hits`` ran in Python before).

* A matrix of random needle sets, pattern tables (may match / proves / DFA-only patterns, more than 64 ids so the bit
  sets take several words), DFA line lists, dense-sample lines (``extra``), caps (``left``/``spent``), pages of a few
  lines, windows cut out of a bigger buffer, CRLF, no final newline and long lines: every hit, line number, cap
  count and spent position equal the reference's.
* The whole scan with a fallback (``regex``) pattern next to native ones equals the scan without the extension (the
  one path where Python still merges lines into the finder's).
* Bad arguments are errors, not crashes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import re2
from re2 import _re2
from test_native_scan import linescan

from debug_training_logs.logs import scan_dense, scan_file, scan_matcher, scan_types, scan_windows
from debug_training_logs.logs.scan_types import PatternSpec

_UNANCHORED = re2._Anchor.UNANCHORED


def _rx(pattern: str) -> Any:
    opts = re2.Options()
    opts.log_errors = False
    return _re2.RE2(pattern.encode(), opts)


def _matches(rx: Any, line: bytes) -> bool:
    return bool(rx.Match(_UNANCHORED, line, 0, len(line))[0][0] >= 0)


class Table:
    """A random pattern table for one needle set: what ``set_patterns`` takes, and the regexes behind it."""

    def __init__(self, rnd: random.Random, needles: list[bytes], k: int) -> None:
        self.k = k
        words = [nd.decode() for nd in needles] + ["lo+ss", r"\d{3}", "^x", "WARN|err", "y$", r"\bab"]
        self.patterns = [rnd.choice(words) if rnd.random() < 0.8 else r"\d\d" for _ in range(k)]
        self.rx = [_rx(p) for p in self.patterns]
        ids = list(range(k))
        self.may = [tuple(sorted(rnd.sample(ids, rnd.randrange(0, min(4, k) + 1)))) for _ in needles]
        # a needle proves some of the patterns it may match (as a pure top-level literal branch would)
        self.proves = [tuple(i for i in may if rnd.random() < 0.4) for may in self.may]
        listed = {i for may in self.may for i in may}
        self.always = tuple(sorted(rnd.sample(ids, rnd.randrange(0, min(3, k + 1)))))
        self.searched = sorted(listed | set(self.always))
        self.set: Any = None
        if self.searched:
            opts = re2.Options()
            opts.log_errors = False
            st = re2.Set.SearchSet(opts)
            for i in self.searched:
                st.Add(self.patterns[i].encode())
            st.Compile()
            self.set = st._set

    def install(self, finder: Any) -> None:
        verify = [self.rx[i].Match if i in self.searched else None for i in range(self.k)]
        finder.set_patterns(
            self.k,
            self.may,
            self.proves,
            self.always,
            verify,
            self.set.Match if self.set is not None else None,
            self.searched,
            _UNANCHORED,
        )


def reference(
    buf: bytes,
    lo: int,
    hi: int,
    needles: list[bytes],
    t: Table,
    dfa: list[int],
    extra: dict[int, list[int]],
    left: dict[int, int] | None,
    spent: dict[int, int],
) -> list[tuple[int, int, list[int], int]]:
    """Every line of ``buf[lo:hi]`` the contract of ``Finder.hits`` reports, one line at a time in Python."""
    out: list[tuple[int, int, list[int], int]] = []
    dfa_set = set(dfa)
    ls, idx = lo, 0
    while ls < hi:
        le = buf.find(b"\n", ls, hi)
        le = hi if le < 0 else le
        line = buf[ls:le]
        inside = [j for j, nd in enumerate(needles) if b"\n" not in nd and nd in line]
        ids: set[int] = set()
        if inside:
            cand: set[int] = set(t.always) if ls in dfa_set else set()
            sure: set[int] = set()
            for j in inside:
                cand.update(t.may[j])
                cand.update(t.proves[j])
                sure.update(t.proves[j])
            checks = sorted(i for i in cand - sure if i not in spent)
            ids = set(sure)
            if len(checks) == 1:
                if _matches(t.rx[checks[0]], line):
                    ids.add(checks[0])
            elif checks:
                got = [t.searched[j] for j in t.set.Match(line)]
                ids = set(got) if got else sure | {i for i in checks if _matches(t.rx[i], line)}
            if left is not None:
                for i in sorted(ids):
                    if i in left:
                        left[i] -= 1
                        if left[i] == 0:
                            spent[i] = ls
        elif ls in dfa_set:
            ids = {i for i in t.always if i not in spent and _matches(t.rx[i], line)}
        ids |= set(extra.get(ls, ()))
        if ids:
            out.append((ls, le, sorted(ids), idx))
        idx += 1
        ls = le + 1
    return out


def _buffer(rnd: random.Random, needles: list[bytes]) -> bytes:
    parts = [b"abc", b"x1", b"loss", b"123", b"WARN", b" ", b"err", b"\r", b"y", b"ab", b"xx yy", b"7", b"\xff"]
    lines = []
    for _ in range(rnd.randrange(0, 120)):
        bits = [rnd.choice(parts + needles) for _ in range(rnd.randrange(0, 8))]
        if rnd.random() < 0.03:
            bits.append(b"z" * rnd.randrange(100, 3000))  # a long line
        lines.append(b"".join(bits))
    sep = b"\r\n" if rnd.random() < 0.3 else b"\n"
    data = sep.join(lines)
    if lines and rnd.random() < 0.7:
        data += sep  # else no final newline
    return data


def _line_starts(buf: bytes, lo: int, hi: int) -> list[int]:
    out, ls = [], lo
    while ls < hi:
        out.append(ls)
        le = buf.find(b"\n", ls, hi)
        if le < 0:
            break
        ls = le + 1
    return out


@pytest.mark.parametrize("seed", range(60))
def test_hits_equal_the_python_reference(seed: int) -> None:
    ls_mod = linescan()
    rnd = random.Random(seed)
    alphabet = [b"ab", b"WARN", b"err", b"loss", b"x", b"12", b"NCCL", b"y\r", b"abc", b"a\nb", b"7"]
    needles = sorted(set(rnd.sample(alphabet, rnd.randrange(1, 8))))
    k = rnd.choice([1, 5, 40, 70, 130])
    t = Table(rnd, needles, k)
    body = _buffer(rnd, needles)
    # a window cut out of a bigger buffer: nothing outside [lo, hi) may count
    pre, post = b"ab WARN x\n" * rnd.randrange(0, 3), b"err WARN\nab" * rnd.randrange(0, 2)
    buf = pre + body + post
    lo, hi = len(pre), len(pre) + len(body)
    starts = _line_starts(buf, lo, hi)
    dfa = sorted(rnd.sample(starts, rnd.randrange(0, len(starts) + 1) // 2)) if starts else []
    extra = {
        ls: sorted(rnd.sample(range(k), rnd.randrange(1, min(3, k + 1)))) for ls in rnd.sample(starts, len(starts) // 3)
    }
    capped = rnd.sample(range(k), min(k, rnd.randrange(0, 4)))
    left0 = {i: rnd.randrange(1, 6) for i in capped} or None
    for finder_kw in ({}, {"simd": False}):
        finder = ls_mod.Finder(needles, **finder_kw)
        t.install(finder)
        want_left = dict(left0) if left0 else None
        want_spent: dict[int, int] = {}
        want = reference(buf, lo, hi, needles, t, dfa, extra, want_left, want_spent)
        for page in (0, 1, 3):
            left = dict(left0) if left0 else None
            spent: dict[int, int] = {}
            got: list[tuple[int, int, list[int], int]] = []
            pos, newlines, calls = lo, 0, 0
            while pos < hi:
                hits, nl, pos = finder.hits(buf, pos, page, hi, newlines + 5, dfa, sorted(extra), extra, left, spent)
                got += [(a, b, ids, line - 5) for a, b, ids, line in hits]
                newlines += nl
                calls += 1
                assert calls <= len(starts) + 2
            assert got == want, (seed, finder_kw, page)
            assert newlines == buf.count(b"\n", lo, hi)
            assert (left, spent) == (want_left, want_spent)
            _check_bulk(finder, buf, lo, hi, k, page, (dfa, extra, left0), want, rnd)


def _check_bulk(
    finder: Any,
    buf: bytes,
    lo: int,
    hi: int,
    k: int,
    page: int,
    search: tuple[list[int], dict[int, list[int]], dict[int, int] | None],
    want: list[tuple[int, int, list[int], int]],
    rnd: random.Random,
) -> None:
    """With ``bulk``, the lines of one id alone (complete, after the first line, not too long) leave the hits for the
    bulk lists, decoded as the scan decodes a hit's line and numbered from ``no_base``; every other hit stays."""
    dfa, extra, left0 = search
    singles = [ids[0] for _ls, _le, ids, _line in want if len(ids) == 1]
    bid = rnd.choice(singles) if singles and rnd.random() < 0.8 else rnd.randrange(k)
    max_len, no_base = rnd.choice([4000, 40]), rnd.randrange(1, 1000)

    def bulk_line(h: tuple[int, int, list[int], int]) -> bool:
        ls, le, ids, _line = h
        return ids == [bid] and ls > lo and le < hi and le - ls <= max_len

    texts: list[str] = []
    nos: list[int] = []
    starts: list[int] = []
    left = dict(left0) if left0 else None
    spent: dict[int, int] = {}
    got: list[tuple[int, int, list[int], int]] = []
    pos, newlines = lo, 0
    while pos < hi:
        bulk = (bid, lo, max_len, no_base, texts, nos, starts)
        hits, nl, pos = finder.hits(buf, pos, page, hi, newlines, dfa, sorted(extra), extra, left, spent, bulk)
        got += hits
        newlines += nl
    assert got == [h for h in want if not bulk_line(h)]
    taken = [h for h in want if bulk_line(h)]
    assert starts == [h[0] for h in taken] and nos == [no_base + h[3] for h in taken]
    assert texts == [buf[h[0] : h[1]].decode("utf-8", "replace").rstrip("\r") for h in taken]


def test_hits_rejects_bad_arguments() -> None:
    ls_mod = linescan()
    finder = ls_mod.Finder([b"ab", b"cd"])
    with pytest.raises(RuntimeError):
        finder.hits(b"ab\n", 0, 0, 3, 0, [], [], {}, None, {})
    rx = _rx("ab")
    with pytest.raises(ValueError):
        finder.set_patterns(2, [(0,)], [()], (), [rx.Match, None], None, [0], _UNANCHORED)  # one item per needle
    with pytest.raises(ValueError):
        finder.set_patterns(2, [(0,), (2,)], [(), ()], (), [rx.Match, None], None, [0], _UNANCHORED)  # id 2 of 2
    finder.set_patterns(2, [(0,), (1,)], [(), (1,)], (), [rx.Match, None], None, [0, 1], _UNANCHORED)
    buf = b"ab\ncd\nzz\n"
    assert finder.hits(buf, 0, 0, len(buf), 0, [], [], {}, None, {}) == ([(0, 2, [0], 0), (3, 5, [1], 1)], 3, 9)
    with pytest.raises(KeyError):
        finder.hits(buf, 0, 0, len(buf), 0, [], [6], {}, None, {})  # a start of extra_starts not in extra
    with pytest.raises(ValueError):
        finder.hits(buf, 0, 0, len(buf), 0, [3, 0], [], {}, None, {})  # not ascending
    with pytest.raises(ValueError):
        finder.hits(buf, 0, 0, 99, 0, [], [], {}, None, {})
    with pytest.raises(ValueError):
        finder.hits(buf, 0, 0, len(buf), 0, [], [], {}, None, [])  # spent is not a dict
    for bad in ((1, 0, 99, 1, [], [], ()), (2, 0, 99, 1, [], [], []), [1, 0, 99, 1, [], [], []], (1, 0)):
        with pytest.raises((TypeError, ValueError)):  # a list that is no list, id 2 of 2, not a tuple, too short
            finder.hits(buf, 0, 0, len(buf), 0, [], [], {}, None, {}, bad)
    texts: list[str] = []
    nos: list[int] = []
    starts: list[int] = []
    got = finder.hits(buf, 0, 0, len(buf), 0, [], [], {}, None, {}, (1, 0, 99, 10, texts, nos, starts))
    assert got == ([(0, 2, [0], 0)], 3, 9) and (texts, nos, starts) == (["cd"], [11], [3])
    # a check that raises: the error comes through
    boom = [lambda *a: 1 / 0, None]
    finder.set_patterns(2, [(0,), (1,)], [(), (1,)], (), boom, None, [0, 1], _UNANCHORED)
    with pytest.raises(ZeroDivisionError):
        finder.hits(buf, 0, 0, len(buf), 0, [], [], {}, None, {})


@pytest.mark.parametrize("seed", range(4))
def test_a_fallback_pattern_next_to_native_ones_equals_the_pure_python_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A pattern RE2 cannot run (a back-reference) goes to ``regex``; its lines are merged into the finder's in
    Python, with the DFA and dense-sample lines the finder already merged: every field and sink call equals the
    scan without the extension."""
    linescan()
    from test_native_scan import _check_file, assert_same_scans

    rnd = random.Random(seed)
    root = tmp_path / "logs"
    root.mkdir()
    for f, kind in enumerate(["plain", "crlf", "no final newline"]):
        data = _check_file(rnd, kind)
        data = data.replace(b"lhotse", b"lhotse lhotse", 7)  # lines the back-reference matches
        (root / f"node-{f}.log").write_bytes(data)
    patterns = (
        "NCCL WARN",
        r"(\w+) \1",  # fallback (regex module)
        r"^\d+:",  # DFA
        r"[0-9]{2} errors",
        "lhotse|Lhotse",
        r"step \d+|loss=nan",  # dense
    )
    caps = (rnd.choice([None, 2]), rnd.choice([None, 3]), None, 3, rnd.choice([None, 4]), None)
    spec = PatternSpec(patterns, max_hits=caps, dense=tuple(p.startswith("step") for p in patterns))
    monkeypatch.setattr(scan_windows, "WINDOW", rnd.choice([500, 4000, 1 << 20]))
    monkeypatch.setattr(scan_file, "CAPPED_PIECE_BYTES", rnd.choice([150, 2000]))
    monkeypatch.setattr(scan_file, "DENSE_HEAD_HITS", rnd.choice([3, 64]))
    monkeypatch.setattr(scan_dense, "DENSE_STRIDE", rnd.choice([100, 3000]))
    assert assert_same_scans(root, monkeypatch, spec, sample=None) > 0


@pytest.mark.parametrize("seed", range(30))
def test_sample_with_checks_equals_checking_its_walk_in_python(seed: int) -> None:
    """``Finder.sample`` with a check: each piece's proposed lines checked natively (a sure literal in the line, else
    the regex) up to the first that fails, equal to checking the plain walk's lines in Python."""
    ls_mod = linescan()
    rnd = random.Random(seed)
    needles = sorted(set(rnd.sample([b"ab", b"WARN", b"err", b"loss", b"x", b"12", b"7"], rnd.randrange(1, 4))))
    body = _buffer(rnd, needles)
    pre = b"ab 7\n" * rnd.randrange(0, 3)
    buf = pre + body + b"x ab"
    lo, hi = len(pre), len(pre) + len(body)
    cuts = sorted(rnd.sample(range(lo, hi + 1), min(hi + 1 - lo, rnd.randrange(0, 4))))
    bounds = list(zip([lo, *cuts], [*cuts, hi], strict=True))
    rx = _rx(rnd.choice([r"\d", "ab|WARN", "loss$", "x.*7", "^e"]))
    sure = rnd.choice([(), (b"ab",), (b"WARN", b"7"), (b"",)])
    stride = rnd.choice([1, 40, 400])
    finder = ls_mod.Finder(needles)
    want = []
    for chain in finder.sample(buf, bounds, stride):
        starts, failed = [], -1
        for a, b in chain:
            line = buf[a:b]
            if any(lit in line for lit in sure) or _matches(rx, line):
                starts.append(a)
                continue
            failed = b
            break
        want.append((starts, failed))
    assert finder.sample(buf, bounds, stride, -1, sure, rx.Match, _UNANCHORED) == want
    assert finder.sample(buf, bounds, stride, -1, None, rx.Match, _UNANCHORED) == [
        (s, f) for s, f in _checked(finder.sample(buf, bounds, stride), buf, rx)
    ]
    with pytest.raises(ValueError):
        finder.sample(buf, bounds, stride, 0, sure, rx.Match, _UNANCHORED)  # base and a check
    with pytest.raises(TypeError):
        finder.sample(buf, bounds, stride, -1, ["ab"], rx.Match, _UNANCHORED)  # str, not bytes


def _checked(chains: list[list[tuple[int, int]]], buf: bytes, rx: Any) -> list[tuple[list[int], int]]:
    out = []
    for chain in chains:
        starts, failed = [], -1
        for a, b in chain:
            if not _matches(rx, buf[a:b]):
                failed = b
                break
            starts.append(a)
        out.append((starts, failed))
    return out


def test_hits_and_checked_samples_do_not_leak() -> None:
    """Many finders with pattern tables, pages of hits with DFA and extra lines and caps, checked samples: the
    resident set stays put, and the objects passed in keep their reference counts."""
    import resource
    import sys

    ls_mod = linescan()
    rnd = random.Random(3)
    dense = b"ab x 7\nzz\n" * (1 << 13)
    starts = _line_starts(dense, 0, len(dense))
    extra = {ls: [1] for ls in starts[::7]}
    extra_starts = sorted(extra)
    dfa = starts[::5]
    rx, rx2 = _rx("x"), _rx("zz")
    sure = (b"ab",)

    def churn(rounds: int) -> None:
        for _ in range(rounds):
            needles = [b"ab", b"zz", *(bytes(rnd.randrange(97, 123) for _ in range(3)) for _ in range(20))]
            f = ls_mod.Finder(needles)
            t = Table(rnd, needles, 70)
            t.install(f)
            left: dict[int, int] | None = {0: 5, 1: 3}
            pos, spent = 0, {}
            while pos < len(dense):
                _hits, _nl, pos = f.hits(dense, pos, 1 << 12, len(dense), 0, dfa, extra_starts, extra, left, spent)
            f.sample(dense, [(0, len(dense) // 2), (len(dense) // 2, len(dense))], 64, -1, sure, rx2.Match, _UNANCHORED)

    churn(3)
    refs = [sys.getrefcount(o) for o in (extra[starts[0]], sure, dfa, extra_starts)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    churn(40)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert [sys.getrefcount(o) for o in (extra[starts[0]], sure, dfa, extra_starts)] == refs
    assert grown_kb < 8 << 10, f"peak RSS grew by {grown_kb} KB over 40 rounds"
    del rx


@pytest.mark.parametrize("seed", range(30))
def test_literal_dfa_searches_find_the_dfa_lines(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DFA search of a pattern that is only plain literals (a frequent marker such as ``lhotse|Lhotse``) is done by a
    native finder of its literals: the same line starts as RE2's DFA, with the same early stop once the capped
    patterns have their lines (also when the part searched starts or ends inside a line, CRLF, no final newline)."""
    linescan()
    monkeypatch.delenv("DEBUG_TRAINING_LOGS_NO_NATIVE", raising=False)  # (the finders are what is compared)
    rnd = random.Random(seed)
    patterns = ("lhotse|Lhotse", "AIStore|aistore|ais://", r"\d+ errors", "lhotse|Lhotse")
    spec = PatternSpec(patterns)
    plan = scan_types.Plan(dfa=(0, 1, 2, 3))
    m = scan_matcher._Matcher(spec, plan, frozenset(range(len(patterns))))
    assert [f is not None for f in m.dfa_finders] == [True, True, False]  # (the repeated pattern is searched once)
    words = [b"lhotse", b"Lhotse", b"LHOTSE", b"aistore", b"ais:/", b"ais://x", b"7 errors", b"x", b" ", b"\r", b"\xff"]
    lines = [b"".join(rnd.choice(words) for _ in range(rnd.randrange(0, 6))) for _ in range(rnd.randrange(0, 200))]
    buf = (b"\r\n" if seed % 3 == 0 else b"\n").join(lines) + (b"\n" if seed % 2 else b"")
    lo, n = sorted(rnd.randrange(len(buf) + 1) for _ in range(2))
    for left in (None, {0: rnd.randrange(1, 5), 3: rnd.randrange(1, 5)}, {1: 1}, {0: 2, 1: 2, 3: 1}):
        fast = scan_matcher._dfa_starts(buf, m, lo, n, dict(left) if left else None)
        finders, m.dfa_finders = m.dfa_finders, [None] * len(m.dfas)
        try:
            assert fast == scan_matcher._dfa_starts(buf, m, lo, n, dict(left) if left else None), (seed, left)
        finally:
            m.dfa_finders = finders
