"""Lines in which torch or the trainer names the rank that failed: typed accusations from single lines.

Pure functions over one line of text (never a file). An accusation is an edge of the causal model: the line is a
*report about* another rank (the writer waited for it, compared against it, or was told it failed), so on the writer
it is a consequence, and it points at the accused. What is read, and why:

* ``Rank 1 failed to pass monitoredBarrier in 30000 ms`` / ``Ranks 1, 3 failed to pass monitoredBarrier`` (gloo's
  ``monitored_barrier``, raised on rank 0): the named ranks never reached the barrier.
* A trainer's own words in an error line: ``non-finite loss on rank(s) [1]``, ``check rank 0's log``, ``rank 3 is not
  responding``, ``waiting for rank 5``: the trainer found out (after an all-reduce of a flag, a heartbeat) which rank
  went wrong. Not ``by rank N`` / ``from rank N``: who requested a dump or sent an error is a messenger.
* Never an accusation: the PG-local ``[Rank N]`` / ``[PG x Rank N]`` prefixes of ProcessGroupNCCL lines (the writer
  itself), ``Received a dump signal ... from rank N`` (that rank only timed out first: a victim), a ChildFailedError
  table's ``rank : N (local_rank: L)``, the store barrier's ``on rank N, for key`` (the writer), a DETAIL mismatch
  report (read whole by :mod:`~debug_training_logs.formats.gloo`: both sides' fingerprints, not one name).

An accusation counts only in an error line (an exception, an ERROR/CRITICAL/WARNING level, or the failure words that
carry it), so that progress lines naming ranks (``rank 3 step 120 loss 2.1``) never accuse anyone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

NEEDLES: Final[tuple[str, ...]] = ("failed to pass monitoredBarrier",)
"""Literals of torch's own accusations (named data: a scan compiles them)."""

REGEX: Final = (
    r"failed to pass monitoredBarrier"
    r"|on rank|On rank|check rank|Check rank|for rank|at rank"
    r"|(?:of rank|Of rank)s? ?[\[(]? ?\d+[\])]?(?:[.,;:!)'\]]|$)"
    r"|(?i:rank)s? ?[\[(]? ?\d+(?: ?, ?\d+)*[\])]?(?:'s | failed| crashed| died| hung| hangs| is stuck| is hanging"
    r"| did not| didn't| has not| hasn't| is not responding| stopped| exited| timed out| was killed| produced"
    r"| returned| reported| went)"
)
"""RE2 syntax, anywhere in a line: the candidates :func:`parse_line` reads (most candidate lines are not accusations;
the parser decides). Written so that every branch has a literal the scan's prefilter can look for (``on rank``,
`` died``...), spelt out (a case-folded literal is searched for by the part of it case does not change, as short as
``f `` or ``'``), at most 32 of them: a pattern without one for every branch, or with more branches, costs a DFA pass
over every byte of every file. The parser reads the line case-insensitively.
``of rank N`` only ends a clause (``... the gradients of rank 3.``): in the middle of one it is a description
(``worker 0 of rank 0 prefetched 2 batches``), and such lines are frequent."""

AccusationHow = Literal["monitored_barrier", "trainer"]


@dataclass(frozen=True, repr=False)
class Accused:
    """The ranks a line names as the failing ones, and how it names them."""

    ranks: frozenset[int]
    how: AccusationHow


_MONITORED = re.compile(r"\bRanks? (?P<ranks>\d+(?:\s*,\s*\d+)*) failed to pass monitoredBarrier")
_RANKS = r"(?P<ranks>\d+(?:\s*(?:,|and)\s*\d+)*)"
_TRAINER = (
    re.compile(
        r"\b(?:on|of|check|for|at)\s+ranks?(?:\(s\))?\s*[:=#]?\s*[\[(]?\s*" + _RANKS + r"\s*[\])]?",
        re.IGNORECASE,
    ),
    re.compile(r"\branks?\s*[\[(]?\s*" + _RANKS + r"\s*[\])]?'s\b", re.IGNORECASE),
    re.compile(
        r"\branks?\s*[\[(]?\s*"
        + _RANKS
        + r"\s*[\])]?\s+(?:failed|crashed|died|hung|hangs|is stuck|is hanging|did not|didn't|has not|hasn't"
        r"|is not responding|stopped|exited|timed out|was killed|produced|returned|reported|went)\b",
        re.IGNORECASE,
    ),
)
# the failure words that make a line an error report (besides an exception name or a level)
_ERROR_CONTEXT = re.compile(
    r"(?:[A-Z]\w*(?:Error|Exception)\b|\b(?:ERROR|CRITICAL|FATAL|WARN(?:ING)?)\b|\b[EFW]\d{4} "
    r"|non-finite|\bnan\b|\binf\b|\bfail|\bcrash|\bdied\b|\bdead\b|\bhung\b|\bhang|\bstuck\b|\btimed out\b"
    r"|\btimeout\b|not responding|\bmismatch|\babort|\bkilled\b|\bcheck rank)",
    re.IGNORECASE,
)
_NOT_ACCUSING = re.compile(
    r"dump signal|is running collective|Detected mismatch between collectives|\(local_rank: |local_rank[:=]"
    r"|successfully reached monitoredBarrier"
    r"|store based barrier on rank|for key: |global rank \d+ |\bnranks\b|Rank \d+ is connected to"
    r"|ranks? \d+ (?:started|initialized|joined|connected|is ready|ready)",
    re.IGNORECASE,
)
# a writer's own rank label, PG-local or prefixed: never the accused
_SELF_LABELS = re.compile(r"\[(?:PG [^\]]*?)?Rank \d+\]|\[rank\d+\]:?|\[rank: ?\d+\]|\brank=\d+\b|\"rank\": ?\d+")
MAX_ACCUSED = 64
"""A line naming more ranks than this is a listing, not an accusation."""


def parse_line(line: str) -> Accused | None:
    """The ranks ``line`` names as the failing ones, else None (see the module docstring for what counts)."""
    if "monitoredBarrier" in line and (m := _MONITORED.search(line)):
        return Accused(_ranks(m.group("ranks")), "monitored_barrier")
    if _NOT_ACCUSING.search(line):
        return None
    text = _SELF_LABELS.sub(" ", line)
    if not _ERROR_CONTEXT.search(text):
        return None
    found: set[int] = set()
    for rx in _TRAINER:
        for m in rx.finditer(text):
            found |= _ranks(m.group("ranks"))
    if not found or len(found) > MAX_ACCUSED:
        return None
    return Accused(frozenset(found), "trainer")


def _ranks(text: str) -> frozenset[int]:
    return frozenset(int(x) for x in re.findall(r"\d+", text) if len(x) <= 7)
