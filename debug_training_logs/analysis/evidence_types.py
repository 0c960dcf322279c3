"""The evidence types of a job (what consumers see): :class:`Hit`, the NCCL state (:class:`NcclState`),
:class:`WorkerEvidence`, :class:`AisEvidence`, :class:`JobEvidence`, and the derived facts' types (:class:`Trigger`,
:class:`KeyEvent`, :class:`LauncherEvent`, :class:`RankState`, :class:`SilentNode`). The code that fills them is in
:mod:`~debug_training_logs.analysis.evidence` and the other ``evidence_*`` modules.

What :class:`JobEvidence` holds:

* ``worker`` (:class:`WorkerEvidence`): inventory and coverage, the named signals of
  :data:`~debug_training_logs.analysis.evidence_signals.SIGNALS` (process killers, exceptions and tracebacks,
  data-loading and storage errors, progress and clean-end markers) with their hits, each rank's first/last hit and
  counts, step-time and memory series, each file's last timed line, rank -> host.
* ``nccl`` (:class:`NcclState`): the per-(rank, PG) NCCL state table and each process group's classification.
* ``ais`` (:class:`AisEvidence`): the AIS file index, counter spikes, notable lines and the clock alignment.
* ``launcher`` (:class:`~debug_training_logs.analysis.launcher.LauncherFacts`: torchrun/elastic, gloo and DETAIL
  lines: exit codes, signals, SIGTERMs sent by the agent, victims, mismatches), ``flight_recorder`` (the dumps),
  ``attempts``/``attempt``; the per-rank states read the launcher's exits through :meth:`JobEvidence.launcher_events`
  (an exit code > 0 makes a rank ``crashed``).

Time: worker times are naive datetimes on the workers' clock (their zone is never written); AIS times are naive
datetimes on the AIS daemons' clock; the two are only compared through a verified clock alignment (``offset_hours``
= worker clock minus AIS clock). A line without a time of its own is an interval: ``after`` (the nearest earlier
timed line of its file) and ``before`` (the nearest later one; None when none follows: the end of that output).
Within one file lines are in write order, so these per-file bounds also bound the line on its rank.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from debug_training_logs.analysis import attempts as attempts_mod
from debug_training_logs.analysis import launcher as launcher_scan
from debug_training_logs.analysis.alignment import Alignment, WorkerClock
from debug_training_logs.analysis.inventory_types import JobScan
from debug_training_logs.analysis.launcher_decision import OWN_SIGNALS
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.read_back import TimeBounds
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats.progress import step_number
from debug_training_logs.frozen import positional

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage, Evidence

if TYPE_CHECKING:  # the AIS and dump modules are imported where those are read: the worker scan's sinks need none
    from debug_training_logs.analysis import fr_dumps, hang_facts
    from debug_training_logs.analysis.ais_delta_types import AisCollection, GetStop, NotableLines, Restart, Spike
    from debug_training_logs.analysis.ais_index import AisDaemon, AisIndex


# ---------------------------------------------------------------------------------------------------------------------
# Evidence types (what consumers see)


@dataclass(frozen=True, slots=True)
class Hit(TimeBounds):
    """One log line that matched a signal, with its rank and time (worker clock)."""

    signal: str
    file: str
    line: int
    text: str
    rank: int | None
    time: datetime | None
    """The line's own time, when it writes one."""
    after: datetime | None = None
    """For a line without a time: the latest time on an earlier matched line of the same file (a lower bound)."""
    before: datetime | None = None
    """For a line without a time: the earliest time on a later matched line of the same file (an upper bound)."""

    @property
    def when(self) -> datetime | None:
        """Best single estimate: own time, else the bound next to it."""
        return self.time or self.after or self.before

    def cite(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.file, line=self.line, text=self.text)


_new_evidence_hit: Final = positional(Hit)
"""``Hit(signal, file, line, text, rank, time, after, before)`` for the worker's digest (~200 per file; see
:func:`~debug_training_logs.frozen.positional`)."""


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class NcclEvent:
    """A parsed NCCL line that is not per-PG state (teardown, heartbeat kill, fatal terminate, torchrun rows)."""

    rank: int | None
    file: str
    line: int
    text: str
    time: datetime | None
    event: tnt.Event


@dataclass(repr=False)
class NcclRow:
    """The NCCL state of one rank in one process group (a row of ``nccl_state_table``, times as datetimes)."""

    rank: int
    pg: str
    """The PG identity shared by its members (GUID/name, else uid; ``?`` when the logs give no PG)."""
    pg_desc: str | None = None
    seq: int | None = None
    op_type: str | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    signal: str = "none"
    """``detected`` (its own watchdog timed out), ``observed`` (it only saw another rank's dump signal), ``none``."""
    signalled_dump: bool = False
    """The rank logged 'First PG on this rank to signal dumping' (2.7+) / 'First watchdog to set the dump signal'
    (2.4) for this PG: its own watchdog raised the dump (``nccl_rows.Row.signalled_dump``; not the table's
    ``first_to_dump``, which marks only the job's first dump rank)."""
    dump_signal_from_rank: int | None = None
    timeout_time: datetime | None = None
    collective_start_time: datetime | None = None
    file: str = ""
    line: int = 0
    text: str = ""

    @property
    def pending(self) -> int | None:
        """Enqueued but not completed collectives; 0 means the rank was not inside any collective."""
        if self.last_enqueued is None or self.last_completed is None:
            return None
        return self.last_enqueued - self.last_completed

    def cite(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.file, line=self.line, text=self.text)


@dataclass(repr=False)
class ProcessGroupState:
    """One process group's classification (``nccl_state_table``'s, with rank sets)."""

    pg: str
    desc: str | None
    classification: str
    """``straggler``, ``fabric``, ``root_ahead``, ``mixed`` or ``incomplete``."""
    reason: str
    ranks: set[int]
    straggler_ranks: set[int]
    reasons: dict[int, str]
    """Why each straggler/suspect rank was singled out."""
    detected_ranks: set[int]
    observed_ranks: set[int]
    signalled_dump_ranks: set[int]
    """Ranks whose own watchdog raised the dump in this PG (:attr:`NcclRow.signalled_dump`)."""
    dump_signal_senders: set[int]
    suspect_ranks: set[int] = field(default_factory=set)
    """Ranks that look behind but cannot be named (the PG is incomplete or mixed)."""
    root_rank: int | None = None
    root_gap: int | None = None
    """How many collectives (last enqueued) the root rank is ahead of the others, when it is."""


@dataclass(repr=False)
class NcclState:
    """Every rank's NCCL state and each PG's classification, from ``analysis.nccl_table``."""

    table: NcclTable
    rows: list[NcclRow]
    groups: list[ProcessGroupState]
    ranks_without_state: set[int]
    """Ranks whose logs were read but that logged no NCCL state at all while others timed out (absent)."""
    job_stragglers: set[int]
    """Ranks at the root of the hang: stragglers that never detected a timeout and waited in no collective."""
    exited_with_error: set[int] = field(default_factory=set)
    """Ranks torchrun reports with a positive exit code (an uncaught exception: the process died, it did not hang)."""
    other_events: list[NcclEvent] = field(default_factory=list)
    """The NCCL events that are not per-PG state and that the decision reads (:data:`_OTHER_EVENTS_READ`); a job's
    teardown lines (several per rank) are left in the files, not held."""

    @property
    def timed_out(self) -> bool:
        return any(r.signal == "detected" for r in self.rows)

    @property
    def straggler_ranks(self) -> set[int]:
        return {r for g in self.groups for r in g.straggler_ranks}

    def first_timeout(self) -> NcclRow | None:
        timed = [r for r in self.rows if r.timeout_time is not None]
        return min(timed, key=lambda r: (r.timeout_time or datetime.max, r.rank)) if timed else None

    def collective_start(self) -> datetime | None:
        """When the stuck collective started (the earliest over the ranks that timed out)."""
        starts = [r.collective_start_time for r in self.rows if r.collective_start_time is not None]
        return min(starts) if starts else None


@dataclass(repr=False, eq=False)
class SeriesJump:
    """A rank whose series (step time, memory) left its own baseline."""

    rank: int
    file: str
    baseline: float
    peak: float
    first_line: int
    first_time: datetime | None
    text: str


Series = dict[int, Sequence[tuple[str, int, datetime | None, float]]]
"""Per rank: (file, line, time, value) points."""


@dataclass(repr=False, eq=False)
class WorkerEvidence:
    """What every worker log shows (one scan)."""

    root: Path
    job: JobScan
    year: int
    tallies: dict[str, list[Hit]]
    """Per signal: the kept hits (each file's first ones plus every rank's first and last), in time order."""
    counts: dict[str, int]
    counts_by_rank: dict[str, dict[int, int]]
    first_by_rank: dict[str, dict[int, Hit]]
    last_by_rank: dict[str, dict[int, Hit]]
    nccl_files: Sequence[FileEvents]
    """The NCCL sinks' parsed lines per file (the input of ``nccl_table.build_table``), unpacked from the scan's
    results on each access (iterate; a job's files are never all held at once)."""
    clock: WorkerClock
    """The alignment's worker-side anchors (from the same scan)."""
    step_ms: Series
    memory_mb: Series
    file_end: dict[str, Hit]
    """Per file: the last line with a time (from the file's tail), as a pseudo-hit ``end``."""
    rank_host: dict[int, str]
    """Global rank -> host, from the NCCL init line of the world communicator."""
    file_host: dict[str, str]
    """File -> host, when slurmstepd lines in it name exactly one node (``*** STEP j.s ON <host> ...``)."""
    rank_pid: dict[int, int] = field(default_factory=dict)
    """Global rank -> its process id, from the NCCL init line of the world communicator (``host:pid:tid [d]``)."""
    _by_rank: dict[str, tuple[list[Hit], int, dict[int | None, list[Hit]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Per signal: (the tally list indexed, its length then, its hits per rank): :meth:`hits` of one rank is asked
    once per rank, and a scan over every kept hit each time is quadratic in the ranks."""
    _latest: dict[str, tuple[list[Hit], int, datetime | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Per signal: (the tally list, its length then, :meth:`latest_start`)."""
    _rank_files: tuple[int, dict[int, list[str]]] | None = field(default=None, init=False, repr=False, compare=False)
    """(number of files indexed, rank -> its files in file order)."""
    _steps: tuple[int, list[datetime], list[int]] | None = field(default=None, init=False, repr=False, compare=False)
    """(progress hits indexed, their start times sorted, the distinct steps from each on): :meth:`steps_after`."""

    @property
    def coverage(self) -> Coverage:
        return self.job.coverage()

    @property
    def world_size(self) -> int | None:
        return self.job.inventory.world_size

    @property
    def missing_ranks(self) -> set[int]:
        return self.job.inventory.missing_ranks

    @property
    def ranks(self) -> set[int]:
        return self.job.inventory.ranks

    def worker_ranks(self) -> set[int]:
        """The ranks with a sign that their worker ran: every rank the logs name, except those known only from a
        file's name (``slurm-<job>_<N>.out``) when no training progress is logged (the launcher's own output)."""
        files = self.job.inventory.files
        if self.tallies.get("progress"):
            return set(self.ranks)
        return {r for f in files if f.rank_source != "file name" for r in f.ranks}

    def hits(self, signal: str, rank: int | None = None) -> list[Hit]:
        """Kept hits of ``signal`` (optionally of one rank), in time order."""
        hs = self.tallies.get(signal, [])
        if rank is None:
            return hs
        indexed = self._by_rank.get(signal)
        if indexed is None or indexed[0] is not hs or indexed[1] != len(hs):
            per: dict[int | None, list[Hit]] = defaultdict(list)
            for h in hs:
                per[h.rank].append(h)
            indexed = self._by_rank[signal] = (hs, len(hs), dict(per))
        return list(indexed[2].get(rank, ()))

    def latest_start(self, signal: str) -> datetime | None:
        """The latest ``earliest`` bound of the kept hits of ``signal`` (None when no hit has one)."""
        hs = self.tallies.get(signal, [])
        known = self._latest.get(signal)
        if known is None or known[0] is not hs or known[1] != len(hs):
            known = self._latest[signal] = (
                hs,
                len(hs),
                max((t for t in (h.earliest for h in hs) if t is not None), default=None),
            )
        return known[2]

    def steps_after(self, when: datetime) -> int:
        """How many distinct training steps the timed progress lines report after ``when`` (any rank)."""
        hs = self.tallies.get("progress", [])
        if self._steps is None or self._steps[0] != len(hs):
            timed = sorted(
                (h.earliest, n) for h in hs if h.earliest is not None and (n := step_number(h.text)) is not None
            )
            seen: set[int] = set()
            suffix = [0] * len(timed)
            for i in range(len(timed) - 1, -1, -1):
                seen.add(timed[i][1])
                suffix[i] = len(seen)
            self._steps = (len(hs), [t for t, _ in timed], suffix)
        _n, times, suffix = self._steps
        i = bisect_right(times, when)
        return suffix[i] if i < len(suffix) else 0

    def files_of_rank(self, rank: int) -> list[str]:
        files = self.job.inventory.files
        if self._rank_files is None or self._rank_files[0] != len(files):
            index: dict[int, list[str]] = defaultdict(list)
            for f in files:
                for r in f.ranks:
                    index[r].append(f.rel)
            self._rank_files = (len(files), dict(index))
        return list(self._rank_files[1].get(rank, ()))

    def node_of_rank(self, rank: int) -> str | None:
        """The host of ``rank`` (NCCL init line), else the host slurmstepd names in its file, else the file's node."""
        if rank in self.rank_host:
            return self.rank_host[rank]
        files = self.files_of_rank(rank)
        f = self.job.inventory.file_named(files[0]) if files else None
        return self.file_host.get(f.rel, f.node) if f is not None else None

    def ranks_of_file(self, rel: str) -> set[int]:
        return self.job.inventory.ranks_of_file(rel)


def _order_key(h: Hit) -> tuple[datetime, str, int]:
    return (h.time or h.after or h.before or datetime.max, h.file, h.line)  # (Hit.when, inline: sorts call it often)


@dataclass(repr=False, eq=False)
class AisEvidence:
    """What the AIS daemon logs show (one ``ais_collect.collect`` pass) and how their clock relates to the workers'."""

    root: Path
    index: AisIndex
    spikes: list[Spike]
    notable: list[NotableLines]
    """W/E line groups per daemon and named pattern, each event once (INFO and ERROR copies merged)."""
    get_stops: list[GetStop]
    restarts: list[Restart]
    alignment: Alignment
    """``analysis.alignment.align`` over the same scans (``offset_hours`` = worker clock minus AIS clock)."""

    @property
    def alignment_problem(self) -> str:
        """Why the AIS and worker clocks cannot be related (empty when the offset is verified)."""
        if self.alignment.verified:
            return ""
        return self.alignment.summary

    def daemon_of(self, ref: str) -> str | None:
        d = self.index.daemon_of(ref)
        return d.key if d is not None else None

    def daemon(self, key: str) -> AisDaemon | None:
        return next((d for d in self.index.daemons if d.key == key), None)

    def incident_lines(self) -> list[NotableLines]:
        """Notable line groups that are not noise, oldest first."""
        return sorted((n for n in self.notable if not n.noise), key=lambda n: (n.first or datetime.max, n.daemon))


@dataclass(repr=False, eq=False)
class AisOwn:
    """What the AIS evidence takes from the AIS logs alone (no worker fact): it can be read before the worker
    evidence exists (:func:`gather_evidence` reads it while the worker scan's processes read the worker logs)."""

    collection: AisCollection
    spikes: list[Spike]
    notable: list[NotableLines]
    get_stops: list[GetStop]
    restarts: list[Restart]


# ---------------------------------------------------------------------------------------------------------------------
# All the evidence


@dataclass(repr=False, eq=False)
class JobEvidence:
    """Everything a diagnosis or a verification rests on: worker evidence, NCCL state, AIS evidence."""

    worker: WorkerEvidence
    nccl: NcclState
    ais: AisEvidence | None
    step_jumps: list[SeriesJump]
    """Ranks whose step time jumped (throughput collapse)."""
    memory_creep: list[SeriesJump]
    """Ranks whose allocated GPU memory kept growing."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Derived results computed once per evidence (triggers, rank states), shared by the verdict and the verifier."""
    launcher: launcher_scan.LauncherFacts | None = None
    """Per-rank fates from torchrun/elastic, gloo and DETAIL lines (exit codes, signals, victims, mismatches)."""
    flight_recorder: fr_dumps.FlightRecorderFacts | None = None
    """The flight-recorder dumps found in/next to the logs (or in ``fr_dir``), read safely and compared."""
    attempts: attempts_mod.Attempts | None = None
    """The job's attempts (elastic restarts, requeues); the evidence is about :attr:`attempt` when there are several."""
    attempt: int | None = None
    """The attempt this evidence covers (None: the job had one attempt, or the whole logs were read)."""
    given_world_size: int | None = None
    """The world size the caller gave (it replaced what the logs say in the coverage), or None."""
    hang: hang_facts.HangFacts | None = None
    """What was collected during a live hang (stack dumps, NCCL RAS, node telemetry), None when nothing was."""

    @property
    def logs_root(self) -> Path:
        """The worker logs' directory the evidence was gathered from (what its citations are relative to)."""
        return self.worker.job.root

    @property
    def ais_root(self) -> Path | None:
        """The AIS logs' directory the evidence was gathered from, when there was one."""
        return self.ais.root if self.ais is not None else None

    @property
    def missing_ranks(self) -> set[int]:
        """Ranks of the world nothing was read of: no log file, and no stack dump saw them either (a rank whose
        stack was dumped during the hang is known where it stood, whichever file its log lines went to)."""
        missing = self.worker.missing_ranks
        if self.hang is not None and missing:
            return set(missing) - self.hang.dumped_ranks
        return set(missing)

    def launcher_events(self) -> list[LauncherEvent]:
        """The launcher's per-rank exits as :func:`rank_states` reads them (from :attr:`launcher`'s fates)."""
        if self.launcher is None:
            return []
        out = []
        watched = bool(self.nccl.rows)
        for f in self.launcher.fates.values():
            if f.torn_down:
                kind = "sigterm_sent"
            elif f.exitcode is None:
                continue
            elif f.exitcode > 0:
                kind = "exit"
            elif f.signal in OWN_SIGNALS or (f.signal == "SIGABRT" and (f.comm_kind == "size_mismatch" or not watched)):
                # a SIGABRT is the rank's own abort where no NCCL watchdog could have sent it, or where gloo's
                # enforce on its own receive threw (``_owner_of_abort``)
                kind = "signal"
            else:  # SIGABRT from NCCL's watchdog, SIGTERM from the agent or SLURM: not the rank's own failure
                kind = "stopped"
            cite = f.exit_evidence
            event = LauncherEvent(f.rank, kind, f.exitcode, f.signal)
            if cite is not None:
                event.file, event.line, event.text = cite.file, cite.line, cite.text
            out.append(event)
        return out

    def dumps_alone(self) -> bool:
        """Dumps were read and no worker log line of any rank (nor a launcher fate) was: the dumps must decide."""
        fr = self.flight_recorder
        if fr is None or not fr.dumps:
            return False
        return not self.worker.ranks and (self.launcher is None or not self.launcher.fates)

    @property
    def coverage(self) -> Coverage:
        if self.dumps_alone():  # dumps and no worker log: the dumps' world and ranks
            from debug_training_logs.analysis.fr_types import dump_coverage

            assert self.flight_recorder is not None
            return dump_coverage(self.flight_recorder, self.worker.coverage)
        return self.worker.coverage


@dataclass(frozen=True, repr=False, eq=False)
class Trigger:
    """A candidate root-cause event on one rank."""

    category: str
    """``cuda_oom``, ``cuda_error``, ``rank_crash``, ``watchdog_hang`` or ``data`` (a data-loading/storage error)."""
    hit: Hit
    what: str
    """A few words for people: ``CUDA out of memory``, ``NaN loss``, ``port already in use``..."""


@dataclass(repr=False)
class KeyEvent:
    """An event of the timeline / causal chain."""

    event: str
    file: str
    line: int
    text: str
    ranks: set[int] = field(default_factory=set)
    time: datetime | None = None
    """Worker clock, when known exactly (AIS events converted through a verified alignment)."""
    earliest: datetime | None = None
    """For a line without a time: the time of the nearest earlier timed line (worker clock)."""
    latest: datetime | None = None
    """For a line without a time: the time of the nearest later timed line (worker clock)."""
    ais_time: datetime | None = None
    """AIS events: the daemon's own clock."""
    daemon: str | None = None
    kind: str = "worker"
    """``worker`` or ``ais``."""
    derived: bool = False
    """The time is computed (a collective's start = timeout time - how long it ran), not the cited line's own."""

    @property
    def sort_time(self) -> datetime | None:
        """The time to order by: exact, else the lower bound, else the upper bound."""
        return self.time or self.earliest or self.latest

    def moved_back(self, offset: timedelta) -> KeyEvent:
        """The same event with its times ``offset`` earlier: a line of a file whose clock runs ahead of the job's
        (``FileInventory.clock_offset``), read on the job's clock."""
        return replace(
            self,
            time=self.time - offset if self.time else None,
            earliest=self.earliest - offset if self.earliest else None,
            latest=self.latest - offset if self.latest else None,
        )

    def cite(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.file, line=self.line, text=self.text)


# ---------------------------------------------------------------------------------------------------------------------
# Per-rank states: what each rank was doing when the job ended (read by the verdict, every verifier rule, the report)

RankStateName = Literal[
    "finished", "crashed", "watchdog_killed", "waiting", "stuck", "torn_down", "exited_early", "absent", "unknown"
]
RANK_STATES: tuple[str, ...] = get_args(RankStateName)
"""``finished`` (the run ended normally), ``crashed`` (an exception reached the top / an error exit code / a fatal
CUDA error, and the process logged nothing alive afterwards), ``watchdog_killed`` (the NCCL heartbeat monitor killed
it), ``waiting`` (inside a collective: enqueued > completed), ``stuck`` (alive but outside the stuck collective: no
NCCL work pending, only observed the dump, or no NCCL state while the others timed out), ``torn_down`` (stopped
by its launcher because another rank failed), ``exited_early`` (it left without an error while its peers still
waited for it: the causal model's finding, :func:`~debug_training_logs.analysis.fate_events.shown_states`),
``absent`` (no log file), ``unknown`` (its log says nothing of its end)."""


@dataclass(repr=False, eq=False)
class LauncherEvent:
    """A launcher's report about one rank's process (from :attr:`JobEvidence.launcher`'s fates). ``exit_code`` > 0 is
    an error exit, < 0 a signal number."""

    rank: int | None
    kind: str
    """``exit`` (the process exited with ``exit_code``), ``signal`` (killed by a ``signal`` that ends a rank on its
    own, :data:`~debug_training_logs.analysis.launcher_decision.OWN_SIGNALS`), ``stopped`` (SIGABRT/SIGTERM: the
    watchdog, agent or SLURM ended it), ``sigterm_sent`` (the launcher stopped it because another worker failed)."""
    exit_code: int | None = None
    signal: str | None = None
    file: str = ""
    line: int = 0
    text: str = ""
    time: datetime | None = None


@dataclass(repr=False, eq=False)
class RankState:
    """One rank's state at the end of the job, and the line that decides it."""

    rank: int
    state: str
    """One of :data:`RANK_STATES`."""
    why: str
    """The deciding fact, in a few words."""
    line: Hit | None = None
    """The line that decides it (the crash line, the NCCL state line), for citing."""
    crash: Trigger | None = None
    """For ``crashed`` / ``watchdog_killed``: the rank's first failure (its root-cause candidate)."""
    module: str | None = None
    """For ``crashed``: where the exception came from, for people ("the data loader", "torch.distributed")."""
    exit_code: int | None = None
    """Exit code reported by the launcher (> 0 error, < 0 signal), when known."""
    signal: str | None = None
    exception: Trigger | None = None
    """For ``crashed``: the exception that reached the top (ended the process), when logged."""
    last: Hit | None = None
    """The rank's last activity seen (:func:`last_activity`)."""


@dataclass(repr=False, eq=False)
class SilentNode:
    """A node whose every log file stopped well before SLURM's NODE FAILURE cancellation, with no error."""

    node: str
    ranks: set[int]
    last: Hit | None
    """Its last timed line (the moment it went silent)."""
