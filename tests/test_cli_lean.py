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
