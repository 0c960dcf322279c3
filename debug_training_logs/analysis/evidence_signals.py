"""The named signals searched for in every worker log (:data:`SIGNALS`) and what a hit of each means."""

from __future__ import annotations

from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
from debug_training_logs.analysis.inventory_markers import Marker
from debug_training_logs.formats import accusations
from debug_training_logs.formats.storage import STORAGE_FAILURE

# ---------------------------------------------------------------------------------------------------------------------
# Named data: the signals searched for in every worker log


Signal = Marker
"""A named pattern searched in every worker log (RE2 syntax, anywhere in the line) and what a hit means: the same
shape as the inventory's markers, which ride along in the same scan."""


_GREP = {p.name: p for p in DEFAULT_PATTERNS}


def _same_as_grep(name: str, grep_name: str) -> Signal:
    """A signal that is exactly one of ``grep_all_ranks``' default patterns (one definition for both)."""
    p = _GREP[grep_name]
    return Signal(name, p.regex, p.meaning)


SIGNALS: tuple[Signal, ...] = (
    # Tier 1: process killers.
    Signal(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure 'out of memory'"
        r"|Failed to CUDA (?:calloc|malloc)",
        "GPU memory exhausted (PyTorch's allocator, cuBLAS, NCCL's own buffers)",
    ),
    Signal(
        "cuda_error",
        r"CUDA error: |AcceleratorError|an illegal memory access was encountered|invalid device ordinal"
        r"|device-side assert triggered|uncorrectable ECC error|cudaError[A-Z]\w+",
        "a CUDA runtime error (illegal access, bad device, ECC, assert)",
    ),
    _same_as_grep("xid", "gpu_xid_ecc"),
    _same_as_grep("signal", "signal"),
    _same_as_grep("taken_down", "process_taken_down"),
    _same_as_grep("slurm_cancel", "slurm_cancelled"),
    _same_as_grep("slurm_oom", "oom_kill"),
    _same_as_grep("srun_error", "srun_error"),
    _same_as_grep("address_in_use", "address_in_use"),
    # Tier 2: training loop crashes.
    _same_as_grep("traceback", "traceback"),
    Signal(
        "exception",
        r"(?:^|[\s:\]])(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Timeout|Interrupt)|StopIteration|SystemExit)"
        r"(?:: |:$|$)",
        "a Python exception line (the last line of a traceback)",
    ),
    Signal(
        "child_failed",
        r"ChildFailedError|failed \(exitcode: -?\d+\) local_rank: \d+",
        "torchrun saw a worker fail (the agent's exit line or its ChildFailedError summary)",
    ),
    _same_as_grep("nan", "nan_loss"),
    # Tier 3: data loading and storage.
    Signal(
        "data_error",
        # (at most 32 literal branches in all: more and the scan's prefilter cannot take the pattern, which then
        # costs a DFA pass over every byte; STORAGE_FAILURE has AISBatchLoaderError and Failed to fetch object)
        r"Batch stream truncated|[Ff]allback failed|Falling back to (?:sequential|direct)"
        r"|returned empty content|cuts due to per-object fetch failures|Timeout while fetching batch"
        r"|DataLoader worker \(pid|" + STORAGE_FAILURE.pattern,
        "a data-loading error (AIS batch loader, Lhotse, DataLoader) or the storage failing a read for good",
    ),
    Signal(
        "conn_reset",
        r"Connection reset by peer|ConnectionResetError|Connection broken|Connection aborted|Connection refused"
        r"|[Bb]roken pipe",
        "a connection reset/refused (keep-alive noise when the retry succeeds)",
    ),
    Signal(
        "retry",
        r"Retrying \(Retry\(|Retrying \S+ in [\d.]+ seconds|[Rr]etrying \d+/\d+|[Rr]etry \d+/\d+",
        "a request being retried (urllib3, tenacity, the skill's 'retrying N/M')",
    ),
    Signal(
        "retry_exhausted",
        r"Max retries exceeded|RetryError|[Rr]etries exhausted|giving up after \d+"
        r"|failed after \d+ (?:retries|attempts)",
        "retries gave up: the request failed for good",
    ),
    Signal("io_timeout", r"timed out|[Dd]eadline [Ee]xceeded|ReadTimeout|ConnectTimeout", "an I/O timeout"),
    # NCCL library and fabric.
    Signal(
        "net_error",
        r"NCCL WARN|NET/IB ?: |ibv_\w+ failed|ncclSystemError|ncclRemoteError|ncclInternalError"
        r"|unhandled system error|remote process exited or there was a network error",
        "NCCL library warnings and network/transport errors",
    ),
    Signal(
        "flight_recorder_off",
        r"Stack trace of the failed collective not found",
        "the NCCL flight recorder was disabled (TORCH_NCCL_TRACE_BUFFER_SIZE=0)",
    ),
    Signal("nccl_init", r"NCCL INFO .*\brank \d+ nranks \d+", "NCCL communicator init: which host a rank runs on"),
    Signal(
        "stack_header",
        r"(?:[Tt]hread 0x[0-9a-fA-F]+|Stack) \(most recent call first\):",
        "a thread's header in a Python stack dump (faulthandler): where the process stood when it was dumped (not "
        "a C++ exception's 'Exception raised from ... (most recent call first):')",
    ),
    # Progress and the end of the run.
    Signal(
        "progress",
        r" iteration +\d+/ *\d+ \||train_step_timing|Epoch \d+:|global_step[=: ]|\bstep[ =:]\s*\d+",
        "training progress (an iteration or step line)",
        dense=True,
    ),
    Signal("memory", r"memory \(MB\) \| allocated: [\d.]+", "a GPU memory report (Megatron report_memory)", dense=True),
    # Accusations: lines in which torch or the trainer names the failing rank (formats.accusations).
    Signal(
        "accusation", accusations.REGEX, "a line naming the rank that failed (monitoredBarrier, a trainer's report)"
    ),
    Signal(
        "clean_end",
        r"`Trainer\.fit` stopped|[Tt]raining (?:finished|completed|complete|done)\b|after training is done"
        r"|[Ff]inished training|exiting program at iteration|worker group successfully finished",
        "the training loop ended normally",
    ),
)
SIGNAL_NAMES = tuple(s.name for s in SIGNALS)
