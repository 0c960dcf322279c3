"""The cyclic garbage collector's thresholds where it runs (see :mod:`~debug_training_logs.entry` for why a command
runs without it). Imports nothing: the entry point reads it before the rest of the program is imported."""

GC_THRESHOLDS = (20_000, 10, 10)
"""The collector's thresholds where it runs: ``serve``'s server, and an in-process caller's command
(:func:`debug_training_logs.cli.main`; Python's default: 700, 10, 10). An analysis builds hundreds of thousands of
long-lived, acyclic objects (hits, rows, per-rank states); at the default every 700 allocations start a collection that
walks the young ones, and the older generations are walked over and over as they grow: 27% of the main process's CPU on
a 10,240-rank ``analyze`` (8.9 s -> 6.7 s measured, same peak memory), 10% at 1,024 ranks."""
