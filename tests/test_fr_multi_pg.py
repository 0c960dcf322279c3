"""Real flight-recorder dumps of Megatron-shaped multi-PG jobs (fixtures/real_fr, made by
scripts/make_real_fr_fixtures.py with real torch 2.14 / 2.13 on CPU/gloo): each group's stuck collective, the
wavefront across groups, the ranks the dumps accuse, and the verdict of ``analyze`` on the dumps alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from debug_training_logs.analysis import fr_dumps
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.nccl_state_table import nccl_state_table
from debug_training_logs.verify import Conclusion, verify

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real_fr"
SHAPES = ("gil_hold", "one_pg", "two_pgs", "missing_dump", "per_node_json")


def _truth(shape: str) -> dict:  # type: ignore[type-arg]
    return json.loads((FIXTURES / shape / "truth.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_dumps_accuse_exactly_the_injected_ranks(shape: str) -> None:
    truth = _truth(shape)["expect"]
    facts = fr_dumps.gather(None, fr_dir=FIXTURES / shape / "fr")
    acc = facts.accused()
    assert (sorted(acc.culprits), sorted(acc.suspects)) == (truth["culprits"], truth["suspects"])
    assert facts.no_dump == truth.get("no_dump", [])
    assert not facts.refused
    # the groups that stalled first wait for them; every other missing rank already waits elsewhere
    roots = [g for g in facts.stuck_groups if g.roots]
    assert roots and roots == facts.stuck_groups[: len(roots)]
    assert {r for g in roots for r in g.roots} == set(truth["culprits"]) | set(truth["suspects"])
    for g in facts.stuck_groups[len(roots) :]:
        assert g.awaited and set(g.explained) == set(g.awaited)


def test_gil_holder_the_tp_group_it_never_joined_stalled_first() -> None:
    facts = fr_dumps.gather(None, fr_dir=FIXTURES / "gil_hold" / "fr")
    assert facts.world == list(range(16)) and "default_pg" in facts.world_evidence
    first = facts.stuck_groups[0]
    assert (first.desc, first.ranks, first.never_joined, first.roots) == (
        "TENSOR_MODEL_PARALLEL_GROUP",
        [8, 9],
        [9],
        [9],
    )
    assert first.stuck is not None and (first.stuck.op, first.stuck.input_sizes, first.stuck.dtypes) == (
        "all_reduce", [[8]], ["Float"]
    )  # fmt: skip
    assert first.waiting_ranks == [8] and first.order == 0
    # its TP peer 8 misses the groups it would have reached next: a consequence, explained by the TP wait
    later = {g.desc: g for g in facts.stuck_groups if 8 in g.never_joined}
    assert later and all("TENSOR_MODEL_PARALLEL_GROUP" in g.explained[8] for g in later.values())
    # rank 9's recorded stack of its last call is shown; gloo never moves an entry past 'scheduled'
    assert first.last_calls[9][0].startswith("last call: all_reduce seq 3") and "completed" in first.last_calls[9][0]
    assert any("make_real_fr_fixtures.py" in f for f in first.last_calls[9][1:])
    # FlightRecorderHook's c10d: copies were dropped, its pg_config (global ranks) read
    assert all(d.hook_duplicates > 0 for d in facts.dumps)


def test_two_faulty_ranks_in_two_groups_are_both_named() -> None:
    facts = fr_dumps.gather(None, fr_dir=FIXTURES / "two_pgs" / "fr")
    held = {g.desc for g in facts.stuck_groups if 3 in g.roots} | {g.desc for g in facts.stuck_groups if 12 in g.roots}
    assert "EXPERT_MODEL_PARALLEL_GROUP" in held and "TENSOR_MODEL_PARALLEL_GROUP" in held
    assert facts.accused().how == "never_joined" and facts.culprits == ({3, 12}, "never_joined")


def test_a_rank_skipping_its_ep_group_is_told_from_the_peers_waiting_for_it() -> None:
    # rank 5 skips the dispatch and combine and waits in the DP all_reduce; its EP peers wait in the dispatch for it
    # and so never join the DP all_reduce: program order (dispatch before DP on every other rank) decides who is the
    # cause, not the time each entered
    facts = fr_dumps.gather(None, fr_dir=FIXTURES / "one_pg" / "fr")
    ep = next(g for g in facts.stuck_groups if g.roots)
    assert (ep.desc, ep.roots, ep.never_joined) == ("EXPERT_MODEL_PARALLEL_GROUP", [5], [5])
    dp = next(g for g in facts.stuck_groups if g.desc == "DATA_PARALLEL_GROUP_WITH_CP" and 5 in g.ranks)
    assert 5 not in dp.never_joined and dp.roots == [] and set(dp.explained) == set(dp.never_joined)


def test_a_missing_dump_is_named_a_suspect_never_dropped() -> None:
    facts = fr_dumps.gather(None, fr_dir=FIXTURES / "missing_dump" / "fr")
    assert facts.no_dump == [6] and facts.world == list(range(8))
    tp = facts.stuck_groups[0]
    assert (tp.ranks, tp.no_dump, tp.never_joined, tp.roots) == ([6, 7], [6], [], [6])
    assert facts.accused().suspects == frozenset({6}) and not facts.accused().culprits


def test_gloo_dumps_without_pg_config_json_per_node_directories_torch_2_13() -> None:
    facts = fr_dumps.gather(None, fr_dir=FIXTURES / "per_node_json" / "fr")
    assert {d.fmt for d in facts.dumps} == {"json"} and len(facts.dumps) == 8
    assert {d.file.split("/")[1] for d in facts.dumps} == {"node0", "node1"}
    assert all(not d.pg_ranks and d.unnamed_pg_ranks is not None for d in facts.dumps)  # gloo names no group
    ep = facts.stuck_groups[0]
    assert not ep.members_known and (ep.desc, ep.ranks, ep.roots) == ("EXPERT_MODEL_PARALLEL_GROUP", [0, 2], [2])


@pytest.mark.parametrize("shape", SHAPES)
def test_analyze_with_dumps_alone_names_them_and_verifies(shape: str, tmp_path: Path) -> None:
    truth = _truth(shape)["expect"]
    d = diagnose(str(FIXTURES / shape / "fr"))
    assert d.verdict.category == "nccl_timeout_unattributed"
    assert (d.verdict.culprit_ranks, d.verdict.suspect_ranks) == (truth["culprits"], truth["suspects"])
    assert d.verification.accepted and {c.rule for c in d.verification.checks} == {
        "dump_coverage", "dump_accusation", "dump_citations"
    }  # fmt: skip
    assert d.coverage.world_size == _truth(shape)["world_size"] and d.coverage.missing_ranks == ",".join(
        map(str, truth.get("no_dump", []))
    )
    assert d.root_cause_chain and all(".json" not in c.source or ":" in c.source for c in d.root_cause_chain)
    # the same with the dumps given as fr_dir beside an empty logs directory
    (tmp_path / "logs").mkdir()
    d2 = diagnose(str(tmp_path / "logs"), fr_dir=str(FIXTURES / shape / "fr"))
    assert (d2.verdict.culprit_ranks, d2.verdict.suspect_ranks) == (truth["culprits"], truth["suspects"])


def test_the_verifier_rejects_a_conclusion_the_dumps_contradict(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "gil_hold" / "fr", job)
    wrong = verify(Conclusion(logs_dir=str(job), category="nccl_timeout_unattributed", culprit_ranks=[8]))
    assert not wrong.accepted
    failed = {c.rule: c.detail for c in wrong.checks if not c.passed}
    assert "dump_accusation" in failed and "[9]" in failed["dump_accusation"]
    why = verify(Conclusion(logs_dir=str(job), category="data_loading_stall", culprit_ranks=[9]))
    assert not why.accepted and any("not why" in c.detail for c in why.checks)
    right = verify(Conclusion(logs_dir=str(job), category="nccl_timeout_unattributed", culprit_ranks=[9]))
    assert right.accepted
    shutil.copytree(FIXTURES / "missing_dump" / "fr", tmp_path / "nodump")
    six = verify(Conclusion(logs_dir=str(tmp_path / "nodump"), category="nccl_timeout_unattributed", culprit_ranks=[6]))
    assert not six.accepted and any("wrote no dump" in c.detail for c in six.checks if c.rule == "dump_coverage")


def test_nccl_tool_on_dumps_alone_reads_like_the_peer_table(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    t = nccl_state_table(str(tmp_path / "logs"), fr_dir=str(FIXTURES / "two_pgs" / "fr"))
    fr = t.flight_recorder
    assert fr is not None and fr.culprit_ranks == [3, 12] and fr.never_joined == [3, 12]
    assert t.straggler_ranks == [3, 12] and "3,12 never joined" in t.summary
    rows = fr.process_groups
    assert rows[0].order == 0 and rows[0].waits_for in ("3", "12")
    assert all(r.op and r.input_sizes and r.dtype for r in rows)  # PG, desc, op, size, dtype, missing ranks
    assert {r.waits_for for r in rows if r.waits_for} == {"3", "12"}
    assert fr.detail[0].startswith("#0 PG ") and "waits for" in fr.detail[0]
    dump_rows = [r for r in t.rows if r.source == "dump"]
    assert {r.rank for r in dump_rows if "never joined" in r.facts[0]} == {3, 12}
