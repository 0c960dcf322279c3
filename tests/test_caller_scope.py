"""What the caller knows and the logs do not say reaches diagnose and verify_conclusion alike: the world size from
the launch command (logs that never state it) and which attempt of a restarted job a conclusion is about. A
conclusion diagnose returns carries both, so verify_conclusion given that conclusion judges the same evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_nccl_partial_evidence import _status, _timeout, _write

from debug_training_logs.errors import UserInputError
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.nccl_state_table import nccl_state_table
from debug_training_logs.verify import Conclusion, verify

RESTART = Path(__file__).resolve().parent.parent / "fixtures" / "real_torch" / "restart" / "logs"


def _silent_rank_job(d: Path, world: int = 4, silent: int = 3) -> Path:
    """Per-rank logs that never state the world size; every rank but ``silent`` times out in the same collective."""
    for r in range(world):
        pad = [f"[rank{r}]:[W1107 23:00:{i:02d}.000000001 socket.cpp:412] noise {i}" for i in range(45)]
        lines = pad + ([] if r == silent else [_timeout(r, 57), _status(r, 57, 57, 56)])
        _write(d, f"rank-{r}.log", lines)
    return d


def test_diagnose_names_no_culprit_until_the_world_size_is_known(tmp_path: Path) -> None:
    d = _silent_rank_job(tmp_path / "job")
    unknown = diagnose(str(d))
    assert unknown.coverage.world_size is None
    assert unknown.verdict.culprit_ranks == [], unknown.verdict
    given = diagnose(str(d), world_size=4)
    assert given.coverage.world_size == 4 and "given by the caller: 4" in given.coverage.world_size_evidence
    assert given.verdict.culprit_ranks == [3], given.verdict
    assert given.verification.accepted and given.conclusion.world_size == 4


def test_a_larger_given_world_makes_the_evidence_incomplete(tmp_path: Path) -> None:
    d = _silent_rank_job(tmp_path / "job")
    wrong = diagnose(str(d), world_size=8)
    assert wrong.verdict.culprit_ranks == []
    assert wrong.verdict.category in ("incomplete_evidence", "nccl_timeout_unattributed"), wrong.verdict
    assert wrong.coverage.missing_ranks == "4-7"


def test_verify_judges_with_the_world_size_it_is_given(tmp_path: Path) -> None:
    d = _silent_rank_job(tmp_path / "job")
    named = diagnose(str(d), world_size=4).conclusion
    assert verify(named).accepted
    # the same claim without the world size: the straggler is named from ranks whose world is unknown
    without = named.model_copy(update={"world_size": None})
    assert not verify(without).accepted
    # and the world size is the caller's, not the tool argument of another call: 8 leaves ranks 4-7 unread
    assert not verify(named.model_copy(update={"world_size": 8})).accepted


@pytest.mark.parametrize("attempt", [0, 1])
def test_diagnose_and_verify_agree_on_an_attempt(attempt: int) -> None:
    d = diagnose(str(RESTART), attempt=attempt)
    assert d.attempt == attempt and d.conclusion.attempt == attempt
    assert d.verification.accepted
    assert verify(d.conclusion).accepted, [c.detail for c in verify(d.conclusion).checks if not c.passed]


def test_a_conclusion_about_one_attempt_is_not_judged_on_another() -> None:
    first, second = diagnose(str(RESTART), attempt=0), diagnose(str(RESTART), attempt=1)
    assert first.verdict.category != second.verdict.category
    # the second attempt's clean end, judged on the first (failed) attempt, is rejected
    assert not verify(second.conclusion.model_copy(update={"attempt": 0})).accepted
    assert not verify(first.conclusion.model_copy(update={"attempt": 1})).accepted


def test_an_attempt_the_logs_do_not_have_is_a_clear_error() -> None:
    c = Conclusion(logs_dir=str(RESTART), category="rank_crash", culprit_ranks=[2], attempt=7)
    with pytest.raises(UserInputError, match="attempt"):
        verify(c)


def test_the_nccl_table_says_when_it_reads_several_attempts_together(tmp_path: Path) -> None:
    """torchrun's own log dir (attempt_N/ per restart, no launcher lines). The ranks' errors in attempt_0, and the
    restart after it, show attempt 0 failed: it is the default. Without those errors (a restart for another node's
    sake) no attempt is known to have failed, so no default attempt exists; the table lists the attempts and says it
    mixed them, instead of saying nothing."""
    logs = RESTART.parent / "torchrun_logs"
    assert nccl_state_table(str(logs)).attempt == 0
    quiet = tmp_path / "torchrun_logs"
    for f in logs.rglob("*.log"):
        out = quiet / f.relative_to(logs)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(t for t in f.read_text().splitlines(True) if not t.startswith("[rank")))
    mixed = nccl_state_table(str(quiet))
    assert [a.attempt for a in mixed.attempts] == [0, 1] and mixed.attempt is None
    assert "reads them all together" in mixed.summary
    one = nccl_state_table(str(quiet), attempt=0)
    assert one.attempt == 0 and "attempt 0 of 2" in one.summary
