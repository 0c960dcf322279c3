"""A read-only sequence whose items are made when they are read (unpacked, decoded), never all held at once."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class LazySequence(Sequence[T]):
    """Implement ``__len__`` and ``_at(i)`` (``0 <= i < len``); indexing (negative too), slicing and iteration
    follow. Each read makes the item anew: a walk over a job's files holds one file's objects at a time."""

    @abstractmethod
    def _at(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        n = len(self)
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._at(i)
