"""FORMAT MATRIX: every watchdog/status/dump/terminate message family x torch family 2.0 ... 2.14 x prefix (none,
``[rankN]:``, srun ``--label``, Ray, ANSI, docker timestamps) x hard-wrap position (none, inside a word, inside the
first and the last number, at a blank the paste lost, an indented continuation, 80 columns, inside the c10 header).

Each cell is one real file run through the real scan (the NCCL needles select candidate lines, the sink re-reads and
re-joins wrapped pieces). The record must come back with its fields, the global rank the line names, and a citation
at the physical line where it starts, quoting that line as the file has it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis.nccl_hits import FileEvents, Hit
from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS, NcclSink
from debug_training_logs.analysis.nccl_table import nccl_state_table
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.scan import scan_files
from debug_training_logs.logs.scan_types import PatternSpec
from debug_training_logs.textcut import cut
from tests.nccl_render import (
    DONE,
    ENQ,
    EXTRA_PREFIXES,
    NUMEL,
    PREFIXES,
    RAN_MS,
    SEQ,
    TIMEOUT_MS,
    TORCH,
    WRAPS,
    Case,
    all_cases,
    messages,
    with_prefix,
    wrap,
)


def _scan(tmp: Path, cases: list[Case]) -> dict[str, FileEvents]:
    for i, c in enumerate(cases):
        (tmp / f"case-{i:05d}.log").write_text("\n".join(c.lines) + "\n")
    files, _ = discover(tmp)
    scans = scan_files(files, PatternSpec(NCCL_PATTERNS), NcclSink)
    return {s.file.rel: s.sink_result for s in scans if isinstance(s.sink_result, FileEvents)}


def _fields(hit: Hit) -> dict[str, Any]:
    ev = hit.event
    out: dict[str, Any] = {"event": type(ev).__name__}
    w = ev.embedded if isinstance(ev, tnt.WatchdogTerminated) else ev
    if isinstance(ev, tnt.WatchdogTerminated):
        out["embedded"] = ev.embedded is not None
    if isinstance(w, tnt.WatchdogTimeout | tnt.BlockingWaitTimeout):
        out.update(seq=w.work.seq, op_type=w.work.op_type, timeout_ms=w.work.timeout_ms, numel_in=w.work.numel_in)
        if isinstance(w, tnt.WatchdogTimeout) and not isinstance(ev, tnt.WatchdogTerminated):
            out["ran_for_ms"] = w.ran_for_ms
    if isinstance(ev, tnt.StatusLine):
        out.update(seq=ev.seq, last_enqueued=ev.last_enqueued, last_completed=ev.last_completed)
    if isinstance(ev, tnt.DumpSignal):
        out.update(
            origin=ev.origin, from_rank=ev.from_rank, last_enqueued=ev.last_enqueued, last_completed=ev.last_completed
        )
    return out


def _problems(case: Case, fe: FileEvents) -> list[str]:
    want = case.message.expect
    hits = [h for h in fe.hits if type(h.event).__name__ == want["event"]]
    if len(hits) != 1:
        return [f"{len(hits)} {want['event']} record(s), hits={[(h.line, type(h.event).__name__) for h in fe.hits]}"]
    h = hits[0]
    out = []
    got = {k: v for k, v in _fields(h).items() if k in want}
    if got != want:
        out.append(f"fields {got} != {want}")
    if h.line != case.line:
        out.append(f"cited line {h.line} != {case.line}")
    if h.text != cut(strip_ansi(case.lines[case.line - 1])):
        out.append(f"cited text is not physical line {case.line}: {h.text[:80]!r}")
    if h.rank != case.rank:
        out.append(f"rank {h.rank} != {case.rank}")
    if fe.unparsed:
        out.append(f"{fe.unparsed} unparsed: {fe.unparsed_samples}")
    return out


@pytest.mark.parametrize("version", TORCH)
def test_format_matrix(tmp_path: Path, version: str) -> None:
    cases = all_cases(version)
    found = _scan(tmp_path, cases)
    failures = []
    for i, c in enumerate(cases):
        probs = _problems(c, found[f"case-{i:05d}.log"])
        if probs:
            failures.append(f"{c.id}: {'; '.join(probs)}")
    assert not failures, f"{len(failures)} of {len(cases)} cells fail:\n" + "\n".join(failures[:25])


def test_matrix_size_and_every_family_covered() -> None:
    families = {m.family for v in TORCH for m in messages(v)}
    assert families >= {"timeout", "timeout_wait_path", "communicator_aborted", "blocking_wait", "terminated", "what",
                        "status", "status_exception", "dump_local", "dump_remote", "observed", "first"}  # fmt: skip
    cells = sum(len(messages(v)) for v in TORCH) * len(PREFIXES + EXTRA_PREFIXES) * len(WRAPS)
    assert cells == 119 * 9 * 8, cells


# ---------------------------------------------------------------------------------------------------------------------
# The table over a whole (small) job per torch family x prefix: the rows and the verdict a person would reach.

WORLD = 4
PAD = [f"[NeMo I 2026-11-07 23:{10 + i // 60:02d}:{i % 60:02d} train:88] step {i} loss 2.{i:03d}" for i in range(45)]


def _job(tmp: Path, version: str, prefix: str, stall: int | None) -> Path:
    """4 ranks in one data-parallel PG; every rank times out in the same ALLREDUCE, except ``stall`` which logs no
    NCCL state (stuck in its data loader). Rank 2's lines are hard-wrapped at 80 columns."""
    d = tmp / f"{version}-{prefix}-{stall}"
    d.mkdir()
    families = {"timeout", "terminated", "what", "status", "dump_local", "first"}
    for r in range(WORLD):
        lines = [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{WORLD}", *PAD]
        if r != stall:
            for m in messages(version, rank=r, pg_rank=r):
                if m.family not in families:
                    continue
                if m.family == "what":
                    lines.append("terminate called after throwing an instance of 'c10::DistBackendError'")
                text, _ = with_prefix(prefix, m.text, m.headered, r)
                lines.extend(wrap("cols80", text, 0) if r == 2 else [text])
        (d / f"rank-{r}.log").write_text("\n".join(lines) + "\n")
    return d


@pytest.mark.parametrize("version", TORCH)
@pytest.mark.parametrize("prefix", PREFIXES)
def test_table_rows_and_verdict_every_family_and_prefix(tmp_path: Path, version: str, prefix: str) -> None:
    v = tuple(int(x) for x in version.split("."))
    res = nccl_state_table(_job(tmp_path, version, prefix, stall=None), limit=100)
    assert res.coverage.world_size == WORLD and res.unparsed_lines == 0 and res.unattributed_lines == 0, res.summary
    pg = None if v <= (2, 2) else ("9" if v >= (2, 5) else "4")
    assert {(r.rank, r.pg) for r in res.rows} == {(r, pg) for r in range(WORLD)}, res.summary
    for row in res.rows:
        assert (row.seq, row.op_type, row.timeout_ms, row.ran_for_ms, row.signal) == (
            SEQ,
            "ALLREDUCE",
            TIMEOUT_MS,
            RAN_MS,
            "detected",
        ), row
        assert row.numel_in == (None if v <= (2, 0) else NUMEL)
        assert row.pg_rank == row.rank
        if v >= (2, 3):
            assert (row.last_enqueued, row.last_completed, row.pending) == (ENQ, DONE, ENQ - DONE)
        assert row.timeout_time == ("2026-11-07T23:41:09" if v >= (2, 4) else None)
        assert row.signalled_dump == (v >= (2, 7) or v == (2, 4))
    assert [p.classification for p in res.process_groups] == ["fabric"], res.summary
    # rank 1 never entered: with every rank's whole log present, its absence names it, and only it
    stalled = nccl_state_table(_job(tmp_path, version, prefix, stall=1), limit=100)
    assert stalled.straggler_ranks == [1], stalled.summary
