"""What Python itself writes into a log, as opposed to what happened: the source lines a traceback quotes.

Pure functions over one line of text. A traceback quotes the code of each frame (``data = fetch(i)  # may raise
StopIteration``, ``raise StopIteration``): an exception's name there is code or a comment, not an exception raised.
"""

from __future__ import annotations

import re
from typing import Final

from debug_training_logs.logs.attribution import strip_rank_prefix

_SOURCE_LINE: Final = re.compile(
    r"#.*\b(?:[A-Z]\w*(?:Error|Exception|Timeout|Interrupt)|StopIteration|SystemExit)\b|^\s*(?:raise|except)\s"
)


def is_source_line(text: str) -> bool:
    """True for a line of Python source a traceback quotes: an exception name in code or in a comment."""
    return _SOURCE_LINE.search(strip_rank_prefix(text)) is not None
