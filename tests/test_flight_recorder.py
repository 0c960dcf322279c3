"""Flight-recorder dumps: the restricted unpickler (plain data only, hostile pickles refused), the typed view, and
the cross-rank comparison on real torch 2.13 dumps (fixtures/real_torch/stall_fr: pickle; mismatch: JSON)."""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import shutil
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import fr_dumps
from debug_training_logs.formats import flight_recorder as fr
from debug_training_logs.formats import safe_pickle
from debug_training_logs.logs.discovery import one_walk
from debug_training_logs.tools.diagnose import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real_torch"

PLAIN: dict[str, Any] = {
    "version": "2.10",
    "pg_status": {"0": {"last_enqueued_collective": 7, "last_completed_collective": 6}},
    "entries": [
        {"collective_seq_id": 7, "process_group": ("0", "default_pg"), "state": "scheduled", "input_sizes": [[1, 8]],
         "time_created_ns": 1795458754193294032, "retired": False, "timeout_ms": None, "ratio": 0.5},
    ],
}  # fmt: skip


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_plain_data_round_trips_at_every_protocol(protocol: int) -> None:
    assert fr.load_pickle(pickle.dumps(PLAIN, protocol=protocol)) == PLAIN


@pytest.mark.parametrize("protocol", [0, 1])
def test_old_protocols_without_bytes_read(protocol: int) -> None:
    data = {"a": [1, 2.5, None, True, False, (1, "x")], "b": {"c": -3}}
    assert fr.load_pickle(pickle.dumps(data, protocol=protocol)) == data


def test_optimized_pickles_with_shared_memo_read() -> None:
    shared = [1, 2, 3]
    data = pickletools.optimize(pickle.dumps({"x": shared, "y": shared}, protocol=2))
    assert fr.load_pickle(data) == {"x": [1, 2, 3], "y": [1, 2, 3]}


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


class _Obj:
    def __init__(self) -> None:
        self.x = 1


def _hostile(tmp_path: Path) -> dict[str, bytes]:
    marker = tmp_path / "pwned"
    return {
        "reduce": pickle.dumps({"entries": [_Exploit(marker)]}, protocol=4),
        "reduce_p2": pickle.dumps(_Exploit(marker), protocol=2),
        "object_build": pickle.dumps(_Obj(), protocol=2),
        "global_eval": b"cbuiltins\neval\n(S'1+1'\ntR.",
        "bytes_p0": pickle.dumps(b"raw", protocol=0),  # protocol 0 bytes go through _codecs.encode: a GLOBAL
        "set": pickle.dumps({1, 2}, protocol=4),
        "persistent_id": b"\x80\x02Pabc\n.",
        "ext_code": b"\x80\x02\x82\x01.",
    }


@pytest.mark.parametrize(
    "kind", ["reduce", "reduce_p2", "object_build", "global_eval", "bytes_p0", "set", "persistent_id", "ext_code"]
)
def test_hostile_pickles_are_refused_and_nothing_runs(tmp_path: Path, kind: str) -> None:
    data = _hostile(tmp_path)[kind]
    with pytest.raises(fr.DumpRefused) as e:
        fr.load_pickle(data)
    assert "opcode" in str(e.value) or "pickle" in str(e.value)
    assert not (tmp_path / "pwned").exists()


def test_reference_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # 30 levels, each a list holding the level below twice: 2**30 values from a few hundred bytes
    ops = [b"\x80\x02", b"]q\x00"]  # EMPTY_LIST, BINPUT 0
    for i in range(1, 31):
        ops.append(b"0](h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"eq" + bytes([i]))  # POP, then a new level
    ops.append(b".")
    monkeypatch.setattr(safe_pickle, "MAX_VALUES", 100_000)  # the real cap behaves the same, only slower to reach
    with pytest.raises(fr.DumpRefused, match="expands to more than"):
        fr.load_pickle(b"".join(ops))


def test_deep_nesting_and_size_cap_and_damage_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    deep: Any = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(fr.DumpRefused, match="nests deeper"):
        fr.load_pickle(pickle.dumps(deep, protocol=2))
    monkeypatch.setattr(safe_pickle, "MAX_DUMP_BYTES", 100)
    with pytest.raises(fr.DumpRefused, match="cap"):
        fr.load_pickle(pickle.dumps(list(range(1000)), protocol=2))
    monkeypatch.undo()
    good = pickle.dumps(PLAIN, protocol=2)
    with pytest.raises(fr.DumpRefused):
        fr.load_pickle(good[: len(good) // 2])
    with pytest.raises(fr.DumpRefused):
        fr.load_dump_bytes(b"GARBAGE\x00\x01")
    with pytest.raises(fr.DumpRefused, match="unhashable"):
        fr.load_pickle(b"\x80\x02}](K\x01e]s.")  # a list as a dict key
    with pytest.raises(fr.DumpRefused, match="'entries' list"):
        fr.to_dump([1, 2], rank=0)


def test_json_dump_reads_with_string_numbers() -> None:
    d = fr.parse_dump(
        json.dumps({"version": "2.10", "pg_status": {"0": {"last_enqueued_collective": "7"}}, "entries": []}).encode(),
        rank=3,
    )
    assert (d.rank, d.fmt, d.version, d.pg_status["0"].last_enqueued) == (3, "json", "2.10", 7)


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("comm_lib_trace_rank_12", 12),
        ("nccl_trace_rank_3", 3),
        ("job42_comm_lib_trace_rank_7.json", 7),
        ("comm_lib_trace_rank_x", None),
        ("train.log", None),
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert fr.rank_from_name(name) == rank


# ---------------------------------------------------------------------------------------------------------------------
# Real dumps


def test_real_pickle_dumps_name_the_rank_that_never_joined() -> None:
    facts = fr_dumps.gather(FIXTURES / "stall_fr" / "logs")
    assert {d.rank for d in facts.dumps} == {0, 1, 2, 3} and not facts.refused
    assert facts.versions == ["2.10"] and {d.fmt for d in facts.dumps} == {"pickle"}
    [g] = facts.groups
    assert (g.desc, g.ranks, g.waiting_op, g.waiting_ranks, g.never_joined) == (
        "default_pg", [0, 1, 2, 3], "all_reduce", [0, 2, 3], [1]
    )  # fmt: skip
    assert g.states[1].last_scheduled is not None and g.waiting_seq == g.states[1].last_scheduled + 1
    assert any("all_reduce" in f for f in g.stuck_frames)
    assert facts.culprits == ({1}, "never_joined")
    assert facts.contradicts({1}) is None
    assert facts.contradicts({0}) is not None and "[1]" in facts.contradicts({0})  # type: ignore[operator]


def test_real_json_dumps_show_the_op_mismatch() -> None:
    facts = fr_dumps.gather(FIXTURES / "mismatch" / "logs")
    assert {d.fmt for d in facts.dumps} == {"json"} and facts.versions == ["2.10"]
    [g] = facts.groups
    [m] = g.mismatches
    assert (m.field, m.odd, m.majority) == ("op", {3: "broadcast"}, "all_reduce")
    assert facts.culprits == ({3}, "mismatch")


def test_dumps_found_in_fr_dir_and_next_to_logs_and_hostile_one_reported(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "stall_fr" / "logs", job / "logs")
    shutil.copytree(FIXTURES / "stall_fr" / "fr", job / "traces")  # a sibling directory
    (job / "logs" / "comm_lib_trace_rank_9").write_bytes(pickle.dumps(_Exploit(tmp_path / "pwned"), protocol=4))
    facts = fr_dumps.gather(job / "logs")
    assert sorted(d.rank for d in facts.dumps) == [0, 1, 2, 3]
    assert [(r.file, "opcode" in r.reason) for r in facts.refused] == [("comm_lib_trace_rank_9", True)]
    assert not (tmp_path / "pwned").exists()
    explicit = fr_dumps.gather(None, fr_dir=FIXTURES / "stall_fr" / "fr")
    assert sorted(d.rank for d in explicit.dumps) == [0, 1, 2, 3]
    assert all(d.file.startswith("fr/") for d in explicit.dumps)


def test_a_rank_without_a_dump_is_not_called_a_straggler(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "stall_fr" / "fr", tmp_path / "fr")
    (tmp_path / "fr" / "comm_lib_trace_rank_1").unlink()
    facts = fr_dumps.gather(None, fr_dir=tmp_path / "fr")
    [g] = facts.groups
    assert g.no_dump == [1] and g.never_joined == []


# ---------------------------------------------------------------------------------------------------------------------
# Where dumps are found: from the one walk of each tree


@pytest.mark.parametrize(
    "name", ["train.log", "rank3.log", "_dump_12", "rank0.json", "x.PKL", "a7.pickle", "nccl_trace_rank_"]
)
def test_a_file_whose_name_cannot_be_a_dump_never_is(name: str) -> None:
    """Whatever its bytes: so the finder reads the first bytes only of files named like a dump."""
    heads = [pickle.dumps(PLAIN, protocol=4)[: fr.HEAD_BYTES], json.dumps(PLAIN).encode()[: fr.HEAD_BYTES], b"text"]
    if not fr.named_like_dump(name):
        assert all(fr.dump_rank(name, h) is None for h in heads)
    else:
        assert any(fr.dump_rank(name, h) is not None for h in heads)


def _walked_dumps(logs: Path | None, fr_dir: Path | None) -> list[tuple[int, str, Path]]:
    """The dumps a walk of their own finds (how the finder found them before it took the logs' one walk): every
    regular file not through a symlink, hidden directories left out, whose name and first bytes make a dump."""
    found: dict[Path, tuple[int, str, Path]] = {}

    def walk(root: Path, shown_base: Path) -> None:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                p = Path(dirpath) / name
                if p.is_symlink() or not p.is_file() or p in found:
                    continue
                rank = fr.dump_rank(name, p.read_bytes()[: fr.HEAD_BYTES])
                if rank is not None:
                    shown = p.relative_to(shown_base).as_posix() if p.is_relative_to(shown_base) else str(p)
                    found[p] = (rank, shown, p)

    if fr_dir is not None:
        walk(fr_dir.resolve(), fr_dir.resolve().parent)
    if logs is not None:
        logs = logs.resolve()
        walk(logs, logs)
        for sib in ("fr", "traces", "trace", "flight_recorder", "fr_dumps", "dumps", "nccl_trace"):
            if (logs.parent / sib).is_dir() and logs.parent / sib != logs:
                walk(logs.parent / sib, logs.parent)
    return sorted(found.values(), key=lambda d: (d[0], d[1]))


def test_the_dumps_found_from_the_logs_walk_are_the_ones_a_walk_of_their_own_finds(tmp_path: Path) -> None:
    """Dumps under every name torch and users give them, at every depth, in an explicit directory inside the logs, in
    a sibling, beside a hidden directory, a link, an archive and log files named like dumps."""
    job = tmp_path / "job"
    logs = job / "logs"
    dump = pickle.dumps(PLAIN, protocol=4)
    text = json.dumps(PLAIN).encode()
    files = {
        "logs/node-0.log": b"[rank0]: step 1\n",
        "logs/worker_1": b"a log whose name ends in a rank\n",
        "logs/deep/er/nccl_trace_rank_2": dump,
        "logs/deep/_dump_3": dump,
        "logs/rank4.json": text,
        "logs/notes.json": text,  # no rank in its name
        "logs/.cache/nccl_trace_rank_5": dump,  # hidden directory: not looked in
        "logs/.nccl_trace_rank_6": dump,  # a hidden file is
        "logs/fr_here/comm_lib_trace_rank_7": dump,  # also passed as fr_dir: found once
        "logs/old.tar.gz": b"\x1f\x8b" + b"\0" * 30,
        "traces/comm_lib_trace_rank_8.pkl": dump,
        "fr/rank9.json": text,
        "elsewhere/nccl_trace_rank_10": dump,
    }
    for rel, data in files.items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(data)
    (logs / "nccl_trace_rank_11").symlink_to(job / "elsewhere" / "nccl_trace_rank_10")  # a link: not followed
    for logs_dir, fr_dir in [(logs, None), (logs, logs / "fr_here"), (None, job / "elsewhere"), (logs, job / "fr")]:
        with one_walk():
            got = [(d.rank, d.shown, d.path) for d in fr_dumps.find_dumps(logs_dir, fr_dir)]
        assert got == _walked_dumps(logs_dir, fr_dir)
    assert {r for r, _s, _p in _walked_dumps(logs, logs / "fr_here")} == {2, 3, 4, 6, 7, 8, 9}


def test_a_tool_call_walks_each_tree_once(tmp_path: Path, walked: list[str]) -> None:
    """``diagnose`` with flight-recorder dumps: its cache key and its reading (the logs' scan, the dumps, the attempts)
    share one walk of the logs tree and of the dumps' directory."""
    shutil.copytree(FIXTURES / "stall_fr" / "logs", tmp_path / "logs")
    shutil.copytree(FIXTURES / "stall_fr" / "fr", tmp_path / "fr")
    with one_walk():
        d = diagnose(str(tmp_path / "logs"), fr_dir=str(tmp_path / "fr"), history=False)
    assert d.verdict.culprit_ranks == [1]
    assert sorted(walked) == ["fr", "logs"]
