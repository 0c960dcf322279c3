"""``grep_all_ranks``: the tiered search over every rank's log with the ``sort -u`` view (templates, outliers)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

from debug_training_logs.analysis import grep as analysis
from debug_training_logs.analysis.grep import GREP_INVENTORY_MARKERS
from debug_training_logs.analysis.inventory import lean_inventory
from debug_training_logs.models import Coverage, Model
from debug_training_logs.paths import input_dir
from debug_training_logs.tools.budget import Cut
from debug_training_logs.tools.registry import ToolSpec


class _Model(Model):
    model_config = ConfigDict(from_attributes=True)


class Occurrence(_Model):
    """Where a line is, and when it was written."""

    file: str = Field(description="Path relative to logs_dir.")
    line: int = Field(description="1-based line number in the (decompressed) file.")
    time: str | None = Field(
        description="Wall time the line states, ISO 8601 local time of the writing host, second resolution (the "
        "year inferred when the line has none); null when the line states no time."
    )
    text: str | None = Field(description="The line, cut at 300 characters (null where the template shows it).")


class FileCount(_Model):
    """Hits of one pattern in one file."""

    file: str
    count: int = Field(description="Lines matching (like `rg -c` for this pattern).")


class PatternResult(_Model):
    """One pattern's hits across all files."""

    name: str
    tier: int = Field(description="1 process killers, 2 training-loop crashes, 3 data loading / I/O, 0 caller's.")
    regex: str
    meaning: str
    total_hits: int = Field(description="Matching lines over all files.")
    files_with_hits: int
    per_file: list[FileCount] = Field(description="The files with the most hits (bounded).")
    per_file_truncated: int = Field(description="Files with hits not listed in per_file.")
    ranks_with_hits: str = Field(description="Global ranks with at least one matching line (range string).")
    ranks_without_hits: str = Field(description="Ranks seen in the logs with no matching line (range string).")
    unattributed_hits: int = Field(
        description="Matching lines with no rank prefix in files holding several ranks (not in either rank set)."
    )
    first: Occurrence | None = Field(description="The earliest matching line in wall time.")


class Template(_Model):
    """Hit lines that differ only in numbers, times, ranks, PIDs, addresses, paths or hosts (the `sort -u` view)."""

    template: str = Field(description="The line with variable parts masked (<n>, <time>, <hex>, <path>, <r>...).")
    patterns: list[str] = Field(description="Names of the patterns its lines match.")
    count: int = Field(description="Lines with this template.")
    rank_count: int = Field(description="How many ranks log it.")
    ranks: str = Field(description="Which ranks log it (range string).")
    unattributed: int = Field(description="Its lines that could not be attributed to a rank.")
    nodes: list[str] = Field(description="Nodes whose files hold it (bounded).")
    nodes_truncated: int
    first: Occurrence = Field(description="Earliest occurrence in wall time; its text is the example line.")
    last: Occurrence = Field(description="Latest occurrence in wall time (no text: the template shows it).")


class Outlier(_Model):
    """A template that only a few ranks log, or one that a few ranks lack: a single odd rank can be the root cause."""

    kind: str = Field(description="`only_few_ranks` (these ranks alone log it) or `missing_on_few_ranks`.")
    ranks: str = Field(description="The odd ranks: the few that log it, or the few that do not.")
    template: str
    have: int = Field(description="How many ranks log the template.")
    explanation: str
    example: Occurrence = Field(description="Earliest occurrence of the template.")


class ContextBlock(_Model):
    """Lines around the first occurrence of a template."""

    template: str
    file: str
    lines: list[str] = Field(description="'N: text' for each line around the occurrence.")


class GrepAllRanksResult(_Model):
    """Per-pattern totals, templates with rank sets, outlier ranks and first occurrences, over every file."""

    summary: str = Field(description="What a person would say after reading the result.")
    coverage: Coverage
    patterns: list[PatternResult] = Field(description="Patterns with hits, earliest first occurrence first.")
    patterns_without_hits: list[str] = Field(description="Names of the patterns no line matched.")
    templates: list[Template] = Field(description="Templates by tier, then by first occurrence (bounded by limit).")
    templates_truncated: int
    outliers: list[Outlier] = Field(description="Odd ranks, fewest first (bounded by limit).")
    outliers_truncated: int
    context: list[ContextBlock] = Field(description="With context > 0: lines around first occurrences.")
    overflow_lines: int = Field(description="Hit lines not templated because a file had too many distinct templates.")


def grep_all_ranks(
    logs_dir: Annotated[
        str, Field(description="Directory with the workers' stderr/stdout logs (searched recursively).")
    ],
    patterns: Annotated[
        list[str] | None,
        Field(
            description="Regexes (RE2 syntax, searched as written) that replace the default tiered patterns. To name "
            "one, wrap all of it in a named group: `(?P<loader>AISBatchLoaderError)`; unnamed ones are p1, p2, .... "
            "Patterns RE2 cannot run fall back to a backtracking engine with one time budget per search."
        ),
    ] = None,
    tiers: Annotated[
        list[int] | None,
        Field(description="Default tiers to search: 1 process killers, 2 loop crashes, 3 data/IO (default: all)."),
    ] = None,
    ignore_case: Annotated[bool, Field(description="Match case-insensitively.")] = False,
    limit: Annotated[int, Field(ge=1, le=500, description="At most this many entries in each list.")] = 20,
    context: Annotated[
        int, Field(ge=0, le=5, description="Lines of context around the first occurrence of each template listed.")
    ] = 0,
) -> GrepAllRanksResult:
    """Search ALL ranks' logs for the tiered failure patterns (NCCL timeouts, watchdog aborts, signals, CUDA/OOM,
    SLURM cancels, Python exceptions, loader errors, connection resets, retries, timeouts) or your own regexes.

    Returns per-pattern totals with the ranks that hit and did not, the first occurrence in wall time (file:line),
    deduplicated line templates with their rank sets (the `sort -u` view), and outliers: templates only a few ranks
    log, and ranks missing a template every other rank logs. One odd rank is often the whole root cause.
    """
    root = input_dir(logs_dir)
    with lean_inventory(GREP_INVENTORY_MARKERS):
        result = analysis.grep_all_ranks(root, patterns, tiers, ignore_case, limit, context)
    return GrepAllRanksResult.model_validate(result)


def _follow_up(cut: Cut) -> tuple[dict[str, Any], str] | None:
    """Templates or outliers the budget left out: the same search over the tiers they come from, which lists fewer."""
    if cut.field not in ("templates", "outliers") or cut.arguments.get("patterns"):
        return None
    tier_of = {p["name"]: p["tier"] for p in cut.result.get("patterns", [])}
    names = {n for item in cut.omitted_items for n in item.get("patterns", [])}
    if cut.field == "outliers":
        texts = {item["template"] for item in cut.omitted_items}
        names = {n for t in cut.result.get("templates", []) if t["template"] in texts for n in t["patterns"]}
    tiers = sorted({tier_of[n] for n in names if n in tier_of})
    searched = sorted(set(tier_of.values()))
    args = dict(cut.arguments)  # a max_tokens the caller chose stays: the next call is sized for it
    if tiers and tiers != searched:
        nxt = {**args, "tiers": tiers}
        return nxt, (
            f"{cut.total - cut.shown} more {cut.field}, from tier(s) {', '.join(map(str, tiers))}: search only those "
            "tiers (or name patterns) to list them."
        )
    return None  # the generic advice: the max_tokens that shows everything


SPEC = ToolSpec(
    func=grep_all_ranks, cli_name="grep", title="Grep all ranks", positional=("logs_dir",), follow_up=_follow_up
)
