"""Positional constructors of frozen slotted dataclasses: the objects made once per parsed line, and rebuilt once per
object when a packed scan result is read back (:mod:`~debug_training_logs.memo`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

_T = TypeVar("_T")


def positional(cls: type[_T]) -> Callable[..., _T]:
    """A constructor of the frozen slotted dataclass ``cls`` that takes its fields in order, positionally, and sets
    its slots directly: the same object as ``cls(...)``, at about half the cost of the frozen ``__init__`` (an
    ``object.__setattr__`` per field). ``cls`` must declare every field as its own slot and have no
    ``__post_init__`` (see :func:`takes_positional`)."""
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    assert takes_positional(cls), cls
    sets = tuple(getattr(cls, name).__set__ for name in names)
    # one function with a parameter per field (what dataclasses do for __init__): no *args tuple, no loop per call
    args = ", ".join(f"v{i}" for i in range(len(sets)))
    body = "".join(f"    s{i}(o, v{i})\n" for i in range(len(sets)))
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls, **{f"s{i}": put for i, put in enumerate(sets)}}
    exec(f"def make({args}):\n    o = new(cls)\n{body}    return o\n", scope)  # the text holds only v0.., s0..
    make: Callable[..., _T] = scope["make"]
    make.__qualname__ = make.__name__ = f"new_{cls.__name__}"
    return make


def takes_positional(cls: type) -> bool:
    """Whether :func:`positional` makes the same object as ``cls(*field values)``: a dataclass whose own slots are
    its fields in order, with the ``__init__`` dataclasses made (every field a parameter) and no ``__post_init__``."""
    if not is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return False
    fs = fields(cls)
    init = getattr(cls.__init__, "__code__", None)
    return (
        cls.__dict__.get("__slots__") == tuple(f.name for f in fs)
        and all(f.init for f in fs)
        and init is not None
        and init.co_filename != getattr(sys.modules.get(cls.__module__), "__file__", None)  # not written in the class
    )
