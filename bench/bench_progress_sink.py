"""CPU per progress line in the evidence sink, per line layout, batched and one by one (run by hand).

    python bench/bench_progress_sink.py [--lines 20000] [--rounds 5]

Feeds ``--lines`` synthetic progress hits (8 ranks interleaved, one layout at a time) into a fresh
``EvidenceSink`` and times ``on_hit`` for every line plus ``finish`` with the process CPU clock; prints the best of
``--rounds`` in microseconds per line, once as the sink reads them (progress-only lines batched and aggregated per
rank, ``evidence_sink._progress_run``) and once with every line read on its own (``_signals``, as a progress line that
also holds another signal is), each in a fresh process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LAYOUTS = {
    "lightning bar, ASCII, [rankN]:": "[rank{r}]: Epoch 0:   3%|3         | {i}/90000 [05:00<2:41:40, 1.00it/s, v_num=0, "
    "reduced_train_loss=3.101, global_step={i}.0, train_step_timing in s=0.4{d}]",
    "lightning bar, U+2588 blocks, srun N:": "{r}: Epoch 0:  10%|█         | {i}/90000 [13:20:01<3:52:11, 0.71it/s, "
    "v_num=0, reduced_train_loss=2.200, global_step={i}.0, train_step_timing in s=1.4{d}]",
    "megatron iteration with a full date": "[rank{r}]: [2026-11-23 10:{m:02d}:{s:02d}] iteration {i:8d}/  100000 | "
    "consumed samples: {i} | elapsed time per iteration (ms): 1234.{d} | learning rate: 1.000E-04 |",
    "ANSI-coloured prefix": "\x1b[36m[rank{r}]:\x1b[0m Epoch 0:   3%|3         | {i}/90000 "
    "[05:00<2:41:40, 1.00it/s, train_step_timing in s=0.4{d}]",
    "Ray [rank=N] prefix": "(MegatronPolicyWorker[rank={r}] pid=4815{r}, ip=10.20.3.17) Epoch 0:   3%|3"
    "         | {i}/90000 [05:00<2:41:40, 1.00it/s, train_step_timing in s=0.4{d}]",
}


def measure(n: int, rounds: int, one_by_one: bool) -> None:
    from dataclasses import replace

    from debug_training_logs.analysis import evidence_sink as ev
    from debug_training_logs.analysis.evidence_signals import SIGNAL_NAMES
    from debug_training_logs.logs.discovery import LogFile

    if one_by_one:
        route = ev._route
        ev._route = lambda ids: replace(route(ids), batched=False)  # type: ignore[assignment]
        ev._ROUTES.clear()

    ids = [SIGNAL_NAMES.index("progress")]
    for name, shape in LAYOUTS.items():
        lines = [shape.format(r=i % 8, i=i // 8, d=i % 10, m=(i // 480) % 60, s=(i // 8) % 60) for i in range(n)]
        best = float("inf")
        for _ in range(rounds):
            sink = ev.EvidenceSink(LogFile(path=Path("bench.log"), rel="bench.log", size=0, compression="none"))
            t = time.process_time()
            for no, line in enumerate(lines, 1):
                sink.on_hit(ids, no, line)
            sink.finish()
            best = min(best, time.process_time() - t)
        print(f"  {name:40} {best / n * 1e6:6.2f} us/line")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", choices=["batched", "one-by-one"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        measure(args.lines, args.rounds, args.child == "one-by-one")
        return 0
    for mode in ("batched", "one-by-one"):
        print(mode)
        cmd = [sys.executable, __file__, "--child", mode, "--lines", str(args.lines), "--rounds", str(args.rounds)]
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
