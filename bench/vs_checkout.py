"""This checkout against another one and against one rg tier pass, in the same rounds (run by hand; issue 14).

    python bench/vs_checkout.py --vs /path/to/old/checkout [--rounds 12] analyze grep nccl

Each round runs the three commands (``rg``, the other checkout's CLI, this one's) in a rotating order on the
1,024-rank corpus (``bench/out/real_1024``, made by ``bench/realistic.py``) and prints, per command, the medians of the
per-round ratios: this / rg, other / rg and this / other. On a shared machine whose Python speed drifts far more than
rg's, the ratio against rg moves from one run to the next; the ratio between two checkouts measured in the same rounds
is what holds. Each checkout runs its own ``.venv/bin/debug-training-logs``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from corpus import rg_tier_cmd, timed
from realistic import realistic_corpus

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vs", type=Path, required=True, help="the other checkout (its .venv/bin/debug-training-logs)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("commands", nargs="+", choices=["analyze", "grep", "nccl"])
    args = ap.parse_args()
    logs, ais = realistic_corpus(REPO / "bench" / "out" / "real_1024", 1024, 1_000_000_000)
    for name in args.commands:
        dirs = [str(logs), str(ais)] if name == "analyze" else [str(logs)]
        runs: list[tuple[str, list[str] | str]] = [
            ("rg", rg_tier_cmd(logs)),
            ("other", [str(args.vs / ".venv" / "bin" / "debug-training-logs"), name, *dirs, "--json"]),
            ("this", [str(REPO / ".venv" / "bin" / "debug-training-logs"), name, *dirs, "--json"]),
        ]
        this_rg: list[float] = []
        other_rg: list[float] = []
        this_other: list[float] = []
        for k in range(args.rounds):
            wall = {who: timed(cmd)[0] for who, cmd in runs[k % 3 :] + runs[: k % 3]}
            this_rg.append(wall["this"] / wall["rg"])
            other_rg.append(wall["other"] / wall["rg"])
            this_other.append(wall["this"] / wall["other"])
        m = statistics.median
        print(
            f"{name}: this/rg {m(this_rg):.2f}x, other/rg {m(other_rg):.2f}x, this/other {m(this_other):.3f} "
            f"(this/rg per round: {', '.join(f'{x:.2f}' for x in this_rg)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
