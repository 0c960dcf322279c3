"""The training script that ``make_real_torch_fixtures.py`` runs under real ``torchrun`` (CPU, gloo).

A tiny model trained for a few steps with a real ``DataLoader`` and one ``all_reduce`` per step, so that every
failure shape happens inside real torch code paths. The shape and the faulty rank come from the environment:

- ``FIX_SHAPE``: clean, loader_exception, stall, sigkill, mismatch, restart, restart_exhausted
- ``FIX_FAULT_RANK``: the global rank that misbehaves (the truth of the fixture)
- ``FIX_FAULT_STEP``: the step at which it does
- ``FIX_TIMEOUT_S``: the process-group timeout (seconds; tiny so runs are fast)
- ``FIX_FR_DIR``: when set, every rank dumps its flight recorder there (``<prefix><rank>``) from a timer thread while
  the others wait in the hung collective, as torch's own dump-on-timeout would for NCCL
- ``FIX_FR_FORMAT``: ``pickle`` (default) or ``json``
- ``FIX_LOG_STYLE``: ``inline`` puts ``[rankN]`` after the time inside each line (a common user format), ``plain``
  uses ``print`` only

This file needs torch; it is never imported by the package or its tests.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

SHAPE = os.environ.get("FIX_SHAPE", "clean")
FAULT_RANK = int(os.environ.get("FIX_FAULT_RANK", "-1"))
FAULT_STEP = int(os.environ.get("FIX_FAULT_STEP", "3"))
TIMEOUT_S = float(os.environ.get("FIX_TIMEOUT_S", "4"))
STEPS = int(os.environ.get("FIX_STEPS", "6"))
BATCH = 4


class ShardDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Synthetic samples; the faulty rank's shard misbehaves at the fault step's first sample."""

    def __init__(self, rank: int, restart_count: int) -> None:
        self.rank = rank
        self.restart_count = restart_count
        self.gen = torch.Generator().manual_seed(1234 + rank)
        self.x = torch.randn(STEPS * BATCH, 8, generator=self.gen)
        self.y = torch.randn(STEPS * BATCH, 1, generator=self.gen)

    def __len__(self) -> int:
        return STEPS * BATCH

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rank == FAULT_RANK and idx == FAULT_STEP * BATCH:
            crash_now = SHAPE == "loader_exception" or (SHAPE == "restart" and self.restart_count == 0)
            if crash_now or SHAPE == "restart_exhausted":
                raise ValueError(f"corrupt sample {idx} in shard-{self.rank:05d}.tar: truncated record header")
            if SHAPE == "stall":
                # a read that never returns (a hung storage mount); far longer than the process-group timeout
                time.sleep(TIMEOUT_S * 12)
        return self.x[idx], self.y[idx]


def dump_flight_recorder(rank: int, directory: str, fmt: str) -> None:
    """Write this rank's flight-recorder buffer where torch's dump would (prefix + global rank)."""
    c10d = torch._C._distributed_c10d  # type: ignore[attr-defined]
    if fmt == "json":
        text = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
        data = text.encode() if isinstance(text, str) else text
    else:
        data = c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False)
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "comm_lib_trace_rank_")
    name = os.path.join(directory, os.path.basename(prefix) + str(rank))
    with open(name + ".tmp", "wb") as f:
        f.write(data)
    os.replace(name + ".tmp", name)
    log(f"flight recorder dumped to {name} ({len(data)} bytes)")


_rank = int(os.environ.get("RANK", "0"))


def log(msg: str, level: int = logging.INFO) -> None:
    if os.environ.get("FIX_LOG_STYLE", "inline") == "plain":
        print(msg, flush=True)
    else:
        logging.getLogger("train").log(level, msg)


def main() -> int:
    rank = _rank
    world = int(os.environ["WORLD_SIZE"])
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    # what many training scripts print first (torchrun's env: WORLD_SIZE, LOCAL_RANK, TORCHELASTIC_RESTART_COUNT)
    log(f"host={os.uname().nodename} local_rank={os.environ.get('LOCAL_RANK')} world_size={world} "
        f"restart_count={restart_count} torch={torch.__version__}")  # fmt: skip
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    log(f"process group ready: backend gloo, timeout {TIMEOUT_S:g}s")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(ShardDataset(rank, restart_count), batch_size=BATCH, num_workers=1, shuffle=False)
    fr_dir = os.environ.get("FIX_FR_DIR")
    for step, (x, y) in enumerate(loader):
        if fr_dir and step == FAULT_STEP - 1:
            # the others reach the hung collective within a second; dump before their timeout ends it
            t = threading.Timer(
                TIMEOUT_S * 0.6, dump_flight_recorder, (rank, fr_dir, os.environ.get("FIX_FR_FORMAT", "pickle"))
            )
            t.daemon = True
            t.start()
        if SHAPE == "sigkill" and rank == FAULT_RANK and step == FAULT_STEP:
            log(f"step {step}: materialising activation cache ({48 * 2**30} bytes)")
            os.kill(os.getpid(), signal.SIGKILL)  # what the kernel OOM killer does: no Python, no traceback
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if SHAPE == "mismatch" and rank == FAULT_RANK and step == FAULT_STEP:
            # a code path only this rank takes: a broadcast where the others all-reduce
            dist.broadcast(model.weight.grad, src=0)
        else:
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        log(f"step {step} loss {loss.item():.4f}")
        time.sleep(0.2)
    dist.barrier()
    log("training complete")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
