"""The program starts its command's scan before it imports the rest (``early_scan``): the command then reads that scan,
and answers exactly what it answers without it; any other command line scans as it always did, and a started scan no
command reads leaves no worker process behind."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs import early_scan
from debug_training_logs.analysis import inventory
from debug_training_logs.cli import main
from debug_training_logs.logs import scan, scan_pool
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.scan_cache import CACHE
from debug_training_logs.logs.scan_types import PatternSpec
from tests.processes import children

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
JOB = FIXTURES / "data_stall"
LOGS, AIS = str(JOB / "logs"), str(JOB / "ais")


@pytest.fixture
def scans(counted_scans: list[int], monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Each scan started (the number of files it reads), with two worker processes however small the job."""
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    yield counted_scans
    inventory.drop_started_scan()
    CACHE.clear()


def _answer(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(argv)
    return dict(json.loads(capsys.readouterr().out))


PLAIN = [
    ["analyze", LOGS, AIS, "--json"],
    ["diagnose", LOGS, "--json"],
    ["nccl", LOGS, "--json"],
    ["grep", "--json", LOGS],
]


@pytest.mark.parametrize("argv", PLAIN, ids=lambda a: " ".join(x for x in a if x not in (LOGS, AIS)))
def test_the_command_reads_the_scan_started_for_it_and_answers_the_same(
    argv: list[str], scans: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    plain = _answer(argv, capsys)
    assert len(scans) == 1  # the command's own scan (nccl's table is a cache hit after it)
    CACHE.clear()
    scans.clear()
    before = children()
    early_scan.start(argv)
    assert inventory._STARTED is not None and inventory._STARTED.forked
    assert len(children() - before) == 2  # reading already
    assert _answer(argv, capsys) == plain
    assert len(scans) == 1 and inventory._STARTED is None  # the started one, read by the command
    assert children() == before


@pytest.mark.parametrize(
    "argv",
    [
        ["grep", LOGS, "--pattern", "Connection reset"],  # another question
        ["grep", LOGS, "--ignore-case"],
        ["analyze", LOGS, "--attempt", "0"],
        ["nccl", LOGS, "--fr-dir", LOGS],
        ["-v", "grep", LOGS],
        ["grep", "--js", LOGS],  # argparse reads an abbreviation: not the plain form
        ["--json", "grep", LOGS],  # not a command line the program takes
        ["overview", LOGS],  # no early start for this command
        ["grep", LOGS, AIS],  # not a form the command takes
        ["grep"],
        ["serve"],
        [],
    ],
)
def test_other_command_lines_start_nothing(argv: list[str], scans: list[int]) -> None:
    before = children()
    early_scan.start(argv)
    assert inventory._STARTED is None and not scans and children() == before


def test_a_directory_that_is_not_there_starts_nothing_and_the_command_says_so(
    tmp_path: Path, scans: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nowhere")
    early_scan.start(["grep", missing])
    assert inventory._STARTED is None
    with pytest.raises(SystemExit) as exit_:
        main(["grep", missing])
    assert exit_.value.code == 2 and "nowhere" in capsys.readouterr().err


def test_a_started_scan_the_command_does_not_ask_for_is_given_up(
    scans: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    before = children()
    asked = ["grep", LOGS, "--pattern", "Connection reset", "--json"]
    plain = _answer(asked, capsys)
    CACHE.clear()
    scans.clear()
    early_scan.start(["grep", LOGS])  # the default patterns
    assert inventory._STARTED is not None
    assert _answer(asked, capsys) == plain
    assert len(scans) == 2 and inventory._STARTED is None  # given up, then the command's own
    assert children() == before


def test_a_started_scan_no_command_reads_ends_with_the_program(scans: list[int]) -> None:
    before = children()
    early_scan.start(["nccl", LOGS])
    assert len(children() - before) == 2
    inventory.drop_started_scan()  # (registered to run at exit)
    assert children() == before and not scan_pool._POOL_FDS


def test_the_program_answers_the_same_with_its_early_scan() -> None:
    """The console script's path (``entry.program``) against the in-process command, byte for byte."""
    code = (
        "import sys\nsys.argv = ['debug-training-logs', *sys.argv[1:]]\n"
        "from debug_training_logs.entry import program\nprogram()\n"
    )
    for argv in (["analyze", LOGS, AIS, "--json"], ["nccl", LOGS, "--json"], ["grep", LOGS, "--json"]):
        program = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, check=False
        )
        in_process = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom debug_training_logs.cli import main\nmain(sys.argv[1:])\n", *argv],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert program.returncode == in_process.returncode == 0, program.stderr
        assert program.stdout == in_process.stdout


@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="pipe capacities are a Linux feature")
def test_workers_handed_files_ahead_get_room_for_their_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker goes on reading while the main process is busy elsewhere: its results wait in a pipe big enough for
    them, and every file is still read once, by one worker."""
    for k in range(6):
        (tmp_path / f"node{k}.log").write_text("".join(f"[rank{k}]: step {s} Connection reset\n" for s in range(500)))
    files = sorted(discover(tmp_path)[0], key=lambda f: f.rel)
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    before = children()
    started = scan.start_each(files, PatternSpec(("Connection reset",)), None, lambda s: s.counts, ahead_bytes=1 << 30)
    try:
        assert started.forked
        sizes = {fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) for fd in scan_pool._POOL_FDS}
        assert scan_pool.EARLY_PIPE_BYTES in sizes  # the result pipes (the task pipes keep the default)
        got = dict(started.results())
    finally:
        started.close()
    assert got == {i: [500] for i in range(6)}
    assert children() == before and not scan_pool._POOL_FDS
