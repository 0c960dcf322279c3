"""Reading the scan's patterns: their validation before any file is read (:func:`compile_patterns`), the literals any
match must contain (:func:`required_literals`), and what their text says (plain literals, top-level items and
alternatives, the RE2 check of one pattern).
"""

from __future__ import annotations

import functools
import re as std_re
import re._constants as sre_c
import re._parser as sre_parse
from typing import Any

from re2 import _re2

from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.scan_engines import _re2_options
from debug_training_logs.logs.scan_types import Branches, Lit, PatternSpec

PROBE_TIMEOUT_S = 0.25
"""Seconds a fallback pattern may spend on each adversarial probe string when it is validated."""


@functools.lru_cache(maxsize=4096)
def _re2_error(pat: str, ignore_case: bool) -> str | None:
    """None when RE2 compiles ``pat``, else RE2's reason (remembered: :func:`compile_patterns` and :func:`make_plan`
    both ask for every pattern of a scan)."""
    rx = _re2.RE2(pat.encode(), _re2_options(ignore_case))
    if rx.ok():
        return None
    err = rx.error()
    return err.decode(errors="replace") if isinstance(err, bytes) else str(err)


def _probe_strings(pat: str) -> list[str]:
    """Adversarial inputs for a backtracking engine: runs of each literal character of ``pat``, then a mismatch."""
    chars = {c for c in pat if c.isalnum()} or {"a"}
    out: list[str] = []
    for c in sorted(chars)[:8]:
        for n in (28, 2000):
            out.append(c * n + "\x01!")
    return out


def compile_patterns(spec: PatternSpec) -> None:
    """Validate every pattern now, in the caller's process, so a bad one is a clear error before any file is read.

    RE2 first (linear time). A pattern RE2 cannot express is compiled by the ``regex`` module and probed with
    adversarial strings under a timeout, so ``(a+)+\\1``-style patterns fail here instead of hanging a worker.
    """
    if not spec.patterns:
        raise UserInputError("No patterns to search for. Give at least one regular expression.")
    if spec.max_hits is not None and len(spec.max_hits) != len(spec.patterns):
        raise ValueError("PatternSpec.max_hits must have one entry per pattern")
    for pat in spec.patterns:
        if not pat:
            raise UserInputError("An empty pattern matches every line. Remove it or give a real expression.")
        reason = _re2_error(pat, spec.ignore_case)
        if reason is None:
            continue
        import regex

        try:
            compiled = regex.compile(pat, regex.IGNORECASE if spec.ignore_case else 0)
        except regex.error as exc:
            raise UserInputError(
                f"Invalid pattern {pat!r}: {exc} (RE2 says: {reason}). Fix the regular expression."
            ) from exc
        for probe in _probe_strings(pat):
            try:
                compiled.search(probe, timeout=PROBE_TIMEOUT_S)
            except TimeoutError as exc:
                raise UserInputError(
                    f"Pattern {pat!r} needs a backtracking engine (RE2 cannot run it: {reason}) and takes longer than "
                    f"{PROBE_TIMEOUT_S} s on a {len(probe)}-character line: it would hang on real logs. Rewrite it "
                    "without back-references, look-arounds or nested quantifiers such as (a+)+."
                ) from exc


_FLAG_GROUP = std_re.compile(r"\(\?[a-zA-Z]*[imsxuUaL][a-zA-Z-]*[:)]")


_MAX_BRANCHES = 32


def required_literals(pattern: str, ignore_case: bool = False) -> Branches | None:
    """Literals any match of ``pattern`` must contain, as branches (one must be satisfied in full), or None when
    some way of matching needs no literal (then the pattern cannot be prefiltered).

    Parsed with Python's ``re`` parser, whose syntax agrees with RE2's for everything that yields a literal; anything
    the two could read differently (POSIX classes, inline flags other than ``(?i:...)``) gives None, which is always
    safe: the pattern is then searched by the DFA.
    """
    if "[:" in pattern or "\\Q" in pattern or "\\p" in pattern or "\\P" in pattern:
        return None
    plain = _pure_literal(pattern)
    if plain is not None:  # what the parse below gives for it, without parsing (most marker patterns are escaped text)
        return [[Lit(plain.decode(), ignore_case)]]
    return _parsed_literals(pattern, ignore_case)


def _parsed_literals(pattern: str, ignore_case: bool) -> Branches | None:
    """:func:`required_literals` read from the pattern's parse (its checks for syntax RE2 reads otherwise done)."""
    flag_groups = _FLAG_GROUP.findall(pattern)
    if any(g not in ("(?i:",) for g in flag_groups):
        return None
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:
        return None
    if parsed.state.flags & ~(sre_c.SRE_FLAG_UNICODE):
        return None
    out = _seq(list(parsed), ignore_case)
    if out is None or any(not b for b in out):
        return None
    return out


def _seq(items: list[tuple[Any, Any]], fold: bool) -> Branches | None:
    """Requirement of a sequence: literal runs, combined with required sub-parts (cross product, bounded)."""
    branches: Branches = [[]]
    run: list[str] = []

    def flush() -> None:
        if run:
            lit = Lit("".join(run), fold)
            for b in branches:
                b.append(lit)
            run.clear()

    for op, av in items:
        if op is sre_c.LITERAL:
            run.append(chr(av))
            continue
        if run and op is sre_c.SUBPATTERN and not av[1] and not av[2] and len(av[3]) == 1:
            op, av = av[3][0]  # a group holding an alternation only: as the bare alternation below
        if run and op is sre_c.BRANCH:
            # the literal run before an alternation goes into each alternative: ``E(?:rror|xception)`` (the form
            # Python's parser gives ``(?:Error|Exception)``) requires ``Error`` or ``Exception``, not ``E`` and ``rror``
            prefix = [(sre_c.LITERAL, ord(c)) for c in run]
            av = (av[0], [prefix + list(alt) for alt in av[1]])
            run.clear()
        flush()
        inner: Branches | None = None
        if op is sre_c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if del_flags:
                continue
            if add_flags & ~sre_c.SRE_FLAG_IGNORECASE:
                continue
            inner = _seq(list(sub), fold or bool(add_flags & sre_c.SRE_FLAG_IGNORECASE))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, _hi, sub = av
            if lo >= 1:
                inner = _seq(list(sub), fold)
        elif op is sre_c.BRANCH:
            alts: Branches = []
            for alt in av[1]:
                a = _seq(list(alt), fold)
                if a is None or any(not b for b in a):
                    alts = []
                    break
                alts.extend(a)
            inner = alts or None
        elif op is sre_c.IN:
            chars = [v for o, v in av if o is sre_c.LITERAL]
            if len(chars) == len(av) and 0 < len(chars) <= 4:
                inner = [[Lit(chr(c), fold)] for c in chars]
        if inner is None or any(not b for b in inner):
            continue  # this item requires nothing we can use
        if len(branches) * len(inner) > _MAX_BRANCHES:
            continue
        branches = [b + ib for b in branches for ib in inner]
    flush()
    return branches


@functools.lru_cache(maxsize=4096)
def _verifier(pattern: str, ignore_case: bool) -> Any:
    """The compiled RE2 check of one pattern, shared by every matcher of the process (a scan builds one matcher per
    set of active patterns, and most patterns are in all of them)."""
    return _re2.RE2(pattern.encode(), _re2_options(ignore_case))


_PURE_META = frozenset(".^$*+?{}[]|()\\")


def _pure_literal(pattern: str) -> bytes | None:
    """The bytes ``pattern`` matches when it is a plain literal (printable ASCII, only punctuation or spaces escaped),
    read the same way by RE2 and Python; else None. A line matches it exactly when it holds those bytes."""
    if not pattern.isascii():
        return None
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or pattern[i + 1].isalnum() or not pattern[i + 1].isprintable():
                return None
            out.append(pattern[i + 1])
            i += 2
            continue
        if c in _PURE_META or not c.isprintable():
            return None
        out.append(c)
        i += 1
    return "".join(out).encode() if out else None


@functools.lru_cache(maxsize=4096)
def _pure_branches(pattern: str) -> frozenset[bytes]:
    """The top-level alternatives of ``pattern`` that are plain literals (:func:`_pure_literal`): a line holding one
    matches the pattern. None for a pattern with inline flags (other than ``(?:``)."""
    if std_re.search(r"\(\?(?!:)", pattern):
        return frozenset()
    out: set[bytes] = set()
    depth, i, start, n = 0, 0, 0, len(pattern)
    while i <= n:
        c = pattern[i] if i < n else "|"
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            lit = _pure_literal(pattern[start:i])
            if lit is not None:
                out.add(lit)
            start = i + 1
        i += 1
    return frozenset(out)


_EDGE_SENSITIVE = std_re.compile(r"\\[Az]|\(\?(?!:)")
"""What in a pattern could match differently at the edge of a span searched in place than at a buffer's edge."""


def _relaxed(pattern: str) -> str:
    """``pattern`` without a leading word boundary: a superset of its matches, with a literal prefix RE2 skips to."""
    if pattern.startswith("\\b") and len(pattern) > 2 and pattern[2] not in "*+?{|)":
        return pattern[2:]
    return pattern


_QUANTIFIER = std_re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})[?+]?")


_CLASS_ESCAPES = frozenset("dDsSwWbB")


def _class_end(pattern: str, i: int) -> int:
    """Just past the ``]`` closing the character class that opens at ``pattern[i]`` (a ``]`` first in it, after an
    optional ``^``, is a member); past the end (> ``len(pattern)``) when it is not closed."""
    n = len(pattern)
    j = i + 1
    if j < n and pattern[j] == "^":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1 if j < n else n + 1


def _top_items(pattern: str) -> list[int] | None:
    """Where each top-level item (an atom with its quantifier) of ``pattern`` starts, or None when the pattern has a
    top-level alternation or anything this reader does not know for sure (inline flags, \\Q, POSIX classes, escapes
    other than punctuation and the class escapes)."""
    if "\\Q" in pattern or "[:" in pattern or std_re.search(r"\(\?(?!:)", pattern):
        return None
    starts: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        starts.append(i)
        c = pattern[i]
        if c == "|" or c in "*+?{)":
            return None
        if c == "\\":
            if i + 1 >= n or (pattern[i + 1].isalnum() and pattern[i + 1] not in _CLASS_ESCAPES):
                return None
            i += 2
        elif c == "[":
            i = _class_end(pattern, i)
            if i > n:
                return None
        elif c == "(":
            depth, j = 0, i
            while j < n:
                ch = pattern[j]
                if ch == "\\":
                    j += 2
                    continue
                if ch == "[":
                    j = _class_end(pattern, j)
                    continue
                depth += ch == "("
                depth -= ch == ")"
                j += 1
                if depth == 0:
                    break
            if depth != 0:
                return None
            i = j
        else:
            i += 1
        q = _QUANTIFIER.match(pattern, i)
        if q is not None:
            i = q.end()
        elif i < n and pattern[i] == "{":
            return None  # a brace RE2 and this reader might read differently
    return starts


def _literal_alternatives(pattern: str) -> tuple[bytes, ...] | None:
    """The literals of a pattern that is nothing but plain literals between ``|`` (:func:`_pure_literal` each, e.g.
    ``lhotse|Lhotse``): a line matches it exactly when it holds one of them. None for any other pattern (an escaped
    ``|`` or an empty alternative included)."""
    lits = [_pure_literal(part) for part in pattern.split("|")]
    return tuple(lit for lit in lits if lit is not None) if all(lit is not None for lit in lits) else None


def literal_pattern(text: str) -> str:
    """A pattern that matches ``text`` literally."""
    return std_re.escape(text)
