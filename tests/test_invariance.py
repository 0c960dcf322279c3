"""Invariance: every failure scenario, written the way different jobs write their logs, gets the same verdict.

Each scenario of ``fixtures/failure_scenarios.py`` is rendered at test time (into a temp dir, never checked in) under
every presentation variant of :data:`VARIANTS`: the torch family (2.1 to 2.14: header styles, PG prefixes, with and
without enqueued/completed counters), the launcher layout (per-node torchrun files, per-rank files, one srun
``--label`` file per node, one Ray driver log), gzip, ANSI colours, hard-wrapped lines, another date and zone; the
tracebacks carry no times in every variant. ``diagnose`` must name the same category and culprits and its own
verifier must accept it, and the verifier must reject the same wrong conclusions, whatever the presentation.

The only expectations that depend on the presentation are those the presentation itself cannot carry (see
:func:`expected`): torch <= 2.2 logs no enqueued/completed counters (a fabric hang cannot be shown) and no process
group on its watchdog lines (rank 0's later SeqNum cannot be compared with the others'), a single Ray
driver log cannot miss one node's file, and it does not show which node went silent.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.tools.diagnosis_models import Diagnosis
from debug_training_logs.tools.diagnosis_result import build_diagnosis
from debug_training_logs.verify import Conclusion, verify_with_evidence
from fixtures.failure_scenarios import STORIES, Story, Variant, write_variant

VARIANTS: dict[str, Variant] = {
    "torch2.10-torchrun-per-node": {},
    "torch2.1-srun-label": {"torch": "2.1", "launcher": "srun"},
    "torch2.2-torchrun": {"torch": "2.2"},
    "torch2.3-gz": {"torch": "2.3", "compress": True},
    "torch2.4-ray-driver-ansi": {"torch": "2.4", "launcher": "ray", "ansi": True},
    "torch2.5-srun-label": {"torch": "2.5", "launcher": "srun"},
    "torch2.7-per-rank-files": {"torch": "2.7", "per_rank_files": True},
    "torch2.10-wrapped-ansi-gz": {"compress": True, "ansi": True, "wrap_rank": 2},
    "torch2.14-per-rank-files-gz": {"torch": "2.14", "per_rank_files": True, "compress": True},
    "torch2.14-leap-day-utc+9": {"torch": "2.14", "date": "2028-02-29", "utc_offset_hours": 9},
}
"""Presentation variants (``JobSpec`` overrides). A scenario that fixes a field (``fabric_old_torch`` is torch 2.2,
``address_in_use`` is srun) keeps it."""


def expected(story: Story) -> tuple[str, list[int]] | None:
    """The verdict ``story`` must get as rendered (None: the presentation cannot express the scenario)."""
    ray = story.spec.launcher == "ray"
    old_torch = story.spec.torch in ("2.1", "2.2")
    if story.category == "gpu_fabric" and old_torch:
        return "nccl_timeout_unattributed", []  # no enqueued/completed counters: fabric cannot be shown
    if story.category == "collective_mismatch" and old_torch:
        return "nccl_timeout_unattributed", []  # no PG label on the lines: rank 0's SeqNum cannot be compared
    if ray and story.missing:
        return None  # one driver log holds every rank: no node's file can be missing
    if ray and story.category == "node_failure":
        return "node_failure", []  # one file for every node: which node went silent is not shown (cautious)
    return story.category, story.culprits


def supported_alternatives(story: Story) -> Iterator[tuple[str, list[int]]]:
    """Less specific conclusions the evidence also supports (the verifier must accept them too)."""
    if story.category in ("cuda_oom", "cuda_error"):
        yield "rank_crash", story.culprits  # a crash is a crash, whatever raised it
    if story.category in ("gpu_fabric", "nccl_timeout_unattributed"):
        yield "nccl_timeout_unattributed", []  # cautious: nothing singles out a rank


def wrong_conclusions(story: Story, want: tuple[str, list[int]]) -> Iterator[tuple[str, list[int], dict[str, Any]]]:
    """Conclusions the evidence contradicts, whatever the presentation."""
    if story.category == "no_failure":
        yield "rank_crash", [6], {}
        yield "data_loading_stall", [3], {}
        return
    yield "no_failure", [], {}
    world = story.spec.nodes * story.spec.gpus_per_node
    present = [r for r in range(world) if r not in story.missing]
    if story.culprits:
        other = next(r for r in present if r not in story.culprits)
        yield story.category, [other], {}
    if story.missing:
        yield "incomplete_evidence", story.missing, {}
    if want[0] == "nccl_timeout_unattributed":
        yield "gpu_fabric", [], {}
    if story.category in ("gpu_fabric", "nccl_timeout_unattributed", "collective_mismatch"):
        yield "data_loading_stall", [1], {}  # a rank waiting inside the collective is a victim, not a straggler
    if want[0] == "collective_mismatch":
        yield "nccl_timeout_unattributed", [], {}


_CACHE: dict[tuple[str, str], tuple[Story, JobEvidence, Path, Diagnosis]] = {}
_TMP = Path(tempfile.mkdtemp(prefix="invariance-"))


def run(scenario: str, variant: str) -> tuple[Story, JobEvidence, Path, Diagnosis]:
    key = (scenario, variant)
    if key not in _CACHE:
        dest = _TMP / scenario / variant
        story = write_variant(scenario, dest, VARIANTS[variant])
        logs = dest / "logs"
        ev = gather_evidence(find_sources(logs))
        _CACHE[key] = (story, ev, logs, build_diagnosis(ev))
    return _CACHE[key]


CASES = [(s, v) for s in sorted(STORIES) for v in VARIANTS]


@pytest.mark.parametrize(("scenario", "variant"), CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_same_verdict_under_every_presentation(scenario: str, variant: str) -> None:
    story, ev, logs, d = run(scenario, variant)
    want = expected(story)
    if want is None:
        pytest.skip(f"{variant} cannot express {scenario}")
    failed = [(c.rule, c.status, c.detail) for c in d.verification.checks if not c.passed]
    assert (d.verdict.category, d.verdict.culprit_ranks) == want, (d.summary, d.verdict.blocked)
    assert d.verification.accepted and not d.verdict.blocked, failed
    assert sorted(d.verdict.missing_ranks) == sorted(story.missing)
    for category, culprits in supported_alternatives(story):
        ok = Conclusion(logs_dir=str(logs), category=category, culprit_ranks=culprits)  # type: ignore[arg-type]
        v = verify_with_evidence(ok, ev)
        assert v.accepted, (category, culprits, v.summary)
    for category, culprits, extra in wrong_conclusions(story, want):
        c = Conclusion(logs_dir=str(logs), category=category, culprit_ranks=culprits, **extra)  # type: ignore[arg-type]
        v = verify_with_evidence(c, ev)
        assert not v.accepted, (category, culprits, v.summary)


def test_matrix_size() -> None:
    """The closing note quotes this number: scenarios x variants."""
    assert len(STORIES) >= 20 and len(VARIANTS) >= 10
    assert len(CASES) == len(STORIES) * len(VARIANTS)
