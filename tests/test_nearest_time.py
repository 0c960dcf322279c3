"""``times_before``: the nearest earlier timed line, found however far back it is (against a line-by-line reference)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.nearest_time import TIMESTAMP, times_before
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


@pytest.mark.parametrize("ask_early", [False, True], ids=["late-lines", "also-line-3"])
@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    "stretch_bytes",
    [100 << 10, 600 << 10, 5 << 20, CHUNK + (1 << 20)],
    ids=["100KiB", "600KiB", "5MiB", "past-a-chunk"],
)
def test_nearest_timed_line_across_long_untimed_stretches(
    tmp_path: Path, compress: bool, stretch_bytes: int, ask_early: bool
) -> None:
    """Two timed lines, then an untimed stretch (progress bars) that may cross the reader's chunk boundary, then
    untimed lines we ask about: each gets the second timed line, never an older one and never nothing."""
    lines = [TIMED % 1, *_untimed(3), TIMED % 2, *_untimed(stretch_bytes // PER_LINE), *_untimed(50)]
    data = b"\n".join(lines) + b"\n"
    name = "rank.log.gz" if compress else "rank.log"
    (tmp_path / name).write_bytes(gzip.compress(data, 1) if compress else data)
    (lf,), _skipped = discover(tmp_path)
    wanted = {len(lines) - 10, len(lines)} | ({3} if ask_early else set())
    got = times_before(lf, wanted)
    assert {w: ln for w, (ln, _text) in got.items()} == _reference(lines, wanted)
    assert got[len(lines)][1].startswith("[NeMo I 2026-05-21 07:02:00")


def test_timed_lines_are_their_own_answer_and_untimed_files_have_none(tmp_path: Path) -> None:
    lines = [*_untimed(5), TIMED % 7, *_untimed(5), TIMED % 8]
    (tmp_path / "a.log").write_bytes(b"\r\n".join(lines))  # CRLF, no trailing newline
    (tmp_path / "b.log").write_bytes(b"\n".join(_untimed(100)))
    (a, b), _skipped = discover(tmp_path)
    got = times_before(a, {1, 6, 9, 12})
    assert {w: ln for w, (ln, _t) in got.items()} == {6: 6, 9: 6, 12: 12}
    assert got[12][1].startswith("[NeMo I 2026-05-21 07:08:00")
    assert times_before(b, {1, 50, 100}) == {}
