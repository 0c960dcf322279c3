"""``_linescan.collect_ranks`` against ``re.findall`` of the ``[rankN]:`` prefix, on every search path it has.

The native search remembers the prefixes it met last and compares a new hit with them as bytes (16 at a time), and
with AVX2 it gathers the hits of 4 KiB before it visits them. These tests build buffers long enough to cross those
batches, full of the cases where a byte compare could differ from the regex: prefixes cut by the span's start or end,
``[rank`` without digits or with another byte after ``]``, overlapping starts (``[rank[rank3]:``), several prefixes
on a line, digit strings of 1 to 25 digits (past the 16 bytes compared at once and the 23 the table keeps), leading
zeros, more distinct ranks than the table holds, prefixes that share the fast path's key, and bytes >= 0x80.
"""

from __future__ import annotations

import mmap
import random
import re
from pathlib import Path
from typing import Any

import pytest
from test_native_scan import linescan

from debug_training_logs.logs import scan_dense

RANK_TAG = re.compile(rb"\[rank(\d+)\](?::| )")
SIMD = (0, 1, 2)  # no SIMD, SSE2 at most, the best the CPU has (AVX2 here when it has it)


def _want(buf: bytes, lo: int, hi: int) -> set[str]:
    return {d.decode() for d in RANK_TAG.findall(buf[lo:hi])}


def _digits(rnd: random.Random, pool: list[bytes]) -> bytes:
    """A digit string: mostly one of a few (a node's ranks), sometimes a fresh one of 1 to 25 digits."""
    if pool and rnd.random() < 0.8:
        return rnd.choice(pool)
    n = rnd.choice([1, 1, 2, 3, 4, 5, 8, 9, 10, 11, 16, 23, 24, 25])
    return bytes(rnd.choice(b"0123456789") for _ in range(n))


def _piece(rnd: random.Random, pool: list[bytes]) -> bytes:
    """One piece of a line: a prefix (valid or one byte off), text, or a trap."""
    d = _digits(rnd, pool)
    sep = rnd.choice([b":", b" "])
    choice = rnd.randrange(17)
    if choice < 7:
        return b"[rank" + d + b"]" + sep  # a prefix
    return [
        b"[rank]" + sep,  # no digits
        b"[rank" + d + b"]x",  # another byte after ]
        b"[rank" + d + b"]]" + sep,
        b"[rank[rank" + d + b"]" + sep,  # overlapping starts: the second counts
        b"[rank" + d + b"x]" + sep,
        b"[r[rank" + d + b"]" + sep,
        b"[Rank" + d + b"]" + sep,
        bytes(rnd.randrange(0x80, 0x100) for _ in range(rnd.randrange(1, 6))) + b"[rank" + d + b"]" + sep,
        b"[rank\xd9\xa3]:",  # a non-ASCII digit: not \d in a bytes regex
        b"[rank" + d + b"][rank" + _digits(rnd, pool) + b"]" + sep,  # a separator missing: the next one counts
    ][choice - 7]


def _buffer(rnd: random.Random, size: int, distinct: int) -> bytes:
    """Lines of about 0-200 bytes, each starting with a prefix or a trap, some holding more pieces."""
    pool = [str(rnd.randrange(10 ** rnd.randrange(1, 6))).encode() for _ in range(distinct)]
    if rnd.random() < 0.3:
        pool = [b"0" + d for d in pool]  # leading zeros are part of the string
    out = bytearray()
    filler = b"abc [r xyz ]: 0123 " * 12
    while len(out) < size:
        out += _piece(rnd, pool)
        for _ in range(rnd.choice([0, 0, 0, 1, 2])):
            at = rnd.randrange(0, 40)
            out += filler[:at] + _piece(rnd, pool)
        out += filler[: rnd.randrange(0, 200)] + rnd.choice([b"\n", b"\r\n", b"\n", b""])
    return bytes(out)


def _check(mod: Any, buf: Any, raw: bytes, lo: int, hi: int, before: set[str]) -> None:
    want = _want(raw, lo, hi)
    for simd in SIMD:
        got = set(before)
        added = mod.collect_ranks(buf, got, lo, hi, simd)
        assert got == before | want, (simd, lo, hi, sorted(got ^ (before | want))[:5])
        assert added == len(want - before), (simd, lo, hi)


@pytest.mark.parametrize("seed", range(60))
def test_random_buffers_match_the_regex(seed: int) -> None:
    """Random buffers of up to 20 KB (several 4 KiB batches), random spans and random sets to start from."""
    mod = linescan()
    rnd = random.Random(seed)
    raw = _buffer(rnd, rnd.choice([100, 3000, 9000, 20000]), rnd.choice([1, 3, 8, 40]))
    spans = [(0, len(raw))] + [tuple(sorted(rnd.randrange(len(raw) + 1) for _ in range(2))) for _ in range(6)]
    # spans that start or end at a prefix, or inside it
    starts = [m.start() for m in re.finditer(rb"\[rank", raw)]
    for at in rnd.sample(starts, min(6, len(starts))):
        spans += [(at, len(raw)), (at + rnd.randrange(1, 9), len(raw)), (0, at + rnd.randrange(0, 12))]
    for lo, hi in spans:
        before = set(rnd.sample(sorted(_want(raw, 0, len(raw))) or ["1"], 1)) if rnd.random() < 0.4 else set()
        _check(mod, raw, raw, lo, min(hi, len(raw)), before)
    _check(mod, bytearray(raw), raw, 0, len(raw), set())
    _check(mod, memoryview(raw), raw, 0, len(raw), set())


def test_every_prefix_length_at_every_end() -> None:
    """A prefix of each length (1 to 25 digits, both separators) ending at each distance from the span's end: the
    16-byte compare must not read past the end, and a prefix cut before its separator does not count."""
    mod = linescan()
    for n in range(1, 26):
        d = ("".join(str((n + i) % 10) for i in range(n))).encode()
        for sep in (b":", b" "):
            body = (b"[rank" + d + b"]" + sep + b" x\n") * 40  # learnt first, then met again
            for tail in range(0, 24):
                raw = body + b"yy[rank" + d + b"]" + sep + b"z" * tail
                for cut in range(0, 3):
                    hi = len(raw) - tail - cut
                    _check(mod, raw, raw, 0, hi, set())
                    _check(mod, raw, raw, len(body) + 1, hi, set())


def test_prefixes_sharing_a_key_alternate() -> None:
    """Prefixes the remembered-prefix table files under one key (same last digit, same second-to-last digit's low
    bits, same separator) and near-misses of a remembered prefix, interleaved line by line."""
    mod = linescan()
    ranks = [b"5", b"35", b"75", b"1135", b"05", b"005"]
    lines = []
    for i in range(3000):
        d = ranks[i % len(ranks)]
        lines.append(b"[rank" + d + b"]: step %d\n" % i)
        if i % 7 == 0:
            lines.append(b"[rank" + d + b"5]: longer\n")  # one more digit than a remembered prefix
        if i % 11 == 0:
            lines.append(b"[rank" + d + b"]x not a prefix [rank9" + d + b"] yes\n")
    raw = b"".join(lines)
    for lo, hi in [(0, len(raw)), (3, len(raw) - 5), (4096, 9000)]:
        _check(mod, raw, raw, lo, hi, set())


def test_more_ranks_than_the_tables() -> None:
    """Thousands of distinct ranks, each met several times in a row and again later: the tables of the call are
    overwritten, the set stays right."""
    mod = linescan()
    rnd = random.Random(7)
    ranks = [str(r).encode() for r in range(4096)]
    lines = [b"[rank%s]: a\n[rank%s] b\n" % (r, r) for r in ranks]
    lines += [b"[rank%s]: again\n" % rnd.choice(ranks) for _ in range(5000)]
    raw = b"".join(lines)
    _check(mod, raw, raw, 0, len(raw), set())
    _check(mod, raw, raw, 0, len(raw), {"17", "not a rank"})


def test_memory_map(tmp_path: Path) -> None:
    """A span of a memory-mapped file ending at the map's last byte (no byte after it may be read)."""
    mod = linescan()
    raw = _buffer(random.Random(3), 3 * mmap.PAGESIZE, 8)
    raw = raw[: 3 * mmap.PAGESIZE - 9] + b"[rank42]:"
    path = tmp_path / "node.log"
    path.write_bytes(raw)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        _check(mod, mm, raw, 0, len(raw), set())
        _check(mod, mm, raw, len(raw) - 9, len(raw), set())
    assert "42" in _want(raw, 0, len(raw))


@pytest.mark.parametrize("seed", range(10))
def test_python_path_agrees(seed: int) -> None:
    """The scan's path without the extension (RE2 over the ranks not yet seen) finds the same set."""
    rnd = random.Random(seed)
    raw = _buffer(rnd, 9000, rnd.choice([1, 8, 40]))
    got: set[str] = set()
    scan_dense._collect_ranks_regex(raw, got)
    assert got == _want(raw, 0, len(raw))
