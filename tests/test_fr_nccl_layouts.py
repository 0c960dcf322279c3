"""Flight-recorder layouts only NCCL jobs write, from the simulated SPMD job of ``tests/fr_sim.py`` (format 2.9):
pg_status keyed by per-process pg ids that collide with group names, a ring buffer that kept no entry of the stuck
group, coalesced ops stuck in 'scheduled', names shared by groups of different members, size/op mismatches,
all_to_all's uneven splits, hostile fields, both pickle interpreters agreeing, and a 10,240-rank job's answer."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debug_training_logs.analysis import fr_dumps, fr_match
from debug_training_logs.analysis.fr_types import FlightRecorderFacts
from debug_training_logs.formats import flight_recorder as fr
from debug_training_logs.formats import safe_pickle
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.fr_view import summarize
from tests import fr_sim

STEP = len(fr_sim.STEP)
DP = 4  # the program index of the data-parallel all_reduce in a step


def _facts(tmp_path: Path, job: fr_sim.Job, **write: Any) -> FlightRecorderFacts:
    return fr_dumps.gather(None, fr_dir=fr_sim.write(fr_sim.run(job), tmp_path / "fr", **write))


def test_a_rank_whose_buffer_kept_no_entry_of_the_stuck_group_never_joined(tmp_path: Path) -> None:
    # rank 9 holds the GIL at step 2's DP all_reduce; its 3-entry ring buffer holds only TP and EP entries, so its
    # dump has no DP entry at all (the row without seq/op that used to read "never joined: none")
    job = fr_sim.Job(16, fr_sim.megatron(16), fr_sim.STEP, stop={9: 2 * STEP + DP}, buffer=3)
    facts = _facts(tmp_path, job)
    dp = next(g for g in facts.stuck_groups if g.desc == "DATA_PARALLEL_GROUP" and 9 in g.ranks)
    assert dp.states[9].last_scheduled is None and dp.never_joined == [9] and dp.roots == [9]
    assert facts.accused().culprits == frozenset({9})


def test_pg_status_is_read_by_pg_id_not_by_the_group_name(tmp_path: Path) -> None:
    job = fr_sim.Job(16, fr_sim.megatron(16), fr_sim.STEP, stop={3: 2 * STEP})
    raw = fr_sim.run(job)
    d = raw[2]
    names = {c["name"] for c in d["pg_config"].values()}
    assert names & set(d["pg_status"])  # some group names are also pg ids of other groups on this rank
    facts = fr_dumps.gather(None, fr_dir=fr_sim.write(raw, tmp_path / "fr"))
    tp = facts.stuck_groups[0]
    assert (tp.desc, tp.ranks, tp.never_joined) == ("TENSOR_MODEL_PARALLEL_GROUP", [2, 3], [3])
    assert tp.states[2].last_completed == tp.states[2].last_scheduled - 1  # type: ignore[operator]


def test_two_stopped_ranks_in_two_groups_and_their_consequences(tmp_path: Path) -> None:
    job = fr_sim.Job(16, fr_sim.megatron(16), fr_sim.STEP, stop={3: 2 * STEP, 12: 2 * STEP + 1})
    facts = _facts(tmp_path, job)
    assert facts.accused().culprits == frozenset({3, 12})
    assert {g.desc for g in facts.stuck_groups if g.roots} == {
        "TENSOR_MODEL_PARALLEL_GROUP",
        "EXPERT_MODEL_PARALLEL_GROUP",
    }
    later = [g for g in facts.stuck_groups if not g.roots]
    assert later and all(set(g.explained) == set(g.awaited) for g in later)


def test_a_crashed_rank_without_dump_is_a_suspect_and_the_other_fault_stays_a_culprit(tmp_path: Path) -> None:
    job = fr_sim.Job(16, fr_sim.megatron(16), fr_sim.STEP, stop={5: 2 * STEP, 12: 2 * STEP + 1}, no_dump={5})
    facts = _facts(tmp_path, job)
    acc = facts.accused()
    assert (acc.culprits, acc.suspects, facts.no_dump) == (frozenset({12}), frozenset({5}), [5])
    d = diagnose(str(tmp_path / "fr"))
    assert (d.verdict.culprit_ranks, d.verdict.suspect_ranks) == ([12], [5]) and d.verification.accepted
    assert d.coverage.missing_ranks == "5" and d.coverage.world_size == 16


def test_coalesced_ops_left_scheduled_do_not_make_a_healthy_group_stuck(tmp_path: Path) -> None:
    raw = fr_sim.run(fr_sim.Job(8, fr_sim.megatron(8), fr_sim.STEP))
    for d in raw.values():  # each DP all_reduce becomes a coalesced group: an inner op without events, then the end
        out = []
        for e in d["entries"]:
            if e["process_group"][1] == "DATA_PARALLEL_GROUP":
                out.append({**e, "state": "scheduled", "retired": False})
                e = {**e, "profiling_name": "nccl:coalesced"}
            out.append(e)
        d["entries"] = out
    facts = fr_dumps.gather(None, fr_dir=fr_sim.write(raw, tmp_path / "fr"))
    assert not facts.stuck_groups and facts.accused().how == "none"
    assert diagnose(str(tmp_path / "fr")).verdict.category == "incomplete_evidence"


def test_split_group_names_shared_by_groups_of_different_members(tmp_path: Path) -> None:
    job = fr_sim.Job(
        16, fr_sim.megatron(16), fr_sim.STEP, stop={3: 2 * STEP}, names={"TENSOR_MODEL_PARALLEL_GROUP": "tp"}
    )
    facts = _facts(tmp_path, job)
    tps = [g for g in facts.groups if g.pg == "tp"]
    assert len(tps) == 8 and all(len(g.ranks) == 2 for g in tps)
    assert facts.accused().culprits == frozenset({3})


def test_a_size_or_op_mismatch_is_named_and_all_to_all_splits_are_not(tmp_path: Path) -> None:
    sized = fr_sim.Job(8, fr_sim.megatron(8), fr_sim.STEP, sizes={(5, DP): [[16]], (6, 1): [[3]]})
    facts = _facts(tmp_path / "a", sized)
    [m] = [m for g in facts.groups for m in g.mismatches]
    assert (m.field, m.odd, m.majority) == ("input_sizes", {5: "[[16]]"}, "[[8]]")  # rank 6's all_to_all is fine
    assert facts.accused().how == "mismatch" and facts.accused().culprits == frozenset({5})
    d = diagnose(str(tmp_path / "a" / "fr"))
    assert (d.verdict.category, d.verdict.culprit_ranks, d.verification.accepted) == ("collective_mismatch", [5], True)
    op = _facts(tmp_path / "b", fr_sim.Job(8, fr_sim.megatron(8), fr_sim.STEP, ops={(2, DP): "broadcast"}))
    assert op.culprits == ({2}, "mismatch")


def test_json_layout_and_dump_named_after_any_prefix(tmp_path: Path) -> None:
    job = fr_sim.Job(8, fr_sim.megatron(8), fr_sim.STEP, stop={6: STEP})
    facts = _facts(tmp_path, job, prefix="nccl_trace_rank_", fmt="json")
    assert {d.fmt for d in facts.dumps} == {"json"} and facts.accused().culprits == frozenset({6})
    raw = fr_sim.run(job)
    twice = tmp_path / "twice"
    fr_sim.write(raw, twice, prefix="rank", fmt="json")
    for r, d in raw.items():  # the same ranks again as .pkl: each rank is read once, the other file reported
        (twice / f"rank{r}.pkl").write_bytes(pickle.dumps(d, protocol=2))
    again = fr_dumps.gather(None, fr_dir=twice)
    assert len(again.dumps) == 8 and len(again.refused) == 8 and all("second dump" in x.reason for x in again.refused)


def test_hostile_fields_are_capped_and_huge_integers_refused() -> None:
    bogus = {
        "version": "2.9",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[" + ",".join(["1"] * 2_000_000) + "]"}},
        "entries": [{"process_group": ("0", "x" * 10_000), "collective_seq_id": 1, "profiling_name": "nccl:all_reduce",
                     "input_sizes": [[1] * 1000] * 1000, "input_dtypes": ["Float"] * 1000, "frames": [{}] * 1000}],
    }  # fmt: skip
    d = fr.parse_dump(pickle.dumps(bogus, protocol=4), rank=0)
    e = d.entries[0]
    assert len(d.pg_ranks["0"]) == fr.MAX_GROUP_RANKS and len(e.pg_desc) == fr.MAX_TEXT
    assert len(e.input_sizes) == fr.MAX_TENSORS and len(e.input_sizes[0]) == fr.MAX_DIMS
    assert len(e.frames) == fr.MAX_FRAMES
    big = b"\x80\x02\x8b" + (100_000).to_bytes(4, "little") + b"\x01" * 100_000 + b"."  # LONG4 of 100 kB
    with pytest.raises(fr.DumpRefused, match="integer of"):
        fr.load_pickle(big)
    with pytest.raises(fr.DumpRefused, match=r"past the end|truncated"):
        fr.load_pickle(b"\x80\x04\x8d" + (1 << 60).to_bytes(8, "little") + b"abc.")  # BINUNICODE8 claiming 2**60


def _plain(with_bytes: bool) -> st.SearchStrategy[Any]:
    leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(
        leaf | st.binary(max_size=8) if with_bytes else leaf,  # protocol 2 pickles bytes through a GLOBAL: refused
        lambda inner: (
            st.lists(inner, max_size=5)
            | st.tuples(inner, inner)
            | st.dictionaries(st.text(max_size=5), inner, max_size=5)
        ),
        max_leaves=30,
    )


@settings(max_examples=150, deadline=None)
@given(data=st.data(), protocol=st.sampled_from([2, 3, 4, 5]))
def test_both_interpreters_read_every_plain_pickle_alike(data: st.DataObject, protocol: int) -> None:
    value = data.draw(_plain(protocol > 2))
    blob = pickle.dumps(value, protocol=protocol)
    assert safe_pickle._load_binary(blob) == safe_pickle._load_ops(blob) == value


def test_10240_ranks_answer_is_compact_and_names_the_rank() -> None:
    world = 10_240
    job = fr_sim.Job(world, fr_sim.megatron(world, tp=8, ep=8), fr_sim.STEP, steps=1, stop={4097: 1})
    raw = fr_sim.run(job)
    start = time.monotonic()
    dumps = [fr_match.trim(fr.to_dump(v, r, f"_dump_{r}")) for r, v in raw.items()]
    c = fr_match.compare(dumps)
    facts = FlightRecorderFacts(dumps, [], c.groups, ["2.9"], world, c.world, c.world_evidence, c.no_dump, c.accused)
    summary = summarize(facts)
    elapsed = time.monotonic() - start
    assert facts.accused().culprits == frozenset({4097}) and summary.world_size == world
    text = summary.model_dump_json()
    assert len(text) < 12_000, len(text)  # well inside the default 6,000-token budget (21,000 characters)
    assert elapsed < 300  # the whole pass over every rank's dump, on a loaded 2-core machine
