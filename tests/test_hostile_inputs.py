"""Hostile and huge inputs (issue 16): each test is one reproduction from the bad-input matrix, turned into a check
that the answer is a clear error or a marked partial result in bounded time and memory."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zstandard

from debug_training_logs.analysis.grep import grep_all_ranks, whole_named_group
from debug_training_logs.analysis.inventory import scan_job
from debug_training_logs.analysis.inventory_sink import MAX_CREDIBLE_WORLD
from debug_training_logs.analysis.inventory_types import (
    MISSING_SET_CAP,
    FileInventory,
    Inventory,
    missing_count,
    missing_set,
    missing_text,
)
from debug_training_logs.analysis.nccl_table import nccl_state_table
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs import scan, scan_budget
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.reader import LONG_LINE_KEEP, ReadProblems, iter_lines, zstd_frames_problem
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.paths import input_dir, restricted_to
from tests.conftest import gzip_file

CLI = [sys.executable, "-m", "debug_training_logs"]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- 1. a line stating world_size=99999999 ----------------------------------------------------------------------------


def test_huge_stated_world_size_costs_no_memory_and_is_not_believed(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("[rank0]: world_size=99999999\n[rank1]: step 1\n")
    before = _peak_rss_mb()
    t0 = time.monotonic()
    job = scan_job(tmp_path)
    cov = job.coverage()
    table = nccl_state_table(tmp_path)
    assert time.monotonic() - t0 < 20
    assert _peak_rss_mb() - before < 200
    assert cov.world_size is None
    assert "ignored a.log:1 states world size 99999999 (not a credible world size)" in cov.world_size_evidence
    assert table.coverage.world_size is None


def test_missing_ranks_are_computed_from_intervals_for_any_world_size() -> None:
    present = {0, 5, 6, 10**8 - 1}
    assert missing_text(10**8, present) == "1-4,7-99999998"
    assert missing_count(10**8, present) == 10**8 - 4
    capped = missing_set(10**8, present)
    assert len(capped) == MISSING_SET_CAP and min(capped) == 1 and 5 not in capped
    assert missing_set(16, {0, 3}) == set(range(16)) - {0, 3}
    assert missing_text(None, present) == "" and missing_text(0, set()) == ""


def test_largest_believable_world_size_stays_bounded(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(f"[rank0]: world_size={MAX_CREDIBLE_WORLD}\n[rank3]: x\n")
    before = _peak_rss_mb()
    cov = scan_job(tmp_path).coverage()
    assert cov.world_size == MAX_CREDIBLE_WORLD
    assert cov.missing_ranks == f"1-2,4-{MAX_CREDIBLE_WORLD - 1}"
    assert "verdicts name only the lowest" in cov.world_size_evidence
    assert _peak_rss_mb() - before < 200


def test_a_rank_at_or_above_the_world_size_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("[rank0]: world_size=4\n[rank1]: a\n[rank2]: b\n[rank3]: c\n[rank9]: d\n")
    cov = scan_job(tmp_path).coverage()
    assert cov.world_size is None  # the claim is contradicted by a rank the logs show, and said so
    assert "(contradicted: rank 9 is in the logs)" in cov.world_size_evidence


# -- 2. ranks_of_file was a linear search per file -------------------------------------------------------------------


def test_ranks_of_file_is_an_index_not_a_linear_search() -> None:
    n = 60_000
    files = [FileInventory(f"f{i}.log", 1, "none", {i}, "file name", None, 1, None) for i in range(n)]
    inv = Inventory(files, [], set(range(n)), n, "", [], {}, {}, [], [], None, None, None, [])
    t0 = time.monotonic()
    assert all(inv.ranks_of_file(f"f{i}.log") == {i} for i in range(n))
    assert inv.ranks_of_file("nope.log") == set()
    assert time.monotonic() - t0 < 2.0  # the linear search took minutes here


# -- 3 and 12. symlink loops, symlinked directories, FIFOs, unreadable directories -------------------------------------


def _skipped(root: Path) -> dict[str, str]:
    return {s.rel: s.reason for s in discover(root)[1]}


def test_symlink_loop_is_listed_not_a_crash(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    (tmp_path / "r.log").write_text("[rank0]: x\n")
    files, _ = discover(tmp_path)
    assert [f.rel for f in files] == ["r.log"]
    assert _skipped(tmp_path) == {"a": "symlink loop (not followed)", "b": "symlink loop (not followed)"}
    cov = scan_job(tmp_path).coverage()
    assert {u.file for u in cov.unreadable_files} == {"a", "b"}


def test_a_second_scan_of_a_dir_with_a_skipped_entry_reuses_the_inventory(tmp_path: Path) -> None:
    # The job's inventory is rebuilt only when the files, their facts or the skipped entries differ from the latest
    # build's: discovery lists the skipped entries afresh on every call, so they must compare by value.
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    (tmp_path / "r.log").write_text("[rank0]: x\n")
    first = scan_job(tmp_path).inventory
    assert [s.rel for s in first.skipped] == ["a", "b"]
    assert discover(tmp_path)[1] == discover(tmp_path)[1]
    assert scan_job(tmp_path).inventory is first


def test_a_looping_logs_dir_is_a_clear_user_error(tmp_path: Path) -> None:
    os.symlink(tmp_path / "y", tmp_path / "x")
    os.symlink(tmp_path / "x", tmp_path / "y")
    with pytest.raises(UserInputError, match="cannot be resolved"):
        discover(tmp_path / "x")
    with restricted_to([tmp_path]), pytest.raises(UserInputError, match="cannot be resolved"):
        input_dir(tmp_path / "x")


def test_cli_on_a_symlink_loop_exits_2_or_lists_it(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    for cmd in ("overview", "grep", "nccl", "ais-deltas", "timeline"):
        r = subprocess.run([*CLI, cmd, str(tmp_path), "--json"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Traceback" not in r.stderr
    r = subprocess.run([*CLI, "overview", str(tmp_path / "a")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "cannot be resolved" in r.stderr and "Traceback" not in r.stderr


def test_symlinked_dirs_and_fifos_are_listed_with_what_they_are(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "r.log").write_text("[rank0]: x\n")
    os.symlink(tmp_path / "real", tmp_path / "dirlink")
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", tmp_path / "pipelink.log")
    os.symlink(tmp_path / "nowhere", tmp_path / "broken.log")
    got = _skipped(tmp_path)
    assert got["dirlink"].startswith("symlink to a directory (not followed")
    assert got["pipe"] == "a FIFO (named pipe), not a regular file (not read)"
    assert got["pipelink.log"] == "symlink to a FIFO (named pipe), not a regular file (not read)"
    assert got["broken.log"].startswith("broken symlink")
    assert [f.rel for f in discover(tmp_path)[0]] == ["real/r.log"]


def test_unreadable_subdirectory_is_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "r.log").write_text("x\n")
    (tmp_path / "ok.log").write_text("x\n")
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:  # root reads everything: deny the directory the way the kernel would
        if Path(path) == tmp_path / "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert _skipped(tmp_path) == {"locked/": "unreadable directory (Permission denied); its files were not read"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory; the monkeypatched test covers the path")
def test_unreadable_subdirectory_for_real(tmp_path: Path) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "r.log").write_text("x\n")
    (tmp_path / "locked").chmod(0)
    try:
        assert "locked/" in _skipped(tmp_path)
    finally:
        (tmp_path / "locked").chmod(0o755)


def test_binary_without_nul_bytes_is_not_searched_as_text(tmp_path: Path) -> None:
    rng = random.Random(7)
    blob = bytes(rng.choice([b for b in range(1, 256)]) for _ in range(64 << 10))
    (tmp_path / "weights.dump").write_bytes(blob[:20000] + b"\nNVRM: Xid (PCI:0000:3b:00): 79, GPU fell off\n" + blob)
    (tmp_path / "r.log").write_bytes(b"[rank0]: caf\xe9 ok\n" * 100)
    res = grep_all_ranks(str(tmp_path))
    assert not any(p.name.startswith("gpu_xid") for p in res.patterns)
    reasons = {u.file: u.reason for u in res.coverage.unreadable_files}
    assert reasons["weights.dump"].startswith("binary content (") and "r.log" not in reasons


# -- 5. truncated compressed files ------------------------------------------------------------------------------------


def _log_bytes() -> bytes:
    return "".join(f"[rank0]: step {i} loss 2.{i % 10}\n" for i in range(200_000)).encode()


@pytest.mark.parametrize("fmt", ["zst", "zst-stream", "gz", "bz2", "xz"])
def test_truncated_compressed_file_is_marked_partial(tmp_path: Path, fmt: str) -> None:
    data = _log_bytes()
    if fmt == "zst":
        comp = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    elif fmt == "zst-stream":  # no content size in the frame header
        buf = io.BytesIO()
        with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
            w.write(data)
        comp = buf.getvalue()
    else:
        comp = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[fmt](data)
    (tmp_path / "whole.log").write_bytes(comp)
    (tmp_path / "cut.log").write_bytes(comp[: len(comp) // 2])
    (tmp_path / "end.log").write_bytes(comp[:-3])  # only the very end (checksum/end mark) missing
    problems = ReadProblems()
    by = {f.rel: f for f in discover(tmp_path)[0]}
    assert len(list(iter_lines(by["whole.log"], problems))) == 200_000
    n_cut = len(list(iter_lines(by["cut.log"], problems)))
    assert 0 < n_cut < 200_000
    list(iter_lines(by["end.log"], problems))
    assert set(problems.items) == {"cut.log", "end.log"}
    assert all("truncated or corrupt compressed stream" in r for r in problems.items.values())
    cov = scan_job(tmp_path).coverage()
    assert {u.file for u in cov.unreadable_files} == {"cut.log", "end.log"}


def test_multi_frame_zstd_reads_every_frame(tmp_path: Path) -> None:
    one = zstandard.ZstdCompressor().compress(b"[rank0]: first frame\n")
    two = zstandard.ZstdCompressor().compress(b"[rank0]: second frame\n")
    (tmp_path / "a.log.zst").write_bytes(one + two)
    problems = ReadProblems()
    (lf,) = discover(tmp_path)[0]
    assert [t for _, t in iter_lines(lf, problems)] == ["[rank0]: first frame", "[rank0]: second frame"]
    assert problems.items == {}
    assert zstd_frames_problem(lf.path) is None


# -- 7. long lines: `\r` progress records, a line longer than any chunk -----------------------------------------------


def _progress_file(path: Path, mib: int, glued: bytes = b"[rank0]: NVRM: Xid (PCI:0000:3b:00): 79, fell off") -> None:
    rec = b"Epoch 0:  42%|####      | 420/1000 [00:42<00:58, 10.0it/s, loss=2.31]\r"
    block = rec * ((1 << 20) // len(rec))
    with open(path, "wb") as fh:
        fh.write(b"[rank0]: start\n")
        for i in range(mib):
            fh.write(block)
            if i == mib // 2:
                fh.write(glued + b"\r")
        fh.write(b"\n[rank0]: end\n")


@pytest.mark.parametrize("compress", [False, True])
def test_progress_records_are_searched_with_bounded_memory(tmp_path: Path, compress: bool) -> None:
    _progress_file(tmp_path / "train.log", 40)
    if compress:
        gzip_file(tmp_path / "train.log")
    before = _peak_rss_mb()
    res = grep_all_ranks(str(tmp_path))
    assert _peak_rss_mb() - before < 150  # the whole line was ~5x its size before
    (xid,) = [p for p in res.patterns if p.name.startswith("gpu_xid")]
    assert xid.total_hits == 1
    assert xid.first is not None and xid.first.line == 2  # newlines alone number lines, like grep -n
    assert xid.first.text is not None and xid.first.text.startswith("[rank0]: NVRM: Xid")
    assert res.coverage.unreadable_files == []


@pytest.mark.parametrize("compress", [False, True])
def test_reading_lines_back_cuts_a_huge_line_to_head_and_tail(tmp_path: Path, compress: bool) -> None:
    _progress_file(tmp_path / "train.log", 24, glued=b"x")
    if compress:
        gzip_file(tmp_path / "train.log")
    (lf,) = discover(tmp_path)[0]
    problems = ReadProblems()
    lines = list(iter_lines(lf, problems))
    assert [n for n, _ in lines] == [1, 2, 3]
    assert lines[0][1] == "[rank0]: start" and lines[2][1] == "[rank0]: end"
    assert len(lines[1][1]) <= 2 * LONG_LINE_KEEP + 100 and "bytes cut ...]" in lines[1][1]
    (reason,) = problems.items.values()
    assert reason.startswith("partly read: 1 line(s) longer than a chunk")
    assert lines_at(lf, {1, 2, 3})[3] == "[rank0]: end"


def test_a_line_longer_than_a_chunk_without_any_line_end(tmp_path: Path) -> None:
    with open(tmp_path / "blob.log", "wb") as fh:
        fh.write(b"[rank3]: begin\n")
        for _ in range(20):
            fh.write(b"abcdefgh" * (1 << 17))
        fh.write(b" torch.OutOfMemoryError: CUDA out of memory\n[rank3]: tail\n")
    res = grep_all_ranks(str(tmp_path))
    assert res.coverage.ranks_found == "3"
    seg = [p for p in res.patterns if p.first is not None and p.first.line == 2]
    assert seg, [p.name for p in res.patterns]


# -- 6. one backtracking budget per search -----------------------------------------------------------------------------


@pytest.mark.parametrize("parallel", [False, True])
def test_backtracking_budget_is_one_per_search_not_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel: bool
) -> None:
    for i in range(40):  # each file costs well under any per-chunk limit; together they cost minutes
        (tmp_path / f"r{i}.log").write_text(("a" * 3000 + "\n") * 100)
    for module in (scan, scan_budget):  # read by start_each, and by the budget itself
        monkeypatch.setattr(module, "FALLBACK_BUDGET_S", 1.0)
    if parallel:
        monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    t0 = time.monotonic()
    with pytest.raises(UserInputError, match=r"used up this search's budget of 1 s"):
        grep_all_ranks(str(tmp_path), patterns=[r"(?<!z)a.*b"])
    assert time.monotonic() - t0 < 20


def test_a_cheap_backtracking_pattern_still_searches_everything(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"r{i}.log").write_text("[rank0]: ok\n[rank0]: error: disk quota exceeded\n" * 50)
    res = grep_all_ranks(str(tmp_path), patterns=[r"(?<!no )error: \w+"])
    assert res.patterns[0].total_hits == 250


# -- 10. named patterns and flag order ----------------------------------------------------------------------------------


def test_name_value_text_is_searched_as_written_and_names_use_a_group(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("[rank0]: retry timeout=30 s\n[rank1]: got 30 items\n")
    res = grep_all_ranks(str(tmp_path), patterns=["timeout=30", "(?P<items>\\d+ items)", "(?P<a>x)|(?P<b>30)"])
    by = {p.name: p for p in res.patterns}
    assert by["p1"].regex == "timeout=30" and by["p1"].total_hits == 1 and by["p1"].ranks_with_hits == "0"
    assert by["items"].total_hits == 1
    assert by["p3"].total_hits == 2  # an alternation of two groups is not one named group
    assert whole_named_group("(?P<n>a[)]b)") == ("n", "(?P<n>a[)]b)")
    assert whole_named_group("(?P<n>a\\)") is None
    assert whole_named_group("(?P<n>a)(b)") is None
    with pytest.raises(UserInputError, match="same name"):
        grep_all_ranks(str(tmp_path), patterns=["(?P<x>a)", "(?P<x>b)"])


def test_cli_patterns_flag_does_not_swallow_the_logs_dir(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("[rank0]: retry timeout=30 s\n")
    r = subprocess.run(
        [
            *CLI,
            "grep",
            "--patterns",
            "timeout=30",
            "--pattern",
            "(?P<r>retry)",
            str(tmp_path),
            "--tiers",
            "1,2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = {p["name"]: p["total_hits"] for p in json.loads(r.stdout)["patterns"]}
    assert got == {"p1": 1, "r": 1}


# -- 11. verify on hostile files ---------------------------------------------------------------------------------------


def test_verify_refuses_non_utf8_and_endless_files(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_bytes(b'{"logs_dir": "\xff\xfe"}')
    r = subprocess.run([*CLI, "verify", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "is not UTF-8 text" in r.stderr and "Traceback" not in r.stderr
    t0 = time.monotonic()
    r = subprocess.run([*CLI, "verify", "/dev/zero"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "larger than 16 MiB" in r.stderr
    assert time.monotonic() - t0 < 60
