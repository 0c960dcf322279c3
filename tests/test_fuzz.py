"""Property-based fuzzing (Hypothesis) of what reads hostile input: the line parsers, the conclusion JSON the verifier
accepts, and the discovery + scan layer over random trees of links, FIFOs, permissions, compressed and damaged files.

Properties: no exception escapes (other than the documented ``UserInputError``/``ValidationError``), every call stays
within a stated time and memory bound, and every input that is not read is listed with its reason.

Seeds are real lines from our fixtures, mutated (inserted, deleted, replaced characters; cut; glued; prefixed), plus
random text. The default run is bounded (``max_examples`` per test below, a few tens of seconds in all);
``deadline=None`` because a loaded 2-core machine makes Hypothesis' own per-example deadline flaky, and the bounds
asserted here are generous ones of our own. Set ``HYPOTHESIS_PROFILE=deep`` for a longer run.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import resource
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.inventory import scan_job
from debug_training_logs.errors import UserInputError
from debug_training_logs.formats import ais, torch_nccl, torch_nccl_types
from debug_training_logs.formats.timestamps import iso, parse_wall_time
from debug_training_logs.logs.attribution import file_name_node, file_name_rank, line_rank
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.reader import ReadProblems, iter_lines
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.verify import Conclusion
from debug_training_logs.verify.engine import verify_with_evidence

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    derandomize=False,
)
settings.register_profile("deep", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"

LINE_SECONDS = 0.5
"""A parser may spend at most this long on one line of up to ~20,000 characters (they take microseconds)."""
TREE_SECONDS = 30.0
"""Discovery plus a full scan of one random tree (a few dozen small files) must end within this."""
RSS_GROWTH_MB = 300
"""Peak RSS may grow by at most this much over the whole fuzz module (inputs are small: a leak or blow-up shows)."""


def _n(default: int) -> int:
    return 2000 if DEEP else default


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


START_RSS = 0.0
"""Peak RSS when this module's first test starts (set by :func:`_rss_baseline`). Taken then, not at import: pytest
imports every module before running any, and ru_maxrss is a high-water mark, so a baseline from import time would
charge this module with whatever the tests run between import and here allocated."""


@pytest.fixture(scope="module", autouse=True)
def _rss_baseline() -> None:
    global START_RSS
    START_RSS = _rss_mb()


@lru_cache(maxsize=1)
def _seed_lines() -> list[str]:
    """Real lines from our fixtures: every torch family, AIS records, launcher and SLURM lines."""
    out: list[str] = []
    for d in ("nccl_styles", "data_stall", "node_failure", "cuda_oom"):
        for p in sorted((FIXTURES / d).rglob("*")):
            if not p.is_file() or p.suffix in (".json", ".py", ".md"):
                continue
            data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
            lines = data.decode("utf-8", "replace").splitlines()
            out.extend(lines[:: max(1, len(lines) // 60)])
    assert len(out) > 200
    return out


@st.composite
def hostile_lines(draw: st.DrawFn) -> str:
    """A real line, mutated: characters inserted/replaced/deleted, cut, glued to others, prefixed, or random."""
    seeds = _seed_lines()
    kind = draw(st.sampled_from(["mutate", "mutate", "glue", "random", "huge"]))
    if kind == "random":
        return draw(st.text(max_size=400))
    line = draw(st.sampled_from(seeds))
    if kind == "glue":
        other = draw(st.sampled_from(seeds))
        sep = draw(st.sampled_from(["\r", "", " ", "\x1b[0m", "\t"]))
        return line + sep + other
    if kind == "huge":
        return line * draw(st.integers(1, 40)) + draw(st.sampled_from(["9" * 5000, "[" * 3000, "a" * 10000]))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["ins", "del", "rep", "cut", "digits"]))
        pos = draw(st.integers(0, len(line)))
        if op == "ins":
            line = line[:pos] + draw(st.text(min_size=1, max_size=8)) + line[pos:]
        elif op == "del":
            line = line[:pos] + line[pos + draw(st.integers(1, 10)) :]
        elif op == "rep":
            line = line[:pos] + draw(st.characters()) + line[pos + 1 :]
        elif op == "cut":
            line = line[:pos]
        else:  # numbers where numbers are: huge, negative, zero-padded
            line = line[:pos] + draw(st.sampled_from(["99999999999999999999", "-1", "000", "1e9"])) + line[pos:]
    return line


@contextmanager
def _bounded(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body takes longer than ``seconds`` or blocks (a FIFO opened)."""

    def alarm(_sig: int, _frame: Any) -> None:
        raise TimeoutError(f"took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    t0 = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - t0 < seconds


# -- parsers -----------------------------------------------------------------------------------------------------------


@settings(max_examples=_n(300))
@given(hostile_lines())
def test_nccl_parser_never_raises(line: str) -> None:
    with _bounded(LINE_SECONDS * 4):
        parsed = torch_nccl.parse_line(line)
        assert parsed is None or isinstance(parsed, torch_nccl_types.Parsed)
        torch_nccl.parse_pg_prefix(line)


@settings(max_examples=_n(300))
@given(hostile_lines())
def test_ais_record_parsers_never_raise(line: str) -> None:
    with _bounded(LINE_SECONDS * 4):
        for piece in ais.split_glued_records(line):
            rec = ais.parse_record(piece)
            if rec is not None:
                ais.parse_stats(rec.message) if hasattr(rec, "message") else None
        ais.parse_header(line)
        ais.parse_title(line)
        ais.parse_stats(line)
        ais.parse_hourly_marker(line)
        ais.classify_line(line)
        ais.line_template(line)
        ais.parse_log_name(line[:200])
        ais.parse_cli_name(line[:200])


@settings(max_examples=_n(40))
@given(st.lists(hostile_lines(), max_size=60), st.sampled_from([None, "aistarget.ais-target-1.INFO.0521-143022.1"]))
def test_ais_file_parser_never_raises(lines: list[str], name: str | None) -> None:
    parsed_name = ais.parse_log_name(name) if name else None
    with _bounded(LINE_SECONDS * 20):
        parser = ais.AisFileParser(parsed_name, year_hint=2025)
        records = list(parser.parse(enumerate(lines, 1)))
    assert len(records) <= sum(len(ais.split_glued_records(x)) for x in lines) + len(lines)


@settings(max_examples=_n(300))
@given(hostile_lines(), st.sampled_from([None, 2025, 1, 9999]))
def test_timestamps_and_rank_prefixes_never_raise(line: str, year: int | None) -> None:
    with _bounded(LINE_SECONDS * 4):
        t = parse_wall_time(line)
        if t is not None:
            iso(t, year)
        r = line_rank(line)
        assert r.rank is None or r.rank >= 0
        file_name_rank(line[:300])
        file_name_node(line[:300])


# -- conclusions JSON for verify --------------------------------------------------------------------------------------

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True),
    st.text(max_size=40),
)
_json = st.recursive(_json_leaf, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids))
_files = st.sampled_from(["error-1.out", "../outside.log", "/etc/passwd", "a/../../x", "", "nope.log", "f!member"])
_cited = st.fixed_dictionaries(
    {"file": _files, "line": st.integers(min_value=-5, max_value=10**12), "text": st.text(max_size=60)}
)
_conclusion = st.fixed_dictionaries(
    {
        "logs_dir": st.just("LOGS"),
        "category": st.sampled_from(
            ["data_loading_stall", "cuda_oom", "incomplete_evidence", "no_failure", "gpu_fabric", "bogus"]
        ),
        "culprit_ranks": st.lists(st.integers(min_value=-(10**12), max_value=10**12), max_size=6),
    },
    optional={
        "suspect_nodes": st.lists(st.text(max_size=20), max_size=3),
        "root_cause_event": _cited,
        "chain": st.lists(
            st.fixed_dictionaries({"event": st.text(max_size=20), "file": _files, "line": st.integers(-1, 10**9)}),
            max_size=4,
        ),
        "evidence": st.lists(_cited, max_size=4),
        "tz_offset_hours": st.floats(allow_nan=True, allow_infinity=True) | st.none(),
        "rank0_seq_gap": st.integers(min_value=-(10**18), max_value=10**18) | st.none(),
        "extra": _json,
    },
)


@lru_cache(maxsize=1)
def _evidence() -> tuple[Any, Path]:
    logs = (FIXTURES / "data_stall" / "logs").resolve()
    return gather_evidence(find_sources(logs, None)), logs


@settings(max_examples=_n(60))
@given(_conclusion | _json)
def test_verify_never_raises_on_hostile_conclusions(raw: Any) -> None:
    ev, logs = _evidence()
    if isinstance(raw, dict) and raw.get("logs_dir") == "LOGS":
        raw = {**raw, "logs_dir": str(logs)}
    text = json.dumps(raw, allow_nan=True)
    try:
        c = Conclusion.model_validate_json(text)
    except ValidationError:
        return
    with _bounded(30):
        v = verify_with_evidence(c, ev)
    assert v.checks and all(ch.rule for ch in v.checks)


@settings(max_examples=_n(40))
@given(st.binary(max_size=2000))
def test_conclusion_file_bytes_give_a_model_or_a_user_error(data: bytes) -> None:
    from debug_training_logs.cli import _read_model_arg

    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        fh.write(data)
        fh.flush()
        try:
            _read_model_arg(fh.name, Conclusion)
        except UserInputError as exc:
            assert str(exc)


# -- discovery and scanning over random trees --------------------------------------------------------------------------

_TEXT = "".join(
    f"[rank{r}]:[I0302 10:00:{r:02d}.000000000 ProcessGroupNCCL.cpp:900] step {r} loss 2.{r}\n" for r in range(8)
).encode()
_ENTRY_KINDS = [
    "text",
    "gz",
    "zst",
    "bz2",
    "xz",
    "gz_cut",
    "zst_cut",
    "bz2_cut",
    "xz_cut",
    "flipped",
    "binary",
    "empty",
    "noperm",
    "fifo",
    "link_in",
    "link_out",
    "link_loop",
    "link_dangling",
    "link_dir",
    "link_fifo",
    "subdir",
    "noperm_dir",
    "archive",
    "image",
    "hidden",
]


def _compress(kind: str, data: bytes) -> bytes:
    if kind.startswith("gz"):
        return gzip.compress(data)
    if kind.startswith("zst"):
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)
    if kind.startswith("bz2"):
        return bz2.compress(data)
    return lzma.compress(data)


def _make(root: Path, i: int, kind: str, seed: int, where: Path) -> tuple[str, str] | None:
    """Create entry ``i`` of ``kind`` under ``where``; return (path relative to root, expected outcome) for files."""
    name = f"e{i}_{kind}" + (".log" if kind not in ("archive", "image", "hidden", "subdir", "noperm_dir") else "")
    p = where / name
    data = _TEXT * (1 + seed % 50)
    if kind == "text":
        p.write_bytes(data)
    elif kind in ("gz", "zst", "bz2", "xz"):
        p.write_bytes(_compress(kind, data))
    elif kind.endswith("_cut"):
        comp = _compress(kind, data * 20)
        p.write_bytes(comp[: max(len(comp) // 2, 8) if seed % 2 else len(comp) - 1 - seed % 3])
        return p.relative_to(root).as_posix(), "damaged"
    elif kind == "flipped":
        comp = bytearray(_compress(["gz", "zst", "bz2", "xz"][seed % 4], data * 20))
        pos = len(comp) // 4 + seed % max(1, len(comp) // 2)
        comp[pos] ^= 1 << (seed % 8)
        p.write_bytes(bytes(comp))
        return p.relative_to(root).as_posix(), "any"
    elif kind == "binary":
        p.write_bytes(bytes((seed * 7 + k * 31) % 255 + 1 for k in range(9000)))
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "noperm":
        p.write_bytes(data)
        p.chmod(0)
        return p.relative_to(root).as_posix(), "any"
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "link_in":
        target = where / f"e{i}_target.log"
        target.write_bytes(data)
        os.symlink(target, p)
        return p.relative_to(root).as_posix(), "linked"
    elif kind == "link_out":
        os.symlink("/etc/hostname", p)
    elif kind == "link_loop":
        os.symlink(p.name, p)
    elif kind == "link_dangling":
        os.symlink(where / "does-not-exist", p)
    elif kind == "link_dir":
        os.symlink(root, p)
    elif kind == "link_fifo":
        fifo = where / f"e{i}_realfifo"
        os.mkfifo(fifo)
        os.symlink(fifo, p)
        return p.relative_to(root).as_posix(), "skipped"
    elif kind in ("subdir", "noperm_dir"):
        p.mkdir()
        (p / "inner.log").write_bytes(data)
        if kind == "noperm_dir":
            p.chmod(0)
        return None
    elif kind == "archive":
        p = where / f"e{i}.tar.gz"
        p.write_bytes(gzip.compress(b"x" * 100))
    elif kind == "image":
        p = where / f"e{i}.png"
        p.write_bytes(b"\x89PNG")
    elif kind == "hidden":
        p = where / f".e{i}"
        p.write_bytes(data)
    expected = {
        "text": "read",
        "gz": "read",
        "zst": "read",
        "bz2": "read",
        "xz": "read",
        "binary": "damaged",
        "empty": "read",
    }.get(kind, "skipped")
    return p.relative_to(root).as_posix(), expected


def _all_entries(root: Path) -> set[str]:
    """Every non-directory entry below ``root`` (links not followed), and the directories we cannot list."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for d in dirnames:
            if (here / d).is_symlink():
                out.add((here / d).relative_to(root).as_posix())
        for f in filenames:
            out.add((here / f).relative_to(root).as_posix())
    return out


@settings(max_examples=_n(25))
@given(
    st.lists(st.tuples(st.sampled_from(_ENTRY_KINDS), st.integers(0, 10_000), st.booleans()), min_size=1, max_size=24)
)
def test_random_trees_every_input_is_read_or_listed_with_a_reason(entries: list[tuple[str, int, bool]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "logs"
        (root / "sub").mkdir(parents=True)
        expected: dict[str, str] = {}
        locked: list[Path] = []
        try:
            for i, (kind, seed, nested) in enumerate(entries):
                got = _make(root, i, kind, seed, root / "sub" if nested else root)
                if got is not None:
                    expected[got[0]] = got[1]
                if kind == "noperm_dir":
                    locked.append((root / "sub" if nested else root) / f"e{i}_{kind}")
            with _bounded(TREE_SECONDS):
                files, skipped = discover(root)
                job = scan_job(root)
                cov = job.coverage()
            read = {f.rel for f in files}
            listed = {s.rel: s.reason for s in skipped}
            assert all(listed.values()), "every skipped entry has a reason"
            assert not read & set(listed)
            # everything on disk is accounted for: read, or listed with why (unreadable dirs as "dir/")
            unlisted_dirs = {s.rel.rstrip("/") for s in skipped if s.rel.endswith("/")}
            for entry in _all_entries(root):
                inside_locked = any(entry.startswith(d + "/") for d in unlisted_dirs)
                assert entry in read or entry in listed or inside_locked, entry
            problems = {u.file: u.reason for u in cov.unreadable_files}
            for rel, outcome in expected.items():
                if outcome == "read":
                    assert rel in read and rel not in problems, (rel, problems.get(rel))
                elif outcome == "damaged":
                    assert problems.get(rel), rel
                elif outcome == "skipped":
                    assert rel in listed and rel in problems, rel
                elif outcome == "linked":  # its target is read under its own name, once
                    assert rel in listed and rel not in problems, rel
            # every file read comes back with its reason when it was not read in full
            for rel in read:
                if rel in problems:
                    assert problems[rel]
            for lf in files:  # the line reader agrees with the scan on what is damaged
                rp = ReadProblems()
                with _bounded(TREE_SECONDS):
                    for _ in iter_lines(lf, rp):
                        pass
                assert (lf.rel in rp.items) == (lf.rel in problems), (lf.rel, rp.items, problems.get(lf.rel))
        finally:
            for d in locked:
                d.chmod(stat.S_IRWXU)
            for p in Path(tmp).rglob("*"):
                if not p.is_symlink() and p.exists() and not os.access(p, os.R_OK):
                    p.chmod(stat.S_IRWXU)
    assert _rss_mb() - START_RSS < RSS_GROWTH_MB


@pytest.mark.skipif(os.geteuid() != 0, reason="checks the root-specific path: permission bits do not stop root")
def test_root_reads_files_without_permission_bits(tmp_path: Path) -> None:
    p = tmp_path / "locked.log"
    p.write_bytes(_TEXT)
    p.chmod(0)
    files, skipped = discover(tmp_path)
    assert [f.rel for f in files] == ["locked.log"] and skipped == []
