"""What the NCCL RAS client prints (NCCL 2.24+: ``ncclras -v``, ``-f json``, ``-m``, or ``echo verbose status | nc
localhost 28028``): the job summary, each communicator's state, the ranks and processes it could not reach.

Pure functions over text the caller read. The report is written by ``src/ras/client_support.cc``; its wording changed
in 2.26 (missing ranks one a line, counts per collective type, NOCOMM for UNKNOWN), 2.28.7 added JSON (with a missing
comma that 2.29.2 fixed) and 2.29 a monitor mode: docs/hang_artifacts.md lists the strings and sources. Counts are
grouped (``26 ranks have launched up to operation 6650`` names no ranks): only outlier groups list their members.
Every record cites its 1-based line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Final, Literal

MAX_LINE: Final = 4096
MAX_LINES: Final = 2_000_000
"""Lines read from one report; the rest is ignored (noted in ``problems``)."""
MAX_RECORDS: Final = 200_000
"""Ranks, processes and lines kept per report."""

GroupKind = Literal["count", "status", "init_error", "async_error"]


@dataclass(frozen=True, repr=False)
class RasLine:
    line_no: int
    text: str


@dataclass(frozen=True, repr=False)
class RasProcess:
    """A job process the report names (unreachable or dead), with the GPUs it manages as printed (``5``, ``0,1 (NVML
    2,3)``)."""

    line_no: int
    pid: int
    host: str
    gpus: str


@dataclass(frozen=True, repr=False)
class RasRank:
    """A communicator rank the report names; pid/host/gpu unless ``[process information not found]``. ``state`` says
    why a missing rank is missing when the report does (JSON: ``unresponsive``, ``dead``)."""

    line_no: int
    rank: int
    pid: int | None = None
    host: str | None = None
    gpu: str | None = None
    state: str | None = None


@dataclass(frozen=True, repr=False)
class RankGroup:
    """Ranks of one communicator sharing a value the report compares: a collective ``count`` (per ``op`` since 2.26,
    all collectives together before: ``op`` None; 0 = none launched), a ``status`` (RUNNING, FINALIZE, NOCOMM ...), an
    ``init_error`` or ``async_error``. ``ranks`` are the members the report lists (outliers only in text)."""

    line_no: int
    kind: GroupKind
    value: str
    n_ranks: int
    op: str | None = None
    ranks: tuple[RasRank, ...] = ()

    @property
    def count(self) -> int | None:
        return int(self.value) if self.kind == "count" and self.value.isdigit() else None


@dataclass(frozen=True, repr=False)
class JobSummary:
    line_no: int
    nodes: int | None
    processes: int | None
    gpus: int | None
    processes_per_node: int | None
    """None when it differs between nodes (then ``layout`` has each (nodes, processes per node) row)."""
    gpus_per_process: int | None
    layout: tuple[tuple[int, int], ...] = ()
    outliers: tuple[RasLine, ...] = ()
    """``Node 10.0.0.7 running processes 811,812``: nodes whose process count differs from the rest."""


@dataclass(frozen=True, repr=False)
class CommGroupRow:
    """A row of the communicators table: ``comms`` communicators of ``ranks_per_comm`` ranks over ``nodes`` nodes."""

    line_no: int
    group: int
    comms: int
    nodes: int
    ranks_per_node: str
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: str


@dataclass(frozen=True, repr=False)
class RasCommunicator:
    """One communicator the report details: ``label`` ``#<group>-<index>`` (text only), ``hash`` as 16 hex digits (the
    hash NCCL's INFO lines print), ``problems`` INCOMPLETE / ERROR / MISMATCH."""

    line_no: int
    hash: str
    label: str | None
    nranks: int | None
    problems: tuple[str, ...]
    missing: tuple[RasRank, ...]
    missing_count: int | None
    groups: tuple[RankGroup, ...]


@dataclass(frozen=True, repr=False)
class RasEvent:
    """A monitor-mode event (NCCL 2.29+): ``PEER_DEAD``, ``PEER_UNRESPONSIVE``, ``PEER_NEW`` ..."""

    line_no: int
    time: str
    event: str
    pid: int | None
    host: str | None
    details: str


@dataclass(frozen=True, repr=False)
class RasReport:
    form: Literal["text", "json", "empty"]
    nccl_version: str | None
    summary: JobSummary | None
    table: tuple[CommGroupRow, ...]
    communicators: tuple[RasCommunicator, ...]
    unresponsive: tuple[RasProcess, ...]
    """Processes whose communicator data is missing (text ``INCOMPLETE``: RAS could not reach them)."""
    unresponsive_count: int | None
    dead: tuple[RasProcess, ...]
    dead_count: int | None
    timeouts: int | None
    errors: tuple[RasLine, ...]
    warnings: tuple[RasLine, ...]
    events: tuple[RasEvent, ...]
    problems: tuple[str, ...]
    """What could not be read as the format says (truncated JSON, lines past the limit ...)."""

    def lagging(self) -> dict[str, set[int]]:
        """Communicator hash -> ranks whose collective count (of any op) is below the most common count of their
        communicator: the ranks that have not launched the collective their peers have. Only ranks the report lists
        can be named (text lists outlier groups only)."""
        out: dict[str, set[int]] = {}
        for comm in self.communicators:
            by_op: dict[str | None, list[RankGroup]] = {}
            for g in comm.groups:
                if g.kind == "count" and g.count is not None:
                    by_op.setdefault(g.op, []).append(g)
            for groups in by_op.values():
                mode = max(groups, key=lambda g: (g.n_ranks, g.count or 0))
                for g in groups:
                    if (g.count or 0) < (mode.count or 0):
                        out.setdefault(comm.hash, set()).update(r.rank for r in g.ranks)
        return {h: ranks for h, ranks in out.items() if ranks}

    def missing(self, comm: str | None = None) -> set[int]:
        """Ranks reported missing (no data) in communicator ``comm`` (its hash); by default in the largest
        communicators (the world, when the job has one), whose ranks are global ranks."""
        comms = [c for c in self.communicators if comm is None or c.hash == _hash(comm)]
        if comm is None and comms:
            largest = max((c.nranks or 0) for c in comms)
            comms = [c for c in comms if (c.nranks or 0) == largest]
        return {r.rank for c in comms for r in c.missing}


_PROC: Final = re.compile(
    r"^ +Process (?P<pid>\d{1,10}) on node (?P<host>\S{1,255}) managing GPUs? (?P<gpus>.{1,200})$"
)
_WHO: Final = r"(?: -- (?:GPU (?P<gpu>\d{1,4}(?: \(NVML \d{1,4}\))?) managed by process (?P<pid>\d{1,10}) on node " \
    r"(?P<host>\S{1,255})|\[process information not found\]))?"  # fmt: skip
_RANK: Final = re.compile(
    r"^ +Rank (?P<rank>\d{1,9})(?: (?:has launched up to operation (?P<count>\d{1,20})|(?P<none>has not launched any "
    r"operations)|has status (?P<status>[A-Z]{1,20})|reported (?P<err>[^-]{1,80}?)))?" + _WHO + r" *$"
)
_GROUP: Final = re.compile(
    r"^ +(?P<n>\d{1,9}) ranks (?:have launched up to operation (?P<count>\d{1,20})|(?P<none>have not launched any "
    r"operations)|have status (?P<status>[A-Z]{1,20})|reported (?P<err>.{1,80}?)) *$"
)
_MISSING_LIST: Final = re.compile(r"^ +The (?P<what>missing|unknown) ranks?: (?P<ranks>[\d,]{1,100000})")
_COMM: Final = re.compile(
    r"^(?P<label>#\d{1,6}-\d{1,9}) \((?P<hash>[0-9a-f]{1,16})\) (?P<what>INCOMPLETE|ERROR|MISMATCH)"
)
_ROW: Final = re.compile(
    r"^ *(?P<g>\d{1,6}) +(?P<c>\d{1,9}) +(?P<n>\d{1,9}) +(?P<rpn>\d{1,4}(?:-\d{1,4})?) +(?P<rpc>\d{1,9}) +"
    r"(?P<rig>\d{1,9}) +(?P<st>[A-Z]{2,12}) +(?P<err>[A-Z,]{2,40}) *$"
)
_INTS: Final = re.compile(r"^ *\d{1,9}(?: +\d{1,9}){1,4} *$")
_COUNTED: Final = re.compile(
    r"^ +(?:Missing communicator data from |Encountered )?(?P<n>\d{1,9}) (?:job process|rank|communication timeout)"
)
_DIFFERENT: Final = re.compile(
    r"^ +Communicator ranks have different (?:(?P<status>status)|(?P<op>\w{1,30}) operation)"
)
_ERR_KIND: Final = re.compile(r"^ +(?P<kind>Initialization|Asynchronous) errors? on \d")
_VERSION: Final = re.compile(r"^NCCL version (?P<v>\S{1,40}) compiled with CUDA")
_MONITOR: Final = re.compile(
    r"^\[(?P<t>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (?P<ev>[A-Z][A-Z_]{2,40}): (?:Process (?P<pid>\d{1,10}) on node "
    r"(?P<host>\S{1,255}) managing GPUs? [\d,]{1,200}(?: \(NVML [\d,]{1,200}\))? ?)?(?P<details>.{0,400})$"
)
_JSON_KV: Final = re.compile(r'^\s*"(?P<key>[A-Za-z_]{1,40})": *(?P<val>"[^"]{0,300}"|-?\d{1,20}|true|false|[\[{])')
_HEAD: Final = re.compile(
    r"^Job summary\r?\n=+|^Group +Comms +Nodes|\"communicators_count\"|RAS Monitor Mode|\"event\": \"PEER_|"
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] PEER_[A-Z_]+: |^NCCL version \S+ compiled with CUDA",
    re.MULTILINE,
)


def is_ras(head: str) -> bool:
    """Whether the first few KB of a file are NCCL RAS client output (text, JSON or monitor mode)."""
    return _HEAD.search(head[:65536]) is not None


def _hash(text: str) -> str:
    return text.lower().removeprefix("0x").zfill(16)[-16:]


def _ranks(text: str) -> list[int]:
    return [int(r) for r in text.split(",")[:MAX_RECORDS] if r.isdigit()]


@dataclass
class _Comm:
    line_no: int
    hash: str
    label: str | None = None
    nranks: int | None = None
    problems: list[str] = field(default_factory=list)
    missing: list[RasRank] = field(default_factory=list)
    missing_count: int | None = None
    groups: list[RankGroup] = field(default_factory=list)

    def freeze(self) -> RasCommunicator:
        return RasCommunicator(self.line_no, self.hash, self.label, self.nranks, tuple(self.problems),
                               tuple(self.missing), self.missing_count, tuple(self.groups))  # fmt: skip


class _Reader:
    """What one report says, collected line by line (text and JSON share it)."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.comms: dict[tuple[str | None, str], _Comm] = {}
        self.unresponsive: list[RasProcess] = []
        self.dead: list[RasProcess] = []
        self.counts: dict[str, int] = {}
        self.errors: list[RasLine] = []
        self.warnings: list[RasLine] = []
        self.events: list[RasEvent] = []
        self.problems: list[str] = []
        self.table: list[CommGroupRow] = []
        self.summary: JobSummary | None = None
        self.records = 0

    def room(self) -> bool:
        self.records += 1
        return self.records <= MAX_RECORDS

    def comm(self, line_no: int, hash_: str, label: str | None) -> _Comm:
        key = (label, _hash(hash_))
        if key not in self.comms:
            self.comms[key] = _Comm(line_no, key[1], label)
        return self.comms[key]

    def report(self, form: Literal["text", "json", "empty"]) -> RasReport:
        rows = {r.group: r for r in self.table}
        for c in self.comms.values():
            if c.nranks is None and c.label and (row := rows.get(int(c.label[1:].split("-")[0]))):
                c.nranks = row.ranks_per_comm
            if c.missing_count is not None and len(c.missing) < c.missing_count:  # not outliers, or a list NCCL cut
                self.problems.append(f"{c.label or c.hash}: {c.missing_count} ranks missing, {len(c.missing)} named")
        if form == "text" and not (self.comms or self.summary or self.table or self.events or self.version):
            form = "empty"
        return RasReport(
            form, self.version, self.summary, tuple(self.table), tuple(c.freeze() for c in self.comms.values()),
            tuple(self.unresponsive), self.counts.get("unresponsive"), tuple(self.dead), self.counts.get("dead"),
            self.counts.get("timeouts"), tuple(self.errors), tuple(self.warnings), tuple(self.events),
            tuple(self.problems),
        )  # fmt: skip


def _summary(lines: list[tuple[int, str]]) -> JobSummary | None:
    """The job summary tables: one row of 5 numbers when all nodes look alike, else a (nodes, processes per node
    [, GPUs per process]) distribution, GPUs per process, and a totals row."""
    header = ""
    nodes = procs = gpus = ppn = gpp = None
    layout: list[tuple[int, int]] = []
    outliers: list[RasLine] = []
    first = lines[0][0] if lines else 0
    for line_no, line in lines:
        if "(total)" in line or "per node" in line or "per process" in line:
            header = line
        elif line.startswith("  Node "):
            outliers.append(RasLine(line_no, line.strip()))
        elif _INTS.match(line):
            v = [int(x) for x in line.split()]
            if header.count("(total)") >= 3 and len(v) == 5:
                nodes, ppn, gpp, procs, gpus = v
            elif header.count("(total)") >= 3 and len(v) == 3:
                nodes, procs, gpus = v
            elif "per node" in header and len(v) >= 2:
                layout.append((v[0], v[1]))
                gpp = v[2] if len(v) == 3 else gpp
            elif "per process" in header and len(v) == 2:
                gpp = v[1] if gpp is None else gpp
    if nodes is None and not layout:
        return None
    if ppn is None and len(layout) == 1:
        ppn = layout[0][1]
    return JobSummary(first, nodes, procs, gpus, ppn, gpp, tuple(layout), tuple(outliers))


def _who(m: re.Match[str], line_no: int, state: str | None = None) -> RasRank:
    return RasRank(line_no, int(m["rank"]), int(m["pid"]) if m["pid"] else None, m["host"], m["gpu"], state)


def _parse_text(text: str) -> RasReport:
    r = _Reader()
    section = block = ""
    comm: _Comm | None = None
    group: RankGroup | None = None
    members: list[RasRank] = []
    op: str | None = None
    err_kind: GroupKind = "init_error"
    summary_lines: list[tuple[int, str]] = []
    lines = text.splitlines()[:MAX_LINES]

    def close() -> None:
        nonlocal group
        if group is not None and comm is not None:
            comm.groups.append(replace(group, ranks=tuple(members)))
        group = None
        members.clear()

    for line_no, raw in enumerate(lines, 1):
        line = raw[:MAX_LINE].rstrip()
        if not line.strip() or set(line.strip()) == {"="}:
            continue
        if m := _MONITOR.match(line):
            r.events.append(RasEvent(line_no, m["t"], m["ev"], int(m["pid"]) if m["pid"] else None, m["host"],
                                     m["details"].strip()))  # fmt: skip
            continue
        if m := _VERSION.match(line):
            r.version = m["v"]
            continue
        if line in ("Job summary", "Errors", "Warnings") or line.startswith("Communicators..."):
            close()
            section, block, comm = line.split()[0].rstrip("."), "", None
            continue
        if section == "Job":
            summary_lines.append((line_no, line))
            continue
        if section == "Communicators":
            if m := _ROW.match(line):
                r.table.append(CommGroupRow(line_no, int(m["g"]), int(m["c"]), int(m["n"]), m["rpn"], int(m["rpc"]),
                                            int(m["rig"]), m["st"], m["err"]))  # fmt: skip
            continue
        if section not in ("Errors", "Warnings"):
            continue
        if r.room():
            (r.errors if section == "Errors" else r.warnings).append(RasLine(line_no, line))
        if not line.startswith(" "):  # a block: INCOMPLETE, DEAD, TIMEOUT, or "#0-0 (hash) PROBLEM"
            close()
            comm, op = None, None
            if m := _COMM.match(line):
                comm = r.comm(line_no, m["hash"], m["label"])
                block = m["what"]
                if block not in comm.problems:
                    comm.problems.append(block)
            else:
                block = line.strip()
            continue
        if comm is None:
            if (m := _PROC.match(line)) and r.room():
                proc = RasProcess(line_no, int(m["pid"]), m["host"], m["gpus"].strip())
                (r.dead if block == "DEAD" else r.unresponsive).append(proc)
            elif m := _COUNTED.match(line):
                r.counts[{"DEAD": "dead", "TIMEOUT": "timeouts"}.get(block, "unresponsive")] = int(m["n"])
            continue
        if block == "INCOMPLETE":
            if m := _COUNTED.match(line):
                comm.missing_count = int(m["n"])
            elif m := _MISSING_LIST.match(line):
                comm.missing.extend(RasRank(line_no, rank) for rank in _ranks(m["ranks"]))
            elif (m := _RANK.match(line)) and r.room():
                comm.missing.append(_who(m, line_no))
            continue
        if m := _DIFFERENT.match(line):
            close()
            op = None if m["status"] or m["op"] == "collective" else m["op"]
        elif m := _ERR_KIND.match(line):
            close()
            err_kind = "init_error" if m["kind"] == "Initialization" else "async_error"
        elif m := _GROUP.match(line):
            close()
            kind, value = _value(m, err_kind)
            group = RankGroup(line_no, kind, value, int(m["n"]), op if kind == "count" else None)
        elif m := _MISSING_LIST.match(line):  # 2.24: "The unknown ranks: 3,7" after "N ranks have status UNKNOWN"
            if group is not None:
                members.extend(RasRank(line_no, rank) for rank in _ranks(m["ranks"]))
        elif (m := _RANK.match(line)) and r.room():
            who = _who(m, line_no)
            if m["count"] or m["none"] or m["status"] or m["err"]:  # a group of one: "Rank 5 has launched up to ..."
                close()
                kind, value = _value(m, err_kind)
                group = RankGroup(line_no, kind, value, 1, op if kind == "count" else None)
            if group is not None:
                members.append(who)
    close()
    r.summary = _summary(summary_lines)
    if len(lines) >= MAX_LINES:
        r.problems.append(f"only the first {MAX_LINES} lines were read")
    return r.report("text")


def _value(m: re.Match[str], err_kind: GroupKind) -> tuple[GroupKind, str]:
    if m["count"]:
        return "count", m["count"]
    if m["none"]:
        return "count", "0"
    if m["status"]:
        return "status", m["status"]
    return err_kind, m["err"].strip()


_ERROR_KEYS: Final[tuple[tuple[GroupKind, str], ...]] = (("init_error", "init_state"), ("async_error", "async_error"))
_ENTRY_KEYS: Final = frozenset(
    ("host", "pid", "cuda_dev", "unresponsive", "considered_dead", "init_state", "async_error", "finalize_called",
     "destroy_flag", "abort_flag")
)  # fmt: skip


@dataclass
class _JsonRank:
    comm: _Comm
    line_no: int
    rank: int
    missing: bool
    fields: dict[str, int | str | bool] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """``"collective_counts": {"AllReduce": 812, ...}``"""

    def who(self, state: str | None = None) -> RasRank:
        pid, host, gpu = self.fields.get("pid"), self.fields.get("host"), self.fields.get("cuda_dev")
        return RasRank(self.line_no, self.rank, pid if isinstance(pid, int) and pid >= 0 else None,
                       str(host) if host not in (None, "unknown") else None,
                       str(gpu) if gpu is not None else None, state)  # fmt: skip

    def status(self) -> str:
        f = self.fields
        if f.get("abort_flag"):
            return "ABORT"
        if f.get("finalize_called") or f.get("destroy_flag"):
            return "FINALIZE"
        return "RUNNING" if f.get("init_state") == 0 else "INIT"


def _json_value(val: str) -> int | str | bool:
    try:
        value = json.loads(val)
    except ValueError:  # "{", "[", a cut string, a bad escape
        return val.strip('"')
    return value if isinstance(value, int | str | bool) else val


def _parse_json(text: str) -> RasReport:
    """The ``-f json`` report (and monitor-mode JSON events), read key by key as ``client_support.cc`` writes them,
    one a line: a truncated document keeps what came before the cut, 2.28's missing comma does not matter, and line
    numbers are the file's. A document on one line (``jq -c``) is re-indented first and cites line 1."""
    r = _Reader()
    lines = text.splitlines()[:MAX_LINES]
    one_line = sum(1 for ln in lines if ln.strip()) <= 2
    if one_line:
        try:
            lines = json.dumps(json.loads(text), indent=2).splitlines()[:MAX_LINES]
        except ValueError:
            r.problems.append("a one-line JSON document that does not parse")
    comm: _Comm | None = None
    entry: _JsonRank | None = None
    ranks: list[_JsonRank] = []
    mode = timestamp = ""
    for i, raw in enumerate(lines, 1):
        line_no = 1 if one_line else i
        if (m := _JSON_KV.match(raw[:MAX_LINE])) is None:
            continue
        key, value = m["key"], _json_value(m["val"])
        if key == "nccl_version":
            r.version = str(value)
        elif key == "timeouts_count" and isinstance(value, int):
            r.counts["timeouts"] = value
        elif key == "timestamp":
            timestamp = str(value)
        elif key == "event":
            mode, entry = "event", None
            r.events.append(RasEvent(line_no, timestamp, str(value), None, None, ""))
        elif mode == "event" and key in ("host", "pid", "details"):
            ev = r.events[-1]
            pid = value if key == "pid" and isinstance(value, int) else ev.pid
            host = str(value) if key == "host" else ev.host
            r.events[-1] = RasEvent(ev.line_no, ev.time, ev.event, pid, host, str(value) if key == "details" else "")
        elif key == "hash":
            comm, entry, mode = _Comm(line_no, _hash(str(value))), None, ""
            r.comms[(f"#{len(r.comms)}", comm.hash)] = comm  # every object its own, even if two hashes collide
        elif key == "size" and comm is not None and isinstance(value, int):
            comm.nranks = value
        elif key in ("ranks", "missing_ranks"):
            mode, entry = key, None
        elif key == "rank" and comm is not None and isinstance(value, int) and mode and r.room():
            entry = _JsonRank(comm, line_no, value, mode == "missing_ranks")
            ranks.append(entry)
        elif entry is not None and key in _ENTRY_KEYS:
            entry.fields[key] = value
        elif entry is not None and isinstance(value, int) and not isinstance(value, bool) and key[:1].isupper():
            entry.counts[key] = value
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    if not one_line and (last != "}" or (comm is not None and "timeouts" not in r.counts)):
        r.problems.append("the JSON document ends early (truncated?): read up to the cut")
    _json_groups(ranks)
    return r.report("json")


def _json_groups(ranks: list[_JsonRank]) -> None:
    """Per communicator: its missing ranks, and groups as the text report forms them (collective counts per op and
    statuses where they differ between ranks, errors)."""
    members: dict[int, list[_JsonRank]] = {}
    for jr in ranks:
        comm = jr.comm
        if not jr.missing:
            members.setdefault(id(comm), []).append(jr)
        elif jr.fields.get("considered_dead") or jr.fields.get("unresponsive"):
            comm.missing.append(jr.who("dead" if jr.fields.get("considered_dead") else "unresponsive"))
            comm.missing_count = (comm.missing_count or 0) + 1
        else:  # reachable, but not (or no longer) a member: what the text report calls NOCOMM
            comm.groups.append(RankGroup(jr.line_no, "status", "NOCOMM", 1, None, (jr.who(),)))
    for group in members.values():
        comm = group[0].comm
        statuses = [(jr, jr.status()) for jr in group]
        if len({s for _, s in statuses}) > 1:
            _add_groups(comm, "status", None, statuses)
        for kind, key in _ERROR_KEYS:
            _add_groups(comm, kind, None, [(jr, str(jr.fields[key])) for jr in group
                                           if jr.fields.get(key) not in (0, 7, None)])  # fmt: skip
        for op in sorted({op for jr in group for op in jr.counts}):
            per = [(jr, str(jr.counts.get(op, 0))) for jr in group]
            if len({v for _, v in per}) > 1:
                _add_groups(comm, "count", op, per)


def _add_groups(comm: _Comm, kind: GroupKind, op: str | None, values: list[tuple[_JsonRank, str]]) -> None:
    by_value: dict[str, list[RasRank]] = {}
    for jr, value in values:
        by_value.setdefault(value, []).append(jr.who())
    for value, members in sorted(by_value.items(), key=lambda kv: -len(kv[1])):
        comm.groups.append(RankGroup(members[0].line_no, kind, value, len(members), op, tuple(members)))


def parse_ras(text: str) -> RasReport:
    """The RAS report in ``text``: the text form (any version 2.24+, plain or ``-v``), ``-f json``, or monitor-mode
    events of either form. Never raises; what it could not read is in ``problems``."""
    return _parse_json(text) if text.lstrip()[:1] == "{" else _parse_text(text)
