"""Attempts: where one run of the workers ends and the next begins (elastic restarts, requeues, new rendezvous).

A job's logs can hold several attempts: torchrun ``--max-restarts`` restarts the worker group after a failure (or
after another node's restart), SLURM requeues the job into the same files, and a new rendezvous starts the workers
again. Diagnosing the last failure while the first one was the cause (or the other way round) is a classic mistake,
so every line is given to one attempt.

Boundaries, most direct first:

1. ``attempt_N/`` in a file's path (torchrun ``--log-dir``): the whole file is attempt N.
2. A SLURM cancel that may requeue the job (``DUE TO JOB REQUEUE``/``PREEMPTION``/``NODE FAILURE``) followed, in the
   same file, by lines only a starting job writes (launcher, rendezvous, NCCL or framework init): the batch script ran
   again and appended its output (``--open-mode=append``).
3. In a torchrun agent's output: the rendezvous result ``restart_count=N`` (INFO) starts attempt N; without INFO,
   an agent stop (its ``Sending process P closing signal`` / ``failed (exitcode: ...)`` lines) that is followed by
   more worker output (``[defaultN]:`` / ``[rankN]`` lines) or ``Starting worker group`` ends an attempt. A decision
   to restart that no worker follows (the rendezvous was closed) is not an attempt. The agents' stops are numbered
   across files by time (they cluster within seconds), since each agent may log a different number of rounds.

Files without a boundary of their own (a node's stdout when the agent writes to stderr) are split by time: a line
belongs to the attempt whose window (from the agents' boundary times) holds its time; an untimed line goes with the
previous timed line of its file.

Pure and MCP-free; reads only the lines it is pointed at (:func:`~debug_training_logs.logs.scan_lines.lines_at`, from
the scan's nearest checkpoint), from launcher facts a caller's shared scan produced (:func:`split`'s
``launcher_facts``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from debug_training_logs.analysis import launcher
from debug_training_logs.analysis.inventory import LineKeep, consumer_for, scan_consumers, scan_job
from debug_training_logs.analysis.launcher import AgentFacts, LauncherFacts, file_agent, from_job_scan, parse_lines
from debug_training_logs.errors import UserInputError
from debug_training_logs.formats import torchrun
from debug_training_logs.formats.prefixes import AGENT_HEADER, GLOBAL_RANK, LOCAL_RANK_TAG, RANK_TAG, RANK_TAG_END
from debug_training_logs.formats.progress import step_number
from debug_training_logs.formats.timestamps import parse_wall_time
from debug_training_logs.logs.discovery import LogFile, discover
from debug_training_logs.logs.scan_cache import Consumer
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.logs.scan_types import Checkpoints, FileScan
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Evidence

_ATTEMPT_DIR = re.compile(r"(?:^|/)attempt_(\d+)/")
_WORKER_LINE = re.compile("^" + LOCAL_RANK_TAG + "|" + RANK_TAG + RANK_TAG_END)
_AGENT_OWN = re.compile(rf"^{AGENT_HEADER}\d+ |^\s*(?:Traceback|File |raise |\^)|ChildFailedError")
_AGENT_PID = re.compile(rf"^{AGENT_HEADER}(\d+) ")
_STARTING = re.compile(r"\] (?:\[\w+\] )?Starting worker group")
_FRESH_START = re.compile(
    r"Starting worker group|Starting elastic_operator|Setting OMP_NUM_THREADS environment variable"
    r"|NCCL INFO NCCL version|NCCL INFO Bootstrap|Initializing distributed: GLOBAL_RANK|initializing torch distributed"
    r"|Rendezvous complete for workers|MASTER_ADDR=|torch\.distributed\.init_process_group"
    r"|SLURM_RESTART_COUNT|TORCHELASTIC_RESTART_COUNT"
)
"""Lines a job writes only while it starts (launcher, rendezvous, NCCL or framework init): after a SLURM cancel, one
of them shows that the requeued job ran again (other nodes' last lines may follow a cancel in a shared file)."""
SLURM_WHY = "SLURM put the job back in the queue"
LOOKAHEAD_LINES = 400
"""Lines read after an agent stop to see whether workers started again (a new attempt)."""
DEFAULT_YEAR = 2000


@dataclass(repr=False)
class Boundary:
    """Where an attempt ends in one file: the last line of attempt ``index`` (inclusive) and its time."""

    file: str
    line: int
    index: int
    time: datetime | None
    why: str
    text: str


@dataclass(repr=False, eq=False)
class Attempt:
    """One run of the workers: its index, time window, the ranks seen in it, and how it ended."""

    index: int
    start: datetime | None
    end: datetime | None
    outcome: str
    """``failed`` (a worker failed, the agent stopped it, or its node failed), ``requeued`` (SLURM put the job back
    in the queue: a requeue or a preemption, not a failure of its own), ``succeeded`` (the agents said so),
    ``unknown``."""
    ranks: set[int] = field(default_factory=set)
    evidence: list[Evidence] = field(default_factory=list)
    """The lines that end (or start) it."""


@dataclass(repr=False, eq=False)
class Attempts:
    """A job's attempts and how lines are assigned to them."""

    attempts: list[Attempt]
    boundaries: dict[str, list[Boundary]]
    """Per file with boundaries of its own: where each attempt ends."""
    dir_attempt: dict[str, int]
    """Files whose path says their attempt (``attempt_N/``)."""
    method: str

    @property
    def count(self) -> int:
        return len(self.attempts)

    def first_failed(self) -> int | None:
        return next((a.index for a in self.attempts if a.outcome == "failed"), None)

    def choose(self, asked: int | None) -> int | None:
        """The attempt to look at: ``asked``, else the first failed one when there are several; None for a job with
        one attempt. An attempt the logs do not have is a :class:`~debug_training_logs.errors.UserInputError`."""
        chosen = asked if asked is not None else self.first_failed() if self.count > 1 else None
        if chosen is not None and not 0 <= chosen < self.count:
            raise UserInputError(
                f"attempt {chosen} does not exist: the logs show {self.count} attempt(s) (0-{self.count - 1})."
            )
        return chosen if self.count > 1 else None

    def keeper(self, index: int) -> AttemptFilter:
        """A picklable filter of (file, line, text) for attempt ``index``."""
        windows = {a.index: (a.start, a.end) for a in self.attempts}
        return AttemptFilter(
            index,
            {f: [(b.line, b.index) for b in bs] for f, bs in self.boundaries.items()},
            dict(self.dir_attempt),
            windows,
        )


@dataclass(eq=False)
class AttemptFilter:
    """Keeps the lines of one attempt: by the file's own boundaries, its ``attempt_N/`` path, or by time."""

    index: int
    ends: dict[str, list[tuple[int, int]]]
    dir_attempt: dict[str, int]
    windows: dict[int, tuple[datetime | None, datetime | None]]
    _last: dict[str, int] = field(default_factory=dict)

    def attempt_of(self, rel: str, line_no: int, text: str) -> int:
        if rel in self.dir_attempt:
            return self.dir_attempt[rel]
        ends = self.ends.get(rel)
        if ends is not None:
            for end_line, idx in ends:
                if line_no <= end_line:
                    return idx
            return ends[-1][1] + 1 if ends else 0
        t = parse_wall_time(text)
        if t is None:
            return self._last.get(rel, 0)
        when = t.with_year(t.year or DEFAULT_YEAR)
        idx = 0
        for i, (start, _end) in sorted(self.windows.items()):
            if start is not None and when >= _in_year(start, when.year):
                idx = i
        self._last[rel] = idx
        return idx

    def __call__(self, rel: str, line_no: int, text: str) -> bool:
        return self.attempt_of(rel, line_no, text) == self.index


def _pid_of(text: str) -> str | None:
    m = _AGENT_PID.match(text)
    return m.group(1) if m else None


def _in_year(t: datetime, year: int) -> datetime:
    """``t`` in ``year`` (to compare a time whose line states no year with one whose line does); 29 February of a
    year without one is the 28th."""
    try:
        return t.replace(year=year)
    except ValueError:
        return t.replace(year=year, day=28)


def _time(text: str) -> datetime | None:
    t = parse_wall_time(text)
    return t.with_year(t.year or DEFAULT_YEAR) if t is not None else None


def _stop_candidates(agents: Iterable[AgentFacts]) -> dict[str, list[tuple[int, str, str]]]:
    """Per agent file: lines where the agent stopped its workers or started a new round (line, why, text)."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    for a in agents:
        cands: list[tuple[int, str, str]] = []
        # a rendezvous round with a higher restart count starts a new round of workers (a worker's own start-up line
        # that repeats the count it was given is not a round)
        seen = a.restart_counts[0][1] if a.restart_counts else 0
        for no, n in a.restart_counts[1:]:
            if n > seen:
                cands.append((no - 1, f"a new rendezvous (restart_count={n})", ""))
                seen = n
        for e in a.restarts:
            cands.append((e.line, "the agent restarts the worker group", e.text))
        for no, w in a.worker_failed:
            cands.append((no, f"a worker failed (exitcode {w.exitcode})", ""))
        for no in a.teardowns:
            cands.append((no, "the agent stops its workers (SIGTERM)", ""))
        for no, c in a.requeues:
            cands.append((no, f"{SLURM_WHY} (cancelled due to {c.reason})", ""))
        stops = [no for no, _why, _t in cands]
        for no in _restarts_in_file(a.starts):
            if any(no - LOOKAHEAD_LINES <= x < no for x in stops):
                continue  # the start that follows an agent's stop or a SLURM cancel: that one is the boundary
            cands.append((no - 1, f"{SLURM_WHY} ({RESTARTED_WHY})", ""))
        out[a.file] = sorted(cands)
    return out


RESTARTED_WHY = "the job starts again in the same file"
START_CLUSTER_GAP = 200
"""Start-up lines of one start (every agent's banner, every rank's NCCL version line) lie within this many lines."""


def _restarts_in_file(starts: list[int]) -> list[int]:
    """The first line of each start of the job after the first one in a file (start-up lines clustered)."""
    out: list[int] = []
    prev: int | None = None
    for no in sorted(starts):
        if prev is not None and no - prev > START_CLUSTER_GAP:
            out.append(no)
        prev = no
    return out


def split(logs_dir: str | Path) -> Attempts:
    """The attempts of the job under ``logs_dir`` (one attempt when nothing shows a restart)."""
    files, _ = discover(logs_dir)
    return split_files(files, gather_launcher(logs_dir, files))


def split_files(files: Sequence[LogFile], lf: LauncherFacts) -> Attempts:
    """The attempts of the job whose log files are ``files`` and launcher facts ``lf`` (gathered from them)."""
    from debug_training_logs.models import Evidence

    by_rel = {f.rel: f for f in files}
    dir_attempt = {f.rel: int(m.group(1)) for f in files if (m := _ATTEMPT_DIR.search("/" + f.rel))}
    boundaries: dict[str, list[Boundary]] = {}
    for rel, cands in _stop_candidates(lf.agents).items():
        if rel in dir_attempt or rel not in by_rel or not cands:
            continue
        early = lf.file_boundaries.get(rel)
        found = early[1] if early is not None and early[0] == cands else _file_boundaries(by_rel[rel], cands)
        if found:
            boundaries[rel] = found
    _number_by_time(boundaries)
    n = max([b.index + 1 for bs in boundaries.values() for b in bs] + [i for i in dir_attempt.values()] + [0]) + 1
    attempts = [Attempt(i, None, None, "unknown") for i in range(n)]
    for bs in boundaries.values():
        for bd in bs:
            a = attempts[bd.index]
            put_back = SLURM_WHY in bd.why and "NODE FAILURE" not in bd.why  # requeued or preempted, not failed
            a.outcome = "requeued" if put_back and a.outcome in ("unknown", "requeued") else "failed"
            a.evidence.append(Evidence(file=bd.file, line=bd.line, text=bd.text))
            if bd.time is not None and (a.end is None or bd.time > a.end):
                a.end = bd.time
    for i in range(1, n):
        attempts[i].start = attempts[i - 1].end
    _outcomes(attempts, lf, boundaries, dir_attempt)
    for bs in boundaries.values():
        for bd in bs:
            a = attempts[bd.index]
            if RESTARTED_WHY in bd.why and a.outcome == "requeued" and a.ranks:
                a.outcome = "failed"  # no cancel line put it back: its own workers' errors ended it
    whys = {SLURM_WHY in b.why for bs in boundaries.values() for b in bs}
    method = (
        "attempt_N directories"
        if dir_attempt and not boundaries
        else " and ".join(
            m
            for m, on in (("torchrun agent stops and restarts", False in whys), ("SLURM requeues", True in whys))
            if on
        )
        if boundaries
        else "no restart seen"
    )
    return Attempts(attempts, boundaries, dir_attempt, method)


def _worker_lines(lines: list[str]) -> list[str]:
    return [
        t
        for t in lines
        if (t[:1] == "[" or "[rank" in t)  # (what each branch of the regex needs: most lines skip it)
        and _WORKER_LINE.search(t)
        and not _AGENT_OWN.search(t)
    ]


_DYING = re.compile(
    r"Traceback|File \"|Error|Exception|[Ss]ignal|SIG[A-Z]+|KeyboardInterrupt|[Tt]erminat|[Ww]arn|^\S*\s*\^|exit"
)
"""What a worker writes while it dies after its agent's SIGTERM (its traceback, the signal, warnings)."""
_WORKER_PREFIX = re.compile(f"^(?:{LOCAL_RANK_TAG})?(?:{GLOBAL_RANK.pattern})?")
FLUSH_AFTER_STOP = timedelta(seconds=2)
"""A worker's ordinary line this soon after its agent stopped it may be output it flushed while dying."""


_AGENT_ENDS = re.compile(r"ChildFailedError|Rendezvous\w*(?:Closed|Connection|Timeout)Error|^\S+ FAILED\s*$")
"""The agent's own end (its ChildFailedError report, a closed rendezvous): no worker of its runs after it."""
_NOT_WORKER = re.compile(r"^(?:slurmstepd|srun|sbatch|salloc)\b|^\s")


def _workers_start_over(before: list[str], after: list[str], stop: datetime | None) -> bool:
    """Whether the worker lines after an agent's stop, and before the agent's own end, show a new run of the workers:
    a start-up line, a step counter below the one reached before the stop, or ordinary work (not the output of a
    dying worker, and not within :data:`FLUSH_AFTER_STOP` of the stop): prefixed with its local or global rank, or
    any other line of the file (workers that write without a prefix) timed after that."""
    end = next((k for k, t in enumerate(after) if _AGENT_ENDS.search(t)), len(after))
    after = after[:end]
    mine = _worker_lines(after)
    if any(_FRESH_START.search(t) for t in mine):
        return True
    steps_after = [n for t in mine if (n := step_number(t)) is not None]
    if steps_after:  # (the lines before are read only then: a window of them per stop, in every file)
        steps_before = [n for t in _worker_lines(before) if (n := step_number(t)) is not None]
        if steps_before and min(steps_after) < max(steps_before) - 1:
            return True
    for t in mine:
        body = _WORKER_PREFIX.sub("", t, count=1)
        if _DYING.search(body) or body.startswith(("  ", "\t")):  # (a traceback's frames and code are indented)
            continue
        when = _time(t)
        if when is not None and stop is not None and _in_year(when, stop.year) <= stop + FLUSH_AFTER_STOP:
            continue
        return True
    if stop is None:
        return False
    late = stop + FLUSH_AFTER_STOP
    return any(
        not _AGENT_OWN.search(t)
        and not _NOT_WORKER.search(t)
        and not _DYING.search(t)
        and (when := _time(t)) is not None
        and _in_year(when, stop.year) > late
        for t in after
    )


def _worker_pids(lines: list[str], agent: str | None) -> set[int]:
    """The worker processes that agent ``agent``'s lines of ``lines`` name as it stops them (``Sending process P
    closing signal``, ``failed (exitcode: X) local_rank: L (pid: P)``)."""
    out: set[int] = set()
    for t in lines:
        if ("closing signal" in t or "(pid: " in t) and (agent is None or _pid_of(t) == agent):
            ev = torchrun.parse_line(t)
            if isinstance(ev, torchrun.WorkerFailed | torchrun.SendingSignal):
                out.add(ev.pid)
    return out


def _new_worker_group(before: list[str], after: list[str], agent: str | None) -> bool:
    """Whether the agent's stop after ``before`` is followed, before the agent's own end, by a stop of worker
    processes none of which it had stopped then: a new group of workers ran in between."""
    end = next((k for k, t in enumerate(after) if _AGENT_ENDS.search(t)), len(after))
    stopped, later = _worker_pids(before, agent), _worker_pids(after[:end], agent)
    return bool(stopped) and bool(later) and not stopped & later


def _one_burst(prev: int, no: int, text: dict[int, str], *, new_workers: bool) -> bool:
    """Whether an agent's stop candidate at line ``no`` continues the burst whose last line is ``prev``: a few lines
    apart, or timed within :data:`FLUSH_AFTER_STOP` of each other (dying workers' output, tee'd late, can come
    between the agent's lines). Not when it stops ``new_workers`` (processes the burst did not name) seconds later:
    the restarted group failed at once (the same workers stopped again, SIGKILL after SIGTERM, are one stop)."""
    before, now = _time(text.get(prev, "")), _time(text.get(no, ""))
    if before is None or now is None:
        return no - prev <= 8
    now = _in_year(now, before.year)  # (a glog header states no year; SLURM's lines do)
    if timedelta(0) <= now - before <= FLUSH_AFTER_STOP:
        return True
    return no - prev <= 8 and not new_workers


def _lookahead_end(line: int, last: int | None) -> int:
    """The last line read after a stop at ``line`` (``last``: the file's last line, when known)."""
    end = line + LOOKAHEAD_LINES
    return end if last is None or last > end else last


def _file_boundaries(
    lf: LogFile, cands: list[tuple[int, str, str]], checkpoints: Checkpoints | None = None
) -> list[Boundary]:
    """The attempt boundaries of one agent's file: each burst of stop candidates after which workers ran again (the
    lines after it are read back, from the scan's ``checkpoints`` of the file when given)."""
    rel = lf.rel
    # (no line after the file's last: with the scan's checkpoints, its newline count is known)
    last = checkpoints.newlines + 1 if checkpoints is not None else None
    wanted = {n for c, _, _ in cands for n in range(max(1, c - LOOKAHEAD_LINES), _lookahead_end(c, last) + 1)}
    text = lines_at(lf, wanted, checkpoints=checkpoints)
    # collapse a burst (SIGTERMs, the failure line, 'will restart') into its last line; a SLURM requeue in a burst
    # names it. One burst is the agent's lines a few apart, or timed within FLUSH_AFTER_STOP of each other: dying
    # workers' output (tee'd late) can come between the agent's SIGTERMs and its line saying which worker failed,
    # and no new round of workers starts that fast
    bursts: list[tuple[int, str]] = []
    stopped: set[int] = set()  # the worker processes the current burst names
    for no, why, _ in cands:
        named = _worker_pids([text.get(no, "")], None)
        if bursts and _one_burst(bursts[-1][0], no, text, new_workers=bool(named - stopped)):
            prev = bursts[-1][1]
            keep_prev = SLURM_WHY in prev or ("restart" in prev and SLURM_WHY not in why)
            bursts[-1] = (no, prev if keep_prev else why)
            stopped |= named
        else:
            bursts.append((no, why))
            stopped = set(named)
    # several agents appending to one file (sbatch's single slurm-<jobid>.out): another node's workers go on
    # logging after this agent stopped, so only the agent's own restart lines count there
    agents = {m.group(1) for b, _ in bursts if (m := _AGENT_PID.match(text.get(b, "")))}
    shared = len(agents) > 1
    found: list[Boundary] = []
    for b, why in bursts:
        after = [text[n] for n in range(b + 1, _lookahead_end(b, last) + 1) if n in text]
        pid = m.group(1) if (m := _AGENT_PID.match(text.get(b, ""))) else None
        if SLURM_WHY in why:
            # the batch script runs again from its start: only a starting job shows a requeue was run
            ran_again = any(_FRESH_START.search(t) is not None for t in after)
        else:
            started = any(
                "Starting worker group" in t  # (the literal every match holds: most lines skip the regex)
                and _STARTING.search(t) is not None
                and (not shared or _pid_of(t) == pid)
                for t in after
            )
            before = [text[n] for n in range(max(1, b - LOOKAHEAD_LINES), b) if n in text]
            # workers that start over: their start-up lines, or their step counter running again from below where it
            # stood; the output of workers dying after the agent's SIGTERM (tracebacks, a last flushed step) is the
            # end of this attempt, not a new one
            stop = next((t for n in range(b, 0, -1) if n in text and (t := _time(text[n])) is not None), None)
            workers = not shared and _workers_start_over(before, after, stop)
            # a launcher started anew (an agent PID not seen before the stop, with its start-up banner): the job was
            # run again into the file (a retry loop around torchrun, a resubmission appending to the same log)
            known = {p for t in before if (p := _pid_of(t)) is not None} | ({pid} if pid else set())
            relaunched = any(_FRESH_START.search(t) and (p := _pid_of(t)) is not None and p not in known for t in after)
            # the agent's next stop tears down other worker processes than this one did: it had started a new group
            # (what shows a restart when the agent logs no INFO and the workers' output does not reach the file)
            regrouped = _new_worker_group([*before, text.get(b, "")], after, pid)
            # a decision to restart is not an attempt until workers run again (a closed rendezvous ends the job)
            ran_again = started or workers or relaunched or regrouped
        if ran_again:
            times = [t for n in range(b, 0, -1) if n in text and (t := _time(text[n])) is not None][:1]
            found.append(Boundary(rel, b, len(found), times[0] if times else None, why, cut(text.get(b, ""))))
    return found


def refine_launcher(result: tuple[Any, ...], scan: FileScan) -> tuple[Any, ...]:
    """The launcher sink's result with items 5 and 6 added, in the worker that scanned the file
    (:attr:`~debug_training_logs.logs.scan_cache.Consumer.refine`): 5 (the file's stop candidates, the attempt
    boundaries after them), or None when its agent stopped nothing (:func:`split` then reads nothing back); 6 its
    kept lines parsed (:func:`~debug_training_logs.analysis.launcher.parse_lines`)."""
    parsed = parse_lines(result[0], result[4], scan.file.rel)
    cands = _stop_candidates([file_agent(scan.file.rel, (*result, parsed))]).get(scan.file.rel)
    found = (cands, _file_boundaries(scan.file, cands, scan.checkpoints)) if cands else None
    return (*result, found, parsed)


def launcher_consumer() -> Consumer:
    """The launcher scan as a consumer of the shared job scan (:func:`~debug_training_logs.analysis.inventory.
    scan_consumers`), refined in the worker that scanned each file (:func:`refine_launcher`): scanned with a tool's
    own patterns, its facts cost no pass of their own (and a second tool call in one server finds them in the scan
    cache)."""
    return consumer_for(launcher.PATTERNS, launcher.sink_factory(), refine=refine_launcher)


def gather_launcher(
    logs_dir: str | Path, files: Sequence[LogFile] | None = None, keep: LineKeep | None = None
) -> LauncherFacts:
    """:class:`~debug_training_logs.analysis.launcher.LauncherFacts` of every file under ``logs_dir`` from the shared
    job scan (the scan cache and the companions in force, see :mod:`~debug_training_logs.logs.scan_cache`);
    ``keep``: only those lines (one attempt's; prefer :func:`~debug_training_logs.analysis.launcher.for_attempt` on the
    whole job's scan, which reads nothing)."""
    if keep is None:
        me = launcher_consumer()  # the consumer the companions and the attempt split declare: one cache entry for all
        return from_job_scan(scan_consumers(logs_dir, [me], files=files)[me.key])
    return from_job_scan(scan_job(logs_dir, launcher.PATTERNS, launcher.sink_factory(), files=files, keep=keep))


CLUSTER_GAP_S = 5.0
"""Agents of one job stop within seconds of each other; boundaries further apart than this are different attempts."""


def _number_by_time(boundaries: dict[str, list[Boundary]]) -> None:
    """Give every boundary the index of its attempt across all files: the agents' stops cluster in time (each agent
    may log a different number of rounds); without times, each file's own order is used."""
    every = [b for bs in boundaries.values() for b in bs]
    if any(b.time is None for b in every):
        return  # some boundary has no time: keep the per-file order
    # a SLURM cancel writes its year, a torchrun agent's glog header none (DEFAULT_YEAR): compare them without it
    mixed = len({b.time.year for b in every if b.time is not None}) > 1

    def when(b: Boundary) -> datetime:
        assert b.time is not None
        return _in_year(b.time, DEFAULT_YEAR) if mixed else b.time

    cluster, last = -1, None
    for b in sorted(every, key=when):
        t = when(b)
        if last is None or (t - last).total_seconds() > CLUSTER_GAP_S:
            cluster += 1
        b.index, last = cluster, t
    for rel, bs in boundaries.items():  # one boundary per attempt and file: the last line of the burst
        keep: dict[int, Boundary] = {}
        for b in sorted(bs, key=lambda x: x.line):
            keep[b.index] = b
        boundaries[rel] = sorted(keep.values(), key=lambda x: x.line)


TABLE_AFTER_STOP = 60
"""Lines after an agent's stop within which its ChildFailedError table is that attempt's (the agent's traceback)."""


def _outcomes(
    attempts: list[Attempt], lf: LauncherFacts, boundaries: dict[str, list[Boundary]], dir_attempt: dict[str, int]
) -> None:
    last = attempts[-1]
    succeeded = [e for a in lf.agents for e in a.succeeded]
    failed_at_end = [
        (a.file, no)
        for a in lf.agents
        for no, _ in a.worker_failed
        if not any(b.line >= no for b in boundaries.get(a.file, []))
    ]
    # a failure table of an earlier attempt (before a boundary of its file, or printed just after the stop that
    # ended it: the agent's ChildFailedError follows its last 'failed (exitcode...' line) says nothing of the last
    tables = any(not any(b.line >= t.line - TABLE_AFTER_STOP for b in boundaries.get(rel, [])) for rel, t in lf.tables)
    if succeeded and not failed_at_end:
        last.outcome = "succeeded"
        last.evidence.append(succeeded[-1])
    elif failed_at_end or tables:
        last.outcome = "failed"
    keep = [AttemptFilter(a.index, {f: [(b.line, b.index) for b in bs] for f, bs in boundaries.items()},
                          dir_attempt, {x.index: (x.start, x.end) for x in attempts}) for a in attempts]  # fmt: skip
    if len(attempts) == 1:
        attempts[0].ranks = lf.ranks_seen()
        return
    for r, f in lf.fates.items():
        for ev in (*f.errors, f.exit_evidence):
            if ev is None:
                continue
            for a, k in zip(attempts, keep, strict=True):
                if k(ev.file, ev.line, ev.text):
                    a.ranks.add(r)
    for a in attempts[:-1]:
        if a.outcome == "unknown" and a.ranks:
            a.outcome = "failed"  # its ranks' errors are in it, and the workers were started again after it
