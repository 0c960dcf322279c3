"""Candidate root-cause events (:func:`triggers`, computed once per evidence), the first symptom, the data-loading
errors of ranks, and what makes a line a warning or a consequence (shared by diagnose and every verifier rule).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from debug_training_logs.analysis.evidence_signals import SIGNALS
from debug_training_logs.analysis.evidence_types import Hit, JobEvidence, KeyEvent, Trigger, WorkerEvidence, _order_key
from debug_training_logs.analysis.read_back import read_lines
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats.python_text import is_source_line
from debug_training_logs.formats.storage import DATA_LOADER_WRAPPER
from debug_training_logs.logs.attribution import strip_rank_prefix


def refine_times(ev: WorkerEvidence, hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` with the time bounds of untimed lines narrowed to the nearest timed lines of their file (one read of
    each file involved, up to the last line asked for)."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for h in hits:
        if h.time is None:
            wanted[h.file].add(h.line)
    if not wanted:
        return list(hits)
    found = read_lines(ev.root, wanted, ev.year)
    out: list[Hit] = []
    for h in hits:
        at = found.get((h.file, h.line))
        if h.time is None and at is not None and at.text is not None:
            after = max((t for t in (h.after, at.after) if t is not None), default=None)
            before = min((t for t in (h.before, at.before) if t is not None), default=None)
            h = Hit(h.signal, h.file, h.line, h.text, h.rank, None, after, before)
        out.append(h)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Candidate root-cause events, the first symptom, and the lines that rule out a clean run (shared by diagnose and
# every verifier rule)

CLOCK_SLACK = timedelta(seconds=2)
"""Worker lines have one-second resolution and ranks enter a collective a little apart: orderings within this are
treated as simultaneous."""

CONSEQUENCE_MARKERS: tuple[str, ...] = (
    "ChildFailedError",
    "ProcessRaisedException",
    "ProcessExitedException",
    "DistBackendError",
    "Watchdog caught",
    "watchdog thread terminated",
    "ProcessGroupNCCL",
    "SignalException",
    "RayTaskError",
    "NCCL",
    "TCPStore",
    "Rendezvous",
    "DistNetworkError",
    "DistStoreError",
    "third_party/gloo",
    "Gloo ",
    "remote worker crash",
    # gloo: what a rank raises when a peer died, hung or disagreed (formats.gloo)
    "Timed out waiting",
    "Connection closed by peer",
    "connectFullMesh failed",
    "Detected mismatch between collectives",
    "gloo/transport",
)
"""Exception lines that are the consequence of another rank's failure (the watchdog abort, torchrun's summary, a
peer's NCCL error), never a root cause on their own."""


def hit_event(h: Hit, event: str, ranks: Iterable[int] | None = None) -> KeyEvent:
    rk = set(ranks) if ranks is not None else ({h.rank} if h.rank is not None else set())
    if h.time is not None:
        return KeyEvent(event, h.file, h.line, h.text, rk, h.time)
    return KeyEvent(event, h.file, h.line, h.text, rk, None, h.after, h.before)


_WARNING_LEVEL = re.compile(
    r"^(?:\[?[\d\-/:,. T]+\]?\s*(?:[-|]\s*)?)?(?:[a-z][\w.]*\s*[-|]\s*)?\[?WARN(?:ING)?\]?(?:[:\s]|$)"
    r"|^\[NeMo W |^\[?W\d{3,4} \d\d:\d\d|^Warning: "
)
"""A warning's log level where loggers put it (``WARNING:name:``, ``<time> - name - WARNING -``, ``[NeMo W``, glog
``W0521``): at the start of what the process wrote, never inside an exception's message."""
_RETRY_LINE = re.compile(
    r"Retrying \(Retry\(|Retrying \S+ in [\d.]+ seconds|[Rr]etrying \d+/\d+|[Rr]etry \d+/\d+|[Rr]etrying after"
    r"|\bwarnings\.warn\("
)
"""A retry (urllib3, tenacity, loaders' own 'retrying N/M'): the request was tried again, the process went on."""


def is_warning(text: str) -> bool:
    """True for a warning/retry line (``WARNING:urllib3...Retrying (...ConnectionResetError...)``): an exception
    name inside it is not a crash."""
    own = strip_rank_prefix(text)
    return _WARNING_LEVEL.search(own) is not None or _RETRY_LINE.search(own) is not None


def is_consequence(text: str) -> bool:
    """True for an exception line caused by another failure (watchdog abort, torchrun summary, peer NCCL error)."""
    return any(m in text for m in CONSEQUENCE_MARKERS)


_EXC_NAME = re.compile(
    r"((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Timeout|Interrupt)|StopIteration|SystemExit))(?::|$)"
)


def _matches(signal: str, text: str) -> bool:
    rx = _SIGNAL_RX[signal]
    return rx.search(text) is not None


_SIGNAL_RX = {s.name: re.compile(s.regex) for s in SIGNALS}


def triggers(ev: JobEvidence) -> list[Trigger]:
    """Every rank's first candidate root-cause event of each kind, with refined times, oldest first (computed once
    per evidence: the verdict and the verifier share it)."""
    cached = ev.cache.get("triggers")
    if cached is None:
        cached = ev.cache["triggers"] = _triggers(ev)
    return list(cached)


def _triggers(ev: JobEvidence) -> list[Trigger]:
    w = ev.worker
    firsts: list[tuple[str, Hit]] = []
    for signal in ("cuda_oom", "cuda_error", "xid", "address_in_use", "nan", "exception", "data_error"):
        firsts += [(signal, h) for h in w.first_by_rank.get(signal, {}).values()]
        if signal == "exception":  # a rank's first and last own exceptions (not a consequence, not a warning)
            own: dict[int, list[Hit]] = defaultdict(list)
            for h in w.hits(signal):
                line = h.text
                if h.rank is not None and not (is_consequence(line) or is_warning(line) or is_source_line(line)):
                    own[h.rank].append(h)
            firsts += [(signal, h) for hs in own.values() for h in {hs[0], hs[-1]}]
        firsts += [(signal, h) for h in w.hits(signal) if h.rank is None][:20]
    firsts = list(dict.fromkeys(firsts))
    out: list[Trigger] = []
    refined = refine_times(w, [h for _, h in firsts])
    for (signal, _), h in zip(firsts, refined, strict=True):
        t = trigger_of(signal, h)
        if t is not None:
            out.append(t)
    first = ev.nccl.first_timeout()
    timed_out_at = first.timeout_time if first is not None else None
    for e in ev.nccl.other_events:
        if isinstance(e.event, tnt.HeartbeatKill) and e.rank is not None:
            if timed_out_at is not None and e.time is not None and e.time > timed_out_at + CLOCK_SLACK:
                continue  # the watchdog stuck while dumping or aborting after a collective timed out: a consequence
            h = Hit("heartbeat", e.file, e.line, e.text, e.rank, e.time)
            out.append(Trigger("watchdog_hang", h, "the NCCL watchdog thread hung (heartbeat monitor)"))
    return sorted(out, key=lambda t: (t.hit.earliest or datetime.max, t.hit.file, t.hit.line))


_CUDA_WHAT = re.compile(
    r"CUDA error: ([^.\n]+)|(Xid[^,]*,[^,]*)|(GPU has fallen off the bus)|(uncorrectable ECC error)"
    r"|Unable to determine the device handle for (GPU\s*[\w:.]*\w)"
)
"""The few words a CUDA/GPU failure line gives: the CUDA error, the Xid, or the GPU the driver lost."""


def trigger_of(signal: str, h: Hit) -> Trigger | None:
    """The candidate root-cause event a line of ``signal`` is (its kind and a few words), None for a consequence or
    a warning."""
    text = h.text
    if signal == "exception" and (is_consequence(text) or is_source_line(text) or DATA_LOADER_WRAPPER.search(text)):
        return None  # (a DataLoader's re-raise: the worker's original exception follows it)
    if signal in ("exception", "cuda_oom", "data_error") and is_warning(text):
        return None  # logged at warning level or retried: handled, the process went on
    if signal in ("cuda_oom",) or _matches("cuda_oom", text):
        return Trigger("cuda_oom", h, "CUDA out of memory")
    if signal in ("cuda_error", "xid") or _matches("cuda_error", text):
        m = _CUDA_WHAT.search(text)
        what = next((g for g in m.groups() if g), "CUDA error") if m else "CUDA error"
        if m is not None and m.group(5):
            what = f"{m.group(5)} lost (the driver cannot reach it)"
        return Trigger("cuda_error", h, what.strip())
    if signal == "data_error" or _matches("data_error", text) or _matches("retry_exhausted", text):
        m = _EXC_NAME.search(text) if _matches("exception", text) else None
        return Trigger("data", h, m.group(1) if m else "data loading failed")
    if signal == "address_in_use" or _matches("address_in_use", text):
        return Trigger("rank_crash", h, "address already in use (port taken)")
    if signal == "nan" or _matches("nan", text):
        return Trigger("rank_crash", h, "NaN/Inf loss")
    if signal == "exception":
        m = _EXC_NAME.search(text)
        return Trigger("rank_crash", h, m.group(1) if m else "Python exception")
    return None


def first_symptom(ev: JobEvidence) -> KeyEvent | None:
    """The first sign of the failure itself: the first watchdog timeout, else the first process killer."""
    row = ev.nccl.first_timeout()
    if row is not None and row.timeout_time is not None:
        return KeyEvent(
            f"rank {row.rank}'s NCCL watchdog fires: {row.op_type} SeqNum {row.seq} timed out after "
            f"{(row.ran_for_ms or row.timeout_ms or 0) / 60000:.0f} min",
            row.file,
            row.line,
            row.text,
            {row.rank},
            row.timeout_time,
        )
    killers = [h for s in ("child_failed", "slurm_cancel", "srun_error") for h in ev.worker.hits(s)]
    killers.sort(key=_order_key)
    return hit_event(killers[0], "the job is taken down") if killers else None


AIS_LOOKBACK = timedelta(minutes=15)
"""AIS incident lines this long before the stuck collective started (worker clock) may belong to the chain."""


_DATA_SIGNALS = ("data_error", "retry_exhausted", "io_timeout")


def data_hits(ev: JobEvidence, ranks: Iterable[int], until: datetime | None) -> list[Hit]:
    """Data-loading/storage error lines of ``ranks`` not proven to come after ``until`` (NCCL lines excluded)."""
    out: list[Hit] = []
    ranks = list(ranks)
    wanted = set(ranks)
    if len(ranks) > DATA_HITS_BY_RANK and len(wanted) == len(ranks):
        # many ranks (often all of them): one pass over each signal's hits instead of one look-up per rank and
        # signal; the same hits, and the same order once sorted (the ties, one line of several signals, come in
        # signal order either way)
        for s in _DATA_SIGNALS:
            out += [h for h in ev.worker.hits(s) if h.rank in wanted and _data_hit_before(h, until)]
        return sorted(out, key=_order_key)
    for r in ranks:
        for s in _DATA_SIGNALS:
            out += [h for h in ev.worker.hits(s, r) if _data_hit_before(h, until)]
    return sorted(out, key=_order_key)


DATA_HITS_BY_RANK = 8
"""Up to this many ranks, :func:`data_hits` looks each rank's hits up; beyond, it filters every hit once."""


def _data_hit_before(h: Hit, until: datetime | None) -> bool:
    """Whether a data signal's hit counts for :func:`data_hits`: no NCCL line, not proven to come after ``until``."""
    if "NCCL" in h.text or "ProcessGroupNCCL" in h.text:
        return False
    return until is None or h.earliest is None or not h.earliest > until
