"""A realistic big job for the benchmarks: the fixture generator's ``data_stall`` incident inside the line mix of a
real NeMo/Lightning run (not a test; used by ``bench_diagnose.py``, ``bench_grep.py``, ``bench_nccl.py``).

    python bench/realistic.py --out bench/out/real_1024 --ranks 1024 --bytes 1000000000

What a real 1,024-rank job writes, per node file of 8 ranks (the shares are of all lines):

* **per-step metric lines, one per rank per step (about half of all lines)**: a Lightning progress line with
  ``train_step_timing in s=`` and the loss, prefixed ``[rankN]:``; the step time is what makes ~1 GB;
* **data-loader debug**, one per rank per step (Lhotse's sampler naming the AIS shard), plus every 25th step a
  ``UserWarning`` and every 40th a DataLoader worker heartbeat;
* **NCCL INFO init blocks**: ~40 lines per rank at start-up (channels, rings, trees, transports, proxy threads);
* the incident (rank 5 stalls in the AIS loader, the others time out in ALLREDUCE 4118), torchrun's
  ChildFailedError and the SLURM cancellation, exactly as ``fixtures.worker_gen`` renders them, so the
  ground truth (``worker_truth.json`` beside the logs) is the generator's; AIS daemon logs of the same incident
  (``fixtures.ais_gen``) go to ``ais/``.

Every metric and loader line stops at the stall (the job blocks in the collective), as in a real hang.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import shutil
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures import ais_gen  # noqa: E402
from fixtures.worker_gen import (  # noqa: E402
    SCENARIOS,
    TRUTH_NAME,
    JobSpec,
    Line,
    Renderer,
    _host,
    _truth,
    _write,
)

AVG_LINE_BYTES = 150
"""Average bytes of a bulk line of this mix (to turn a byte target into a step time)."""
VERSION = "realistic v1"


class RealisticRenderer(Renderer):
    """The fixture renderer with the bulk noise of a real run (see module doc) instead of the rotating noise."""

    def __init__(self, spec: JobSpec, incident: Any, rng: random.Random, nbytes: int) -> None:
        super().__init__(spec, incident, rng)
        self.nbytes = nbytes

    def startup(self, node: int) -> None:
        super().startup(node)
        g = self.spec.gpus_per_node
        host = _host(self.spec, node)
        for local in range(g):
            r = node * g + local
            pid = self.pids[r]
            at = self.t0 + timedelta(seconds=21, milliseconds=29 * local + 400)
            self.emit(node, at, "\n".join(self._nccl_block(host, pid, local, r)), rank=r)

    def _nccl_block(self, host: str, pid: int, local: int, r: int) -> list[str]:
        w = self.world
        pfx = f"{host}:{pid}:{pid + 512} [{local}] NCCL INFO "
        lines = [
            f"{pfx}Bootstrap : Using ib0:10.52.{r // 256}.{r % 256}<0>",
            f"{pfx}NET/Plugin: No plugin found (libnccl-net.so), using internal implementation",
            f"{pfx}cudaDriverVersion 12040",
            f"{pfx}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.52.0.1<0>",
            f"{pfx}Using non-device net plugin version 0",
            f"{pfx}Using network IB",
            f"{pfx}ncclCommInitRank comm 0x{0x55D3C8A0 + 0x1000 * r:x} rank {r} nranks {w} cudaDev {local} "
            f"nvmlDev {local} busId {0x18000 + 0x10000 * local:x} commId 0x7ac61f03b2e45d19 - Init START",
            f"{pfx}Setting affinity for GPU {local} to ffff,ffffffff,00000000,0000ffff,ffffffff",
            f"{pfx}comm 0x{0x55D3C8A0 + 0x1000 * r:x} rank {r} nRanks {w} nNodes {w // 8} localRanks 8 "
            f"localRank {local} MNNVL 0",
            f"{pfx}Trees [0] {(r + 1) % w}/-1/-1->{r}->{(r - 1) % w} [1] {(r + 1) % w}/-1/-1->{r}->{(r - 1) % w}",
            f"{pfx}P2P Chunksize set to 131072",
        ]
        for ch in range(24):
            lines.append(f"{pfx}Channel {ch:02d}/0 : {r}[{local}] -> {(r + 1) % w}[{(local + 1) % 8}] via P2P/IPC")
        lines += [
            f"{pfx}Connected all rings",
            f"{pfx}Connected all trees",
            f"{pfx}threadThresholds 8/8/64 | {w * 8}/8/64 | 512 | 512",
            f"{pfx}24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
            f"{pfx}TUNER/Plugin: Plugin load returned 11 : libnccl-net.so: cannot open shared object file",
            f"{pfx}ncclCommInitRank comm 0x{0x55D3C8A0 + 0x1000 * r:x} rank {r} nranks {w} cudaDev {local} "
            f"nvmlDev {local} busId {0x18000 + 0x10000 * local:x} commId 0x7ac61f03b2e45d19 - Init COMPLETE",
        ]
        return lines

    def training(self) -> None:
        super().training()  # the fixture's sparse lines (rank-0 progress, retried resets, AIS batch lines)
        start = self.t0 + timedelta(seconds=60)
        stall = min((p.stall_at for p in self.inc.plans.values() if p.stall_at), default=start)
        duration = (stall - start).total_seconds()
        lines_wanted = max(1.0, self.nbytes / AVG_LINE_BYTES)
        steps = max(1, int(lines_wanted / (2.1 * self.world)))
        step_s = duration / steps
        for step in range(steps):
            at = start + timedelta(seconds=step * step_s)
            for node in range(self.spec.nodes):
                self._order += 1
                make = functools.partial(self._metrics_block, node, step, at)
                self.out_for(node).lines.append(Line(at, self._order, "", make=make))

    def _metrics_block(self, node: int, step: int, at: datetime) -> str:
        g = self.spec.gpus_per_node
        parts: list[str] = []
        loss = 3.1 - step / 5000
        for local in range(g):
            r = node * g + local
            py = self.py(r)
            timing = 0.48 + ((r * 7 + step) % 11) / 1000
            parts.append(
                f"{py}Epoch 0:  {step * 100 // 10000:>2d}%|          | {step}/10000 [{step // 120:02d}:{step % 60:02d}"
                f"<1:18:12, 2.08it/s, v_num=0, reduced_train_loss={loss + (r % 13) / 1000:.3f}, "
                f"global_step={step}.0, consumed_samples={step * 2 * self.world}.0, train_step_timing in s={timing:.3f}]"
            )
            parts.append(
                f"{py}DEBUG:lhotse.dataset.sampling.dynamic_bucketing: rank {r} bucket {(r + step) % 30} "
                f"took {64 - (r + step) % 9} cuts ({412.5 + (r + step) % 97:.1f}s) from "
                f"ais://train-shards/shard-{(r * 131 + step) % 100000:06d}.tar at {at:%H:%M:%S}"
            )
            if step % 25 == r % 25:
                parts.append(
                    f"{py}/opt/NeMo/nemo/collections/asr/parts/preprocessing/segment.py:312: UserWarning: "
                    f"Audio duration mismatch for cut {r:04d}-{step:06d}; using the manifest value."
                )
            if step % 40 == r % 40:
                parts.append(
                    f"{py}DEBUG:torch.utils.data.dataloader: worker {r % 4} of rank {r} prefetched "
                    f"{2 + step % 3} batches (queue 4/4)"
                )
        return "\n".join(parts)


def generate_realistic(out: Path, ranks: int, nbytes: int, gpus_per_node: int = 8) -> dict[str, Any]:
    """Write the job under ``out/logs`` (one file per node), AIS logs under ``out/ais`` and the truth beside."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec = replace(JobSpec(), nodes=ranks // gpus_per_node, gpus_per_node=gpus_per_node)
    rng = random.Random(spec.seed)
    incident = SCENARIOS["data_stall"](spec, rng)
    renderer = RealisticRenderer(spec, incident, rng, nbytes)
    tags: dict[str, tuple[str, int]] = {}
    for _node, no in sorted(renderer.render().items()):
        for tag, line in _write(logs / no.rel, no.lines, False).items():
            tags[tag] = (no.rel, line)
        no.lines.clear()  # a node's lines are written: free them
    truth = _truth(spec, "data_stall", renderer, tags)
    (out / TRUTH_NAME).write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    ais_gen.write_ais_logs(out / "ais", "data_stall")
    return truth


def realistic_corpus(out: Path, ranks: int, nbytes: int) -> tuple[Path, Path]:
    """(logs dir, ais dir) of the realistic job, regenerated only when the parameters changed."""
    stamp = out / "params.json"
    want = {"ranks": ranks, "bytes": nbytes, "generator": VERSION}
    if (out / "logs").is_dir() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return out / "logs", out / "ais"
    shutil.rmtree(out, ignore_errors=True)
    generate_realistic(out, ranks, nbytes)
    stamp.write_text(json.dumps(want))
    return out / "logs", out / "ais"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "real_1024")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    args = ap.parse_args()
    t = time.perf_counter()
    logs, _ais = realistic_corpus(args.out, args.ranks, args.bytes)
    files = sorted(p for p in logs.iterdir() if p.is_file())
    size = sum(p.stat().st_size for p in files)
    print(f"{len(files)} files, {size / 1e9:.2f} GB, {args.ranks} ranks in {logs} ({time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
