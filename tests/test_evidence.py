"""The evidence model itself: per-rank states, last activity, time intervals and their causal ordering, warnings."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_states import (
    fabric_evidence,
    last_activity,
    precedes_symptom,
    rank_state_groups,
    rank_states,
)
from debug_training_logs.analysis.evidence_triggers import is_warning
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.ranges import format_ranges

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@cache
def evidence(name: str) -> JobEvidence:
    return gather_evidence(find_sources(FIXTURES / name / "logs"))


def groups(name: str) -> dict[str, str]:
    return {state: format_ranges(ranks) for state, ranks, _why, _line in rank_state_groups(rank_states(evidence(name)))}


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("cuda_oom", {"crashed": "3", "torn_down": "0-2,4-7", "waiting": "8-15"}),
        ("loader_stall", {"waiting": "0-4,6-7", "stuck": "5"}),
        ("watchdog_hang", {"watchdog_killed": "4", "torn_down": "0-3,5-7", "waiting": "8-15"}),
        ("clean_noisy_warnings", {"finished": "0-15"}),
        ("missing_node_identical", {"waiting": "0-3", "absent": "4-7"}),
        ("dataloader_crash", {"crashed": "6", "torn_down": "0-5,7", "waiting": "8-15"}),
    ],
)
def test_rank_states(name: str, want: dict[str, str]) -> None:
    assert groups(name) == want


def test_a_crash_names_its_exception_and_module() -> None:
    st = rank_states(evidence("dataloader_crash"))[6]
    assert st.state == "crashed" and st.module == "the data loader"
    assert st.exit_code == 1  # torchrun's ChildFailedError: rank 6, exitcode 1
    assert st.exception is not None and st.exception.what == "lhotse.ais.batch_loader.AISBatchLoaderError"
    assert st.line is not None and st.line.file == "error-48213-0.out"


def test_last_activity_is_each_ranks_latest_line() -> None:
    ev = evidence("loader_stall")
    last = last_activity(ev)
    assert set(last) == set(range(8))
    for per_signal in ev.worker.last_by_rank.values():  # never earlier than any signal's last hit of the rank
        for r, h in per_signal.items():
            assert (last[r].when or h.when) >= (h.when or last[r].when) or last[r].file == h.file
    assert ev.worker.last_by_rank["io_timeout"][5].rank == 5  # each signal's last hit per rank is kept


def test_an_untimed_line_is_an_interval_and_the_state_orders_it() -> None:
    """rank 3's OOM is the last thing in its own file: no timed line after it bounds it, so the time bounds cannot
    order it against the first timeout; its rank's state (crashed, never in the collective) does."""
    ev = evidence("oom_untimed_tail")
    st = rank_states(ev)[3]
    assert st.crash is not None and st.crash.category == "cuda_oom"
    h = st.crash.hit
    assert h.file == "rank-3.log" and h.time is None and h.latest is None  # nothing timed follows it in its file
    assert precedes_symptom(ev, h) is True
    waiting = next(r for r, s in rank_states(ev).items() if s.state == "waiting")
    assert rank_states(ev)[waiting].line is not None


def test_fabric_needs_counters_and_positive_evidence() -> None:
    assert fabric_evidence(evidence("fabric_hang"))[0]
    shown, why = fabric_evidence(evidence("fabric_old_torch"))
    assert not shown and "counters" in why


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("[rank3]: WARNING:urllib3.connectionpool:Retrying (Retry(total=4)) after ConnectionResetError(104)", True),
        ("[rank9]: [NeMo W 2026-05-21 07:22:43 nemo_logging:349] RuntimeError: skipping a cut", True),
        ("2026-05-21 07:00:00,123 - lhotse.ais - WARNING - ReadTimeout: read timed out", True),
        ("(RayTrainWorker pid=23450, ip=10.52.4.1) [rank3]: WARNING:lhotse:retrying 1/3", True),
        (" 5: [rank5]: ValueError: WARNING level too high", False),
        ("[rank13]: KeyError: 'duration'", False),
    ],
)
def test_warnings_are_told_from_exceptions_by_level_and_retry(text: str, warning: bool) -> None:
    assert is_warning(text) is warning


def test_a_peers_gloo_error_is_a_consequence_not_a_crash() -> None:
    """Real torch 2.13 run (CPU/gloo): rank 3's DataLoader ValueError reaches the top; the ranks that then lose their
    gloo peer raise 'Connection closed by peer' and exit 1: torn down by the failure, not crashed of their own."""
    ev = gather_evidence(find_sources(FIXTURES / "real_torch" / "loader_exception"))
    states = rank_states(ev)
    assert states[3].state == "crashed" and states[3].exception is not None
    assert states[3].exception.what == "ValueError"
    # the ChildFailedError table says the agent SIGTERMed it (exit -15) while it raised the peer's gloo error
    assert states[0].state == "torn_down" and states[0].exit_code == -15 and "peer" in states[0].why
    assert all(s.state != "crashed" for r, s in states.items() if r != 3)


DATA_JOBS = sorted(d.parent.name for d in FIXTURES.glob("*/logs") if d.is_dir())


@pytest.mark.parametrize("name", DATA_JOBS)
def test_data_hits_of_many_ranks_from_one_pass_equal_the_look_up_per_rank(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``data_hits`` of many ranks filters each signal's hits once; the same hits in the same order as looking each
    rank up, for every rank set a verdict or rule asks (all ranks, some, with duplicates, with and without a bound)."""
    from debug_training_logs.analysis import evidence_triggers as evidence_mod

    ev = evidence(name)
    everyone = sorted(ev.worker.ranks)
    hits = [h for s in evidence_mod._DATA_SIGNALS for h in ev.worker.hits(s) if h.earliest is not None]
    bounds = [None, *(sorted(h.earliest for h in hits)[len(hits) // 2 : len(hits) // 2 + 1])]
    asks = [everyone, everyone[::2], everyone[:12] + everyone[:3], list(reversed(everyone))]
    for ranks in asks:
        for until in bounds:
            with monkeypatch.context() as m:
                m.setattr(evidence_mod, "DATA_HITS_BY_RANK", 0)  # one pass whenever the ranks are distinct
                got = evidence_mod.data_hits(ev, ranks, until)
                m.setattr(evidence_mod, "DATA_HITS_BY_RANK", 1 << 30)  # every rank looked up
                want = evidence_mod.data_hits(ev, ranks, until)
            assert [(h.signal, h.file, h.line) for h in got] == [(h.signal, h.file, h.line) for h in want], ranks
