"""The process's one cache of results computed from log files, bounded by an estimate of its bytes.

A CLI run lives one command, but the MCP server lives long: an agent calls ``job_overview``, ``grep_all_ranks``,
``nccl_state_table``, ``timeline``, ``diagnose`` and ``verify_conclusion`` in a row on the same directory, and each
call after the first must reuse the first one's scan. Three kinds of entry share this one least-recently-used map
(keys are tuples whose first item names the kind):

* ``("scan", file identity, consumer key)``: one consumer's share of one file's scan, as compressed pickles
  (:class:`Packed`; :mod:`~debug_training_logs.logs.scan_cache`);
* ``("tool", kind, arguments, files)``: a tool's whole result over a directory
  (:mod:`~debug_training_logs.tools._cache`);
* ``("checkpoints", path)``: where a scan saw line starts in a plain file
  (:func:`~debug_training_logs.logs.scan_lines.checkpoints_for`).

Each entry is put with an estimate of the bytes it holds; the least recently used go when the total passes
:data:`MAX_BYTES`, so memory stays bounded however many jobs a server is asked about. Knows nothing of what it holds.
"""

from __future__ import annotations

import copyreg
import dataclasses
import importlib
import io
import itertools
import operator
import os
import pickle
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import zstandard

from debug_training_logs.frozen import positional, takes_positional


def _budget_mb(text: str | None, default: int = 96) -> int:
    """``DEBUG_TRAINING_LOGS_CACHE_MB`` as a whole number of MiB >= 0; a value that is not one leaves the default
    (a typo in the environment must not stop the server from starting)."""
    try:
        mb = int((text or "").strip())
    except ValueError:
        return default
    return mb if mb >= 0 else default


MAX_BYTES = _budget_mb(os.environ.get("DEBUG_TRAINING_LOGS_CACHE_MB")) << 20
"""The cache's budget in bytes (estimated): ``DEBUG_TRAINING_LOGS_CACHE_MB``, default 96 MiB. The packed scan results
of every tool's questions (the server's companions) take ~4.0 KB per rank (3.7 KB at zstd level 1): ~4 MB for a
1,024-rank job, ~41 MB for 10,240 ranks, so a server keeps the job it is asked about (and its tables) while the process
stays under 300 MB."""

ENTRY_OVERHEAD = 200
"""Bytes counted per entry on top of its own estimate (key tuple, map slot)."""


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class Packed:
    """A value kept as compressed pickles (a few times smaller than the objects, and no objects for the garbage
    collector to walk). A tuple value is packed item by item (``ends`` not None), so one item can be read alone: one
    pickle per item, all of them in one zstd frame (a frame per item cost a third more bytes: the items of a file's
    result repeat each other's file name, lines and class names, and a small frame compresses little alone)."""

    data: bytes
    """The pickles, one after the other, compressed unless they are short (:func:`_raw` reads either)."""
    ends: tuple[int, ...] | None
    """Where each item's pickle ends in the uncompressed data; None when the value is one pickle."""

    @property
    def items(self) -> bool:
        return self.ends is not None

    @property
    def count(self) -> int:
        """How many items a packed tuple has (1 for any other value)."""
        return len(self.ends) if self.ends is not None else 1

    @property
    def nbytes(self) -> int:
        return len(self.data) + 104


def pack(value: Any) -> Packed:
    """``value`` as a :class:`Packed` (zstd at :data:`COMPRESSION_LEVEL`: pickles of log text shrink 3-5x, and a small
    frame costs a few microseconds, where zlib spent ~35 us setting up its state for each one)."""
    buf = io.BytesIO()
    if isinstance(value, tuple) and type(value) is tuple:
        ends = []
        for v in value:
            _Pickler(buf, protocol=PROTOCOL).dump(v)  # (a pickler per item: each item reads back alone)
            ends.append(buf.tell())
        return Packed(_frame(buf), tuple(ends))
    _Pickler(buf, protocol=PROTOCOL).dump(value)
    return Packed(_frame(buf), None)


def unpack(p: Packed) -> Any:
    """The value :func:`pack` was given (a new copy on every call)."""
    data = _raw(p.data)
    if p.ends is None:
        return pickle.loads(data)
    view = memoryview(data)
    starts = (0, *p.ends[:-1]) if p.ends else ()
    return tuple(pickle.loads(view[a:b]) for a, b in zip(starts, p.ends, strict=True))


def unpack_item(p: Packed, k: int) -> Any:
    """Item ``k`` of a packed tuple, without unpickling the others."""
    if p.ends is None:
        return unpack(p)[k]
    return pickle.loads(memoryview(_raw(p.data))[p.ends[k - 1] if k else 0 : p.ends[k]])


def _frame(buf: io.BytesIO) -> bytes:
    """The pickles written to ``buf``, compressed unless they are short."""
    if buf.tell() <= RAW_MAX_BYTES:
        return buf.getvalue()  # (a pickle starts with its PROTO opcode, never with zstd's frame magic)
    return _compress(buf.getbuffer())


def _compress(raw: bytes | memoryview) -> bytes:
    """``raw`` compressed with this thread's compressor, in bytes of its own length: zstd's output object keeps the
    worst-case size it was allocated at (a 1.6 KB pickle's 0.9 KB frame held 1.7 KB)."""
    return memoryview(_codecs().compressor.compress(raw)).tobytes()


def settle(p: Packed) -> Packed:
    """``p`` (made by a scan's worker) as this process keeps it: compressed with the process's dictionary.

    The dictionary is trained here, once per process, from the first :data:`DICT_SAMPLES` compressed values that
    arrive: they hold the same class names, field names and line shapes, which a small frame cannot use alone (a
    two-line file's result shrank from ~940 to ~140 bytes, a 1,024-rank job's node file's from 4.6 to 2.7 KB). Workers
    forked after that compress with it themselves; a value made before it is compressed again."""
    global _DICT
    data = p.data
    if not data or data[0] == _PICKLE_START:
        return p
    if _DICT is None:
        with _TRAINING:
            if _DICT is None:
                _SAMPLES.append(_raw(data)[:DICT_SAMPLE_BYTES])
                if len(_SAMPLES) >= DICT_SAMPLES:
                    _DICT = zstandard.train_dictionary(DICT_BYTES, _SAMPLES, k=200, d=8, f=14)
                    _SAMPLES.clear()
        return p
    if zstandard.get_frame_parameters(data).dict_id == _DICT.dict_id():
        return p
    return Packed(_compress(_raw(data)), p.ends)


DICT_SAMPLES = 64
"""Compressed values the dictionary is trained from (more made it no better). Trained with fixed parameters (``k``,
``d``: 3-10 ms, where zstd's search for the best ones took 15-45 ms for results 4-30% smaller) and a small frequency
table (``f``: ~3 MB at the peak instead of ~13 MB, the same results)."""
DICT_SAMPLE_BYTES = 64 << 10
"""Of each sample, the first bytes only (what is held until the dictionary is trained stays under 4 MB)."""
DICT_BYTES = 16 << 10
"""The dictionary's size."""
_DICT: zstandard.ZstdCompressionDict | None = None
"""The process's zstd dictionary (:func:`settle`), None until trained; never changed after: every value compressed
with it must stay readable."""
_SAMPLES: list[bytes | bytearray | memoryview] = []
_TRAINING = threading.Lock()


RAW_MAX_BYTES = 256
"""Pickles this short are kept as they are: zstd would save a few bytes at the cost of a frame (~4 us to make and
read back)."""

_PICKLE_START = pickle.PROTO[0]


class _Codecs(threading.local):
    """This thread's zstd compressor and decompressor (made once per thread, ~2 us each: not safe to share between
    the server's threads, and a file's pack makes a few frames), and made again once the process has its dictionary
    (the decompressor made with it reads values compressed with or without it)."""

    def __init__(self) -> None:
        self.make()

    def make(self) -> None:
        self.dictionary = _DICT
        self.compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, dict_data=_DICT)
        self.decompressor = zstandard.ZstdDecompressor(dict_data=_DICT)


def _codecs() -> _Codecs:
    """This thread's codecs, with the process's dictionary once it has one."""
    c = _CODECS
    if c.dictionary is not _DICT:
        c.make()
    return c


PROTOCOL = pickle.HIGHEST_PROTOCOL

COMPRESSION_LEVEL = -1
"""zstd level of packed values (negative: zstd's fast levels). The packs are made in the scan workers, once per file,
and read in the main process, so both sides count: on the 1,024-rank corpus's analyze results (15 items, 68 KB of
pickles per file) level -1 compresses in 0.15 ms and decompresses in 0.055 ms per file to 16.3 KB, where level 1 took
0.24 and 0.093 ms for 14.3 KB (nccl: 0.07/0.026 ms vs 0.12/0.049 ms, 9.5 vs 8.5 KB per file); the cache holds ~14%
more bytes per rank. (zlib level 1 took ~3x level 1's time.) Each thread makes its compressor and decompressor once
(:class:`_Codecs`: they are not safe to share between the server's threads)."""

_CODECS = _Codecs()


class _Reducers(dict[type, Callable[[Any], Any]]):
    """The picklers' dispatch table (class -> reduce function), filled on first sight of each class.

    A frozen slotted dataclass with dataclass-made pickling (:func:`_init_fields`) is pickled as a call of its
    positional constructor (:func:`maker`) with its field values: the same object back, made in one call instead of
    the ``__setstate__`` that ``dataclass`` adds (a Python loop over ``fields()`` per object; a job's parsed lines
    are hundreds of thousands of such objects). The constructor is pickled by name once per item (pickle's memo), so
    each object costs one call when read back. Its reduce function is generated with one attribute read per field.
    Any other class gets what pickle would use without a table (``copyreg``'s entry, else ``__reduce_ex__``), from
    C. A table lookup costs no Python call for the classes pickle handles itself (types, functions, containers),
    where a ``reducer_override`` is called for every object."""

    def __missing__(self, cls: type) -> Callable[[Any], Any]:
        if issubclass(cls, type):
            raise KeyError(cls)  # a class with a metaclass: pickle saves it by reference when the table has nothing
        names = _init_fields(cls)
        reduce: Callable[[Any], Any]
        if names is None:
            reduce = copyreg.dispatch_table.get(cls) or operator.methodcaller("__reduce_ex__", PROTOCOL)
        else:
            values = "".join(f"o.{n}, " for n in names)  # field names are identifiers (dataclasses checked them)
            scope: dict[str, Any] = {"make": maker(cls)}
            exec(f"def reduce(o):\n    return make, ({values})\n", scope)
            reduce = scope["reduce"]
        self[cls] = reduce
        return reduce


class _Pickler(pickle.Pickler):
    dispatch_table = _Reducers()


class _Makers:
    """The positional constructors by name (``MAKERS.<module>:<class>``, dots written ``/``), as pickle finds a
    function it saved by reference: the same object in the process that packs and the one that unpacks, made on
    first use in each."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        module, _, qualname = name.partition(":")
        if not qualname:
            raise AttributeError(name)
        obj: Any = importlib.import_module(module.replace("/", "."))
        for part in qualname.split("/"):
            obj = getattr(obj, part)
        return maker(obj)


MAKERS = _Makers()


def maker(cls: type) -> Callable[..., Any]:
    """``cls``'s positional constructor (``cls(*field values)``), or ``cls`` itself where
    :func:`~debug_training_logs.frozen.positional` would not make the same object; one per class per process."""
    make = _MAKERS.get(cls)
    if make is None:
        if takes_positional(cls) and "<" not in cls.__qualname__:
            make = positional(cls)
            name = f"{cls.__module__}:{cls.__qualname__}".replace(".", "/")
            make.__module__, make.__qualname__ = __name__, f"MAKERS.{name}"  # pickled by this name
            setattr(MAKERS, name, make)  # found without __getattr__ from now on
        else:
            make = cls
        _MAKERS[cls] = make
    return make


_MAKERS: dict[type, Callable[..., Any]] = {}
"""Class -> its positional constructor (or the class itself where that is not the same), per process."""


def _init_fields(cls: type) -> tuple[str, ...] | None:
    """The field names to call ``cls(*values)`` with, or None when that would not rebuild the same object (not a
    slotted frozen dataclass with dataclass-made pickling, or a field its ``__init__`` does not take)."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        return None
    if getattr(getattr(cls, "__setstate__", None), "__name__", "") != "_dataclass_setstate":
        return None
    fs = dataclasses.fields(cls)
    if not all(f.init for f in fs):
        return None
    return tuple(f.name for f in fs)


def _raw(b: bytes) -> bytes:
    """The pickles a :class:`Packed`'s data holds."""
    return b if not b or b[0] == _PICKLE_START else _codecs().decompressor.decompress(b)  # (b"": an empty tuple's)


SAMPLE = 16
"""Entries of a long container :func:`estimate` visits (evenly spaced), scaled up to its length."""


def estimate(obj: Any, limit: int = 100_000) -> int:
    """Bytes held by ``obj`` and what it refers to (containers, dataclasses, pydantic models), by ``sys.getsizeof``.

    A container of more than ``2 * SAMPLE`` entries is estimated from :data:`SAMPLE` of them, evenly spaced, each
    counted for the entries it stands for: a job's results hold lists of one row per rank or per line, alike in
    shape, and walking every object of a 1,024-rank diagnosis took longer than building it. An object shared by
    the entries is then counted once per entry it stands for (an over-estimate: the safe side of a memory bound).
    Past ``limit`` objects, the mean so far times the objects still queued."""
    seen: set[int] = set()
    stack: list[tuple[Any, float]] = [(obj, 1.0)]
    total = 0.0
    visited = 0
    while stack and visited < limit:
        o, weight = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        visited += 1
        total += sys.getsizeof(o) * weight
        if isinstance(o, (str, bytes, int, float, bool, type(None))):
            continue
        if isinstance(o, Packed):
            total += o.nbytes * weight
        elif isinstance(o, dict):
            _push(stack, o.keys(), len(o), weight)
            _push(stack, o.values(), len(o), weight)
        elif isinstance(o, (list, tuple, set, frozenset)):
            _push(stack, o, len(o), weight)
        else:
            d = getattr(o, "__dict__", None)
            if d is not None:
                stack.append((d, weight))
            for cls in type(o).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    v = getattr(o, name, None)
                    if v is not None:
                        stack.append((v, weight))
    if stack:
        total += total / max(visited, 1) * len(stack)
    return int(total)


def _push(stack: list[tuple[Any, float]], entries: Iterable[Any], n: int, weight: float) -> None:
    """Queue a container's ``n`` entries for :func:`estimate`: all of them, or :data:`SAMPLE` evenly spaced ones
    each standing for ``n / SAMPLE``."""
    if n <= 2 * SAMPLE:
        stack.extend((e, weight) for e in entries)
        return
    step = n // SAMPLE
    picked = list(itertools.islice(entries, 0, None, step))
    each = weight * n / len(picked)
    stack.extend((e, each) for e in picked)


class Memo:
    """Least-recently-used map from a hashable key to a value, bounded by the sum of the values' estimated bytes
    (thread-safe: the server runs tools in threads)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.keep_results = True
        """False while the process answers one command and exits (:func:`one_command`)."""

    def get(self, key: Hashable) -> Any:
        """The value put under ``key``, or None (and it becomes the most recently used)."""
        with self._lock:
            got = self._items.get(key)
            if got is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return got[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        """Keep ``value`` (which holds about ``nbytes``); older entries go while the total is over the budget. A
        value larger than the whole budget is not kept."""
        size = nbytes + ENTRY_OVERHEAD
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _k, (_v, n) = self._items.popitem(last=False)
                self.nbytes -= n

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.nbytes = self.hits = self.misses = 0

    def drop(self, kind: str) -> None:
        """Forget every entry whose key starts with ``kind``."""
        with self._lock:
            for key in [k for k in self._items if isinstance(k, tuple) and k and k[0] == kind]:
                self.nbytes -= self._items.pop(key)[1]

    def __len__(self) -> int:
        return len(self._items)


MEMO = Memo()
"""The process's one cache (the MCP server keeps it across tool calls; a CLI run lives one call)."""


@contextmanager
def one_command() -> Iterator[None]:
    """Within the block the process answers one command and then exits (the CLI): a tool's whole result is not kept
    for a later call, since none comes, so its size is never estimated (a walk over every object of a big table). The
    scan results and checkpoints are still kept: the command's own later steps read them. The server never enters
    this: it keeps and bounds everything."""
    before = MEMO.keep_results
    MEMO.keep_results = False
    try:
        yield
    finally:
        MEMO.keep_results = before
