"""torchrun agents' output, written the way torch 2.5+ writes it, for tests of jobs told by their launchers.

A :class:`NodeLog` is what one node's ``torchrun`` printed into the file an engineer hands over: its glog-like own
lines (``W1207 19:40:58.019000 <agent pid> torch/distributed/...] ...``), its workers' output (with the ``--tee``
prefix ``[<role><local rank>]:`` or without any), the workers' tracebacks (``[rankN]:`` once the process group is
up) and its ``ChildFailedError`` report. Times are the agent's; the workers' own lines carry none unless asked.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

T0 = datetime(2026, 12, 7, 19, 40, 40)
GLOO_CLOSED = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[10.1.0.{peer}]:{port}. This is typically caused by a remote worker crashing."
)
GLOO_RESET = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.1.0.{peer}]:{port}: "
    "Connection reset by peer. This is typically caused by a remote worker crashing."
)
API = "torch/distributed/elastic/multiprocessing/api.py"


@dataclass
class NodeLog:
    """One node's torchrun output: ``nproc`` workers, global ranks ``base`` .. ``base + nproc - 1``."""

    index: int
    nproc: int
    base: int
    agent_pid: int
    role: str = "default"
    tee: bool = True
    host: str = "localhost"
    lines: list[str] = field(default_factory=list)

    def pid(self, local: int) -> int:
        return self.agent_pid + 10 + local

    def agent(self, sev: str, at: datetime, where: str, text: str) -> None:
        stamp = f"{sev}{at.month * 100 + at.day} {at:%H:%M:%S}.{at.microsecond // 1000:03d}000"
        self.lines.append(f"{stamp} {self.agent_pid} {where}] {text}")

    def banner(self, at: datetime) -> None:
        for text in ("", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                     "to avoid your system being overloaded, please further tune the variable for optimal "
                     "performance in your application as needed. ", "*" * 41):  # fmt: skip
            self.agent("W", at, "torch/distributed/run.py:874", text)

    def worker(self, local: int, text: str) -> None:
        self.lines.append(f"[{self.role}{local}]:{text}" if self.tee else text)

    def traceback(self, local: int, frames: list[str], error: str) -> None:
        g = self.base + local
        for text in ["Traceback (most recent call last):", *frames, error]:
            self.worker(local, f"[rank{g}]: {text}")

    def victim(self, local: int, error: str) -> None:
        frames = [
            '  File "/workspace/train.py", line 32, in <module>',
            "    dist.all_reduce(t)",
            '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce',
            "    work.wait()",
        ]
        self.traceback(local, frames, error)

    def sigterms(self, at: datetime, locals_: list[int]) -> None:
        for k in locals_:
            self.agent("W", at, f"{API}:1028", f"Sending process {self.pid(k)} closing signal SIGTERM")

    def failed(self, at: datetime, local: int, code: int) -> None:
        self.agent(
            "E",
            at,
            f"{API}:1002",
            f"failed (exitcode: {code}) local_rank: {local} (pid: {self.pid(local)}) of binary: /usr/bin/python3",
        )

    def child_failed(self, at: datetime, root: tuple[int, int], others: dict[int, int]) -> None:
        """torchrun's own traceback and report: ``root`` (local rank, exit code) first observed, ``others`` every
        other worker that did not exit 0 (local rank -> exit code)."""
        self.lines += [
            "Traceback (most recent call last):",
            '  File "/usr/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            '  File "/usr/lib/python3/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent',
            "    raise ChildFailedError(",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60,
            "/workspace/train.py FAILED",
            "-" * 60,
            "Failures:",
        ]
        if not others:
            self.lines.append("  <NO_OTHER_FAILURES>")
        for n, (local, code) in enumerate(sorted(others.items()), 1):
            self.lines += [f"[{n}]:", *self._entry(at, local, code)]
        self.lines += ["-" * 60, "Root Cause (first observed failure):", "[0]:", *self._entry(at, *root), "=" * 60]

    def _entry(self, at: datetime, local: int, code: int) -> list[str]:
        sig = {-15: "SIGTERM", -9: "SIGKILL", -6: "SIGABRT", -11: "SIGSEGV"}.get(code)
        tb = (
            f"Signal {-code} ({sig}) received by PID {self.pid(local)}"
            if sig
            else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        )
        return [
            f"  time      : {at:%Y-%m-%d_%H:%M:%S}",
            f"  host      : {self.host}",
            f"  rank      : {self.base + local} (local_rank: {local})",
            f"  exitcode  : {code} (pid: {self.pid(local)})" + (f"  ({sig})" if sig else " "),
            "  error_file: <N/A>",
            f"  traceback : {tb}",
        ]


def write(root: Path, files: dict[str, list[str]], *, compress: bool = False) -> Path:
    """Write each file's lines under ``root/logs`` (gzip-compressed when asked) and return the directory."""
    logs = root / "logs"
    logs.mkdir(parents=True)
    for name, lines in files.items():
        data = ("\n".join(lines) + "\n").encode()
        (logs / name).parent.mkdir(parents=True, exist_ok=True)
        if compress:
            (logs / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (logs / name).write_bytes(data)
    return logs


def seconds(s: float) -> datetime:
    return T0 + timedelta(seconds=s)
