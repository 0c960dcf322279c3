"""The worker processes of a parallel scan (:class:`_Pool`): forked, handed file indices on a pipe, their pickled
results read back on another, none left running however the scan ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pickle
import select
import signal
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _RemoteTraceback(Exception):
    """The traceback of an error raised in a worker process (the ``__cause__`` of the error raised here)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class WorkerDied(RuntimeError):
    """A scan's worker process ended without answering for the file it had (killed, out of memory, crashed)."""


_AHEAD = 2
"""Files a worker process holds (handed out, not answered for yet) while the main process reads its results: it starts
the next without waiting for the main process."""


EARLY_PIPE_BYTES = 1 << 20
"""The capacity asked for a worker's result pipe when it is handed files ahead (``ahead_bytes``): its results wait
there, the worker going on, while the main process is busy elsewhere (64 KB by default: ~4 files' results of a
1,024-rank ``analyze``). Linux grants up to ``/proc/sys/fs/pipe-max-size`` (1 MB by default); where it refuses, a
worker waits at a full pipe, as it would anyway."""


class _Pool(Generic[T]):
    """``task(i)`` for every ``i`` of ``order``, computed by ``workers`` processes forked from this one when it is made,
    handed out in ``order``: at first up to ``ahead_bytes`` of files (by ``sizes``) or :data:`_AHEAD` files each,
    then one more each time a worker holding fewer than :data:`_AHEAD` answers.

    The workers inherit everything the task needs at the fork; the main process sends each one file indices on a
    pipe and reads back the pickled results on another. An error in a task is raised by :meth:`results` (with the
    worker's traceback as its cause); a worker that ends without answering raises :class:`WorkerDied`. However it
    ends (done, error, KeyboardInterrupt, the caller giving up), :meth:`close` leaves no worker running: the ones
    still running are killed and every one is reaped. Cheaper for the main process than a ``ProcessPoolExecutor``
    (no threads, no queue feeder: ~30 ms less CPU for 128 files)."""

    def __init__(
        self, task: Callable[[int], T], order: Sequence[int], workers: int, sizes: Sequence[int], ahead_bytes: int
    ) -> None:
        self._pending = iter(order)
        self._procs: dict[int, _Worker] = {}  # by the read end of its result pipe
        self._pids: list[int] = []  # not reaped yet
        self._poller = select.poll()
        try:
            for _ in range(workers):
                self._fork(task, ahead_bytes > 0)
            if ahead_bytes > 0:
                self._hand_out_ahead(order, sizes, ahead_bytes)
            for worker in self._procs.values():
                _hand_out(self._pending, worker, _AHEAD - len(worker.held))
        except BaseException:
            self.close()
            raise

    def _fork(self, task: Callable[[int], T], big_pipe: bool) -> None:
        with _FORK_LOCK:
            task_r, task_w = os.pipe()
            res_r, res_w = os.pipe()
            if big_pipe:
                with contextlib.suppress(OSError, AttributeError):  # (F_SETPIPE_SZ: Linux only)
                    fcntl.fcntl(res_w, fcntl.F_SETPIPE_SZ, EARLY_PIPE_BYTES)
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the caller's code
                code = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the main process ends it
                    for fd in (task_w, res_r, *_POOL_FDS):
                        os.close(fd)  # its own pipes' other ends; every other worker's, of any scan
                    _work(task, task_r, res_w)
                    code = 0
                finally:
                    os._exit(code)
            self._pids.append(pid)
            os.close(task_r)
            os.close(res_w)
            _POOL_FDS.update((task_w, res_r))
        self._procs[res_r] = _Worker(pid, task_w)
        self._poller.register(res_r, select.POLLIN)

    def _hand_out_ahead(self, order: Sequence[int], sizes: Sequence[int], ahead_bytes: int) -> None:
        """Deal the first files out in turn until each worker holds about ``ahead_bytes`` (the last may hold less)."""
        workers = list(self._procs.values())
        held_bytes = [0] * len(workers)
        for k, i in enumerate(order):
            w = k % len(workers)
            if held_bytes[w] >= ahead_bytes:
                break
            next(self._pending)
            os.write(workers[w].task_w, i.to_bytes(4, "little"))
            workers[w].held.append(i)
            held_bytes[w] += sizes[i]

    def results(self) -> Iterator[tuple[int, T]]:
        """``(i, task(i))`` as each is done."""
        procs, poller = self._procs, self._poller
        while procs:
            for fd, _ev in poller.poll():
                worker = procs[fd]
                message = _read_message(fd)
                if message is None:  # the worker ended
                    if worker.held:
                        _, status = os.waitpid(worker.pid, 0)
                        self._pids.remove(worker.pid)
                        raise WorkerDied(
                            f"a scan worker process ended ({_status_text(status)}) before it answered for its "
                            f"{len(worker.held)} file(s)"
                        )
                    poller.unregister(fd)
                    _close(fd)
                    del procs[fd]
                    continue
                ok, value = pickle.loads(message)
                if not ok:
                    exc, tb = value
                    exc.__cause__ = _RemoteTraceback(tb)
                    raise exc
                i = worker.held.pop(0)
                _hand_out(self._pending, worker, _AHEAD - len(worker.held))
                yield i, value

    def close(self) -> None:
        """Kill the workers still running and reap every one (again: nothing)."""
        for fd, worker in self._procs.items():
            for f in (fd, worker.task_w):
                if f >= 0:
                    _close(f)
        self._procs.clear()
        pids, self._pids = self._pids, []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a worker done with its files has exited already
            os.waitpid(pid, 0)


_FORK_LOCK = threading.Lock()


_POOL_FDS: set[int] = set()
"""The main process's ends of every worker's pipes, of every scan in progress (the server runs scans in threads).
A worker closes them all at its start: a copy held by another scan's worker would keep a pipe from ending (a worker
waits for its task pipe to end, the main process for its result pipe), and two scans could wait for each other.
Pipes are made, forked and added under :data:`_FORK_LOCK`."""


def _close(fd: int) -> None:
    with _FORK_LOCK:
        _POOL_FDS.discard(fd)
        os.close(fd)


def _hand_out(pending: Iterator[int], worker: _Worker, n: int) -> None:
    """Send up to ``n`` more indices to a worker; with none left, close its task pipe (it exits when done)."""
    if worker.task_w < 0 or n <= 0:
        return
    sent = 0
    for i in itertools.islice(pending, n):
        os.write(worker.task_w, i.to_bytes(4, "little"))
        worker.held.append(i)
        sent += 1
    if sent < n:  # none left
        _close(worker.task_w)
        worker.task_w = -1


@dataclass(repr=False, eq=False)
class _Worker:
    pid: int
    task_w: int
    """The write end of its task pipe (-1 once closed)."""
    held: list[int] = field(default_factory=list)
    """The indices handed out it has not answered for yet, oldest first."""


def _work(task: Callable[[int], Any], task_r: int, res_w: int) -> None:
    """A worker's loop: read file indices until the task pipe closes, send each result (or error) back."""
    while True:
        raw = _read_exactly(task_r, 4)
        if raw is None:
            return
        try:
            message = pickle.dumps((True, task(int.from_bytes(raw, "little"))), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            tb = "".join(traceback.format_exception(exc))
            try:
                message = pickle.dumps((False, (exc, tb)), pickle.HIGHEST_PROTOCOL)
            except Exception:
                message = pickle.dumps((False, (RuntimeError(f"{type(exc).__name__}: {exc}"), tb)))
        _write_all(res_w, len(message).to_bytes(8, "little") + message)


def _read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``; None at its end (before any byte)."""
    data = os.read(fd, n)
    if not data:
        return None
    while len(data) < n:
        more = os.read(fd, n - len(data))
        if not more:
            raise EOFError("a scan worker's pipe ended in the middle of a message")
        data += more
    return data


def _read_message(fd: int) -> bytearray | None:
    head = _read_exactly(fd, 8)
    if head is None:
        return None
    n = int.from_bytes(head, "little")
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError("a scan worker's pipe ended in the middle of a message")
        got += k
    return buf


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
