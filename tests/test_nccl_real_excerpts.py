"""Excerpts shaped like real bug reports (tests/nccl_excerpts.py): each yields its rows, none names a straggler or a
fabric hang from partial evidence, none takes the world size from a sub-communicator, and every citation the table
gives is a physical line of the file that says what the citation quotes (the verifier's citation rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from debug_training_logs.analysis.nccl_table import nccl_state_table
from debug_training_logs.verify.citation_rules import text_matches
from tests.nccl_excerpts import EXCERPTS, Excerpt
from tests.nccl_render import write_wrapped_at_80


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


def test_verifier_accepts_the_tables_citations_on_a_wrapped_job(tmp_path: Path) -> None:
    """Every NCCL line of two ranks hard-wrapped at 80 columns (a pasted log): diagnose still names rank 5, and the
    verifier, re-reading the files itself, finds every cited line where the conclusion says it is."""
    from debug_training_logs.models import Evidence
    from debug_training_logs.tools.diagnose import diagnose
    from debug_training_logs.verify import verify
    from fixtures.worker_gen import JobSpec, generate

    gen = generate(JobSpec(gpus_per_node=4), "data_stall", tmp_path / "src", write_truth=False)
    logs = write_wrapped_at_80(gen.files, tmp_path / "logs")
    d = diagnose(str(logs))
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("data_loading_stall", [5]), d.summary
    # add the table's own citations of the wrapped ranks' rows to the conclusion, as an agent would
    table = nccl_state_table(logs, limit=1000)
    wrapped = [r for r in table.rows if r.rank in (2, 5)]
    assert wrapped and all(r.file and r.line for r in wrapped)
    quoted = [
        Evidence(
            file=r.file or "",
            line=r.line or 0,
            text=(logs / (r.file or "")).read_text().splitlines()[(r.line or 1) - 1],
        )
        for r in wrapped
    ] + [Evidence(file=e.file, line=e.line, text=e.text) for e in table.evidence]
    conclusion = d.conclusion.model_copy(update={"evidence": [*d.conclusion.evidence, *quoted]})
    again = verify(conclusion)
    checks = {c.rule: c for c in again.checks}
    assert checks["citations"].status == "passed", checks["citations"].detail
    assert again.accepted, [(c.rule, c.detail) for c in again.checks if not c.passed]


@pytest.mark.parametrize("ex", EXCERPTS, ids=[e.name for e in EXCERPTS])
def test_diagnose_on_excerpts_names_the_timeout_and_blames_no_rank(tmp_path: Path, ex: Excerpt) -> None:
    """The whole protocol on the same excerpts: the shape they show (a timeout nothing in them attributes),
    provisional, no culprit from a subset, and a conclusion the verifier accepts."""
    from debug_training_logs.tools.diagnose import diagnose

    d = diagnose(str(ex.write(tmp_path)))
    assert d.verdict.culprit_ranks == [] and d.verdict.category == "nccl_timeout_unattributed", d.summary
    assert d.verdict.provisional, d.summary
    assert d.verification.accepted, [(c.rule, c.detail) for c in d.verification.checks if not c.passed]
