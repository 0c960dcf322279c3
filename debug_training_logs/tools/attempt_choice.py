"""Which attempt a tool looks at: the caller's choice, else the first failed one (shared by every tool)."""

from __future__ import annotations

from pathlib import Path

from debug_training_logs.analysis import attempts
from debug_training_logs.errors import UserInputError
from debug_training_logs.tools._cache import cached


def choose(logs_root: Path, attempt: int | None) -> tuple[attempts.Attempts, int | None]:
    """The job's attempts and the one to look at (None when the job had a single attempt and none was asked for)."""
    split = cached("attempts", logs_root, None, lambda: attempts.split(logs_root))  # pages reuse one split
    chosen = attempt if attempt is not None else split.first_failed() if split.count > 1 else None
    if chosen is not None and not 0 <= chosen < split.count:
        raise UserInputError(
            f"attempt {chosen} does not exist: the logs show {split.count} attempt(s) (0-{split.count - 1})."
        )
    return split, chosen if split.count > 1 else None
