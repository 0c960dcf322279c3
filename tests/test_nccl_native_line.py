"""The compiled NCCL line parser (``_fields.nccl_line``) against the Python parser it shortcuts: for every line of the
torch-family x prefix x wrap matrix, hand-made variants (CRLF, colour, non-ASCII, numbers at their limits, gate words
in free text, two PG prefixes) and a seeded fuzz of mutated canonical lines, ``parse_line`` (native first) must give
exactly what ``parse_line_py`` gives. The canonical lines must be answered natively (else the test would prove
nothing)."""

from __future__ import annotations

import random

import pytest

from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_wraps as tnw
from tests import nccl_render as nr

pytestmark = pytest.mark.skipif(tn._NATIVE_LINE is None, reason="the _fields extension is not built or is disabled")

H = "[rank1021]:[E1124 03:12:45.903817264 ProcessGroupNCCL.cpp:1684] "
PG = "[PG ID 0 PG GUID 0(default_pg) Rank 1021] "
WORK = "WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=16777216, NumelOut=16777216, Timeout(ms)=1800000)"
TIMEOUT = (
    f"[Rank 1021] Watchdog caught collective operation timeout: {WORK} ran for 1800093 milliseconds before timing out."
)
ADVICE = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of "
    "collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, "
    "this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library "
    "(e.g. NCCL), etc."
)
CANONICAL = [
    H + TIMEOUT,
    H + "[Rank 1021] To avoid data inconsistency, we are taking the entire process down.",
    H + "[Rank 1021] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
    "subsequent GPU operations might run on corrupted/incomplete data.",
    H + PG + "Received a dump signal due to a collective timeout from this local rank and we will try our best to dump "
    "the debug info. Last enqueued NCCL work: 48211, last completed NCCL work: 48210." + ADVICE,
    H + PG + "Received a dump signal due to a collective timeout from  rank 17 and we will try our best to dump the "
    "debug info. Last enqueued NCCL work: 48211, last completed NCCL work: 48210." + ADVICE,
    H + PG + "Process group watchdog thread terminated with exception: " + TIMEOUT,
    H + "[Rank 3] NCCL watchdog thread terminated with exception: " + TIMEOUT,
    "  what():  " + PG + "Process group watchdog thread terminated with exception: " + TIMEOUT,
    H + PG + "First PG on this rank to signal dumping.",
    H + PG + "Observed flight recorder dump signal from another rank via TCPStore.",
    H + PG + " failure detected by watchdog at work sequence id: 48211 PG status: last enqueued work: 48211, last "
    "completed work: 48210",
    H + PG + "Timeout at NCCL work: 48211, last enqueued NCCL work: 48211, last completed NCCL work: 48210.",
    H.replace("[E", "[F") + PG + PG + "Terminating the process after attempting to dump debug info, due to collective "
    "timeout or exception.",
    H.replace("[E", "[F") + PG + "Terminating the process after attempting to dump debug info, due to "
    "ProcessGroupNCCL watchdog hang.",
    "  rank      : 1021 (local_rank: 5)",
    "  exitcode  : -6 (pid: 402817)",
    "  exitcode  : -6 (pid: 402817) (SIGABRT)",
]


def _same(line: str) -> bool:
    """True when the native-first parse equals the Python one; raises with the line when not."""
    got, want = tn.parse_line(line), tn.parse_line_py(line)
    assert got == want, line
    return tn._NATIVE_LINE(line, tn._NATIVE_CTX) is not None  # type: ignore[misc]


def test_canonical_lines_are_answered_natively_and_equal() -> None:
    for line in CANONICAL:
        assert _same(line), line
        assert tn.parse_line_py(line) is not None, line


def _variants(line: str) -> list[str]:
    out = [
        line + "\r\n",
        line + "\n",
        line + "\r",
        "\x1b[31m" + line + "\x1b[0m",
        " 3: " + line,
        "[rank1021]:" + line if not line.startswith("[rank") else line[len("[rank1021]:") :],
        line.replace("1021", "ré1021"),
        line.replace("Rank 1021", "Rank 1021é"),
        line + " é",
        line + " terminated",
        line + " Some NCCL operations have failed or timed out.",
        line + "WorkNCCL(SeqNum=1, OpType=X, Timeout(ms)=2)",
        line.rstrip(".") if line.endswith(".") else line + ".",
        line.replace("  ", " "),
        line.replace(" ", "  ", 3),
        line.replace(" ", "", 6),
        line.replace("(default_pg)", "()"),
        line.replace("(default_pg)", ""),
        line.replace("(default_pg)", "(Rank 3)"),
        line.replace("(default_pg)", "(terminated)"),
        line.replace("GUID 0", "GUID 7e41c09a2b58f3d6e1a94c07b835de2f6a1c9b40"),
        line.replace("GUID 0", "GUID xRank5"),
        line.replace("[E1124", "[E124"),
        line.replace("[E1124", "[E11245"),
        line.replace("ProcessGroupNCCL.cpp", "terminated.cpp"),
        line.replace("ProcessGroupNCCL.cpp", "Process-Group_NCCL.cpp"),
        line.replace("[PG ID 0 PG GUID 0(default_pg) Rank 1021]", "[Rank 2]"),
        line.replace("[Rank 1021] ", "[PG ID 0 PG GUID 0(default_pg) Rank 1021] "),
        line.replace("[Rank 1021] ", "[Rank 1021] [Rank 4] "),
        line.replace("[Rank 1021] ", ""),
        line.replace(PG, ""),
        line.replace(PG, PG + PG),
    ]
    for digits in ("9" * 18, "9" * 19, "1" * 20, "7" * 40, "-5", "0", "-" + "9" * 18):
        for old in ("48211", "48210", "1021", "17", "1800093", "16777216", "402817", "-6", "1684"):
            if old in line:
                out.append(line.replace(old, digits, 1))
                out.append(line.replace(old, digits))
    return out


def test_variant_matrix_equals_python() -> None:
    native = total = 0
    for line in CANONICAL:
        for v in _variants(line):
            total += 1
            native += _same(v)
    assert total > 500
    assert 0 < native < total  # some variants are left to Python, some still answered natively


def test_torch_family_matrix_equals_python() -> None:
    native = total = 0
    for version in nr.TORCH:
        for case in nr.all_cases(version):
            for line in [*case.lines, tnw.join_wrapped(case.lines)]:
                total += 1
                native += _same(line)
    assert total > 5000 and native > 100


_INSERTS = (" ", "  ", "\t", ".", "(", ")", "]", "[", ":", "-", "0", "99", "é", "\r", "\x1b[0m", "terminated", "Rank",
            "WorkNCCL(", "Received", "signal", "Timeout", "either", "sequence", "what():", "NCCL", "[rank2]:")  # fmt: skip


def _mutate(rnd: random.Random, line: str) -> str:
    for _ in range(rnd.randint(1, 3)):
        k = rnd.randrange(len(line) + 1)
        op = rnd.randrange(4)
        if op == 0 and line:
            line = line[:k] + line[k + 1 :]
        elif op == 1:
            line = line[:k] + rnd.choice(_INSERTS) + line[k:]
        elif op == 2 and line:
            line = line[:k] + rnd.choice("0123456789 .,:()[]-_aZ") + line[k + 1 :]
        else:
            line = line[:k]
    return line


def test_fuzz_of_mutated_canonical_lines_equals_python() -> None:
    rnd = random.Random(20261124)
    native = 0
    for i in range(30000):
        native += _same(_mutate(rnd, CANONICAL[i % len(CANONICAL)]))
    assert native > 1000  # mutations of numbers and free text keep many lines canonical
