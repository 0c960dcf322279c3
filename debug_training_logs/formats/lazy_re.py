"""Regexes compiled on their first use, for the parsers' many rare-message patterns.

Python compiles a regex in 0.1-0.5 ms. A parser module that compiles every wording of every torch version at import
makes every command pay for all of them (~7 ms for ``torch_nccl`` alone, before a scan can start), though a job's logs
hold one version's wordings, and lines the native field parser reads never reach them at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any


class LazyPattern:
    """Stands for ``re.compile(pattern, flags)``, compiled when one of its methods is first called (then kept)."""

    __slots__ = ("_compiled", "_flags", "_pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled regex (compiled now if it is the first use; two threads may both compile it, harmlessly)."""
        rx = self._compiled
        if rx is None:
            rx = self._compiled = re.compile(self._pattern, self._flags)
        return rx

    @property
    def pattern(self) -> str:
        return self._pattern

    def search(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return self.compiled.search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LazyPattern, (self._pattern, self._flags))
