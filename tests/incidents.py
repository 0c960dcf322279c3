"""Small incidents written the way torch, torchrun, gloo and a trainer write them, for the causal-model tests.

Each builder returns the lines of one node's log (one rank per line prefix, torchrun-style) so a test can present
the same incident in several ways (:func:`present`): the ``[rankN]:`` prefix torch 2.2+ adds, srun ``--label``
prefixes, one file per rank without any prefix, gzip, and lines stripped of their timestamps.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

T0 = datetime(2026, 3, 14, 9, 0, 0)
GLOO_TIMEOUT = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv operation to complete"
GLOO_CLOSED = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[10.0.0.{peer}]:{port}. This is typically caused by a remote worker crashing."
)


@dataclass
class Line:
    """One line a rank (or its launcher, rank None) wrote, at a time (None: the line has no time of its own)."""

    rank: int | None
    text: str
    at: datetime | None = None


@dataclass
class Incident:
    world: int
    lines: list[Line] = field(default_factory=list)

    def log(self, rank: int | None, text: str, at: datetime | None = None) -> None:
        self.lines.append(Line(rank, text, at))

    def info(self, rank: int, text: str, at: datetime) -> None:
        stamp = at.strftime("%Y-%m-%d %H:%M:%S,") + f"{at.microsecond // 1000:03d}"
        self.log(rank, f"{stamp} INFO trainer: {text}", at)

    def steps(self, rank: int, first: int, last: int, start: datetime, every: float = 1.0) -> datetime:
        t = start
        for s in range(first, last + 1):
            self.info(rank, f"step {s}/500 | loss {2.0 - s / 1000:.4f}", t)
            t += timedelta(seconds=every)
        return t

    def steps_all(self, last: dict[int, int], start: datetime, every: float = 1.0) -> datetime:
        """Every rank's step lines in time order (rank ``r`` up to step ``last[r]``); the time after the last."""
        t = start
        for s in range(1, max(last.values()) + 1):
            for r in sorted(last):
                if s <= last[r]:
                    self.info(r, f"step {s}/500 | loss {2.0 - s / 1000:.4f}", t)
            t += timedelta(seconds=every)
        return t

    def traceback(self, rank: int, frames: list[tuple[str, int, str, str]], error: str) -> None:
        self.log(rank, "Traceback (most recent call last):")
        for file, line, func, code in frames:
            self.log(rank, f'  File "{file}", line {line}, in {func}')
            self.log(rank, f"    {code}")
        self.log(rank, error)


TRAIN = "/workspace/train.py"
C10D = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"
TENSOR = "/usr/lib/python3/site-packages/torch/_tensor.py"
BACKWARD = [(TRAIN, 88, "main", "loss.backward()"), (TENSOR, 626, "backward", "torch.autograd.backward(")]


def in_collective(api: str, line: int) -> list[tuple[str, int, str, str]]:
    """The frames of a rank blocked in ``dist.<api>`` called from train.py:<line>."""
    return [(TRAIN, line, "main", f"dist.{api}(t)"), (C10D, 2501, api, "work.wait()")]


def present(
    inc: Incident,
    root: Path,
    *,
    prefix: str = "rank",
    per_rank_files: bool = False,
    compress: bool = False,
    untimed: bool = False,
    nodes: int = 2,
) -> Path:
    """Write ``inc`` under ``root/logs`` in one presentation and return the directory.

    ``prefix``: ``rank`` (``[rankN]:``) or ``srun`` (``N: ``, one task per rank); ``per_rank_files``: one file per
    rank (``rank_N.log``, no prefix) instead of one file per node; ``untimed``: every timestamp removed."""
    logs = root / "logs"
    logs.mkdir(parents=True)
    per_node = max(1, inc.world // nodes)
    files: dict[str, list[str]] = {}
    for ln in inc.lines:
        text = ln.text
        if untimed:
            text = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", text)
            text = re.sub(r"^([IWEF]\d{4}) \d\d:\d\d:\d\d\.\d{6} ", r"\1 ", text)
        if ln.rank is None:
            name = "launcher.log" if per_rank_files else "node_0.log"
            files.setdefault(name, []).append(text)
            continue
        if per_rank_files:
            files.setdefault(f"rank_{ln.rank}.log", []).append(text)
            continue
        node = ln.rank // per_node
        tag = f"[rank{ln.rank}]:" if prefix == "rank" else f"{ln.rank}: "
        files.setdefault(f"node_{node}.log", []).append(f"{tag}{text}" if prefix == "rank" else tag + text)
    for name, lines in files.items():
        data = ("\n".join(lines) + "\n").encode()
        if compress:
            (logs / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (logs / name).write_bytes(data)
    return logs


Builder = Callable[[], Incident]


def world_line(inc: Incident) -> None:
    for r in range(inc.world):
        inc.info(r, f"process group ready: rank={r} world_size={inc.world} backend=gloo", T0)
