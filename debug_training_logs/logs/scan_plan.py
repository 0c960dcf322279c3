"""Planning a scan: which literals go to the prefilter, which patterns to the RE2 DFA (:func:`make_plan`), chosen on a
sample of the corpus (:func:`_sample`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import open_binary
from debug_training_logs.logs.scan_engines import _aho_corasick, _native
from debug_training_logs.logs.scan_patterns import _PURE_META, _re2_error, _relaxed, _top_items, required_literals
from debug_training_logs.logs.scan_types import Branches, Lit, PatternSpec, Plan

SAMPLE_BYTES = 96 << 10
"""Bytes sampled from each of up to :data:`SAMPLE_FILES` files to choose the prefilter literals."""


SAMPLE_FILES = 8


SEPARATE_DFA_MAX = 4
"""Up to this many DFA patterns are searched one by one (each can use its literal prefix); more: one alternation."""


MAX_LITERALS_TRIED = 4
"""Literals of one pattern branch whose frequency is measured on the sample (the longest ones)."""


LINE_CHECK_PAIRS = 128
"""How many false candidates of a literal's anchor pair (a pair the native finder stops at, compares and skips, ~10 ns
each) cost about as much as one candidate line checked in Python (~1.5 us): the planner's exchange rate when it
weighs a rare literal with a common anchor pair (``complete``: ``le`` of "samples") against a more frequent one with a
rare pair (``raining ``)."""


DENSE_LITERAL_BYTES = 2048
"""A pattern whose rarest literals occur more than once per this many sample bytes goes to the RE2 DFA pass."""


DIGIT_NEEDLES_MAX = 100
"""Most literals a run of digits and literal characters of a DFA pattern is spelt out into (``20\\d\\d-``: 100
needles ``2000-`` .. ``2099-``), see :func:`_digit_needles`."""


DIGIT_STOP_BYTES = 256
"""Spelt-out digit needles replace a DFA search only if their anchor pairs stop the native finder less than once per
this many sample bytes (a stop costs ~10 ns; RE2's memchr-skipping search costs ~0.1 ms per MB)."""


_FOLD_SAFE = frozenset("abcdefghijlmnopqrtuvwxyzABCDEFGHIJLMNOPQRTUVWXYZ")
"""ASCII letters whose case folding stays in ASCII (RE2 folds k to the Kelvin sign and s to long s)."""


def _fold_variants(text: str) -> list[str]:
    """Every ASCII-case spelling of ``text`` (its letters must be in :data:`_FOLD_SAFE`)."""
    out = [""]
    for ch in text:
        spellings = (ch.lower(), ch.upper()) if ch in _FOLD_SAFE else (ch,)
        out = [o + c for o in out for c in spellings]
    return out


def _fold_pieces(lit: Lit) -> list[str]:
    """Substrings of a case-insensitive literal usable by a case-sensitive prefilter: ASCII only, no letter whose
    folding leaves ASCII, at most three letters (eight spellings)."""
    text = lit.text
    out: list[str] = []
    for i in range(len(text)):
        for j in range(i + 1, len(text) + 1):
            piece = text[i:j]
            if not piece.isascii() or any(c.isalpha() and c not in _FOLD_SAFE for c in piece):
                break
            if sum(c.isalpha() for c in piece) > 3:
                break
            out.append(piece)
    return out


def make_plan(spec: PatternSpec, sample: bytes) -> Plan:
    """Choose how to search ``spec`` (see module doc), using a ``sample`` of the corpus to pick rare literals.

    A pattern without a usable literal goes to the DFA alone; the others keep the prefilter (an earlier version sent
    every pattern to the DFA as soon as one had no literal: that was the slow path of big marker sets)."""
    re2_ids: list[int] = []
    fallback: list[int] = []
    for i, pat in enumerate(spec.patterns):
        (re2_ids if _re2_error(pat, spec.ignore_case) is None else fallback).append(i)
    dense_flags = spec.dense or (False,) * len(spec.patterns)
    if not re2_ids:
        return Plan(fallback=tuple(fallback))
    branches = {i: required_literals(spec.patterns[i], spec.ignore_case) for i in re2_ids}
    # which literals' counts the choice below asks for does not depend on the counts: list them first, count them all
    # in one pass over the sample, then choose
    wanted: dict[tuple[str, bool], int] = {}

    def ask(text: str, fold: bool) -> int:
        wanted[(text, fold)] = 0
        return 0

    for i in re2_ids:
        _needles(branches[i], ask)
    seen = _count_literals(sample, list(wanted))

    def occurrences(text: str, fold: bool) -> int:
        return seen[(text, fold)]

    literals: set[tuple[bytes, int]] = set()
    dfa: list[int] = []
    dense_needles: list[tuple[int, tuple[bytes, ...]]] = []
    for i in re2_ids:
        mine = _needles(branches[i], occurrences)
        if dense_flags[i]:
            dense_needles.append((i, tuple(sorted({lit for lits, _n in mine for lit in lits})) if mine else ()))
        if mine is None:
            dfa.append(i)
            continue
        expected = sum(n for _lit, n in mine)
        if sample and expected * DENSE_LITERAL_BYTES > len(sample) and not dense_flags[i]:
            dfa.append(i)  # its literals are everywhere: a line check per hit would cost more than a DFA pass
        else:
            literals |= {(lit, i) for lits, _n in mine for lit in lits}
    if _aho_corasick() is None:
        return Plan(dfa=tuple(re2_ids), fallback=tuple(fallback), dense=tuple(dense_needles))
    native = _native()
    if native is not None and sample and not spec.ignore_case:
        # a DFA pattern with a run of digits and literal characters (an ISO date's ``20\d\d-``) is found by the
        # native finder's pass instead, when the run's spelt-out needles are rare on the sample (one DFA search less)
        spelt = _digit_plans(spec, [i for i in dfa if not dense_flags[i]], sample)
        literals |= {(nd, i) for i, needles in spelt.items() for nd in needles}
        dfa = [i for i in dfa if i not in spelt]
    distinct = sorted({lit for lit, _i in literals})
    dfa_pats = list(dict.fromkeys(spec.patterns[i] for i in dfa))
    dfa_search = tuple(
        (pat, suffix)
        for pat in (dfa_pats if len(dfa_pats) <= SEPARATE_DFA_MAX else [])  # more: one alternation, searched as is
        if (suffix := _rare_suffix(pat, sample, spec.ignore_case)) is not None
    )
    anchors = tuple(zip(distinct, native.choose_anchors(sample, distinct), strict=True)) if native and distinct else ()
    return Plan(
        literals=tuple(sorted(literals)),
        dfa=tuple(dfa),
        fallback=tuple(fallback),
        anchors=anchors,
        profile=native.pair_profile(sample) if native and distinct and sample else b"",
        dense=tuple(dense_needles),
        dfa_search=dfa_search,
    )


def _digit_needles(pattern: str) -> list[tuple[bytes, ...]]:
    """Spelt-out runs of ``pattern``: per maximal run of consecutive top-level items that are a literal character or
    one digit (``\\d``, ``[0-9]``; no quantifier), with at least one of each and at most :data:`DIGIT_NEEDLES_MAX`
    spellings, every spelling of it. Every match of the pattern holds one spelling of each run (RE2's ``\\d`` is
    ASCII only). Empty for a pattern :func:`_top_items` cannot read (a top-level alternation, inline flags)."""
    items = _top_items(pattern)
    if not items:
        return []
    bounds = [*items, len(pattern)]
    sets: list[str | None] = []  # per item: the characters it matches, None: not usable in a run
    for k in range(len(items)):
        item = pattern[bounds[k] : bounds[k + 1]]
        if item in ("\\d", "[0-9]"):
            sets.append("0123456789")
        elif len(item) == 1 and item not in _PURE_META and item.isascii() and item.isprintable():
            sets.append(item)
        elif (
            len(item) == 2 and item[0] == "\\" and not item[1].isalnum() and item[1].isascii() and item[1].isprintable()
        ):
            sets.append(item[1])
        else:
            sets.append(None)
    out: list[tuple[bytes, ...]] = []
    end_of_last = -1
    for start in range(len(sets)):
        run: list[str] = []
        size = 1
        for chars in sets[start:]:
            if chars is None or size * len(chars) > DIGIT_NEEDLES_MAX:
                break
            run.append(chars)
            size *= len(chars)
        end = start + len(run)
        if end <= end_of_last:
            continue  # a tail of the previous run: never rarer
        end_of_last = end
        if any(len(c) > 1 for c in run) and any(len(c) == 1 for c in run):
            spelt = tuple("".join(p).encode() for p in itertools.product(*run))
            if spelt not in out:
                out.append(spelt)
    return out


def _digit_plans(spec: PatternSpec, ids: list[int], sample: bytes) -> dict[int, tuple[bytes, ...]]:
    """For DFA patterns ``ids``: the spelt-out run (:func:`_digit_needles`) the native finder can search instead of a
    DFA, per pattern that has one whose needles are rare on ``sample`` (:data:`DENSE_LITERAL_BYTES`) and whose anchor
    pairs stop the finder rarely (:data:`DIGIT_STOP_BYTES`); the cheapest run by the planner's measure (its lines and
    its rarest pairs' stops, :data:`LINE_CHECK_PAIRS`). Needs the native extension (one counting pass)."""
    runs = {i: _digit_needles(spec.patterns[i]) for i in ids}
    keys = sorted({nd for rs in runs.values() for r in rs for nd in r})
    keys += sorted({nd[j : j + 2] for nd in keys for j in range(len(nd) - 1)} - set(keys))
    if not keys:
        return {}
    counted = dict(zip(keys, _native().count_literals(sample, keys), strict=True))
    out: dict[int, tuple[bytes, ...]] = {}
    for i, rs in runs.items():
        best: tuple[int, tuple[bytes, ...]] | None = None
        for needles in rs:
            lines = sum(counted[nd] for nd in needles)
            stops = sum(min(counted[nd[j : j + 2]] for j in range(len(nd) - 1)) for nd in needles)
            if lines * DENSE_LITERAL_BYTES > len(sample) or stops * DIGIT_STOP_BYTES > len(sample):
                continue
            cost = lines * LINE_CHECK_PAIRS + stops
            if best is None or cost < best[0]:
                best = (cost, needles)
        if best is not None:
            out[i] = best[1]
    return out


def _count_literals(sample: bytes, keys: list[tuple[str, bool]]) -> dict[tuple[str, bool], int]:
    """(text, fold) -> occurrences of ``text`` in ``sample`` (non-overlapping, as ``bytes.count``; ``fold``: of its
    lower case in the lower-cased sample), counted natively in one pass per case when the extension is built."""
    plain = [(t, f) for t, f in keys if not f]
    folded = [(t, f) for t, f in keys if f]
    out: dict[tuple[str, bool], int] = {}
    native = _native()
    for group, buf in ((plain, sample), (folded, sample.lower() if folded else b"")):
        if not group:
            continue
        needles = [t.encode().lower() if f else t.encode() for t, f in group]
        counts = native.count_literals(buf, needles) if native is not None else [buf.count(nd) for nd in needles]
        out.update(zip(group, counts, strict=True))
    return out


def _needles(
    branches: Branches | None, occurrences: Callable[[str, bool], int]
) -> list[tuple[tuple[bytes, ...], int]] | None:
    """The cheapest literal (all its case spellings) of every branch of a pattern (its :func:`required_literals`) with
    its sample count, or None when some branch has no literal a case-sensitive search can use.

    Cheapest: fewest sample occurrences (each is a candidate line to check) weighed against how often its rarest byte
    pair occurs (each is a stop of the native finder, :data:`LINE_CHECK_PAIRS` of them cost one line check); ties: the
    fewer occurrences, then the longer literal."""
    if branches is None:
        return None

    def pairs(text: str, fold: bool) -> int:
        """Sample occurrences of ``text``'s rarest byte pair (of ``text`` itself when it is one character)."""
        if len(text) < 2:
            return occurrences(text, fold)
        return min(occurrences(text[j : j + 2], fold) for j in range(len(text) - 1))

    out: list[tuple[tuple[bytes, ...], int]] = []
    for br in branches:
        options: list[tuple[int, int, int, list[str]]] = []  # (cost, sample count, -length, spellings)
        # the longest few literals of a branch are the candidates (counting every one-letter literal of a long
        # pattern over the sample cost more than the scan of a small job)
        for lit in sorted(br, key=lambda x: -len(x.text))[:MAX_LITERALS_TRIED]:
            if "\n" in lit.text:
                continue
            if not lit.fold:
                n = occurrences(lit.text, False)
                options.append((n * LINE_CHECK_PAIRS + pairs(lit.text, False), n, -len(lit.text), [lit.text]))
                continue
            for piece in _fold_pieces(lit):
                spellings = _fold_variants(piece)
                n = occurrences(piece, True) + len(spellings)
                options.append((n * LINE_CHECK_PAIRS + pairs(piece, True), n, -len(piece), spellings))
        if not options:
            return None
        _cost, n_found, _len, spellings = min(options)
        out.append((tuple(sp.encode() for sp in spellings), n_found))
    return out


def _sample(files: Sequence[LogFile]) -> bytes:
    """Up to :data:`SAMPLE_BYTES` of each of a few files: a quarter from the start (start-up lines such as NCCL INFO
    blocks are frequent there: a literal of theirs is no rare anchor) and the rest from the middle (compressed files:
    all from the start)."""
    picked = sorted(files, key=lambda f: -f.size)[:SAMPLE_FILES]
    parts: list[bytes] = []
    for lf in picked:
        try:
            with open_binary(lf) as fh:
                if lf.compression == "none" and lf.size > 2 * SAMPLE_BYTES:
                    head = fh.read(SAMPLE_BYTES // 4)
                    fh.seek(lf.size // 2)
                    parts.append(head + b"\n" + fh.read(SAMPLE_BYTES - len(head)))
                else:
                    parts.append(fh.read(SAMPLE_BYTES))
        except Exception:  # a damaged file is reported by the scan itself
            continue
    return b"\n".join(parts)


def _rare_suffix(pattern: str, sample: bytes, ignore_case: bool) -> str | None:
    """A tail of ``pattern`` (its items from one on, :func:`_top_items`) that begins with a literal byte at least
    twice as rare on ``sample`` than the byte the whole pattern's search would skip to, or None. Every match of
    the pattern holds a match of any of its tails in the same line, so a search for the tail finds a superset of the
    lines (``\\b20\\d\\d-\\d\\d-...``: ``20`` is everywhere in step logs, ``-\\d\\d-...`` much rarer)."""
    if ignore_case or not sample:
        return None
    items = _top_items(pattern)
    if not items or len(items) < 2:
        return None
    relaxed_from = len(pattern) - len(_relaxed(pattern))
    counted: dict[str, int] = {}

    def count(ch: str) -> int:
        if ch not in counted:
            counted[ch] = sample.count(ch.encode())
        return counted[ch]

    best: tuple[int, int] | None = None  # (count, item start)
    base: int | None = None
    for k, start in enumerate(items):
        end = items[k + 1] if k + 1 < len(items) else len(pattern)
        item = pattern[start:end]
        if item.startswith("\\"):
            lit = item[1] if len(item) >= 2 and not item[1].isalnum() else None
            rest = item[2:]
        else:
            lit = item[0] if item[0] not in ".^$[(" else None
            rest = item[1:]
        optional = rest[:1] in ("?", "*") or rest.startswith("{0")
        if start == relaxed_from:
            # what the unchanged search skips to: its first literal byte (none: it cannot skip at all)
            base = count(lit) if lit is not None and not optional else None
            if base is None:
                return None
        if start <= relaxed_from or lit is None or optional or not lit.isascii():
            continue
        if best is None or count(lit) < best[0]:
            best = (count(lit), start)
    if base is None or best is None or best[0] * 2 > base:
        return None
    suffix = pattern[best[1] :]
    return suffix if _re2_error(suffix, ignore_case) is None else None
