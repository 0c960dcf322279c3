"""The native finder's AVX2 candidate filter (``_linescan.c``, ``teddy_build``/``teddy_next``) against its scalar loop
and a pure-Python reference.

``Finder(needles, anchors, simd=True)`` runs the filter whenever the CPU has AVX2 (``simd_filter()`` then names its
buckets), ``simd=False`` never (the scalar loop), ``simd=None`` (what the scan uses) when the rule of ``teddy_build``
says it pays. Every answer (hits with the needle named, line indexes, newlines, where a paged call stops) must be the
same from both loops. The filter tests 32 positions per step and leaves the last 32 bytes of a search to the scalar
loop, so the matrix puts needles and line ends at and around those edges, searches spans that do not start at 0 nor end
at the buffer's end, and pages the answer (``max_lines``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_native_scan import linescan, reference


def _filtering(mod: Any) -> None:
    """Skip where the filter cannot run (no AVX2 or not x86): the comparisons below would compare the scalar loop
    with itself."""
    if mod.Finder([b"ab"], None, True).simd_filter() is None:
        pytest.skip("this CPU has no AVX2: the finder only has its scalar loop")


TEXT_WORDS = [b"rank", b"step", b"loss", b"the", b"of", b"NCCL", b"INFO", b"[rank3]:", b"0.125", b"|", b"  ", b"="]


def _needles(rnd: random.Random, kind: str) -> list[bytes]:
    """A random needle set of one kind (see the matrix)."""

    def word(lo: int, hi: int, alphabet: bytes) -> bytes:
        return bytes(rnd.choice(alphabet) for _ in range(rnd.randint(lo, hi)))

    letters = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _:[]()=.-"
    if kind == "one byte":
        return [bytes([rnd.randrange(256)]) for _ in range(rnd.randint(1, 4))]
    if kind == "two bytes":
        return [word(2, 2, letters) for _ in range(rnd.randint(1, 12))]
    if kind == "long":
        return [word(9, 60, letters) for _ in range(rnd.randint(1, 6))]
    if kind == "shared pairs":
        pair = word(2, 2, letters)
        return [word(0, 3, letters) + pair + word(0, 3, letters) for _ in range(rnd.randint(2, 10))]
    if kind == "many buckets":  # far more distinct anchor pairs than 8 (or 32) buckets hold
        return [word(2, 12, letters) for _ in range(rnd.randint(40, 250))]
    if kind == "high bytes":
        hi = bytes(range(0x80, 0x100))
        return [word(1, 6, hi + b"\x00\r\t a") for _ in range(rnd.randint(1, 20))]
    if kind == "mixed":
        return _needles(rnd, "one byte")[:1] + _needles(rnd, "two bytes") + _needles(rnd, "high bytes")
    raise AssertionError(kind)


def _buffer(rnd: random.Random, needles: list[bytes], size: int) -> bytes:
    """Lines of text words with needles placed at the buffer's start and end, at line starts and ends, and around
    32-byte block edges."""
    out = bytearray()
    if rnd.random() < 0.5:
        out += rnd.choice(needles)
    while len(out) < size:
        r = rnd.random()
        if r < 0.15:
            out += b"\n"
        elif r < 0.25:
            # a needle (or its first bytes) ending or starting right at a block edge of the filter's steps
            nd = rnd.choice(needles)
            edge = (len(out) // 32 + 1) * 32 + rnd.choice([-2, -1, 0, 1])
            out += b"x" * max(0, edge - len(out) - rnd.randint(0, len(nd)))
            out += nd if rnd.random() < 0.7 else nd[: max(1, len(nd) - 1)]
        elif r < 0.3:
            out += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        else:
            out += rnd.choice(TEXT_WORDS) + (b" " if rnd.random() < 0.5 else b"")
    if rnd.random() < 0.5:
        out += rnd.choice(needles)
    if rnd.random() < 0.5:
        out += b"\n"
    return bytes(out)


def _pages(f: Any, buf: bytes, start: int, end: int, page: int) -> list[Any]:
    """Every find_lines answer from start to end, paged by ``page`` lines (0: one call)."""
    out: list[Any] = []
    pos = start
    while True:
        hits, nl, stop = f.find_lines(buf, pos, page, end)
        out.append((hits, nl, stop))
        if stop >= end or page <= 0:
            return out
        assert stop > pos
        pos = stop


KINDS = ["one byte", "two bytes", "long", "shared pairs", "many buckets", "high bytes", "mixed"]


def _lines(pages: list[Any]) -> list[Any]:
    """``_pages`` without the needle named in each hit (with three-byte fingerprints a line holding several needles
    may name another one than the scalar loop; the lines, their indexes, the newlines and the stops never differ)."""
    return [([h[:3] for h in hits], nl, stop) for hits, nl, stop in pages]


# the filter's configurations: (simd, width, profile of): profile of "text" is pair_profile of the searched buffer
# (the buckets fitted to the very text they filter), "other" of unrelated random bytes
CONFIGS = [(True, 2, None), (True, 3, None), (True, 0, "text"), (16, 3, "other"), (32, 2, "text"), (8, 3, "text")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-w{c[1]}-{c[2]}")
def test_filter_equals_scalar_loop_and_reference(kind: str, seed: int, config: tuple[Any, int, str | None]) -> None:
    mod = linescan()
    _filtering(mod)
    rnd = random.Random(f"{kind}/{seed}")
    needles = _needles(rnd, kind)
    anchors = None if rnd.random() < 0.3 else [rnd.randrange(max(1, len(nd) - 1)) for nd in needles]
    buf = _buffer(rnd, needles, rnd.choice([40, 200, 3000, 20000]))
    mode, width, of = config
    text = {"text": buf, "other": bytes(rnd.randrange(256) for _ in range(5000)), None: None}[of]
    profile = None if text is None else mod.pair_profile(text, rnd.choice([16, 1024]))
    simd = mod.Finder(needles, anchors, mode, width, profile)
    scalar = mod.Finder(needles, anchors, False)
    auto = mod.Finder(needles, anchors, None, 0, profile)
    assert scalar.simd_filter() is None
    buckets, _rate, used = simd.simd_filter()  # at most 256 distinct fingerprints here: the filter is built
    assert buckets in (8, 16, 32) and (mode is True or buckets <= mode)  # few fingerprints fill fewer mask sets
    assert used in ((2, 3) if width == 0 else (width,))
    same = _pages if used == 2 else lambda *a: _lines(_pages(*a))
    n = len(buf)
    spans = [(0, n)]
    for _ in range(3):
        lo = rnd.randrange(n + 1)
        if rnd.random() < 0.5:  # the scan's spans start at a line start
            lo = buf.find(b"\n", lo) + 1 or n
        spans.append((lo, rnd.randint(lo, n)))
    for lo, hi in spans:
        want, nl = reference(buf[lo:hi], needles)
        for page in (0, 1, 3):
            got = _pages(simd, buf, lo, hi, page)
            assert same(simd, buf, lo, hi, page) == same(scalar, buf, lo, hi, page), (lo, hi, page)
            assert _lines(got) == _lines(_pages(auto, buf, lo, hi, page)), (lo, hi, page)
            hits = [h for hs, _nl, _stop in got for h in hs]
            before, lines = 0, []
            for hs, got_nl, _stop in got:
                lines += [(ls - lo, le - lo, before + rel) for ls, le, rel, _w in hs]
                before += got_nl
            assert lines == want and before == nl
            for ls, le, _rel, which in hits:
                assert needles[which] in buf[ls:le]
        every = simd.find_lines(buf, lo, 0, hi, True)
        assert every == scalar.find_lines(buf, lo, 0, hi, True)
    # the dense sample's stride walk runs the same scan
    cuts = sorted(rnd.randrange(n + 1) for _ in range(6))
    ascending = [(cuts[i], cuts[i + 1]) for i in range(0, 6, 2)]
    assert simd.sample(buf, ascending, 7, 0) == scalar.sample(buf, ascending, 7, 0)


def test_every_block_offset_of_every_needle() -> None:
    """One needle of each length placed at every offset of two filter steps, alone in a buffer of each length around
    the 33 bytes the filter needs: found exactly where the scalar loop finds it."""
    mod = linescan()
    _filtering(mod)
    for nd in [b"q", b"qz", b"qzj", b"\xffz", b"Watchdog caught"]:
        filler = [b"a", b"b", b"c", b"z"]  # a one-byte or two-byte needle must not occur by chance
        scalar = mod.Finder([nd, b"\x01\x02"], None, False)
        for width in (2, 3):
            simd = mod.Finder([nd, b"\x01\x02"], None, True, width)
            for size in (31, 32, 33, 34, 35, 64, 65, 66, 67, 97):
                for at in range(size - len(nd) + 1):
                    rnd = random.Random(at)
                    body = bytes(rnd.choice(filler)[0] for _ in range(size))
                    buf = body[:at] + nd + body[at + len(nd) :]
                    got = simd.find_lines(buf)
                    assert got == scalar.find_lines(buf)
                    assert [h[:2] for h in got[0]] == [(0, size)], (nd, size, at, width)


def test_the_rule_keeps_the_scalar_loop_where_the_filter_would_pass_most_positions() -> None:
    """The automatic choice is made per needle set: rare pairs get the filter, pairs of common text letters (whose
    nibble masks pass most text) do not."""
    mod = linescan()
    _filtering(mod)
    assert mod.Finder([b"NCCL WARN", b"Traceback (most"]).simd_filter() is not None
    common = [bytes([a, b]) for a in b"etaoinsr hdlcum" for b in b"etaoinsr hdlcum"]
    f = mod.Finder(common)
    assert f.simd_filter() is None
    buckets, rate, _width = mod.Finder(common, None, True, 2).simd_filter()
    assert buckets in (16, 32) and rate > 0.05  # 16 and 32 buckets pass as much here
    # more distinct anchor pairs than teddy_build merges: the scalar loop even when asked for the filter
    many = [bytes([a, b]) for a in range(0x41, 0x5B) for b in range(0x61, 0x7B)]
    assert mod.Finder(many, None, True).simd_filter() is None


def test_a_profile_is_read_and_changes_only_the_speed() -> None:
    """pair_profile lists a sample's pairs by count; a Finder given one merges its buckets on it (the rate it reports
    is then the profile's estimate, not the prior's) and finds the same lines."""
    mod = linescan()
    _filtering(mod)
    prof = mod.pair_profile(b"abab")
    assert prof == (3).to_bytes(4, "little") + b"ab" + (2).to_bytes(4, "little") + b"ba" + (1).to_bytes(4, "little")
    assert mod.pair_profile(b"abab", 1) == prof[:10] and mod.pair_profile(b"") == bytes(4)
    with pytest.raises(ValueError):
        mod.Finder([b"ab"], None, True, 0, b"12345")
    rnd = random.Random(5)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    needles = [bytes(rnd.choice(letters) for _ in range(rnd.randint(4, 9))) for _ in range(60)]
    line = b"[rank3]: 2026-01-01 12:00:00 lhotse.dataset.sampling DEBUG: fetched bucket of 64 cuts\n"
    text = line * 400 + needles[7] + b"\n"
    blind = mod.Finder(needles, None, 16, 2)
    fitted = mod.Finder(needles, None, 16, 2, mod.pair_profile(text))
    assert blind.find_lines(text) == fitted.find_lines(text)
    assert fitted.find_lines(text)[0][-1][:2] == (len(text) - len(needles[7]) - 1, len(text) - 1)
    assert fitted.simd_filter()[1] != blind.simd_filter()[1]


def test_the_planner_profiles_its_sample_for_the_matchers_finder(monkeypatch: pytest.MonkeyPatch) -> None:
    """make_plan keeps pair_profile of its sample in the plan and the matcher's finder merges its buckets on it; the
    lines found from a plan with the profile and one without are the same, and with no sample (or without the
    extension: the Aho-Corasick passes need none) there is no profile."""
    mod = linescan()
    _filtering(mod)
    from debug_training_logs.logs import scan_matcher, scan_plan, scan_types

    spec = scan_types.PatternSpec(
        patterns=("NCCL WARN", "Traceback \\(most recent", r"loss[: =]+nan", "CUDA error", "watchdog", "exitcode")
    )
    line = b"[rank3]: DEBUG:lhotse.dataset.sampling.dynamic_bucketing: rank 3 bucket 0 took 64 cuts (1.5s)\n"
    rare = b"[rank1]: NCCL WARN net.cc:12 watchdog fired\n[rank2]: loss: nan at step 7\n"
    text = line * 300 + rare + line * 300
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_NO_NATIVE", "1")
    assert scan_plan.make_plan(spec, text).profile == b""
    monkeypatch.delenv("DEBUG_TRAINING_LOGS_NO_NATIVE")
    plan = scan_plan.make_plan(spec, text)
    assert plan.profile == mod.pair_profile(text) and scan_plan.make_plan(spec, b"").profile == b""
    assert "profile" not in repr(plan)
    fitted = scan_matcher._Matcher(spec, plan, frozenset(range(len(spec.patterns)))).finder
    blind = mod.Finder([lit for lit, _k in plan.anchors], [k for _lit, k in plan.anchors])
    assert fitted.simd_filter() != blind.simd_filter()
    assert fitted.find_lines(text, 0, 0, len(text), True) == blind.find_lines(text, 0, 0, len(text), True)
    lits = [lit for lit, _k in plan.anchors]
    lines = text.split(b"\n")
    want = [k for k, ln in enumerate(lines) if any(lit in ln for lit in lits)]
    assert [h[2] for h in fitted.find_lines(text)[0]] == want == [300]  # the NCCL WARN line (the loss one: a DFA's)
