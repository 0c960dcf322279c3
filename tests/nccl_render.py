"""Renders torch ProcessGroupNCCL watchdog messages the way each torch family writes them, for the format-matrix and
partial-evidence tests.

Written from the formats (worker_log_formats.md §1 and public bug reports read as facts); every value here is our own.
One :class:`Case` = one message family x one torch family x one prefix style x one hard-wrap position, with the
fields a parser must recover.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TORCH = ("2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14")
PREFIXES = ("none", "rank", "srun", "ray", "ansi", "docker")
EXTRA_PREFIXES = ("viewer", "milabench", "tee")
"""Seen in public reports too: a log viewer's line numbers, milabench's 'host [stderr] ', accelerate's '[default3]:'."""
WRAPS = ("none", "mid_word", "first_number", "last_number", "space_lost", "indented", "cols80", "in_header")

SEQ, ENQ, DONE, TIMEOUT_MS, RAN_MS, NUMEL = 73519, 73521, 73518, 1200000, 1200418, 52428800
GLOBAL_RANK, PG_RANK, DUMP_FROM = 11, 3, 6


def _v(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def header(version: str, rank: int, src_line: int) -> str:
    """The c10 log prefix of a torch family (worker_log_formats.md §1.1)."""
    v = _v(version)
    if v <= (2, 1):
        return f"[E ProcessGroupNCCL.cpp:{src_line}] "
    if v <= (2, 3):
        return f"[rank{rank}]:[E ProcessGroupNCCL.cpp:{src_line}] "
    return f"[rank{rank}]:[E1107 23:41:09.{517203946 + src_line:09d} ProcessGroupNCCL.cpp:{src_line}] "


def pg_prefix(version: str, pg_rank: int) -> str:
    """The ProcessGroupNCCL prefix (§1.2); our PG: a data-parallel group with uid 4."""
    v = _v(version)
    if v <= (2, 2):
        return f"[Rank {pg_rank}] "
    if v == (2, 3):
        return f"[PG 4 Rank {pg_rank}] "
    if v == (2, 4):
        return f"[PG 4 (DATA_PARALLEL_GROUP) Rank {pg_rank}] "
    return f"[PG ID 4 PG GUID 9(DATA_PARALLEL_GROUP) Rank {pg_rank}] "


def work(version: str) -> str:
    if _v(version) <= (2, 0):
        return f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, Timeout(ms)={TIMEOUT_MS})"
    return f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn={NUMEL}, NumelOut={NUMEL}, Timeout(ms)={TIMEOUT_MS})"


def work_prefix(version: str, pg_rank: int) -> str:
    """WorkNCCL's own prefix: ``[Rank N]`` until 2.13, the PG prefix in 2.14."""
    return pg_prefix(version, pg_rank) if _v(version) >= (2, 14) else f"[Rank {pg_rank}] "


def timeout_msg(version: str, pg_rank: int) -> str:
    return (
        f"{work_prefix(version, pg_rank)}Watchdog caught collective operation timeout: {work(version)} ran for "
        f"{RAN_MS} milliseconds before timing out."
    )


@dataclass
class Message:
    """One message of one family as a torch family writes it, and what must be read back."""

    family: str
    text: str
    """Without any prefix; ``headered`` says whether it starts with the c10 header."""
    headered: bool
    expect: dict[str, Any]
    """Event class name and fields."""


def messages(version: str, rank: int = GLOBAL_RANK, pg_rank: int = PG_RANK) -> list[Message]:
    """Every watchdog/status/dump/terminate message this torch family writes (with our values)."""
    v = _v(version)

    def h(version: str, _rank: int, src_line: int) -> str:
        return header(version, rank, src_line)

    pg = pg_prefix(version, pg_rank)
    numel = None if v <= (2, 0) else NUMEL
    tw = {"seq": SEQ, "op_type": "ALLREDUCE", "timeout_ms": TIMEOUT_MS, "numel_in": numel}
    out = [
        Message(
            "timeout",
            h(version, GLOBAL_RANK, 632) + timeout_msg(version, pg_rank),
            True,
            {"event": "WatchdogTimeout", "ran_for_ms": RAN_MS, **tw},
        )
    ]
    if v <= (2, 0):
        out.append(
            Message(
                "timeout_wait_path",
                h(version, GLOBAL_RANK, 521)
                + f"[Rank {pg_rank}] Caught collective operation timeout: {work(version)} ran for {RAN_MS} "
                "milliseconds before timing out.",
                True,
                {"event": "WatchdogTimeout", "ran_for_ms": RAN_MS, **tw},
            )
        )
        out.append(
            Message(
                "communicator_aborted",
                f"RuntimeError: NCCL communicator was aborted on rank {pg_rank}.  Original reason for failure was: "
                + timeout_msg(version, pg_rank),
                False,
                {"event": "WatchdogTerminated", "embedded": True, **tw},
            )
        )
    else:
        tail = " (TORCH_NCCL_BLOCKING_WAIT=1)." if v <= (2, 3) else "."
        out.append(
            Message(
                "blocking_wait",
                h(version, GLOBAL_RANK, 756) + f"{work_prefix(version, pg_rank)}Work {work(version)} timed out in "
                f"blocking wait{tail}",
                True,
                {"event": "BlockingWaitTimeout", **tw},
            )
        )
    wording = "NCCL" if v <= (2, 2) else "Process group"
    term = f"{pg}{wording} watchdog thread terminated with exception: {timeout_msg(version, pg_rank)}"
    out.append(
        Message(
            "terminated",
            h(version, GLOBAL_RANK, 1414) + term,
            True,
            {"event": "WatchdogTerminated", "embedded": True, **tw},
        )
    )
    out.append(Message("what", "  what():  " + term, False, {"event": "WatchdogTerminated", "embedded": True, **tw}))
    if v >= (2, 6):
        status = (
            f"{pg} failure detected by watchdog at work sequence id: {SEQ} PG status: last enqueued work: {ENQ}, "
            f"last completed work: {DONE}"
        )
        out.append(Message("status", h(version, GLOBAL_RANK, 2303) + status, True, _status()))
    elif v >= (2, 3):
        out.append(
            Message(
                "status",
                h(version, GLOBAL_RANK, 1709)
                + f"{pg}Timeout at NCCL work: {SEQ}, last enqueued NCCL work: {ENQ}, last completed NCCL work: {DONE}.",
                True,
                _status(),
            )
        )
        if v >= (2, 4):
            out.append(
                Message(
                    "status_exception",
                    h(version, GLOBAL_RANK, 1664) + f"{pg}Exception (either an error or timeout) detected by watchdog "
                    f"at work: {SEQ}, last enqueued NCCL work: {ENQ}, last completed NCCL work: {DONE}.",
                    True,
                    _status(),
                )
            )
    ec = f"Last enqueued NCCL work: {ENQ}, last completed NCCL work: {DONE}."
    dump: dict[str, tuple[str, str]] = {}
    if v == (2, 3):
        dump = {
            "local": ("Received a timeout signal from this local rank and will start to dump the debug info. ", ""),
            "remote": ("Received a global timeout from another rank and will start to dump the debug info. ", ""),
        }
    elif v == (2, 4):
        dump = {
            "local": ("Received a dump signal from this local rank and will start to dump the debug info. ", ""),
            "remote": (
                f"Received a global dump signal from rank {DUMP_FROM}, and will start to dump the debug info. ",
                "",
            ),
        }
    elif v >= (2, 5):
        why = (
            "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the "
            "order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. "
        )
        dump = {
            "local": (
                "Received a dump signal due to a collective timeout from this local rank and we will try our best to "
                "dump the debug info. ",
                why,
            ),
            "remote": (
                f"Received a dump signal due to a collective timeout from  rank {DUMP_FROM} and we will try our best to "
                "dump the debug info. ",
                why,
            ),
        }
    for origin, (head, tail) in dump.items():
        src = DUMP_FROM if origin == "remote" and v >= (2, 4) else None
        out.append(
            Message(
                f"dump_{origin}",
                h(version, GLOBAL_RANK, 1870) + pg + head + ec + tail,
                True,
                {
                    "event": "DumpSignal",
                    "origin": origin,
                    "from_rank": src,
                    "last_enqueued": ENQ,
                    "last_completed": DONE,
                },
            )
        )
    if v >= (2, 5):
        out.append(
            Message(
                "observed",
                h(version, GLOBAL_RANK, 1806) + pg + "Observed flight recorder dump signal from another rank via "
                "TCPStore.",
                True,
                {"event": "DumpObserved"},
            )
        )
    elif v == (2, 4):
        out.append(
            Message(
                "observed",
                h(version, GLOBAL_RANK, 1280)
                + pg
                + "First PG on this rank detecting the dump signal through tcpstore.",
                True,
                {"event": "DumpObserved"},
            )
        )
    if v >= (2, 7) or v == (2, 4):
        text = "First PG on this rank to signal dumping." if v >= (2, 7) else "First watchdog to set the dump signal."
        out.append(Message("first", h(version, GLOBAL_RANK, 2103) + pg + text, True, {"event": "FirstToDump"}))
    return out


def _status() -> dict[str, Any]:
    return {"event": "StatusLine", "seq": SEQ, "last_enqueued": ENQ, "last_completed": DONE}


# ---------------------------------------------------------------------------------------------------------------------
# Prefixes and wraps


def with_prefix(style: str, text: str, headered: bool, rank: int) -> tuple[str, int | None]:
    """The physical line a launcher/collector writes, and the global rank the line itself names (None: none)."""
    own = rank if "[rank" in text else None
    if style == "none":
        return text, own
    if style == "rank":
        if own is not None:
            return text, own
        return (f"[rank{rank}]:" if headered else f"[rank{rank}]: ") + text, rank
    if style == "srun":
        return f"{rank:>2}: {text}", rank
    if style == "ray":
        return f"(MegatronPolicyWorker[rank={rank}] pid={48000 + rank}, ip=10.7.0.{rank}) {text}", rank
    if style == "ansi":
        return f"\x1b[36m(TrainWorker pid={48000 + rank})\x1b[0m \x1b[1;31m{text}\x1b[0m", own
    if style == "docker":
        return f"2026-11-07T23:41:09.{rank:06d}123Z {text}", own
    if style == "viewer":
        return f"[{80211 + rank}] {text}", own
    if style == "milabench":
        return f"llm-nodes.cn-g0{rank:02d} [stderr] {text}", own
    if style == "tee":  # the local rank, not the global one: the line names no global rank by it
        return f"[default{rank % 8}]:{text}", own
    raise ValueError(style)


_WORDS = ("ollective", "atchdog", "etected", "nqueued", "ignal", "erminated", "locking", "bserved", "ignal")


def wrap(style: str, line: str, message_at: int) -> list[str]:
    """``line`` hard-wrapped as a terminal or a paste does it; ``message_at``: where the message (after the c10
    header) starts in ``line``."""
    if style == "none":
        return [line]
    msg = line[message_at:]
    if style == "mid_word":
        k = min((msg.find(w) for w in _WORDS if msg.find(w) >= 0), default=len(msg) // 2) + 4
        return _split(line, message_at + k)
    if style in ("first_number", "last_number"):
        nums = [m for m in re.finditer(r"\d{3,}", msg)]
        if not nums:
            return _split(line, message_at + len(msg) // 2)
        m = nums[0] if style == "first_number" else nums[-1]
        return _split(line, message_at + m.start() + 2)
    if style in ("space_lost", "indented"):
        spaces = [i for i, c in enumerate(msg) if c == " "]
        k = spaces[len(spaces) // 2] if spaces else len(msg) // 2
        head, tail = line[: message_at + k], line[message_at + k + 1 :]
        return [head, ("   " + tail) if style == "indented" else tail]
    if style == "cols80":
        return [line[i : i + 80] for i in range(0, len(line), 80)]
    if style == "in_header":
        k = line.find("ProcessGroupNCCL.cpp")
        if k < 0:  # headerless messages: break inside the first bracket instead
            k = max(0, line.find("[") + 3)
        else:
            k += 9
        return _split(line, k)
    raise ValueError(style)


def _split(line: str, k: int) -> list[str]:
    k = max(1, min(k, len(line) - 1))
    return [line[:k], line[k:]]


@dataclass
class Case:
    """One matrix cell: the file's lines and what the record at ``line`` must be."""

    id: str
    version: str
    message: Message
    prefix: str
    wrap: str
    lines: list[str] = field(default_factory=list)
    line: int = 0
    """1-based physical line the record starts on."""
    rank: int | None = None


FILLER_BEFORE = (
    "[NeMo I 2026-11-07 23:21:07 nemo_logging:381] Epoch 3, global step 88213: reduced_train_loss=1.873",
    "[rank{r}]:[W1107 23:21:08.000000001 socket.cpp:412] [c10d] a warning that is none of ours",
)
FILLER_AFTER = ("Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:689 (most "
                "recent call first):", "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96")  # fmt: skip


def build_case(version: str, msg: Message, prefix: str, wrap_style: str, rank: int = GLOBAL_RANK) -> Case:
    line, own = with_prefix(prefix, msg.text, msg.headered, rank)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
    hdr = re.search(r"ProcessGroupNCCL\.cpp:\d+\] ", plain)
    at = hdr.end() if hdr else max(0, plain.find(msg.text.lstrip()[:12]))
    pieces = wrap(wrap_style, plain, at)
    if prefix == "ansi":  # colour stays on the physical lines: a code before the first piece, a reset after the last
        pieces[0] = f"\x1b[36m{pieces[0]}"
        pieces[-1] = f"{pieces[-1]}\x1b[0m"
    before = [f.format(r=rank) for f in FILLER_BEFORE]
    case = Case(f"{version}/{msg.family}/{prefix}/{wrap_style}", version, msg, prefix, wrap_style)
    case.lines = [*before, *pieces, *FILLER_AFTER]
    case.line = len(before) + 1
    case.rank = own
    return case


def all_cases(version: str, filter_: Callable[[Message], bool] = lambda m: True) -> list[Case]:
    return [build_case(version, m, p, w) for m in messages(version) if filter_(m) for p in PREFIXES for w in WRAPS]


def write_wrapped_at_80(files: list[Path], dest: Path, ranks: tuple[int, ...] = (2, 5)) -> Path:
    """Copy ``files`` into a new ``dest`` with every ProcessGroupNCCL line of ``ranks`` hard-wrapped at 80 columns,
    as a terminal paste cuts it (needles halved, numbers split)."""
    dest.mkdir()
    tags = tuple(f"[rank{r}]" for r in ranks)
    for f in files:
        out: list[str] = []
        for line in f.read_text().splitlines():
            if "ProcessGroupNCCL.cpp" in line and any(t in line for t in tags):
                out.extend(line[k : k + 80] for k in range(0, len(line), 80))
            else:
                out.append(line)
        (dest / f.name).write_text("\n".join(out) + "\n")
    return dest
