"""The searcher: discovery, decompression, damaged files, and rank attribution of a line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zstandard

from debug_training_logs.errors import UserInputError
from debug_training_logs.formats.timestamps import WallTime, parse_wall_time
from debug_training_logs.logs.attribution import file_name_node, file_name_rank, line_rank, rank_of_line
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.reader import ReadProblems, iter_lines
from debug_training_logs.logs.scan import scan_files
from debug_training_logs.logs.scan_types import PatternSpec
from tests.conftest import gzip_file


def _lines(tmp: Path, name: str) -> list[tuple[int, str]]:
    files, _ = discover(tmp)
    (lf,) = [f for f in files if f.rel == name]
    return list(iter_lines(lf, ReadProblems()))


def test_plain_gzip_zstd_and_rotated_files_read_the_same(tmp_path: Path) -> None:
    text = "a\n[rank3]: b\nlast line without newline"
    (tmp_path / "train.log").write_text(text)
    (tmp_path / "train.log.1").write_text(text)
    gzip_file(tmp_path / "train.log.1")
    (tmp_path / "rank-2.log.zst").write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    files, skipped = discover(tmp_path)
    assert [(f.rel, f.compression) for f in files] == [
        ("rank-2.log.zst", "zstd"),
        ("train.log", "none"),
        ("train.log.1.gz", "gzip"),
    ]
    assert skipped == []
    for f in files:
        assert [t for _, t in iter_lines(f, ReadProblems())] == ["a", "[rank3]: b", "last line without newline"]


def test_damaged_files_are_read_up_to_the_damage_and_reported(tmp_path: Path) -> None:
    big = "".join(f"[rank0]: line {i} " + "x" * 50 + "\n" for i in range(20000))
    (tmp_path / "cut.log").write_text(big)
    gzip_file(tmp_path / "cut.log", truncate_to=20000)
    (tmp_path / "core.bin.log").write_bytes(b"\x7fELF\x00\x00\x01binary")
    (tmp_path / "latin.log").write_bytes(b"ok\ncaf\xe9 \xff\xfe end\n")
    problems = ReadProblems()
    files, _ = discover(tmp_path)
    by = {f.rel: f for f in files}
    got = list(iter_lines(by["cut.log.gz"], problems))
    assert 0 < len(got) < 20000
    assert "truncated or corrupt" in problems.items["cut.log.gz"]
    assert list(iter_lines(by["core.bin.log"], problems)) == []
    assert "binary" in problems.items["core.bin.log"]
    assert [t for _, t in iter_lines(by["latin.log"], problems)] == ["ok", "caf\ufffd \ufffd\ufffd end"]
    assert "latin.log" not in problems.items


def test_discovery_skips_non_logs_and_links_out_of_the_tree(tmp_path: Path) -> None:
    (tmp_path / "plot.png").write_bytes(b"\x89PNG")
    (tmp_path / "logs.tar.gz").write_bytes(b"\x1f\x8b")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "error-1-0.out").write_text("x\n")
    outside = tmp_path.parent / "outside_secret.log"
    outside.write_text("secret\n")
    os.symlink(outside, tmp_path / "link.log")
    files, skipped = discover(tmp_path)
    assert [f.rel for f in files] == ["sub/error-1-0.out"]
    reasons = {s.rel: s.reason for s in skipped}
    assert "not a log" in reasons["plot.png"]
    assert "archive" in reasons["logs.tar.gz"]
    assert "outside" in reasons["link.log"]


def test_missing_dir_and_file_instead_of_dir_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="does not exist"):
        discover(tmp_path / "nope")
    (tmp_path / "f.log").write_text("x")
    with pytest.raises(UserInputError, match="is a file"):
        discover(tmp_path / "f.log")


@pytest.mark.parametrize(
    ("line", "rank", "source"),
    [
        ("[rank42]:[E1028 04:16:53.602914377 ProcessGroupNCCL.cpp:1664] [Rank 2] Watchdog caught", 42, "rank_prefix"),
        ("(MegatronPolicyWorker[rank=12] pid=481552, ip=10.20.3.17) [rank12]:[E] x", 12, "rank_prefix"),
        ("(MegatronPolicyWorker[rank=12] pid=481552, ip=10.20.3.17) loss 1.0", 12, "ray"),
        (" 3: Epoch 1", 3, "srun_label"),
        ("\x1b[36m[rank7]:\x1b[0m hello", 7, "rank_prefix"),
        ("[PG ID 0 PG GUID 0(default_pg) Rank 6] failure detected by watchdog", None, "none"),
    ],
)
def test_line_rank_uses_global_rank_never_pg_local(line: str, rank: int | None, source: str) -> None:
    got = line_rank(line)
    assert (got.rank, got.source) == (rank, source)
    assert rank_of_line(line) == rank  # the scan's per-hit shortcut says the same


@pytest.mark.parametrize(
    ("line", "when"),
    [
        ("W1123 18:31:27.778000 19906 torch/distributed/elastic/api.py:1] x", (11, 23, 18, 31, 27, 778000)),
        ("[rank3]: E0521 07:00:01.000123 42 api.py:9] x", (5, 21, 7, 0, 1, 123)),
        ("\tI0102 00:00:59.999999 7 a.py:1] x", (1, 2, 0, 0, 59, 999999)),
        ("NOTE0521 07:00:01.000123 42 api.py:9] glued to a word: not a glog header", None),
        ("E0521 07:00:01.000123 x: no pid after the time", None),
        ("Epoch 0:  30%| 3099/10000 [25:39<1:18:12, 2.08it/s, train_step_timing in s=0.487]", None),
        ("E1399 07:00:01.000123 42 api.py:9] month 13", None),
    ],
)
def test_glog_header_time_at_line_start_or_after_whitespace_only(line: str, when: tuple[int, ...] | None) -> None:
    expected = None if when is None else WallTime(None, *when)
    assert parse_wall_time(line) == expected


def test_file_name_rank_and_node() -> None:
    assert file_name_rank("logs/rank-17.log") == 17
    assert file_name_rank("slurm-4411_5.out") == 5
    assert file_name_rank("error-48213-3.out") is None
    assert file_name_node("error-48213-3.out") == "3"


def test_scan_counts_per_pattern_and_numbers_lines(tmp_path: Path) -> None:
    body = "\n".join(["ok", "[rank1]: NCCL op timeout", "x", "[rank2]: Connection reset by peer", "NCCL timeout again"])
    (tmp_path / "a.log").write_text(body + "\n")

    class Collect:
        def __init__(self, lf: object) -> None:
            self.hits: list[tuple[list[int], int, str]] = []

        def on_hit(self, ids: list[int], n: int, line: str) -> None:
            self.hits.append((ids, n, line))

        def finish(self) -> list[tuple[list[int], int, str]]:
            return self.hits

    files, _ = discover(tmp_path)
    (res,) = scan_files(files, PatternSpec(("NCCL.*timeout", "Connection reset", "timeout")), Collect)
    assert res.counts == [2, 1, 2]
    assert res.ranks == {1, 2}
    assert res.lines == 5
    assert res.sink_result == [
        ([0, 2], 2, "[rank1]: NCCL op timeout"),
        ([1], 4, "[rank2]: Connection reset by peer"),
        ([0, 2], 5, "NCCL timeout again"),
    ]
