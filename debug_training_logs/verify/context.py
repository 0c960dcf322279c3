"""What every rule reads: the conclusion, the evidence re-derived from the logs, and the cited lines read back.

Cited lines are read from the files once (:func:`build_context`), whatever the number of rules that look at them, and
their times come from the files, never from the conclusion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from debug_training_logs.analysis.evidence_ais import ais_to_worker, aligned_for
from debug_training_logs.analysis.evidence_triggers import CLOCK_SLACK, first_symptom, triggers
from debug_training_logs.analysis.evidence_types import JobEvidence, KeyEvent, Trigger
from debug_training_logs.analysis.read_back import LineAt, read_ais_lines, read_lines, safe_path
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.models import Evidence
from debug_training_logs.textcut import cut
from debug_training_logs.verify.models import Check, CheckStatus, Conclusion

MAX_EVIDENCE = 8
"""Lines listed per check; more are counted in ``evidence_truncated``."""
SLACK = CLOCK_SLACK


@dataclass(repr=False, eq=False)
class Cited:
    """One line the conclusion cites, as the file has it."""

    role: str
    """``root_cause_event``, ``chain[i]`` or ``evidence[i]``."""
    file: str
    line: int
    text: str | None
    """The cited text (chain steps cite no text)."""
    claimed_time: str | None
    source: str | None
    """``worker`` (under logs_dir), ``ais`` (under ais_dir), ``hang`` (a hang artifact beside the logs) or None
    (found in none)."""
    actual: LineAt | None = None
    daemon: str | None = None
    """For AIS lines: the daemon that wrote the file."""
    earliest: datetime | None = None
    """Worker-clock bounds of when the line was written (AIS lines only through a verified alignment)."""
    latest: datetime | None = None
    rank: int | None = None
    """The global rank that wrote the line, when known (``[rankN]:`` prefix or a single-rank file)."""

    @property
    def exists(self) -> bool:
        return self.actual is not None and self.actual.text is not None

    def cite(self) -> Evidence:
        text = self.actual.text if self.actual is not None and self.actual.text is not None else (self.text or "")
        return Evidence(file=self.file, line=self.line, text=cut(text))

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(repr=False, eq=False)
class RuleContext:
    """The conclusion and everything the rules check it against."""

    conclusion: Conclusion
    ev: JobEvidence
    logs_root: Path
    ais_root: Path | None
    cited: list[Cited]
    trig: list[Trigger] = field(default_factory=list)
    symptom: KeyEvent | None = None

    @property
    def culprits(self) -> set[int]:
        """The ranks the conclusion blames: its culprits, or for a provisional conclusion (a subset of the ranks
        read) the suspects it points at."""
        c = self.conclusion
        if c.provisional and not c.culprit_ranks:
            return set(c.suspect_ranks)
        return set(c.culprit_ranks)

    @property
    def category(self) -> str:
        return self.conclusion.category

    @property
    def root(self) -> Cited | None:
        return next((c for c in self.cited if c.role == "root_cause_event"), None)

    @property
    def chain(self) -> list[Cited]:
        return [c for c in self.cited if c.role.startswith("chain")]

    @property
    def start(self) -> datetime | None:
        """When the stuck collective started (worker clock): NCCL's table, else the gloo timeouts minus their wait."""
        from debug_training_logs.analysis.causal import causal_model, collective_start

        return collective_start(self.ev, causal_model(self.ev).fates)

    @property
    def symptom_time(self) -> datetime | None:
        return self.symptom.time if self.symptom is not None else None


def _rank_of_line(ev: JobEvidence, file: str, text: str | None) -> int | None:
    """The rank of a cited line, attributed exactly as the evidence scan attributes lines (``[rankN]:``, srun
    ``--label``, Ray prefixes; else the file's only rank)."""
    if text:
        r = line_rank(strip_ansi(text)).rank
        if r is not None:
            return r
    ranks = ev.worker.job.inventory.ranks_of_file(file)
    return next(iter(ranks)) if len(ranks) == 1 else None


def _locate(file: str, logs_root: Path, ais_root: Path | None, resolved: dict[Path, Path]) -> str | None:
    """Where a cited file is: under the worker logs, the AIS logs, or neither (None); ``resolved``: each root
    resolved, filled on first use (a conclusion cites a dozen lines under the same two roots)."""

    def under(root: Path) -> bool:
        if root not in resolved:
            resolved[root] = root.resolve()
        return safe_path(root, file, resolved[root]) is not None

    if under(logs_root):
        return "worker"
    if ais_root is not None and ("!" in file or under(ais_root)):
        return "ais"
    return None


def build_context(c: Conclusion, ev: JobEvidence) -> RuleContext:
    """Read every cited line back from its file (one read per file, below the directories ``ev`` was gathered from)
    and put it on the worker clock."""
    logs_root, ais_root = ev.logs_root, ev.ais_root
    cited: list[Cited] = []
    roots: dict[Path, Path] = {}
    if c.root_cause_event is not None:
        r = c.root_cause_event
        cited.append(
            Cited("root_cause_event", r.file, r.line, r.text, r.time, _locate(r.file, logs_root, ais_root, roots))
        )
    for i, s in enumerate(c.chain):
        cited.append(Cited(f"chain[{i}]", s.file, s.line, None, s.time, _locate(s.file, logs_root, ais_root, roots)))
    for i, e in enumerate(c.evidence):
        cited.append(Cited(f"evidence[{i}]", e.file, e.line, e.text, None, _locate(e.file, logs_root, ais_root, roots)))
    worker_wanted: dict[str, set[int]] = {}
    ais_wanted: dict[str, set[int]] = {}
    for x in cited:
        if x.source == "worker":
            worker_wanted.setdefault(x.file, set()).add(x.line)
        elif x.source == "ais":
            ais_wanted.setdefault(x.file, set()).add(x.line)
    hang = {a.rel: a.path for a in ev.hang.files} if ev.hang is not None else {}
    for x in cited:
        if x.source is None and x.file in hang:
            x.source = "hang"
    worker_lines = read_lines(logs_root, worker_wanted, ev.worker.year) if worker_wanted else {}
    for x in cited:
        if x.source == "hang":
            path = hang[x.file]
            got = read_lines(path.parent, {path.name: {x.line}}, None).get((path.name, x.line))
            if got is not None:
                x.actual = replace(got, file=x.file)
    ais_lines = read_ais_lines(ais_root, ais_wanted) if ais_root is not None and ais_wanted else {}
    alignment = ev.ais.alignment if ev.ais is not None else None
    inventory = ev.worker.job.inventory
    for x in cited:
        if x.source == "worker":
            x.actual = worker_lines.get((x.file, x.line))
            if x.actual is not None:
                back = inventory.clock_offset_of(x.file)
                x.earliest, x.latest = _back(x.actual.earliest, back), _back(x.actual.latest, back)
                x.rank = _rank_of_line(ev, x.file, x.actual.text)
        elif x.source == "ais":
            x.actual = ais_lines.get((x.file, x.line))
            x.daemon = ev.ais.daemon_of(x.file) if ev.ais is not None else None
            if x.actual is not None and x.daemon and aligned_for(alignment, x.daemon):
                x.earliest = ais_to_worker(alignment, x.actual.earliest)
                x.latest = ais_to_worker(alignment, x.actual.latest)
    symptom = first_symptom(ev)
    if symptom is not None and symptom.kind == "worker" and (back := inventory.clock_offset_of(symptom.file)):
        symptom = symptom.moved_back(back)
    return RuleContext(c, ev, logs_root, ais_root, cited, triggers(ev), symptom)


def _back(t: datetime | None, offset: timedelta | None) -> datetime | None:
    return t - offset if t is not None and offset else t


def check(
    rule: str,
    status: CheckStatus,
    detail: str,
    evidence: Iterable[Evidence] = (),
    next_step: str = "",
) -> Check:
    """One rule's result: passed unless failed or undecided, at most :data:`MAX_EVIDENCE` lines cited (the rest
    counted), and a next step only where something is to be done."""
    ev = list(evidence)
    return Check(
        rule=rule,
        passed=status in ("passed", "not_applicable"),
        status=status,
        detail=detail,
        evidence=ev[:MAX_EVIDENCE],
        evidence_truncated=max(0, len(ev) - MAX_EVIDENCE),
        next_step="" if status in ("passed", "not_applicable") else next_step,
    )
