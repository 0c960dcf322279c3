"""The native one-pass line finder (``debug_training_logs.logs._linescan``) and the scan that uses it.

* The finder against a plain Python reference (a loop over lines with ``in``): a matrix of needle and buffer shapes,
  a hypothesis fuzz over bytes that matter (newlines, CR, NUL, high bytes, needles at the edges, windows cut out of a
  larger buffer so a read past either edge would show), paging, every choice of anchors, bad arguments, memory.
* The whole scan with and without the finder (``DEBUG_TRAINING_LOGS_NO_NATIVE=1``: ``ahocorasick_rs`` passes) on
  fixture jobs plain, .gz and .zst, wrapped, with ``\\r`` progress bars and tiny windows: identical FileScans and
  identical sink calls, every one of them.
* The extension is built where a C compiler is (so CI tests the fast path), and an install without one still works.
"""

from __future__ import annotations

import functools
import gzip
import importlib
import itertools
import mmap
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debug_training_logs.analysis.inventory_markers import MARKERS
from debug_training_logs.analysis.shared_scan import standard_consumers
from debug_training_logs.logs import (
    scan_dense,
    scan_engines,
    scan_file,
    scan_matcher,
    scan_patterns,
    scan_plan,
    scan_windows,
)
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.scan import scan_files
from debug_training_logs.logs.scan_types import FileScan, PatternSpec, SinkFactory
from fixtures.failure_scenarios import write_variant

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
NO_NATIVE = "DEBUG_TRAINING_LOGS_NO_NATIVE"


def _compiler() -> str | None:
    """Why the extension cannot be built here, or None when it can (a C compiler and Python's headers)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on this machine"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python.h (python3-dev) on this machine"
    return None


def linescan() -> Any:
    """The native finder module, or the test skipped where it is not built (the other native tests use this too)."""
    try:
        return importlib.import_module("debug_training_logs.logs._linescan")
    except ImportError:
        pytest.skip(f"the native finder is not built ({_compiler() or 'run pip install -e .'})")


# --------------------------------------------------------------------------------------------------------------------
# The finder against a reference


def reference(buf: bytes, needles: list[bytes], start: int = 0) -> tuple[list[tuple[int, int, int]], int]:
    """(line start, line end, newlines before it since ``start``) of every line of ``buf[start:]`` holding a needle,
    and the newlines in ``buf[start:]``: one line at a time, with ``in``."""
    out: list[tuple[int, int, int]] = []
    n = len(buf)
    ls = start
    idx = 0
    while ls < n:
        le = buf.find(b"\n", ls)
        le = n if le < 0 else le
        line = buf[ls:le]
        if any(nd in line for nd in needles):
            out.append((ls, le, idx))
        idx += 1
        ls = le + 1
    return out, buf.count(b"\n", start)


def found(mod: Any, buf: Any, needles: list[bytes], anchors: list[int] | None = None, page: int = 0) -> Any:
    """The finder's answer in the reference's shape (paged by ``page`` lines), checking each reported needle."""
    f = mod.Finder(needles, anchors)
    data = bytes(buf)
    out: list[tuple[int, int, int]] = []
    pos = 0
    lines_before = 0
    total = 0
    while True:
        hits, nl, stop = f.find_lines(buf, pos, page)
        assert pos <= stop <= len(data)
        for ls, le, rel, which in hits:
            assert needles[which] in data[ls:le], (data[ls:le], needles[which])
            out.append((ls, le, lines_before + rel))
        assert nl == data.count(b"\n", pos, stop)
        lines_before += nl
        total += nl
        if page <= 0 or stop >= len(data) or len(hits) < page:
            assert stop == len(data)
            break
        assert len(hits) == page
        pos = stop
    return out, total


NEEDLE_SETS: dict[str, list[bytes]] = {
    "one byte": [b"x"],
    "pairs and singles": [b"ab", b"c", b"\xff", b"\x00"],
    "overlapping": [b"abc", b"bcd", b"ab", b"cdab", b"abcabc"],
    "same anchor pair": [b"xab", b"yab", b"abz", b"ab"],
    "high bytes and NUL": [b"\xc3\xa9t\xc3\xa9", b"\x00\x00", b"a\x00b", b"\xff\xfe"],
    "CR inside": [b"\rab", b"b\r"],
    "newline needles never match": [b"a\nb", b"\n", b"zz"],
    "long": [b"Watchdog caught collective operation timeout" * 3, b"NCCL"],
    "the diagnose set": [b"NCCL WARN", b"Traceback (most recent call last)", b"==", b"nan", b"Xid", b"]:["],
}

BUFFERS: dict[str, bytes] = {
    "empty": b"",
    "one newline": b"\n",
    "no trailing newline": b"zz ab\nno\nc",
    "needle at start and end": b"abc\n\n\nbcd",
    "CRLF": b"ab\r\nx\r\n\r\nNCCL WARN\r\n",
    "blank lines": b"\n\n\nab\n\n",
    "NUL and high bytes": b"\x00\x00 a\x00b\n\xc3\xa9t\xc3\xa9\n\xff\xfe\xff\n",
    "one byte before 0xff": b"zc\xff\nqx\xff\n\x00\xff",
    "every line": b"x\n" * 1000,
    "one long line": b"q" * 300_000 + b"cdab" + b"q" * 300_000,
    "progress bar": b"".join(b"\r%d%%|####  | %d/100 [00:0%d<00:00]" % (i, i, i % 10) for i in range(100)) + b"\rnan\n",
    "diagnose-like": (
        b"[rank3]:[E0521 08:02:12 ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout\n"
        b"Epoch 0: step 17 loss: nan\nTraceback (most recent call last)\n== done ==\nXid 79\n"
    )
    * 50,
}


@pytest.mark.parametrize("needles_name", list(NEEDLE_SETS))
@pytest.mark.parametrize("buf_name", list(BUFFERS))
def test_finder_matrix(needles_name: str, buf_name: str) -> None:
    mod = linescan()
    needles, buf = NEEDLE_SETS[needles_name], BUFFERS[buf_name]
    want = reference(buf, needles)
    assert found(mod, buf, needles) == want
    assert found(mod, buf, needles, mod.choose_anchors(buf, needles)) == want
    assert found(mod, buf, needles, page=3) == want
    # every anchor every needle could have
    for k in range(max(len(nd) for nd in needles) - 1):
        anchors = [min(k, max(0, len(nd) - 2)) for nd in needles]
        assert found(mod, buf, needles, anchors) == want


@pytest.mark.parametrize("needles_name", list(NEEDLE_SETS))
def test_a_copied_finder_finds_what_the_original_does(needles_name: str) -> None:
    """``Finder.copy`` (a matcher whose needles another one has): the same filter and the same lines and needles in
    every buffer, from tables of its own (they outlive the original), with no patterns set."""
    mod = linescan()
    needles = NEEDLE_SETS[needles_name]
    profile = mod.pair_profile(b"".join(BUFFERS.values()))
    f = mod.Finder(needles, mod.choose_anchors(BUFFERS["diagnose-like"], needles), profile=profile)
    c = f.copy()
    assert c.simd_filter() == f.simd_filter() and c.needle_count() == f.needle_count()
    answers = {
        name: (f.find_lines(buf, 0, 0, len(buf), True), f.find_lines(buf, 0, 2)) for name, buf in BUFFERS.items()
    }
    del f
    for name, buf in BUFFERS.items():
        assert (c.find_lines(buf, 0, 0, len(buf), True), c.find_lines(buf, 0, 2)) == answers[name], name
    with pytest.raises(RuntimeError, match="set_patterns"):
        c.hits(b"ab\n", 0, 10, 3, 0, [], [], {}, None, {})


def test_the_answer_is_for_the_window_only() -> None:
    """A window cut out of a bigger buffer: needles across either edge, or before ``start``, are not in it."""
    mod = linescan()
    big = b"xa" + b"b\nqq\nyz" + b"zy"
    window = memoryview(big)[2:-2]
    f = mod.Finder([b"ab", b"zz", b"\nq"])
    assert f.find_lines(window) == ([], 2, len(window))
    assert f.find_lines(b"ab\nab", 1) == ([(3, 5, 1, 0)], 1, 5)
    assert f.find_lines(b"ab", 2) == ([], 0, 2)
    assert mod.Finder([b"xab"], [1]).find_lines(b"xab", 1) == ([], 0, 3)  # begins before start


def test_a_100_mb_line() -> None:
    mod = linescan()
    buf = b"a" * (100 << 20) + b"NCCL WARN" + b"a" * 1000 + b"\nnext\n"
    f = mod.Finder([b"NCCL WARN", b"next", b"zz"], mod.choose_anchors(b"", [b"NCCL WARN", b"next", b"zz"]))
    hits, nl, stop = f.find_lines(buf)
    assert [(ls, le, rel) for ls, le, rel, _w in hits] == [(0, len(buf) - 6, 0), (len(buf) - 5, len(buf) - 1, 1)]
    assert (nl, stop) == (2, len(buf))


def test_every_buffer_kind_is_read(tmp_path: Path) -> None:
    mod = linescan()
    data = b"one\ntwo ab\nthree\n"
    f = mod.Finder([b"ab"])
    want = ([(4, 10, 1, 0)], 3, len(data))
    assert f.find_lines(data) == want
    assert f.find_lines(bytearray(data)) == want
    assert f.find_lines(memoryview(data)) == want
    (tmp_path / "f").write_bytes(data)
    with open(tmp_path / "f", "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert f.find_lines(mm) == want
    with pytest.raises(TypeError):
        f.find_lines("text, not bytes")


def test_bad_arguments_are_errors_not_crashes() -> None:
    mod = linescan()
    with pytest.raises(ValueError, match="empty needle"):
        mod.Finder([b"a", b""])
    with pytest.raises(TypeError):
        mod.Finder(["text"])
    with pytest.raises(ValueError, match="anchor"):
        mod.Finder([b"abc"], [2])
    with pytest.raises(ValueError, match="one entry per needle"):
        mod.Finder([b"abc"], [0, 0])
    with pytest.raises(ValueError, match="outside"):
        mod.Finder([b"a"]).find_lines(b"abc", 4)
    with pytest.raises(ValueError, match="outside"):
        mod.Finder([b"a"]).find_lines(b"abc", -1)
    with pytest.raises(ValueError, match="ascend"):
        mod.line_indexes(b"a\nb\n", [3, 1])
    with pytest.raises(ValueError, match="ascend"):
        mod.line_indexes(b"a\nb\n", [5])
    assert mod.Finder([]).find_lines(b"a\nb") == ([], 1, 3)


def test_line_indexes_count_newlines_before_each_position() -> None:
    mod = linescan()
    buf = (b"a\n" * 40 + b"\r\n" * 7 + b"x" * 100 + b"\n") * 3
    positions = sorted({0, 1, 2, 50, 99, 100, 183, 184, len(buf) - 1, len(buf)} | set(range(0, len(buf), 37)))
    assert mod.line_indexes(buf, positions) == [buf.count(b"\n", 0, p) for p in positions]
    assert mod.line_indexes(b"", [0, 0]) == [0, 0]


def test_choose_anchors_picks_the_rarest_pair() -> None:
    mod = linescan()
    sample = b"the the the eX eX Xq qt qt"
    # theXq: th 3, he 3, eX 2, Xq 1 (times seen); Xqth: Xq 1, qt 2, th 3
    assert mod.choose_anchors(sample, [b"theXq", b"x", b"Xqth"]) == [3, 0, 0]
    assert mod.choose_anchors(b"", [b"ab"]) == [0]
    with pytest.raises(TypeError, match="every needle must be bytes"):
        mod.choose_anchors(b"ab", [b"ab", "ab"])


ALPHABET = st.sampled_from([b"a", b"b", b"c", b"\n", b"\r", b"\x00", b"\xff", b"\xc3", b" "])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    needles=st.lists(st.lists(ALPHABET, min_size=1, max_size=6).map(b"".join), min_size=0, max_size=12),
    body=st.lists(ALPHABET, max_size=400).map(b"".join),
    edges=st.tuples(st.lists(ALPHABET, max_size=4).map(b"".join), st.lists(ALPHABET, max_size=4).map(b"".join)),
    seed=st.integers(0, 2**32 - 1),
    page=st.sampled_from([0, 1, 2, 5]),
)
def test_finder_fuzz(needles: list[bytes], body: bytes, edges: tuple[bytes, bytes], seed: int, page: int) -> None:
    mod = linescan()
    rnd = random.Random(seed)
    anchors = [rnd.randrange(max(1, len(nd) - 1)) for nd in needles] if rnd.random() < 0.5 else None
    big = edges[0] + body + edges[1]
    window = memoryview(big)[len(edges[0]) : len(edges[0]) + len(body)]
    assert found(mod, window, needles, anchors, page) == reference(body, needles)
    if body:
        start = body.find(b"\n", rnd.randrange(len(body))) + 1  # a line start, as the scan pages
        want, nl = reference(body, needles, start)
        hits, got_nl, stop = mod.Finder(needles, anchors).find_lines(window, start)
        assert [(ls, le, rel) for ls, le, rel, _w in hits] == want
        assert (got_nl, stop) == (nl, len(body))
    positions = sorted(rnd.randrange(len(body) + 1) for _ in range(5))
    assert mod.line_indexes(window, positions) == [body.count(b"\n", 0, p) for p in positions]
    # a span [lo, hi) of the buffer is searched as if it were the whole buffer: offsets into the buffer, line indexes
    # and newlines from lo, nothing read outside it
    lo, hi = sorted(rnd.randrange(len(big) + 1) for _ in range(2))
    want, nl = reference(big[lo:hi], needles)
    f = mod.Finder(needles, anchors)
    hits, got_nl, stop = f.find_lines(big, lo, 0, hi)
    assert [(ls - lo, le - lo, rel) for ls, le, rel, _w in hits] == want
    assert (got_nl, stop) == (nl, hi)
    paged: list[tuple[int, int, int]] = []
    pos, before = lo, 0
    while pos < hi:  # paged one line at a time, as the dense sample asks
        hits, got_nl, pos = f.find_lines(big, pos, 1, hi)
        paged += [(ls - lo, le - lo, before + rel) for ls, le, rel, _w in hits]
        before += got_nl
        assert lo <= pos <= hi
    assert paged == want and before == nl
    at = sorted(rnd.randrange(lo, hi + 1) for _ in range(5))
    assert mod.line_indexes(big, at, lo) == [big.count(b"\n", lo, p) for p in at]
    # backwards: a needle of the line holding the last needle inside [lo, hi)
    lo, hi = sorted(rnd.randrange(len(body) + 1) for _ in range(2))
    last = max((body.rfind(nd, lo, hi) for nd in needles if b"\n" not in nd), default=-1)
    got = mod.Finder(needles, anchors).rfind(window, lo, hi)
    if last < 0:
        assert got == -1
    else:
        assert lo <= got <= last and b"\n" not in body[got:last]
        assert any(body.startswith(nd, got) and got + len(nd) <= hi for nd in needles)


RANK_TAG = re.compile(rb"\[rank(\d+)\](?::| )")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(
        st.sampled_from(
            [b"[", b"[rank", b"rank", b"]", b":", b" ", b"0", b"7", b"12", b"\n", b"\r", b"x", b"[r", b"\xff"]
        ),
        max_size=60,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_collect_ranks_fuzz(parts: list[bytes], seed: int) -> None:
    """``collect_ranks`` adds what ``re.findall`` of the ``[rankN]:`` prefix finds, in any span of any buffer kind,
    and only reports the strings that were new."""
    mod = linescan()
    rnd = random.Random(seed)
    buf = b"".join(parts)
    lo, hi = sorted(rnd.randrange(len(buf) + 1) for _ in range(2))
    want = {d.decode() for d in RANK_TAG.findall(buf[lo:hi])}
    seen = {"7"} if rnd.random() < 0.5 else set()
    before = set(seen)
    for kind in (bytes, bytearray, memoryview):
        got = set(before)
        assert mod.collect_ranks(kind(buf), got, lo, hi) == len(want - before)
        assert got == before | want
    whole: set[str] = set()
    mod.collect_ranks(buf, whole)
    assert whole == {d.decode() for d in RANK_TAG.findall(buf)}
    # the Python path of the scan agrees
    py: set[str] = set()
    scan_dense._collect_ranks_regex(buf[lo:hi], py)
    assert py == want


def test_collect_ranks_many_ranks_and_long_numbers() -> None:
    """More distinct ranks than the call's small table holds, digit strings longer than it keeps, leading zeros."""
    mod = linescan()
    buf = b"".join(b"[rank%d]: x\n" % r for r in range(5000)) + b"[rank007] y\n[rank" + b"9" * 40 + b"]: z\n"
    seen: set[str] = set()
    assert mod.collect_ranks(buf, seen) == 5002
    assert seen == {str(r) for r in range(5000)} | {"007", "9" * 40}
    assert mod.collect_ranks(buf * 2, seen) == 0
    with pytest.raises(TypeError):
        mod.collect_ranks(buf, ["not a set"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    needles=st.lists(st.lists(ALPHABET, min_size=1, max_size=4).map(b"".join), max_size=10),
    body=st.lists(ALPHABET, max_size=300).map(b"".join),
)
def test_count_literals_equals_bytes_count(needles: list[bytes], body: bytes) -> None:
    """One pass counts each needle's non-overlapping occurrences exactly as ``bytes.count`` does (``aaa`` in
    ``aaaaa`` once, duplicates and needles sharing a first pair each counted on their own)."""
    mod = linescan()
    assert mod.count_literals(body, needles) == [body.count(nd) for nd in needles]
    assert mod.count_literals(b"aaaaa", [b"aaa", b"aa", b"a", b"aa"]) == [1, 2, 5, 2]
    with pytest.raises(TypeError):
        mod.count_literals(body, [b""])


def test_no_leak_and_bounded_memory() -> None:
    """Thousands of finders and pages of dense hits: the resident set stays put (peak RSS, KB on Linux)."""
    mod = linescan()
    rnd = random.Random(5)
    dense = b"x\n" * (1 << 16)  # a window where every line matches (paged: at most 2**14 lines a call)

    def churn(rounds: int) -> None:
        for _ in range(rounds):
            needles = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 6))) for _ in range(rnd.randrange(50))]
            f = mod.Finder([*needles, b"x"], None)
            pos = 0
            while pos < len(dense):
                hits, _nl, pos = f.find_lines(dense, pos, 1 << 14)
                assert len(hits) <= 1 << 14
            mod.choose_anchors(dense[:4096], needles)
            mod.line_indexes(dense, [0, 10, 1 << 16])

    churn(10)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    churn(150)  # a leaked page of hits would be ~2.5 MB a round, a leaked finder ~200 KB
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 8 << 10, f"peak RSS grew by {grown_kb} KB over 150 rounds"


# --------------------------------------------------------------------------------------------------------------------
# The whole scan, with and without the finder


class Record:
    """Every sink call of one file, as made."""

    def __init__(self, lf: object) -> None:
        self.calls: list[tuple[list[int], int, str]] = []

    def on_hit(self, ids: list[int], n: int, line: str) -> None:
        self.calls.append((list(ids), n, line))

    def finish(self) -> list[tuple[list[int], int, str]]:
        return self.calls


class BulkRecord(Record):
    """:class:`Record` taking the lines of pattern ``bulk`` in bulk (where the finder hands them over so), each
    recorded as the per-line call it stands for, with how many came in bulk (the last item)."""

    def __init__(self, lf: object, bulk: int) -> None:
        super().__init__(lf)
        self.bulk = bulk
        self.taken = 0

    def bulk_id(self) -> int:
        return self.bulk

    def on_bulk(self, line_nos: list[int], lines: list[str]) -> None:
        assert len(line_nos) == len(lines) > 0
        self.calls += [([self.bulk], n, line) for n, line in zip(line_nos, lines, strict=True)]
        self.taken += len(lines)

    def finish(self) -> list[tuple[list[int], int, str]]:
        BULK_TAKEN.append(self.taken)
        return self.calls


BULK_TAKEN: list[int] = []
"""Lines each :class:`BulkRecord` took in bulk (a test's proof that the bulk path ran)."""


def job_spec() -> PatternSpec:
    """Every tool's patterns plus the inventory markers, as the shared job scan (``scan_consumers``) builds them."""
    pats: list[str] = []
    dense: list[bool] = []
    for c in standard_consumers():
        assert not c.ignore_case
        dense += [i in c.dense for i in range(len(c.patterns))]
        pats += c.patterns
    return PatternSpec(
        tuple(pats) + tuple(m.regex for m in MARKERS),
        False,
        max_hits=(None,) * len(pats) + tuple(m.cap for m in MARKERS),
        dense=tuple(dense) + tuple(m.dense for m in MARKERS),
    )


def _run(
    root: Path,
    spec: PatternSpec,
    native: bool,
    monkeypatch: pytest.MonkeyPatch,
    sample: bytes | None = None,
    sink: SinkFactory = Record,
) -> list[FileScan]:
    if native:
        monkeypatch.delenv(NO_NATIVE, raising=False)
        assert scan_engines._native() is not None
    else:
        monkeypatch.setenv(NO_NATIVE, "1")
    scan_matcher._MATCHERS.clear()
    files, _ = discover(root)
    plan = scan_plan.make_plan(spec, scan_plan._sample(files) if sample is None else sample)
    assert ("native" in plan.describe()) == (native and bool(plan.literals))
    return scan_files(files, spec, sink, head_lines=40, tail_lines=40, plan=plan)


def assert_same_scans(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: PatternSpec | None = None,
    sample: bytes | None = None,
    sink: SinkFactory = Record,
) -> int:
    """The scan of ``root`` with the finder equals the scan without, field by field and call by call; returns the
    number of sink calls compared. ``sample``: plan from it instead of the files (b"": every literal is kept).
    ``sink``: the recording sink (:class:`BulkRecord`: with lines taken in bulk where the finder can)."""
    linescan()
    spec = spec or job_spec()
    fast = _run(root, spec, True, monkeypatch, sample, sink)
    slow = _run(root, spec, False, monkeypatch, sample, sink)
    monkeypatch.delenv(NO_NATIVE, raising=False)
    assert [r.file.rel for r in fast] == [r.file.rel for r in slow]
    calls = 0
    for a, b in zip(fast, slow, strict=True):
        for name in ("lines", "bytes_read", "counts", "ranks", "head", "tail", "problem", "sampled"):
            assert getattr(a, name) == getattr(b, name), (a.file.rel, name)
        assert a.sink_result == b.sink_result, a.file.rel
        calls += len(a.sink_result)
    return calls


def _compress(root: Path, how: str) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if how == "gz":
                (p.parent / (p.name + ".gz")).write_bytes(gzip.compress(data))
            else:
                (p.parent / (p.name + ".zst")).write_bytes(zstandard.ZstdCompressor().compress(data))
            p.unlink()


FIXTURE_JOBS = sorted(
    str(p.relative_to(FIXTURES))
    for p in [*FIXTURES.glob("*/logs"), *FIXTURES.glob("real_torch/*")]
    if p.is_dir() and any(p.iterdir())
)


@pytest.mark.parametrize("compression", ["plain", "gz", "zst"])
def test_scan_is_identical_on_every_fixture_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    assert len(FIXTURE_JOBS) >= 20
    calls = 0
    for job in FIXTURE_JOBS:
        root = tmp_path / job.replace("/", "_")
        shutil.copytree(FIXTURES / job, root)
        if compression != "plain":
            _compress(root, compression)
        calls += assert_same_scans(root, monkeypatch)
    assert calls > 1000  # the comparison saw real hits


@pytest.mark.parametrize(
    "variant",
    [
        {"compress": True, "ansi": True, "wrap_rank": 2},
        {"torch": "2.1", "launcher": "srun"},
        {"torch": "2.4", "launcher": "ray", "ansi": True},
        {"torch": "2.14", "per_rank_files": True, "compress": True},
    ],
    ids=["wrapped-ansi-gz", "srun-label", "ray-ansi", "per-rank-gz"],
)
@pytest.mark.parametrize("scenario", ["loader_stall", "fabric_hang", "cuda_oom"])
def test_scan_is_identical_on_presentation_variants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: str, variant: dict[str, Any]
) -> None:
    write_variant(scenario, tmp_path, variant)  # type: ignore[arg-type]
    assert assert_same_scans(tmp_path / "logs", monkeypatch) > 0


def test_scan_is_identical_with_progress_bars_and_tiny_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``\\r`` progress bars longer than a window (cut after a ``\\r``), lines cut across windows, dense pieces."""
    rnd = random.Random(11)
    root = tmp_path / "logs"
    root.mkdir()
    lines = [
        "[rank{r}]:[E0521 08:02:12.1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
        "milliseconds before timing out.",
        "[rank{r}]: Epoch 0: 100%|##########| 10/10 [00:01<00:00, train_step_timing in s=0.5, loss=nan]",
        "[rank{r}]: Traceback (most recent call last):",
        "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[rank{r}]: an ordinary line with nothing in it",
        "[rank{r}]: NCCL INFO comm 0x1 rank {r} nranks 8 cudaDev 0 - Init COMPLETE",
    ]
    for f in range(3):
        out: list[str] = []
        for i in range(3000):
            r = rnd.randrange(8)
            if i % 700 == 5:
                bar = "".join(f"\rEpoch 0: {k}%|#| {k}/100 [00:0{k % 10}<00:00, loss=0.{k}]" for k in range(400))
                out.append(f"[rank{r}]: " + bar + "\rRuntimeError: CUDA error: an illegal memory access")
            else:
                out.append(rnd.choice(lines).format(r=r))
        text = "\r\n".join(out) if f == 1 else "\n".join(out) + ("\n" if f == 0 else "")
        (root / f"node-{f}.log").write_text(text)
    assert assert_same_scans(root, monkeypatch) > 0
    monkeypatch.setattr(scan_windows, "WINDOW", 3000)
    monkeypatch.setattr(scan_file, "CAPPED_PIECE_BYTES", 1000)
    monkeypatch.setattr("debug_training_logs.logs.reader.CHUNK", 8000)
    monkeypatch.setattr(scan_windows, "CHUNK", 8000)
    assert assert_same_scans(root, monkeypatch) > 0
    _compress(root, "gz")
    assert assert_same_scans(root, monkeypatch) > 0


def test_a_window_where_every_line_is_a_candidate_is_paged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line holds a literal: the finder's answer comes in pages of ``NATIVE_PAGE_LINES`` and the scan is the
    same as without the finder."""
    root = tmp_path / "logs"
    root.mkdir()
    body = "".join(f"[rank{i % 4}]: NCCL WARN net {i}\n" if i % 3 else f"Traceback {i}\n" for i in range(5000))
    (root / "node.log").write_text(body)
    spec = PatternSpec(("NCCL WARN", "Traceback", r"net \d+7$"))
    monkeypatch.setattr(scan_matcher, "NATIVE_PAGE_LINES", 7)
    assert scan_plan.make_plan(spec, b"").literals  # no sample: the literals stay in the prefilter, not the DFA
    assert assert_same_scans(root, monkeypatch, spec, sample=b"") == 5000
    monkeypatch.setattr(scan_windows, "WINDOW", 1000)
    assert assert_same_scans(root, monkeypatch, spec, sample=b"") == 5000


@pytest.mark.parametrize("seed", range(12))
def test_dense_sample_and_tail_are_identical(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """``_Dense.sample`` (forward, one line per stride) and ``tail_start`` (backwards from the end) find the same lines
    with the finder as with ``bytes.find``/``rfind`` per needle, whatever the stride lands on."""
    linescan()
    rnd = random.Random(seed)
    spec = PatternSpec((r"step \d+ loss", r"Epoch \d+|global_step=\d+", r"memory \(MB\)"), dense=(True, True, True))
    plan = scan_plan.make_plan(spec, b"")
    assert all(nds for _i, nds in plan.dense)
    words = [b"step 3 loss", b"step x loss", b"Epoch 7", b"Epoch", b"global_step=9", b"memory (MB) 5", b"plain", b"ste"]
    lines = []
    for _ in range(rnd.randrange(1, 4000)):
        r = rnd.randrange(8)
        lines.append(b"[rank%d]: " % r + b" ".join(rnd.choice(words) for _ in range(rnd.randrange(0, 4))))
    buf = b"\n".join(lines) + (b"\n" if rnd.random() < 0.5 else b"")
    ranks = {str(r) for r in range(8)}
    monkeypatch.setattr(scan_dense, "DENSE_STRIDE", rnd.choice([64, 500, 4096]))
    ids = frozenset(rnd.sample(range(3), rnd.randrange(1, 4)))
    start = rnd.randrange(len(buf) + 1)
    limit = rnd.randrange(1, len(buf) + 2)
    answers = []
    for native in (True, False):
        if native:
            monkeypatch.delenv(NO_NATIVE, raising=False)
        else:
            monkeypatch.setenv(NO_NATIVE, "1")
        dense = scan_dense._Dense(spec, plan)
        assert (dense.tail_finder is not None) == native
        answers.append(
            (
                dense.sample(buf, ids),
                dense.sample(buf[start:], ids),
                dense.tail_start(buf, ranks, len(buf)),
                dense.tail_start(buf, ranks, limit),
                dense.tail_start(buf, set(), 1 << 20),
            )
        )
    assert answers[0] == answers[1]
    assert answers[0][0]  # the sample found lines


def test_without_the_module_the_scan_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without a compiler has no ``_linescan``: the scan uses the ahocorasick_rs passes."""
    shutil.copytree(FIXTURES / "data_stall" / "logs", tmp_path / "logs")
    files, _ = discover(tmp_path / "logs")
    spec = job_spec()
    monkeypatch.delenv(NO_NATIVE, raising=False)
    monkeypatch.setitem(sys.modules, "debug_training_logs.logs._linescan", None)  # import raises ImportError
    assert scan_engines._native() is None
    scan_matcher._MATCHERS.clear()
    plan = scan_plan.make_plan(spec, scan_plan._sample(files))
    assert "Aho-Corasick" in plan.describe() and not plan.anchors
    results = scan_files(files, spec, Record, plan=plan)
    assert sum(len(r.sink_result) for r in results) > 0
    monkeypatch.undo()
    scan_matcher._MATCHERS.clear()
    assert [r.sink_result for r in scan_files(files, spec, Record)] == [r.sink_result for r in results]


# --------------------------------------------------------------------------------------------------------------------
# Build


def test_the_extension_is_built_where_a_compiler_is() -> None:
    """CI installs with a compiler: the fast path must be the one the suite tests, not a silent fallback."""
    reason = _compiler()
    if reason is not None:
        pytest.skip(reason)
    mod = importlib.import_module("debug_training_logs.logs._linescan")
    assert Path(mod.__file__).suffix in (".so", ".pyd")
    if not os.environ.get(NO_NATIVE):
        assert scan_engines._native() is mod


def test_an_install_without_a_compiler_succeeds_and_ships_everything(tmp_path: Path) -> None:
    """``CC=false``: the wheel builds without the extension (it is optional) and still carries the package data."""
    src = tmp_path / "src"  # a clean copy: no build/ directory left by an earlier build with a compiler
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "debug_training_logs", src / "debug_training_logs", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("debug_training_logs-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "debug_training_logs/server/SKILL.md" in names
    assert "debug_training_logs/logs/scan.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    assert not [n for n in names if n.startswith(("tests/", "fixtures/", "bench/"))]


# --------------------------------------------------------------------------------------------------------------------
# The scan engine's pieces: DFA tails, head and tail cuts, spans of a buffer


ITEMS = st.sampled_from(
    ["2", "0", "-", ":", "a", " ", r"\d", r"\d\d", "[T ]", r"\.", r"(?:Z|[+-]\d\d)", r"\b", "a?", r"\d+", "x*", "b{2}"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(ITEMS, min_size=1, max_size=8), lines=st.lists(st.text("20-: aTZ+.bx\r9", max_size=40)))
def test_a_dfa_tail_is_a_superset_of_its_pattern(items: list[str], lines: list[str]) -> None:
    """Whatever tail :func:`scan_plan._rare_suffix` picks, every line the pattern matches is matched by the tail too (the
    lines it finds are then checked exactly), and the tail starts on a literal rarer on the sample."""
    from re2 import _re2

    pattern = "".join(items)
    opts = scan_engines._re2_options(False)
    sample = "\n".join(lines).encode() * 3
    tail = scan_plan._rare_suffix(pattern, sample, False)
    if tail is None:
        return
    assert pattern.endswith(tail) and tail != pattern
    whole, part = _re2.RE2(pattern.encode(), opts), _re2.RE2(tail.encode(), opts)
    for line in lines:
        b = line.encode()
        if whole.Match(scan_engines._UNANCHORED, b, 0, len(b))[0][0] >= 0:
            assert part.Match(scan_engines._UNANCHORED, b, 0, len(b))[0][0] >= 0, (pattern, tail, line)


def test_dfa_tails_on_typical_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    iso = r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)\b"
    digits = b"".join(b"step 2%04d/20000 loss-2.%03d at 20:26:%02d\n" % (i, i, i % 60) for i in range(500))
    assert scan_plan._rare_suffix(iso, digits, False) == iso[iso.index("-") :]
    assert scan_plan._rare_suffix(iso, b"", False) is None  # nothing to measure on
    assert scan_plan._rare_suffix(iso, digits, True) is None  # case folding: left as it is
    for pattern in ("a|b-c", "(?i)20-x", r"\Q20\E-x", "[[:digit:]]-x", r"\p{L}20-x", "x{,2}20-y"):
        assert scan_plan._rare_suffix(pattern, digits, False) is None, pattern
    assert scan_patterns._top_items(r"a[]b-]\d+(?:x|(y))?c") == [0, 1, 6, 9, 19]
    monkeypatch.setenv(NO_NATIVE, "1")  # without the extension the pattern stays a DFA search, from its rare tail
    plan = scan_plan.make_plan(PatternSpec((iso, "NCCL WARN")), digits)
    assert plan.dfa and dict(plan.dfa_search) == {iso: iso[iso.index("-") :]}
    monkeypatch.delenv(NO_NATIVE)
    if scan_engines._native() is not None:  # with it, the year's run is spelt out for the finder (_digit_needles)
        plan = scan_plan.make_plan(PatternSpec((iso, "NCCL WARN")), digits)
        assert not plan.dfa and {lit for lit, i in plan.literals if i == 0} == {b"20%02d-" % k for k in range(100)}


ISO = r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)\b"


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        (ISO, ["2000-", "0-0", "-00-", "-00", "00:", "0:0", ":00:", ":00"]),
        (r"rank \d\d?: x", ["rank 0"]),  # a quantified digit ends a run
        (r"rank \d+: x", []),  # a run needs a digit
        (r"step=\d\.\d+", ["step=0."]),  # an escaped dot is a literal character
        (r"[0-9]-[0-9]{2}", ["0-"]),
        (r"a\d|b\d", []),  # a top-level alternation: not read
        (r"(?i)x\d-", []),  # inline flags: not read
        (r"\d\d\d-x", ["00-x"]),  # at most DIGIT_NEEDLES_MAX spellings: the run starts later
    ],
)
def test_digit_needles_spell_out_runs(pattern: str, want: list[str]) -> None:
    runs = scan_plan._digit_needles(pattern)
    assert [r[0].decode() for r in runs] == want
    for r in runs:
        assert len(r) == len(set(r)) <= scan_plan.DIGIT_NEEDLES_MAX
        rx = re.compile(pattern)
        # every spelling of a run is a substring some match of the pattern must hold: each run's needles are required
        for example in ("2024-05-21T07:00:01Z", "2024-05-21 07:00:01.5+02:00", "rank 12: x", "step=3.25", "5-12"):
            if rx.search(example):
                assert any(nd.decode() in example for nd in r), (pattern, example)


def test_an_iso_date_is_found_by_the_finder_where_dashes_are_common(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus where ``-`` is in every other line (lhotse shard names) but dates are rare: the ISO pattern's spelt-out
    run goes to the native finder instead of a DFA search; the hits equal the DFA plan's (the fallback's), near
    misses included. Where a date is on every line the DFA search stays."""
    linescan()
    if os.environ.get(NO_NATIVE):
        pytest.skip(f"{NO_NATIVE} is set: make_plan does not use the native finder")
    rows = []
    for k in range(3000):
        rows.append(b"[rank%d]: DEBUG:lhotse: bucket %d from ais://train-shards/shard-%06d.tar\n" % (k % 8, k, k))
        rows.append(b"[rank%d]: Epoch 0: %d/10000 [01:39<1:18:12, 2.08it/s, v_num=0]\n" % (k % 8, k))
    hits = {
        10: b"time: 2024-05-21T07:00:01Z start\n",
        900: b"x2024-05-21 07:00:01.25+02:00 (no word boundary before: no match)\n",
        901: b"at 2024-05-21 07:00:01.25+02:00\n",
        1500: b"ts=2099-12-31 23:59:59,125-0700\n",
        2000: b"near: 2024-5-21 07:00:01Z, 24-05-21T07:00:01Z, -05-21T07:00:01Z\n",
        2001: b"slurmstepd: error: CANCELLED AT 2026-05-21T08:02:45 DUE TO TASK FAILURE\n",
        5999: b"end 2031-01-02T03:04:05+0000",
    }
    for at, line in hits.items():
        rows[at] = line
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node0.out").write_bytes(b"".join(rows))
    spec = PatternSpec((ISO, "Epoch 0:", "error"))
    sample = b"".join(rows)
    plan = scan_plan.make_plan(spec, sample)
    assert 0 not in plan.dfa and len({lit for lit, i in plan.literals if i == 0}) == 100
    calls = assert_same_scans(tmp_path / "logs", monkeypatch, spec, sample)
    assert calls == 4 + (3000 - 3) + 1  # 4 dates (lines 10, 901, 1500, 5999); the Epoch lines left; the error line
    dated = b"".join(
        b"2024-05-21 07:%02d:%02d,000+0000 INFO step %d\n" % (k // 60 % 60, k % 60, k) for k in range(3000)
    )
    assert 0 in scan_plan.make_plan(spec, dated).dfa  # dates everywhere: one DFA search costs less than line checks


def test_the_planner_weighs_a_literals_anchor_pair_against_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch's literal is the cheapest one: ``complete`` (2 lines here), each of whose byte pairs is in every other
    line, costs more finder stops than ``training `` (10 lines, its pairs rare) costs line checks; with
    few pair stops the rarer literal still wins (``finished``: no line at all, in both). The scan's hits are the same
    with either choice. (``.{0,3}`` keeps the two literals of a branch apart: ``training (?:complete|finished)``
    requires ``training complete`` or ``training finished`` whole.)"""
    pattern = r"training .{0,3}(?:complete|finished)"
    common = b"[rank3]: Epoch 0: from comp samples=%d, letter\n"  # every byte pair of "complete" in every line
    lines = [common % i for i in range(4000)]
    lines[100] = b"straining the loader 1\n"
    lines[2000] = b"training complete in 3h\n"
    lines[2100] = b"complete: 2 of 9\n"
    for k in range(8):
        lines[300 + k] = b"constraining queue %d\n" % k
    sample = b"".join(lines)
    plan = scan_plan.make_plan(PatternSpec((pattern,)), sample)
    assert {lit for lit, _i in plan.literals} == {b"training ", b"finished"}
    filler = [b"[rank3]: step %d\n" % i for i in range(400)]
    few = b"".join(lines[:40] + filler + lines[2000:2001] + lines[2100:2101] + lines[300:308] + lines[100:101])
    plan = scan_plan.make_plan(PatternSpec((pattern,)), few)
    assert {lit for lit, _i in plan.literals} == {b"complete", b"finished"}
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank3.log").write_bytes(sample * 3)
    for plan_from in (sample, few):  # each plan: native equals fallback, and both find every line
        calls = assert_same_scans(tmp_path / "logs", monkeypatch, PatternSpec((pattern, "Epoch")), plan_from)
        assert calls == 3 * (1 + 3989)  # per copy: the training line, the Epoch lines (11 were replaced)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.lists(st.sampled_from([b"ab", b"\n", b"\r", b"x" * 50, b"\r\n", b"q"]), max_size=80).map(b"".join),
    n=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_head_and_tail_cuts_equal_splitting_the_whole_window(body: bytes, n: int, seed: int) -> None:
    """The head and tail of a window are cut from a small copy of its start/end, with the same lines as splitting a
    copy of the whole window (the rest of the line after the head kept up to the cut)."""
    rnd = random.Random(seed)
    monkey = pytest.MonkeyPatch()
    monkey.setattr(scan_file, "MAX_LINE_CHARS", rnd.choice([3, 60, 4000]))
    try:
        lo, hi = sorted(rnd.randrange(len(body) + 1) for _ in range(2))
        window = body[lo:hi]
        heads = scan_file._head_segment(body, lo, hi, n).split(b"\n", n)
        want = window.split(b"\n", n)
        assert len(heads) == len(want) and heads[:-1] == want[:-1]
        assert heads[-1][: scan_file.MAX_LINE_CHARS] == want[-1][: scan_file.MAX_LINE_CHARS]
        prior = [b"p1", b"p2"][: rnd.randrange(3)]
        for continues in (False, True):
            assert scan_file._add_tail(
                prior, scan_file._tail_segment(body, lo, hi, n + 1), continues, n
            ) == scan_file._add_tail(prior, window, continues, n)
    finally:
        monkey.undo()


EDGE_PATTERNS = (
    r"NCCL WARN",  # a literal
    r"Traceback \(most recent call last\)",
    r"\d+ errors",  # no literal: the DFA
    r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:Z|[+-]\d\d:?\d\d)\b",  # a DFA searched from a rarer tail
    r"\Adone",  # sees the edge of what is searched: searched on copies
    r"^\d+\W",  # no literal, sees a window cut after a \r as a line start: such a window is searched on a copy
    r"(?i)cuda error",
    r"^\[rank1\]: x$",
    r"loss=nan",
    r"step \d+",  # dense
    r"lhotse",  # a capped marker that hits every other line
)


def _edge_file(rnd: random.Random, kind: str) -> bytes:
    if kind == "empty":
        return b""
    words = [
        b"[rank%d]: step %d loss=%s",
        b"[rank%d]: NCCL WARN net %d %s",
        b"[rank%d]: %d errors %s",
        b"[rank%d]: 2026-05-21T07:00:%02d+01:00 %s",
        b"done %d %d %s",
        b"[rank%d]: CUDA Error %d %s",
        b"[rank1]: x",
        b"[rank%d]: DEBUG:lhotse %d %s",
        b"[rank%d]: Traceback (most recent call last) %d %s",
    ]
    lines = []
    for _ in range(rnd.randrange(1, 600)):
        w = rnd.choice(words)
        lines.append(w % ((rnd.randrange(9), rnd.randrange(100), rnd.choice([b"nan", b"1.5"]))[: w.count(b"%")]))
        if rnd.random() < 0.02:  # a progress bar longer than a window, redrawn with \r
            lines[-1] += b"".join(b"\r%d%%|#| it %d" % (k, k) for k in range(rnd.randrange(50, 400)))
    sep = b"\r\n" if kind == "crlf" else b"\n"
    data = sep.join(lines)
    return data if kind == "no final newline" else data + sep


@pytest.mark.parametrize("bulk", [False, True], ids=["per-line", "bulk"])
@pytest.mark.parametrize("seed", range(6))
def test_scan_edge_matrix_native_equals_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, bulk: bool
) -> None:
    """Generated files (empty, CRLF, no final newline, lines longer than a window, every kind of pattern) plain,
    rotated, .gz and .zst: the native scan (spans of the memory map, no copies) equals the fallback (copies,
    ``ahocorasick_rs``) in every field and sink call, with windows and pieces small enough to cut lines anywhere.
    ``bulk``: the sink takes the dense pattern's lines in bulk (the native finder hands over those it can, the
    fallback none): the same calls in the same order."""
    rnd = random.Random(seed)
    root = tmp_path / "logs"
    root.mkdir()
    kinds = ["plain", "crlf", "no final newline", "empty"]
    for f in range(6):
        data = _edge_file(rnd, kinds[f % len(kinds)])
        name = f"node-{f}.log" + (".1" if f == 5 else "")
        path = root / name
        if f == 3 and seed % 2:
            path = root / (name + ".gz")
            path.write_bytes(gzip.compress(data))
        elif f == 4 and seed % 3 == 0:
            path = root / (name + ".zst")
            path.write_bytes(zstandard.ZstdCompressor().compress(data))
        else:
            path.write_bytes(data)
    # with a pattern that sees the edges of what is searched (\A, inline flags) every piece is searched on a copy;
    # without, spans of the map are searched in place except where a window starts inside a line
    patterns = EDGE_PATTERNS if seed % 2 else tuple(p for p in EDGE_PATTERNS if not p.startswith(("\\A", "(?")))
    caps = tuple(rnd.choice([None, 3, 20]) if p == "lhotse" else None for p in patterns)
    spec = PatternSpec(patterns, max_hits=caps, dense=tuple(p == r"step \d+" for p in patterns))
    window = rnd.choice([400, 3000, 1 << 20])
    monkeypatch.setattr(scan_windows, "WINDOW", window)
    monkeypatch.setattr(scan_file, "CAPPED_PIECE_BYTES", rnd.choice([100, 1000]))
    monkeypatch.setattr(scan_file, "DENSE_HEAD_HITS", rnd.choice([2, 64]))
    monkeypatch.setattr(scan_dense, "DENSE_STRIDE", rnd.choice([200, 5000]))
    if bulk:  # (the dense pattern's lines come in bulk after its head: a short one, in these small files)
        monkeypatch.setattr(scan_file, "DENSE_HEAD_HITS", 2)
    if window < 4000:
        monkeypatch.setattr("debug_training_logs.logs.reader.CHUNK", 4000)
        monkeypatch.setattr(scan_windows, "CHUNK", 4000)
    sink: SinkFactory = functools.partial(BulkRecord, bulk=patterns.index(r"step \d+")) if bulk else Record
    BULK_TAKEN.clear()
    calls = assert_same_scans(root, monkeypatch, spec, sample=rnd.choice([b"", None]), sink=sink)
    assert calls > 0
    assert not bulk or sum(BULK_TAKEN) > 0


def stride_walk(buf: bytes, needles: list[bytes], lo: int, hi: int, stride: int) -> list[tuple[int, int]]:
    """What ``Finder.sample`` proposes for ``buf[lo:hi]``, with ``bytes.find``: from pos, the line of the first needle
    starting at or after pos (its start never before lo), then pos = max(line start + stride, line end + 1)."""
    out: list[tuple[int, int]] = []
    pos = lo
    usable = [nd for nd in needles if b"\n" not in nd]
    while pos < hi:
        starts = [p for nd in usable if (p := buf.find(nd, pos, hi)) >= 0]
        if not starts:
            break
        s = min(starts)
        ls = buf.rfind(b"\n", lo, s) + 1 or lo
        le = buf.find(b"\n", s, hi)
        le = hi if le < 0 else le
        out.append((ls, le))
        pos = max(ls + stride, le + 1)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    needles=st.lists(st.lists(ALPHABET, min_size=1, max_size=5).map(b"".join), min_size=0, max_size=8, unique=True),
    body=st.lists(ALPHABET, max_size=400).map(b"".join),
    seed=st.integers(0, 2**32 - 1),
)
def test_finder_every_needle_and_stride_sample_fuzz(needles: list[bytes], body: bytes, seed: int) -> None:
    """``find_lines(every=True)`` names exactly the needles (distinct, as the scan gives them) inside each line (a
    needle holding a newline never); ``sample`` proposes the stride walk of every piece (pieces cut anywhere, strides down to one byte)."""
    mod = linescan()
    rnd = random.Random(seed)
    anchors = [rnd.randrange(max(1, len(nd) - 1)) for nd in needles] if rnd.random() < 0.5 else None
    f = mod.Finder(needles, anchors)
    lo, hi = sorted(rnd.randrange(len(body) + 1) for _ in range(2))
    hits, _nl, stop = f.find_lines(body, lo, 0, hi, True)
    want, _ = reference(body[lo:hi], needles)
    assert [(ls - lo, le - lo, rel) for ls, le, rel, _n in hits] == want and stop == hi
    for ls, le, _rel, named in hits:
        line = body[ls:le]
        assert named == tuple(i for i, nd in enumerate(needles) if b"\n" not in nd and nd in line)
    cuts = sorted({lo, hi, *(rnd.randrange(lo, hi + 1) for _ in range(rnd.randrange(4)))})
    bounds = list(itertools.pairwise(cuts))
    stride = rnd.choice([1, 2, 7, 50, 1000])
    walks = [stride_walk(body, needles, a, b, stride) for a, b in bounds]
    assert f.sample(body, bounds, stride) == walks
    base = rnd.randrange(lo + 1)  # with line indexes counted from base
    assert f.sample(body, bounds, stride, base) == [
        [(ls, le, body.count(b"\n", base, ls)) for ls, le in walk] for walk in walks
    ]


def test_finder_sample_and_every_reject_bad_arguments() -> None:
    mod = linescan()
    f = mod.Finder([b"ab"])
    with pytest.raises(ValueError, match="outside the buffer"):
        f.sample(b"abc", [(0, 4)], 10)
    with pytest.raises(ValueError, match="outside the buffer"):
        f.sample(b"abc", [(2, 1)], 10)
    with pytest.raises(TypeError):
        f.sample(b"abc", [(0,)], 10)
    with pytest.raises(TypeError):
        f.sample(b"abc", 5, 10)
    with pytest.raises(ValueError, match="ascend"):
        f.sample(b"abc", [(0, 3)], 10, 1)
    assert f.sample(b"x ab\nab", [], 3) == []
    assert f.find_lines(b"ab ab\nq", every=True) == ([(0, 5, 0, (0,))], 1, 7)
    many = [bytes([65 + i // 26, 97 + i % 26]) for i in range(100)]  # more distinct needles in a line than 64
    line = b" ".join(many)
    assert mod.Finder(many).find_lines(line, every=True)[0][0][3] == tuple(range(100))


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        ("NCCL WARN|NET/IB ?: |ibv_\\w+ failed", {b"NCCL WARN"}),
        ("a|(b|c)|[|x]|d", {b"a", b"d"}),
        (r"x\|y|z", {b"x|y", b"z"}),
        ("CUDA out of memory|OutOfMemoryError", {b"CUDA out of memory", b"OutOfMemoryError"}),
        ("(a|b)", set()),
        ("(?i)abc|def", set()),  # a flag may reach every branch
        ("abc|(?m)def", set()),
        ("ab|[a|]c|d", {b"ab", b"d"}),  # a | inside a class does not cut
        ("a.c|a\\.c", {b"a.c"}),
        ("", set()),
    ],
)
def test_pure_branches_are_top_level_plain_literals(pattern: str, want: set[bytes]) -> None:
    """A top-level alternative that is a plain literal proves a line holding it matches the whole pattern."""
    assert scan_patterns._pure_branches(pattern) == want


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        ("NCCL WARN", b"NCCL WARN"),
        (r"ollective\ operation\ timeout", b"ollective operation timeout"),
        (r"Timeout\(ms\)=", b"Timeout(ms)="),
        (r"a\.b\[c\]\{d\}", b"a.b[c]{d}"),
        ("a.b", None),
        (r"\d+ errors", None),
        (r"Traceback \(most", b"Traceback (most"),
        (r"x\n", None),
        (r"x\x41", None),
        (r"x\101", None),
        ("tab\there", None),
        ("a|b", None),
        ("ab?", None),
        ("(?i)ab", None),
        ("^ab", None),
        ("ab$", None),
        ("caf\u00e9", None),
        ("", None),
        ("trailing\\", None),
    ],
)
def test_pure_literal_only_where_re2_reads_a_plain_literal(pattern: str, want: bytes | None) -> None:
    """A pattern whose needle is the pattern itself needs no regex check; anything RE2 could read otherwise is not
    one (escapes other than punctuation, classes, anchors, flags, control or non-ASCII characters)."""
    assert scan_patterns._pure_literal(pattern) == want
    if want is not None:
        import re2

        assert re2.compile(pattern).search(b"x " + want + b" y") is not None


def _check_file(rnd: random.Random, kind: str) -> bytes:
    words = [
        b"[rank%d]: NCCL WARN net %d7 %s",  # two pure literals and a regex sharing a needle
        b"[rank%d]: WARN net %d %s",
        b"[rank%d]: Traceback (most recent call last) %d %s",
        b"%d: %d errors %s",  # a capped pattern without a literal (the DFA) and one with
        b"[rank%d]: DEBUG:lhotse %d %s",
        b"[rank%d]: Lhotse %d %s",
        b"[rank%d]: step %d loss=%s",  # dense
        b"[rank%d]: step x%d %s",  # a dense needle on a line its regex does not match, unless it holds loss=nan
        b"[rank%d]: step x%d loss=%s",
        b"[rank%d]: nothing %d %s",
    ]
    lines = []
    for _ in range(rnd.randrange(200, 900)):
        w = rnd.choice(words)
        lines.append(w % (rnd.randrange(9), rnd.randrange(100), rnd.choice([b"nan", b"1.5"])))
        if rnd.random() < 0.01:
            lines[-1] += b"".join(b"\rstep %d NCCL WARN %d" % (k, k) for k in range(rnd.randrange(50, 300)))
    sep = b"\r\n" if kind == "crlf" else b"\n"
    data = sep.join(lines)
    return data if kind == "no final newline" else data + sep


@pytest.mark.parametrize("seed", range(8))
def test_candidate_checks_caps_and_samples_native_equal_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The native path checks a candidate line only against the patterns of the needles in it (pure literals not at
    all), stops checking a capped pattern (and a capped DFA search) once its cap is sure to be reached, and takes the
    dense sample's stride walk from one native call per pattern, walking on in Python after a line that fails its
    check: every field and sink call equals the fallback's (one RE2 Set per line, Python walk), with caps reached
    mid-window and mid-piece, a pattern given twice, long lines cut at ``\\r``, CRLF, no final newline, .gz."""
    rnd = random.Random(seed)
    root = tmp_path / "logs"
    root.mkdir()
    kinds = ["plain", "crlf", "no final newline"]
    for f in range(4):
        data = _check_file(rnd, kinds[f % 3])
        if f == 3:
            (root / "node-3.log.gz").write_bytes(gzip.compress(data))
        else:
            (root / f"node-{f}.log").write_bytes(data)
    patterns = (
        "NCCL WARN",
        "WARN net",
        r"net \d+7",
        r"Traceback \(most recent call last\)",
        r"^\d+:",
        r"[0-9]{2} errors",
        "lhotse",
        "lhotse|Lhotse",
        "lhotse|Lhotse",
        r"step \d+|loss=nan",  # dense, with a plain-literal alternative
        r"NCCL WARN|WARN n\w+ 7|errors? n",  # one plain-literal alternative
    )
    caps = (None, rnd.choice([None, 2]), None, rnd.choice([1, 5]), rnd.choice([3, 40]), 3, 2, 4, 4, None, None)
    spec = PatternSpec(patterns, max_hits=caps, dense=tuple(p.startswith("step") for p in patterns))
    monkeypatch.setattr(scan_windows, "WINDOW", rnd.choice([500, 4000, 1 << 20]))
    monkeypatch.setattr(scan_windows, "CHUNK", 8000)
    monkeypatch.setattr("debug_training_logs.logs.reader.CHUNK", 8000)
    monkeypatch.setattr(scan_file, "CAPPED_PIECE_BYTES", rnd.choice([150, 2000]))
    monkeypatch.setattr(scan_file, "DENSE_HEAD_HITS", rnd.choice([3, 64]))
    monkeypatch.setattr(scan_dense, "DENSE_STRIDE", rnd.choice([100, 3000]))
    assert assert_same_scans(root, monkeypatch, spec, sample=rnd.choice([b"", None])) > 0
