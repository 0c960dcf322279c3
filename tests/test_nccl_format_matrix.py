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

from debug_training_logs.analysis.nccl_table import NCCL_PATTERNS, FileEvents, Hit, NcclSink
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.scan import PatternSpec, scan_files
from debug_training_logs.models import cut
from tests.nccl_render import PREFIXES, TORCH, WRAPS, Case, all_cases, messages


def _scan(tmp: Path, cases: list[Case]) -> dict[str, FileEvents]:
    for i, c in enumerate(cases):
        (tmp / f"case-{i:05d}.log").write_text("\n".join(c.lines) + "\n")
    files, _ = discover(tmp)
    scans = scan_files(files, PatternSpec(NCCL_PATTERNS), NcclSink)
    return {s.file.rel: s.sink_result for s in scans if isinstance(s.sink_result, FileEvents)}


def _fields(hit: Hit) -> dict[str, Any]:
    ev = hit.event
    out: dict[str, Any] = {"event": type(ev).__name__}
    w = ev.embedded if isinstance(ev, tn.WatchdogTerminated) else ev
    if isinstance(ev, tn.WatchdogTerminated):
        out["embedded"] = ev.embedded is not None
    if isinstance(w, tn.WatchdogTimeout | tn.BlockingWaitTimeout):
        out.update(seq=w.work.seq, op_type=w.work.op_type, timeout_ms=w.work.timeout_ms, numel_in=w.work.numel_in)
        if isinstance(w, tn.WatchdogTimeout) and not isinstance(ev, tn.WatchdogTerminated):
            out["ran_for_ms"] = w.ran_for_ms
    if isinstance(ev, tn.StatusLine):
        out.update(seq=ev.seq, last_enqueued=ev.last_enqueued, last_completed=ev.last_completed)
    if isinstance(ev, tn.DumpSignal):
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
    if h.text != cut(tn.strip_ansi(case.lines[case.line - 1])):
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
    cells = sum(len(messages(v)) for v in TORCH) * len(PREFIXES) * len(WRAPS)
    assert cells > 5000, cells
