"""A restricted pickle interpreter: the plain data a pickle encodes, never anything it would run.

Flight-recorder dumps are pickles from wherever a user points us, and a pickle can run code. None is given to
:mod:`pickle`'s unpickler. :func:`load_pickle` interprets the opcodes itself and admits only plain containers and
scalars (dict, list, tuple, str, bytes, int, float, bool, None); any opcode that names a class or calls something
(``GLOBAL``, ``STACK_GLOBAL``, ``REDUCE``, ``BUILD``, ``INST``, ``OBJ``, ``NEWOBJ``, persistent ids, extension
codes) is refused, and so are oversized files, integers longer than :data:`MAX_INT_BYTES`, deep nesting and shared
references that would expand beyond :data:`MAX_VALUES`.

Two interpreters, one allow-list: :func:`_load_binary` walks the bytes of a binary pickle (protocol 2 and later,
what torch writes) directly, two to three times faster than decoding each opcode through :func:`pickletools.genops`
(a 2,000-entry dump of 830 kB: 0.46 s against 1.2 s on the shared 2-core dev machine);
:func:`_load_ops` (genops) reads everything else, and takes over when a binary pickle uses a text opcode of
protocols 0/1. Both refuse the same opcodes (``tests/test_flight_recorder.py`` checks they agree).
"""

from __future__ import annotations

import json
import pickletools
import struct
from typing import Any, Final

MAX_DUMP_BYTES: Final = 64 * 1024 * 1024
"""A dump larger than this is refused (torch's default ring buffer of 2,000 entries pickles to a few MB)."""
MAX_VALUES: Final = 2_000_000
"""Total scalars and containers a dump may expand to (counting every reference of a shared value)."""
MAX_DEPTH: Final = 64
"""Nesting depth a dump may have (a real one nests 5 deep: dict > list > entry > frames > frame)."""
MAX_INT_BYTES: Final = 64
"""Longest integer (LONG1/LONG4) admitted: a dump's numbers are 64-bit; a megabyte-long one is a bomb."""


class DumpRefused(ValueError):
    """The file is not a dump we read safely: the message says why (hostile opcode, size, shape)."""


# Opcodes that build plain data. Everything else (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
# NEWOBJ_EX, PERSID, BINPERSID, EXT1/2/4, sets, byte arrays, out-of-band buffers) is refused.
_PUSH_NONE = {"NONE"}
_PUSH_BOOL = {"NEWTRUE": True, "NEWFALSE": False}
_PUSH_ARG = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
}  # fmt: skip
_IGNORED = {"PROTO", "FRAME"}


class _Mark:
    pass


_MARK = _Mark()


def _pop_mark(stack: list[Any]) -> list[Any]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1 :]
            del stack[i:]
            return items
    raise DumpRefused("malformed pickle: no MARK for a MARK-consuming opcode")


def _set_items(d: Any, items: list[Any]) -> None:
    if not isinstance(d, dict) or len(items) % 2:
        raise DumpRefused("malformed pickle: SETITEMS on a non-dict or with an odd item count")
    for k, v in zip(items[::2], items[1::2], strict=True):
        try:
            d[k] = v
        except TypeError as e:  # an unhashable key (a list as a dict key)
            raise DumpRefused(f"malformed pickle: unhashable dict key ({e})") from e


def _memo_key(arg: Any) -> int:
    if not isinstance(arg, int):
        raise DumpRefused("malformed pickle: a memo slot that is not a number")
    return arg


def load_pickle(data: bytes) -> Any:
    """The value a pickle encodes, admitting plain containers and scalars only; :class:`DumpRefused` otherwise."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpRefused(f"dump is {len(data)} bytes, over the {MAX_DUMP_BYTES}-byte cap")
    if data[:1] == b"\x80":
        try:
            return _bounded_copy(_load_binary(data))
        except _Slow:
            pass
    return _load_ops(data)


def _load_ops(data: bytes) -> Any:
    """The interpreter over :func:`pickletools.genops` (every protocol, the text opcodes of protocols 0 and 1)."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    try:
        for op, arg, _pos in pickletools.genops(data):
            name = op.name
            if name in _IGNORED:
                continue
            if name in _PUSH_NONE:
                stack.append(None)
            elif name in _PUSH_BOOL:
                stack.append(_PUSH_BOOL[name])
            elif name in _PUSH_ARG:
                if isinstance(arg, int) and arg.bit_length() > 8 * MAX_INT_BYTES:
                    raise DumpRefused(f"refused: an integer of {arg.bit_length() // 8} bytes (a dump's fit in 8)")
                if name == "INT" and arg in (True, False):  # protocol 0 booleans are INT 01/00
                    stack.append(bool(arg))
                else:
                    stack.append(arg)
            elif name == "MARK":
                stack.append(_MARK)
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n:
                    raise DumpRefused("malformed pickle: stack underflow")
                t = tuple(stack[-n:])
                del stack[-n:]
                stack.append(t)
            elif name == "TUPLE":
                stack.append(tuple(_pop_mark(stack)))
            elif name == "LIST":
                stack.append(_pop_mark(stack))
            elif name == "DICT":
                d: dict[Any, Any] = {}
                _set_items(d, _pop_mark(stack))
                stack.append(d)
            elif name == "APPEND":
                v = stack.pop()
                if not isinstance(stack[-1], list):
                    raise DumpRefused("malformed pickle: APPEND to a non-list")
                stack[-1].append(v)
            elif name == "APPENDS":
                items = _pop_mark(stack)
                if not isinstance(stack[-1], list):
                    raise DumpRefused("malformed pickle: APPENDS to a non-list")
                stack[-1].extend(items)
            elif name == "SETITEM":
                v = stack.pop()
                k = stack.pop()
                _set_items(stack[-1], [k, v])
            elif name == "SETITEMS":
                items = _pop_mark(stack)
                _set_items(stack[-1], items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[_memo_key(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                key = _memo_key(arg)
                if key not in memo:
                    raise DumpRefused("malformed pickle: GET of an unknown memo slot")
                stack.append(memo[key])
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                _pop_mark(stack)
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "STOP":
                if len(stack) != 1:
                    raise DumpRefused(f"malformed pickle: STOP with a stack of {len(stack)}")
                return _bounded_copy(stack[0])
            else:
                raise DumpRefused(
                    f"refused: the pickle uses opcode {name}, which can name a class or call code; a flight-recorder "
                    "dump holds plain data only, so this file is not one (or was tampered with)"
                )
    except DumpRefused:
        raise
    except (ValueError, IndexError, TypeError) as e:  # genops on garbage, stack underflow
        raise DumpRefused(f"not a readable pickle: {e}") from e
    raise DumpRefused("malformed pickle: no STOP opcode (truncated file?)")


class _Slow(Exception):
    """A text opcode in a binary pickle: :func:`_load_ops` reads it."""


_I4 = struct.Struct("<i").unpack_from
_U4 = struct.Struct("<I").unpack_from
_U8 = struct.Struct("<Q").unpack_from
_H = struct.Struct("<H").unpack_from
_F8 = struct.Struct(">d").unpack_from
_OP_NAMES: Final = {o.code: o.name for o in pickletools.opcodes}
_TEXT_OPS = frozenset(b"ILFSVpg")
"""Opcodes of protocols 0/1 whose argument is a text line."""


def _load_binary(data: bytes) -> Any:
    """The value a binary pickle encodes, same allow-list as :func:`_load_ops`, walking the bytes directly."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    n = len(data)
    i = 0

    def take(k: int) -> bytes:
        if k < 0 or i + k > n:
            raise DumpRefused("malformed pickle: an argument runs past the end of the file (truncated?)")
        return data[i : i + k]

    def pop_mark() -> list[Any]:
        if not marks:
            raise DumpRefused("malformed pickle: no MARK for a MARK-consuming opcode")
        k = marks.pop()
        items = stack[k:]
        del stack[k:]
        return items

    try:
        while i < n:
            op = data[i]
            i += 1
            if op == 0x68:  # BINGET
                key = data[i]
                i += 1
                if key not in memo:
                    raise DumpRefused("malformed pickle: GET of an unknown memo slot")
                stack.append(memo[key])
            elif op == 0x71:  # BINPUT
                memo[data[i]] = stack[-1]
                i += 1
            elif op == 0x94:  # MEMOIZE
                memo[len(memo)] = stack[-1]
            elif op == 0x8C:  # SHORT_BINUNICODE
                k = data[i]
                i += 1
                stack.append(take(k).decode("utf-8", "surrogatepass"))
                i += k
            elif op == 0x58:  # BINUNICODE
                k = _U4(data, i)[0]
                i += 4
                stack.append(take(k).decode("utf-8", "surrogatepass"))
                i += k
            elif op == 0x4B:  # BININT1
                stack.append(data[i])
                i += 1
            elif op == 0x4D:  # BININT2
                stack.append(_H(data, i)[0])
                i += 2
            elif op == 0x4A:  # BININT
                stack.append(_I4(data, i)[0])
                i += 4
            elif op == 0x28:  # MARK
                marks.append(len(stack))
            elif op == 0x7D:  # EMPTY_DICT
                stack.append({})
            elif op == 0x5D:  # EMPTY_LIST
                stack.append([])
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op == 0x75:  # SETITEMS
                items = pop_mark()
                _set_items(stack[-1], items)
            elif op == 0x73:  # SETITEM
                v = stack.pop()
                k2 = stack.pop()
                _set_items(stack[-1], [k2, v])
            elif op == 0x65:  # APPENDS
                items = pop_mark()
                if not isinstance(stack[-1], list):
                    raise DumpRefused("malformed pickle: APPENDS to a non-list")
                stack[-1].extend(items)
            elif op == 0x61:  # APPEND
                v = stack.pop()
                if not isinstance(stack[-1], list):
                    raise DumpRefused("malformed pickle: APPEND to a non-list")
                stack[-1].append(v)
            elif op == 0x4E:  # NONE
                stack.append(None)
            elif op == 0x88:  # NEWTRUE
                stack.append(True)
            elif op == 0x89:  # NEWFALSE
                stack.append(False)
            elif op in (0x85, 0x86, 0x87):  # TUPLE1..3
                k = op - 0x84
                if len(stack) - (marks[-1] if marks else 0) < k:
                    raise DumpRefused("malformed pickle: stack underflow")
                t = tuple(stack[-k:])
                del stack[-k:]
                stack.append(t)
            elif op == 0x74:  # TUPLE
                stack.append(tuple(pop_mark()))
            elif op == 0x6C:  # LIST
                stack.append(pop_mark())
            elif op == 0x64:  # DICT
                d: dict[Any, Any] = {}
                _set_items(d, pop_mark())
                stack.append(d)
            elif op in (0x8A, 0x8B):  # LONG1, LONG4
                k = data[i] if op == 0x8A else _I4(data, i)[0]
                i += 1 if op == 0x8A else 4
                if not 0 <= k <= MAX_INT_BYTES:
                    raise DumpRefused(f"refused: an integer of {k} bytes (a dump's numbers fit in 8)")
                stack.append(int.from_bytes(take(k), "little", signed=True))
                i += k
            elif op == 0x47:  # BINFLOAT
                stack.append(_F8(data, i)[0])
                i += 8
            elif op in (0x43, 0x42, 0x8E, 0x55, 0x54, 0x8D):  # bytes and old strings, short and long
                if op in (0x43, 0x55):
                    k, w = data[i], 1
                elif op in (0x42, 0x54):
                    k, w = _I4(data, i)[0], 4
                else:
                    k, w = _U8(data, i)[0], 8
                i += w
                raw = take(k)
                i += k
                if op == 0x8D:  # BINUNICODE8
                    stack.append(raw.decode("utf-8", "surrogatepass"))
                elif op in (0x55, 0x54):  # SHORT_BINSTRING, BINSTRING (protocol 1 str: ASCII as pickle reads it)
                    stack.append(raw.decode("ascii"))
                else:
                    stack.append(raw)
            elif op == 0x72:  # LONG_BINPUT
                memo[_U4(data, i)[0]] = stack[-1]
                i += 4
            elif op == 0x6A:  # LONG_BINGET
                key = _U4(data, i)[0]
                i += 4
                if key not in memo:
                    raise DumpRefused("malformed pickle: GET of an unknown memo slot")
                stack.append(memo[key])
            elif op == 0x30:  # POP
                if marks and marks[-1] == len(stack):
                    marks.pop()  # POP of a MARK, as the C unpickler allows
                else:
                    stack.pop()
            elif op == 0x31:  # POP_MARK
                pop_mark()
            elif op == 0x32:  # DUP
                stack.append(stack[-1])
            elif op == 0x80:  # PROTO
                i += 1
            elif op == 0x95:  # FRAME
                i += 8
            elif op == 0x2E:  # STOP
                if len(stack) != 1 or marks:
                    raise DumpRefused(f"malformed pickle: STOP with a stack of {len(stack)}")
                return stack[0]
            elif op in _TEXT_OPS:
                raise _Slow
            else:
                name = _OP_NAMES.get(chr(op), f"0x{op:02x}")
                raise DumpRefused(
                    f"refused: the pickle uses opcode {name}, which can name a class or call code; a flight-recorder "
                    "dump holds plain data only, so this file is not one (or was tampered with)"
                )
    except (DumpRefused, _Slow):
        raise
    except (struct.error, IndexError, UnicodeDecodeError, TypeError) as e:  # arguments cut off, stack underflow
        raise DumpRefused(f"not a readable pickle: {e}") from e
    raise DumpRefused("malformed pickle: no STOP opcode (truncated file?)")


def _bounded_copy(value: Any) -> Any:
    """A fresh tree of ``value`` (shared references expanded), refused past :data:`MAX_VALUES` or :data:`MAX_DEPTH`."""
    budget = [MAX_VALUES]

    def copy(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise DumpRefused(f"dump expands to more than {MAX_VALUES} values (shared references?)")
        if depth > MAX_DEPTH:
            raise DumpRefused(f"dump nests deeper than {MAX_DEPTH} levels (a cycle?)")
        if isinstance(v, dict):
            return {copy(k, depth + 1): copy(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list):
            return [copy(x, depth + 1) for x in v]
        if isinstance(v, tuple):
            return tuple(copy(x, depth + 1) for x in v)
        return v

    return copy(value, 0)


def load_json(data: bytes) -> Any:
    """A JSON dump (``_dump_fr_trace_json``), size-capped and depth-checked like a pickle."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpRefused(f"dump is {len(data)} bytes, over the {MAX_DUMP_BYTES}-byte cap")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise DumpRefused(f"not readable JSON: {e}") from e
    return _bounded_copy(value)
