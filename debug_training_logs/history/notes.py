"""The sentences the history adds to a diagnosis: what this job shares with earlier failures (:func:`history_note`)
and what to do about it (:func:`history_action`, for the verdict's action line).

Both are pure functions of :class:`~.types.SeenBefore` entries (what :func:`~.queries.seen_before` found), so the
verdict's action line can use them without a database.
"""

from __future__ import annotations

from collections.abc import Sequence

from debug_training_logs.history.types import SeenBefore

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")

_ROLE_WORDS = {
    "culprit": "the culprit's node here",
    "suspect": "a suspect here",
    "in_chain": "in this root-cause chain",
}

REPEAT_THRESHOLD = 2
"""A node or daemon in this many failures of the window (this job included) is a repeat offender the action names."""


def ordinal(n: int) -> str:
    """``third`` for 3 (``11th`` past ten)."""
    if 1 <= n <= len(_ORDINALS):
        return _ORDINALS[n - 1]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _jobs(s: SeenBefore, shown: int = 3) -> str:
    names = [j.job for j in s.jobs[:shown]]
    more = s.earlier - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _what(s: SeenBefore) -> str:
    if s.what == "signature":
        return "this failure signature"
    return f"{'node' if s.what == 'node' else 'AIS daemon'} {s.name}"


def history_note(seen: Sequence[SeenBefore]) -> str | None:
    """One sentence per thing seen before, e.g. "Node gpu-r07-n075 was implicated in a failure for the third time in
    14 days (earlier: jobs 4817301, 4817299)."; None when nothing of this job was seen before."""
    parts = []
    for s in seen:
        role = f" ({_ROLE_WORDS.get(s.role, s.role)})" if s.role and s.what != "signature" else ""
        verb = "recurs" if s.what == "signature" else "was implicated in a failure"
        parts.append(
            f"{_what(s)[0].upper()}{_what(s)[1:]}{role} {verb} for the {ordinal(s.earlier + 1)} time in "
            f"{s.window_days} days (earlier: job{'s' if s.earlier > 1 else ''} {_jobs(s)})."
        )
    return " ".join(parts) or None


def history_action(seen: Sequence[SeenBefore]) -> str | None:
    """What the history suggests doing now, or None: restart without a node (or check a daemon) that keeps being
    implicated; else, for a signature that keeps recurring, fix its cause rather than only restarting."""
    repeat = [s for s in seen if s.what != "signature" and s.earlier + 1 >= REPEAT_THRESHOLD]
    nodes = [s for s in repeat if s.what == "node" and s.role in ("culprit", "suspect")]
    daemons = [s for s in repeat if s.what == "daemon"]
    if nodes:
        names = ",".join(s.name for s in nodes)
        worst = max(nodes, key=lambda s: s.earlier)
        return (
            f"Restart without {'node' if len(nodes) == 1 else 'nodes'} {names} (sbatch --exclude={names}) and drain "
            f"{'it' if len(nodes) == 1 else 'them'} for inspection: {worst.name} was implicated in "
            f"{worst.earlier + 1} failures in {worst.window_days} days (earlier: {_jobs(worst)})."
        )
    if daemons:
        worst = max(daemons, key=lambda s: s.earlier)
        return (
            f"Check AIS daemon {worst.name} before restarting: it was part of {worst.earlier + 1} failures in "
            f"{worst.window_days} days (earlier: {_jobs(worst)})."
        )
    sig = next((s for s in seen if s.what == "signature"), None)
    if sig is not None:
        return (
            f"This failure recurred {sig.earlier + 1} times in {sig.window_days} days (earlier: {_jobs(sig)}): "
            "a plain restart will likely hit it again; fix its cause first."
        )
    return None
