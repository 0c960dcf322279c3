"""The read-back of untimed lines (``read_back.read_lines``, what the timeline's untimed events are dated by): the
nearest earlier timed line, found however far back it is, from the top of the file or from a scan's checkpoint
(against a line-by-line reference)."""

from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

import pytest

from debug_training_logs.analysis.grep import grep_all_ranks
from debug_training_logs.analysis.read_back import read_lines
from debug_training_logs.logs.nearest_time import TIMESTAMP
from debug_training_logs.logs.reader import CHUNK


def _reference(lines: list[bytes], wanted: set[int]) -> dict[int, int]:
    """Wanted line -> the line number of the nearest timed line at or before it (line by line)."""
    out: dict[int, int] = {}
    last = None
    for i, line in enumerate(lines, start=1):
        if TIMESTAMP.search(line):
            last = i
        if i in wanted and last is not None:
            out[i] = last
    return out


def _untimed(n: int) -> list[bytes]:
    return [b"[rank3]: Epoch 0: %d%%|####| %d/99999 [loss=2.%03d]" % (i % 100, i, i % 999) for i in range(n)]


TIMED = b"[NeMo I 2026-05-21 07:%02d:00 train:88] step"
PER_LINE = len(_untimed(1)[0]) + 1


def _minutes(lines: list[bytes], wanted: set[int]) -> dict[int, int]:
    """The reference as the minute each wanted line's nearest timed line states (``TIMED % minute``)."""
    return {w: int(lines[ln - 1][22:24]) for w, ln in _reference(lines, wanted).items()}


def _earliest(root: Path, rel: str, wanted: set[int]) -> dict[int, datetime]:
    got = read_lines(root, {rel: wanted}, 2026)
    return {ln: at.earliest for (_rel, ln), at in got.items() if at.earliest is not None}


@pytest.mark.parametrize("scanned", [False, True], ids=["from-the-top", "from-a-checkpoint"])
@pytest.mark.parametrize("ask_early", [False, True], ids=["late-lines", "also-line-3"])
@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    "stretch_bytes",
    [100 << 10, 600 << 10, 5 << 20, CHUNK + (1 << 20)],
    ids=["100KiB", "600KiB", "5MiB", "past-a-chunk"],
)
def test_nearest_timed_line_across_long_untimed_stretches(
    tmp_path: Path, compress: bool, stretch_bytes: int, ask_early: bool, scanned: bool
) -> None:
    """Two timed lines, then an untimed stretch (progress bars) that may cross the reader's chunk boundary, then
    untimed lines we ask about: each gets the second timed line's time, never an older one and never nothing."""
    lines = [TIMED % 1, *_untimed(3), TIMED % 2, *_untimed(stretch_bytes // PER_LINE), *_untimed(50)]
    data = b"\n".join(lines) + b"\n"
    name = "rank.log.gz" if compress else "rank.log"
    (tmp_path / name).write_bytes(gzip.compress(data, 1) if compress else data)
    if scanned:  # the scan records checkpoints: the read-back seeks to the one before each line
        grep_all_ranks(tmp_path)
    wanted = {len(lines) - 10, len(lines)} | ({3} if ask_early else set())
    got = _earliest(tmp_path, name, wanted)
    assert {w: t.minute for w, t in got.items()} == _minutes(lines, wanted)
    assert got[len(lines)] == datetime(2026, 5, 21, 7, 2)


def test_timed_lines_are_their_own_answer_and_untimed_files_have_none(tmp_path: Path) -> None:
    lines = [*_untimed(5), TIMED % 7, *_untimed(5), TIMED % 8]
    (tmp_path / "a.log").write_bytes(b"\r\n".join(lines))  # CRLF, no trailing newline
    (tmp_path / "b.log").write_bytes(b"\n".join(_untimed(100)))
    got = _earliest(tmp_path, "a.log", {1, 6, 9, 12})
    assert {w: t.minute for w, t in got.items()} == {6: 7, 9: 7, 12: 8}
    assert _earliest(tmp_path, "b.log", {1, 50, 100}) == {}
