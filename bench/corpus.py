"""What the benchmarks share: the generated corpus (made once, reused while its parameters match) and peak RSS."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def corpus(out: Path, nbytes: int, nodes: int) -> Path:
    """The ``data_stall`` job of ``nodes`` x 8 ranks and about ``nbytes`` bytes under ``out/logs`` (regenerated with
    ``fixtures.generate`` only when the parameters changed)."""
    logs = out / "logs"
    stamp = out / "params.json"
    want = {"bytes": nbytes, "nodes": nodes, "generator": "worker_gen v2"}
    if logs.is_dir() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return logs
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "fixtures.generate", "--scenario", "data_stall", "--out", str(logs)]
    cmd += ["--nodes", str(nodes), "--gpus-per-node", "8", "--bytes-target", str(nbytes)]
    subprocess.run(cmd, check=True, cwd=REPO)
    stamp.write_text(json.dumps(want))
    return logs


def peak_rss_mb() -> tuple[float, float]:
    """(this process, largest child) peak resident set size in MB (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, kids


TIER_REGEX = "|".join(
    (
        r"NCCL.*timeout|Watchdog caught collective operation timeout",
        r"taking the entire process down",
        r"SIGTERM|SIGKILL|SIGABRT",
        r"CUDA error|CUDA out of memory|OOM",
        r"RuntimeError|Exception.*Error",
        r"AISBatchLoaderError|StopIteration",
        r"Traceback \(most recent call last\)",
        r"Connection reset|Connection broken|Connection refused",
        r"retrying [0-9]+/[0-9]+",
        r"timed out|deadline exceeded",
        r"broken pipe",
    )
)
"""The original skill's tiered search (tiers 1-3, 21 alternatives) as the one ``grep -E`` alternation it runs."""


def rg_tier_cmd(logs: Path) -> str:
    """One ``rg -n -j2 -z`` pass of the tier regex over ``logs``, output counted (rg goes quiet into /dev/null)."""
    return f"rg -n -j2 -z -e '{TIER_REGEX}' '{logs}' | wc -l"


def timed(cmd: list[str] | str) -> tuple[float, float, str]:
    """Run ``cmd`` (a shell string or argv); (wall seconds, peak RSS in MB of it and its descendants, stdout)."""
    import os
    import time

    t = time.perf_counter()
    proc = subprocess.Popen(cmd, shell=isinstance(cmd, str), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read() if proc.stdout is not None else b""
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise RuntimeError(f"{cmd!r} exited with status {status}")
    return wall, usage.ru_maxrss / 1024, out.decode(errors="replace")


def paired(ours: list[str] | str, theirs: list[str] | str, rounds: int) -> tuple[list[float], list[float], float, str]:
    """Alternate ``theirs`` and ``ours`` ``rounds`` times (a shared machine drifts: pairs cancel the drift);
    (our walls, their walls, our largest peak RSS in MB, our last stdout)."""
    mine: list[float] = []
    ref: list[float] = []
    rss = 0.0
    out = ""
    for _ in range(rounds):
        ref.append(timed(theirs)[0])
        wall, peak, out = timed(ours)
        mine.append(wall)
        rss = max(rss, peak)
    return mine, ref, rss, out


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def ratio_line(name: str, mine: list[float], ref: list[float], goal: float) -> str:
    """Median of the per-pair ratios, the medians of both walls, and the goal."""
    ratios = [m / r for m, r in zip(mine, ref, strict=True)]
    r = median(ratios)
    return (
        f"{name}: ours {median(mine):.2f} s, rg {median(ref):.2f} s, ratio ours/rg median {r:.2f}x "
        f"(pairs: {', '.join(f'{x:.2f}' for x in ratios)}); goal <= {goal}x: {'MET' if r <= goal else 'NOT met'}"
    )
