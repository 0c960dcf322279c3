"""Per-rank fates from the launcher and backend lines: who died on its own, who was torn down, who was a victim.

One scan of every worker log for the torchrun/elastic lines (:mod:`~debug_training_logs.formats.torchrun`), gloo
errors and DETAIL mismatch reports (:mod:`~debug_training_logs.formats.gloo`) and the last line of every Python
exception; then, per global rank: its exit code or signal (ChildFailedError tables), whether its own agent tore it
down (``-15``/SIGTERM after ``Sending process P closing signal``), its own error (an exception that is not a
communication symptom) and its gloo error (a symptom of a peer).

The semantics (what real torch runs show, fixtures/real_torch):

1. A rank killed by a signal its agent did not send (``-9`` SIGKILL: the OOM killer; ``-6``, ``-11``) died on its
   own: a culprit.
2. A rank whose exception is not a communication symptom (a ValueError from its data loader, a CUDA error) died on
   its own: a culprit. Gloo ``Connection closed by peer`` / ``Timed out waiting`` / ``connectFullMesh failed`` are
   what the *others* raise when it does: victims.
3. ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` mismatch reports: the rank whose fingerprint differs from the majority's is
   the culprit (each rank reports itself against one peer).
4. When every failing rank only timed out in gloo, the ranks that never timed out and had to be torn down (or never
   ended) are the ones that never entered the collective: stragglers.
5. ``-15`` alone says nothing: the agent SIGTERMs every worker still alive after the first failure, victims and
   stragglers alike. The ChildFailedError "Root Cause" is only the first failure *that agent* saw.

Pure and MCP-free. The scan is a consumer of the shared job scan (:func:`consumer`): a tool scans the launcher
patterns with its own in one pass (and a server finds them in its scan cache); one attempt's facts are the whole job's
filtered by line (:func:`for_attempt`), not another scan.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from debug_training_logs.analysis.inventory import LineKeep
from debug_training_logs.analysis.inventory_results import result_item, result_size
from debug_training_logs.analysis.inventory_types import JobScan
from debug_training_logs.analysis.inventory_views import file_result_item
from debug_training_logs.formats import gloo, launchers, slurm, torchrun
from debug_training_logs.formats.prefixes import AGENT_HEADER, GLOBAL_RANK, LOCAL_RANK, PROCESS_ID, strip_ansi
from debug_training_logs.formats.python_text import is_source_line
from debug_training_logs.logs.attribution import file_name_rank, rank_of_line, tee_prefix
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_cache import FileResult
from debug_training_logs.logs.scan_types import SinkFactory
from debug_training_logs.memo import unpack
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Evidence

# Table lines are fixed-width (``f"{key:10}: "``): literal pieces select them without a per-line regex.
_TABLE_LITERALS = (
    "  time      : ",
    "  host      : ",
    "  rank      : ",
    "  exitcode  : ",
    "  error_file: ",
    "  traceback : ",
    "Root Cause (first observed failure)",
    " FAILED",
    "====================",
)
_EXCEPTION = r"(?:^|[\s:\]])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?:: |:$|$)"
_JOB_START = r"SLURM_RESTART_COUNT|Starting elastic_operator|NCCL INFO NCCL version"
"""Lines a job writes only while it starts (with torchrun's start-up banner): a second start in one file is the
job run again into it (a SLURM requeue in append mode)."""
_JOB_START_RX = re.compile(_JOB_START + r"|Setting OMP_NUM_THREADS environment variable")
_FRAME_REGEX = r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+, in "
"""A traceback's start and its frames: where each rank was when its error came (the collective it waited in)."""
PATTERNS: tuple[str, ...] = (
    *(re.escape(n) for n in torchrun.NEEDLES),
    *(re.escape(n) for n in gloo.NEEDLES),
    *(re.escape(n) for n in launchers.NEEDLES),
    *(re.escape(n) for n in _TABLE_LITERALS),
    _EXCEPTION,
    _FRAME_REGEX,
    _JOB_START,
    PROCESS_ID,
    slurm.CANCEL_REGEX,
    # ``\[::\]`` written ``\[\::\]`` (the same regex): ``[:`` reads as a POSIX class to the prefilter's literal
    # finder, which then sent this whole alternation to a DFA pass over every byte instead of its literals
    "|".join(b.regex.replace("\\[:", "\\[\\:") for b in torchrun.BENIGN),
)
"""What the launcher scan searches (RE2 syntax); the last one feeds the benign count. The ranks a file names
(``[rankN]:`` and a user format's inline ``[rankN] ``) come from the scan engine's rank collection, at memchr speed."""
_BENIGN_ID = len(PATTERNS) - 1
MAX_ERRORS_PER_RANK = 16
MAX_LINES_PER_FILE = 20_000
"""Hit lines kept per file (a job whose every line is an exception is cut here and says so)."""
MAX_REPLAY_HITS = 2 * MAX_LINES_PER_FILE
"""Hits per file remembered, in order, so one attempt's facts can be derived from the whole job's scan by line
(:func:`for_attempt`); a file with more hits (or more kept lines than :data:`MAX_LINES_PER_FILE`) is not replayable
and the chosen attempt's facts then need a scan of their own."""

_EXC_LINE = re.compile(_EXCEPTION)
_LAUNCHER_FRAME = re.compile(r'File "[^"]*(?:/bin/torchrun|torch/distributed/(?:run|launch)\.py)"')
"""The first frame of the launcher's own traceback (torchrun's main, ``python -m torch.distributed.run``)."""
_AGENT_LINE = re.compile(rf"^{AGENT_HEADER}(\d+) torch/distributed/")
_PROCESS_ID = re.compile(PROCESS_ID)
# Exceptions that are a communication symptom (raised because a peer died, hung or disagreed), not a cause.
_VICTIM_EXCEPTIONS = re.compile(
    r"DistBackendError|DistNetworkError: Connection|Detected mismatch between collectives|gloo/transport"
    r"|Connection closed by peer|Timed out waiting \d+ms|connectFullMesh failed|NCCL communicator was aborted"
    r"|Watchdog caught collective operation timeout|ChildFailedError|Rendezvous\w*Error|DistStoreError"
)


class _LineSink:
    """Keeps the hit lines of one file (bounded) and counts benign lines; without ``keep`` it also remembers every
    hit in order (line, text, whether benign only or too), so :func:`for_attempt` can replay one attempt's share."""

    def __init__(self, lf: LogFile | _Rel, keep: LineKeep | None = None) -> None:
        self.rel = lf.rel
        self.keep = keep
        self.lines: list[tuple[int, str]] = []
        self.benign: Counter[str] = Counter()
        self.dropped = 0
        self.hits: list[tuple[int, str, int]] | None = [] if keep is None else None

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        if self.keep is not None and not self.keep(self.rel, line_no, line):
            return
        if self.hits is not None:
            if len(self.hits) < MAX_REPLAY_HITS:
                how = (2 if len(pattern_ids) == 1 else 1) if _BENIGN_ID in pattern_ids else 0
                self.hits.append((line_no, line, how))
            else:
                self.hits = None
        if _BENIGN_ID in pattern_ids:
            b = torchrun.benign(line)
            if b is not None:
                self.benign[b.name] += 1
                if len(pattern_ids) == 1 and b.name != "omp_threads_banner":
                    return  # only benign: nothing else to learn from the line (torchrun's banner marks a start)
        if len(self.lines) >= MAX_LINES_PER_FILE:
            self.dropped += 1
            return
        self.lines.append((line_no, strip_ansi(line)))

    def finish(
        self,
    ) -> tuple[
        list[tuple[int, str]], dict[str, int], int, list[tuple[int, str, int]] | None, list[torchrun.ChildFailedTable]
    ]:
        """(kept lines, benign counts, lines dropped by the cap, the hits to replay or None, the file's
        ChildFailedError tables: parsed here, in the scan's worker process, not one file after another afterwards)."""
        return self.lines, dict(self.benign), self.dropped, self.hits if not self.dropped else None, _tables(self.lines)


def _tables(lines: list[tuple[int, str]]) -> list[torchrun.ChildFailedTable]:
    # a table opens with a ChildFailedError line (or a pasted tail starts at an entry's rank field): most files have
    # neither, and the parser tries every line
    has_table = any("ChildFailedError" in text or "(local" in text for _no, text in lines)
    return torchrun.parse_child_failed_tables(lines) if has_table else []


@dataclass(frozen=True, repr=False, eq=False)
class _Rel:
    rel: str


_REPLAY_IDS = ([0], [_BENIGN_ID, 0], [_BENIGN_ID])
"""Pattern ids that make :meth:`_LineSink.on_hit` take the same branch as the remembered hit (by its ``how``)."""


@dataclass(repr=False)
class RankFate:
    """How one global rank ended, as the launcher and its own lines say.

    ``exitcode``: from a ChildFailedError table (negative = signal ``signal``), None when no table names it;
    ``torn_down``: its agent SIGTERMed it (exit -15); ``own_error``: its last exception that is not a communication
    symptom (the cause when present); ``comm_error``: its gloo/communication error (a symptom of a peer);
    ``timed_out``: the comm error was a timeout waiting for a peer; ``mismatch``: its DETAIL fingerprint report.
    """

    rank: int
    node: str | None = None
    exitcode: int | None = None
    signal: str | None = None
    torn_down: bool = False
    root_cause_entry: bool = False
    own_error: Evidence | None = None
    comm_error: Evidence | None = None
    comm_kind: str | None = None
    timed_out: bool = False
    mismatch: gloo.CollectiveMismatch | None = None
    exit_evidence: Evidence | None = None
    collective: str | None = None
    """The collective call its communication error came from (``broadcast at train.py:187``, ``backward (gradient
    all-reduce) at train.py:196``), read from the traceback's frames: the collective it waited in."""
    errors: list[Evidence] = field(default_factory=list)
    """Every error line of the rank (own or communication), up to :data:`MAX_ERRORS_PER_RANK`, in file order."""

    @property
    def died_on_its_own(self) -> bool:
        """A signal its agent did not send, or an own (non-communication) error."""
        by_signal = self.exitcode is not None and self.exitcode < 0 and self.exitcode != -15
        return by_signal or self.own_error is not None


@dataclass(repr=False)
class AgentFacts:
    """What one node's agent said (per file): restarts, rendezvous and store failures, success."""

    file: str
    node: str | None
    restarts: list[Evidence] = field(default_factory=list)
    restart_counts: list[tuple[int, int]] = field(default_factory=list)  # (line, restart_count)
    rendezvous_errors: list[Evidence] = field(default_factory=list)
    listen_failures: list[Evidence] = field(default_factory=list)
    unreachable: list[tuple[str, Evidence]] = field(default_factory=list)
    """(host, line): store/rendezvous endpoints this agent could not reach."""
    succeeded: list[Evidence] = field(default_factory=list)
    worker_failed: list[tuple[int, torchrun.WorkerFailed]] = field(default_factory=list)
    teardowns: list[int] = field(default_factory=list)
    requeues: list[tuple[int, slurm.SlurmCancel]] = field(default_factory=list)
    worker_exits: list[tuple[Evidence, launchers.WorkerExit]] = field(default_factory=list)
    """(line, exit): another launcher's report of workers that ended (mp.spawn, srun, DeepSpeed)."""
    sigterms: dict[int, set[int]] = field(default_factory=dict)
    """Worker PIDs SIGTERMed (``Sending process P closing signal SIGTERM``) per agent PID (-1: a line naming no agent):
    an agent stops only its own node's workers."""
    local_to_global: dict[int, int] = field(default_factory=dict)
    """The file's torchrun local ranks mapped to global ones (its lines and failure tables, the inventory's map)."""
    starts: list[int] = field(default_factory=list)
    """Lines only a starting job writes (torchrun's banner, ``SLURM_RESTART_COUNT``, NCCL's version line)."""
    """(line, cancel): SLURM cancels after which the job may run again (requeue, preemption, node failure)."""
    pids: set[int] = field(default_factory=set)
    """PIDs of the torchrun agents whose own lines are in this file (several when nodes share one file)."""
    """Lines where the agent SIGTERMs its workers (a failure elsewhere, or a restart of the group)."""


@dataclass(repr=False)
class LauncherFacts:
    """Every rank's fate and every agent's facts for one job (all files)."""

    fates: dict[int, RankFate]
    agents: list[AgentFacts]
    tables: list[tuple[str, torchrun.ChildFailedTable]]
    mismatches: list[tuple[int, gloo.CollectiveMismatch, Evidence]]
    unranked_size_mismatches: list[Evidence]
    """gloo size-mismatch aborts no line names the rank of (``terminate called ... what(): ... op.preamble``)."""
    benign: dict[str, int]
    files: int
    truncated_lines: int
    inline_rank_files: dict[str, set[int]]
    file_boundaries: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Per file: its agent's stop candidates and the attempt boundaries found after them, worked out in the worker
    that scanned the file (:func:`~debug_training_logs.analysis.attempts.refine_launcher`; empty when the scan did
    not: :func:`~debug_training_logs.analysis.attempts.split` reads the lines back itself)."""

    def agent_count(self) -> int:
        """Distinct torchrun agents (one per node) whose own lines were read, by PID."""
        return len({p for a in self.agents for p in a.pids})

    def ranks_seen(self) -> set[int]:
        """Every global rank these lines name (fates and the inline ``[rankN]`` of user log formats)."""
        return set(self.fates) | {r for rs in self.inline_rank_files.values() for r in rs}

    def culprits(self, known_ranks: set[int] | None = None) -> tuple[set[int], str]:
        """The ranks the launcher/backend facts name as the cause, and how (``signal``, ``own_error``,
        ``mismatch``, ``straggler``), or (empty, ``undecided``) when they do not decide.

        ``known_ranks``: every rank of the job (coverage); default :meth:`ranks_seen`. A straggler is only named when
        every failing rank timed out waiting and the quiet ranks are a minority of the known ones."""
        by_signal = {
            r for r, f in self.fates.items() if f.exitcode is not None and f.exitcode < 0 and f.exitcode != -15
        }
        if by_signal:
            return by_signal, "signal"
        own = {r for r, f in self.fates.items() if f.own_error is not None}
        if own:
            return own, "own_error"
        odd = mismatch_culprits([m for _, m, _ in self.mismatches])
        if odd:
            return odd, "mismatch"
        timed = {r for r, f in self.fates.items() if f.timed_out}
        failed = {r for r, f in self.fates.items() if f.comm_error is not None or (f.exitcode or 0) > 0}
        known = (known_ranks if known_ranks is not None else self.ranks_seen()) | set(self.fates)
        if timed and failed == timed:
            quiet = {
                r
                for r in known
                if (f := self.fates.get(r)) is None or (f.comm_error is None and (f.torn_down or f.exitcode is None))
            }
            if quiet and len(quiet) < len(timed):
                return quiet, "straggler"
        return set(), "undecided"


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
_LIBRARY = re.compile(r"/(?:site|dist)-packages/|/lib/python\d|^<frozen|/torch/")


def collective_call(frames: Sequence[tuple[str, int, str]]) -> str | None:
    """The collective a traceback's frames (outermost first) were in, and the user code that called it:
    ``broadcast at train.py:187`` (the innermost ``distributed_c10d`` function), ``backward (gradient all-reduce) at
    train.py:196`` (DDP reduces gradients inside autograd's backward); None when no frame is a collective's."""
    api = None
    for file, _line, func in frames:
        if file.endswith("distributed_c10d.py") and func not in ("wrapper", "<module>"):
            api = func
        elif api is None and func == "backward" and (file.endswith("_tensor.py") or "autograd" in file):
            api = "backward (gradient all-reduce)"
    if api is None:
        return None
    user = [(f, n) for f, n, _fn in frames if not _LIBRARY.search(f)]
    if not user:
        return api
    f, n = user[-1]
    return f"{api} at {f.rsplit('/', 1)[-1]}:{n}"


def mismatch_culprits(reports: Sequence[gloo.CollectiveMismatch]) -> set[int]:
    """The rank(s) whose DETAIL fingerprint (op, seq, shapes, dtypes) differs from what most ranks ran."""
    seen: dict[int, tuple[str | None, int | None, str | None, str | None]] = {}
    for m in reports:
        for fp in (m.first, m.second):
            if fp is not None:
                seen.setdefault(fp.rank, (fp.op, fp.seq, fp.shapes, fp.dtypes))
    if len(seen) < 2:
        return set()
    counts = Counter(seen.values())
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return set()  # a tie: no majority to differ from
    return {r for r, v in seen.items() if v != top}


def _node_of(rel: str, tables: list[torchrun.ChildFailedTable]) -> str | None:
    hosts = {f.host for t in tables for f in t.failures if f.host}
    if len(hosts) == 1:
        return next(iter(hosts))
    return None


def _rank_of(text: str, local_to_global: dict[int, int], file_rank: int | None = None) -> int | None:
    """The global rank that wrote a kept line: its prefix as the scan attributes lines (``[rankN]:``, inline
    ``[rankN]``, Ray, srun ``--label``), a torchrun ``[defaultL]:`` tee prefix through the file's local-to-global
    map, else the one rank of a per-rank file (``file_rank``) for a line that is not the agent's own."""
    r = rank_of_line(text)
    if r is not None:
        return r
    m = LOCAL_RANK.match(text)
    if m:  # a torchrun --tee local rank: global through the file's map, else encoded -(L + 1) for the job's
        local = int(m.group(1))
        return local_to_global.get(local, -(local + 1))
    if file_rank is not None and not _AGENT_LINE.match(text):
        return file_rank
    return None


def _ev(rel: str, no: int, text: str) -> Evidence:
    from debug_training_logs.models import Evidence

    return Evidence(file=rel, line=no, text=cut(text))


def sink_factory(keep: LineKeep | None = None) -> SinkFactory:
    """The per-file sink of the launcher scan, for a caller's own scan (``scan_job(root, PATTERNS, sink_factory())``
    then :func:`from_job_scan`): the launcher facts ride in a scan the caller runs anyway."""
    return functools.partial(_LineSink, keep=keep)


EarlyResult = tuple[Any, Any]
"""One file's launcher result unpacked as it arrived (:func:`early_result`): (:func:`_result`'s value, the file's
boundaries or None)."""


def from_job_scan(job: JobScan, early: dict[int, EarlyResult] | None = None) -> LauncherFacts:
    """The facts from a :func:`~debug_training_logs.analysis.inventory.scan_job` run with :data:`PATTERNS` and
    :func:`sink_factory`. ``early``: files' results already unpacked (:func:`early_result`, by index in the scan,
    while the scan's workers read the other files); each is let go as it is read, the others are unpacked here."""
    files = job.inventory.files  # the scan's rank collection per file, without unpacking each file's scan
    got = early if early is not None else {}
    pre = [got.pop(j, None) for j in range(len(files))]
    items = (
        (f.rel, p[0] if p is not None else _result(job, j), f.line_ranks)
        for j, (f, p) in enumerate(zip(files, pre, strict=True))
    )
    local_maps = {f.rel: f.local_ranks for f in files if f.local_ranks}
    facts = _facts(items, len(files), local_maps)  # one file's result at a time (a 10,240-rank job's: ~25 MB)
    for j, f in enumerate(files):
        p = pre[j]
        if p is not None:
            found = p[1]
        elif result_size(job, j) > 5:  # refined in the worker (attempts.refine_launcher)
            found = result_item(job, j, 5)
        else:
            found = None
        if found is not None:
            facts.file_boundaries[f.rel] = found
    return facts


def early_result(fr: FileResult) -> EarlyResult:
    """One file's result as :func:`from_job_scan` reads it, unpacked from the scan's share of that file."""
    first = file_result_item(fr, 0)
    if first is None:
        return None, None
    p = fr.sink_result
    n = p.count if p.items else len(unpack(p))
    parsed = file_result_item(fr, 6) if n > 6 else None  # parsed in the worker
    result = first, file_result_item(fr, 1), file_result_item(fr, 2), None, file_result_item(fr, 4), parsed
    return result, file_result_item(fr, 5) if n > 5 else None


def file_agent(rel: str, result: Any) -> AgentFacts:
    """The facts of one file's agent alone, from its sink's result (what the attempt split reads in the worker that
    scanned the file: no rank's fate is worked out)."""
    lines, file_tables = result[0], result[4]
    parsed: _Parsed = result[5] if len(result) > 5 and result[5] is not None else parse_lines(lines, file_tables, rel)
    return _agent(rel, lines, parsed[1], file_tables)[0]


def _result(job: JobScan, j: int) -> Any:
    """File ``j``'s :meth:`_LineSink.finish` result without the hits kept for :func:`for_attempt` (not unpacked)."""
    first = result_item(job, j, 0)
    if first is None:
        return None
    parsed = result_item(job, j, 6) if result_size(job, j) > 6 else None  # parsed in the worker
    return first, result_item(job, j, 1), result_item(job, j, 2), None, result_item(job, j, 4), parsed


def for_attempt(job: JobScan, keep: LineKeep) -> LauncherFacts | None:
    """The facts of the lines ``keep`` admits (one attempt's), derived from the whole job's launcher scan
    (:func:`consumer`) by replaying each file's hits, in order, into a sink with ``keep``: the same facts a scan
    with ``keep`` gives (the filter sees the same lines in the same order), without reading the files again. None
    when some file had more hits than were remembered (:data:`MAX_REPLAY_HITS`): then scan with ``keep``."""
    items: list[tuple[str, Any, set[int]]] = []
    for s, r in zip(job.files, job.caller_results, strict=True):
        if r is None:
            items.append((s.file.rel, None, s.ranks))
            continue
        hits = r[3]
        if hits is None:
            return None
        sink = _LineSink(_Rel(s.file.rel), keep)
        for no, text, how in hits:
            sink.on_hit(_REPLAY_IDS[how], no, text)
        items.append((s.file.rel, sink.finish(), s.ranks))
    return _facts(items, len(job.files), {f.rel: f.local_ranks for f in job.inventory.files if f.local_ranks})


_AGENT_EVENTS = (
    torchrun.SendingSignal,
    torchrun.WorkerFailed,
    torchrun.RestartDecision,
    torchrun.RendezvousResult,
    torchrun.RendezvousError,
    torchrun.StoreListenFailed,
    torchrun.StoreUnreachable,
    torchrun.GroupState,
    slurm.SlurmCancel,
    launchers.WorkerExit,
)
"""The torchrun (and SLURM cancel) events :func:`_facts` reads (any other parse of a line is dropped)."""

_Parsed = tuple[dict[int, int], list[tuple[int, int | None, Any, int | None, Any, bool]]]


def parse_lines(
    lines: list[tuple[int, str]], file_tables: list[torchrun.ChildFailedTable], rel: str | None = None
) -> _Parsed:
    """What :func:`_facts` reads of each kept line of one file, parsed once: (the file's local -> global ranks, per
    line that names an agent PID, a torchrun event or a global rank, in order: (its index in ``lines``, agent PID,
    torchrun event, global rank, gloo mismatch or victim error, an own exception line)); the other lines say nothing
    :func:`_facts` reads (most kept lines: a 1,024-rank job's 7,000 lines have ~400 such). Run in the scan's worker
    (:func:`~debug_training_logs.analysis.attempts.refine_launcher`), or here for a replayed attempt."""
    local_to_global: dict[int, int] = {}
    for _no, text in lines:  # '[default1]:[rank3]: ...' pairs a tee prefix with its global rank
        lm = tee_prefix(text)
        gm = GLOBAL_RANK.search(text) if lm is not None else None
        if lm and gm:
            local_to_global.setdefault(int(lm.group(1)), int(gm.group(1)))
    tabled: dict[int, set[int]] = {}
    for t in file_tables:
        for f in t.failures:
            tabled.setdefault(f.local_rank, set()).add(f.rank)
    for local, ranks in tabled.items():  # tables of several agents (one file) map a local rank alike: none of them
        if len(ranks) == 1:
            local_to_global[local] = next(iter(ranks))
        else:
            local_to_global.pop(local, None)
    # the processes the failure tables name: a record that names one (and the traceback right after it) is its rank's
    pid_rank = {f.pid: f.rank for t in file_tables for f in t.failures if f.pid is not None}
    named: tuple[int, int] | None = None  # (line number, rank) of the last record naming a tabled process
    per_line: list[tuple[int, int | None, Any, int | None, Any, bool]] = []
    file_rank = file_name_rank(rel) if rel is not None else None
    quoted: int | None = None  # mp.spawn quotes process N's traceback: its lines are rank N's
    agent_tb = False  # inside the launcher's own traceback (torchrun's frames): no worker's lines
    for k, (no, text) in enumerate(lines):
        if (sh := launchers.SPAWN_ERROR_HEADER.match(text)) is not None:
            quoted = int(sh.group("p"))
            continue
        agent_line = agent_tb
        if text.startswith("Traceback (most recent call last)"):
            agent_tb = agent_line = k + 1 < len(lines) and _LAUNCHER_FRAME.search(lines[k + 1][1]) is not None
            if not agent_tb and named is not None and named[0] == no - 1:
                quoted = named[1]  # the traceback right after a record naming a worker process is that process's
        elif agent_tb and not text.startswith((" ", "\t")):
            agent_tb = False  # its exception line ends it: the agent's (its events are read below), no rank's
        pm = _AGENT_LINE.match(text)
        ev: object = torchrun.parse_line(text)
        if ev is None:
            ev = slurm.parse_cancel(text)
        if ev is None:
            ev = launchers.parse_line(text)
        rank = None if agent_line else _rank_of(text, local_to_global, file_rank)
        if rank is None and pid_rank and pm is None and ev is None and not agent_line:
            rank = _named_process_rank(text, pid_rank)
            named = (no, rank) if rank is not None else named
        if rank is None and quoted is not None:
            rank = quoted
            if not text.startswith((" ", "\t", "Traceback")):  # the exception line ends the quoted traceback
                quoted = None
        g: Any = None
        own = False
        if rank is None and "Detected mismatch" in text:  # a pasted DETAIL report: its fingerprint names the rank
            dm = gloo.parse_line(text)
            if isinstance(dm, gloo.CollectiveMismatch):
                rank = dm.first.rank
        if rank is None and "op.preamble" in text:  # an abort's message no rank prefix names: the aborted rank's
            g = gloo.parse_line(text)
            g = g if isinstance(g, gloo.GlooError) and g.kind == "size_mismatch" else None
        elif rank is not None:
            g = gloo.parse_line(text)
            if not isinstance(g, gloo.CollectiveMismatch | gloo.GlooError):
                g = None
                own = bool(_EXC_LINE.search(text)) and not text.rstrip().endswith("Traceback (most recent call last):")
                own = own and not _VICTIM_EXCEPTIONS.search(text) and not is_source_line(text)
        pid = int(pm.group(1)) if pm else None
        event = ev if isinstance(ev, _AGENT_EVENTS) else None
        if pid is not None or event is not None or rank is not None or g is not None or _JOB_START_RX.search(text):
            per_line.append((k, pid, event, rank, g, own))
    return local_to_global, per_line


def _named_process_rank(text: str, pid_rank: dict[int, int]) -> int | None:
    """The rank of the worker process ``text`` names (:data:`~debug_training_logs.formats.prefixes.PROCESS_ID`), when
    a failure table ties that pid to a rank."""
    if "pid" not in text and "PID" not in text and "process '" not in text and "Pid" not in text:
        return None
    m = _PROCESS_ID.search(text)
    return pid_rank.get(int(m.group(1))) if m else None


def _agent(
    rel: str, lines: list[tuple[int, str]], per_line: list[Any], file_tables: list[torchrun.ChildFailedTable]
) -> tuple[AgentFacts, dict[int, int]]:
    """One file's agent facts from its parsed lines (:func:`parse_lines`), and the PIDs its agent SIGTERMed (each
    with the line that says so)."""
    agent = AgentFacts(file=rel, node=_node_of(rel, file_tables))
    torn_pids: dict[int, int] = {}
    for k, pid, ev, _rank, _g, _own in per_line:
        no, text = lines[k]
        if pid is not None:
            agent.pids.add(pid)
        if ev is None:  # (most kept lines are a rank's)
            if ("NCCL" in text or "_COUNT" in text or "elastic_operator" in text or "OMP_NUM" in text) and (
                _JOB_START_RX.search(text)
            ):
                agent.starts.append(no)
            continue
        if isinstance(ev, torchrun.SendingSignal) and ev.signal == "SIGTERM":
            torn_pids.setdefault(ev.pid, k)
            agent.sigterms.setdefault(-1 if pid is None else pid, set()).add(ev.pid)
            agent.teardowns.append(no)
        elif isinstance(ev, torchrun.WorkerFailed):
            agent.worker_failed.append((no, ev))
        elif isinstance(ev, torchrun.RestartDecision):
            agent.restarts.append(_ev(rel, no, text))
        elif isinstance(ev, torchrun.RendezvousResult):
            agent.restart_counts.append((no, ev.restart_count))
        elif isinstance(ev, torchrun.RendezvousError):
            agent.rendezvous_errors.append(_ev(rel, no, text))
        elif isinstance(ev, torchrun.StoreListenFailed):
            agent.listen_failures.append(_ev(rel, no, text))
        elif isinstance(ev, torchrun.StoreUnreachable) and len(agent.unreachable) < 8:
            agent.unreachable.append((ev.host, _ev(rel, no, text)))
        elif isinstance(ev, launchers.WorkerExit):
            agent.worker_exits.append((_ev(rel, no, text), ev))
        elif isinstance(ev, slurm.SlurmCancel):
            if ev.may_requeue:
                agent.requeues.append((no, ev))
        elif isinstance(ev, torchrun.GroupState) and ev.state == "succeeded":
            agent.succeeded.append(_ev(rel, no, text))
    return agent, torn_pids


def _other_launchers(agents: list[AgentFacts], tables: list[tuple[str, torchrun.ChildFailedTable]], fate: Any) -> None:
    """Workers' exits as mp.spawn, srun or DeepSpeed report them, for the ranks no torchrun table names. srun's task
    ids are ranks only when srun started each worker itself: with torchrun agents in the job they are nodes."""
    torchrun_agents = bool(tables) or any(a.pids or a.teardowns or a.worker_failed for a in agents)
    for a in agents:
        for e, wx in a.worker_exits:
            if wx.per_task and torchrun_agents:
                continue
            for r in sorted(wx.ranks):
                rf = fate(r)
                if rf.exitcode is None:
                    rf.exitcode, rf.signal, rf.exit_evidence = wx.exitcode, wx.signal, e
                    rf.torn_down = wx.exitcode == -15


def _owner_of_abort(unranked: list[Evidence], fates: dict[int, RankFate]) -> None:
    """A gloo size-mismatch abort no line names the rank of belongs to the one rank that died of SIGABRT with no
    error of its own (gloo's enforce throws in a thread: ``terminate called``, then the abort)."""
    aborted = [rf for rf in fates.values() if rf.signal == "SIGABRT" and rf.comm_error is None]
    if unranked and len(aborted) == 1:
        aborted[0].comm_error, aborted[0].comm_kind = unranked[0], "size_mismatch"


def _facts(
    items: Iterable[tuple[str, Any, set[int]]], n_files: int, local_maps: dict[str, dict[int, int]] | None = None
) -> LauncherFacts:
    fates: dict[int, RankFate] = {}
    agents: list[AgentFacts] = []
    tables: list[tuple[str, torchrun.ChildFailedTable]] = []
    mismatches: list[tuple[int, gloo.CollectiveMismatch, Evidence]] = []
    unranked: list[Evidence] = []
    benign: Counter[str] = Counter()
    truncated = 0
    inline: dict[str, set[int]] = {}

    def fate(r: int) -> RankFate:
        return fates.setdefault(r, RankFate(rank=r))

    for rel, result, inline_ranks in items:
        if result is None:
            continue
        lines, b, dropped, _hits, file_tables = result[:5]
        parsed: _Parsed = (
            result[5] if len(result) > 5 and result[5] is not None else parse_lines(lines, file_tables, rel)
        )
        benign.update(b)
        truncated += dropped
        if inline_ranks:
            inline[rel] = inline_ranks
        local_to_global, per_line = parsed
        agent, torn_pids = _agent(rel, lines, per_line, file_tables)
        agents.append(agent)
        for t in file_tables:
            tables.append((rel, t))
        frames: dict[int, list[tuple[str, int, str]]] = {}  # per rank: the frames of its current traceback
        file_local = (local_maps or {}).get(rel, {})
        agent.local_to_global = {**file_local, **local_to_global}
        for k, _pid, _event, line_rank, g, own in per_line:
            rank = file_local.get(-line_rank - 1) if line_rank is not None and line_rank < 0 else line_rank
            if rank is None:
                if g is not None and len(unranked) < MAX_ERRORS_PER_RANK:
                    unranked.append(_ev(rel, *lines[k]))
                continue
            no, text = lines[k]
            if "Traceback (most recent call last)" in text:
                frames[rank] = []
                continue
            fm = _FRAME.search(text) if 'File "' in text else None
            if fm is not None:
                frames.setdefault(rank, []).append((fm.group("file"), int(fm.group("line")), fm.group("func")))
                continue
            if g is not None and isinstance(g, gloo.GlooError) and g.victim and fate(rank).collective is None:
                fate(rank).collective = collective_call(frames.get(rank, []))
            if g is not None:  # a DETAIL mismatch report or a gloo transport error (parse_lines keeps no other)
                if isinstance(g, gloo.CollectiveMismatch):
                    mismatches.append((rank, g, _ev(rel, no, text)))
                    fate(rank).mismatch = g
                    continue
                if isinstance(g, gloo.GlooError):
                    rf = fate(rank)
                    if len(rf.errors) < MAX_ERRORS_PER_RANK:
                        rf.errors.append(_ev(rel, no, text))
                    # a size mismatch the rank received says most of what went wrong: it wins over a closed peer
                    better = (g.kind == "timeout" and not rf.timed_out) or g.kind == "size_mismatch"
                    if rf.comm_error is None or (better and rf.comm_kind != "size_mismatch"):
                        rf.comm_error, rf.comm_kind = _ev(rel, no, text), g.kind
                    rf.timed_out = rf.timed_out or g.kind == "timeout"
                    continue
            if own:
                rf = fate(rank)
                rf.own_error = _ev(rel, no, text)  # the last one wins: the outermost exception line
                if len(rf.errors) < MAX_ERRORS_PER_RANK:
                    rf.errors.append(rf.own_error)
        text_at = dict(lines) if file_tables else {}
        # the agent's line and the table's row of one failure name the same process: paired by its pid (several
        # agents in one file number their workers alike), else by the file's local -> global map
        by_pid = {w.pid: (no, w) for no, w in agent.worker_failed}
        by_rank = {
            local_to_global[w.local_rank]: (no, w) for no, w in agent.worker_failed if w.local_rank in local_to_global
        }
        for t in file_tables:
            for f in t.failures:
                rf = fate(f.rank)
                rf.node = rf.node or f.host
                if rf.exitcode is None or f.root_cause:
                    rf.exitcode, rf.signal = f.exitcode, f.signal
                    rf.torn_down = f.exitcode == -15 and (f.pid in torn_pids or not torn_pids)
                    rf.root_cause_entry = f.root_cause
                    # the agent's own 'failed (exitcode: ...)' line carries a time; the table's field does not
                    agent_line = by_pid.get(f.pid) if f.pid in by_pid else by_rank.get(f.rank)
                    if agent_line is not None and agent_line[1].exitcode == f.exitcode:
                        rf.exit_evidence = _ev(rel, agent_line[0], text_at[agent_line[0]])
                    elif rf.torn_down and f.pid in torn_pids:  # the agent's timed 'Sending process P closing signal'
                        no, text = lines[torn_pids[f.pid]]
                        rf.exit_evidence = _ev(rel, no, text)
                    elif f.exit_line in text_at:
                        rf.exit_evidence = _ev(rel, f.exit_line, text_at[f.exit_line])
    _other_launchers(agents, tables, fate)
    _owner_of_abort(unranked, fates)
    return LauncherFacts(
        fates=dict(sorted(fates.items())),
        agents=agents,
        tables=tables,
        mismatches=mismatches,
        unranked_size_mismatches=unranked,
        benign=dict(benign),
        files=n_files,
        truncated_lines=truncated,
        inline_rank_files=inline,
    )
