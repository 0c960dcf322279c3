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
