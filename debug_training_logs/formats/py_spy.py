"""What ``py-spy dump`` prints: each process's threads and their Python (and, with ``--native``, C) frames.

Pure functions over text; the caller reads the file. The text form (py-spy 0.3 and 0.4)::

    Process 28406: /usr/bin/python3 -u train.py --rank 3
    Python v3.11.7 (/usr/bin/python3.11)
    Parent Process 28400: /usr/bin/python3 /usr/bin/torchrun ...        (``--subprocesses``)

    Thread 28406 (idle): "MainThread"                                    (0.3: ``Thread 0x7F3A... (active+gil)``)
        all_reduce (torch/distributed/distributed_c10d.py:3913)
            Arguments:                                                   (``--locals``)
                tensor: <Tensor at 0x7f...>
            Locals:
                rank: 3
        clock_nanosleep (libc.so.6)                                      (``--native``: no line number)
        <module> (train.py:9)

Dumps are often collected in a loop into one file (``for p in ...; do py-spy dump --pid $p; done``), with the shell
command echoed or an ``srun`` label before each line; a process py-spy could not read leaves ``Error: ...`` (a pid
that had exited: "Failed to get process executable name. Check that the process is running."). ``--json`` prints a
list of threads, each with its ``pid`` and ``frames`` (innermost first, as in the text form).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

MAX_LINE: Final = 4096
"""Longer lines (a huge ``--locals`` repr) are cut before matching."""
MAX_FRAMES: Final = 512
"""Frames kept per thread (a runaway recursion keeps its innermost ones)."""
MAX_THREADS: Final = 4096
"""Threads kept per process."""

_LABEL: Final = re.compile(r"^\s*(?:\d{1,6}|[A-Za-z][\w.\-]{0,80}): ")
_PROCESS: Final = re.compile(r"^Process (?P<pid>\d{1,10}): ?(?P<cmd>.*)$")
_PARENT: Final = re.compile(r"^Parent Process (?P<pid>\d{1,10}): ?(?P<cmd>.*)$")
_PYTHON: Final = re.compile(r"^Python v(?P<version>[\w.+]+)")
_THREAD: Final = re.compile(
    r'^Thread (?:(?P<tid>0x[0-9A-Fa-f]{1,20}|\d{1,20}) )?\((?P<state>[a-z+]{1,20})\)(?:: "(?P<name>[^"]{0,200})")?\s*$'
)
_FRAME: Final = re.compile(r"^ {2,8}(?P<func>\S[^()]{0,500}?|<[^>]{1,200}>)(?: \((?P<where>[^()]{0,1000})\))?\s*$")
_LOCAL_HEAD: Final = re.compile(r"^ {6,}(?:Arguments|Locals):\s*$")
_LOCAL: Final = re.compile(r"^ {10,}(?P<key>[\w.]{1,100}): (?P<value>.{0,300})")
_COMMAND: Final = re.compile(r"py-spy\s+dump\b[^\n]*?(?:--pid[ =]|-p ?)(?P<pid>\d{1,10})\b")
_ERROR: Final = re.compile(r"^Error: (?P<what>.{1,300})")
_PY_SPY_ERROR: Final = re.compile(
    r"Check that the process is running|python version from target process|py_spy::|Failed to (?:open|suspend) process"
)
_WHERE_LINE: Final = re.compile(r"^(?P<file>.+):(?P<line>\d{1,9})$")
_GONE: Final = re.compile(
    r"check that the process is running|No such process|process .{0,40}(?:exited|not found)", re.I
)


@dataclass(frozen=True, repr=False)
class Frame:
    """One frame: ``function (file:line)``; a native frame has a library instead of a file and no line."""

    function: str
    file: str | None
    line: int | None
    native: bool
    locals: tuple[tuple[str, str], ...] = ()
    """``--locals``: (name, value) of its arguments and locals, values as py-spy printed them."""
    line_no: int = 0
    """1-based line of the dump file that shows it (JSON: its thread's)."""
    text: str = ""
    """That line as the file has it (for citations)."""

    def where(self) -> str:
        if self.file is None:
            return self.function
        at = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{self.function} ({at})"


@dataclass(frozen=True, repr=False)
class ThreadStack:
    """One thread of a process, its frames innermost first."""

    thread: str | None
    name: str | None
    active: bool | None
    """py-spy's ``active``/``idle`` (on CPU or not), None when it did not say."""
    gil: bool
    frames: tuple[Frame, ...]
    line_no: int
    """1-based line of its ``Thread`` header (JSON: of the array that holds it)."""
    text: str = ""
    """That line as the file has it."""


@dataclass(frozen=True, repr=False)
class ProcessStacks:
    """One ``py-spy dump`` of one process, or the error py-spy printed instead."""

    pid: int | None
    command: str | None
    parent_pid: int | None
    threads: tuple[ThreadStack, ...]
    line_no: int
    """1-based line of its ``Process`` header (or of the error)."""
    error: str | None = None
    """py-spy could not read it: its words (``Failed to get process executable name...``)."""
    error_text: str = ""
    """The ``Error:`` line as the file has it."""

    @property
    def gone(self) -> bool:
        """py-spy found no such process: it had exited (or died) when the dumps were taken."""
        return self.error is not None and bool(_GONE.search(self.error))

    def main_thread(self) -> ThreadStack | None:
        """The thread that runs the training loop: ``MainThread``, else the one whose id is the pid, else the first."""
        for t in self.threads:
            if t.name == "MainThread":
                return t
        for t in self.threads:
            if self.pid is not None and t.thread == str(self.pid):
                return t
        return self.threads[0] if self.threads else None


def is_py_spy(head: str) -> bool:
    """Whether a file's first few KB look like ``py-spy dump`` output (text or JSON)."""
    lines = [_unlabel(x) for x in head.splitlines()[:60]]
    text = any(_PROCESS.match(x) for x in lines) and any(_PYTHON.match(x) or _THREAD.match(x) for x in lines)
    json_like = head.lstrip().startswith("[") and '"thread_id"' in head and '"frames"' in head
    errors = any(_ERROR.match(x) for x in lines) and (
        any(_COMMAND.search(x) for x in lines) or any(_PY_SPY_ERROR.search(x) for x in lines)
    )
    return text or json_like or errors


def parse(text: str) -> list[ProcessStacks]:
    """Every process dump in ``text`` (text or JSON form, one or many concatenated), in file order."""
    if text.lstrip().startswith("["):
        return _parse_json(text)
    return _parse_text(text.splitlines())


def _unlabel(line: str) -> str:
    """The line without an ``srun -l`` / ``host:`` label, when what follows is py-spy's."""
    m = _LABEL.match(line)
    if m is None:
        return line
    rest = line[m.end() :]
    if rest.startswith(("Process ", "Python v", "Thread ", "Parent Process ", "Error: ", "    ")):
        return rest
    return line


class _Builder:
    def __init__(self) -> None:
        self.out: list[ProcessStacks] = []
        self.pid: int | None = None
        self.command: str | None = None
        self.parent: int | None = None
        self.start = 0
        self.threads: list[ThreadStack] = []
        self.thread: tuple[str | None, str | None, bool | None, bool, int, str] | None = None
        self.frames: list[Frame] = []
        self.locals: list[tuple[str, str]] = []
        self.asked: int | None = None
        """The pid of the ``py-spy dump --pid N`` command echoed before (for an error with no Process header)."""

    def end_frame_locals(self) -> None:
        if self.locals and self.frames:
            f = self.frames[-1]
            self.frames[-1] = Frame(f.function, f.file, f.line, f.native, (*f.locals, *self.locals), f.line_no, f.text)
        self.locals = []

    def end_thread(self) -> None:
        self.end_frame_locals()
        if self.thread is not None and len(self.threads) < MAX_THREADS:
            tid, name, active, gil, at, text = self.thread
            self.threads.append(ThreadStack(tid, name, active, gil, tuple(self.frames[:MAX_FRAMES]), at, text))
        self.thread, self.frames = None, []

    def end_process(self) -> None:
        self.end_thread()
        if self.pid is not None or self.threads:
            self.out.append(ProcessStacks(self.pid, self.command, self.parent, tuple(self.threads), self.start))
        self.pid, self.command, self.parent, self.threads = None, None, None, []


def _parse_text(lines: list[str]) -> list[ProcessStacks]:
    b = _Builder()
    for i, raw in enumerate(lines, 1):
        line = _unlabel(raw[:MAX_LINE].rstrip("\r"))
        if (m := _COMMAND.search(line)) is not None:
            b.end_process()
            b.asked = int(m.group("pid"))
            continue
        if (m := _PROCESS.match(line)) is not None:
            b.end_process()
            b.pid, b.command, b.start = int(m.group("pid")), m.group("cmd").strip() or None, i
            b.asked = None
            continue
        if (m := _ERROR.match(line)) is not None:
            pid = b.pid if b.pid is not None else b.asked
            if b.pid is None or not b.threads:
                b.pid, b.threads, b.thread = None, [], None
                what = m.group("what").strip()
                b.out.append(ProcessStacks(pid, b.command, None, (), i, what, raw[:MAX_LINE].rstrip("\r")))
                b.command, b.asked = None, None
            continue
        if (m := _PARENT.match(line)) is not None:
            b.parent = int(m.group("pid"))
            continue
        if (m := _THREAD.match(line)) is not None:
            b.end_thread()
            state = m.group("state")
            active = True if state.startswith("active") else False if state.startswith("idle") else None
            b.thread = (m.group("tid"), m.group("name"), active, "gil" in state, i, raw[:MAX_LINE].rstrip("\r"))
            continue
        if b.thread is None:
            continue
        if _LOCAL_HEAD.match(line):
            continue
        if b.locals is not None and (m := _LOCAL.match(line)) is not None and b.frames:
            b.locals.append((m.group("key"), m.group("value").strip()))
            continue
        if (m := _FRAME.match(line)) is not None:
            b.end_frame_locals()
            b.frames.append(_frame(m.group("func").strip(), m.group("where"), i, raw[:MAX_LINE].rstrip("\r")))
            continue
        if not line.strip():
            b.end_thread()
    b.end_process()
    return b.out


def _frame(func: str, where: str | None, line_no: int, text: str) -> Frame:
    if where is None:
        return Frame(func, None, None, True, (), line_no, text)
    if (w := _WHERE_LINE.match(where)) is not None:
        return Frame(func, w.group("file"), int(w.group("line")), False, (), line_no, text)
    return Frame(func, where, None, True, (), line_no, text)


def _parse_json(text: str) -> list[ProcessStacks]:
    """One or more JSON arrays of threads (``py-spy dump --json``, perhaps several in one file)."""
    decoder = json.JSONDecoder()
    out: dict[int | None, list[ThreadStack]] = {}
    starts: dict[int | None, int] = {}
    commands: dict[int | None, str | None] = {}
    parents: dict[int | None, int | None] = {}
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            break
        line_no = text.count("\n", 0, pos) + 1
        end = text.find("\n", pos)
        first = text[pos : end if end >= 0 else n][:MAX_LINE]
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break  # truncated or not JSON: what was read so far stands
        for t in value if isinstance(value, list) else []:
            if not isinstance(t, dict):
                continue
            pid = t.get("pid") if isinstance(t.get("pid"), int) else None
            info = t.get("process_info")
            if isinstance(info, dict):
                commands.setdefault(pid, _str(info.get("command_line")))
                parent = info.get("parent")
                parents.setdefault(pid, parent.get("pid") if isinstance(parent, dict) else None)
            frames = tuple(
                _json_frame(f, line_no, first) for f in (t.get("frames") or [])[:MAX_FRAMES] if isinstance(f, dict)
            )
            tid = t.get("os_thread_id") or t.get("thread_id")
            active = t.get("active") if isinstance(t.get("active"), bool) else None
            stack = ThreadStack(
                str(tid) if tid is not None else None,
                _str(t.get("thread_name")),
                active,
                bool(t.get("owns_gil")),
                frames,
                line_no,
                first,
            )
            threads = out.setdefault(pid, [])
            starts.setdefault(pid, line_no)
            if len(threads) < MAX_THREADS:
                threads.append(stack)
    return [
        ProcessStacks(pid, commands.get(pid), parents.get(pid), tuple(threads), starts[pid])
        for pid, threads in out.items()
    ]


def _str(v: object) -> str | None:
    return v[:MAX_LINE] if isinstance(v, str) else None


def _json_frame(f: dict[str, object], line_no: int, text: str) -> Frame:
    name = _str(f.get("name")) or "?"
    file = _str(f.get("short_filename")) or _str(f.get("filename"))
    got = f.get("line")
    line = got if isinstance(got, int) and not isinstance(got, bool) else None
    raw = f.get("locals")
    pairs: list[tuple[str, str]] = []
    for v in raw if isinstance(raw, list) else []:
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            pairs.append((str(v["name"])[:100], (_str(v.get("repr")) or "")[:300]))
    native = line is None or line == 0
    return Frame(name, file, line if not native else None, native, tuple(pairs), line_no, text)
