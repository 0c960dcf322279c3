"""The serial parts of one CLI command: what its main process does alone before the worker scan starts and after it
ends (run by hand; issue 14).

    python bench/serial.py grep bench/out/real_1024/logs
    python bench/serial.py --runs 5 --vs /path/to/other/checkout analyze bench/out/real_1024/logs bench/out/real_1024/ais

Each run is a fresh interpreter (``PYTHON -P -c``) that runs the command with ``--json`` as the program does
(``entry.prepare``, then the CLI) and notes the wall time since its start and its own CPU time when the job scan
starts (its first worker forked) and when it ends (the progress report of its last file, of a scan of 100+ files).
Printed per checkout, medians over the runs:

* ``pre``: wall seconds from the interpreter's start to the scan's start (what the program does before it forks:
  with the early scan, discovery and plan only; the rest of the imports and the arguments come after), and the
  process's CPU seconds by then;
* ``scan``: wall seconds of the scan, and the main process's CPU in it (what it does while its workers read);
* ``post``: wall and CPU seconds from the scan's end to the answer;
* ``serial``: ``pre`` + ``post`` (the wall time with one core busy and the other idle on a 2-core machine).

``--vs DIR``: alternate with the checkout in DIR (its ``.venv/bin/python``), run by run. Run
``python -m compileall -q debug_training_logs`` in each checkout first (with PYTHONDONTWRITEBYTECODE set, imports
would compile every run). The answer's MD5 is printed too: both checkouts must give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

PROBE = r"""
import contextlib, hashlib, io, json, os, sys, time
start = time.perf_counter()
marks = {}
sys.argv = ["debug-training-logs", *json.loads(os.environ["SERIAL_ARGS"]), "--json"]
real_fork = os.fork
def fork():  # the first worker forked: the job scan starts (maybe before the command's imports: entry.prepare)
    marks.setdefault("scan0", (time.perf_counter() - start, time.process_time()))
    return real_fork()
os.fork = fork
from debug_training_logs import progress
report = progress.report
def noted(done, total, message):
    if total >= 100 and done == total:
        marks["scanN"] = (time.perf_counter() - start, time.process_time())
    return report(done, total, message)
progress.report = noted
from debug_training_logs import entry
if hasattr(entry, "prepare"):  # (a checkout before the early scan: nothing to do before the imports)
    entry.prepare(sys.argv[1:])
from debug_training_logs import cli
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    cli.main()
marks["end"] = (time.perf_counter() - start, time.process_time())
marks["md5"] = hashlib.md5(out.getvalue().encode()).hexdigest()[:10]
print(json.dumps(marks), file=sys.stderr)
"""


def run_once(python: str, args: list[str], cwd: Path) -> dict[str, float | str]:
    env = {**os.environ, "SERIAL_ARGS": json.dumps(args)}
    # -P: the working directory (``cwd``, where the command's relative paths start) is not put first on sys.path,
    # so each interpreter imports its own checkout's package
    p = subprocess.run([python, "-P", "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    lines = p.stderr.strip().splitlines()
    m = json.loads(lines[-1])
    if "scan0" not in m or "scanN" not in m:
        raise SystemExit(f"no scan of 100+ files seen in: {args} ({p.stderr[-500:]})")
    (w0, c0), (wn, cn), (we, ce) = m["scan0"], m["scanN"], m["end"]
    # the interpreter's start-up before the probe's first line is in the CPU times, not in the wall times
    return {
        "pre_wall": w0,
        "pre_cpu": c0,
        "scan_wall": wn - w0,
        "scan_cpu": cn - c0,
        "post_wall": we - wn,
        "post_cpu": ce - cn,
        "serial_wall": w0 + we - wn,
        "serial_cpu": c0 + ce - cn,
        "md5": m["md5"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vs", type=Path, help="another checkout to alternate with (its .venv/bin/python)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the CLI command and its arguments")
    ns = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    trees = {"this": here, **({"vs": ns.vs.resolve()} if ns.vs else {})}
    results: dict[str, list[dict[str, float | str]]] = {k: [] for k in trees}
    for _ in range(ns.runs):
        for name, tree in trees.items():
            results[name].append(run_once(str(tree / ".venv/bin/python"), ns.command, here))
    fields = ("pre_wall", "pre_cpu", "scan_wall", "scan_cpu", "post_wall", "post_cpu", "serial_wall", "serial_cpu")
    print(f"{' '.join(ns.command)}: medians of {ns.runs} runs (seconds)")
    print(f"{'':6}" + "".join(f"{f:>12}" for f in fields) + "  answer md5")
    for name, runs in results.items():
        med = [statistics.median(float(r[f]) for r in runs) for f in fields]
        print(f"{name:6}" + "".join(f"{v:12.3f}" for v in med) + f"  {sorted({str(r['md5']) for r in runs})}")


if __name__ == "__main__":
    main()
