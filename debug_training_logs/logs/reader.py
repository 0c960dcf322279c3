"""Streaming access to a log file's bytes and lines, whatever its compression.

Never loads a whole file. A damaged file (truncated gzip, binary content, unreadable) yields what could be read and
records the reason in a :class:`ReadProblems` list, so results can mark themselves partial instead of failing.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

from debug_training_logs.logs.discovery import LogFile

COMPRESSED_BLOCK = 256 << 10
"""Bytes per read from a compressed stream: a truncated stream loses at most this much before the damage."""

CHUNK = 8 << 20
"""Bytes per streamed chunk (8 MiB): large enough to amortise Python overhead, small enough for flat memory."""


@dataclass(repr=False, eq=False)
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
        return cast(IO[bytes], _CheckedZstd(lf.path))
    if lf.compression == "bz2":
        return cast(IO[bytes], bz2.open(lf.path, "rb"))
    if lf.compression == "xz":
        return cast(IO[bytes], lzma.open(lf.path, "rb"))
    return open(lf.path, "rb")


BINARY_SNIFF_BYTES = 8192
"""Bytes at the start of a (decompressed) file that decide whether it is text."""

BINARY_BAD_FRACTION = 0.10
"""A head with more than this share of bytes that no text log has (control characters other than tab, newline,
carriage return, form feed, backspace and ESC; bytes that are not valid UTF-8) is binary. Random or packed data
scores ~60 %, a log with stray Latin-1 accents a few %."""

BINARY_BAD_MIN = 16
"""...and at least this many such bytes (a short log with a few stray bytes stays text)."""

_TEXT_CONTROLS = frozenset(b"\t\n\r\f\b\x1b\x0b")
_CONTROL = bytes(c for c in range(32) if c not in _TEXT_CONTROLS) + b"\x7f"


def binary_reason(head: bytes) -> str | None:
    """Why the first bytes of a (decompressed) file are not text, or None when they read as text."""
    head = head[:BINARY_SNIFF_BYTES]
    if b"\x00" in head:
        return "binary content (NUL bytes), not a text log; skipped"
    if not head:
        return None
    controls = len(head) - len(head.translate(None, _CONTROL))
    invalid = 0
    if not head.isascii():
        text = head.decode("utf-8", errors="replace")
        invalid = text.count("\ufffd") - (1 if text.endswith("\ufffd") else 0)  # a character cut at the end
    if (controls + invalid) > max(BINARY_BAD_MIN, BINARY_BAD_FRACTION * len(head)):
        share = 100 * (controls + invalid) / len(head)
        return f"binary content ({share:.0f}% of the first bytes are control characters or invalid UTF-8); skipped"
    return None


class _CheckedZstd(io.RawIOBase):
    """A zstd file's decompressed bytes, every frame (``zstd`` appends and ``pzstd`` write several), raising
    ``EOFError`` at the end when the last frame has no end or the bytes differ from the sizes the frames declare.

    Needed because ``zstandard``'s stream reader returns a truncated file's bytes as if they were complete; gzip,
    bz2 and xz already raise ``EOFError`` on a missing end.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import zstandard

        self._path = path
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._reader = zstandard.ZstdDecompressor().stream_reader(self._fh, read_across_frames=True, closefd=False)
        self._out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._reader.read(len(buffer))
        if not data:
            problem = zstd_frames_problem(self._path, self._out)
            if problem is not None:
                raise EOFError(problem)
            return 0
        buffer[: len(data)] = data
        self._out += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._reader.close()  # type: ignore[no-untyped-call]
            self._fh.close()
        super().close()


_ZSTD_FRAME = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # ...50 to ...5F


def zstd_frames_problem(path: str | os.PathLike[str], decompressed: int | None = None) -> str | None:
    """Walk the frame and block headers of a zstd file (seeks only, no decompression): None when every frame is
    complete, else what is wrong. ``decompressed``: bytes actually produced, checked against the declared content
    sizes when every frame declares one."""
    declared: int | None = 0
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        pos = 0
        frames = 0
        while pos < size:
            fh.seek(pos)
            head = fh.read(18)
            if len(head) < 4:
                return f"truncated zstd stream: {len(head)} stray byte(s) at offset {pos}"
            magic = int.from_bytes(head[:4], "little")
            if _ZSTD_SKIPPABLE <= magic <= _ZSTD_SKIPPABLE + 15:
                if len(head) < 8:
                    return f"truncated zstd stream: skippable frame header cut at offset {pos}"
                pos += 8 + int.from_bytes(head[4:8], "little")
                if pos > size:
                    return f"truncated zstd stream: skippable frame at offset {pos} runs past the end"
                continue
            if magic != _ZSTD_FRAME:
                return f"corrupt zstd stream: no frame magic at offset {pos}"
            if len(head) < 6:
                return f"truncated zstd stream: frame header cut at offset {pos}"
            fhd = head[4]
            fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
            header = 1 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
            fcs_len = (1 if single else 0, 2, 4, 8)[fcs_flag]
            if len(head) < 4 + header + fcs_len:
                return f"truncated zstd stream: frame header cut at offset {pos}"
            if fcs_len and declared is not None:
                raw = head[4 + header : 4 + header + fcs_len]
                declared += int.from_bytes(raw, "little") + (256 if fcs_len == 2 else 0)
            else:
                declared = None
            pos += 4 + header + fcs_len
            while True:  # blocks: 3-byte header (last flag, type, size); RLE blocks store one byte
                fh.seek(pos)
                bh = fh.read(3)
                if len(bh) < 3:
                    return f"truncated zstd stream: frame {frames + 1} ends without its last block (at byte {size})"
                v = int.from_bytes(bh, "little")
                last, btype, bsize = v & 1, (v >> 1) & 3, v >> 3
                pos += 3 + (1 if btype == 1 else bsize)
                if pos > size:
                    return f"truncated zstd stream: frame {frames + 1} is cut inside a block (file has {size} bytes)"
                if last:
                    break
            pos += 4 if checksum else 0
            if pos > size:
                return f"truncated zstd stream: frame {frames + 1} is missing its checksum"
            frames += 1
    if decompressed is not None and declared is not None and frames and decompressed != declared:
        return f"zstd stream decompressed to {decompressed} bytes but its frames declare {declared}"
    return None


def looks_binary(head: bytes) -> bool:
    """True when the first bytes of a (decompressed) file are not text (see :func:`binary_reason`)."""
    return binary_reason(head) is not None


LONG_LINE_KEEP = 512 << 10
"""A line longer than a chunk keeps this many bytes of its head and of its tail (the middle is cut and counted), so
no line costs more memory than a fixed cap however long it is (a progress bar redrawn with ``\r`` for hours)."""


def cut_marker(n: int) -> bytes:
    """What stands in a line in place of ``n`` bytes cut from its middle (``\r``-separated, like a progress record)."""
    return b"\r[... %d bytes cut ...]\r" % n


@dataclass(repr=False, eq=False)
class LongLines:
    """Lines longer than a chunk seen in one stream: how many, and how many bytes were cut or split from them."""

    lines: int = 0
    cut_bytes: int = 0

    def note(self) -> str:
        return (
            f"partly read: {self.lines} line(s) longer than a chunk kept their first and last {LONG_LINE_KEEP >> 10}"
            f" KiB; {self.cut_bytes:,} bytes in between were not read"
        )


def iter_chunks(
    lf: LogFile, problems: ReadProblems, chunk_size: int = CHUNK, *, split_long_lines: bool = False
) -> Iterator[bytes]:
    """Decompressed chunks of ``lf``, each ending on a line boundary (the last may lack the final newline).

    On a read error (truncated or corrupt compressed stream, I/O error) what was read so far is yielded and the
    reason is recorded in ``problems``; on binary content nothing is yielded. Compressed streams are read in small
    blocks so that a damaged tail loses at most one block. A line longer than ``chunk_size`` is cut to its head and
    tail (see :data:`LONG_LINE_KEEP`), or with ``split_long_lines`` yielded in pieces that end at a ``\r`` (the
    searcher counts newlines itself and wants every progress record searched).
    """
    damaged = "truncated or corrupt compressed stream" if lf.compression != "none" else "read error"
    try:
        fh = open_binary(lf)
    except OSError as exc:
        problems.add(lf.rel, f"cannot open ({exc.strerror or exc})")
        return
    with fh:
        read_size = chunk_size if lf.compression == "none" else COMPRESSED_BLOCK
        yield from iter_stream_chunks(
            fh,
            lf.rel,
            problems,
            damaged,
            read_size=read_size,
            chunk_size=chunk_size,
            split_long_lines=split_long_lines,
        )


def iter_stream_chunks(
    fh: IO[bytes],
    ref: str,
    problems: ReadProblems,
    damaged: str,
    *,
    read_size: int = CHUNK,
    chunk_size: int = CHUNK,
    split_long_lines: bool = False,
) -> Iterator[bytes]:
    """Chunks of an open byte stream (a file, a decompressor, an archive member) ending on line boundaries.

    ``damaged`` names what a read error means for this kind of stream (it is recorded under ``ref`` with the
    exception); what was read before the error is still yielded. Binary content yields nothing. Memory stays within
    about ``chunk_size + read_size`` whatever the line lengths (see :func:`iter_chunks` for long lines).
    """
    pending: list[bytes] = []
    pending_len = 0
    first = True
    long_lines = LongLines()
    in_long = False  # inside a line longer than a chunk
    long_head: bytes | None = None  # cut mode: that line's head, its last bytes so far, the bytes dropped from it
    long_tail = b""
    line_cut = 0
    try:
        while True:
            block = fh.read(read_size)
            if not block:
                break
            if first:
                first = False
                why_binary = binary_reason(block)
                if why_binary is not None:
                    problems.add(ref, why_binary)
                    return
            if long_head is not None:
                nl = block.find(b"\n")
                joined = long_tail + (block if nl < 0 else block[:nl])
                line_cut += max(0, len(joined) - LONG_LINE_KEEP)
                long_tail = joined[-LONG_LINE_KEEP:]
                if nl < 0:
                    continue
                yield long_head + cut_marker(line_cut) + long_tail + b"\n"
                long_lines.cut_bytes += line_cut
                long_head, long_tail, line_cut, in_long = None, b"", 0, False
                block = block[nl + 1 :]
                if not block:
                    continue
            pending.append(block)
            pending_len += len(block)
            if pending_len < chunk_size:
                continue
            data = b"".join(pending)
            cut_at = data.rfind(b"\n")
            if cut_at >= 0:
                in_long = False
                rest = data[cut_at + 1 :]
                pending, pending_len = [rest], len(rest)
                yield data[: cut_at + 1]
                if pending_len < chunk_size:
                    continue
                data = rest
            # a whole chunk without a newline: a line longer than a chunk
            if not in_long:
                long_lines.lines += 1
                in_long = True
            if split_long_lines:
                cut_at = data.rfind(b"\r")
                cut_at = len(data) - 1 if cut_at < 0 else cut_at
                rest = data[cut_at + 1 :]
                pending, pending_len = [rest], len(rest)
                yield data[: cut_at + 1]
            else:
                long_head, long_tail = data[:LONG_LINE_KEEP], data[-LONG_LINE_KEEP:]
                line_cut = len(data) - 2 * LONG_LINE_KEEP
                pending, pending_len = [], 0
    except Exception as exc:  # EOFError, zlib/lzma/zstd/tar errors, OSError: all mean "damaged from here on"
        problems.add(ref, f"{damaged} ({type(exc).__name__}: {exc}); read up to the damage")
    if long_head is not None:
        yield long_head + cut_marker(line_cut) + long_tail
        long_lines.cut_bytes += line_cut
    if pending_len:
        yield b"".join(pending)
    if long_lines.cut_bytes:
        problems.add(ref, long_lines.note())


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
