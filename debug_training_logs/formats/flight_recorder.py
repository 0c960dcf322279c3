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
to :mod:`pickle`'s unpickler. :func:`load_pickle` interprets the opcodes itself (decoded by
:func:`pickletools.genops`, which executes nothing) and admits only plain containers and scalars (dict, list,
tuple, str, bytes, int, float, bool, None); any opcode that names a class or calls something (``GLOBAL``,
``STACK_GLOBAL``, ``REDUCE``, ``BUILD``, ``INST``, ``OBJ``, ``NEWOBJ``, persistent ids, extension codes) is refused,
and so are oversized files, deep nesting and shared references that would expand beyond :data:`MAX_VALUES`.
"""

from __future__ import annotations

import json
import pickletools
import re
from dataclasses import dataclass, field
from typing import Any, Final

MAX_DUMP_BYTES: Final = 64 * 1024 * 1024
"""A dump larger than this is refused (torch's default ring buffer of 2,000 entries pickles to a few MB)."""
MAX_VALUES: Final = 2_000_000
"""Total scalars and containers a dump may expand to (counting every reference of a shared value)."""
MAX_DEPTH: Final = 64
"""Nesting depth a dump may have (a real one nests 5 deep: dict > list > entry > frames > frame)."""

DEFAULT_PREFIXES: Final = ("comm_lib_trace_rank_", "nccl_trace_rank_")
"""File-name prefixes torch writes by default (then the global rank): current, then before the rename."""
PREFIX_ENV_VARS: Final = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
"""Environment variables whose value is the dump path prefix (the current name, then the older one)."""


class DumpRefused(ValueError):
    """The file is not a dump we read safely: the message says why (hostile opcode, size, shape)."""


# Opcodes that build plain data. Everything else (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
# NEWOBJ_EX, PERSID, BINPERSID, EXT1/2/4, sets, byte arrays, out-of-band buffers) is refused.
_PUSH_NONE = {"NONE"}
_PUSH_BOOL = {"NEWTRUE": True, "NEWFALSE": False}
_PUSH_ARG = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
}  # fmt: skip
_IGNORED = {"PROTO", "FRAME"}


class _Mark:
    pass


_MARK = _Mark()


def _pop_mark(stack: list[Any]) -> list[Any]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1 :]
            del stack[i:]
            return items
    raise DumpRefused("malformed pickle: no MARK for a MARK-consuming opcode")


def _set_items(d: Any, items: list[Any]) -> None:
    if not isinstance(d, dict) or len(items) % 2:
        raise DumpRefused("malformed pickle: SETITEMS on a non-dict or with an odd item count")
    for k, v in zip(items[::2], items[1::2], strict=True):
        try:
            d[k] = v
        except TypeError as e:  # an unhashable key (a list as a dict key)
            raise DumpRefused(f"malformed pickle: unhashable dict key ({e})") from e


def _memo_key(arg: Any) -> int:
    if not isinstance(arg, int):
        raise DumpRefused("malformed pickle: a memo slot that is not a number")
    return arg


def load_pickle(data: bytes) -> Any:
    """The value a pickle encodes, admitting plain containers and scalars only; :class:`DumpRefused` otherwise."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpRefused(f"dump is {len(data)} bytes, over the {MAX_DUMP_BYTES}-byte cap")
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    try:
        for op, arg, _pos in pickletools.genops(data):
            name = op.name
            if name in _IGNORED:
                continue
            if name in _PUSH_NONE:
                stack.append(None)
            elif name in _PUSH_BOOL:
                stack.append(_PUSH_BOOL[name])
            elif name in _PUSH_ARG:
                if name == "INT" and arg in (True, False):  # protocol 0 booleans are INT 01/00
                    stack.append(bool(arg))
                else:
                    stack.append(arg)
            elif name == "MARK":
                stack.append(_MARK)
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n:
                    raise DumpRefused("malformed pickle: stack underflow")
                t = tuple(stack[-n:])
                del stack[-n:]
                stack.append(t)
            elif name == "TUPLE":
                stack.append(tuple(_pop_mark(stack)))
            elif name == "LIST":
                stack.append(_pop_mark(stack))
            elif name == "DICT":
                d: dict[Any, Any] = {}
                _set_items(d, _pop_mark(stack))
                stack.append(d)
            elif name == "APPEND":
                v = stack.pop()
                if not isinstance(stack[-1], list):
                    raise DumpRefused("malformed pickle: APPEND to a non-list")
                stack[-1].append(v)
            elif name == "APPENDS":
                items = _pop_mark(stack)
                if not isinstance(stack[-1], list):
                    raise DumpRefused("malformed pickle: APPENDS to a non-list")
                stack[-1].extend(items)
            elif name == "SETITEM":
                v = stack.pop()
                k = stack.pop()
                _set_items(stack[-1], [k, v])
            elif name == "SETITEMS":
                items = _pop_mark(stack)
                _set_items(stack[-1], items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[_memo_key(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                key = _memo_key(arg)
                if key not in memo:
                    raise DumpRefused("malformed pickle: GET of an unknown memo slot")
                stack.append(memo[key])
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                _pop_mark(stack)
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "STOP":
                if len(stack) != 1:
                    raise DumpRefused(f"malformed pickle: STOP with a stack of {len(stack)}")
                return _bounded_copy(stack[0])
            else:
                raise DumpRefused(
                    f"refused: the pickle uses opcode {name}, which can name a class or call code; a flight-recorder "
                    "dump holds plain data only, so this file is not one (or was tampered with)"
                )
    except DumpRefused:
        raise
    except (ValueError, IndexError, TypeError) as e:  # genops on garbage, stack underflow
        raise DumpRefused(f"not a readable pickle: {e}") from e
    raise DumpRefused("malformed pickle: no STOP opcode (truncated file?)")


def _bounded_copy(value: Any) -> Any:
    """A fresh tree of ``value`` (shared references expanded), refused past :data:`MAX_VALUES` or :data:`MAX_DEPTH`."""
    budget = [MAX_VALUES]

    def copy(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise DumpRefused(f"dump expands to more than {MAX_VALUES} values (shared references?)")
        if depth > MAX_DEPTH:
            raise DumpRefused(f"dump nests deeper than {MAX_DEPTH} levels (a cycle?)")
        if isinstance(v, dict):
            return {copy(k, depth + 1): copy(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list):
            return [copy(x, depth + 1) for x in v]
        if isinstance(v, tuple):
            return tuple(copy(x, depth + 1) for x in v)
        return v

    return copy(value, 0)


def load_json(data: bytes) -> Any:
    """A JSON dump (``_dump_fr_trace_json``), size-capped and depth-checked like a pickle."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpRefused(f"dump is {len(data)} bytes, over the {MAX_DUMP_BYTES}-byte cap")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise DumpRefused(f"not readable JSON: {e}") from e
    return _bounded_copy(value)


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


def _ranks(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, str):
        return tuple(int(x) for x in _RANKS.findall(v[: 12 * MAX_GROUP_RANKS])[:MAX_GROUP_RANKS])
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
