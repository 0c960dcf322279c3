"""Flight-recorder dumps (torch's per-rank collective trace), pickle or JSON, read as untrusted input.

What a dump is (facts from torch's ``FlightRecorder`` as torch 2.13 writes it, and the ``torchfrtrace`` loader in
``torch/distributed/flight_recorder/components``): one file per rank, named ``<prefix><global rank>``, the prefix
from ``TORCH_FR_DUMP_TEMP_FILE`` (older: ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), by default
``~/.cache/torch/comm_lib_trace_rank_`` (older torch: ``/tmp/nccl_trace_rank_``); jobs often set their own
(``_dump_``, ``rank``). The content is a dict:

* ``version``: the dump format (a string ``"major.minor"``; torch 2.13 and 2.14 write ``"2.10"``),
* ``pg_config``: ``{pg name: {name, desc, ranks}}`` (``ranks`` a string such as ``"[0, 1, 2, 3]"``): the groups
  this rank is a member of, with their global ranks,
* ``pg_status``: ``{pg id: {last_enqueued_collective, last_started_collective, last_completed_collective}}``
  (absent in old versions), keyed by the entries' ``pg_id`` (the group's per-process uid, which differs between
  ranks: a rank creates no backend for a group it is not in), never by the group's name,
* ``entries``: the ring buffer, oldest first; each one collective or p2p op with ``process_group`` (name, desc),
  ``pg_id``, ``record_id``, ``collective_seq_id`` / ``p2p_seq_id``, ``profiling_name`` (``nccl:all_reduce``,
  ``gloo:broadcast``, ``nccl:send 0->1``), ``state`` (``scheduled`` / ``started`` / ``completed``),
  ``input_sizes`` / ``output_sizes``, ``input_dtypes`` / ``output_dtypes``, ``timeout_ms``, ``time_created_ns``,
  ``frames`` (``[{name, filename, line}]``: the Python stack that scheduled it), ``retired``.

Quirks of the formats 2.0-2.10 read here: ``seq_id`` before ``collective_seq_id`` existed; JSON dumps write the
numbers of ``pg_status`` as strings; gloo's native recording registers every group's ranks under the name ``''``
before the group is named, with group-local ranks (kept apart as :attr:`Dump.unnamed_pg_ranks`, never taken for a
group's membership); gloo never moves an entry past ``scheduled`` (``retired`` marks it done);
``FlightRecorderHook`` (torch 2.14, any backend) records each collective a second time as ``c10d:<op>``, retired
as soon as it is issued (its entries are dropped where the backend recorded the same group itself).

A dump is **untrusted**: it may come from anywhere a user points us, and a pickle can run code. It is never given
to :mod:`pickle`'s unpickler: :mod:`~debug_training_logs.formats.safe_pickle` interprets the opcodes itself and
admits plain data only.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Final

from debug_training_logs.formats.safe_pickle import (
    MAX_DEPTH,
    MAX_DUMP_BYTES,
    MAX_VALUES,
    DumpRefused,
    load_json,
    load_pickle,
)

__all__ = ["MAX_DEPTH", "MAX_DUMP_BYTES", "MAX_VALUES", "DumpRefused", "load_json", "load_pickle"]

DEFAULT_PREFIXES: Final = ("comm_lib_trace_rank_", "nccl_trace_rank_")
"""File-name prefixes torch writes by default (then the global rank): current, then before the rename."""
PREFIX_ENV_VARS: Final = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
"""Environment variables whose value is the dump path prefix (the current name, then the older one)."""


def load_dump_bytes(data: bytes) -> Any:
    """Pickle (protocol 2+ starts with 0x80) or JSON (starts with ``{``), else :class:`DumpRefused`."""
    head = data.lstrip()[:1]
    if data[:1] == b"\x80":
        return load_pickle(data)
    if head == b"{":
        return load_json(data)
    raise DumpRefused("neither a pickle (0x80 PROTO) nor JSON ('{'): not a flight-recorder dump")


# ---------------------------------------------------------------------------------------------------------------------
# Typed view of a dump


@dataclass(frozen=True)
class Frame:
    """One Python frame of the stack that scheduled a collective."""

    name: str
    filename: str
    line: int


@dataclass(frozen=True)
class Entry:
    """One recorded collective or p2p op on one rank.

    ``pg`` is the process group's name (its identity across ranks, with the members) and ``pg_desc`` its
    description; ``pg_id`` the group's per-process uid (what ``pg_status`` is keyed by); ``seq`` the collective
    sequence number within the group (``p2p_seq`` for send/recv); ``op`` the op without the backend (``all_reduce``,
    ``broadcast``, ``send 0->1``); ``state`` scheduled (the CPU enqueued it), started (the backend began it) or
    completed; ``retired``: the backend is done with it (gloo: finished; NCCL: finished or timed out); sizes and
    dtypes as recorded (one list per tensor); ``index``: its position in the dump (oldest first), what a citation
    names.
    """

    pg: str
    pg_desc: str
    seq: int
    p2p_seq: int
    is_p2p: bool
    backend: str
    op: str
    state: str
    input_sizes: list[list[int]]
    output_sizes: list[list[int]]
    input_dtypes: list[str]
    output_dtypes: list[str]
    timeout_ms: int | None
    time_created_ns: int | None
    frames: tuple[Frame, ...]
    pg_id: int | None = None
    record_id: int | None = None
    retired: bool = False
    index: int = 0


@dataclass(frozen=True)
class PgStatus:
    """What a rank says about one group as a whole (absent from old dump versions)."""

    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass
class Dump:
    """One rank's dump. ``rank`` comes from the file name; ``pg_ranks`` maps a group name to its global ranks (from
    ``pg_config``); ``pg_status`` is keyed by ``pg_id`` (as a string); ``entries_total`` counts the entries the file
    holds (``entries`` may keep only the recent ones)."""

    rank: int
    version: str | None
    entries: list[Entry]
    pg_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    pg_desc: dict[str, str] = field(default_factory=dict)
    pg_status: dict[str, PgStatus] = field(default_factory=dict)
    comm_lib_version: str | None = None
    file: str = ""
    fmt: str = "pickle"
    unnamed_pg_ranks: tuple[int, ...] | None = None
    """gloo's ``pg_config['']``: group-local ranks of whichever group registered last (a whole-world job's world)."""
    entries_total: int = 0
    hook_duplicates: int = 0
    """``c10d:`` entries dropped because the backend recorded the same collectives itself."""


_RANKS = re.compile(r"-?\d+")
MAX_GROUP_RANKS: Final = 1_000_000
"""Ranks a group may list (a bogus ``pg_config`` claiming more is cut here)."""


def _int_or_none(v: Any) -> int | None:
    """An int, or a numeric string (the JSON dump writes pg_status numbers as strings), else None."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lstrip("-").isdigit() and len(v) < 20:
        return int(v)
    return None


MAX_TENSORS: Final = 16
"""Tensors (sizes, dtypes) kept per entry; a coalesced op can list hundreds, a bogus one millions."""
MAX_DIMS: Final = 8
MAX_FRAMES: Final = 24
MAX_TEXT: Final = 300
"""Longest string kept from a dump (a name, a file name, a description)."""


def _text(v: Any) -> str:
    return str(v)[:MAX_TEXT]


def _sizes(v: Any) -> list[list[int]]:
    if not isinstance(v, list):
        return []
    return [[x for x in s[:MAX_DIMS] if isinstance(x, int)] for s in v[:MAX_TENSORS] if isinstance(s, list)]


def _strs(v: Any) -> list[str]:
    return [_text(x) for x in v[:MAX_TENSORS]] if isinstance(v, list) else []


def _frames(v: Any) -> tuple[Frame, ...]:
    out = []
    for f in v[:MAX_FRAMES] if isinstance(v, list) else []:
        if isinstance(f, dict):
            out.append(Frame(_text(f.get("name", "")), _text(f.get("filename", "")), _int_or_none(f.get("line")) or 0))
    return tuple(out)


def _entry(e: Any, index: int) -> Entry | None:
    if not isinstance(e, dict):
        return None
    pg = e.get("process_group")
    pg_name, pg_desc = (_text(pg[0]), _text(pg[1])) if isinstance(pg, list | tuple) and len(pg) == 2 else ("", "")
    if not pg_name and _int_or_none(e.get("pg_id")) is not None:
        pg_name = str(e.get("pg_id"))  # the oldest formats name a group by its uid only
    prof = _text(e.get("profiling_name", ""))
    backend, _, op = prof.partition(":")
    seq = _int_or_none(e.get("collective_seq_id"))
    if seq is None:
        seq = _int_or_none(e.get("seq_id")) or 0  # the oldest dumps had one seq_id
    return Entry(
        pg=pg_name,
        pg_desc=pg_desc,
        seq=seq,
        p2p_seq=_int_or_none(e.get("p2p_seq_id")) or 0,
        is_p2p=bool(e.get("is_p2p", False)) or op.startswith(("send ", "recv ")),
        backend=backend if op else "",
        op=op or prof,
        state=_text(e.get("state", "")),
        input_sizes=_sizes(e.get("input_sizes")),
        output_sizes=_sizes(e.get("output_sizes")),
        input_dtypes=_strs(e.get("input_dtypes")),
        output_dtypes=_strs(e.get("output_dtypes")),
        timeout_ms=_int_or_none(e.get("timeout_ms")),
        time_created_ns=_int_or_none(e.get("time_created_ns")),
        frames=_frames(e.get("frames")),
        pg_id=_int_or_none(e.get("pg_id")),
        record_id=_int_or_none(e.get("record_id")),
        retired=e.get("retired") is True,
        index=index,
    )


HOOK_BACKEND: Final = "c10d"
"""The profiling-name prefix of ``FlightRecorderHook``'s entries (``c10d:allreduce``)."""


def _without_hook_duplicates(entries: list[Entry]) -> tuple[list[Entry], int]:
    """The entries without ``c10d:`` ones in groups the backend recorded itself (same collectives, twice)."""
    native = {e.pg for e in entries if e.backend and e.backend != HOOK_BACKEND}
    kept = [e for e in entries if not (e.backend == HOOK_BACKEND and e.pg in native)]
    return kept, len(entries) - len(kept)


@functools.lru_cache(maxsize=4096)
def _ranks_text(v: str) -> tuple[int, ...]:
    """A group's ranks from ``pg_config``'s string, parsed once for all the dumps that list the same group (each of
    a 10,000-rank job's dumps lists the world)."""
    return tuple(int(x) for x in _RANKS.findall(v[: 12 * MAX_GROUP_RANKS])[:MAX_GROUP_RANKS])


def _ranks(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, str):
        return _ranks_text(v)
    if isinstance(v, list):
        return tuple(x for x in v[:MAX_GROUP_RANKS] if isinstance(x, int) and not isinstance(x, bool))
    return None


def to_dump(value: Any, rank: int, file: str = "", fmt: str = "pickle") -> Dump:
    """The typed view of a loaded dump; :class:`DumpRefused` when it does not have a dump's shape."""
    if not isinstance(value, dict) or not isinstance(value.get("entries", []), list):
        raise DumpRefused("not a flight-recorder dump: expected a dict with an 'entries' list")
    raw = value.get("entries", [])
    entries, duplicates = _without_hook_duplicates(
        [x for x in (_entry(e, i) for i, e in enumerate(raw)) if x is not None]
    )
    pg_ranks: dict[str, tuple[int, ...]] = {}
    pg_desc: dict[str, str] = {}
    unnamed: tuple[int, ...] | None = None
    cfg = value.get("pg_config")
    if isinstance(cfg, dict):
        for key, c in cfg.items():
            if not isinstance(c, dict):
                continue
            name = _text(c.get("name", key))
            ranks = _ranks(c.get("ranks"))
            if name == "":
                unnamed = ranks
                continue
            if ranks is not None:
                pg_ranks[name] = ranks
            pg_desc[name] = _text(c.get("desc", ""))
    status: dict[str, PgStatus] = {}
    st = value.get("pg_status")
    if isinstance(st, dict):
        for key, s in st.items():
            if isinstance(s, dict):
                status[_text(key)] = PgStatus(
                    _int_or_none(s.get("last_enqueued_collective")),
                    _int_or_none(s.get("last_started_collective")),
                    _int_or_none(s.get("last_completed_collective")),
                )
    version = value.get("version")
    lib = value.get("comm_lib_version", value.get("nccl_version"))
    return Dump(
        rank=rank,
        version=_text(version) if version is not None else None,
        entries=entries,
        pg_ranks=pg_ranks,
        pg_desc=pg_desc,
        pg_status=status,
        comm_lib_version=_text(lib) if lib else None,
        file=file,
        fmt=fmt,
        unnamed_pg_ranks=unnamed,
        entries_total=len(raw),
        hook_duplicates=duplicates,
    )


_RANK_SUFFIX = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")


def named_like_dump(name: str) -> bool:
    """Whether a file of this name can be a dump (:func:`dump_rank` is None for any other name, whatever its bytes):
    only such a file's first bytes need reading."""
    return _RANK_SUFFIX.search(name) is not None


def rank_from_name(name: str, prefix: str | None = None) -> int | None:
    """The global rank a dump's file name carries (``<prefix><rank>``), or None when it does not look like one."""
    if prefix is not None:
        if not name.startswith(prefix):
            return None
        rest = name[len(prefix) :]
        m = _RANK_SUFFIX.fullmatch(rest)
        return int(m.group(1)) if m else None
    for p in DEFAULT_PREFIXES:
        if p in name:
            m = _RANK_SUFFIX.fullmatch(name[name.index(p) + len(p) :])
            return int(m.group(1)) if m else None
    return None


_DUMP_KEYS: Final = (b'"entries"', b'"version"', b'"pg_config"', b'"pg_status"', b'"comm_lib_version"', b'"nccl_')
HEAD_BYTES: Final = 64
"""How much of a file :func:`looks_like_dump` needs."""


def dump_rank(name: str, head: bytes) -> int | None:
    """The global rank of a file that is a flight-recorder dump, else None: a default prefix (``nccl_trace_rank_3``),
    or any name ending in a rank (``_dump_12``, ``rank0.json``) whose first :data:`HEAD_BYTES` bytes start a pickle
    (``0x80``) or a JSON dump (``{"`` and one of a dump's keys)."""
    rank = rank_from_name(name)
    if rank is not None:
        return rank
    m = _RANK_SUFFIX.search(name)
    if m is None:
        return None
    text = head.lstrip()
    if head[:1] == b"\x80" or (text[:2] == b'{"' and any(k in text for k in _DUMP_KEYS)):
        return int(m.group(1))
    return None


def parse_dump(data: bytes, rank: int, file: str = "") -> Dump:
    """Load (safely) and type one dump's bytes."""
    fmt = "pickle" if data[:1] == b"\x80" else "json"
    return to_dump(load_dump_bytes(data), rank, file, fmt)
