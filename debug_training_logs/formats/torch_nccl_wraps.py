"""Hard-wrapped torch ProcessGroupNCCL lines: whether a line looks cut (:func:`looks_cut`, :func:`maybe_cut_number`),
whether a line starts a record of its own (:func:`starts_new_record`, with the collector/launcher prefixes it may
carry) and how the pieces are re-joined (:func:`join_wrapped`)."""

from __future__ import annotations

import re
from typing import Final

from debug_training_logs.formats import nccl
from debug_training_logs.formats.lazy_re import LazyPattern
from debug_training_logs.formats.prefixes import GLOBAL_RANK, TASK_LABEL, strip_ansi
from debug_training_logs.formats.torch_nccl import _text, find_header, parse_pg_prefix
from debug_training_logs.formats.torch_nccl_patterns import _CUT_STARTS, _CUT_TAILS, _GLOG, _HEADER
from debug_training_logs.formats.torch_nccl_types import Parsed, StatusLine


def looks_cut(line: str) -> str | None:
    """Why ``line`` looks like part of a hard-wrapped message (``head`` or ``tail``), else None.

    ``head``: a message of ours starts here but does not end (join the following line(s)).
    ``tail``: the line carries the end of one of our messages without its start (join the preceding line).
    Call only for a candidate line :func:`parse_line` returned None for.
    """
    text = _text(line)
    if any(s in text for s in _CUT_STARTS):
        return "head"
    if any(s in text for s in _CUT_TAILS):
        return "tail"
    header, _ = find_header(text)
    if header is not None and (parse_pg_prefix(text) is not None or text.rstrip().endswith("]")):
        return "head"  # a header and a PG prefix, then the text is cut before any needle
    return None


def maybe_cut_number(line: str, p: Parsed) -> bool:
    """True when ``line`` parsed but may end inside a number a hard wrap cut: torch 2.6+ status lines end with the
    last completed SeqNum and no period, so ``... last completed work: 46`` + ``117`` parses as 46. Suspect it when
    the line ends with that number and it has fewer digits than the last enqueued one (C is normally E or E-1)."""
    ev = p.event
    if not isinstance(ev, StatusLine) or ev.family != "failure_detected":
        return False
    tail = strip_ansi(line).rstrip()
    return tail.endswith(str(ev.last_completed)) and len(str(ev.last_completed)) < len(str(ev.last_enqueued))


# Prefixes a collector, launcher or log viewer puts before a record. "Strong" ones are written once per physical
# line by a program (a wrapped continuation never has one); a bare time or indentation may begin a wrapped piece.
_STRONG_PREFIX = re.compile(
    r"^(?:"
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"  # docker / collector timestamps
    r"|\[\d{4}-\d\d-\d\d[^\]]{0,40}\]\s*"  # [2024-01-05 10:22:33,123]
    r"|\[\d+\]\s+"  # log viewer line numbers: [51207]
    r"|"
    + TASK_LABEL  # srun --label, mpirun --tag-output
    + r"|\([^()]{0,200}?pid=\d+[^()]{0,100}\)\s*"  # Ray actor prefix
    r"|\S+ \[(?:stderr|stdout)\]\s*"  # milabench
    r"|\[[\w.\-]+:\d+\]:\s*"  # torchrun --tee [host:local_rank]:
    r"|\[default\d+\]:\s*"  # torchrun/accelerate [default3]:
    r")"
)
_WEAK_PREFIX = re.compile(r"^(?:\s+|\d\d:\d\d:\d\d(?:\.\d+)?\s+)")
# A line that ends inside a record opener (a wrap cut "[rank1" | "2]:[E521 ..." or "[E ProcessGroupN" | "CCL.cpp...").
_OPENER_CUT = LazyPattern(
    r"^(?:\[rank\d+\]:)?\[(?:r(?:a(?:n(?:k(?:\d+(?:\](?::)?)?)?)?)?)?)?$"
    r"|^(?:\[rank\d+\]:)?\[[FEWIV](?:\d{0,4}(?: [\d:.]*)?)?(?: ?[\w.\-]*(?::\d*)?)?$"
    r"|^\([A-Za-z_][\w.]*(?:\[(?:r(?:a(?:n(?:k(?:=\d*)?)?)?)?)?)?$"  # a Ray actor prefix cut before its rank
)
# What a record (a log line of its own, not a wrapped piece) starts with once the prefixes are gone.
_RECORD_STARTS: Final = (
    "terminate called",
    "what():",
    "Exception raised from",
    "frame #",
    "Traceback",
    'File "',
    "[NeMo ",
    "srun:",
    "slurmstepd:",
    "Epoch ",
    "WARNING:",
    "ERROR:",
    "INFO:",
    "RuntimeError",
    "torch.",
)
_NCCL_LIB_LINE = re.compile("^" + nccl.HOST + nccl.PROCESS)


def strip_leading_prefixes(text: str) -> tuple[str, bool]:
    """``text`` without the collector/launcher prefixes before its record (at most 6), and whether a strong one (a
    launcher's or collector's, written once per physical line) was among them."""
    strong = False
    for _ in range(6):
        m = _STRONG_PREFIX.match(text)
        if m is not None and m.group(0):
            strong = True
        else:
            m = _WEAK_PREFIX.match(text)
            if m is None or not m.group(0):
                break
        text = text[m.end() :]
    return text, strong


def starts_new_record(line: str) -> bool:
    """True when ``line`` begins a log record of its own (so it cannot be a wrapped continuation).

    Strict on purpose: a wrapped piece may begin with ``[PG ID ...`` or ``[Rank 3]`` (the break fell before it), so
    a bare ``[`` is not a record start; a c10/glog header, ``[rankN]:``, a launcher prefix, a known record opening or a
    line that ends inside such an opener is."""
    if line.startswith("[rank") and GLOBAL_RANK.match(line) is not None:
        return True  # what :func:`_starts_new_record` says of such a line, without removing prefixes first
    return _starts_new_record(line)


def _starts_new_record(line: str) -> bool:
    text = strip_ansi(line)
    if not text.strip():
        return True
    rest, strong = strip_leading_prefixes(text)
    if strong or not rest:
        return True
    if GLOBAL_RANK.match(rest) or _HEADER.match(rest) or _GLOG.match(rest) or _NCCL_LIB_LINE.match(rest):
        return True
    return rest.startswith(_RECORD_STARTS) or _OPENER_CUT.match(rest.rstrip()) is not None


def join_wrapped(parts: list[str]) -> str:
    """Re-join the pieces of a hard-wrapped line: line breaks removed and a continuation's indentation dropped (a
    paste often indents it). Whether a blank stood at the break cannot be known; the message regexes accept both."""
    if not parts:
        return ""
    head = parts[0].rstrip("\r\n")
    return head + "".join(p.rstrip("\r\n").lstrip() for p in parts[1:])
