"""What a CLI command spends outside its scan: the program skips the collector's passes of interpreter shutdown, while
an in-process caller of ``main(argv)`` (tests, benchmarks) keeps a heap the collector still walks."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from debug_training_logs.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DATA_STALL = FIXTURES / "data_stall"


def _program(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("command", ["grep", "nccl"])
def test_the_program_freezes_its_heap_before_exiting_and_still_prints_the_whole_answer(command: str) -> None:
    code = (
        "import gc, sys\n"
        "from debug_training_logs.cli import main\n"
        "sys.argv = ['debug-training-logs', *sys.argv[1:]]\n"
        "main()\n"
        "print('FROZEN', gc.get_freeze_count(), file=sys.stderr)\n"
    )
    got = _program(code, command, str(DATA_STALL), "--json")
    assert got.returncode == 0, got.stderr
    frozen = int(got.stderr.rsplit("FROZEN", 1)[1])
    assert frozen > 10_000  # every object of the command: modules, results, the answer
    assert json.loads(got.stdout)["summary"]


def test_an_in_process_caller_keeps_a_heap_the_collector_walks(capsys: pytest.CaptureFixture[str]) -> None:
    before = gc.get_freeze_count()
    main(["grep", str(DATA_STALL), "--json"])
    assert json.loads(capsys.readouterr().out)["summary"]
    assert gc.get_freeze_count() == before


def test_file_names_and_counts_of_a_job_scan_come_without_unpacking_the_files_scans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from debug_training_logs import memo
    from debug_training_logs.analysis.grep import GrepSink
    from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
    from debug_training_logs.analysis.inventory import scan_job
    from debug_training_logs.analysis.scan_cache import CACHE

    CACHE.clear()
    job = scan_job(DATA_STALL, [g.regex for g in DEFAULT_PATTERNS], GrepSink)
    walked = [(s.file.rel, s.counts) for s in job.files]
    files = [s.file for s in job.files]
    assert len(walked) > 1 and any(any(c) for _, c in walked)

    def refuse(_b: bytes) -> object:
        raise AssertionError("a file's packed scan was unpacked")

    monkeypatch.setattr(memo, "_load", refuse)
    assert job.counts_per_file() == walked
    assert job.log_files() == files
