"""The per-file work the scan's worker does besides the search: a scan's search shared between its files, the
dense tail start read from the scan's own map, and the evidence series made into arrays. Each is checked against the
plain way of doing the same thing (a fresh search per file, a second map of the file, one conversion per point)."""

from __future__ import annotations

import mmap
import random
from array import array
from pathlib import Path

import pytest
from test_native_scan import Record

from debug_training_logs.analysis import evidence_sink
from debug_training_logs.formats.timestamps import WallTime, with_year
from debug_training_logs.logs import scan_dense, scan_file, scan_matcher, scan_plan, scan_types, scan_windows
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.scan_types import PatternSpec


def _log(rnd: random.Random, lines: int, crlf: bool, final_newline: bool) -> bytes:
    words = [
        b"Epoch 0: %d/100 [00:01<00:02, train_step_timing in s=1.%d]",
        b"iteration %d/ 100 | consumed samples: %d",
        b"NCCL WARN net %d failed %d",
        b"watchdog caught collective operation timeout %d %d",
        b"lhotse DEBUG sampler %d %d",
        b"plain line %d %d",
    ]
    out = []
    for _ in range(lines):
        w = rnd.choice(words)
        out.append(b"[rank%d]: " % rnd.randrange(8) + w % (rnd.randrange(100), rnd.randrange(10)))
        if rnd.random() < 0.005:
            out[-1] += b"x" * rnd.randrange(4000, 9000)  # a very long line
    sep = b"\r\n" if crlf else b"\n"
    return sep.join(out) + (sep if final_newline else b"")


SPECS = (
    PatternSpec(
        (r"iteration +\d+/ *\d+ \||train_step_timing", "NCCL WARN", r"collective operation timeout \d+", "lhotse"),
        max_hits=(None, 3, None, 5),
        dense=(True, False, False, False),
    ),
    PatternSpec(("NCCL WARN", r"plain line \d+ 7", "lhotse|Lhotse"), max_hits=(None, 2, 4)),
)


def _fields(s: scan_types.FileScan) -> tuple[object, ...]:
    cp = s.checkpoints
    points = (cp.offsets, cp.lines_before, cp.newlines) if cp else None
    return (s.lines, s.bytes_read, s.counts, s.ranks, s.head, s.tail, s.sampled, points, s.sink_result)


@pytest.mark.parametrize("seed", range(4))
def test_a_scans_state_shared_between_files_and_scans_gives_what_a_fresh_one_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Files of two scans scanned in turn (each with its scan's search, filled by the files before) give exactly what
    each file scanned with a fresh search and empty caches gives: every field and every sink call; empty, CRLF, no
    final newline and very long lines included."""
    rnd = random.Random(seed)
    monkeypatch.setattr(scan_windows, "WINDOW", rnd.choice([3000, 1 << 20]))
    monkeypatch.setattr(scan_file, "CAPPED_PIECE_BYTES", rnd.choice([500, 64 << 10]))
    monkeypatch.setattr(scan_dense, "DENSE_STRIDE", rnd.choice([200, 48 << 10]))
    monkeypatch.setattr(scan_file, "DENSE_HEAD_HITS", rnd.choice([2, 64]))
    for f in range(4):
        data = b"" if f == 3 else _log(rnd, rnd.randrange(50, 3000), crlf=f == 1, final_newline=f != 2)
        (tmp_path / f"node-{f}.log").write_bytes(data)
    files, _ = discover(tmp_path)
    plans = [scan_plan.make_plan(spec, b"") for spec in SPECS]

    searches = [scan_file.ScanSearch(spec, plan) for spec, plan in zip(SPECS, plans, strict=True)]

    def run(fresh: bool) -> list[tuple[object, ...]]:
        out = []
        for lf in files:
            for spec, plan, search in zip(SPECS, plans, searches, strict=True):
                if fresh:
                    scan_matcher._MATCHERS.clear()
                    scan_dense._DENSES.clear()
                    search = scan_file.ScanSearch(spec, plan)
                out.append(_fields(scan_file._scan_one(lf, search, Record, 5, 5, True)))
        return out

    fresh = run(True)
    assert run(False) == fresh
    assert run(False) == fresh  # and again, every state found from the file before
    assert any(f[8] for f in fresh)  # sink calls were made


@pytest.mark.parametrize("seed", range(6))
def test_the_dense_tail_start_on_the_scans_map_equals_a_fresh_map(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    path = tmp_path / "node.log"
    path.write_bytes(_log(rnd, rnd.randrange(1, 2000), crlf=rnd.random() < 0.5, final_newline=rnd.random() < 0.5))
    (lf,) = discover(tmp_path)[0]
    spec = SPECS[0]
    dense = scan_dense._Dense(spec, scan_plan.make_plan(spec, b""))
    ranks = {str(r) for r in rnd.sample(range(8), rnd.randrange(0, 9))}
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert scan_file._plain_tail_start(lf, dense, ranks, mm) == scan_file._plain_tail_start(lf, dense, ranks)


def _series_reference(
    points: list[tuple[int, WallTime | None, float]],
) -> tuple[array[int], array[int], array[float]] | None:
    """One conversion per point (None: a point's time has no year, the series stays as points)."""
    if any(wt is not None and wt.year is None for _ln, wt, _v in points):
        return None
    times = array("q")
    for _ln, wt, _v in points:
        t = with_year(wt, None) if wt is not None else None
        times.append(evidence_sink._NO_TIME if t is None else (t - evidence_sink._EPOCH) // evidence_sink._US)
    return array("q", [p[0] for p in points]), times, array("d", [p[2] for p in points])


@pytest.mark.parametrize("seed", range(20))
def test_series_arrays_equal_one_conversion_per_point(seed: int) -> None:
    """Consecutive points sharing one time object are converted once: the arrays equal converting every point, with
    untimed points between timed ones, a February 29 with its year, and a time without a year anywhere (the rank's
    series then stays as points)."""
    rnd = random.Random(seed)
    times = [
        WallTime(2026, 5, 21, 7, 0, rnd.randrange(60), rnd.randrange(10**6)),
        WallTime(2024, 2, 29, 23, 59, 59),
        WallTime(2026, 1, 1, 0, 0, 0),
        None,
        WallTime(None, 5, 21, 7, 0, 1),
    ]
    fh = evidence_sink._FileHits(rel="f")
    want: dict[int | None, tuple[array[int], array[int], array[float]] | None] = {}
    for rank in (None, 0, 1, 2):
        pts: list[tuple[int, WallTime | None, float]] = []
        wt = rnd.choice(times[:4])
        for k in range(rnd.randrange(0, 60)):
            if rnd.random() < 0.3:
                wt = rnd.choice(times if rnd.random() < 0.1 else times[:4])
            pts.append((k + 1, wt, rnd.random()))
        fh.step_ms[rank] = evidence_sink._Series(points=pts)
        want[rank] = _series_reference(pts)
    got = evidence_sink._file_series(fh)
    arrays, raw = got.arrays.get("step", {}), got.raw.get("step", {})
    for rank, ref in want.items():
        if ref is None:
            assert raw[rank] == fh.step_ms[rank].points and rank not in arrays
        else:
            assert arrays[rank] == ref and rank not in raw


def test_composite_routes_shared_by_a_scans_files_split_each_scans_ids(tmp_path: Path) -> None:
    """Files of two scans with different consumer layouts, sunk in turn: each file's consumers get exactly their own
    ids (shifted back to 0..k-1) and the inventory its markers', whichever scan's routes were worked out before."""
    from debug_training_logs.analysis import inventory

    (tmp_path / "a.log").write_text("x\n")
    (lf,) = discover(tmp_path)[0]
    layouts = (
        ((Record, 0, 3), (None, 3, 2), (Record, 5, 4)),  # markers from 9
        ((Record, 0, 1), (Record, 1, 6)),  # markers from 7
    )
    marks = (9, 7)
    rnd = random.Random(5)
    for _ in range(6):
        for parts, at in zip(layouts, marks, strict=True):
            sink = inventory._CompositeSink(lf, parts, at)
            sent = []
            for no in range(1, 40):
                ids = sorted(rnd.sample(range(at + 3), rnd.randrange(1, 4)))
                sink.on_hit(ids, no, f"line {no}")
                sent.append((ids, no))
            results, _facts = sink.finish()
            for (factory, off, k), got in zip(parts, results, strict=True):
                want = [
                    ([i - off for i in ids if off <= i < off + k], no, f"line {no}")
                    for ids, no in sent
                    if any(off <= i < off + k for i in ids)
                ]
                assert got == (want if factory is not None else None)
            assert sink.inventory.facts.markers or not any(i >= at for ids, _ in sent for i in ids)


AGENT_STOP = "E0521 07:00:01.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)"
AFTER_STOP = [
    ("[rank1]: step 5 loss 1.0", True),
    ("0: [rank1]: step 5 loss 1.0", True),  # an srun label before the rank prefix
    ("2026-05-21 07:00:09 [rank1] step 5", True),  # '[rankN] ' after a time, seconds after the stop
    # a second after the stop: what a dying worker flushed, not a new run (the agent's SIGTERM ends the attempt)
    ("2026-05-21 07:00:02 [rank1] step 5", False),
    ("[default0]:step 5", True),
    ("[trainer3]:step 5", True),
    ("W0521 07:00:02.000000 1234 torch/distributed/run.py:793] [rank1]: agent's own line", False),
    ('  File "train.py", line 3, in <module> [rank1]: x', False),  # a traceback line: the agent's own
    ("Traceback (most recent call last):", False),
    ("plain text [rank] no number", False),
    ("x[default0]:not at the start", False),
]


@pytest.mark.parametrize(("line", "worker"), AFTER_STOP)
def test_a_worker_line_after_an_agent_stop_starts_an_attempt(tmp_path: Path, line: str, worker: bool) -> None:
    """Workers logging after the agent stopped them mean they ran again (a new attempt), whatever prefix their lines
    carry; the agent's own lines, tracebacks, output flushed while dying and text that only looks like a prefix do
    not."""
    from debug_training_logs.analysis import attempts

    (tmp_path / "node.log").write_text(f"I0521 07:00:00.000000 1234 start\n{AGENT_STOP}\n{line}\nlast words\n")
    (lf,) = discover(tmp_path)[0]
    found = attempts._file_boundaries(lf, [(2, "a worker failed (exitcode 1)", "")])
    assert bool(found) == worker
