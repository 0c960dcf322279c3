"""Finding and reading the files collected during a hang: which kind each is (by content, never by name), read
bounded, parsed by its format module (:mod:`~debug_training_logs.formats.py_spy`,
:mod:`~debug_training_logs.formats.node_telemetry`, :mod:`~debug_training_logs.formats.nccl_ras`).

Where: the files the logs' inventory marked as such (inside the logs directory; no second walk of it), the logs
directory's siblings named for them (``hang/``, ``stacks/``, ``py-spy/``, ``telemetry/``...), and an explicit
``hang_dir``. A file that cannot be read, is binary, or is bigger than :data:`MAX_ARTIFACT_BYTES` is noted and the
rest still read; nothing is ever written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from debug_training_logs.logs.discovery import LogFile, discover
from debug_training_logs.logs.reader import ReadProblems, iter_chunks

if TYPE_CHECKING:  # the format modules are imported when a file looks like one (most logs never do)
    from debug_training_logs.formats import nccl_ras, node_telemetry, py_spy

MAX_ARTIFACT_BYTES: Final = 64 << 20
"""Bytes read of one artifact (a py-spy dump of every thread of a big job is a few MB; more is cut, with a note)."""
MAX_ARTIFACT_FILES: Final = 20_000
"""Artifact files read at most (one dump per rank of a 10,000-rank job fits)."""
HEAD_BYTES: Final = 8192
_NODE_IN_NAME: Final = re.compile(
    r"(?P<node>[A-Za-z][\w\-]*?\d[\w\-]*?)(?:[._](?:dmesg|nvidia|smi|kern|journal|ras)|$)"
)


@dataclass(frozen=True, repr=False)
class Artifact:
    """One file collected during the hang: what it is and what reading it met."""

    rel: str
    path: Path
    """Where it is (a citation of ``rel`` is read back from here)."""
    kind: str
    """``py-spy``, ``nvidia-smi -q``, ``nvidia-smi``, ``kernel log``, ``NCCL RAS``."""
    problem: str | None = None


@dataclass(repr=False)
class Telemetry:
    """Node telemetry: GPU events of the kernel logs, GPU states of ``nvidia-smi``, NCCL RAS reports; each with
    the file it came from."""

    gpu_events: list[tuple[str, node_telemetry.GpuEvent]] = field(default_factory=list)
    gpus: list[tuple[str, node_telemetry.GpuStatus]] = field(default_factory=list)
    ras: list[tuple[str, nccl_ras.RasReport]] = field(default_factory=list)
    ras_lines: dict[str, list[str]] = field(default_factory=dict)
    """The RAS reports' lines (a few KB each), for citing them."""


@dataclass(repr=False)
class Found:
    files: list[Artifact] = field(default_factory=list)
    dumps: list[tuple[str, py_spy.ProcessStacks]] = field(default_factory=list)
    telemetry: Telemetry = field(default_factory=Telemetry)
    notes: list[str] = field(default_factory=list)


_WORDS: Final = (
    '"thread_id"',
    "py-spy",
    "py_spy::",
    "Check that the process is running",
    "NVSMI",
    "NVIDIA-SMI",
    "NVRM",
    "Xid",
    "Job summary",
    "compiled with CUDA",
    "communicators",
    "PEER_",
    "device handle",
    "No devices were found",
)
"""Words one of which an artifact's head has (besides a py-spy ``Process N:``/``Thread`` line): anything else is a
log, told apart by substring tests alone (a torch log's "Process group watchdog" is not a dump's header)."""


def _may_be_artifact(head: str) -> bool:
    if any(w in head for w in _WORDS):
        return True
    return any(f"{sep}{w}" in head for w in ("Process ", "Thread ") for sep in ("\n", ": ")) or head.startswith(
        ("Process ", "Thread ")
    )


def kind_of(head: str) -> str | None:
    """Which hang artifact a file's first few KB show, None for anything else (a log). A kernel log counts when its
    head has GPU lines (``NVRM``); one without them says nothing of the GPUs."""
    if not _may_be_artifact(head):
        return None
    from debug_training_logs.formats import nccl_ras, node_telemetry, py_spy

    if py_spy.is_py_spy(head):
        return "py-spy"
    if nccl_ras.is_ras(head):
        return "NCCL RAS"
    if "NVRM" not in head and "NVSMI" not in head and "NVIDIA-SMI" not in head and "Xid" not in head:
        return None
    k = node_telemetry.kind_of(head)
    return {"nvidia_smi_q": "nvidia-smi -q", "nvidia_smi_table": "nvidia-smi", "dmesg": "kernel log"}.get(k or "")


def find(roots: Iterable[tuple[Path, Path]], inside: Iterable[LogFile] = ()) -> Found:
    """Every hang artifact: ``inside`` (files of the logs directory its inventory marked) and the files in ``roots``
    (the hang directory and the logs directory's artifact siblings, each with the directory its files are shown
    relative to: :func:`~debug_training_logs.logs.sources.hang_roots`)."""
    out = Found()
    seen: set[Path] = set()
    for lf in inside:
        _read(lf, out, seen, inside=True)
    for root, shown_base in roots:
        files, skipped = discover(root)
        out.notes += [f"{s.rel}: {s.reason}" for s in skipped[:20]]
        for lf in files:
            if len(out.files) >= MAX_ARTIFACT_FILES:
                out.notes.append(f"only the first {MAX_ARTIFACT_FILES} hang artifacts were read")
                return out
            shown = _shown(lf.path, shown_base)
            _read(LogFile(lf.path, shown, lf.size, lf.compression), out, seen)
    return out


def _shown(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(path)


def _read(lf: LogFile, out: Found, seen: set[Path], *, inside: bool = False) -> None:
    real = lf.path.resolve()
    if real in seen:
        return
    seen.add(real)
    problems = ReadProblems()
    parts: list[bytes] = []
    size = 0
    cut = False
    for chunk in iter_chunks(lf, problems):
        parts.append(chunk)
        size += len(chunk)
        if size >= MAX_ARTIFACT_BYTES:
            cut = True
            break
    text = b"".join(parts)[:MAX_ARTIFACT_BYTES].decode("utf-8", "replace")
    problem = problems.items.get(lf.rel)
    kind = kind_of(text[:HEAD_BYTES]) or _kernel_log(text)
    if kind is None:
        if problem is not None and not inside:
            out.notes.append(f"{lf.rel}: {problem}")
        return  # not a hang artifact (a log beside them): the logs' scan reads it
    if cut:
        problem = (problem + "; " if problem else "") + f"read its first {MAX_ARTIFACT_BYTES >> 20} MB only"
    out.files.append(Artifact(lf.rel, lf.path, kind, problem))
    from debug_training_logs.formats import nccl_ras, node_telemetry, py_spy

    host = _node_of(lf.rel)
    if kind == "py-spy":
        out.dumps += [(lf.rel, p) for p in py_spy.parse(text)]
    elif kind == "NCCL RAS":
        out.telemetry.ras.append((lf.rel, nccl_ras.parse_ras(text)))
        out.telemetry.ras_lines[lf.rel] = [ln[:1000] for ln in text.splitlines()[:100_000]]
    elif kind == "kernel log":
        out.telemetry.gpu_events += [(lf.rel, e) for e in node_telemetry.parse_kernel_log(text.splitlines(), host)]
    else:
        out.telemetry.gpus += [(lf.rel, g) for g in node_telemetry.parse_nvidia_smi(text, host)]


def _kernel_log(text: str) -> str | None:
    """A kernel log whose GPU lines come after its head (read whole from the hang directory)."""
    from debug_training_logs.formats import node_telemetry

    if "NVRM" in text and node_telemetry.kind_of(text[:HEAD_BYTES]) == "dmesg":
        return "kernel log"
    return None


def _node_of(rel: str) -> str | None:
    """The node a telemetry file's name or directory states (``node-07.dmesg``, ``gpu-r07-n075/dmesg.txt``)."""
    for part in reversed(Path(rel).parts):
        stem = part.split(".")[0]
        m = _NODE_IN_NAME.match(stem)
        if m is not None and not stem.lower().startswith(("dmesg", "nvidia", "smi", "ras", "kern", "rank", "pid")):
            return m.group("node")
    return None
