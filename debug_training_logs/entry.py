"""The program's entry point (the ``debug-training-logs`` console script and ``python -m debug_training_logs``).

It imports nothing but :mod:`gc` (and :mod:`os` and :mod:`sys`, loaded already) before it turns the cyclic garbage
collector off: the command's own imports (pydantic, the tool and its analysis modules, ~0.2 s) then run without it too.
A command is one process that ends once its answer is out, and it makes almost no cyclic garbage (~1,300 unreachable
objects left at the end of a 1,024-rank ``analyze``, as many at 4,096 ranks; the scan's results, the evidence and the
answer are freed by their reference counts), so the collector's passes were pure cost: each young collection walks the
~20,000 objects allocated since the last one (5-10 ms), 7 of them on a 1,024-rank ``analyze`` (2 while its modules
load, before the scan can start, 5 while its results are read and folded). ``serve`` turns it back on
(:data:`GC_THRESHOLDS`): a server runs for hours and every tool call leaves garbage. The scan's worker processes,
forked from the command, make no collection either way (each file's objects are freed as the file is done).

Then it starts the command's scan (:mod:`~debug_training_logs.early_scan`), before the rest of the program is imported.

It also turns pydantic's plugins off for the command or the server it runs (unless ``PYDANTIC_DISABLE_PLUGINS`` is set
already): the validators of our own arguments and results are all the program builds, and looking plugins up reads
the entry points of every package installed (4 ms in our test environment; more in a training environment with
hundreds of packages).
"""

from __future__ import annotations

import gc
import os
import sys

from debug_training_logs.collector import GC_THRESHOLDS


def program() -> None:
    """Run the command line (:func:`debug_training_logs.cli.program`) after :func:`prepare`."""
    prepare(sys.argv[1:])
    from debug_training_logs.cli import program as run  # the imports the collector is off for

    run()


def prepare(argv: list[str]) -> None:
    """What the program does before it imports the rest, for the command line ``argv``: the collector off (``serve``
    turns it on, at :data:`GC_THRESHOLDS`), pydantic's plugins off (see the module doc), and the command's scan started
    (:mod:`~debug_training_logs.early_scan`), its workers reading on while the program imports the rest."""
    gc.disable()
    gc.set_threshold(*GC_THRESHOLDS)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from debug_training_logs import early_scan

    early_scan.start(argv)
