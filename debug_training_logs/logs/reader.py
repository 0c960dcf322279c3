"""Streaming access to a log file's bytes and lines, whatever its compression.

Never loads a whole file. A damaged file (truncated gzip, binary content, unreadable) yields what could be read and
records the reason in a :class:`ReadProblems` list, so results can mark themselves partial instead of failing.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, cast

from debug_training_logs.logs.discovery import LogFile

COMPRESSED_BLOCK = 256 << 10
"""Bytes per read from a compressed stream: a truncated stream loses at most this much before the damage."""

CHUNK = 8 << 20
"""Bytes per streamed chunk (8 MiB): large enough to amortise Python overhead, small enough for flat memory."""


@dataclass
class ReadProblems:
    """Files that could not be read in full, with the reason (becomes ``coverage.unreadable_files``)."""

    items: dict[str, str] = field(default_factory=dict)

    def add(self, rel: str, reason: str) -> None:
        self.items.setdefault(rel, reason)


def open_binary(lf: LogFile) -> IO[bytes]:
    """Open ``lf`` for streaming, decompressed bytes."""
    if lf.compression == "gzip":
        return cast(IO[bytes], gzip.open(lf.path, "rb"))
    if lf.compression == "zstd":
        import zstandard

        fh = open(lf.path, "rb")  # noqa: SIM115 - closed by the stream reader (closefd=True)
        return cast(IO[bytes], zstandard.ZstdDecompressor().stream_reader(fh, closefd=True))
    if lf.compression == "bz2":
        return cast(IO[bytes], bz2.open(lf.path, "rb"))
    if lf.compression == "xz":
        return cast(IO[bytes], lzma.open(lf.path, "rb"))
    return open(lf.path, "rb")


def looks_binary(head: bytes) -> bool:
    """True when the first bytes of a (decompressed) file are not text: NUL bytes are the reliable sign."""
    return b"\x00" in head[:8192]


def iter_chunks(lf: LogFile, problems: ReadProblems, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """Decompressed chunks of ``lf``, each ending on a line boundary (the last may lack the final newline).

    On a read error (truncated or corrupt compressed stream, I/O error) what was read so far is yielded and the
    reason is recorded in ``problems``; on binary content nothing is yielded. Compressed streams are read in small
    blocks so that a damaged tail loses at most one block.
    """
    damaged = "truncated or corrupt compressed stream" if lf.compression != "none" else "read error"
    try:
        fh = open_binary(lf)
    except OSError as exc:
        problems.add(lf.rel, f"cannot open ({exc.strerror or exc})")
        return
    with fh:
        read_size = chunk_size if lf.compression == "none" else COMPRESSED_BLOCK
        yield from iter_stream_chunks(fh, lf.rel, problems, damaged, read_size=read_size, chunk_size=chunk_size)


def iter_stream_chunks(
    fh: IO[bytes],
    ref: str,
    problems: ReadProblems,
    damaged: str,
    *,
    read_size: int = CHUNK,
    chunk_size: int = CHUNK,
) -> Iterator[bytes]:
    """Chunks of an open byte stream (a file, a decompressor, an archive member) ending on line boundaries.

    ``damaged`` names what a read error means for this kind of stream (it is recorded under ``ref`` with the
    exception); what was read before the error is still yielded. Binary content yields nothing.
    """
    pending: list[bytes] = []
    pending_len = 0
    first = True
    try:
        while True:
            block = fh.read(read_size)
            if not block:
                break
            if first:
                first = False
                if looks_binary(block):
                    problems.add(ref, "binary content (NUL bytes), not a text log; skipped")
                    return
            pending.append(block)
            pending_len += len(block)
            if pending_len < chunk_size:
                continue
            data = b"".join(pending)
            cut_at = data.rfind(b"\n")
            if cut_at < 0:
                pending, pending_len = [data], len(data)
                continue
            rest = data[cut_at + 1 :]
            pending, pending_len = [rest], len(rest)
            yield data[: cut_at + 1]
    except Exception as exc:  # EOFError, zlib/lzma/zstd/tar errors, OSError: all mean "damaged from here on"
        problems.add(ref, f"{damaged} ({type(exc).__name__}: {exc}); read up to the damage")
    if pending_len:
        yield b"".join(pending)


def decode(raw: bytes) -> str:
    """Bytes of one line to text: UTF-8, invalid bytes replaced (a log with a stray byte must still read)."""
    return raw.decode("utf-8", errors="replace")


def iter_lines(lf: LogFile, problems: ReadProblems) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` for every line of ``lf`` (1-based, newline and trailing CR removed).

    This is a Python loop over lines: fine for small files and for the few lines a parser needs, too slow to search
    gigabytes; use :mod:`debug_training_logs.logs.scan` for that.
    """
    n = 0
    for chunk in iter_chunks(lf, problems):
        pieces = chunk.split(b"\n")
        if chunk.endswith(b"\n"):
            pieces.pop()  # the empty piece after the final newline is not a line
        for raw in pieces:
            n += 1
            yield n, decode(raw).rstrip("\r")
