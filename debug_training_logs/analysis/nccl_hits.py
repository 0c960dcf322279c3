"""The NCCL sink's output: one parsed candidate line (:class:`Hit`) and what one file's sink found
(:class:`FileEvents`), compact enough to cross the scan's process boundary."""

from __future__ import annotations

from dataclasses import dataclass, field

from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.textcut import cut

MAX_UNPARSED_SAMPLES = 5
"""Unparsed watchdog-like lines kept per file as a sample (file:line and text), so a format we miss is visible."""


@dataclass(frozen=True, slots=True, repr=False)
class Hit:
    """One parsed candidate line, compact enough to cross the process boundary."""

    line: int
    """1-based number of the physical line the record starts on (the first piece of a hard-wrapped message)."""
    rank: int | None
    """Global rank from ``[rankN]:``, a Ray ``[rank=N]`` or an ``srun --label`` prefix; None when the line has none."""
    header: tnt.Header | None
    event: tnt.Event
    text: str
    """The physical line ``line`` as the file has it (ANSI removed), cut for citation: a citation always quotes a
    line that exists, also when the message was re-joined from several."""
    joined: int = 1
    """Physical lines the message spanned (2+ for a hard-wrapped message: lines ``line`` .. ``line + joined - 1``)."""


@dataclass(repr=False, eq=False)
class FileEvents:
    """What one file's sink found."""

    rel: str
    hits: list[Hit] = field(default_factory=list)
    unparsed: int = 0
    """Watchdog-like candidate lines that held no complete message of ours, even after re-joining neighbours."""
    unparsed_samples: list[tuple[int, str]] = field(default_factory=list)
    """(line, text) of the first few unparsed lines."""
    rejoined: int = 0
    """Messages re-joined from hard-wrapped pieces or re-read in full (over-long lines)."""
    deduplicated: int = 0
    """Watchdog lines Ray folded away (`` [repeated Nx across cluster]``: the sum of N)."""

    def add_unparsed(self, line_no: int, text: str) -> None:
        self.unparsed += 1
        if len(self.unparsed_samples) < MAX_UNPARSED_SAMPLES:
            self.unparsed_samples.append((line_no, cut(strip_ansi(text))))
