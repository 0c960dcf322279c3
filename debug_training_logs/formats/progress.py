"""A trainer's progress lines (``step 12``, ``iteration 40/1000``, ``global_step=300``): the step they report.

Pure functions over one line of text."""

from __future__ import annotations

import re
from typing import Final

STEP_NUMBER: Final = re.compile(r"(?:\bstep|\biter(?:ation)?|global_step)[\s=:]*(\d+)", re.IGNORECASE)


def step_number(text: str) -> int | None:
    """The step a progress line reports, else None."""
    m = STEP_NUMBER.search(text)
    return int(m.group(1)) if m else None
