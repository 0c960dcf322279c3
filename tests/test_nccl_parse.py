"""The torch ProcessGroupNCCL parser on single lines: every wording 2.0-2.14, every prefix a real log puts first."""

from __future__ import annotations

import re

import pytest

from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_patterns as tnp
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats import torch_nccl_wraps as tnw

WORK = "WorkNCCL(SeqNum=4118, OpType=ALLREDUCE, NumelIn=94371840, NumelOut=94371840, Timeout(ms)=1800000)"
PG10 = "[PG ID 0 PG GUID 0(default_pg) Rank 2]"
H10 = "[rank2]:[E521 08:02:12.386831038 ProcessGroupNCCL.cpp:{}] "


def parsed(line: str) -> tnt.Parsed:
    p = tn.parse_line(line)
    assert p is not None, line
    return p


def test_timeout_line_every_header_style() -> None:
    msg = (
        f"[Rank 2] Watchdog caught collective operation timeout: {WORK} ran for 1800099 milliseconds before timing out."
    )
    p = parsed(H10.format(689) + msg)
    assert p.header is not None and p.header.style == "c10_2.4+"
    assert (p.header.month, p.header.day, p.header.hms, p.header.severity) == (5, 21, "08:02:12", "E")
    assert p.global_rank == 2
    ev = p.event
    assert isinstance(ev, tnt.WatchdogTimeout)
    assert ev.work == tnt.Work(4118, "ALLREDUCE", 94371840, 94371840, None, 1800000)
    assert ev.ran_for_ms == 1800099 and ev.work_rank == 2 and ev.pg is None and not ev.wait_path
    p23 = parsed("[rank14]:[E ProcessGroupNCCL.cpp:565] " + msg)
    assert p23.header is not None and p23.header.style == "c10_2.2-2.3" and p23.header.hms is None
    assert p23.global_rank == 14
    p21 = parsed(
        "[E ProcessGroupNCCL.cpp:475] " + msg.replace(WORK, "WorkNCCL(SeqNum=9, OpType=BROADCAST, Timeout(ms)=600000)")
    )
    assert p21.header is not None and p21.header.style == "c10_<=2.1" and p21.global_rank is None
    assert isinstance(p21.event, tnt.WatchdogTimeout) and p21.event.work.numel_in is None
    p20 = parsed(
        "[E ProcessGroupNCCL.cpp:475] [Rank 3] Caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=ALLGATHER, TensorShape=[1024, 16], Timeout(ms)=60000) ran for 60012 milliseconds before timing out."
    )
    assert isinstance(p20.event, tnt.WatchdogTimeout) and p20.event.wait_path
    assert p20.event.work.tensor_shape == "1024, 16"
    glog = parsed("E1121 10:22:33.123456  1234 ProcessGroupNCCL.cpp:616] " + msg)
    assert glog.header is not None and glog.header.style == "glog" and (glog.header.month, glog.header.day) == (11, 21)


@pytest.mark.parametrize(
    ("mmdd", "month", "day"), [("703", 7, 3), ("1121", 11, 21), ("0521", 5, 21), ("521", 5, 21), ("101", 1, 1)]
)
def test_month_day_without_zero_padding(mmdd: str, month: int, day: int) -> None:
    p = parsed(f"[rank0]:[E{mmdd} 23:59:59.000000001 ProcessGroupNCCL.cpp:2303] {PG10}  failure detected by watchdog "
               "at work sequence id: 5 PG status: last enqueued work: 5, last completed work: 4")  # fmt: skip
    assert p.header is not None and (p.header.month, p.header.day) == (month, day)


def test_monotonic_fraction_is_not_a_time() -> None:
    a = parsed(H10.format(689).replace("386831038", "734120958") + f"[Rank 2] Watchdog caught collective operation "
               f"timeout: {WORK} ran for 1 milliseconds before timing out.")  # fmt: skip
    b = parsed(H10.format(689).replace("386831038", "208845311") + f"[Rank 2] Watchdog caught collective operation "
               f"timeout: {WORK} ran for 1 milliseconds before timing out.")  # fmt: skip
    assert tn.wall_time(a.header) == tn.wall_time(b.header) == (5, 21, "08:02:12")


@pytest.mark.parametrize(
    ("prefix", "pg_id", "pg_name", "desc", "pg_rank", "style"),
    [
        ("[Rank 4] ", None, None, None, 4, "rank"),
        ("[PG 2 Rank 6] ", None, "2", None, 6, "name"),
        ("[PG 0 (default_pg) Rank 5] ", None, "0", "default_pg", 5, "name"),
        ("[PG ID 0 PG GUID 0(default_pg) Rank 6] ", "0", "0", "default_pg", 6, "guid"),
        ("[PG ID 2 PG GUID 2 Rank 1] ", "2", "2", None, 1, "guid"),
        ("[PG ID 9 PG GUID 57(EXPERT_MODEL_PARALLEL_GROUP) Rank 3] ", "9", "57", "EXPERT_MODEL_PARALLEL_GROUP", 3, "guid"),
        ("[PG ID 5 PG GUID 7e41c09a2b58f3d6e1a94c07b835de2f6a1c9b40 Rank 2] ", "5",
         "7e41c09a2b58f3d6e1a94c07b835de2f6a1c9b40", None, 2, "guid"),
        ("[PG ID 7 PG GUID 3(my group (v2) [x]) Rank 0] ", "7", "3", "my group (v2) [x]", 0, "guid"),
    ],
)  # fmt: skip
def test_pg_prefix_styles(prefix: str, pg_id: str | None, pg_name: str | None, desc: str | None, pg_rank: int,
                          style: str) -> None:  # fmt: skip
    line = f"[rank9]:[E0521 08:02:12.000000001 ProcessGroupNCCL.cpp:1] {prefix}First PG on this rank to signal dumping."
    ev = parsed(line).event
    assert isinstance(ev, tnt.FirstToDump) and ev.pg is not None
    assert (ev.pg.style, ev.pg.pg_id, ev.pg.pg_name, ev.pg.pg_desc, ev.pg.pg_rank) == (
        style,
        pg_id,
        pg_name,
        desc,
        pg_rank,
    )


def test_torch_2_3_pg_number_is_a_uid() -> None:
    p = parsed("[rank5]:[E ProcessGroupNCCL.cpp:1537] [PG 2 Rank 6] Timeout at NCCL work: 3, last enqueued NCCL work: "
               "3, last completed NCCL work: 2.")  # fmt: skip
    ev = p.event
    assert isinstance(ev, tnt.StatusLine) and ev.pg is not None
    assert (ev.pg.style, ev.pg.pg_id, ev.pg.pg_name, ev.pg.key) == ("uid", "2", None, "2")


@pytest.mark.parametrize(
    ("message", "family", "seq", "e", "c"),
    [
        (f"{PG10}  failure detected by watchdog at work sequence id: 318274 PG status: last enqueued work: 318274, "
         "last completed work: 318273", "failure_detected", 318274, 318274, 318273),
        ("[PG 0 (default_pg) Rank 5] Exception (either an error or timeout) detected by watchdog at work: 3, last "
         "enqueued NCCL work: 3, last completed NCCL work: 2.", "exception_detected", 3, 3, 2),
        ("[PG 0 Rank 5] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed NCCL work: 2.",
         "timeout_at", 3, 3, 2),
        ("[PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 1 PG status: last "
         "enqueued work: -1, last completed work: -1", "failure_detected", 1, -1, -1),
    ],
)  # fmt: skip
def test_status_line_families(message: str, family: str, seq: int, e: int, c: int) -> None:
    ev = parsed(H10.format(2303) + message).event
    assert isinstance(ev, tnt.StatusLine)
    assert (ev.family, ev.seq, ev.last_enqueued, ev.last_completed) == (family, seq, e, c)
    assert ev.pg is not None


TAIL = ("This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order "
        "of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. "
        "Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the "
        "communications library (e.g. NCCL), etc. ")  # fmt: skip


@pytest.mark.parametrize(
    ("message", "origin", "src", "family"),
    [
        ("Received a timeout signal from this local rank and will start to dump the debug info. Last enqueued NCCL "
         "work: 5, last completed NCCL work: 4.", "local", None, "2.3"),
        ("Received a global timeout from another rank and will start to dump the debug info. Last enqueued NCCL work: "
         "4, last completed NCCL work: 4.", "remote", None, "2.3"),
        ("Received a dump signal from this local rank and will start to dump the debug info. Last enqueued NCCL work: "
         "5, last completed NCCL work: 4.", "local", None, "2.4"),
        ("Received a global dump signal from rank 11, and will start to dump the debug info. Last enqueued NCCL work: "
         "4, last completed NCCL work: 4.", "remote", 11, "2.4"),
        ("Received a dump signal due to a collective timeout from this local rank and we will try our best to dump "
         "the debug info. Last enqueued NCCL work: 5, last completed NCCL work: 4." + TAIL, "local", None, "2.5+"),
        ("Received a dump signal due to a collective timeout from  rank 11 and we will try our best to dump the debug "
         "info. Last enqueued NCCL work: 4, last completed NCCL work: 4." + TAIL, "remote", 11, "2.5+"),
        ("Received a dump signal due to a collective timeout from  rank -1 and we will try our best to dump the debug "
         "info. Last enqueued NCCL work: 4, last completed NCCL work: 4." + TAIL, "remote", -1, "2.5+"),
    ],
)  # fmt: skip
def test_dump_signal_every_version(message: str, origin: str, src: int | None, family: str) -> None:
    ev = parsed(H10.format(1914) + PG10 + " " + message).event
    assert isinstance(ev, tnt.DumpSignal)
    assert (ev.origin, ev.from_rank, ev.family) == (origin, src, family)
    assert ev.pg is not None and ev.pg.pg_rank == 2


def test_observed_first_and_fatal_lines() -> None:
    obs = parsed(H10.format(1849) + PG10 + " Observed flight recorder dump signal from another rank via TCPStore.")
    assert isinstance(obs.event, tnt.DumpObserved) and obs.event.family == "2.5+"
    obs24 = parsed(H10.format(1313) + "[PG 0 (default_pg) Rank 2] First PG on this rank detecting the dump signal "
                   "through tcpstore.")  # fmt: skip
    assert isinstance(obs24.event, tnt.DumpObserved) and obs24.event.family == "2.4"
    first = parsed(H10.format(2636) + PG10 + " First PG on this rank to signal dumping.")
    assert isinstance(first.event, tnt.FirstToDump) and first.event.family == "2.7+"
    first24 = parsed(H10.format(1688) + "[PG 0 (default_pg) Rank 2] First watchdog to set the dump signal.")
    assert isinstance(first24.event, tnt.FirstToDump) and first24.event.family == "2.4"
    fatal = parsed(H10.format(1660).replace("[E", "[F") + PG10 + " " + PG10 + " Terminating the process after "
                   "attempting to dump debug info, due to collective timeout or exception.")  # fmt: skip
    assert isinstance(fatal.event, tnt.FatalTerminate) and fatal.event.reason == "collective timeout or exception"
    assert fatal.header is not None and fatal.header.severity == "F"
    hang = parsed(H10.format(1) + PG10 + " Terminating the process after attempting to dump debug info, due to "
                  "ProcessGroupNCCL watchdog hang.")  # fmt: skip
    assert isinstance(hang.event, tnt.FatalTerminate) and hang.event.reason == "ProcessGroupNCCL watchdog hang"


def test_teardown_terminated_heartbeat_blocking_and_exit_lines() -> None:
    t = parsed(H10.format(1899) + PG10 + " Process group watchdog thread terminated with exception: [Rank 0] "
               f"Watchdog caught collective operation timeout: {WORK} ran for 1800099 milliseconds before timing out.")  # fmt: skip
    ev = t.event
    assert isinstance(ev, tnt.WatchdogTerminated) and ev.wording == "Process group" and not ev.headerless
    assert ev.embedded is not None and ev.embedded.work.seq == 4118 and ev.pg is not None and ev.pg.pg_rank == 2
    old = parsed("[rank3]:[E ProcessGroupNCCL.cpp:1182] [Rank 3] NCCL watchdog thread terminated with exception: "
                 f"[Rank 3] Watchdog caught collective operation timeout: {WORK} ran for 1800099 milliseconds before "
                 "timing out.")  # fmt: skip
    assert isinstance(old.event, tnt.WatchdogTerminated) and old.event.wording == "NCCL"
    what = parsed(f"  what():  {PG10} Process group watchdog thread terminated with exception: [Rank 2] Watchdog caught "
                  f"collective operation timeout: {WORK} ran for 1800099 milliseconds before timing out.")  # fmt: skip
    assert isinstance(what.event, tnt.WatchdogTerminated) and what.event.headerless and what.header is None
    stuck = parsed(H10.format(1743) + PG10 + " ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
                   "progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API hang")  # fmt: skip
    assert isinstance(stuck.event, tnt.HeartbeatKill) and stuck.event.seconds == 480
    hb = parsed(H10.format(1) + "[PG 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping "
                "debug info. workMetaList_.size()=1")  # fmt: skip
    assert isinstance(hb.event, tnt.HeartbeatKill) and hb.event.kind == "heartbeat_timed_out"
    for tail in (" timed out in blocking wait (TORCH_NCCL_BLOCKING_WAIT=1).", " timed out in blocking wait."):
        b = parsed(H10.format(756) + f"[Rank 1] Work {WORK}{tail}")
        assert isinstance(b.event, tnt.BlockingWaitTimeout) and b.event.work.seq == 4118 and b.event.work_rank == 1
    for text, kind in (("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                        "subsequent GPU operations might run on corrupted/incomplete data.", "some_failed"),
                       ("To avoid data inconsistency, we are taking the entire process down.", "take_down")):  # fmt: skip
        td = parsed(H10.format(684) + "[Rank 2] " + text)
        assert isinstance(td.event, tnt.Teardown) and td.event.kind == kind
    x = parsed(H10.format(1).replace("[E", "[F") + "[PG 0 (default_pg) Rank 2] ProcessGroupNCCL's watchdog detected a "
               "dump signal from rank 11 and notified the current rank. This is most likely caused by ...")  # fmt: skip
    assert isinstance(x.event, tnt.WatchdogExitMessage) and x.event.from_rank == 11


def test_child_failed_rows() -> None:
    assert parsed("  rank      : 13 (local_rank: 5)").event == tnt.ChildFailureRank(13, 5)
    assert parsed("  exitcode  : -6 (pid: 23455)").event == tnt.ChildFailureExit(-6, 23455, None)
    assert parsed("  exitcode  : -6 (pid: 23455)  (SIGABRT)").event == tnt.ChildFailureExit(-6, 23455, "SIGABRT")
    assert parsed("  traceback : Signal 6 (SIGABRT) received by PID 23455").event == tnt.ChildFailureSignal(
        "SIGABRT", 23455
    )


STATUS = f"{PG10}  failure detected by watchdog at work sequence id: 4118 PG status: last enqueued work: 4118, last completed work: 4117"


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "(RayTrainWorker pid=481552, ip=10.20.3.17) ",
        "(MegatronPolicyWorker[rank=12] pid=481552, ip=10.20.3.17) ",
        "\x1b[36m(RayTrainWorker pid=2291, ip=10.20.3.17)\x1b[0m ",
        " 3: ",
        "12: ",
        "[gpunode07:2]:",
        "llama-multinode.cn-g017 [stderr] ",
        "[51207] ",
        "[2023-11-14 07:12:45] ",
        "09:41:27.318 ",
        "Epoch 0:  24%|██▍       | 2398/10000 [31:07<1:38:41, 1.28it/s]\r",
    ],
)
def test_header_found_anywhere(prefix: str) -> None:
    p = parsed(prefix + H10.format(2303) + STATUS)
    assert p.global_rank == 2
    assert isinstance(p.event, tnt.StatusLine) and p.event.seq == 4118


def test_stale_pg_local_rank_is_never_the_global_rank() -> None:
    # rank 13 is PG rank 6 of its DP group, but WorkNCCL's cached static says [Rank 1] (its TP rank)
    p = parsed("[rank13]:[E521 08:02:12.1 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation "
               f"timeout: {WORK} ran for 1800099 milliseconds before timing out.")  # fmt: skip
    assert p.global_rank == 13
    assert isinstance(p.event, tnt.WatchdogTimeout) and p.event.work_rank == 1
    # no [rankN]: at all: the [Rank N] still never becomes a global rank
    q = parsed(f"[E ProcessGroupNCCL.cpp:475] [Rank 6] Watchdog caught collective operation timeout: {WORK} ran for 1 "
               "milliseconds before timing out.")  # fmt: skip
    assert q.global_rank is None


def test_hard_wrapped_status_line_is_recognised_and_joins() -> None:
    full = H10.format(2303) + STATUS
    for width in (80, 120, 150):
        pieces = [full[k : k + width] for k in range(0, len(full), width)]
        assert all(tn.parse_line(p) is None for p in pieces)
        assert tnw.starts_new_record(pieces[0])
        assert all(not tnw.starts_new_record(p) for p in pieces[1:])
        candidates = [p for p in pieces if any(nd in p for nd in tnp.NEEDLES)]
        assert candidates and all(tnw.looks_cut(p) in ("head", "tail") for p in candidates)
        ev = parsed(tnw.join_wrapped(pieces)).event
        assert isinstance(ev, tnt.StatusLine) and (ev.seq, ev.last_enqueued, ev.last_completed) == (4118, 4118, 4117)
    # the second half alone is a tail
    assert tnw.looks_cut("18, last completed work: 4117") == "tail"
    assert tnw.starts_new_record(H10.format(1) + "x")


def test_needles_select_every_message_and_no_noise() -> None:
    messages = [
        f"[Rank 2] Watchdog caught collective operation timeout: {WORK} ran for 1 milliseconds before timing out.",
        STATUS,
        "[PG 0 Rank 5] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed NCCL work: 2.",
        "Observed flight recorder dump signal from another rank via TCPStore.",
        "First PG on this rank to signal dumping.",
        "First watchdog to set the dump signal.",
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress",
        "Terminating the process after attempting to dump debug info, due to collective timeout or exception.",
        "  rank      : 13 (local_rank: 5)",
        "  exitcode  : -6 (pid: 23455)",
        f"[Rank 1] Work {WORK} timed out in blocking wait.",
    ]
    for m in messages:
        assert any(n in m for n in tnp.NEEDLES), m
    noise = [
        "[NeMo I 2026-05-21 07:00:05 exp_manager:396] Experiments will be logged at /results",
        "gpu-a01:23450:23962 [0] NCCL INFO comm 0x55d3c8a0 rank 0 nranks 16 cudaDev 0 busId 18000 - Init COMPLETE",
        "[rank3]: WARNING:urllib3.connectionpool:Retrying (Retry(total=2)) after connection broken by "
        "'ProtocolError('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))': /v1/objects/x",
        "Epoch 0:  12%|█         | 1200/10000 [28:00<3:52:11, 0.71it/s, v_num=0, reduced_train_loss=2.000]",
    ]
    for m in noise:
        assert not any(n in m for n in tnp.NEEDLES), m
    # needles are plain literals (the scan escapes them)
    assert all(re.escape(n) and n == n.strip("\n") for n in tnp.NEEDLES)


def test_clean_shutdown_watchdog_lines_are_not_unparsed_noise() -> None:
    line = (
        "[rank0]:[I1107 23:59:01.000000001 ProcessGroupNCCL.cpp:1522] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process "
    )
    line += "group watchdog thread terminated normally"
    assert tn.parse_line(line) is None and tn.is_benign(line)
    odd = (
        "[rank0]:[E1107 23:59:01.000000001 ProcessGroupNCCL.cpp:1999] [PG ID 0 PG GUID 0(default_pg) Rank 0] watchdog "
    )
    odd += "saw something new"
    assert not tn.is_benign(odd) and tn.is_watchdog_like(odd)


def test_an_absurdly_long_number_is_no_field_and_no_crash() -> None:
    """Found by the fuzz suite: int() refuses more than 4,300 digits; such a run is never read as a SeqNum."""
    huge = "9" * 5005
    line = (
        f"[rank0]:[E521 08:02:12.1 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by "
        f"watchdog at work sequence id: {huge} PG status: last enqueued work: {huge}, last completed work: 1"
    )
    assert tn.parse_line(line) is None
    tnw.looks_cut(line)
    tn.is_watchdog_like(line)
