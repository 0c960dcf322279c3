"""What a wall time looks like on a line, as bytes: the read-back of lines near an event
(:func:`debug_training_logs.analysis.read_back.read_lines`) finds the nearest timed lines before and after a line that
states no time (Python logging without a format, tracebacks, tqdm bars) by RE2 searches over whole chunks, never
line by line (a stretch of untimed progress bars can be megabytes long).
"""

from __future__ import annotations

import re2

TIMESTAMP = re2.compile(rb"20\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d|[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{6,9} ")
"""A wall time on a line: a full date (NeMo, torchrun 2.1, SLURM, Megatron) or a c10/glog header."""
