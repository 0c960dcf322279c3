"""What to do now, in one line: the first thing an on-call engineer does after reading the verdict.

Four answers, by what the failure shape says about a restart (named data, :data:`ACTIONS`):

* **restart as is**: nothing in the job itself is wrong (the scheduler's time limit, a port a stray process held, a
  clean run);
* **restart without node X**: the hardware or the node failed (a CUDA/Xid error, a node that vanished, a fabric hang
  on named nodes) and a restart on the same node would fail again;
* **stop and fix**: the job will fail the same way again (config: OOM, a launch error; code: an exception, a
  collective mismatch, an early exit on uneven data; data: a NaN loss, a data loader that stalls or crashes);
* **collect what is missing**: the evidence cannot tell (missing ranks, an unattributed timeout): which files, which
  environment variable for the next run.

Pure: reads the verdict, never the logs.
"""

from __future__ import annotations

from collections.abc import Sequence

ACTIONS: dict[str, str] = {
    "no_failure": "Nothing to do: every rank finished.",
    "time_limit": "Restart as is from the last checkpoint, with a longer time limit (or more frequent checkpoints).",
    "address_in_use": "Restart as is on a free port (another process held the rendezvous port; --rdzv-endpoint "
    "host:0 lets torchrun pick one).",
    "launch_failure": "Stop and fix the launch: check that every node started its launcher and reaches the "
    "rendezvous endpoint, then restart.",
    "rank_crash:oom_killer": "Check the node's kernel log for the OOM killer (dmesg -T | grep -i 'killed process'), "
    "then lower the job's host memory use (data loader workers and prefetch, pinned memory, datasets held in "
    "memory) or give it more, and restart.",
    "cuda_oom": "Stop and fix the config: lower the micro-batch size or sequence length, or enable activation "
    "checkpointing / a memory-saving parallelism, then restart.",
    "cuda_error": "Restart without {nodes} (drain it and run its GPU diagnostics); if the error recurs on other "
    "nodes, stop and fix the code.",
    "rank_crash": "Stop and fix the code or data behind the exception, then restart.",
    "collective_mismatch": "Stop and fix the code: every rank must call the same collectives in the same order with "
    "the same sizes (look for a rank-only branch).",
    "early_exit": "Stop and fix the data sharding: every rank must run the same number of steps (drop_last, an even "
    "split, or a join context).",
    "data_loading_stall": "Stop and fix the data path of {ranks} (storage reachability, loader timeouts, num_workers),"
    " then restart; restart as is only if the storage incident is over.",
    "checkpoint_stall": "Stop and fix the checkpoint path of {ranks} (the filesystem or object store it writes to: "
    "reachable, not full, not hung), then restart from the last good checkpoint.",
    "rank_stuck": "Stop and fix what {ranks} is stuck in (see its stack: a lock, a sleep, a loop or a computation "
    "the other ranks do not run), then restart.",
    "storage_errors": "Fix the storage side first (the failing target or bucket), then restart.",
    "node_failure": "Restart without {nodes}.",
    "gpu_fabric": "Have the fabric of {nodes} checked (ibstat, ibdev2netdev, nccl-tests between them) and restart "
    "without the node whose port or adapter is down.",
    "watchdog_hang": "Restart without {nodes}; if it recurs elsewhere, collect stack dumps (py-spy) of the hung rank.",
    "nccl_timeout_unattributed": "Collect what is missing, then restart: stack dumps of the hung ranks while they "
    "hang (py-spy dump), the flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1) and "
    "NCCL_DEBUG=INFO for the next run.",
    "incomplete_evidence": "Collect what is missing: every node's log of the job (and the world size), then run "
    "the diagnosis again.",
}


def action(
    category: str,
    culprits: Sequence[int],
    suspects: Sequence[int],
    nodes: Sequence[str],
    provisional: bool,
    missing: Sequence[int],
    shape: str | None = None,
) -> str:
    """The one-line action for a verdict (see :data:`ACTIONS`; ``shape`` narrows a category, ``oom_killer``: a rank
    SIGKILLed without a traceback); a provisional verdict first asks for the missing logs."""
    from debug_training_logs.ranges import format_ranges

    ranks = format_ranges(list(culprits) or list(suspects))
    text = ACTIONS.get(f"{category}:{shape}") or ACTIONS.get(
        category, "Collect what is missing and run the diagnosis again."
    )
    text = text.format(
        nodes=", ".join(nodes)
        if nodes
        else f"the node(s) of rank(s) {ranks}"
        if ranks
        else "the node(s) whose lines show it",
        ranks=f"rank(s) {ranks}" if ranks else "the stalled rank",
    )
    if provisional and category not in ("no_failure", "time_limit", "address_in_use", "incomplete_evidence"):
        what = f"ranks {format_ranges(missing)}" if missing else "every node's log and the world size"
        return f"Collect what is missing first ({what}) to confirm; the evidence so far says: {text}"
    return text
