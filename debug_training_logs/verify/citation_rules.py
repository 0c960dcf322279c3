"""The citations rule: every cited file:line exists and says what the conclusion quotes (:func:`text_matches`)."""

from __future__ import annotations

from datetime import datetime

from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.models import Evidence
from debug_training_logs.textcut import cut
from debug_training_logs.verify.context import RuleContext
from debug_training_logs.verify.context import check as _check
from debug_training_logs.verify.models import Check
from debug_training_logs.verify.rule_helpers import fmt_time as _t

_MIN_SUBSTRING = 20
"""A cited text shorter than the line must be at least this long to count as a quote of it."""


# ---------------------------------------------------------------------------------------------------------------------
# citations


def _norm(text: str) -> str:
    text = strip_ansi(text).strip()
    for tail in ("…", "..."):
        text = text.removesuffix(tail)
    return " ".join(text.split())


def text_matches(cited: str, actual: str) -> bool:
    """A cited text matches the line when it is the line, a prefix of it (a ~300-char cut), or a long enough quote."""
    a, c = _norm(actual), _norm(cited)
    if not c:
        return True
    return a == c or a.startswith(c) or (len(c) >= _MIN_SUBSTRING and c in a)


def _parse_claimed(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=None)


def citations(ctx: RuleContext) -> Check:
    """Every cited file:line exists (under logs_dir or ais_dir) and says what the conclusion quotes."""
    if not ctx.cited:
        return _check("citations", "not_applicable", "Nothing is cited; the conclusion is judged on the logs alone.")
    problems: list[str] = []
    ev: list[Evidence] = []
    for c in ctx.cited:
        if c.source is None:
            problems.append(f"{c.role} {c.where}: no such file under logs_dir or ais_dir")
            continue
        if not c.exists:
            problems.append(f"{c.role} {c.where}: the file has no line {c.line} (or it could not be read)")
            continue
        assert c.actual is not None and c.actual.text is not None
        if c.text is not None and not text_matches(c.text, c.actual.text):
            problems.append(f"{c.role} {c.where}: the line says {cut(c.actual.text, 160)!r}, not {cut(c.text, 160)!r}")
            ev.append(c.cite())
            continue
        claimed = _parse_claimed(c.claimed_time)
        own = c.actual.time
        if claimed is not None and own is not None:
            alts = [own] + ([c.earliest] if c.source == "ais" and c.earliest is not None else [])
            if all(abs((claimed - t).total_seconds()) > 1.5 for t in alts):
                problems.append(f"{c.role} {c.where}: claimed time {c.claimed_time}, but the line says {_t(own)}")
                ev.append(c.cite())
    if problems:
        return _check(
            "citations",
            "failed",
            f"{len(problems)} of {len(ctx.cited)} citation(s) do not hold: " + "; ".join(problems[:5]),
            ev,
            "Cite lines as the files have them (path relative to logs_dir/ais_dir, 1-based line number).",
        )
    return _check(
        "citations", "passed", f"All {len(ctx.cited)} citation(s) exist and match.", [c.cite() for c in ctx.cited]
    )
