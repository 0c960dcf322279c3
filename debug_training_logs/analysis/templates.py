"""Log-line templates: a line with its variable parts masked, so that lines differing only in numbers, times, ranks,
PIDs, addresses, paths or hosts group together (the ``sort -u`` view of the original skill, made robust).

Every mask is written with digit *classes* only (never a particular digit), so the template of a line depends only on
which characters are digits, not on their values. :class:`TemplateCache` relies on that: it keys on the line with
every digit turned into ``0``, which makes it exact while repeated lines cost one byte-table translation and a dict
lookup.
"""

from __future__ import annotations

import re

from debug_training_logs.formats import nccl
from debug_training_logs.formats.prefixes import strip_ansi

# Order matters: wider shapes first (a timestamp before its numbers, an IP before its octets).
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    # NCCL library prefix "host:pid:tid [dev]"
    (re.compile("^" + nccl.HOST + nccl.PROCESS), "<host>:<pid>:<tid> [<dev>]"),
    # c10 header "[E0703 10:22:33.123456789 " and glog "W0521 10:22:33.123000 "
    (re.compile(r"\b([FEWIV])\d{3,4} \d\d:\d\d:\d\d\.\d{6,9}\b"), r"\1<time>"),
    # full dates (NeMo, torchrun, SLURM, NCCL 2.26+, ChildFailedError)
    (re.compile(r"\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), "<time>"),
    # addresses
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b"), "<hex>"),
    # paths with at least two components
    (re.compile(r"(?:[\w.\-]+)?(?:/[\w.\-+@%=]+){2,}/?"), "<path>"),
    # rank ids and PIDs, kept readable
    (re.compile(r"\[rank\d+\]"), "[rank<r>]"),
    (re.compile(r"\b([Rr]ank[\s=:]{0,3})\d+"), r"\1<r>"),
    (re.compile(r"\b(pid[\s=:]{0,3}|PID\s)\d+"), r"\1<pid>"),
    # dotted names with a number (node07.cluster, shard-1.tar): hosts and object names
    (re.compile(r"\b[A-Za-z][A-Za-z\-]*\d+(?:[\w\-]*)(?:\.[A-Za-z][\w\-]*)+\b"), "<name>"),
    # any remaining number (ints, floats, exponents)
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "<n>"),
)

_ZERO_DIGIT_BYTES = bytes.maketrans(b"123456789", b"000000000")

TEMPLATE_CUT = 300
"""Templates are cut to this many characters (a template is for grouping and reading, not for citing)."""


def template_of(line: str) -> str:
    """The template of one log line (see module doc); ANSI colours removed, cut at :data:`TEMPLATE_CUT`."""
    text = strip_ansi(line).strip()
    for rx, repl in _MASKS:
        text = rx.sub(repl, text)
    text = re.sub(r"(?:<n>[ ,/:x*]*){3,}<n>", "<n...>", text)  # long runs of numbers (shapes, lists)
    return text[:TEMPLATE_CUT]


def digit_shape(line: str) -> bytes:
    """``line`` (its first 2,000 characters) with every ASCII digit turned into ``0``, as UTF-8 bytes: the key of the
    template caches. In UTF-8 the bytes ``1``..``9`` stand only for those digits, so this is ``str.translate`` done by a
    byte table (several times faster on long lines)."""
    return line[:2000].encode("utf-8", "surrogatepass").translate(_ZERO_DIGIT_BYTES)


SHARED_ENTRIES = 4096
"""Digit shapes whose template one process remembers across files (the lines of one job repeat a few hundred)."""

_shared: dict[bytes, str] = {}
"""Digit shape -> template, shared by every :class:`TemplateCache` of the process (a scan worker reads many files of
one job, whose lines repeat the same shapes: each is templated once per process, not once per file)."""


class TemplateCache:
    """:func:`template_of` with an exact cache keyed on the line's digit shape (bounded: ``max_entries``).

    Templates are pure functions of the shape, so the memo is the process-wide :data:`_shared` (bounded by
    :data:`SHARED_ENTRIES`), with a per-instance overflow bounded by ``max_entries`` once it is full."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._cache: dict[bytes, str] = {}
        self._max = max_entries

    def __call__(self, line: str) -> str:
        key = digit_shape(line)
        t = _shared.get(key)
        if t is None:
            t = self._cache.get(key)
            if t is None:
                t = template_of(key.decode("utf-8", "surrogatepass"))
                if len(_shared) < SHARED_ENTRIES:
                    _shared[key] = t
                elif len(self._cache) < self._max:
                    self._cache[key] = t
        return t
