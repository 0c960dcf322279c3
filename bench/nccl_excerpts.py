"""nccl_state_table on the real-report-shaped excerpts (tests/nccl_excerpts.py), optionally against an older revision.

    python bench/nccl_excerpts.py              # this checkout
    python bench/nccl_excerpts.py --rev 27dfda4   # the package as it was at that commit (git archive into a tmp dir)

Prints one line per excerpt: rows, straggler ranks, per-PG classifications, world size, unparsed lines, summary head.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_RUN = """
import json, sys, tempfile
from pathlib import Path
sys.meta_path = [m for m in sys.meta_path if "editable" not in repr(m).lower()]
sys.path.insert(0, {src!r})
sys.path.append({repo!r})
from debug_training_logs.analysis.nccl_table import nccl_state_table
from tests.nccl_excerpts import EXCERPTS
root = Path(tempfile.mkdtemp())
out = {{}}
for ex in EXCERPTS:
    r = nccl_state_table(ex.write(root))
    out[ex.name] = [len(r.rows), r.straggler_ranks, [p.classification for p in r.process_groups],
                    r.coverage.world_size, r.unparsed_lines, r.summary[:110]]
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="git revision whose debug_training_logs package to run instead of this checkout")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = str(REPO)
        if args.rev:
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.rev, "debug_training_logs"], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            src = tmp
        res = subprocess.run(
            [sys.executable, "-c", _RUN.format(src=src, repo=str(REPO))], check=True, capture_output=True, text=True
        )
    for name, (rows, strag, cls, world, unparsed, summary) in json.loads(res.stdout).items():
        print(f"{name}: rows={rows} stragglers={strag} pgs={cls} world={world} unparsed={unparsed} | {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
