"""Reading lines back after a scan: from the scan's checkpoints (plain files as the scan saw them) or from the top
(compressed or changed files), always the same answer as reading every line of the file.

The matrix: trailing newline or not, CRLF, lines longer than a window (and one longer than a chunk, split at ``\\r``
by the scan and cut by the reader), wanted lines at window boundaries, the first and last line, past the end;
plain, .gz and .zst."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest
import zstandard

from debug_training_logs.analysis import read_back
from debug_training_logs.analysis.read_back import LineAt, read_lines
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.logs import scan_lines, scan_types, scan_windows
from debug_training_logs.logs.discovery import LogFile, discover
from debug_training_logs.logs.nearest_time import TIMESTAMP
from debug_training_logs.logs.reader import CHUNK, decode
from debug_training_logs.logs.scan import scan_files
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.logs.scan_types import MAX_LINE_CHARS, PatternSpec
from debug_training_logs.memo import Memo

YEAR = 2026
SMALL_WINDOW = 4096
"""Windows this small put many checkpoints (and boundaries) into a small file."""


def _lines(seed: int, n: int, *, long_every: int = 0) -> list[bytes]:
    """Log lines: timed NeMo and c10 lines, untimed progress and traceback lines (long stretches without a time), and
    untimed lines that hold a piece of a time (``2031-``, ``:07.``: what the read-back's native search stops at)."""
    rng = random.Random(seed)
    out: list[bytes] = []
    minute = 0
    for i in range(n):
        r = rng.random()
        if long_every and i % long_every == long_every - 1:
            out.append(b"Epoch 0: " + b"\r".join(b"%d%%|####| %d/99" % (k % 100, k) for k in range(600)))
        elif r < 0.15:
            minute += 1
            out.append(b"[NeMo I 2026-05-21 07:%02d:%02d train:88] step %d" % (minute // 60 % 60, minute % 60, i))
        elif r < 0.2:
            out.append(b"\x1b[31m[rank3]: ValueError: bad sample %d\x1b[0m" % i)
        elif r < 0.22:  # a c10/glog header's time (no date)
            minute += 1
            out.append(b"[rank5]:[W521 07:%02d:%02d.%06d00 ProcessGroupNCCL.cpp:1234] hb" % (minute // 60 % 60, 7, i))
        elif r < 0.24:  # a date's or a glog time's start without the rest: no time
            out.append(b"[rank2]: shard 2031-%02d eta 00:%02d.5s" % (i % 99, i % 60))
        else:
            out.append(
                b"[rank%d]: Epoch 0: %d%%|####| %d/10000 [loss=2.%03d]" % (i % 8, i % 100, i, rng.randrange(999))
            )
    return out


def _variants(tmp_path: Path) -> dict[str, tuple[bytes, list[bytes]]]:
    """name -> (file bytes, its lines)."""
    out: dict[str, tuple[bytes, list[bytes]]] = {}
    base = _lines(1, 3000)
    out["plain.log"] = (b"\n".join(base) + b"\n", base)
    out["no_final_newline.log"] = (b"\n".join(base), base)
    crlf = [ln + b"\r" for ln in _lines(2, 2000)]
    out["crlf.log"] = (b"\n".join(crlf) + b"\n", crlf)
    longish = _lines(3, 1500, long_every=97)  # progress bars of ~7 KB: longer than a (small) window
    out["long_lines.log"] = (b"\n".join(longish) + b"\n", longish)
    quiet = (
        [b"[NeMo I 2026-05-21 07:00:01 train:1] start"] + _lines(4, 1)[:0] + [b"untimed %d" % i for i in range(4000)]
    )
    quiet += [b"[NeMo I 2026-05-21 08:00:01 train:2] end", b"tail"]
    out["quiet_stretch.log"] = (b"\n".join(quiet) + b"\n", quiet)
    for name in ("plain.log", "no_final_newline.log", "crlf.log"):
        data, lines = out[name]
        out[name + ".gz"] = (gzip.compress(data), lines)
        out[name + ".zst"] = (zstandard.ZstdCompressor().compress(data), lines)
    for name, (data, _) in out.items():
        (tmp_path / name).write_bytes(data)
    return out


def _expected_text(lines: list[bytes], wanted: set[int]) -> dict[int, str]:
    return {w: decode(lines[w - 1][:MAX_LINE_CHARS]).rstrip("\r") for w in wanted if 1 <= w <= len(lines)}


def _stamp(raw: bytes) -> object:
    return read_back._stamp(raw, YEAR)


def _expected_at(rel: str, lines: list[bytes], wanted: set[int]) -> dict[tuple[str, int], LineAt]:
    """What reading every line gives: the line, its own time, the nearest timed lines before and after it."""
    timed = [i for i, ln in enumerate(lines) if TIMESTAMP.search(ln)]
    out: dict[tuple[str, int], LineAt] = {}
    for w in wanted:
        if not 1 <= w <= len(lines):
            out[(rel, w)] = LineAt(rel, w, None, None, None, None)
            continue
        raw = lines[w - 1]
        text = strip_ansi(decode(raw[:MAX_LINE_CHARS])).rstrip("\r")
        own = _stamp(raw) if TIMESTAMP.search(raw) else None
        before = [i for i in timed if i < w - 1]
        after = [i for i in timed if i > w - 1]
        lower = _stamp(lines[before[-1]]) if before else None
        upper = _stamp(lines[after[0]]) if after else None
        out[(rel, w)] = LineAt(rel, w, text, own, lower, upper)  # type: ignore[arg-type]
    return out


def _wanted_sets(n: int, cp: scan_types.Checkpoints | None, seed: int) -> list[set[int]]:
    rng = random.Random(seed)
    sets = [{1}, {n}, {n + 1, n + 50}, {1, n}, set(rng.sample(range(1, n + 1), 12)), {n - 300, n - 2}, {n - 1500}]
    if cp is not None and len(cp.lines_before) > 1:
        edges = list(cp.lines_before[1:])
        sets.append({e for b in edges[:6] for e in (b, b + 1, b + 2)})  # last line of a window, first of the next
        sets.append({edges[-1] + 1, edges[len(edges) // 2]})
        sets.append({rng.randrange(1, n + 1) for _ in range(3)} | {edges[0]})
    return sets


@pytest.mark.parametrize("window", [SMALL_WINDOW, scan_windows.WINDOW])
def test_read_back_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    """Small windows: many checkpoints and boundaries; real ones: one checkpoint, lines near the end found backwards
    from it (:func:`~debug_training_logs.logs.scan_lines.seek_line`)."""
    monkeypatch.setattr(scan_windows, "WINDOW", window)
    variants = _variants(tmp_path)
    files = discover(tmp_path)[0]
    scans = {s.file.rel: s for s in scan_files(files, PatternSpec(("ValueError",)))}
    assert set(scans) == set(variants)
    for rel, (_data, lines) in variants.items():
        s = scans[rel]
        plain = not rel.endswith((".gz", ".zst"))
        cp = s.checkpoints
        assert (cp is not None) == plain, rel  # compressed files keep reading from the top
        if cp is not None:
            assert cp.offsets[0] == 0 and cp.lines_before[0] == 0, rel
            assert len(cp.offsets) > 5 or window > len(_data), rel
            assert cp.newlines == _data.count(b"\n"), rel
            assert list(cp.lines_before) == sorted(set(cp.lines_before)), rel
        lf = s.file
        assert (scan_lines.checkpoints_for(lf) is cp) if cp is not None else scan_lines.checkpoints_for(lf) is None
        for wanted in _wanted_sets(len(lines), cp, seed=len(rel)):
            want_text = _expected_text(lines, wanted)
            assert lines_at(lf, wanted) == want_text, (rel, sorted(wanted))
            assert lines_at(lf, wanted, keep_tail=200) == {
                w: (
                    decode(lines[w - 1][:MAX_LINE_CHARS] + b"\r" + lines[w - 1][-200:])
                    if len(lines[w - 1]) > MAX_LINE_CHARS
                    else decode(lines[w - 1][:MAX_LINE_CHARS])
                ).rstrip("\r")
                for w in want_text
            }, (rel, sorted(wanted))
            got = read_lines(tmp_path, {rel: wanted}, YEAR)
            assert got == _expected_at(rel, lines, wanted), (rel, sorted(wanted))


def test_a_changed_file_is_read_from_the_top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_windows, "WINDOW", SMALL_WINDOW)
    lines = _lines(7, 2000)
    p = tmp_path / "a.log"
    p.write_bytes(b"\n".join(lines) + b"\n")
    (s,) = scan_files(discover(tmp_path)[0], PatternSpec(("ValueError",)))
    assert s.checkpoints is not None and scan_lines.checkpoints_for(s.file) is s.checkpoints
    # the same size, another content and mtime: the old checkpoints would point into the wrong lines
    new = [b"[NeMo I 2026-05-21 09:00:00 x:1] head"] + [ln[::-1] for ln in lines[1:]]
    p.write_bytes(b"\n".join(new)[: p.stat().st_size - 1] + b"\n")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 1_000_000_000))
    lf = LogFile(p, "a.log", p.stat().st_size, "none")
    assert scan_lines.checkpoints_for(lf) is None
    now = p.read_bytes().split(b"\n")[:-1]
    wanted = {1, 500, 1500, len(now)}
    assert lines_at(lf, wanted) == _expected_text(now, wanted)
    assert read_lines(tmp_path, {"a.log": wanted}, YEAR) == _expected_at("a.log", now, wanted)


def test_a_line_longer_than_a_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tqdm bar redrawn with ``\\r`` past a chunk: the scan splits it at ``\\r`` (no checkpoint inside it), the
    reader cuts it to its head and tail; the lines after it read the same from a checkpoint as from the top."""
    bar = b"Epoch 0: " + b"\r".join(b"%06d|#####|" % k for k in range(CHUNK // 14 + 1000))
    assert len(bar) > CHUNK
    head = [b"[NeMo I 2026-05-21 07:00:0%d train:1] line %d" % (i % 10, i) for i in range(20_000)]
    tail = [b"[rank1]: untimed %d" % i for i in range(30_000)] + [b"[NeMo I 2026-05-21 07:59:00 train:2] end"]
    lines = [*head, bar, *tail]
    (tmp_path / "bar.log").write_bytes(b"\n".join(lines) + b"\n")
    (s,) = scan_files(discover(tmp_path)[0], PatternSpec(("untimed 29999",)))
    cp = s.checkpoints
    assert cp is not None and s.counts == [1]
    n_bar = len(head) + 1
    wanted = {1, len(head), n_bar, n_bar + 1, n_bar + 15_000, len(lines)}
    got = lines_at(s.file, wanted)
    assert got == _expected_text(lines, wanted)
    assert read_lines(tmp_path, {"bar.log": wanted}, YEAR) == _expected_at("bar.log", lines, wanted)
    with monkeypatch.context() as m:  # no checkpoints known (an empty cache): read from the top
        m.setattr(scan_lines, "MEMO", Memo())
        assert scan_lines.checkpoints_for(s.file) is None and lines_at(s.file, wanted) == got


def _resolving_safe_path(root: Path, rel: str) -> Path | None:
    """What :func:`read_back.safe_path` means, by resolving the whole path every time."""
    try:
        p = (root / rel).resolve()
    except (OSError, RuntimeError):
        return None
    return p if p.is_relative_to(root.resolve()) and p.is_file() else None


def test_safe_path_matrix(tmp_path: Path) -> None:
    """A citation's file under the logs: plain names, subdirectories, ``.``/``..`` parts, symlinks inside and out, a
    directory, a missing file, an absolute path; the same answer as resolving the whole path, with and without the
    root resolved by the caller, through a symlinked root too."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("x\n")
    root = tmp_path / "logs"
    (root / "node1").mkdir(parents=True)
    (root / "a.log").write_text("a\n")
    (root / "node1" / "b.log").write_text("b\n")
    (root / "in_link.log").symlink_to(root / "a.log")
    (root / "out_link.log").symlink_to(outside / "secret.log")
    (root / "dir_link").symlink_to(outside)
    (root / "node_link").symlink_to(root / "node1")
    (tmp_path / "root_link").symlink_to(root)
    rels = [
        "a.log",
        "node1/b.log",
        "node1/../a.log",
        "./a.log",
        "node1//b.log",
        "../outside/secret.log",
        "in_link.log",
        "out_link.log",
        "dir_link/secret.log",
        "node_link/b.log",
        "node1",
        "missing.log",
        "node1/missing/b.log",
        "a.log/b.log",
        str(root / "a.log"),
        str(outside / "secret.log"),
    ]
    for base in (root, tmp_path / "root_link"):
        for rel in rels:
            want = _resolving_safe_path(base, rel)
            assert read_back.safe_path(base, rel) == want, (base, rel)
            assert read_back.safe_path(base, rel, base.resolve()) == want, (base, rel)
    assert read_back.safe_path(root, "a.log") == (root / "a.log").resolve()
    assert read_back.safe_path(root, "out_link.log") is None and read_back.safe_path(root, "in_link.log") is not None
