"""``py-spy dump`` output read as an engineer reads it: every presentation (plain, ``--locals``, ``--native``,
``--json``, ``--subprocesses``, many dumps in one file, ``srun -l`` labels, a pid that had exited) gives the same
processes, threads and frames, and the same state for the stuck rank."""

from __future__ import annotations

import json
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debug_training_logs.analysis.stack_states import state_of
from debug_training_logs.formats import py_spy

# A rank stuck in its DataLoader (waiting on the worker's queue) and a rank waiting in all_reduce: (pid, frames)
STUCK = (
    4711,
    [
        ("Condition.wait", "threading.py", 331, []),
        ("Queue.get", "queue.py", 180, []),
        ("_MultiProcessingDataLoaderIter._try_get_data", "torch/utils/data/dataloader.py", 1133, []),
        ("_MultiProcessingDataLoaderIter._get_data", "torch/utils/data/dataloader.py", 1294, []),
        ("_MultiProcessingDataLoaderIter._next_data", "torch/utils/data/dataloader.py", 1332, []),
        ("train_epoch", "pretrain.py", 212, [("global_rank", "5"), ("step", "118")]),
        ("<module>", "pretrain.py", 301, []),
    ],
)
WAITING = (
    4702,
    [
        ("all_reduce", "torch/distributed/distributed_c10d.py", 2501, []),
        ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 79, []),
        ("train_epoch", "pretrain.py", 233, [("global_rank", "0"), ("step", "118")]),
        ("<module>", "pretrain.py", 301, []),
    ],
)
NATIVE_TOP = [("__futex_abstimed_wait_common", "libc.so.6"), ("pthread_cond_timedwait", "libc.so.6")]


def _text(pid: int, frames: list, *, locals_: bool, native: bool, thread_hex: bool, parent: int | None) -> str:
    out = [
        f"Process {pid}: /opt/venv/bin/python3 -u pretrain.py --config cfg.yaml",
        "Python v3.10.12 (/usr/bin/python3.10)",
    ]
    if parent is not None:
        out.append(
            f"Parent Process {parent}: /opt/venv/bin/python3 /opt/venv/bin/torchrun --nproc-per-node 8 pretrain.py"
        )
    out.append("")
    tid = f"0x7F3A{pid:08X}" if thread_hex else str(pid)
    out.append(f'Thread {tid} (idle): "MainThread"')
    if native:
        out += [f"    {f} ({lib})" for f, lib in NATIVE_TOP]
    for func, file, line, loc in frames:
        out.append(f"    {func} ({file}:{line})")
        if locals_ and loc:
            out.append("        Locals:")
            out += [f"            {k}: {v}" for k, v in loc]
    out.append(f'Thread {pid + 40} (idle): "pt_autograd_0"')
    out.append("    0x7f3a11c4b2a1 (libtorch_cpu.so)" if native else "    <no Python frames>")
    return "\n".join(out) + "\n"


def _json(pid: int, frames: list, *, locals_: bool) -> list[dict[str, object]]:
    def frame(func: str, file: str, line: int, loc: list) -> dict[str, object]:
        return {
            "name": func,
            "filename": f"/opt/venv/lib/python3.10/site-packages/{file}",
            "module": None,
            "short_filename": file,
            "line": line,
            "locals": [{"name": k, "addr": 0, "arg": False, "repr": v} for k, v in loc] if locals_ else None,
            "is_entry": func == "<module>",
        }

    return [
        {
            "pid": pid,
            "thread_id": 139_890_000_000 + pid,
            "thread_name": "MainThread",
            "os_thread_id": pid,
            "active": False,
            "owns_gil": False,
            "frames": [frame(*f) for f in frames],
            "process_info": None,
        }
    ]


def _presentation(form: str, locals_: bool, native: bool, layout: str) -> str:
    """Both dumps in one of the real presentations."""
    if form == "json":
        return "\n".join(json.dumps(_json(pid, fr, locals_=locals_), indent=2) for pid, fr in (STUCK, WAITING))
    parent = 4700 if layout == "subprocesses" else None
    parts = [
        _text(pid, fr, locals_=locals_, native=native, thread_hex=form == "text_0.3", parent=parent)
        for pid, fr in (STUCK, WAITING)
    ]
    if layout == "loop":  # for p in ...; do echo "$ py-spy dump --pid $p"; py-spy dump --pid $p; done
        return "".join(f"$ py-spy dump --pid {pid}\n{p}\n" for (pid, _), p in zip((STUCK, WAITING), parts, strict=True))
    if layout == "srun_label":
        return "".join("\n".join(f"{i}: {ln}" for ln in p.splitlines()) + "\n" for i, p in enumerate(parts))
    if layout == "subprocesses":
        return ("\n" + "-" * 80 + "\n").join(parts)
    return "\n".join(parts)


MATRIX = [
    (form, locals_, native, layout)
    for form, locals_, native, layout in product(
        ("text_0.4", "text_0.3", "json"), (False, True), (False, True), ("loop", "srun_label", "subprocesses", "plain")
    )
    if not (form == "json" and (native or layout != "plain"))
]


@pytest.mark.parametrize(("form", "locals_", "native", "layout"), MATRIX)
def test_every_presentation_gives_the_same_processes_and_states(
    form: str, locals_: bool, native: bool, layout: str
) -> None:
    text = _presentation(form, locals_, native, layout)
    assert py_spy.is_py_spy(text[:8192])
    procs = {p.pid: p for p in py_spy.parse(text)}
    assert set(procs) == {4711, 4702}
    stuck, waiting = procs[4711], procs[4702]
    main = stuck.main_thread()
    assert main is not None and main.name == "MainThread" and main.active is False
    python_frames = [f for f in main.frames if not f.native]
    assert [f.function for f in python_frames] == [f[0] for f in STUCK[1]]
    assert python_frames[-1].file == "pretrain.py" and python_frames[-1].line == 301
    if locals_:
        assert ("global_rank", "5") in dict.fromkeys(x for f in main.frames for x in f.locals)
    s = state_of(stuck)
    assert s.kind == "data_loading" and "DataLoader" in s.what and s.call_site == "pretrain.py:212"
    w = state_of(waiting)
    assert w.kind == "collective" and w.what == "all_reduce" and w.call_site == "pretrain.py:233"
    if layout == "subprocesses":
        assert stuck.parent_pid == 4700


def test_a_pid_that_had_exited_is_gone_with_its_pid_from_the_echoed_command() -> None:
    text = (
        "$ py-spy dump --pid 4711\n"
        "Error: Failed to get process executable name. Check that the process is running.\n\n"
        "Caused by:\n    0: No such file or directory (os error 2)\n\n"
        f"$ py-spy dump --pid 4702\n{_text(*WAITING, locals_=False, native=False, thread_hex=False, parent=None)}"
    )
    procs = py_spy.parse(text)
    gone = next(p for p in procs if p.pid == 4711)
    assert gone.gone and gone.threads == () and state_of(gone).kind == "gone"
    assert state_of(next(p for p in procs if p.pid == 4702)).kind == "collective"


@pytest.mark.parametrize(
    ("frames", "kind"),
    [
        ([("save", "torch/serialization.py", 652), ("save_checkpoint", "train.py", 90)], "checkpoint"),
        ([("write_shard", "ckpt_io.py", 12), ("save_checkpoint", "train.py", 90)], "checkpoint"),
        ([("_SSLSocket.recv_into", "ssl.py", 1311), ("get_object", "botocore/client.py", 553)], "data_loading"),
        ([("load_batch", "data.py", 41), ("main", "train.py", 70)], "data_loading"),
        ([("barrier", "torch/distributed/distributed_c10d.py", 4210), ("main", "train.py", 70)], "collective"),
        ([("_engine_run_backward", "torch/autograd/graph.py", 825), ("main", "train.py", 66)], "backward"),
        ([("init_process_group", "torch/distributed/distributed_c10d.py", 1520)], "rendezvous"),
        ([("Lock.acquire", "threading.py", 120), ("update_stats", "metrics.py", 9)], "lock"),
        ([("main", "train.py", 70)], "blocked"),
    ],
)
def test_the_innermost_known_activity_decides(frames: list[tuple[str, str, int]], kind: str) -> None:
    lines = ["Process 9: python train.py", "Python v3.11.7 (/usr/bin/python3)", "", 'Thread 9 (idle): "MainThread"']
    lines += [f"    {f} ({file}:{line})" for f, file, line in frames]
    (p,) = py_spy.parse("\n".join(lines))
    assert state_of(p).kind == kind


def test_a_thread_on_cpu_outside_any_collective_computes_and_a_native_sleep_sleeps() -> None:
    busy = 'Process 9: python t.py\nPython v3.11.7 (x)\n\nThread 9 (active+gil): "MainThread"\n    step (t.py:5)\n'
    assert state_of(py_spy.parse(busy)[0]).kind == "compute"
    nap = (
        'Process 9: python t.py\nPython v3.11.7 (x)\n\nThread 9 (idle): "MainThread"\n'
        "    clock_nanosleep (libc.so.6)\n    time_sleep (libpython3.11.so.1.0)\n    main (t.py:5)\n"
    )
    assert state_of(py_spy.parse(nap)[0]).kind == "sleeping"


def test_a_log_is_not_taken_for_a_dump() -> None:
    log = "[rank3]:[W1207 04:56:40.158000 28400 run.py:982] Process group watchdog thread terminated\nThread 3 ok\n"
    assert not py_spy.is_py_spy(log)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_fuzz_text_never_raises(text: str) -> None:
    for p in py_spy.parse(text):
        state_of(p)
    py_spy.is_py_spy(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=4000))
def test_a_truncated_dump_keeps_what_was_read(cut: int) -> None:
    for form in ("text_0.4", "json"):
        text = _presentation(form, True, False, "plain")[:cut]
        for p in py_spy.parse(text):
            state_of(p)
