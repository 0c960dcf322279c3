"""The one rank whose words differ where every other rank's agree: a line every rank writes (its config, its shard
of the data, the size it is about to gather) in the same words but one rank.

When the ranks ran different collectives or sizes (gloo received a buffer of another size than it expected), the
report names the rank that received it, not the one whose buffer differed. What each rank said of itself before it
does: ``[r9] eval at step 15: gathering 255 predictions`` where fifteen ranks wrote 256, ``[rank 4] validation shards
[] -> 0 batches`` where four wrote ``[N] -> 4 batches``.

Read from each file's first and last lines (the scan keeps them): the lines a rank's tag names, the message after
the tag. Lines are grouped by their first two words (digits masked); in a group every rank seen wrote, the rank whose
last message differs from one message all the others wrote alike, or, when their messages differ (each rank's own
shard), from one shape (digits masked) all the others share, is the outlier. Tracebacks and the lines at or after
the first line the caller names in a file are not read (the failure's own words differ from rank to rank).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from debug_training_logs.analysis.inventory_types import JobScan
from debug_training_logs.formats.prefixes import GLOBAL_RANK, strip_ansi
from debug_training_logs.logs.attribution import STATED_RANK, rank_and_source_plain

MAX_LINES = 200_000
"""Lines read at most (the first and last lines of every file of a 1,600-file job)."""
MIN_RANKS = 3
"""A group of fewer ranks has no majority to stand out from."""

_DIGITS = re.compile(r"\d+")
_TAGS = re.compile(GLOBAL_RANK.pattern + "|" + STATED_RANK.pattern)
_TRACEBACK = re.compile(r"^\s|^Traceback|^\w*(?:Error|Exception)\b|^File ")


@dataclass(frozen=True)
class RankOutlier:
    """A rank's line that differs from what every other rank wrote in its place."""

    rank: int
    file: str
    line: int
    text: str


def rank_outliers(job: JobScan, ranks: set[int], before: Mapping[str, int]) -> list[RankOutlier]:
    """The outliers among ``ranks`` (every rank seen: a group must hold each of them), from the lines of each file
    before its line ``before[file]`` (its first failure line, when it has one)."""
    if len(ranks) < MIN_RANKS:
        return []
    groups: dict[str, dict[int, tuple[str, int, str, str]]] = defaultdict(dict)
    for rel, no, text in _lines(job, before):
        plain = strip_ansi(text)
        rank, _source = rank_and_source_plain(plain)
        tag = _TAGS.search(plain) if rank is not None else None
        if tag is None or rank is None:
            continue
        message = plain[tag.end() :].strip()
        words = _DIGITS.sub("N", message).split()
        if len(words) < 2 or _TRACEBACK.match(message):
            continue
        groups[" ".join(words[:2])][rank] = (rel, no, text, message)  # the rank's last line of the group
    out: list[RankOutlier] = []
    for per_rank in groups.values():
        if set(per_rank) != ranks:
            continue
        odd = _odd_one(per_rank, lambda m: m)
        if odd is None:
            odd = _odd_one(per_rank, lambda m: _DIGITS.sub("N", m))
        if odd is not None:
            rel, no, text, _m = per_rank[odd]
            out.append(RankOutlier(odd, rel, no, text))
    return sorted(out, key=lambda o: (o.file, o.line))


def _odd_one(per_rank: Mapping[int, tuple[str, int, str, str]], key: Callable[[str], str]) -> int | None:
    """The one rank whose message's ``key`` differs from the one all the others' share."""
    keys = {r: key(v[3]) for r, v in per_rank.items()}
    counts = Counter(keys.values())
    if len(counts) != 2:
        return None
    (common, n), (_rare, m) = counts.most_common()
    if m != 1 or n < MIN_RANKS - 1:
        return None
    return next(r for r, k in keys.items() if k != common)


def _lines(job: JobScan, before: Mapping[str, int]) -> Iterable[tuple[str, int, str]]:
    """(file, line number, text) of each file's first and last lines, before its line ``before[file]``."""
    read = 0
    for s in job.files:
        stop = before.get(s.file.rel)
        for no, text in s.ends():
            if stop is not None and no >= stop:
                break
            yield s.file.rel, no, text
            read += 1
        if read >= MAX_LINES:
            return
