"""The patterns ``grep_all_ranks`` searches by default, as named data (the one place they live).

Tiers 1-3 are the original skill's tiered search, kept verbatim (a line the skill's ``grep -E`` would count, we count).
The further patterns cover the failure shapes the format references name (SLURM, srun, CUDA/Xid/ECC, NaN loss,
port clashes, torchrun's ChildFailedError, the heartbeat monitor, NCCL library warnings); they sit in tiers 1-3 by the
same rule: 1 kills the process, 2 crashes the training loop, 3 is data loading / I/O.

Every regex here must compile in RE2 (a test checks), so the default search never needs the backtracking fallback.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, repr=False, eq=False)
class GrepPattern:
    """One named search pattern."""

    name: str
    """Short identifier, stable across releases (results key on it)."""
    tier: int
    """1 process killers, 2 training-loop crashes, 3 data loading / I/O."""
    regex: str
    """RE2 syntax, case-sensitive."""
    meaning: str
    """What a hit means, in one sentence for the reader of a result."""


TIER_NAMES = {1: "process killers", 2: "training-loop crashes", 3: "data loading / I/O"}

DEFAULT_PATTERNS: tuple[GrepPattern, ...] = (
    # --- Tier 1: process killers (original skill) ---
    GrepPattern(
        "nccl_timeout",
        1,
        r"NCCL.*timeout|Watchdog caught collective operation timeout",
        "An NCCL collective timed out; the watchdog will abort the rank (usually a symptom of a straggler).",
    ),
    GrepPattern(
        "process_taken_down",
        1,
        r"taking the entire process down",
        "The ProcessGroupNCCL watchdog is aborting this process after a failed or timed-out collective.",
    ),
    GrepPattern("signal", 1, r"SIGTERM|SIGKILL|SIGABRT", "A process received or sent a terminating signal."),
    GrepPattern(
        "cuda_error_oom", 1, r"CUDA error|CUDA out of memory|OOM", "A CUDA error or an out-of-memory condition."
    ),
    # --- Tier 1: further process killers ---
    GrepPattern(
        "slurm_cancelled",
        1,
        r"CANCELLED AT|DUE TO TIME LIMIT|DUE TO PREEMPTION|DUE TO NODE FAILURE",
        "SLURM cancelled the job or step (time limit, preemption, node failure, scancel).",
    ),
    GrepPattern("oom_kill", 1, r"oom_kill|OOM Killed|Out Of Memory", "The kernel/cgroup OOM killer ended a task."),
    GrepPattern("srun_error", 1, r"srun: error:", "srun reports a task that exited, was killed or aborted."),
    GrepPattern(
        "illegal_memory_access",
        1,
        r"illegal memory access",
        "A CUDA kernel touched invalid memory (bug or hardware); the stack trace may be asynchronous.",
    ),
    GrepPattern(
        "gpu_xid_ecc",
        1,
        r"NVRM: Xid|\bXid\b|ECC error|uncorrectable ECC|GPU has fallen off the bus"
        r"|Unable to determine the device handle for GPU",
        "A GPU hardware fault reported by the driver (Xid), memory ECC errors, or a GPU the driver lost (nvidia-smi "
        "cannot reach it): suspect the node.",
    ),
    GrepPattern(
        "watchdog_hang",
        1,
        r"watchdog got stuck|Heartbeat monitor timed out|monitoring thread detects no heartbeat|"
        r"NCCL monitor thread timeout",
        "The ProcessGroupNCCL heartbeat monitor found the watchdog itself stuck (NCCL/CUDA API hang).",
    ),
    # --- Tier 2: training-loop crashes (original skill) ---
    GrepPattern(
        "runtime_error", 2, r"RuntimeError|Exception.*Error", "A Python exception was raised (RuntimeError or *Error)."
    ),
    GrepPattern(
        "loader_stop",
        2,
        r"AISBatchLoaderError|StopIteration",
        "The data loader failed (AIStore batch loader) or an iterator ended early.",
    ),
    GrepPattern("traceback", 2, r"Traceback \(most recent call last\)", "Start of a Python traceback."),
    # --- Tier 2: further crashes ---
    GrepPattern(
        "child_failed",
        2,
        r"ChildFailedError",
        "torchrun reports failed workers (its 'Root Cause' time is per node, not a straggler signal).",
    ),
    GrepPattern(
        "nan_loss",
        2,
        r"(?:loss|Loss)[^|]{0,40}\b(?:nan|NaN|inf|Inf)\b|(?:nan|NaN) or (?:inf|Inf)|[Ff]ound (?:nan|NaN)|"
        r"number of nan iterations: +[1-9]",
        "The loss or gradients became NaN/Inf.",
    ),
    GrepPattern(
        "invalid_device",
        2,
        r"invalid device ordinal",
        "A rank asked for a GPU that is not there (launcher / device mapping error).",
    ),
    GrepPattern(
        "address_in_use",
        2,
        r"Address already in use|EADDRINUSE",
        "The rendezvous/master port was taken (a previous run still alive, or two jobs on one port).",
    ),
    GrepPattern("nccl_warn", 2, r"NCCL WARN", "The NCCL library logged a warning (transport, IB, socket errors)."),
    # gloo (CPU process groups) and the DETAIL collective check: formats.gloo reads these lines
    GrepPattern(
        "gloo_timeout",
        1,
        r"Timed out waiting \d+ms for (?:recv|send) operation",
        "A gloo collective waited for a peer that never came (a symptom: find the rank that did not time out).",
    ),
    GrepPattern(
        "gloo_peer_lost",
        1,
        r"Connection closed by peer|connectFullMesh failed",
        "A gloo peer process went away or never connected (a symptom: find the rank that died first).",
    ),
    GrepPattern(
        "collective_mismatch",
        1,
        r"Detected mismatch between collectives",
        "TORCH_DISTRIBUTED_DEBUG=DETAIL found ranks in different collectives: the odd rank is the cause.",
    ),
    GrepPattern(
        "killed_by_signal",
        1,
        r"exitcode: -9\)|Signal 9 \(SIGKILL\) received by PID|exitcode  : -9 ",
        "A worker was SIGKILLed (the kernel OOM killer, or a scheduler kill): no traceback of its own.",
    ),
    # --- Tier 3: data loading / IO (original skill) ---
    GrepPattern(
        "connection_error",
        3,
        r"Connection reset|Connection broken|Connection refused",
        "A network connection failed; AIS SDK resets on idle pooled connections are usually retried noise.",
    ),
    GrepPattern("retrying", 3, r"retrying [0-9]+/[0-9]+", "A client is retrying a request."),
    GrepPattern("timed_out", 3, r"timed out|deadline exceeded", "Something timed out (I/O, RPC, collective)."),
    GrepPattern("broken_pipe", 3, r"broken pipe", "A peer closed the connection while data was being written."),
)
