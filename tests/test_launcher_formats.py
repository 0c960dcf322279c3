"""formats/torchrun.py and formats/gloo.py as format matrices: every message x every way a line reaches a log.

The messages are the ones real torch 2.13 wrote into fixtures/real_torch (and, for the agent, the logging styles of
older torch); the presentations are the prefixes launchers and collectors put in front (torchrun ``--tee``
``[default0]:``, the worker ``[rankN]:`` hook, ``srun --label``, a host tag, ANSI colour) and CRLF line ends.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.formats import gloo, torchrun

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real_torch"

PREFIXES = ["", "[default1]:", "[default1]:[rank3]: ", "3: ", "gpu-node-1: ", "\x1b[32m[default1]:\x1b[0m"]
ENDINGS = ["", "\r"]

AGENT_STYLES = {
    # torch 2.2+ glog-style logger of torch.distributed.elastic
    "glog": "E1123 18:31:27.778000 19906 torch/distributed/elastic/multiprocessing/api.py:1002] {msg}",
    # torch 2.0-2.1 python logging default format
    "logging": "[2024-01-05 10:22:33,123] torch.distributed.elastic.multiprocessing.api: [ERROR] {msg}",
    # plain logging basicConfig
    "basic": "ERROR:torch.distributed.elastic.multiprocessing.api:{msg}",
}

AGENT_CASES: list[tuple[str, object]] = [
    (
        "failed (exitcode: -9) local_rank: 1 (pid: 22202) of binary: /opt/venv/bin/python3",
        torchrun.WorkerFailed(-9, 1, 22202),
    ),
    ("failed (exitcode: 1) local_rank: 0 (pid: 311) of binary: /usr/bin/python", torchrun.WorkerFailed(1, 0, 311)),
    ("Sending process 20084 closing signal SIGTERM", torchrun.SendingSignal(20084, "SIGTERM")),
    (
        "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
        torchrun.RestartDecision(3, 3),
    ),
    ("  restart_count=1", torchrun.RendezvousResult(1)),
    ("[default] Starting worker group", torchrun.GroupState("starting")),
    ("[default] Stopping worker group", torchrun.GroupState("stopping")),
    (
        "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish",
        torchrun.GroupState("succeeded"),
    ),
    (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
        "failed. See inner exception for details.",
        torchrun.RendezvousError(
            "RendezvousConnectionError", "The connection to the C10d store has failed. See inner exception for details."
        ),
    ),
    (
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
        torchrun.RendezvousError("RendezvousClosedError", ""),
    ),
    (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29511, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        torchrun.StoreListenFailed(29511, "EADDRINUSE"),
    ),
]


@pytest.mark.parametrize(
    ("case", "style", "prefix", "ending"),
    list(itertools.product(range(len(AGENT_CASES)), AGENT_STYLES, PREFIXES, ENDINGS)),
)
def test_agent_line_matrix(case: int, style: str, prefix: str, ending: str) -> None:
    msg, expected = AGENT_CASES[case]
    line = prefix + AGENT_STYLES[style].format(msg=msg) + ending
    if style != "glog" and msg.startswith("  restart_count"):
        line = prefix + msg + ending  # the rendezvous result block continues without a logger header
    assert torchrun.parse_line(torchrun_clean(line)) == expected


def torchrun_clean(line: str) -> str:
    from debug_training_logs.formats.prefixes import strip_ansi

    return strip_ansi(line).rstrip("\r")


def test_signal_names() -> None:
    assert torchrun.signal_name(-9) == "SIGKILL"
    assert torchrun.signal_name(-15) == "SIGTERM"
    assert torchrun.signal_name(-6) == "SIGABRT"
    assert torchrun.signal_name(1) is None
    assert torchrun.signal_name(-200) == "signal 200"


def test_unrelated_lines_are_not_launcher_events() -> None:
    for line in [
        "step 3 loss 1.2",
        "[default0]:[rank0]:     dist.all_reduce(p.grad)",
        "exitcode is not a field here: failed to do the thing",
        "Rendezvous is fine",
        # a trainer's own start-up line ending in the restart count is not the agent's rendezvous result
        "2026-12-07 01:55:15.661 | INFO | train:run:276 - [rank1] init rank=1 world_size=16 restart_count=0",
    ]:
        assert torchrun.parse_line(line) is None


# ---------------------------------------------------------------------------------------------------------------------
# ChildFailedError tables


def table(prefix: str, rows: list[tuple[int, int, int, int, str | None, bool]], host: str = "gpu-node-1") -> list[str]:
    """A ChildFailedError summary as torch 2.13 prints it, with a prefix on every line."""
    out = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "/opt/job/train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
    ]
    failures = [r for r in rows if not r[5]]
    root = [r for r in rows if r[5]]
    for block, entries in (("failures", failures), ("root", root)):
        if block == "root":
            out += [
                "------------------------------------------------------------",
                "Root Cause (first observed failure):",
            ]
        if block == "failures" and not entries:
            out.append("  <NO_OTHER_FAILURES>")
        for i, (rank, local, code, pid, sig, _) in enumerate(entries):
            tail = f"  ({sig})" if sig else " "
            tb = f"Signal {-code} ({sig}) received by PID {pid}" if sig else "To enable traceback see: https://x"
            out += [
                f"[{i + (0 if block == 'root' else 1)}]:",
                "  time      : 2026-11-23_18:31:26",
                f"  host      : {host}",
                f"  rank      : {rank} (local_rank: {local})",
                f"  exitcode  : {code} (pid: {pid}){tail}",
                "  error_file: <N/A>",
                f"  traceback : {tb}",
            ]
    out.append("============================================================")
    return [prefix + ln for ln in out]


ROWS = [(2, 0, -15, 4001, "SIGTERM", False), (3, 1, -9, 4002, "SIGKILL", True)]


@pytest.mark.parametrize("prefix", ["", "1: ", "gpu-node-1: ", "[agent] ", "[default0]: ", "[default0]:", "1:"])
def test_child_failed_table_matrix(prefix: str) -> None:
    lines = list(enumerate(["noise before", *table(prefix, ROWS), "after"], start=1))
    [t] = torchrun.parse_child_failed_tables(lines)
    assert t.entrypoint == "/opt/job/train.py"
    got = [(f.rank, f.local_rank, f.exitcode, f.pid, f.signal, f.root_cause, f.host) for f in t.failures]
    assert got == [
        (2, 0, -15, 4001, "SIGTERM", False, "gpu-node-1"),
        (3, 1, -9, 4002, "SIGKILL", True, "gpu-node-1"),
    ]
    assert t.failures[0].torn_down and not t.failures[1].torn_down
    assert lines[t.failures[1].line - 1][1].endswith("rank      : 3 (local_rank: 1)")


def test_two_agents_interleaved_in_one_file_keep_their_own_tables() -> None:
    a = table("0: ", [(0, 0, 1, 10, None, True)], host="gpu-node-0")
    b = table("1: ", [(2, 0, -15, 20, "SIGTERM", False), (3, 1, 1, 21, None, True)], host="gpu-node-1")
    merged = [x for pair in itertools.zip_longest(a, b) for x in pair if x is not None]
    tables = torchrun.parse_child_failed_tables(list(enumerate(merged, start=1)))
    assert sorted((f.host, f.rank, f.exitcode) for t in tables for f in t.failures) == [
        ("gpu-node-0", 0, 1),
        ("gpu-node-1", 2, -15),
        ("gpu-node-1", 3, 1),
    ]


def test_a_table_without_other_failures() -> None:
    [t] = torchrun.parse_child_failed_tables(list(enumerate(table("", [(5, 1, 1, 77, None, True)]), start=1)))
    assert [(f.rank, f.root_cause) for f in t.failures] == [(5, True)]


# ---------------------------------------------------------------------------------------------------------------------
# Benign lines


BENIGN_CASES = {
    "c10d_ipv6_bind": "[W1123 18:31:00.000000000 socket.cpp:464] [c10d] The server socket has failed to bind to "
    "[::]:29500 (errno: 98 - Address already in use).",
    "c10d_ipv6_lookup": "[W1123 18:26:44.001556692 socket.cpp:764] [c10d] The IPv6 network addresses of "
    "(gpu-node-0, 33403) cannot be retrieved (gai error: -2 - Name or service not known).",
    "store_peer_closed": "[I1123 18:31:00.762361848 TCPStoreLibUvBackend.cpp:130] [c10d - debug] Remote peer closed "
    "the connection.",
    "omp_threads_banner": "W1123 18:30:43.811000 19073 torch/distributed/run.py:874] Setting OMP_NUM_THREADS "
    "environment variable for each process to be 1 in default, to avoid your system being overloaded",
}


@pytest.mark.parametrize(("name", "prefix"), list(itertools.product(BENIGN_CASES, PREFIXES[:5])))
def test_benign_lines_are_named(name: str, prefix: str) -> None:
    b = torchrun.benign(prefix + BENIGN_CASES[name])
    assert b is not None and b.name == name and b.why


def test_a_real_bind_failure_is_not_benign() -> None:
    line = (
        "[E1123 18:31:00.1 socket.cpp:502] [c10d] The server socket has failed to listen on any local network "
        "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE"
    )
    assert torchrun.benign(line) is None
    assert torchrun.benign("[c10d] The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - ...)") is None


# ---------------------------------------------------------------------------------------------------------------------
# gloo and DETAIL


GLOO_CASES: list[tuple[str, gloo.GlooError]] = [
    (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
        "waiting 4000ms for recv operation to complete",
        gloo.GlooError("timeout", op="recv", timeout_ms=4000, source="unbound_buffer.cc:78"),
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 1800000ms "
        "for send operation to complete",
        gloo.GlooError("timeout", op="send", timeout_ms=1800000, source="unbound_buffer.cc:129"),
    ),
    (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
        "peer [10.1.2.3]:37608. This is typically caused by a remote worker crashing. Check the logs of the remote "
        "worker before reporting an error. GLHF!",
        gloo.GlooError("peer_closed", peer="10.1.2.3:37608", source="pair.cc:553"),
    ),
    (
        "RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
        "pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[10.1.2.4]:19366",
        gloo.GlooError("full_mesh", source="pair.cc:152"),
    ),
    (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= "
        "op.nbytes. 32 vs 4",
        gloo.GlooError("size_mismatch", sent=32, expected=4, source="pair.cc:446"),
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error [10.1.2.5]:44112: Connection "
        "reset by peer",
        gloo.GlooError("peer_reset", peer="10.1.2.5:44112", source="pair.cc:598"),
    ),
]


@pytest.mark.parametrize(
    ("case", "prefix", "ending"), list(itertools.product(range(len(GLOO_CASES)), PREFIXES, ENDINGS))
)
def test_gloo_matrix(case: int, prefix: str, ending: str) -> None:
    text, expected = GLOO_CASES[case]
    got = gloo.parse_line(torchrun_clean(prefix + text + ending))
    assert got == expected
    assert got.victim == (expected.kind != "size_mismatch")


def fingerprint(seq: int, op: str, shape: str = "[1, 8]") -> str:
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape={shape}, TensorDtypes=Float, "
        "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), "
        "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))"
    )


@pytest.mark.parametrize(("prefix", "ending"), list(itertools.product(PREFIXES, ENDINGS)))
def test_detail_mismatch_matrix(prefix: str, ending: str) -> None:
    line = (
        f"RuntimeError: Detected mismatch between collectives on ranks. Rank 5 is running collective: "
        f"{fingerprint(12, 'ALLREDUCE')}, but Rank 7 is running collective: {fingerprint(12, 'BROADCAST', '[4]')}."
        "Collectives differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST  Tensor Tensor shapes: "
        "[1, 8]vs [4]"
    )
    m = gloo.parse_line(torchrun_clean(prefix + line + ending))
    assert isinstance(m, gloo.CollectiveMismatch)
    assert (m.first.rank, m.first.op, m.first.seq, m.first.shapes, m.first.dtypes) == (
        5,
        "ALLREDUCE",
        12,
        "[1, 8]",
        "Float",
    )
    assert m.second is not None and (m.second.rank, m.second.op, m.second.shapes) == (7, "BROADCAST", "[4]")
    assert m.differs_in == ["op", "shapes"]
    assert m.aspects is not None and m.aspects.startswith("Op type")


def test_a_cut_fingerprint_is_not_guessed() -> None:
    line = "Detected mismatch between collectives on ranks. Rank 5 is running collective: CollectiveFingerPrint(Seq"
    assert gloo.parse_line(line) is None


def test_every_real_gloo_and_detail_line_parses() -> None:
    """Each real fixture's gloo/DETAIL lines (selected by the needles) parse into an event: no needle hit is lost."""
    seen: set[str] = set()
    for f in sorted(FIXTURES.glob("*/logs/*")):
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            if any(n in line for n in gloo.NEEDLES):
                ev = gloo.parse_line(line)
                assert ev is not None, (f, line)
                seen.add(type(ev).__name__ + (":" + ev.kind if isinstance(ev, gloo.GlooError) else ""))
    assert seen >= {"GlooError:timeout", "GlooError:peer_closed", "GlooError:full_mesh", "CollectiveMismatch"}


@pytest.mark.parametrize("prefix", ["", "1: ", "[default0]: ", "[default0]:", "gpu-node-1: "])
@pytest.mark.parametrize("header_tail", ["", "   ", "\t"])
def test_child_failed_table_after_field_like_noise(prefix: str, header_tail: str) -> None:
    """Lines before any ChildFailedError that look like table fields, a FAILED header or a closing rule change
    nothing; the header line may end in blanks; a second table (a restart) is read on its own."""
    noise = [
        f"{prefix}  rank      : 9 (local_rank: 1)",
        f"{prefix}  exitcode  : -6 (pid: 1)",
        f"{prefix}/opt/job/other.py FAILED",
        f"{prefix}Root Cause (first observed failure):",
        f"{prefix}============================================================",
        f"{prefix}step 3 FAILEDX and FAILED mid-line",
    ]
    first = [ln.replace("train.py FAILED", "train.py FAILED" + header_tail) for ln in table(prefix, ROWS)]
    second = table(prefix, [(7, 3, 1, 4010, None, True)])
    lines = list(enumerate([*noise, *first, *noise, *second], start=1))
    t1, t2 = torchrun.parse_child_failed_tables(lines)
    assert t1.entrypoint == t2.entrypoint == "/opt/job/train.py"
    assert t1.line == len(noise) + 1 and t2.line == 2 * len(noise) + len(first) + 1
    assert [(f.rank, f.exitcode, f.root_cause) for f in t1.failures] == [(2, -15, False), (3, -9, True)]
    assert [(f.rank, f.exitcode, f.signal, f.root_cause) for f in t2.failures] == [(7, 1, None, True)]


@pytest.mark.parametrize("name", ["default", "trainer", "my-app.x", "_w"])
@pytest.mark.parametrize("local", [0, 3, 12, 107])
def test_a_tee_prefix_gives_its_whole_local_rank(name: str, local: int) -> None:
    """torchrun ``--tee`` / ``--role`` prefixes (``[default3]:``, ``[trainer12]:``): every digit is the local rank,
    whatever the role's name, in the file's local-to-global map and for a line without ``[rankN]:``."""
    from debug_training_logs.analysis import launcher

    lines = [(1, f"[{name}{local}]:[rank{local + 40}]: step 1"), (2, f"[{name}{local}]: Traceback (most recent call)")]
    parsed = launcher.parse_lines(lines, [], "node-0.log")
    assert parsed[0] == {local: local + 40}
    assert launcher._rank_of(lines[1][1], parsed[0]) == local + 40
