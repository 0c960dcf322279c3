"""What other programs add to a training process's line, each defined once: terminal colour codes (NeMo and Ray colour
their prefixes on a TTY), torch's ``[rankN]:`` stderr prefix (c10 logging and the excepthook) and a user logging
format's inline ``[rankN] `` tag (``2026-11-23 18:29:06,008 [rank3] INFO ...``), and the glog header of torchrun's
elastic agent."""

from __future__ import annotations

import re
from typing import Final

ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GLOBAL_RANK: Final = re.compile(r"\[rank(\d+)\]:")
INLINE_RANK: Final = re.compile(r"\[rank(\d+)\] ")
AGENT_HEADER: Final = r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +"
"""The glog header torchrun's elastic agent opens its own lines with, up to its pid (``I1123 10:00:00.123456 20077 ``):
level letter, MMDD, time and the pid's padding (a pattern's text: the launcher's patterns go on with the pid)."""


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return ANSI.sub("", text) if "\x1b" in text else text
