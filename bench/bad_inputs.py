"""The worst inputs of the bad-input matrix (issue 16), timed: each case runs the real CLI in a subprocess and prints
its wall time, peak RSS (the largest process of the tree, from ``wait4``) and exit status, so they stay bounded.

Cases (sizes by default; ``--quick`` makes them ~10x smaller for a smoke run):

* ``100k files``: 100,000 small rank logs (one rank each, NCCL init with the world size) -> ``nccl`` and ``overview``;
* ``1 GB single line``: one line of 1 GiB with no newline and no ``\\r`` -> ``grep``;
* ``10^8 world size``: a line stating ``world_size=99999999`` -> ``analyze``;
* ``\\r progress``: 1 GiB of tqdm records ended by ``\\r`` (one "line") with an Xid glued in the middle -> ``grep``.

Run: ``python bench/bad_inputs.py [--quick] [--keep DIR]``. The corpora are written under a temp dir (or ``--keep``,
reused when present) and need ~2.2 GB of disk at full size. Equivalent by hand: ``/usr/bin/time -v
debug-training-logs grep DIR --json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
CLI = [sys.executable, "-m", "debug_training_logs"]
RECORD = b"Epoch 3:  42%|####2     | 4200/10000 [07:00<09:40, 10.0it/s, loss=2.31, lr=3e-4]\r"


def many_files(d: Path, n: int) -> Path:
    marker = d.with_name(d.name + ".done")  # beside the directory: not one of the files read
    if marker.is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        host = f"gpu-{r // 8:05d}"
        text = (
            f"{host}:100:200 [{r % 8}] NCCL INFO comm 0x1 rank {r} nranks {n} cudaDev {r % 8} busId 1 - Init COMPLETE\n"
            f"[rank{r}]:[I0302 10:00:00.000000000 ProcessGroupNCCL.cpp:900] step 1 loss 2.0\n"
        )
        (d / f"rank-{r}.log").write_text(text)
    marker.write_text("")
    return d


def single_line(d: Path, size: int) -> Path:
    f = d / "one.log"
    if f.is_file() and f.stat().st_size >= size:
        return d
    d.mkdir(parents=True, exist_ok=True)
    block = (b"0123456789abcdef" * 4096) * 16  # 1 MiB, no line end of any kind
    with open(f, "wb") as fh:
        fh.write(b"[rank0]: start\n")
        for _ in range(size // len(block)):
            fh.write(block)
        fh.write(b" CUDA error: an illegal memory access was encountered\n[rank0]: end\n")
    return d


def world_size(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "a.log").write_text("[rank0]: world_size=99999999\n[rank0]: step 1\n")
    return d


def progress(d: Path, size: int) -> Path:
    f = d / "train.log"
    if f.is_file() and f.stat().st_size >= size:
        return d
    d.mkdir(parents=True, exist_ok=True)
    block = RECORD * ((1 << 20) // len(RECORD))
    n = size // len(block)
    with open(f, "wb") as fh:
        fh.write(b"[rank0]: start\n")
        for i in range(n):
            fh.write(block)
            if i == n // 2:
                fh.write(b"[rank0]: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\r")
        fh.write(b"\n[rank0]: end\n")
    return d


def run(cmd: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MB of the largest process of the tree, exit status, stderr's first line or summary)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)  # rusage of this child (max over its waited-for descendants)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    note = stderr.decode(errors="replace").strip().splitlines()[:1]
    if not note and stdout:
        try:
            note = [str(json.loads(stdout).get("summary", ""))]
        except ValueError:
            note = []
    return wall, usage.ru_maxrss / 1024, proc.returncode, (note[0] if note else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~10x smaller inputs (smoke run)")
    ap.add_argument("--keep", type=Path, help="write (and reuse) the corpora here instead of a temp dir")
    args = ap.parse_args()
    scale = 10 if args.quick else 1
    base = args.keep or Path(tempfile.mkdtemp(prefix="bad_inputs_"))
    cases = [
        ("100k files: nccl", lambda: ["nccl", str(many_files(base / "many", 100_000 // scale)), "--json"]),
        ("100k files: overview", lambda: ["overview", str(many_files(base / "many", 100_000 // scale)), "--json"]),
        ("100k files: analyze", lambda: ["analyze", str(many_files(base / "many", 100_000 // scale)), "--json"]),
        ("1 GB single line: grep", lambda: ["grep", str(single_line(base / "line", GIB // scale)), "--json"]),
        ("10^8 world size: analyze", lambda: ["analyze", str(world_size(base / "world")), "--json"]),
        ("10^8 world size: nccl", lambda: ["nccl", str(world_size(base / "world")), "--json"]),
        ("1 GB \\r progress: grep", lambda: ["grep", str(progress(base / "progress", GIB // scale)), "--json"]),
    ]
    print(f"{'case':<28} {'wall s':>8} {'peak RSS MB':>12} {'exit':>5}  result")
    try:
        for name, make in cases:
            argv = make()
            wall, rss, rc, note = run(CLI + argv)
            print(f"{name:<28} {wall:>8.1f} {rss:>12.0f} {rc:>5}  {note[:110]}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
