"""``job_overview``: the inventory of a worker-log directory (files, nodes, ranks, world size, framework, versions).

At thousands of ranks the per-file list is summarised: ``file_groups`` says in a few rows what the files are like
(same rank source, compression and number of ranks per file), ``files`` lists the odd ones first (no ranks, a
different rank count), and ``offset``/``limit`` page through every file.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from debug_training_logs.analysis import attempts, launcher
from debug_training_logs.analysis.inventory import scan_consumers
from debug_training_logs.analysis.inventory_markers import MARKERS
from debug_training_logs.analysis.inventory_types import Inventory, TimePoint, time_text
from debug_training_logs.logs.sources import hang_roots
from debug_training_logs.models import Coverage, Model
from debug_training_logs.paths import input_dir
from debug_training_logs.ranges import format_ranges
from debug_training_logs.tools.attempts_view import AttemptSummary, summaries
from debug_training_logs.tools.budget import Cut
from debug_training_logs.tools.params import HangDir

if TYPE_CHECKING:
    from debug_training_logs.analysis.hang_facts import HangFacts, ProcessState
from debug_training_logs.tools.registry import ToolSpec
from debug_training_logs.tools.shared_results import keep_attempts

# Which torch versions each message family proves (worker_log_formats.md §1.9).
_FAMILY_VERSIONS = {
    "fam_old_watchdog": "torch <= 2.2 ('NCCL watchdog thread terminated')",
    "fam_c10_rank": "torch 2.2-2.3 ([rankN]:[E file:line] header without time)",
    "fam_c10_time": "torch 2.4+ ([rankN]:[E MMDD HH:MM:SS.ns file:line] header)",
    "fam_2_3_timeout_at": "torch 2.3-2.5 ('Timeout at NCCL work')",
    "fam_2_4_exception": "torch 2.4-2.5 ('Exception (either an error or timeout) detected by watchdog')",
    "fam_pg_guid": "torch 2.5-2.14 ('[PG ID n PG GUID g' prefix)",
    "fam_2_6_failure": "torch 2.6+ (' failure detected by watchdog at work sequence id')",
}
_FRAMEWORKS = {
    "nemo": "NeMo",
    "megatron": "Megatron-LM",
    "megatron_iteration": "Megatron-LM",
    "lightning": "Lightning",
    "ray": "Ray",
}
_DATA_SOURCES = {"aistore": "AIStore", "lhotse": "Lhotse"}


class FileEntry(Model):
    """One log file."""

    file: str = Field(description="Path relative to logs_dir.")
    bytes: int = Field(description="Size on disk in bytes (compressed size for compressed files).")
    compression: str = Field(description="none, gzip, zstd, bz2 or xz.")
    lines: int = Field(description="Lines read (decompressed).")
    ranks: str = Field(description="Global ranks whose lines are in this file (range string); '' when unknown.")
    rank_source: str = Field(description="How the ranks were attributed ([rankN]: prefixes, file name, ...).")
    node: str | None = Field(description="Host name or node index of the file, when the logs say.")


class FileGroup(Model):
    """Files alike: the same rank source, compression and number of ranks per file."""

    count: int = Field(description="Files in the group.")
    ranks_per_file: int = Field(description="Global ranks in each file (0: none attributed).")
    rank_source: str
    compression: str
    ranks: str = Field(description="Every rank the group's files hold (range string).")
    bytes: int = Field(description="Their total size on disk in bytes.")
    lines: int = Field(description="Their total lines.")
    example: str = Field(description="The group's first file (path relative to logs_dir).")


class Hint(Model):
    """A fact with the line that shows it."""

    name: str = Field(description="What was detected (a framework, a version family, a data source).")
    lines: int = Field(description='Lines that show it (counting stops at 20 per file: read as "at least").')
    evidence: str = Field(description="file:line and the text of the first line that shows it.")


class TimeAt(Model):
    """A time as the logs write it (no zone: worker logs do not say), with where."""

    time: str = Field(
        description="ISO 8601 local time of the writing host; the year is inferred when the line has none."
    )
    file: str
    line: int
    text: str


class StackGroup(Model):
    """Dumped processes in the same state (the same call, at the same place)."""

    state: str = Field(description="Where they were: 'waiting in all_reduce at train.py:69', 'stuck in data loading'.")
    ranks: str = Field(description="Their global ranks as ranges ('' when no line ties them to a rank).")
    processes: int
    example: str = Field(description="One of them, file:line of its dump.")


class HangArtifacts(Model):
    """What was collected during a live hang (py-spy dumps, NCCL RAS, nvidia-smi, kernel logs) and what it shows."""

    files: str = Field(description="The artifact files read, by kind, and any problem reading them.")
    stacks: list[StackGroup] = Field(description="Dumped worker processes grouped by state, the odd ones first.")
    stacks_truncated: int = Field(default=0, description="Groups not listed (by `limit`).")
    gpu_failures: list[str] = Field(default_factory=list, description="Broken GPUs of this job, file:line and rank.")
    notes: list[str] = Field(default_factory=list, description="What was set aside, and why.")


class JobOverview(Model):
    """What the logs say about the job: read this first, then search (grep_all_ranks) and compare ranks (nccl)."""

    summary: str = Field(description="One paragraph a person would say after reading the inventory.")
    coverage: Coverage
    files: list[FileEntry] = Field(
        description="Per file, up to `limit` from `offset`: files without ranks first, then files unlike the largest "
        "group, then files less than half or more than twice the median size, then the rest by name."
    )
    files_truncated: int = Field(description="Files not listed (by `offset`/`limit` or the budget).")
    file_groups: list[FileGroup] = Field(
        default_factory=list, description="All files in a few rows: alike files grouped, largest group first."
    )
    nodes: list[str] = Field(description="Host names seen (NCCL lines, torchrun failure tables, srun errors).")
    nodes_total: int = Field(default=0, description="Host names seen in all (`nodes` lists up to `limit`).")
    framework: list[Hint] = Field(
        description="NeMo / Megatron-LM / Lightning / Ray / plain PyTorch (torch.distributed lines, no framework "
        "marker) / unknown (no file, or nothing that shows the framework)."
    )
    torch_version_hints: list[Hint] = Field(description="Message families seen and the torch versions they imply.")
    torch_versions_stated: list[str] = Field(description="Torch versions a line states explicitly.")
    nccl_versions: list[str] = Field(description="NCCL library versions from 'NCCL version x.y.z' lines.")
    job_start: TimeAt | None = Field(description="Earliest wall-clock time at the start of any file.")
    job_end: TimeAt | None = Field(description="Latest wall-clock time at the end of any file.")
    data_sources: list[Hint] = Field(description="AIStore, Lhotse, or none seen (local files).")
    slurm: bool = Field(description="Whether SLURM (srun/slurmstepd) lines appear.")
    attempts: list[AttemptSummary] = Field(
        default_factory=list,
        description="Runs of the workers when the job restarted (torchrun --max-restarts, attempt_N dirs, new "
        "rendezvous): ranks, times and outcome each; one entry when nothing shows a restart.",
    )
    torchrun_agents: int = Field(
        default=0, description="torchrun agents (one per node) whose own lines were read, told apart by PID."
    )
    benign_lines: dict[str, int] = Field(
        default_factory=dict,
        description="Lines every healthy torch job writes that read like failures (c10d IPv6 fallbacks, store peers "
        "closing, the OMP banner), by name and count: not failures.",
    )
    hang_artifacts: HangArtifacts | None = Field(
        default=None,
        description="What was collected during a live hang (in/next to logs_dir or in hang_dir), when anything was.",
    )


def _hint(inv: Inventory, marker: str, name: str) -> Hint | None:
    n = inv.markers.get(marker, 0)
    if not n:
        return None
    rel, line, text = inv.marker_examples[marker]
    return Hint(name=name, lines=n, evidence=f"{rel}:{line}: {text}")


def _time_at(tp: TimePoint | None, inv: Inventory) -> TimeAt | None:
    text = time_text(tp, inv.year_hint)
    if tp is None or text is None:
        return None
    return TimeAt(time=text, file=tp.file, line=tp.line, text=tp.text)


def build_overview(inv: Inventory, coverage: Coverage, limit: int, offset: int = 0) -> JobOverview:
    """The overview model from an inventory (shared with ``diagnose``)."""
    frameworks: list[Hint] = []
    for m, name in _FRAMEWORKS.items():
        h = _hint(inv, m, name)
        if h is not None and name not in {f.name for f in frameworks}:
            frameworks.append(h)
    families = [h for m, name in _FAMILY_VERSIONS.items() if (h := _hint(inv, m, name)) is not None]
    if not frameworks and not inv.files:
        frameworks = [Hint(name="unknown", lines=0, evidence="no log file was read")]
    elif not frameworks and (inv.ranks or families or inv.torch_versions or inv.nccl_versions):
        frameworks = [Hint(name="plain PyTorch", lines=0, evidence="no NeMo/Megatron/Lightning/Ray markers seen")]
    elif not frameworks:
        frameworks = [
            Hint(name="unknown", lines=0, evidence="no framework, torch.distributed or NCCL line seen in the files")
        ]
    sources = [h for m, name in _DATA_SOURCES.items() if (h := _hint(inv, m, name)) is not None]
    groups, group_of = _file_groups(inv)
    largest = (groups[0].ranks_per_file, groups[0].rank_source, groups[0].compression) if groups else None
    sizes = sorted(f.size for f in inv.files)
    median = sizes[len(sizes) // 2] if sizes else 0

    def odd_size(size: int) -> bool:
        return median > 0 and not median / 2 <= size <= median * 2

    entries = sorted(
        inv.files,
        key=lambda f: (bool(f.ranks), group_of[f.rel] == largest, not odd_size(f.size), _natural(f.rel)),
    )
    files = [
        FileEntry(
            file=f.rel,
            bytes=f.size,
            compression=f.compression,
            lines=f.lines,
            ranks=format_ranges(f.ranks),
            rank_source=f.rank_source,
            node=f.node,
        )
        for f in entries[offset : offset + limit]
    ]
    start, end = _time_at(inv.start, inv), _time_at(inv.end, inv)
    fw = "/".join(h.name for h in frameworks)
    ws = str(coverage.world_size) if coverage.world_size is not None else "unknown"
    parts = [
        f"{coverage.files_scanned} files ({coverage.bytes_scanned:,} bytes) from {len(inv.nodes) or 'unknown'} nodes;",
        f"ranks {coverage.ranks_found or 'none attributed'} of world size {ws}",
        f"({coverage.world_size_evidence}).",
    ]
    if coverage.missing_ranks:
        parts.append(f"MISSING ranks {coverage.missing_ranks}: ask for every node's log file before naming a culprit.")
    parts.append(f"Framework: {fw}.")
    if families:
        parts.append("Watchdog messages: " + "; ".join(h.name for h in families) + ".")
    if sources:
        parts.append("Data: " + ", ".join(h.name for h in sources) + ".")
    if start and end:
        parts.append(f"Logs span {start.time} to {end.time} (local time, zone not stated).")
    if coverage.unreadable_files:
        parts.append(f"{len(coverage.unreadable_files)} file(s) unreadable or skipped (see coverage).")
    return JobOverview(
        summary=" ".join(parts),
        coverage=coverage,
        files=files,
        files_truncated=len(entries) - len(files),
        file_groups=groups,
        nodes=inv.nodes[:limit],
        nodes_total=len(inv.nodes),
        framework=frameworks,
        torch_version_hints=families,
        torch_versions_stated=inv.torch_versions,
        nccl_versions=inv.nccl_versions,
        job_start=start,
        job_end=end,
        data_sources=sources,
        slurm=bool(inv.markers.get("slurm")),
    )


def _natural(name: str) -> list[Any]:
    """Sort key that puts error-2.out before error-10.out."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _file_groups(inv: Inventory) -> tuple[list[FileGroup], dict[str, tuple[int, str, str]]]:
    """Files grouped by (ranks per file, rank source, compression), largest group first; and each file's group."""
    members: dict[tuple[int, str, str], list[Any]] = defaultdict(list)
    group_of: dict[str, tuple[int, str, str]] = {}
    for f in sorted(inv.files, key=lambda f: f.rel):
        key = (len(f.ranks), f.rank_source, f.compression)
        members[key].append(f)
        group_of[f.rel] = key
    groups = [
        FileGroup(
            count=len(fs),
            ranks_per_file=key[0],
            rank_source=key[1],
            compression=key[2],
            ranks=format_ranges(r for f in fs for r in f.ranks),
            bytes=sum(f.size for f in fs),
            lines=sum(f.lines for f in fs),
            example=fs[0].rel,
        )
        for key, fs in sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    return groups, group_of


def job_overview(
    logs_dir: Annotated[
        str, Field(description="Directory with the workers' stderr/stdout logs (searched recursively).")
    ],
    limit: Annotated[int, Field(ge=1, le=10000, description="At most this many files (and nodes) listed.")] = 20,
    offset: Annotated[int, Field(ge=0, description="List files from this index on (to page through them).")] = 0,
    hang_dir: HangDir = None,
) -> JobOverview:
    """Inventory of a training job's log directory: files, nodes, which global ranks each file holds, the world size
    and the line that proves it, missing ranks, framework (NeMo/Megatron/Lightning/Ray/PyTorch), torch version hints
    from the watchdog message families, NCCL version, job start/end as written, and the data source (AIStore/Lhotse).

    Call it first on any failed job: it tells you whether you have every rank's logs (if `coverage.missing_ranks` is
    not empty, ask the user for the missing node files before naming a culprit).

    `file_groups` sums up every file in a few rows; `files` lists the odd ones first, `offset` pages through all.
    """
    root = input_dir(logs_dir)
    lc = attempts.launcher_consumer()  # one scan: inventory and launcher facts (the attempt split's own consumer)
    job = scan_consumers(root, [lc])[lc.key]
    overview = build_overview(job.inventory, job.coverage(), limit, offset)
    facts = launcher.from_job_scan(job)
    split = attempts.split_files(job.log_files(), facts)
    keep_attempts(root, split)
    overview.attempts = summaries(split, limit)
    overview.benign_lines = facts.benign
    overview.torchrun_agents = facts.agent_count()
    shared = [a for a in facts.agents if len(a.pids) > 1]
    if overview.torchrun_agents:
        overview.summary += f" {overview.torchrun_agents} torchrun agent(s) (one per node) wrote to these logs" + (
            f"; {shared[0].file} holds {len(shared[0].pids)} agents' output (several nodes in one file)."
            if shared
            else "."
        )
    if split.count > 1:
        each = "; ".join(f"{a.index} {a.outcome}" for a in split.attempts[:6])
        overview.summary += f" {split.count} attempts ({split.method}): {each}."
    from debug_training_logs.analysis.hang_facts import of_job  # the stack and telemetry readers: only now

    hang_root = input_dir(hang_dir, "hang directory") if hang_dir else None
    hang = of_job(job, hang_roots(job.root.parent, hang_root, not_named=job.root.name), hang_root)
    if hang is not None:
        overview.hang_artifacts = _hang_view(hang, limit)
        overview.summary += f" Hang artifacts: {hang.describe()}."
    return overview


def _hang_view(hang: HangFacts, limit: int) -> HangArtifacts:
    groups: dict[str, list[ProcessState]] = defaultdict(list)
    for p in hang.processes:
        groups[p.state.words()].append(p)
    rows = sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[0]))  # the odd ones first
    stacks = [
        StackGroup(
            state=state,
            ranks=format_ranges({p.rank for p in ps if p.rank is not None}),
            processes=len(ps),
            example=ps[0].cite(),
        )
        for state, ps in rows[:limit]
    ]
    broken = [
        f"{g.file}:{g.line_no}: {g.what}" + (f" (rank {g.rank}, by {g.mapped_by})" if g.rank is not None else "")
        for g in hang.gpu_failures[:limit]
    ]
    return HangArtifacts(
        files=hang.describe(),
        stacks=stacks,
        stacks_truncated=max(0, len(rows) - limit),
        gpu_failures=broken,
        notes=hang.notes[:limit],
    )


def _follow_up(cut: Cut) -> tuple[dict[str, Any], str] | None:
    """Files the budget left out: the next page."""
    if cut.field != "files":
        return None
    args = dict(cut.arguments)  # a max_tokens the caller chose stays: the page size was fitted to it
    nxt = {**args, "offset": int(args.get("offset", 0)) + cut.shown, "limit": max(1, cut.shown)}
    return nxt, f"{cut.total - cut.shown} more files on this page: page on with offset={nxt['offset']}."


SPEC = ToolSpec(
    func=job_overview, cli_name="overview", title="Job overview", positional=("logs_dir",), follow_up=_follow_up
)

assert {m.name for m in MARKERS} >= set(_FAMILY_VERSIONS) | set(_FRAMEWORKS) | set(_DATA_SOURCES)
