"""What other programs add to a training process's line, each defined once: terminal colour codes (NeMo and Ray colour
their prefixes on a TTY), torch's ``[rankN]:`` stderr prefix (c10 logging and the excepthook) and a user logging
format's inline ``[rankN] `` tag (``2026-11-23 18:29:06,008 [rank3] INFO ...``), torchrun ``--tee``'s local-rank
prefix, the task labels of ``srun --label`` and ``mpirun --tag-output``, and the glog header of torchrun's elastic
agent."""

from __future__ import annotations

import re
from typing import Final

ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MAX_RANK_DIGITS: Final = 9
RANK_NUMBER: Final = r"(\d{1,9})"
"""A rank or task number as the prefixes state it (pattern text, one group): nine digits at most. A longer number is
no rank of any job, and is never made an integer (Python refuses over 4,300 digits; a rank sizes tables)."""
RANK_TAG: Final = r"\[rank" + RANK_NUMBER + r"\]"
"""The ``[rankN]`` tag (pattern text; the global rank is its group): followed by ``:`` torch's prefix, by a blank a
user format's inline tag."""
RANK_TAG_DIGITS: Final = r"\[rank(\d+)\]"
""":data:`RANK_TAG` with any number of digits: what the scan's collection of a file's ranks gathers as strings (its
native pass finds every digit string), sized to :data:`MAX_RANK_DIGITS` where they are made integers."""
SHORT_RANK_TAG: Final = r"\[r(\d{1,9})(?:/(\d{1,9}))?(?: [^\[\]]{0,24})?\]"
"""A trainer's short rank tag (pattern text): ``[r3]``, ``[r3/8]`` (its world the second group), ``[r3/8 l1]``."""
GLOBAL_RANK: Final = re.compile(RANK_TAG + ":")
INLINE_RANK: Final = re.compile(RANK_TAG + " ")
RANK_TAG_END: Final = "(?::| )"
"""What follows :data:`RANK_TAG` in either use (pattern text)."""
LOCAL_RANK_TAG: Final = r"\[[A-Za-z_][\w.\-]*?(?<!\d)" + RANK_NUMBER + r"\]:"
"""torchrun ``--tee``'s ``[default3]:`` / ``[trainer3]:`` prefix (pattern text; the writer's LOCAL rank is its group,
a file's map makes it global)."""
LOCAL_RANK: Final = re.compile("^" + LOCAL_RANK_TAG)
"""The tee prefix opening a line."""
TASK_LABEL: Final = (
    r"(?:\s*(?:P\d{1,9} )?" + RANK_NUMBER + r": |\[\d{1,9}," + RANK_NUMBER + r"\]<std(?:out|err|diag)>: ?)"
)
"""A launcher's label of the task that wrote a line (pattern text; the task id is one of its two groups): ``srun
--label``'s ``3: `` (``P1 3: `` for a heterogeneous job's component) and Open MPI ``mpirun --tag-output``'s
``[1,3]<stdout>:`` (the job id and the task's rank in ``MPI_COMM_WORLD``). The task id is the global rank only when
the launcher starts one task per rank (not one torchrun per node)."""
LEAD_PREFIXES: Final = re.compile("^" + TASK_LABEL + r"?(?:\([^()]*pid=\d+[^()]*\)\s*)?(?:" + RANK_TAG + r":\s*)?")
"""What launchers and torch put before a process's own words, each optional, in this order: a launcher's task label,
a Ray actor prefix (``(Worker pid=481552, ip=10.20.3.17)``), torch's ``[rankN]:`` (matched at the line's start)."""
PROCESS_ID: Final = r"(?:\b(?:pid|PID|Pid)[=: ] ?|process '[^']{0,64}' \()(\d{1,9})\b"
"""A process id a line names (pattern text, its group): ``pid=481``, ``pid: 481``, ``PID 481``, ``(pid 481)``, and
loguru's error catcher ``process 'MainProcess' (481)``: a worker's own record, when a launcher's failure table ties
that pid to a rank (``exitcode  : 1 (pid: 481)``)."""
AGENT_HEADER: Final = r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +"
"""The glog header torchrun's elastic agent opens its own lines with, up to its pid (``I1123 10:00:00.123456 20077 ``):
level letter, MMDD, time and the pid's padding (a pattern's text: the launcher's patterns go on with the pid)."""
GLOG_SECONDS: Final = re.compile(r":\d\d\.\d{6} ")
"""What every glog header holds (seconds and microseconds), found from a literal ``:`` (a fast search): a line without
it has no glog header, and the full header need not be tried at every position of it."""


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return ANSI.sub("", text) if "\x1b" in text else text
