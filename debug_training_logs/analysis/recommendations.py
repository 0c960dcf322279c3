"""What to do about a diagnosed failure: the original skill's recommendations as named data.

Each :class:`Recommendation` says which area it belongs to (storage side, client side, training configuration,
operations, evidence to collect next), what to do, and the condition over the verdict and evidence that makes it
apply. :func:`recommend` returns those that apply, in the table's order, each with the fact that triggered it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.analysis.verdict import Verdict

AREAS = {
    "storage": "Storage-side",
    "client": "Client-side",
    "training_config": "Training config",
    "operations": "Operations",
    "evidence": "Evidence to collect",
}


@dataclass(frozen=True)
class Facts:
    """What the conditions read."""

    verdict: Verdict
    ev: JobEvidence

    @property
    def category(self) -> str:
        return self.verdict.category

    def detail(self, key: str) -> bool:
        return bool(self.verdict.details.get(key))

    def reads_from(self, source: str) -> bool:
        """Whether the logs show the job reading from ``source`` (an inventory marker: ``aistore``, ``lhotse``)."""
        return bool(self.ev.worker.job.inventory.markers.get(source))

    @property
    def flight_recorder_off(self) -> bool:
        """The watchdog said the stack trace of the failed collective was not found (flight recorder disabled)."""
        return bool(self.ev.worker.counts.get("flight_recorder_off"))


@dataclass(frozen=True)
class Recommendation:
    """One actionable fix and when it applies."""

    key: str
    area: str
    """A key of :data:`AREAS`."""
    text: str
    because: str
    """Why it applies, shown next to it."""
    when: Callable[[Facts], bool]


_STALL = ("data_loading_stall", "storage_errors")
_NCCL_HANG = (
    "data_loading_stall",
    "storage_errors",
    "rank_crash",
    "cuda_oom",
    "cuda_error",
    "collective_mismatch",
    "nccl_timeout_unattributed",
    "watchdog_hang",
    "checkpoint_stall",
    "rank_stuck",
)

RECOMMENDATIONS: tuple[Recommendation, ...] = (
    # --- storage side ---
    Recommendation(
        "ais_target_pressure",
        "storage",
        "Check the implicated AIS target for resource pressure (disk/memory: 'dsk=critical', 'load=critical', "
        "forced GC) and inter-target stream failures (shared-dm broken pipe, x-get-batch out-of-bounds): add capacity "
        "or disks, lower get-batch concurrency, and upgrade AIS if the batch job aborts on one broken stream.",
        "AIS error counters spiked / AIS logged resource pressure or stream failures",
        lambda f: f.category in _STALL and f.ev.ais is not None and bool(f.ev.ais.spikes or f.ev.ais.incident_lines()),
    ),
    Recommendation(
        "fetch_ais_logs",
        "evidence",
        "Download every AIS daemon's logs, current and rotated (`ais log get cluster <dir>` or the fetch_ais_logs "
        "tool), and run again with them: the storage side of the chain is not in the worker logs.",
        "the failure involves data loading from AIStore and no AIS logs were given",
        lambda f: f.category in _STALL and f.ev.ais is None and f.reads_from("aistore"),
    ),
    # --- client side ---
    Recommendation(
        "lhotse_read_timeout",
        "client",
        "Put a timeout on every data read: Lhotse's AudioSource._prepare_for_reading() calls f.read() with no "
        "timeout, so one stalled GET blocks a DataLoader worker (and the whole job) forever; set request timeouts in "
        "the AIS SDK / URL loader and fail the batch instead of hanging.",
        "a rank stalled in data loading while the others waited",
        lambda f: f.category == "data_loading_stall" and (f.reads_from("lhotse") or f.reads_from("aistore")),
    ),
    Recommendation(
        "data_read_timeout",
        "client",
        "Put a timeout on every data read (file system, object store, HTTP): one read that never returns blocks its "
        "rank, and every other rank waits for it in the next collective; fail or skip the batch instead of hanging, "
        "and lower the process-group timeout so that such a hang surfaces in minutes.",
        "a rank stalled in data loading while the others waited",
        lambda f: f.category == "data_loading_stall" and not (f.reads_from("lhotse") or f.reads_from("aistore")),
    ),
    Recommendation(
        "batch_loader_fallback",
        "client",
        "Make the batch loader's fallback bounded: when batch.get() is truncated, the per-object fallback needs its "
        "own deadline and a limit on retries, and skip_failed_fetches / fault_tolerant=True should be a conscious "
        "choice (it silently drops samples, unevenly across ranks).",
        "the AIS batch loader fell back to direct/sequential GETs or failed",
        lambda f: f.category in _STALL and bool(f.ev.worker.counts.get("data_error")),
    ),
    Recommendation(
        "keepalive_noise",
        "client",
        "The 'Connection reset by peer' warnings are keep-alive noise: AIS closes idle connections after its idle "
        "timeout while the SDK's urllib3 pool reuses them, and the request succeeds on the first retry. Align the "
        "pool's idle timeout below the server's (or disable reuse of idle connections) to silence them; do not chase "
        "them as a root cause.",
        "connection resets appear and were retried successfully",
        lambda f: f.detail("resets_retried"),
    ),
    # --- training configuration ---
    Recommendation(
        "per_step_collectives",
        "training_config",
        "Per-step collectives turn any single-rank stall into a 30-minute NCCL timeout on every rank: NeMo's "
        "PreemptionCallback broadcasts every step and DDP's broadcast_buffers broadcasts buffers every forward. "
        "Disable what you do not need (broadcast_buffers=False when there are no buffers to sync; the preemption "
        "callback when not preemptible) and lower the process-group timeout so a hang fails fast.",
        "the job died in an NCCL timeout caused by one rank",
        lambda f: f.category in _NCCL_HANG and f.ev.nccl.timed_out,
    ),
    Recommendation(
        "oom_memory",
        "training_config",
        "Reduce peak GPU memory on the failing rank: a smaller micro-batch or max_duration (bucketing can give one "
        "rank much longer batches), activation checkpointing, and "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.",
        "a rank ran out of GPU memory",
        lambda f: f.category == "cuda_oom",
    ),
    Recommendation(
        "memory_leak",
        "training_config",
        "Allocated memory grew step after step before the OOM: look for a leak (tensors kept across steps in lists or "
        "metrics, losses accumulated without .item()/.detach(), growing caches) and compare "
        "torch.cuda.memory_allocated() per step.",
        "the culprit's allocated memory kept growing before the OOM",
        lambda f: f.detail("memory_creep"),
    ),
    Recommendation(
        "nan_loss",
        "training_config",
        "The loss became NaN/Inf: lower the learning rate or add warmup, enable gradient clipping, check the batch "
        "that produced it (corrupt or empty audio), and prefer bf16 over fp16 (loss-scale overflow).",
        "a rank stopped on a NaN/Inf loss",
        lambda f: f.detail("nan"),
    ),
    Recommendation(
        "dataloader_crash",
        "client",
        "The data loader raised and the exception ended the rank (the job then hung on the others): make the "
        "dataset's failures bounded and explicit (per-object timeouts and retry limits, skip or quarantine a sample "
        "that keeps failing and log it, validate manifests before training) instead of letting one bad read kill a "
        "rank.",
        "an exception from the data loader reached the top of a rank and it exited",
        lambda f: f.verdict.details.get("module") == "the data loader",
    ),
    Recommendation(
        "port_in_use",
        "operations",
        "The rendezvous/master port was already taken: pick a free MASTER_PORT per job (e.g. derived from the job "
        "id), and make sure no process of a previous run is still alive on the node.",
        "'Address already in use' when the process group started",
        lambda f: f.detail("port"),
    ),
    Recommendation(
        "device_ordinal",
        "operations",
        "A rank asked for a GPU that does not exist: make --nproc-per-node match the GPUs visible on each node "
        "(CUDA_VISIBLE_DEVICES, SLURM --gpus-per-node) and set the device from LOCAL_RANK.",
        "'invalid device ordinal' on a rank",
        lambda f: f.detail("device_ordinal"),
    ),
    Recommendation(
        "gpu_fault",
        "operations",
        "Drain and test the suspect node: run nvidia-smi -q (ECC, retired pages), dcgmi diag -r 3 and check the "
        "kernel log for Xid errors; rerun with CUDA_LAUNCH_BLOCKING=1 to locate the failing kernel if the node "
        "checks out.",
        "a CUDA error or an Xid on one rank",
        lambda f: f.category == "cuda_error" and not f.detail("device_ordinal"),
    ),
    Recommendation(
        "fabric",
        "operations",
        "Test the fabric on the suspect nodes: ibstat / ibdiagnet for link errors, nccl-tests all_reduce_perf across "
        "them, and review NCCL_IB_* / NCCL_SOCKET_IFNAME settings; exclude the node until it passes.",
        "every rank was inside the collective when it hung (no straggler)",
        lambda f: f.category == "gpu_fabric",
    ),
    Recommendation(
        "node_failure",
        "operations",
        "Read slurmctld's log and `sacct -j <JOBID> --format=NodeList,State,ExitCode` for the failed node, drain "
        "it, and make the job restartable from the last checkpoint (--requeue).",
        "SLURM cancelled the job for a node failure",
        lambda f: f.category == "node_failure",
    ),
    Recommendation(
        "time_limit",
        "operations",
        "Raise the job's time limit or checkpoint (and resume) within it; with autoresume, save a checkpoint before "
        "the limit (e.g. NeMo's max_time).",
        "SLURM cancelled the job at its time limit",
        lambda f: f.category == "time_limit",
    ),
    Recommendation(
        "throughput_collapse",
        "operations",
        "Investigate the slow ranks' node: thermal or power throttling (nvidia-smi -q -d PERFORMANCE), a degraded "
        "NVLink/PCIe link, a noisy neighbour on shared storage, or CPU data-loading starvation (too few workers).",
        "the step time of some ranks jumped",
        lambda f: f.detail("throughput_collapse"),
    ),
    Recommendation(
        "watchdog_hang",
        "operations",
        "The NCCL watchdog itself hung (a CUDA/NCCL call never returned): dump the stacks of a hung rank (py-spy "
        "dump --native), check the GPU for Xid errors, and set TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC / "
        "TORCH_NCCL_ENABLE_MONITORING deliberately.",
        "a rank's heartbeat monitor killed the process",
        lambda f: f.category == "watchdog_hang",
    ),
    Recommendation(
        "checkpoint_stall",
        "operations",
        "Check the checkpoint target of the stuck rank (the filesystem or object store its torch.save writes to: "
        "mounted, writable, not full, no hung NFS/Lustre client; `df`, `mount`, the node's dmesg), and write "
        "checkpoints with a timeout (an async checkpointer, or torch.distributed.checkpoint with a deadline).",
        "a stack dump shows a rank stuck in checkpoint I/O while the others wait",
        lambda f: f.category == "checkpoint_stall",
    ),
    Recommendation(
        "rank_stuck",
        "client",
        "Look at the stuck rank's stack: a lock or an event nobody sets, a sleep, or a loop only that rank runs "
        "(a rank-dependent branch) keeps it out of the collective; take a second dump a minute later to tell a slow "
        "step from an endless one.",
        "a stack dump shows a rank outside the collective, neither loading data nor checkpointing",
        lambda f: f.category == "rank_stuck",
    ),
    Recommendation(
        "py_spy_dumps",
        "evidence",
        "While a job hangs, dump every rank's stack before killing it (`py-spy dump --pid <pid>` for each worker on "
        "each node, e.g. through `srun --overlap`, with `nvidia-smi -q` and `dmesg -T` of the node) and pass that "
        "directory as hang_dir: the stacks show the rank outside the collective and what it waits on.",
        "the ranks hung or timed out and no stack dump was given",
        lambda f: f.ev.hang is None and f.category in ("nccl_timeout_unattributed", "data_loading_stall"),
    ),
    # --- evidence for next time ---
    Recommendation(
        "flight_recorder",
        "evidence",
        "Enable the NCCL flight recorder for the next run (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, "
        "TORCH_NCCL_DUMP_ON_TIMEOUT=1): the watchdog could not print the failed collective's stack trace.",
        "the watchdog said the flight recorder was disabled",
        lambda f: f.ev.nccl.timed_out and f.flight_recorder_off,
    ),
    Recommendation(
        "nccl_debug",
        "evidence",
        "Run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET when the fabric is suspect) so every rank logs its "
        "communicator ('rank R nranks N') and transport errors.",
        "the logs could not establish the world size or attribute the timeout",
        lambda f: f.ev.worker.world_size is None or f.category in ("nccl_timeout_unattributed", "gpu_fabric"),
    ),
    Recommendation(
        "counters",
        "evidence",
        "This torch logs no last-enqueued/last-completed counters in its watchdog messages (torch <= 2.2), so a rank "
        "that never entered the collective cannot be told from one waiting in it: run a newer torch (2.3+) or enable "
        "the flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1) to attribute the next "
        "timeout.",
        "every rank timed out and the watchdog logged no enqueued/completed counters",
        lambda f: f.detail("no_counters"),
    ),
    Recommendation(
        "stacks_of_straggler",
        "evidence",
        "Next time, capture the stuck rank's Python stack before the watchdog kills it (py-spy dump --pid <PID>, or "
        "faulthandler.dump_traceback_later): it shows exactly where the rank is blocked.",
        "a rank never entered the collective and its logs do not say why",
        lambda f: f.category == "nccl_timeout_unattributed" and bool(f.verdict.culprit_ranks),
    ),
    Recommendation(
        "missing_logs",
        "evidence",
        "Provide every node's log file (all error-<JOBID>-<N>.out, not only some): scp "
        "'<cluster>:/path/to/slurm/logs/error-<JOBID>-*.out' ./training_logs/. Without all ranks no culprit can be "
        "established: what the present ranks show stays provisional.",
        "some ranks' logs are missing",
        lambda f: bool(f.ev.worker.missing_ranks),
    ),
    Recommendation(
        "no_failure",
        "operations",
        "Nothing to fix in the training job: it ended normally. If it was expected to run longer, check the "
        "configured max_steps / max_epochs and the scheduler's accounting.",
        "the training loop ended normally",
        lambda f: f.category == "no_failure",
    ),
)


@dataclass(frozen=True)
class Applied:
    """A recommendation that applies, with the area title and the reason."""

    key: str
    area: str
    area_title: str
    text: str
    because: str


def recommend(verdict: Verdict, ev: JobEvidence) -> list[Applied]:
    """The recommendations that apply to this verdict and evidence, in table order."""
    facts = Facts(verdict, ev)
    return [Applied(r.key, r.area, AREAS[r.area], r.text, r.because) for r in RECOMMENDATIONS if r.when(facts)]
