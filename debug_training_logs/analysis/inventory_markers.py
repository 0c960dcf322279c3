"""The inventory's own scan patterns: each :class:`Marker` (a named pattern, what a hit means, how many hits per
file are delivered) and the tuple :data:`MARKERS` every job scan searches beside its consumers' patterns."""

from __future__ import annotations

from dataclasses import dataclass

from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats.prefixes import AGENT_HEADER

RANK_STATEMENTS_PER_FILE = 512
"""Rank-stating lines read per file: enough to meet every rank a node's file holds (each states its rank from its
first lines on), bounded for files where every line does."""
PRESENCE_CAP = 20
"""Hits per file after which a presence-only marker stops being searched: ``(?i:lhotse)`` can match a quarter of all
lines, and a Python call per hit line would dominate the pass. Its count then reads "at least"."""


@dataclass(frozen=True, repr=False, eq=False)
class Marker:
    """A named pattern the inventory looks for, and what a hit means."""

    name: str
    regex: str
    meaning: str
    cap: int | None = PRESENCE_CAP
    """Hits per file delivered (None: every hit, for markers whose every line carries a fact such as a rank)."""
    dense: bool = False
    """Lines that occur once per step per rank (progress, metrics): sampled by the scan, never one call per line
    (see :attr:`~debug_training_logs.logs.scan.PatternSpec.dense`)."""


# The inventory's own patterns (named data; order does not matter).
MARKERS: tuple[Marker, ...] = (
    Marker("nccl_init", r"NCCL INFO .*\brank \d+ nranks \d+", "NCCL communicator init: comm rank and size", cap=None),
    Marker("nccl_version", r"NCCL version \d+\.\d+\.\d+", "NCCL library version"),
    Marker(
        "lightning_member",
        r"MEMBER: \d+/\d+",
        "Lightning 'Initializing distributed: GLOBAL_RANK: r, MEMBER: m/N'",
        cap=None,
    ),
    Marker(
        "world_size_kv",
        r"(?:^|[^\w])(?:world_size|world size|World size|World Size|WORLD_SIZE)(?:\s*[=:]\s*| \.+ | (?:of )?)\d+\b"
        r"|(?:^|[(\s,;])world ?[=:] ?\d+\b",
        "a line stating the world size (not torchrun's group_world_size/local_world_size: nodes, ranks per node)",
        cap=None,
    ),
    Marker(
        "world_size_launcher",
        r"global_world_sizes=\[\d+|SLURM_NTASKS=\d+|SLURM_NPROCS=\d+",
        "launcher env: torchrun's global_world_sizes, SLURM's task count",
        cap=None,
    ),
    Marker(
        "default_pg_size",
        r"ProcessGroupNCCL initialization options: .*size: \d+",
        "torch's ProcessGroupNCCL init line (its size is the world size for PG 0 / default_pg)",
        cap=None,
    ),
    Marker("child_failed", r"ChildFailedError|\(local_rank: \d+\)", "torchrun failure table", cap=None),
    Marker(
        "launcher_line",
        rf"^{AGENT_HEADER}\d+ torch/distributed/|^(?:INFO|WARNING|ERROR):torch\.distributed\."
        r"|^srun: |^slurmstepd: ",
        "a launcher's own line (torchrun's agent, srun, slurmstepd): the file is (also) a launcher's",
    ),
    Marker(
        "rank_statement",
        r"\[default\d+\]:\[rank\d+\]:|\"rank\": ?\d|\[rank \d|\[rank: \d|\brank[ =:]\d+ of \d"
        r"|\b(?:RANK|global_rank|global rank)[ =:]+\d|\brank=\d+ \||\brank=\d+ [^\n]{0,80}\bworld_size=\d|"
        + tn.DEFAULT_PG_RANK.pattern,
        "a line stating the writer's global rank (a torch prefix, a trainer's format): names the file's ranks and, "
        "beside torchrun's --tee prefix, maps its local ranks to global ones",
        cap=RANK_STATEMENTS_PER_FILE,
    ),
    Marker("nemo", r"\[NeMo [IWEDC] \d{4}-", "NeMo logger line"),
    Marker("megatron", r"Megatron|megatron|MEGATRON", "Megatron-LM named"),
    # Kept apart from "megatron": in one alternation the two literals made the scan plan fall back to a slow path.
    Marker("megatron_iteration", r" iteration +\d+/ *\d+ \|", "Megatron-LM training_log iteration line"),
    Marker(
        "lightning",
        r"pytorch_lightning|lightning\.pytorch|lightning\.fabric|LOCAL_RANK: \d+ - CUDA_VISIBLE",
        "Lightning",
    ),
    Marker("ray", r"\([\w.]*(?:\[rank=\d+\])? ?pid=\d+, ip=", "Ray actor prefix"),
    Marker("lhotse", r"lhotse|Lhotse", "Lhotse data loading"),
    Marker("aistore", r"AIStore|aistore|AISBatchLoader|ais://", "AIStore as data source"),
    Marker(
        "torch_version",
        r"(?:torch|Torch|PyTorch)(?: version|_version|==)[=: ]*v?2\.\d+",
        "a line stating the torch version",
    ),
    Marker("fam_2_3_timeout_at", r"Timeout at NCCL work: \d+", "torch 2.3-2.5 status line"),
    Marker("fam_2_4_exception", r"Exception \(either an error or timeout\) detected by watchdog", "torch 2.4-2.5"),
    Marker("fam_2_6_failure", r" failure detected by watchdog at work sequence id", "torch 2.6+ status line"),
    Marker("fam_pg_guid", r"\[PG ID \d+ PG GUID ", "torch 2.5+ PG prefix"),
    Marker("fam_c10_time", r"\[rank\d+\]:\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{9} ", "torch 2.4+ c10 header"),
    Marker("fam_c10_rank", r"\[rank\d+\]:\[[FEWIV] \w+\.cpp:\d+\] ", "torch 2.2-2.3 c10 header"),
    Marker("fam_old_watchdog", r"NCCL watchdog thread terminated with exception", "torch <= 2.2 wording"),
    Marker("slurm", r"slurmstepd: |srun: |\*\*\* (?:STEP|JOB) \d+", "SLURM"),
)
