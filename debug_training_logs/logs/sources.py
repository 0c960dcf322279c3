"""Where a job's evidence is read from, found in one walk of each tree (:func:`find_sources`): the worker logs, the AIS
logs, the flight-recorder dumps (below the logs, in the logs' sibling dump directories such as ``../fr``, and in
``fr_dir``) and the directories of hang artifacts (``hang_dir`` and the logs' siblings such as ``../py-spy``); and
the identity of every file of them (:meth:`JobSources.key`), the key of what is gathered from them.

The evidence is gathered from a :class:`JobSources`: the directories the tool was given are turned into files here,
once per call, and the readers after it are handed the files (the dumps, the hang directories), not a directory to
look through again.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from debug_training_logs.logs.discovery import (
    REGULAR_REASONS,
    LogFile,
    Skipped,
    discover,
    once_per_walk,
    regular_files,
)

DUMP_SIBLINGS = ("fr", "traces", "trace", "flight_recorder", "fr_dumps", "dumps", "nccl_trace")
"""Directories next to the logs where flight-recorder dumps are looked for."""
HANG_SIBLINGS = (
    "hang",
    "hangs",
    "stacks",
    "stack",
    "py-spy",
    "pyspy",
    "py_spy",
    "stack_dumps",
    "telemetry",
    "node_telemetry",
    "dmesg",
    "nvidia-smi",
    "nvidia_smi",
    "ras",
    "nccl_ras",
)
"""Directories next to the logs where what was collected during a live hang is looked for."""


@dataclass(frozen=True)
class DumpFile:
    """A dump found on disk: its path, the path shown to the user, and the global rank its name carries."""

    path: Path
    shown: str
    rank: int


@dataclass(frozen=True, eq=False)
class JobSources:
    """The files of one job's evidence, found by :func:`find_sources`."""

    logs: Path
    """The worker logs' directory, as the caller gave it (checked)."""
    log_files: tuple[LogFile, ...]
    skipped: tuple[Skipped, ...]
    """What the walk of ``logs`` found and set aside (with why)."""
    dumps: tuple[DumpFile, ...]
    """The flight-recorder dumps (each file once, by rank)."""
    hang_roots: tuple[tuple[Path, Path], ...]
    """The directories of hang artifacts, each with the directory its files are shown relative to."""
    ais: Path | None = None
    fr: Path | None = None
    hang: Path | None = None

    def logs_key(self) -> Hashable:
        """The worker logs' part of :meth:`key`: :func:`files_key` of ``logs`` (what the other tools' results over the
        same logs are kept under)."""
        return (str(self.logs), stamps(self.log_files), tuple((s.rel, s.reason) for s in self.skipped))

    def key(self) -> Hashable:
        """What the evidence depends on: every file's relative path, size and mtime, of every tree."""
        dump_stamps = []
        for d in self.dumps:
            try:
                st = d.path.stat()
                dump_stamps.append((str(d.path), st.st_size, st.st_mtime_ns))
            except OSError:
                dump_stamps.append((str(d.path), -1, -1))
        return (
            self.logs_key(),
            files_key(self.ais, archives=True) if self.ais is not None else None,
            tuple(dump_stamps),
            tuple(files_key(d) for d, _ in self.hang_roots),
        )


def find_sources(
    logs: Path, ais: Path | None = None, fr_dir: Path | None = None, hang: Path | None = None
) -> JobSources:
    """The files of a job: one walk of the logs (which serves the scan's :func:`discover` of them too, within
    :func:`~debug_training_logs.logs.discovery.one_walk`), the dumps among them and in the dump directories, and the
    hang directories. The directories are checked by the caller (``paths.input_dir``)."""
    files, skipped = discover(logs)
    base = logs.resolve()
    parent = (base.parent, base.name)
    fr_root = fr_dir.resolve() if fr_dir is not None else None
    regular = [(f.path, f.rel) for f in files] + [(base / s.rel, s.rel) for s in skipped if s.reason in REGULAR_REASONS]
    return JobSources(
        logs=logs,
        log_files=tuple(files),
        skipped=tuple(skipped),
        dumps=tuple(once_per_walk(("flight-recorder dumps", base, fr_root), lambda: _dumps(regular, parent, fr_root))),
        hang_roots=tuple(hang_roots(base.parent, hang, not_named=base.name)),
        ais=ais,
        fr=fr_dir,
        hang=hang,
    )


def hang_roots(parent: Path, hang: Path | None, *, not_named: str) -> list[tuple[Path, Path]]:
    """``hang`` and the hang-artifact siblings in ``parent`` (the logs' parent; the logs' own name ``not_named`` is not
    one), each with the directory its files are shown relative to."""
    roots = [(hang, hang.parent)] if hang is not None else []
    return roots + [(s, parent) for n in HANG_SIBLINGS if n != not_named and (s := parent / n).is_dir()]


def find_dumps(logs_dir: str | os.PathLike[str] | None, fr_dir: str | os.PathLike[str] | None = None) -> list[DumpFile]:
    """Dump files in ``fr_dir``, below ``logs_dir`` and in its sibling dump directories (each file once; not in a
    hidden directory), from the one walk of each tree: found once per tool call, whether for a cache key or for
    reading.

    Paths are shown relative to ``logs_dir`` when below it, else relative to its parent (``../fr/...`` reads as
    ``fr/...``), else absolute."""
    fr_root = Path(fr_dir).resolve() if fr_dir is not None else None
    if logs_dir is None:
        return once_per_walk(("flight-recorder dumps", None, fr_root), lambda: _dumps([], None, fr_root))
    return list(find_sources(Path(logs_dir), fr_dir=fr_root).dumps)


def files_key(root: Path, archives: bool = False) -> tuple[Hashable, ...]:
    """What a result over ``root`` depends on: every file's relative path, size and mtime (and the skipped ones)."""
    found, skipped = discover(root, include_archives=archives)
    return (str(root), stamps(found), tuple((s.rel, s.reason) for s in skipped))


def stamps(files: Sequence[LogFile]) -> tuple[tuple[str, int, int], ...]:
    """Each file's relative path, size and mtime (-1 when it cannot be read)."""
    out = []
    for f in files:
        try:
            out.append((f.rel, f.size, f.path.stat().st_mtime_ns))
        except OSError:
            out.append((f.rel, f.size, -1))
    return tuple(out)


def _dumps(regular: list[tuple[Path, str]], parent: tuple[Path, str] | None, fr_root: Path | None) -> list[DumpFile]:
    """The dumps in ``fr_root``, among the logs' regular files (path, relative path) and in the dump directories next
    to the logs (``parent``: the logs' parent directory and the logs' own name there)."""
    found: dict[Path, DumpFile] = {}
    if fr_root is not None:
        _look(fr_root, fr_root.parent, found)
    for p, rel in regular:
        parts = rel.split("/")
        if p not in found and not any(d.startswith(".") for d in parts[:-1]):
            _add(p, rel, found)
    if parent is not None:
        where, logs_name = parent
        for name in DUMP_SIBLINGS:
            sib = where / name
            if name != logs_name and sib.is_dir():
                _look(sib, where, found)
    return sorted(found.values(), key=lambda d: (d.rank, d.shown))


def _look(root: Path, shown_base: Path, out: dict[Path, DumpFile]) -> None:
    if not root.is_dir():
        return
    for p in regular_files(root):
        if p in out or any(d.startswith(".") for d in p.relative_to(root).parts[:-1]):
            continue
        try:
            shown = p.relative_to(shown_base).as_posix()
        except ValueError:
            shown = str(p)
        _add(p, shown, out)


def _add(path: Path, shown: str, out: dict[Path, DumpFile]) -> None:
    rank = _looks_like_dump(path)
    if rank is not None:
        out[path] = DumpFile(path, shown, rank)


def _looks_like_dump(path: Path) -> int | None:
    from debug_training_logs.formats import flight_recorder as fr  # the dump format (and its unpickler): only here

    if not fr.named_like_dump(path.name):
        return None
    rank = fr.rank_from_name(path.name)
    if rank is not None:
        return rank
    try:
        with open(path, "rb") as fh:
            head = fh.read(fr.HEAD_BYTES)
    except OSError:
        return None
    return fr.dump_rank(path.name, head)
