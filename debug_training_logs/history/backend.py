"""What the history needs of a database (:class:`Backend`), apart from the backends that provide it
(:mod:`~debug_training_logs.history.store`) and the migrations that use it
(:mod:`~debug_training_logs.history.schema`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

Row = tuple[Any, ...]


class Backend(Protocol):
    """What the store needs of a database."""

    dialect: Literal["sqlite", "postgres"]

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Execute one statement (``?`` placeholders); its rows, if it returns any."""
        ...

    def transaction(self) -> Any:
        """A context manager: the statements run inside it commit together or not at all."""
        ...

    def close(self) -> None: ...
