"""Flight-recorder dumps of a job: found, read safely, and compared across ranks.

Where dumps are looked for: below ``logs_dir`` (torch writes them wherever ``TORCH_FR_DUMP_TEMP_FILE`` points, often
beside the logs), in the directories next to it (a sibling ``fr/``, ``traces/`` ...), and in an explicit ``fr_dir``.
A file is a dump when its name is ``<prefix><rank>`` with a known default prefix, or when it ends in a rank number
and starts like a pickle (``0x80``) or a JSON dump (``{"``). Each is read by
:mod:`~debug_training_logs.formats.flight_recorder` (never the standard unpickler); a refused file is reported
with the reason, never silently dropped.

What the comparison says, per process group (the torchfrtrace analyzer's questions, answered from the last
entries only):

* each rank's last collective scheduled (enqueued by the CPU), started and completed;
* the collective the group waits in: the highest sequence number some rank scheduled and did not complete;
* the ranks that **never joined** it (their last scheduled collective is lower): the stragglers, named by the dumps;
* op / size / dtype **mismatches**: ranks that scheduled the same sequence number as a different op, with
  different sizes or dtypes (the odd ones out against the majority);
* the Python frames of the stuck call on the waiting ranks and of the last call on the ranks that never joined.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from debug_training_logs.formats import flight_recorder as fr

MAX_DUMP_FILES = 4096
"""Dumps read at most (one per rank; a larger job's dumps are sampled by rank order and the rest counted)."""
_DIGITS_END = re.compile(r"\d+(?:\.json|\.pkl|\.pickle)?$")
_SIBLING_NAMES = ("fr", "traces", "trace", "flight_recorder", "fr_dumps", "dumps", "nccl_trace")


@dataclass(frozen=True)
class DumpFile:
    """A dump found on disk: its path, the path shown to the user, and the global rank its name carries."""

    path: Path
    shown: str
    rank: int


@dataclass(frozen=True)
class Refused:
    """A dump file not read, and why (hostile opcode, size cap, not a dump)."""

    file: str
    reason: str


def _looks_like_dump(path: Path) -> int | None:
    name = path.name
    rank = fr.rank_from_name(name)
    if rank is not None:
        return rank
    m = _DIGITS_END.search(name)
    if not m:
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return None
    if head[:1] == b"\x80" or (head[:2] == b'{"' and any(k in head for k in (b"entries", b"version", b"pg_", b"comm"))):
        digits = re.search(r"(\d+)(?:\.json|\.pkl|\.pickle)?$", name)
        return int(digits.group(1)) if digits else None
    return None


def _walk(root: Path, shown_base: Path, out: dict[Path, DumpFile]) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file() or p in out:
                continue
            rank = _looks_like_dump(p)
            if rank is not None:
                try:
                    shown = p.relative_to(shown_base).as_posix()
                except ValueError:
                    shown = str(p)
                out[p] = DumpFile(p, shown, rank)


def find_dumps(logs_dir: str | Path | None, fr_dir: str | Path | None = None) -> list[DumpFile]:
    """Dump files in ``fr_dir``, below ``logs_dir`` and in its sibling dump directories (each file once).

    Paths are shown relative to ``logs_dir`` when below it, else relative to its parent (``../fr/...`` reads as
    ``fr/...``), else absolute."""
    found: dict[Path, DumpFile] = {}
    if fr_dir is not None:
        base = Path(fr_dir).resolve()
        _walk(base, base.parent, found)
    if logs_dir is not None:
        logs = Path(logs_dir).resolve()
        _walk(logs, logs, found)
        for name in _SIBLING_NAMES:
            sib = logs.parent / name
            if sib.is_dir() and sib != logs:
                _walk(sib, logs.parent, found)
    return sorted(found.values(), key=lambda d: (d.rank, d.shown))


# ---------------------------------------------------------------------------------------------------------------------
# Comparison


@dataclass
class RankState:
    """One rank's view of one group: last collective scheduled / started / completed (sequence numbers, None when
    the dump does not say) and the op of its last scheduled entry."""

    rank: int
    last_scheduled: int | None
    last_started: int | None
    last_completed: int | None
    last_op: str | None
    file: str


@dataclass
class Mismatch:
    """Ranks that scheduled the same collective (``seq``) differently from the majority: ``field`` says what differs
    (op, input_sizes, dtypes); ``odd`` are the ranks that differ, ``majority`` what most ranks ran."""

    seq: int
    field: str
    odd: dict[int, str]
    majority: str


@dataclass
class GroupFacts:
    """What the dumps say about one process group."""

    pg: str
    desc: str
    ranks: list[int]
    states: dict[int, RankState]
    waiting_seq: int | None = None
    waiting_op: str | None = None
    waiting_ranks: list[int] = field(default_factory=list)
    never_joined: list[int] = field(default_factory=list)
    no_dump: list[int] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    stuck_frames: list[str] = field(default_factory=list)
    straggler_frames: dict[int, list[str]] = field(default_factory=dict)


@dataclass
class FlightRecorderFacts:
    """Every dump read for a job, what was refused, and the per-group comparison."""

    dumps: list[fr.Dump]
    refused: list[Refused]
    groups: list[GroupFacts]
    versions: list[str]
    files_found: int

    @property
    def culprits(self) -> tuple[set[int], str]:
        """Ranks the dumps name (``never_joined`` or ``mismatch``), and which; empty when they name none."""
        odd = {r for g in self.groups for m in g.mismatches for r in m.odd}
        if odd:
            return odd, "mismatch"
        missing = {r for g in self.groups for r in g.never_joined}
        if missing:
            return missing, "never_joined"
        return set(), "none"

    def contradicts(self, culprits: set[int]) -> str | None:
        """Why the dumps contradict naming ``culprits`` as the cause of a hang, or None.

        A culprit that the dumps show *waiting in* the collective the others are stuck in (it joined) while other
        ranks never joined it, or a mismatch the dumps pin on other ranks, contradicts the claim."""
        named, how = self.culprits
        if not named or not culprits:
            return None
        if culprits & named:
            return None
        return (
            f"the flight-recorder dumps name rank(s) {sorted(named)} ({how.replace('_', ' ')}), not {sorted(culprits)}"
        )


def _frames(e: fr.Entry, limit: int = 6) -> list[str]:
    return [f"{f.name} ({f.filename}:{f.line})" for f in e.frames[:limit]]


def _signature(e: fr.Entry, what: str) -> str:
    if what == "op":
        return e.op
    if what == "input_sizes":
        return str(e.input_sizes)
    return ",".join(e.input_dtypes)


def compare(dumps: list[fr.Dump]) -> list[GroupFacts]:
    """Per process group, the states of every rank and who waits, who never joined, who mismatched."""
    by_pg: dict[str, dict[int, list[fr.Entry]]] = {}
    desc: dict[str, str] = {}
    for d in dumps:
        for e in d.entries:
            if e.is_p2p:
                continue
            by_pg.setdefault(e.pg, {}).setdefault(d.rank, []).append(e)
            desc.setdefault(e.pg, e.pg_desc)
    dump_ranks = {d.rank for d in dumps}
    out: list[GroupFacts] = []
    for pg, per_rank in sorted(by_pg.items()):
        members = _members(pg, dumps, set(per_rank))
        states: dict[int, RankState] = {}
        for d in dumps:
            entries = per_rank.get(d.rank)
            if entries is None and d.rank not in members:
                continue
            entries = entries or []
            st = _status_for(d, pg)
            last = max(entries, key=lambda e: e.seq) if entries else None
            scheduled = st.last_enqueued if st and st.last_enqueued is not None else (last.seq if last else None)
            completed = st.last_completed if st and st.last_completed is not None else _completed(entries)
            started = st.last_started if st and st.last_started not in (None, -1) else None
            states[d.rank] = RankState(d.rank, scheduled, started, completed, last.op if last else None, d.file)
        g = GroupFacts(pg=pg, desc=desc.get(pg, ""), ranks=sorted(members), states=states)
        g.no_dump = sorted(members - dump_ranks)
        pending = [
            s for s in states.values() if s.last_scheduled is not None and (s.last_completed or -1) < s.last_scheduled
        ]
        if pending:
            g.waiting_seq = max(s.last_scheduled for s in pending if s.last_scheduled is not None)
            g.waiting_ranks = sorted(s.rank for s in pending if s.last_scheduled == g.waiting_seq)
            g.never_joined = sorted(
                s.rank for s in states.values() if s.last_scheduled is not None and s.last_scheduled < g.waiting_seq
            )
            waiting_entries = [e for r in g.waiting_ranks for e in per_rank.get(r, []) if e.seq == g.waiting_seq]
            if waiting_entries:
                g.waiting_op = Counter(e.op for e in waiting_entries).most_common(1)[0][0]
                g.stuck_frames = _frames(waiting_entries[0])
            for r in g.never_joined:
                mine = per_rank.get(r, [])
                if mine:
                    g.straggler_frames[r] = _frames(max(mine, key=lambda e: e.seq))
        g.mismatches = _mismatches(per_rank)
        out.append(g)
    return out


def _members(pg: str, dumps: list[fr.Dump], seen: set[int]) -> set[int]:
    for d in dumps:
        if pg in d.pg_ranks:
            return set(d.pg_ranks[pg])
    configs = {tuple(v) for d in dumps for v in d.pg_ranks.values()}
    if len(configs) == 1:  # gloo dumps name the group '' in pg_config: one group, its ranks
        return set(next(iter(configs))) | seen
    return seen


def _status_for(d: fr.Dump, pg: str) -> fr.PgStatus | None:
    if pg in d.pg_status:
        return d.pg_status[pg]
    if len(d.pg_status) == 1:
        return next(iter(d.pg_status.values()))
    return None


def _completed(entries: list[fr.Entry]) -> int | None:
    done = [e.seq for e in entries if e.state == "completed"]
    return max(done) if done else None


def _mismatches(per_rank: dict[int, list[fr.Entry]]) -> list[Mismatch]:
    by_seq: dict[int, dict[int, fr.Entry]] = {}
    for r, entries in per_rank.items():
        for e in entries:
            by_seq.setdefault(e.seq, {})[r] = e
    out: list[Mismatch] = []
    for seq in sorted(by_seq):
        ranks = by_seq[seq]
        if len(ranks) < 2:
            continue
        for what in ("op", "input_sizes", "dtypes"):
            sig = {r: _signature(e, what) for r, e in ranks.items()}
            counts = Counter(sig.values())
            if len(counts) < 2:
                continue
            (top, n), (_, n2) = counts.most_common(2)
            if n == n2:
                continue
            out.append(Mismatch(seq, what, {r: s for r, s in sig.items() if s != top}, top))
            break  # one mismatch per collective: the most basic field that differs
        if len(out) >= 8:
            break
    return out


def gather(logs_dir: str | Path | None, fr_dir: str | Path | None = None) -> FlightRecorderFacts:
    """Find, read (safely) and compare the job's flight-recorder dumps."""
    files = find_dumps(logs_dir, fr_dir)
    dumps: list[fr.Dump] = []
    refused: list[Refused] = []
    for f in files[:MAX_DUMP_FILES]:
        try:
            if f.path.stat().st_size > fr.MAX_DUMP_BYTES:
                raise fr.DumpRefused(f"dump is over the {fr.MAX_DUMP_BYTES}-byte cap")
            data = f.path.read_bytes()
            dumps.append(fr.parse_dump(data, f.rank, f.shown))
        except fr.DumpRefused as e:
            refused.append(Refused(f.shown, str(e)))
        except OSError as e:
            refused.append(Refused(f.shown, f"cannot read: {e.strerror or e}"))
    versions = sorted({d.version for d in dumps if d.version})
    return FlightRecorderFacts(dumps, refused, compare(dumps), versions, len(files))
