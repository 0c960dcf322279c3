"""The program's entry point (the ``debug-training-logs`` console script and ``python -m debug_training_logs``).

It imports nothing but :mod:`gc` (and :mod:`os`, loaded already) before it raises the collector's thresholds: the
command's own imports (pydantic, the tool and its analysis modules, ~0.2 s) then run with them too. At Python's default
(700 allocations) they started ~40 young and 3 middle collections before the scan could fork its workers (~5 ms, on
the path every command waits for). The thresholds hold for the whole program, ``serve``'s server too (its tools build
the same long-lived objects).

It also turns pydantic's plugins off for the command or the server it runs (unless ``PYDANTIC_DISABLE_PLUGINS`` is set
already): the validators of our own arguments and results are all the program builds, and looking plugins up reads
the entry points of every package installed (4 ms in our test environment; more in a training environment with
hundreds of packages).
"""

from __future__ import annotations

import gc
import os

GC_THRESHOLDS = (20_000, 10, 10)
"""The collector's thresholds while a command runs (Python's default: 700, 10, 10). An analysis builds hundreds of
thousands of long-lived, acyclic objects (hits, rows, per-rank states); at the default every 700 allocations start a
collection that walks the young ones, and the older generations are walked over and over as they grow: 27% of the
main process's CPU on a 10,240-rank ``analyze`` (8.9 s -> 6.7 s measured, same peak memory), 10% at 1,024 ranks.
Also while the command's modules are imported (their classes, functions and patterns are long-lived too)."""


def program() -> None:
    """Run the command line (:func:`debug_training_logs.cli.program`) with :data:`GC_THRESHOLDS` set from the start
    and pydantic's plugins off (see the module doc)."""
    gc.set_threshold(*GC_THRESHOLDS)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from debug_training_logs.cli import program as run  # the imports the thresholds are raised for

    run()
