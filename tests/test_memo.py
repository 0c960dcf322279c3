"""The process's one cache (scan results, tool results, checkpoints): bounded by its bytes, least recently used out,
and a scan still answers right when its own results do not all fit."""

from __future__ import annotations

import collections
import datetime
import enum
import functools
import pickle
import random
import re
import shutil
import sys
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs import memo
from debug_training_logs.analysis import inventory
from debug_training_logs.analysis.grep import GrepSink
from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
from debug_training_logs.frozen import takes_positional
from debug_training_logs.memo import Memo, estimate, pack, unpack, unpack_item

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_the_least_recently_used_go_first_and_the_total_stays_under_the_budget() -> None:
    m = Memo(max_bytes=10_000)
    for i in range(5):
        m.put(("k", i), f"v{i}", 1_500)
    assert len(m) == 5 and m.nbytes <= 10_000
    assert m.get(("k", 0)) == "v0"  # now the most recently used
    for i in range(5, 9):
        m.put(("k", i), f"v{i}", 1_500)
        assert m.nbytes <= m.max_bytes
    assert m.get(("k", 0)) == "v0"
    assert m.get(("k", 1)) is None and m.get(("k", 2)) is None  # the oldest untouched ones went
    m.put(("huge",), "x", 20_000)  # larger than the whole budget: not kept, nothing else pushed out for it
    assert m.get(("huge",)) is None and m.get(("k", 8)) == "v8"
    m.put(("k", 8), "again", 100)  # a new value under the same key replaces the old one's bytes
    assert m.get(("k", 8)) == "again" and m.nbytes == sum(n for _v, n in m._items.values())
    m.put(("other",), "kept", 100)
    m.drop("k")
    assert len(m) == 1 and m.get(("other",)) == "kept" and m.nbytes == 100 + memo.ENTRY_OVERHEAD


@dataclass
class _Row:
    rank: int
    text: str


def test_packed_values_round_trip_and_one_item_reads_alone() -> None:
    value = ({"a": [_Row(1, "x" * 300)] * 3}, [_Row(2, "y")], None)
    p = pack(value)
    assert p.items and p.count == 3
    assert unpack(p) == value and unpack_item(p, 1) == [_Row(2, "y")] and unpack_item(p, 2) is None
    assert unpack(pack(())) == () and unpack(pack((None,))) == (None,) and unpack_item(pack((1, "a")), 1) == "a"
    big = tuple([_Row(k, f"line {k} " * 100)] for k in range(5))  # one compressed frame, each item read alone
    assert unpack(pack(big)) == big and unpack_item(pack(big), 3) == big[3] and pack(big).count == 5
    single = pack([_Row(3, "z" * 10_000)])
    assert not single.items and unpack(single) == [_Row(3, "z" * 10_000)]
    assert single.nbytes < 2_000  # compressed: log text repeats


def test_values_packed_and_unpacked_by_many_threads_at_once_come_back_whole() -> None:
    """The server runs tools in threads: packing must not share a compression state between them."""
    values = [[_Row(t, f"thread {t} line {i} " * 40) for i in range(200)] for t in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        back = list(pool.map(lambda v: [unpack(pack(v)) for _ in range(20)], values))
    assert all(got == [v] * 20 for got, v in zip(back, values, strict=True))


@dataclass(frozen=True, slots=True)
class _Frozen:
    line: int
    text: str
    parts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Derived:
    a: int
    b: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "b", self.a * 2)


@pytest.fixture
def fresh_makers() -> Iterator[None]:
    """The positional constructors and the picklers' table made afresh for the test (and after it)."""
    caches = (memo._MAKERS, memo._Pickler.dispatch_table, vars(memo.MAKERS))
    for cache in caches:
        cache.clear()
    yield
    for cache in caches:
        cache.clear()


def test_frozen_slotted_dataclasses_come_back_equal_and_shared_ones_stay_shared(fresh_makers: None) -> None:
    one = _Frozen(7, "x", ("a", "b"))
    value = ([one, one, _Frozen(8, "y")], _Derived(3))
    back = unpack(pack(value))
    assert back == value and back[0][0] is back[0][1] and back[1].b == 6
    assert type(back[0][0]) is _Frozen and back[0][0].parts == ("a", "b")
    assert memo._init_fields(_Frozen) == ("line", "text", "parts") and memo._init_fields(_Derived) is None
    assert memo._MAKERS[_Frozen] is not _Frozen  # rebuilt by its positional constructor, not the frozen __init__
    packed = pack(value)
    raw = memo._raw(packed.data)
    assert raw.count(b"MAKERS.") == 1  # the constructor by name, once per blob
    memo._MAKERS.clear()
    vars(memo.MAKERS).clear()  # as in a process that has packed nothing: the name is resolved on first use
    assert unpack(packed) == value
    assert memo._MAKERS[_Frozen] is getattr(memo.MAKERS, memo._MAKERS[_Frozen].__qualname__[7:])
    other = functools.partial(int, base=2)  # any other partial pickles as pickle makes it
    assert unpack(pack(other))("101") == 5


@dataclass(frozen=True, slots=True)
class _OwnInit:
    """A frozen slotted dataclass whose hand-written ``__init__`` does more than set the fields."""

    n: int
    label: str

    def __init__(self, n: int, label: str = "") -> None:
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "label", label or f"n={n}")


@dataclass(frozen=True, slots=True)
class _Child(_Frozen):
    extra: int = 0


@dataclass(frozen=True)
class _Unslotted:
    line: int


class _Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    "value",
    [
        _OwnInit(3, "kept"),
        _Child(1, "t", ("p",), extra=5),
        _Unslotted(4),
        _Colour.RED,
        _Colour,
        re.compile(r"rank(\d+)", re.I),
        Path("/a/b.log"),
        datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
        collections.Counter({"a": 2}),
        {frozenset({1, 2}): [b"x", 1.5, None, True]},
        _Row(1, "mutable dataclass"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_values_of_every_other_kind_come_back_as_pickle_would_make_them(value: object) -> None:
    back = unpack(pack([value, value]))
    assert back == [value, value] and back == pickle.loads(pickle.dumps([value, value]))
    assert type(back[0]) is type(value) and back[0] is back[1]
    if isinstance(value, _OwnInit):
        assert not takes_positional(_OwnInit) and memo._MAKERS[_OwnInit] is _OwnInit
    if isinstance(value, _Child):
        assert not takes_positional(_Child) and memo._MAKERS[_Child] is _Child


def test_estimate_grows_with_what_an_object_holds() -> None:
    small = [_Row(i, "t" * 100) for i in range(100)]
    big = [_Row(i, "t" * 100) for i in range(10_000)]
    s, b = estimate(small), estimate(big)
    assert 100 * 149 < s < 100 * 800
    assert 90 * s < b < 110 * s
    assert 0.5 * b < estimate(big, limit=5_000) < 2 * b  # past the limit: extrapolated, still the right size


def test_estimate_of_a_long_list_samples_its_entries_and_stays_near_the_exact_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's results are long lists of alike rows: the estimate visits a sample of them (a diagnosis of 1,024 ranks
    took longer to size than to build) and scales it up, close to what every object really holds."""
    rows = [_Row(i, f"rank {i} " * (1 + i % 7)) for i in range(20_000)]
    exact = sys.getsizeof(rows) + sum(
        sys.getsizeof(r) + sys.getsizeof(r.__dict__) + sys.getsizeof(r.rank) + sys.getsizeof(r.text) for r in rows
    )
    sized: list[object] = []
    real = sys.getsizeof
    monkeypatch.setattr(memo, "sys", type("Sys", (), {"getsizeof": staticmethod(lambda o: sized.append(o) or real(o))}))
    got = estimate(rows)
    assert 0.85 * exact < got < 1.15 * exact
    assert len(sized) < 20 * memo.SAMPLE  # not one call per object (100,000 of them)
    shared = "one text every row refers to " * 100
    same = [_Row(i, shared) for i in range(20_000)]
    assert estimate(same) >= estimate([_Row(i, "") for i in range(20_000)])  # counted again, never less


def _grep(logs: Path) -> Any:
    job = inventory.scan_job(logs, [g.regex for g in DEFAULT_PATTERNS], GrepSink)
    return [r for r in job.caller_results], job.inventory.ranks, [f.counts for f in job.files]


def test_a_scan_larger_than_the_cache_still_answers_and_the_cache_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_scans: list[int]
) -> None:
    shutil.copytree(FIXTURES / "data_stall", tmp_path / "job")
    logs = tmp_path / "job" / "logs"
    passes = counted_scans
    roomy = _grep(logs)
    assert _grep(logs) == roomy and len(passes) == 1  # the default budget: the second question reads nothing
    tiny = Memo(max_bytes=memo.MEMO.nbytes // 3)
    monkeypatch.setattr(memo, "MEMO", tiny)
    monkeypatch.setattr(inventory.CACHE, "memo", tiny)
    assert _grep(logs) == roomy  # the scan's own results, not the cache's, answer it
    assert len(passes) == 2 and 0 < tiny.nbytes <= tiny.max_bytes
    assert _grep(logs) == roomy and len(passes) == 3  # too little room to keep the job: read again, same answer


@pytest.mark.parametrize(
    ("text", "mb"), [(None, 96), ("", 96), ("abc", 96), ("-5", 96), ("1.5", 96), (" 32 ", 32), ("0", 0), ("4096", 4096)]
)
def test_cache_budget_from_the_environment_never_stops_the_import(text: str | None, mb: int) -> None:
    assert memo._budget_mb(text) == mb


def test_one_cli_command_keeps_no_tool_result_and_the_server_still_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within ``one_command`` (the CLI) a tool's result is computed, never sized nor kept; outside it (the server)
    the second call with the same arguments is answered from the cache."""
    from debug_training_logs.tools import _cache

    logs = FIXTURES / "cuda_oom" / "logs"
    calls: list[int] = []

    def compute() -> dict[str, int]:
        calls.append(1)
        return {"rows": len(calls)}

    def no_estimate(obj: Any, limit: int = 0) -> int:
        raise AssertionError("sized in a one-command process")

    with monkeypatch.context() as m:
        m.setattr(_cache, "estimate", no_estimate)
        with memo.one_command():
            assert not memo.MEMO.keep_results
            assert _cache.cached("t", logs, None, compute) == {"rows": 1}
            assert _cache.cached("t", logs, None, compute) == {"rows": 2}
    assert memo.MEMO.keep_results
    assert not any(isinstance(k, tuple) and k[0] == _cache.TOOL for k in memo.MEMO._items)
    assert _cache.cached("t", logs, None, compute) == {"rows": 3}
    assert _cache.cached("t", logs, None, compute) == {"rows": 3} and len(calls) == 3


def test_files_with_equal_results_hold_one_copy_and_read_back_the_same(tmp_path: Path) -> None:
    """Many small files where a consumer finds the same (nothing, mostly): their results are one object, not a copy
    per file, and every file's result reads back as a scan of it alone gives."""
    from debug_training_logs.logs.scan_cache import Alike

    logs = tmp_path / "logs"
    logs.mkdir()
    for r in range(40):
        (logs / f"rank-{r}.log").write_text(
            f"[rank{r}]: step 1 loss 2.0\n" + ("CUDA error: out of memory\n" if r == 7 else "")
        )
    shared = _grep(logs)
    job = inventory.scan_job(logs, [g.regex for g in DEFAULT_PATTERNS], GrepSink)
    per_file = job.files.per_file
    assert len({id(fr) for fr in per_file}) < len(per_file) // 2  # the 39 files without a hit share their result
    assert len({id(fr.counts) for fr in per_file}) <= 2
    seven = next(fr for lf, fr in zip(job.inventory.files, per_file, strict=True) if lf.rel == "rank-7.log")
    assert sum(seven.counts) >= 1 and all(
        fr is not seven for lf, fr in zip(job.inventory.files, per_file, strict=True) if lf.rel != "rank-7.log"
    )
    memo.MEMO.clear()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Alike, "__call__", lambda self, fr: fr)  # every file its own copy, as before
        assert _grep(logs) == shared


def _results(n: int, seed: int) -> list[tuple[Any, ...]]:
    """Values shaped like a small file's scan result: the same names and fields, different numbers and text."""
    rnd = random.Random(seed)
    return [
        (
            {"file": f"logs/rank-{i}.log", "lines": rnd.randrange(10**6), "ranks": sorted(rnd.sample(range(64), 4))},
            [f"[rank{i}]:[I0302 10:{rnd.randrange(60):02d}:00.0 ProcessGroupNCCL.cpp:900] step {j}" for j in range(6)],
            None,
        )
        for i in range(n)
    ]


def test_a_packed_value_holds_the_bytes_of_its_frame_not_zstds_worst_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "_DICT", None)
    values = _results(200, 1)
    tracemalloc.start()
    try:
        packed = [pack(v) for v in values]
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    frames = sum(len(p.data) for p in packed)
    assert all(p.data[0] != pickle.PROTO[0] for p in packed)  # compressed
    assert held < frames + 250 * len(packed)  # (the bytes objects, Packed and list: no compressBound-sized buffers)
    assert [unpack(p) for p in packed] == values


def test_the_process_dictionary_shrinks_small_results_and_every_value_reads_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values packed before the dictionary (in a worker forked earlier) and after it, settled or not, in this thread
    or another, read back the same; settled ones are much smaller."""
    monkeypatch.setattr(memo, "_DICT", None)
    monkeypatch.setattr(memo, "_SAMPLES", [])
    values = _results(memo.DICT_SAMPLES + 100, 2)
    before = [pack(v) for v in values]  # as a worker forked before the dictionary packs them
    settled = [memo.settle(p) for p in before]
    assert memo._DICT is not None and not memo._SAMPLES
    assert settled[: memo.DICT_SAMPLES] == before[: memo.DICT_SAMPLES]  # the samples themselves are kept as they came
    later = settled[memo.DICT_SAMPLES :]
    plain = sum(len(p.data) for p in before[memo.DICT_SAMPLES :])
    assert sum(len(p.data) for p in later) < plain / 2
    after = [pack(v) for v in values]  # a worker forked after it (or this process) packs with it
    assert [memo.settle(p) for p in after] == after
    assert [len(p.data) for p in after[memo.DICT_SAMPLES :]] == [len(p.data) for p in later]
    for got in (before, settled, after):
        assert [unpack(p) for p in got] == values
        assert [unpack_item(p, 1) for p in got] == [v[1] for v in values]
    with ThreadPoolExecutor(2) as pool:  # a server thread: its own codecs, made with the dictionary
        assert list(pool.map(unpack, settled + before)) == values + values
