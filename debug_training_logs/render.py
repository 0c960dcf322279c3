"""Readable text for a result model: the CLI without ``--json``, and the text content of every MCP result.

The summary first, then an indented outline (empty fields left out, lists of records one line per record, small
dicts of scalars on one line), then what the token budget left out with the call that shows it. It renders a result
that is already held to its budget (``tools/budget.py``), so it shows every entry it is given and never cuts a list
of its own; the text is only cut as a last resort when it would still exceed the budget.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from debug_training_logs.tools.budget import DEFAULT_MAX_TOKENS, chars_for

if TYPE_CHECKING:
    from debug_training_logs.tools.registry import ToolSpec

MAX_TEXT = 300
"""Longest scalar shown (evidence lines are already cut at 300 characters)."""
INLINE = 120
"""A dict of scalars whose one-line form fits in this many characters is written on one line."""


def render_text(spec: ToolSpec, result: BaseModel) -> str:
    """The text a person or a model reads for ``result``: the tool's own rendering (or the outline) and the budget."""
    body = spec.render(result) if spec.render else render_model(result)
    data = result.model_dump(mode="json")
    note = render_budget(data.get("budget"))
    max_tokens = (data.get("budget") or {}).get("max_tokens", DEFAULT_MAX_TOKENS)
    limit = chars_for(max_tokens)
    if len(body) + len(note) > limit:
        tail = "\n[text cut to fit the budget; the structured content holds the whole result]"
        body = body[: max(0, limit - len(note) - len(tail))].rstrip() + tail
    return body + note


def render_model(model: BaseModel) -> str:
    data = model.model_dump(mode="json")
    data.pop("budget", None)
    lines: list[str] = []
    summary = data.pop("summary", None)
    if summary:
        lines += [str(summary), ""]
    _outline(data, 0, lines)
    return "\n".join(lines).rstrip()


def render_budget(budget: Any) -> str:
    """What the budget left out, one line per list, with the exact next call."""
    if not isinstance(budget, dict) or not budget.get("omitted"):
        return ""
    lines = ["", "", f"Left out to fit {budget['max_tokens']:,} tokens:"]
    for o in budget["omitted"]:
        call = o.get("next_call")
        nxt = f" Next: {call['tool']} {json.dumps(call['arguments'], ensure_ascii=False)}." if call else ""
        lines.append(f"- {o['field']}: {o['shown']} of {o['total']} shown. {o['how']}{nxt}")
    return "\n".join(lines)


def _scalar(v: Any) -> str:
    text = "" if v is None else str(v)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str | list | dict) and not v)


def _inline(d: dict[str, Any]) -> str | None:
    """``k=v, k=v`` for a dict of scalars (or lists of scalars) short enough for one line."""
    parts: list[str] = []
    for k, v in d.items():
        if _empty(v):
            continue
        if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, dict | list) for x in v)):
            return None
        parts.append(f"{k}=[{', '.join(map(str, v))}]" if isinstance(v, list) else f"{k}={_scalar(v)}")
    text = ", ".join(parts)
    return text if len(text) <= INLINE else None


def _outline(value: Any, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(value, dict):
        for k, v in value.items():
            if _empty(v):
                continue
            if isinstance(v, dict) and (one := _inline(v)) is not None:
                out.append(f"{pad}{k}: {one}")
            elif isinstance(v, list) and all(not isinstance(x, dict | list) for x in v):
                out.append(f"{pad}{k}: {', '.join(map(_scalar, v))}")
            elif isinstance(v, dict | list):
                out.append(f"{pad}{k}:")
                _outline(v, depth + 1, out)
            else:
                out.append(f"{pad}{k}: {_scalar(v)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                scalars = [
                    f"{k}={_scalar(v)}" for k, v in item.items() if not isinstance(v, dict | list) and not _empty(v)
                ]
                out.append(f"{pad}- " + ", ".join(scalars))
                nested = {k: v for k, v in item.items() if isinstance(v, dict | list) and v}
                if nested:
                    _outline(nested, depth + 1, out)
            else:
                out.append(f"{pad}- {_scalar(item)}")
    else:
        out.append(f"{pad}{_scalar(value)}")
