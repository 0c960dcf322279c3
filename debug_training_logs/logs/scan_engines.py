"""The search engines the scan builds on: RE2's options for every regex it compiles, and the optional native line
finder (``_linescan``) and ``ahocorasick_rs`` modules, loaded when first asked for.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import re2

RE2_MAX_MEM = 64 << 20
"""RE2 memory budget per compiled regex (bytes); the default 8 MiB can exhaust the DFA cache on big alternations."""


_UNANCHORED = re2._Anchor.UNANCHORED


def _re2_options(ignore_case: bool) -> re2.Options:
    opts = re2.Options()
    opts.log_errors = False
    opts.case_sensitive = not ignore_case
    opts.max_mem = RE2_MAX_MEM
    return opts


def _aho_corasick() -> Any:
    """The ``ahocorasick_rs`` module (SIMD multi-literal search, ripgrep's Teddy), or None when not installed."""
    if os.environ.get("DEBUG_TRAINING_LOGS_NO_PREFILTER"):
        return None
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    return ahocorasick_rs


def _native() -> Any:
    """The compiled one-pass line finder (``_linescan``, built from ``_linescan.c`` at install when a C compiler is
    there), or None: not built, or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` set (the ``ahocorasick_rs`` passes are then used,
    with identical results)."""
    if os.environ.get("DEBUG_TRAINING_LOGS_NO_NATIVE"):
        return None
    try:
        return importlib.import_module("debug_training_logs.logs._linescan")
    except ImportError:
        return None
