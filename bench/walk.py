"""The walk of ``logs_dir`` from the MCP tool ``diagnose`` to the verdict (issue 33: "the walk of ``logs_dir`` from
``diagnose`` under 10 climbs back up").

    python bench/walk.py [JOB] [--tool diagnose] [--show]

Runs the tool as the server runs it (the registry's call, within the server's ``one_walk``, results kept as in a
server) on JOB (a directory holding ``logs/`` and, when there, ``ais/``; default ``fixtures/data_stall``) and traces
every Python call of the package in every thread. A **stop** is a package function handed the logs directory: an
argument that is the directory, as a string or a path. The walk is the stops in the order they are first reached (a
function reached again is not a new stop). Printed:

- ``stops``: the functions the directory passes through, and ``files``: the modules they are in;
- ``climbs``: stops reached at the same or a shallower depth (counting package frames) than the stop before them in
  the same thread: the walk went down a chain, came back up and went down another one;
- ``returns``: stops in a module that the walk had left for another one before (a reader goes back to a file);
- ``walks``: how many times each directory tree was walked (``os.walk`` from its top) during the call.

``--show`` lists the walk: depth, module and function of each stop, climbs and returns marked.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PACKAGE = str(REPO / "debug_training_logs")


@dataclass
class Stop:
    thread: int
    depth: int
    module: str
    function: str
    climb: bool
    """The stop before it in its thread had returned: the walk came back up before going down here."""


class Tracer:
    """Per thread, the stack of frames (whether each is the package's, and which stop it is) and the stops in the
    order first reached."""

    def __init__(self, logs: Path) -> None:
        self.wanted = {str(logs), str(logs.resolve())}
        self.stops: list[Stop] = []
        self.seen: set[tuple[str, str]] = set()
        self.stacks: dict[int, list[tuple[bool, int]]] = {}
        self.last: dict[int, int] = {}

    def _handed_logs(self, frame: FrameType) -> bool:
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
        values: list[Any] = []
        for name in code.co_varnames[:n]:
            v = frame.f_locals.get(name)
            values.extend(v.values() if isinstance(v, dict) else v if isinstance(v, tuple) else [v])
        return any(isinstance(v, (str, Path)) and str(v) in self.wanted for v in values)

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return"):
            return
        thread = threading.get_ident()
        stack = self.stacks.setdefault(thread, [])
        if event == "return":
            if stack:
                stack.pop()
            return
        ours = frame.f_code.co_filename.startswith(PACKAGE)
        if not ours or not self._handed_logs(frame):
            stack.append((ours, -1))
            return
        module = frame.f_code.co_filename[len(PACKAGE) + 1 :]
        key = (module, frame.f_code.co_qualname)
        if key in self.seen:  # reached again: not a new stop, but a frame later stops may be below
            stack.append((True, self.last.get(thread, -1)))
            return
        self.seen.add(key)
        prev = self.last.get(thread)
        climb = prev is not None and all(i != prev for _, i in stack)
        self.last[thread] = len(self.stops)
        stack.append((True, len(self.stops)))
        self.stops.append(Stop(thread, sum(o for o, _ in stack), module, frame.f_code.co_qualname, climb))


def returns(stops: list[Stop]) -> list[bool]:
    """Per stop: whether it is in a module the walk had left for another one before."""
    out: list[bool] = []
    left: set[str] = set()
    for i, s in enumerate(stops):
        before = stops[i - 1] if i else None
        out.append(before is not None and before.module != s.module and s.module in left)
        if before is not None and before.module != s.module:
            left.add(before.module)
    return out


WALKS: Counter[str] = Counter()
_os_walk = os.walk


def _counted_walk(top: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    WALKS[str(top)] += 1
    return _os_walk(top, *args, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job", nargs="?", type=Path, default=REPO / "fixtures" / "data_stall")
    ap.add_argument("--tool", default="diagnose")
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    job = args.job.resolve()
    logs = job / "logs"
    ais = job / "ais"

    from debug_training_logs import paths
    from debug_training_logs.logs.discovery import one_walk
    from debug_training_logs.memo import MEMO
    from debug_training_logs.tools.registry import tool_by_name

    spec = tool_by_name(args.tool)
    if spec is None:
        raise SystemExit(f"no tool {args.tool!r}")
    kwargs: dict[str, Any] = {"logs_dir": str(logs)}
    if ais.is_dir() and "ais_dir" in spec.signature.parameters:
        kwargs["ais_dir"] = str(ais)
    assert MEMO.keep_results, "results are kept, as in a server"
    tracer = Tracer(logs)
    os.walk = _counted_walk
    threading.setprofile(tracer)
    sys.setprofile(tracer)
    try:
        with paths.restricted_to([job]), one_walk():
            spec.call(**kwargs)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        os.walk = _os_walk
    back = returns(tracer.stops)
    if args.show:
        for s, r in zip(tracer.stops, back, strict=True):
            mark = ("^" if s.climb else " ") + ("<" if r else " ")
            print(f"{mark} {s.depth:3d} {'  ' * min(s.depth, 30)}{s.module}:{s.function}")
        print("(^ a climb back up, < a return to a module left before)")
    files = len({s.module for s in tracer.stops})
    print(
        f"{args.tool} on {job.name}: {len(tracer.stops)} stops in {files} files, "
        f"{sum(s.climb for s in tracer.stops)} climbs back up, {sum(back)} returns to a file already left"
    )
    walks = ", ".join(f"{Path(t).relative_to(job) if Path(t).is_relative_to(job) else t} {n}" for t, n in WALKS.items())
    print(f"walks: {walks}")


if __name__ == "__main__":
    main()
