"""Excerpts shaped like real bug reports (tests/nccl_excerpts.py): each yields its rows, none names a straggler or a
fabric hang from partial evidence, none takes the world size from a sub-communicator, and every citation the table
gives is a physical line of the file that says what the citation quotes (the verifier's citation rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from debug_training_logs.analysis.nccl_table import nccl_state_table
from debug_training_logs.verify.rules import text_matches
from tests.nccl_excerpts import EXCERPTS, Excerpt


@pytest.mark.parametrize("ex", EXCERPTS, ids=[e.name for e in EXCERPTS])
def test_real_shaped_excerpt(tmp_path: Path, ex: Excerpt) -> None:
    d = ex.write(tmp_path)
    res = nccl_state_table(d, limit=1000)
    assert len(res.rows) >= ex.min_rows, res.summary
    assert len(res.unattributed_timeouts) == ex.unattributed_timeouts
    if ex.unattributed_timeouts:
        assert "TIMEOUTS WITHOUT A GLOBAL RANK" in res.summary and "no collective timed out" not in res.summary
    assert res.straggler_ranks == [] and "STRAGGLER" not in res.summary
    assert all(p.classification not in ("straggler", "fabric") for p in res.process_groups), res.summary
    assert res.coverage.world_size is None and res.unparsed_lines == 0
    for field, value in ex.expect.items():
        assert any(getattr(r, field) == value for r in res.rows), (field, [getattr(r, field) for r in res.rows])
    cited = [(r.file, r.line) for r in res.rows] + [(e.file, e.line) for e in res.evidence]
    for file, line in cited:
        assert file is not None and line is not None
        physical = (d / file).read_text().splitlines()[line - 1]
        texts = [e.text for e in res.evidence if (e.file, e.line) == (file, line)]
        assert all(text_matches(t, physical) for t in texts), (file, line, texts, physical)
    assert all("--" not in (r.timeout_time or "") and "2000-" not in (r.timeout_time or "") for r in res.rows)
