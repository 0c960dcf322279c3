"""Rank sets as compact range strings (``"0-36,38-63"``), the form every tool result uses."""

from collections.abc import Iterable


def format_ranges(values: Iterable[int]) -> str:
    """Render integers as sorted, merged ranges: ``{0, 1, 2, 5}`` -> ``"0-2,5"``; empty -> ``""``."""
    ordered = sorted(set(values))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for v in ordered[1:]:
        if v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = v
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def parse_ranges(text: str) -> set[int]:
    """Inverse of :func:`format_ranges`: ``"0-2,5"`` -> ``{0, 1, 2, 5}``. Raises ``ValueError`` on malformed text."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            a, b = int(lo), int(hi)
            if b < a:
                raise ValueError(f"descending range {part!r}")
            out.update(range(a, b + 1))
        else:
            out.add(int(part))
    return out
