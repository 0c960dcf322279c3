"""Where a process was when its stack was dumped: in a collective, in data loading, in checkpoint I/O, asleep, on a
lock, computing, shutting down, or gone.

Read the way an engineer reads a ``py-spy dump``: the innermost frame that belongs to a known activity decides
(torch's collective calls, the DataLoader, storage and HTTP clients, ``torch.save`` and checkpoint libraries, or the
trainer's own function names such as ``save_checkpoint``/``load_batch``); the generic waits below it (a queue's
``Condition.wait``, a ``recv``, ``clock_nanosleep``) only say how it waits. Without any of these, py-spy's own
``active``/``idle`` says whether it computes or is blocked, and where.

Pure: frames in, a state out; which ranks are stuck is decided over the states (:mod:`.hang_facts`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from debug_training_logs.formats.py_spy import Frame, ProcessStacks, ThreadStack

StateKind = Literal[
    "collective",
    "backward",
    "rendezvous",
    "data_loading",
    "checkpoint",
    "sleeping",
    "lock",
    "compute",
    "blocked",
    "shutdown",
    "gone",
    "unknown",
]
WAITING_KINDS: Final = frozenset({"collective", "backward", "rendezvous"})
"""States in which a rank waits for its peers (DDP's gradient all-reduce is waited for inside ``backward``)."""
STUCK_KINDS: Final = frozenset({"data_loading", "checkpoint", "sleeping", "lock", "compute", "blocked"})
"""States outside any collective: a rank here, while its peers wait, is the one they wait for."""

COLLECTIVES: Final = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_coalesced",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "all_to_all",
        "all_to_all_single",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "reduce",
        "send_object_list",
        "recv_object_list",
        "wait_tensor",
    }
)
"""``torch.distributed``'s collective and point-to-point calls (``distributed_c10d.py``, functional collectives)."""

_C10D_FILE: Final = re.compile(r"(?:^|/)(?:distributed_c10d|_functional_collectives|c10d_logger)\.py$")
_WRAPPED_COLLECTIVE: Final = re.compile(
    r"(?:^|/)torch/(?:nn/parallel/distributed|distributed/utils|distributed/fsdp/\w+|distributed/_composable/\w+)\.py$"
)
_WRAPPED_NAME: Final = re.compile(r"sync|broadcast|all_?reduce|all_?gather|reduce_scatter|verify_param", re.I)
"""DDP's and FSDP's own calls into a collective (``_sync_buffers``, ``_distributed_broadcast_coalesced``,
``_verify_param_shape_across_processes``): the C++ call below them shows no Python frame."""
_RENDEZVOUS: Final = re.compile(
    r"^(?:init_process_group|_store_based_barrier|rendezvous|_create_c10d_store|_env_rendezvous_handler|"
    r"new_group|_new_group_with_tag|init_device_mesh)$"
)
_SHUTDOWN: Final = re.compile(r"^(?:destroy_process_group|_shutdown|_exitfunc|_python_exit|atexit\w*)$")
_BACKWARD: Final = re.compile(r"^(?:backward|_engine_run_backward|run_backward|_backward)$")
_TORCH_FILE: Final = re.compile(r"(?:^|/)torch/(?!utils/data/)")

_DATA_FILE: Final = re.compile(
    r"(?:^|/)(?:torch/utils/data/|multiprocessing/(?:queues|connection)\.py|queue\.py$|socket\.py$|ssl\.py$|"
    r"http/client\.py$|urllib3/|requests/|botocore/|boto3/|aistore/|webdataset/|lhotse/|datasets/|fsspec/|s3fs/|"
    r"gcsfs/|adlfs/|pyarrow/|petastorm/|streaming/|mosaicml_streaming/|tfrecord/|nvidia/dali/|ffcv/)"
)
_CHECKPOINT_FILE: Final = re.compile(
    r"(?:^|/)(?:torch/serialization\.py$|torch/distributed/checkpoint/|safetensors/|orbax/|\w*(?:checkpoint|ckpt)\w*\.py$)"
)
_CHECKPOINT_NAME: Final = re.compile(r"checkpoint|ckpt|save|snapshot|persist|dump_state|write_state", re.I)
_DATA_NAME: Final = re.compile(
    r"(?:^|[._])(?:__next__|__getitem__|__getitems__|_next_data|_get_data|_try_get_data|fetch\w*|load\w*|read(?!y|iness)\w*|"
    r"get_batch\w*|next_batch|\w*_batch|\w*batch_\w*|prefetch\w*|download\w*|collate\w*|\w*shard\w*|\w*dataset\w*|"
    r"\w*dataloader\w*|\w*sample\w*)$",
    re.I,
)
_WRITES: Final = re.compile(r"write|save|dump|flush|fsync|upload", re.I)
"""A function that writes is not data loading, whatever it writes (a shard of a checkpoint)."""
_SLEEP_NATIVE: Final = re.compile(
    r"^(?:clock_nanosleep|__clock_nanosleep\w*|nanosleep|__nanosleep|time_sleep|pysleep)$"
)
_LOCK: Final = re.compile(
    r"^(?:\w+\.)?(?:acquire|wait|join|_wait_for_tstate_lock|_acquire_restore)$|^PyThread_acquire_lock\w*$|"
    r"^(?:pthread_cond_\w*wait|__futex_abstimed_wait\w*|futex_wait\w*|sem_wait|__new_sem_wait\w*)$"
)
_READ_NATIVE: Final = re.compile(
    r"^(?:__libc_)?(?:read|recv|recvfrom|recvmsg|pread64|__read_nocancel|_io__\w+_read\w*)$"
)
_WRITE_NATIVE: Final = re.compile(r"^(?:__libc_)?(?:write|fsync|fdatasync|pwrite64|sync_file_range)$")
_POLL_NATIVE: Final = re.compile(r"^(?:__)?(?:poll|ppoll|select|epoll_wait|__GI___poll)$")
STDLIB: Final = re.compile(
    r"^(?:<frozen |(?:threading|queue|selectors|socket|ssl|subprocess|contextlib|functools|shutil|tempfile|pickle|"
    r"runpy|codecs|io|os|time)\.py$|(?:multiprocessing|urllib|http|email|json|concurrent|asyncio|logging|importlib|"
    r"encodings|collections)/)"
)
"""The standard library (py-spy's short file names): never the trainer's own code."""


@dataclass(frozen=True, repr=False)
class StackState:
    """A process's state when dumped, and the frame that shows it."""

    kind: StateKind
    what: str
    """A few words: ``all_reduce``, ``DataLoader _next_data``, ``torch.save``, ``time.sleep``..."""
    call_site: str | None
    """The trainer's own innermost frame (``train.py:9``): where the training code stands."""
    frame: Frame | None
    line_no: int
    """The dump file's line that shows it (the deciding frame's, else its thread's header)."""
    text: str = ""
    """That line as the file has it."""
    caller: str | None = None
    """The function of the trainer's innermost frame (``allreduce_word_embedding_grads``)."""

    def words(self) -> str:
        at = f" at {self.call_site}" if self.call_site else ""
        if self.caller and self.caller != "<module>" and self.caller not in self.what:
            at += f" (in {self.caller})"
        return {
            "collective": f"waiting in {self.what}{at}",
            "backward": f"in backward (waiting for the gradient all-reduce or computing){at}",
            "rendezvous": f"waiting for its peers to join ({self.what}){at}",
            "data_loading": f"stuck in data loading: {self.what}{at}",
            "checkpoint": f"stuck in checkpoint I/O: {self.what}{at}",
            "sleeping": f"asleep ({self.what}){at}",
            "lock": f"blocked on a lock ({self.what}){at}",
            "compute": f"computing (on CPU, in {self.what}){at}",
            "blocked": f"blocked outside any collective, in {self.what}{at}",
            "shutdown": f"shutting down ({self.what}){at}",
            "gone": f"gone when the stacks were dumped ({self.what})",
            "unknown": f"unreadable ({self.what})",
        }[self.kind]


def _own(f: Frame) -> bool:
    """A frame of the trainer's own code (not torch, not the standard library, not native)."""
    if f.native or f.file is None:
        return False
    return not (_TORCH_FILE.search(f.file) or STDLIB.match(f.file) or _DATA_FILE.search(f.file))


def _short(f: Frame) -> str:
    return f"{f.file}:{f.line}" if f.file and f.line is not None else (f.file or f.function)


def state_of(p: ProcessStacks) -> StackState:
    """The state of ``p``'s main thread (see the module docstring)."""
    if p.error is not None:
        return StackState("gone" if p.gone else "unknown", p.error[:160], None, None, p.line_no, p.error_text)
    t = p.main_thread()
    if t is None or not t.frames:
        return StackState("unknown", "no frames", None, None, t.line_no if t else p.line_no)
    main = thread_state(t)
    if main.kind in ("lock", "blocked", "sleeping"):
        # the main thread waits on a lock or an event: what the other threads do says on what (a prefetch thread in
        # a socket read, a checkpoint thread in torch.save)
        for other in p.threads:
            if other is t or not other.frames:
                continue
            s = thread_state(other)
            if s.kind in ("data_loading", "checkpoint") and "pin_memory" not in (s.frame.file or "" if s.frame else ""):
                name = f'thread "{other.name}"' if other.name else "another thread"
                what = f"{s.what} in its {name}"
                return StackState(s.kind, what, main.call_site, s.frame, s.line_no, s.text, main.caller)
    return main


def thread_state(t: ThreadStack) -> StackState:
    s = _thread_state(t)
    f = s.frame
    own = next((g for g in t.frames if _own(g)), None)
    caller = own.function if own is not None else None
    if f is not None and f.line_no:
        return StackState(s.kind, s.what, s.call_site, f, f.line_no, f.text, caller)
    return StackState(s.kind, s.what, s.call_site, f, t.line_no, t.text, caller)


def _thread_state(t: ThreadStack) -> StackState:
    frames = t.frames
    own = next((f for f in frames if _own(f)), None)
    site = _short(own) if own is not None else None
    how: str | None = None
    """The generic wait below the deciding frame (``recv``, ``Condition.wait``)."""
    for f in frames:
        name = f.function.rsplit(".", 1)[-1]
        file = f.file or ""
        if f.native:
            if how is None and (_SLEEP_NATIVE.match(name) or _READ_NATIVE.match(name) or _WRITE_NATIVE.match(name)):
                how = name
            continue
        if _C10D_FILE.search(file) and name in COLLECTIVES:
            return StackState("collective", name, site, f, t.line_no)
        if _WRAPPED_COLLECTIVE.search(file) and _WRAPPED_NAME.search(name):
            return StackState("collective", name, site, f, t.line_no)
        if _RENDEZVOUS.match(name) and "torch/distributed" in file:
            return StackState("rendezvous", name, site, f, t.line_no)
        if _SHUTDOWN.match(name):
            return StackState("shutdown", name, site, f, t.line_no)
        if _BACKWARD.match(name) and "torch/" in file:
            return StackState("backward", name, site, f, t.line_no)
        if _CHECKPOINT_FILE.search(file) or (_own(f) and _CHECKPOINT_NAME.search(f.function)):
            what = "torch.save" if file.endswith("serialization.py") else f.function
            return StackState("checkpoint", _with(what, f, how), site, f, t.line_no)
        if _DATA_FILE.search(file):
            if "torch/utils/data/" in file:
                what = f"DataLoader {name}"
            elif file.endswith(("queue.py", "queues.py")):
                what = f"a queue get ({f.function})"
            else:
                what = f"{f.function} ({file.split('/')[0] if '/' in file else file})"
            if file.endswith(("queue.py", "queues.py", "connection.py")):
                how = how or f.function
                continue  # a queue is how it waits; who waits on it decides (the DataLoader, the trainer)
            return StackState("data_loading", _with(what, f, how), site, f, t.line_no)
        if _own(f) and _DATA_NAME.search(f.function) and not _WRITES.search(f.function):
            return StackState("data_loading", _with(f.function, f, how), site, f, t.line_no)
        if how is None and (_LOCK.match(f.function) or f.function == "sleep"):
            how = f.function
    if how is not None:
        if _SLEEP_NATIVE.match(how) or how == "sleep":
            return StackState("sleeping", "time.sleep", site, frames[0], t.line_no)
        if _READ_NATIVE.match(how) or "get" in how:
            return StackState("data_loading", f"a blocking {how}", site, frames[0], t.line_no)
        if _WRITE_NATIVE.match(how):
            return StackState("blocked", f"a blocking {how}", site, frames[0], t.line_no)
        return StackState("lock", how, site, frames[0], t.line_no)
    if t.active:
        top = next((f for f in frames if not f.native), frames[0])
        return StackState("compute", top.function, site, top, t.line_no)
    if any(_POLL_NATIVE.match(f.function) for f in frames if f.native):
        return StackState("blocked", "poll/select", site, frames[0], t.line_no)
    top = next((f for f in frames if not f.native), frames[0])
    return StackState("blocked", top.where(), site, top, t.line_no)


def _with(what: str, f: Frame, how: str | None) -> str:
    at = f" ({_short(f)})" if f.file and f.line is not None and not what.endswith(")") else ""
    return f"{what}{at}" + (f", waiting in {how}" if how else "")
