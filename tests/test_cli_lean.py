"""What a CLI command spends outside its scan: the program skips the collector's passes of interpreter shutdown, while
an in-process caller of ``main(argv)`` (tests, benchmarks) keeps a heap the collector still walks."""

from __future__ import annotations

import gc
import json
import os
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
    from debug_training_logs.logs.scan_cache import CACHE

    CACHE.clear()
    job = scan_job(DATA_STALL, [g.regex for g in DEFAULT_PATTERNS], GrepSink)
    walked = [(s.file.rel, s.counts) for s in job.files]
    files = [s.file for s in job.files]
    assert len(walked) > 1 and any(any(c) for _, c in walked)

    def refuse(_b: bytes) -> object:
        raise AssertionError("a file's packed scan was unpacked")

    monkeypatch.setattr(memo, "_raw", refuse)  # (every read of a packed value goes through it)
    assert job.counts_per_file() == walked
    assert job.log_files() == files


def test_the_program_prints_the_whole_answer_and_runs_the_exit_handlers_once() -> None:
    """The console script's :func:`~debug_training_logs.cli.program` in a real process: the answer printed whole (a
    pipe's buffer is flushed), the exit handlers run, status 0; bad input still exits 2 with its reason."""
    code = (
        "import atexit, sys\n"
        "from debug_training_logs.cli import program\n"
        "atexit.register(lambda: print('EXIT HANDLER', file=sys.stderr))\n"
        "sys.argv = ['debug-training-logs', *sys.argv[1:]]\n"
        "program()\n"
    )
    got = _program(code, "analyze", str(DATA_STALL / "logs"), str(DATA_STALL / "ais"), "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["verdict"]["category"]  # the whole JSON answer
    assert got.stderr.count("EXIT HANDLER") == 1
    bad = _program(code, "analyze", str(DATA_STALL / "no such dir"), "--json")
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "EXIT HANDLER" in bad.stderr
    via_module = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "grep", str(DATA_STALL / "logs"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert via_module.returncode == 0 and json.loads(via_module.stdout)["summary"]


def test_the_program_flushes_runs_the_exit_handlers_then_ends_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """In order: the answer, the exit handlers, the streams flushed, ``os._exit(0)``; with another thread running,
    the normal exit (which waits for it) instead."""
    import atexit
    import os
    import threading

    from debug_training_logs import cli

    calls: list[str] = []

    class Ended(Exception):
        pass

    def end(status: int) -> None:
        calls.append(f"exit {status}")
        raise Ended

    monkeypatch.setattr(cli, "main", lambda: calls.append("main"))
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: calls.append("handlers"))
    monkeypatch.setattr(cli, "_flush", lambda: calls.append("flush"))
    monkeypatch.setattr(os, "_exit", end)
    with pytest.raises(Ended):
        cli.program()
    assert calls == ["main", "flush", "handlers", "flush", "exit 0"]
    calls.clear()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        cli.program()  # returns: the normal exit waits for the other thread
    finally:
        stop.set()
        other.join()
    assert calls == ["main"]


def test_the_entry_point_turns_the_collector_off_before_the_command_imports() -> None:
    """The console script's target imports nothing heavy before it turns the collector off, so pydantic, the command's
    modules and the analysis run without a single collection (2 young ones while the modules load, 5 after the scan, at
    the thresholds a server runs with)."""
    code = (
        "import gc, sys\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: passes.append(1) if phase == 'start' else 0)\n"
        "from debug_training_logs import entry\n"
        "print('LIGHT', 'pydantic' not in sys.modules and 'debug_training_logs.cli' not in sys.modules)\n"
        "passes.clear()\n"  # (compiling a module without its .pyc may have started one, before the program runs)
        "sys.argv = ['debug-training-logs', *sys.argv[1:]]\n"
        "import atexit\n"  # the program ends the process itself, after the exit handlers
        "atexit.register(lambda: print('PASSES', len(passes), 'CLI', 'debug_training_logs.cli' in sys.modules, "
        "'ON', gc.isenabled(), file=sys.stderr))\n"
        "entry.program()\n"
    )
    got = _program(code, "analyze", str(DATA_STALL / "logs"), str(DATA_STALL / "ais"), "--json")
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("LIGHT True")
    assert got.stderr.rsplit("PASSES", 1)[1].split() == ["0", "CLI", "True", "ON", "False"]


def test_serve_turns_the_collector_back_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server runs for hours and every tool call leaves garbage: it runs with the collector on, at the thresholds
    the entry point set."""
    from debug_training_logs import collector
    from debug_training_logs.server import app

    seen: list[tuple[bool, tuple[int, int, int]]] = []
    monkeypatch.setattr(app, "run", lambda *a: seen.append((gc.isenabled(), gc.get_threshold())))
    before = gc.get_threshold()
    gc.disable()
    try:
        gc.set_threshold(*collector.GC_THRESHOLDS)
        main(["serve"])
    finally:
        gc.enable()
        gc.set_threshold(*before)
    assert seen == [(True, collector.GC_THRESHOLDS)]


def test_the_console_script_and_python_m_run_the_entry_point() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "debug-training-logs"]
    assert script.value == "debug_training_logs.entry:program"
    got = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert got.returncode == 0 and got.stdout.startswith("debug-training-logs ")


@pytest.mark.parametrize("preset", [None, "some_plugin"])
def test_the_program_looks_up_no_pydantic_plugin_unless_told_how(preset: str | None) -> None:
    """Looking plugins up reads every installed package's entry points; the program's own validators need none. A value
    the user set is kept (pydantic then reads it as always)."""
    code = (
        "import atexit, os, sys\n"
        "sys.argv = ['debug-training-logs', *sys.argv[1:]]\n"
        "def report():\n"
        "    from pydantic.plugin import _loader\n"
        "    print('PLUGINS', os.environ.get('PYDANTIC_DISABLE_PLUGINS'), _loader._plugins is None, file=sys.stderr)\n"
        "atexit.register(report)\n"
        "from debug_training_logs.entry import program\n"
        "program()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if preset is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = preset
    got = subprocess.run(
        [sys.executable, "-c", code, "grep", str(DATA_STALL / "logs"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert got.returncode == 0, got.stderr
    value, never_looked = got.stderr.rsplit("PLUGINS", 1)[1].split()
    if preset is None:
        assert (value, never_looked) == ("__all__", "True")
    else:  # pydantic looked the plugins up, leaving out the one named
        assert (value, never_looked) == (preset, "False")


SCAN_MODULES = (
    "debug_training_logs.analysis.evidence",
    "debug_training_logs.analysis.launcher",
    "debug_training_logs.analysis.inventory",
    "debug_training_logs.analysis.nccl_table",
    "debug_training_logs.analysis.grep",
    "debug_training_logs.logs.scan",
)


def _importers(importtime: str, module: str) -> list[str]:
    """``-X importtime``'s lines from ``module`` up to the top-level import that pulled it in: a module's line comes
    when its import ends, and its importer's is the next one indented less."""
    lines = [line for line in importtime.splitlines() if line.startswith("import time:") and "|" in line]

    def depth(line: str) -> int:
        name = line.rsplit("|", 1)[1]
        return len(name) - len(name.lstrip())

    first = next(i for i, line in enumerate(lines) if line.rsplit("|", 1)[1].strip() == module)
    chain = [lines[first]]
    for line in lines[first + 1 :]:
        if depth(line) < depth(chain[-1]):
            chain.append(line)
    return chain


def test_the_scan_modules_import_no_pydantic() -> None:
    """The CLI may start the scan's worker processes before it imports pydantic (needed only to check the arguments
    and build the answer): the modules a scan runs must not pull it in."""
    code = f"import sys\nimport {', '.join(SCAN_MODULES)}\nprint('PYDANTIC', 'pydantic' in sys.modules)\n"
    got = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert got.returncode == 0, got.stderr
    if got.stdout.strip() != "PYDANTIC False":
        chain = "\n".join(_importers(got.stderr, "pydantic"))
        pytest.fail(f"the scan's modules import pydantic, through:\n{chain}")
