"""Readable text for a result model (the CLI without ``--json``): the summary first, then an indented outline."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

MAX_ITEMS = 12
MAX_TEXT = 160


def render_model(model: BaseModel) -> str:
    data = model.model_dump(mode="json")
    lines: list[str] = []
    summary = data.pop("summary", None)
    if summary:
        lines += [str(summary), ""]
    _outline(data, 0, lines)
    return "\n".join(lines).rstrip()


def _scalar(v: Any) -> str:
    text = "" if v is None else str(v)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _outline(value: Any, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(value, dict):
        for k, v in value.items():
            if v in (None, "", [], {}):
                continue
            if isinstance(v, dict | list):
                out.append(f"{pad}{k}:")
                _outline(v, depth + 1, out)
            else:
                out.append(f"{pad}{k}: {_scalar(v)}")
    elif isinstance(value, list):
        for item in value[:MAX_ITEMS]:
            if isinstance(item, dict):
                scalars = [
                    f"{k}={_scalar(v)}"
                    for k, v in item.items()
                    if not isinstance(v, dict | list) and v not in (None, "")
                ]
                out.append(f"{pad}- " + ", ".join(scalars))
                nested = {k: v for k, v in item.items() if isinstance(v, dict | list) and v}
                if nested:
                    _outline(nested, depth + 1, out)
            else:
                out.append(f"{pad}- {_scalar(item)}")
        if len(value) > MAX_ITEMS:
            out.append(f"{pad}  ... {len(value) - MAX_ITEMS} more (use --json for all)")
    else:
        out.append(f"{pad}{_scalar(value)}")
