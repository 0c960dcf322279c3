"""Gloo transport errors and torch's collective-mismatch report: typed events from single lines.

Pure functions over one line of text (never a file). Gloo runs every CPU process group (the whole job on CPU, and
beside NCCL the CPU groups Megatron/NeMo use for checkpointing and object collectives). What its errors mean for
the user, as real torch 2.13 runs show (fixtures/real_torch):

* ``Timed out waiting <N>ms for recv operation to complete`` / ``... send operation ...`` (capital T; from
  ``unbound_buffer.cc``): this rank waited in a collective for a peer that did not take part. It is a **victim**;
  the cause is a peer that stalled (it never entered the collective) or died.
* ``Connection closed by peer [addr]:port. This is typically caused by a remote worker crashing``, ``Connection
  reset by peer`` (``pair.cc``): a peer process went away. A **victim** too; the cause is the peer that died first.
* ``Gloo connectFullMesh failed``: the group could not be formed (a peer never arrived at init or is unreachable).
* ``op.preamble.length <= op.nbytes`` (an enforce in ``pair.cc``): the peers sent buffers of different sizes, i.e.
  the ranks are in **different collectives** (or the same one with different sizes).
* ``Detected mismatch between collectives on ranks. Rank R is running collective: CollectiveFingerPrint(...), but
  Rank Q is running collective: CollectiveFingerPrint(...)`` (``TORCH_DISTRIBUTED_DEBUG=DETAIL``, any backend): the
  mismatch named outright, with each side's op, sequence number and tensor shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

NEEDLES: Final[tuple[str, ...]] = (
    "for recv operation to complete",
    "for send operation to complete",
    "Connection closed by peer",
    "Connection reset by peer",
    "connectFullMesh failed",
    "op.preamble.length <= op.nbytes",
    "Detected mismatch between collectives",
)
"""Literals that select candidate lines for :func:`parse_line` (named data: a scan compiles them)."""

GlooKind = Literal["timeout", "peer_closed", "peer_reset", "full_mesh", "size_mismatch"]

_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>recv|send) operation to complete")
_CLOSED = re.compile(r"Connection closed by peer \[(?P<addr>[^\]]*)\]:(?P<port>\d+)")
_RESET = re.compile(r"Read error \[(?P<addr>[^\]]*)\]:(?P<port>\d+): Connection reset by peer|Connection reset by peer")
_FULL_MESH = re.compile(r"Gloo connectFullMesh failed(?: with (?P<why>.*))?")
_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\.? ?(?P<sent>\d+) vs (?P<expected>\d+)")
_SOURCE = re.compile(r"[\s\[](?:[^\]\s]*/)?(?P<file>[\w.]+\.(?:cc|cpp|h)):(?P<line>\d+)\]")

_MISMATCH = re.compile(r"Detected mismatch between collectives on ranks\. Rank (?P<rank>\d+) is running collective: ")
_PEER = re.compile(r", but Rank (?P<rank>\d+) is running collective: ")
_FP = "CollectiveFingerPrint("
_DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(?P<what>.*)$")
_FP_FIELDS = re.compile(r"(?P<key>SequenceNumber|OpType|TensorShape|TensorDtypes)=(?P<value>\[.*?\]|[^,)]+)")


@dataclass(frozen=True, repr=False)
class GlooError:
    """One gloo transport error a rank raised.

    ``kind``: timeout (waited ``timeout_ms`` for ``op`` and no peer came), peer_closed / peer_reset (a peer process
    went away; ``peer`` is its ``addr:port`` when logged), full_mesh (the group could not connect), size_mismatch
    (peers sent different sizes: ``sent`` vs ``expected`` bytes). ``victim`` is True for the kinds that describe
    what a *peer* did (timeout, peer_closed, peer_reset, full_mesh): the rank that logs them is not the cause.
    """

    kind: GlooKind
    op: str | None = None
    timeout_ms: int | None = None
    peer: str | None = None
    sent: int | None = None
    expected: int | None = None
    source: str | None = None

    @property
    def victim(self) -> bool:
        return self.kind != "size_mismatch"


@dataclass(frozen=True, repr=False)
class FingerPrint:
    """One side of a DETAIL mismatch report: what a rank was running (``op`` e.g. ALLREDUCE/BROADCAST, ``seq`` the
    group's sequence number, ``shapes`` and ``dtypes`` as logged)."""

    rank: int
    op: str | None
    seq: int | None
    shapes: str | None
    dtypes: str | None
    raw: str


@dataclass(frozen=True, repr=False)
class CollectiveMismatch:
    """``TORCH_DISTRIBUTED_DEBUG=DETAIL``: two ranks were in different collectives (``first`` is the rank that
    logged it as "Rank R is running", ``second`` the peer it compared with)."""

    first: FingerPrint
    second: FingerPrint | None
    aspects: str | None = None

    @property
    def differs_in(self) -> list[str]:
        """Which fields differ between the two fingerprints (op, seq, shapes, dtypes)."""
        if self.second is None:
            return []
        return [f for f in ("op", "seq", "shapes", "dtypes") if getattr(self.first, f) != getattr(self.second, f)]


GlooEvent = GlooError | CollectiveMismatch


def _fingerprint(rank: str, raw: str) -> FingerPrint:
    fields = {m.group("key"): m.group("value").strip() for m in _FP_FIELDS.finditer(raw)}
    seq = fields.get("SequenceNumber")
    return FingerPrint(
        rank=int(rank),
        op=fields.get("OpType"),
        seq=int(seq) if seq and seq.isdigit() else None,
        shapes=fields.get("TensorShape"),
        dtypes=fields.get("TensorDtypes"),
        raw=raw,
    )


def _balanced(text: str, start: int) -> str | None:
    """``CollectiveFingerPrint(...)`` starting at ``start``, nested parentheses included; None when cut."""
    if not text.startswith(_FP, start):
        return None
    depth = 0
    for i in range(start + len(_FP) - 1, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _mismatch(line: str) -> CollectiveMismatch | None:
    m = _MISMATCH.search(line)
    if not m:
        return None
    fp_a = _balanced(line, m.end())
    if fp_a is None:
        return None
    second = None
    p = _PEER.match(line, m.end() + len(fp_a))
    if p:
        fp_b = _balanced(line, p.end())
        if fp_b is not None:
            second = _fingerprint(p.group("rank"), fp_b)
    d = _DIFFER.search(line)
    return CollectiveMismatch(_fingerprint(m.group("rank"), fp_a), second, d.group("what").strip() if d else None)


def parse_line(line: str) -> GlooEvent | None:
    """The gloo error or DETAIL mismatch report in ``line`` (anywhere in it, after any prefix), else None."""
    if "Detected mismatch" in line:
        return _mismatch(line)
    src = _SOURCE.search(line)
    source = f"{src.group('file')}:{src.group('line')}" if src else None
    if m := _TIMEOUT.search(line):
        return GlooError("timeout", op=m.group("op"), timeout_ms=int(m.group("ms")), source=source)
    if m := _CLOSED.search(line):
        return GlooError("peer_closed", peer=f"{m.group('addr')}:{m.group('port')}", source=source)
    if m := _FULL_MESH.search(line):
        return GlooError("full_mesh", source=source)
    if m := _SIZE.search(line):
        return GlooError("size_mismatch", sent=int(m.group("sent")), expected=int(m.group("expected")), source=source)
    if "pair.cc" in line and (m := _RESET.search(line)):
        peer = f"{m.group('addr')}:{m.group('port')}" if m.group("addr") is not None else None
        return GlooError("peer_reset", peer=peer, source=source)
    return None
