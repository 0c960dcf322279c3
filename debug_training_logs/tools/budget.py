"""The token budget every tool result is held to, for MCP and the CLI alike (one place, not each tool's own caps).

Why: an agent reads our results inside its context window. Claude Code warns above 10k tokens, cuts a result at
``MAX_MCP_OUTPUT_TOKENS`` (25,000 by default) and replaces anything over 50,000 characters by a file path, so an
answer that grows with the rank count is an answer the model never sees. Each result therefore gets a budget
(:data:`DEFAULT_MAX_TOKENS`, settable per call with ``max_tokens``) measured on what a client hands the model: the
compact JSON of the structured content (Claude Code sends exactly that; see ``server/app.py``).

How: the tools first summarise their own lists (groups with rank ranges and counts, the outliers in full, the
majority as one row); :func:`fit` then shortens whatever is still too long, generically. It repeatedly cuts the
list that costs the most characters, keeping its head (every tool orders its lists most important first), and
records each cut as an :class:`Omission` with the exact call that shows the rest: the tool's own paging or filter
parameters when it says how (its ``follow_up`` hook), else the same call with a larger ``max_tokens``. The list's own
``<name>_truncated`` counter (or ``truncated[name]``) grows by what was cut, so counts stay true.

What it must not do: decide what is important (the tools order their lists), or change a value it keeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, Field, create_model

from debug_training_logs.models import Model

DEFAULT_MAX_TOKENS = 6000
"""Default budget per result: a quarter of Claude Code's 25k cap and well under its 10k-token warning."""
MIN_MAX_TOKENS = 1000
MAX_MAX_TOKENS = 25000
"""Claude Code's default ``MAX_MCP_OUTPUT_TOKENS``: a larger result would be cut by the client anyway."""
CHARS_PER_TOKEN = 3.5
"""Characters of compact JSON per token, on the safe side: our JSON is dense in digits, keys and punctuation, which
tokenise worse than prose (~4 characters per token)."""

MaxTokens = Annotated[
    int,
    Field(
        ge=MIN_MAX_TOKENS,
        le=MAX_MAX_TOKENS,
        description="Size budget of the answer in tokens (about 3.5 characters of JSON each). Lists that do not fit "
        "are shortened, and `budget.omitted` names the exact call that shows what was left out.",
    ),
]


class NextCall(Model):
    """A tool call, ready to make: the tool's name and its arguments."""

    tool: str
    arguments: dict[str, Any] = Field(description="Arguments as the tool takes them (defaults left out).")


class Omission(Model):
    """One list the budget shortened, and how to see the rest."""

    field: str = Field(description="Where in the result, e.g. 'rows' or 'process_groups[0].straggler_ranks'.")
    shown: int = Field(description="Entries kept (the first ones: lists are ordered most important first).")
    total: int = Field(description="Entries the list had before the budget cut it.")
    next_call: NextCall | None = Field(description="The call that shows (the next part of) what was left out.")
    how: str = Field(description="The same in words, with the alternatives (filters, paging).")


class ResultBudget(Model):
    """How this result was held to its size budget."""

    max_tokens: int = Field(description="The budget this answer was held to (the `max_tokens` argument).")
    estimated_tokens: int = Field(description="This answer's size: characters of its compact JSON / 3.5.")
    omitted: list[Omission] = Field(description="Lists shortened to fit, with the follow-up call for each.")


@dataclass(frozen=True, repr=False, eq=False)
class Cut:
    """What a tool's ``follow_up`` hook is told about one shortened list."""

    tool: str
    field: str
    """Path of the list, e.g. ``rows`` or ``daemons[2].files``."""
    shown: int
    total: int
    omitted_items: list[Any]
    """The entries that were cut (JSON form), e.g. to name their ranks or daemons in the follow-up."""
    arguments: dict[str, Any]
    """The call's arguments, defaults left out."""
    result: Mapping[str, Any]
    """The whole result before any cut (JSON form)."""


FollowUp = Callable[[Cut], tuple[dict[str, Any], str] | None]
"""A tool's hook: for a cut list, the arguments of the call that shows the rest and a sentence saying so (or None
for the generic advice)."""
Amend = Callable[[dict[str, Any], Cut], None]
"""A tool's hook, run on the fitted result once per cut list: bring fields that depend on the list's length in line
(e.g. the offset of the next page)."""


PROTECTED = frozenset({"verdict", "conclusion", "verification"})
"""Fields never shortened: a verdict, the conclusion that verify_conclusion is meant to be given verbatim, and the
verification of that verdict (a reader must see every rule that accepted or rejected it)."""


def chars_for(max_tokens: int) -> int:
    return int(max_tokens * CHARS_PER_TOKEN)


def tokens_of(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def compact_json(data: Any) -> str:
    """The JSON a client hands a model (Claude Code: ``JSON.stringify(structuredContent)``)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


@cache
def budgeted_model(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` with a ``budget`` field: the type every tool result is returned as (MCP ``outputSchema``, CLI)."""
    if "budget" in model.model_fields:
        return model
    fields: Any = {
        "budget": (
            ResultBudget,
            Field(description="The size budget this answer was held to and what it left out (with follow-up calls)."),
        )
    }
    return create_model(model.__name__, __base__=model, __module__=model.__module__, __doc__=model.__doc__, **fields)


JsonPath = tuple[str | int, ...]
"""Where a value sits in a result: keys and list indices from the top."""


def path_text(path: JsonPath) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def _lists(value: Any, path: JsonPath = ()) -> list[tuple[JsonPath, list[Any] | dict[str, Any]]]:
    """Every list (and every large dict, which is a list of keyed entries) in ``value``, with its path (outer ones
    first, then in order)."""
    found: list[tuple[JsonPath, list[Any] | dict[str, Any]]] = []
    _collect_lists(value, path, found)
    return found


def _listed(path: JsonPath, value: list[Any] | dict[str, Any]) -> bool:
    """Whether :func:`_lists` counts ``value`` at ``path``: a list with entries, or a dict of more than 32 below the
    top (a large dict is a list of keyed entries)."""
    return bool(path) and len(value) > 32 if isinstance(value, dict) else bool(value)


def _collect_lists(value: Any, path: JsonPath, found: list[tuple[JsonPath, list[Any] | dict[str, Any]]]) -> None:
    if isinstance(value, dict):
        if _listed(path, value):
            found.append((path, value))
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                _collect_lists(v, (*path, k), found)
    elif isinstance(value, list):
        if _listed(path, value):
            found.append((path, value))
        for i, v in enumerate(value):
            if isinstance(v, (dict, list)):
                _collect_lists(v, (*path, i), found)


def _lists_after_cut(
    found: list[tuple[JsonPath, list[Any] | dict[str, Any]]], path: JsonPath, shortened: list[Any] | dict[str, Any]
) -> list[tuple[JsonPath, list[Any] | dict[str, Any]]]:
    """:func:`_lists` of a result after the list (or dict) at ``path`` became ``shortened`` (its head, the same
    entries), from ``found``, :func:`_lists` before: the lists inside the entries cut are gone, the cut one is the
    new object (or gone when it is no longer listed), the others are the same objects in the same order."""
    n = len(path)
    out: list[tuple[JsonPath, list[Any] | dict[str, Any]]] = []
    for p, v in found:
        if p[:n] != path:
            out.append((p, v))
        elif len(p) == n:
            if _listed(path, shortened):
                out.append((p, shortened))
        elif (p[n] < len(shortened)) if isinstance(shortened, list) else (p[n] in shortened):  # type: ignore[operator]
            out.append((p, v))
    return out


def _get(data: Any, path: JsonPath) -> Any:
    for p in path:
        data = data[p]
    return data


def _bump_counter(data: dict[str, Any], path: JsonPath, removed: int) -> int:
    """Add ``removed`` to the list's own truncation counter: ``<name>_truncated`` or ``truncated[name]``; returns by
    how many characters that changed the compact JSON."""
    if not path or not isinstance(path[-1], str):
        return 0
    parent = _get(data, path[:-1])
    name = path[-1]
    if not isinstance(parent, dict):
        return 0
    if isinstance(parent.get(f"{name}_truncated"), int):
        holder, key = parent, f"{name}_truncated"
    elif isinstance(parent.get("truncated"), dict) and isinstance(parent["truncated"].get(name), int):
        holder, key = parent["truncated"], name
    else:
        return 0
    before = len(compact_json(holder[key]))
    holder[key] += removed
    return len(compact_json(holder[key])) - before


def _keep_count(items: list[Any], room: int, floor: int, sizes: list[int]) -> int:
    """How many leading entries fit in ``room`` characters (at least ``floor``); ``sizes`` gets the compact JSON
    length of each entry measured (the leading ones, up to the first that does not fit)."""
    used, keep = 0, 0
    for item in items:
        n = len(compact_json(item))
        sizes.append(n)
        used += n + 1
        if used > room:
            break
        keep += 1
    return max(floor, keep)


def _kept_size(kept: list[Any], sizes: list[int], is_dict: bool) -> int:
    """Compact JSON length of the list (or dict, ``is_dict``: ``kept`` are its items) made of ``kept``, from the
    lengths of its entries already measured (``sizes``, as :func:`_keep_count` measures an entry: a dict's item as a
    ``[key, value]`` pair, two characters more than ``key:value``)."""
    lengths = sizes[: len(kept)] + [len(compact_json(item)) for item in kept[len(sizes) :]]
    return 2 + sum(lengths) + max(0, len(kept) - 1) - (2 * len(kept) if is_dict else 0)


@dataclass(repr=False, eq=False)
class _Shortened:
    path: JsonPath
    total: int
    shown: int
    omitted: list[Any]


def fit(
    data: dict[str, Any],
    *,
    call: NextCall,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    follow_up: FollowUp | None = None,
    amend: Amend | None = None,
) -> dict[str, Any]:
    """``data`` (a result's JSON form, not modified) held to ``max_tokens``, with its ``budget`` field; ``call`` is
    the call that made it (its arguments without the defaults), which the follow-up calls are written from."""
    fitting = _Fitting(data, call, max_tokens, follow_up)
    for floor in (1, 0):
        while (over := fitting.size() - fitting.limit) > 0 and fitting.cut(floor, over):
            pass
        if over <= 0:
            break
    if amend is not None:
        for s in fitting.cuts.values():
            amend(fitting.data, Cut(call.tool, path_text(s.path), s.shown, s.total, s.omitted, call.arguments, data))
    out = fitting.finished()
    _count_tokens(out)
    return out


class _Fitting:
    """One answer being shortened: a copy of it (``data``), the cuts made so far, and the sizes kept up to date cut
    by cut (a cut changes only the lists on its path and inside the cut list; measuring the whole answer, or every
    list, each round cost more than the cuts)."""

    def __init__(
        self,
        original: dict[str, Any],
        call: NextCall,
        max_tokens: int,
        follow_up: FollowUp | None,
    ) -> None:
        self.original = original
        self.call = call
        self.max_tokens = max_tokens
        self.follow_up = follow_up
        self.data: dict[str, Any] = json.loads(json.dumps(original))
        self.limit = chars_for(max_tokens)
        self.cuts: dict[JsonPath, _Shortened] = {}
        self._whole: int | None = None
        self.body = len(compact_json(self.data))
        """Compact JSON length of ``data`` as it stands: worked out cut by cut (a cut changes the cut list and its
        counter), not measured on the whole answer again each round."""
        self.sized: dict[JsonPath, int] = {}
        """Per list's path, its compact JSON size: a cut changes only the lists on its path and inside the cut list,
        the others keep their size from round to round."""
        self.found = _lists(self.data)  # kept up to date cut by cut (a cut changes only the cut list and what it holds)

    def whole_tokens(self) -> int:
        """Tokens of the whole answer (``original`` is not modified: measured once, not once per omission)."""
        if self._whole is None:
            self._whole = tokens_of(compact_json(self.original))
        return self._whole

    def budget(self) -> ResultBudget:
        omitted = [
            _omission(self.call, self.original, s, self.follow_up, self.whole_tokens) for s in self.cuts.values()
        ]
        # estimated_tokens as wide as max_tokens while the answer is fitted: the count written at the end (at most
        # max_tokens when the answer fits) then takes no more characters than were counted for it
        return ResultBudget(max_tokens=self.max_tokens, estimated_tokens=self.max_tokens, omitted=omitted)

    def finished(self) -> dict[str, Any]:
        """``data`` with the summary saying what was shortened and the budget field."""
        out = dict(self.data)
        if self.cuts and isinstance(out.get("summary"), str):
            out["summary"] += _cuts_note(self.max_tokens, self.cuts)
        out["budget"] = self.budget().model_dump(mode="json")
        return out

    def size(self) -> int:
        """Compact JSON length of :meth:`finished`: :attr:`body` with the summary's note and the budget field."""
        current = self.data
        n = self.body
        if self.cuts and isinstance(current.get("summary"), str):
            n += len(compact_json(_cuts_note(self.max_tokens, self.cuts))) - 2  # (a JSON string escapes char by char)
        field = len(compact_json(self.budget().model_dump(mode="json")))
        if "budget" in current:
            n += field - len(compact_json(current["budget"]))
        else:
            n += len('"budget":') + field + (1 if current else 0)
        if VERIFY_SIZES:
            assert n == len(compact_json(self.finished())), (n, len(compact_json(self.finished())))
        return n

    def size_of(self, path: JsonPath, value: Any) -> int:
        n = self.sized.get(path)
        if n is None:
            n = self.sized[path] = len(compact_json(value))
        return n

    def cut(self, floor: int, over: int) -> bool:
        """Shorten the costliest list (of more than ``floor`` entries) by about ``over`` characters; False when no
        list can be cut."""
        data = self.data
        candidates = [(p, v) for p, v in self.found if len(v) > floor and not (set(p) & PROTECTED)]
        if not candidates:
            return False
        sizes = sorted(((self.size_of(p, v), p, v) for p, v in candidates), key=lambda t: -t[0])
        cost, path, value = sizes[0]
        # Water-filling: the costliest list gives up what is over, but never shrinks below the next costliest
        # (other than lists inside it), so several long lists each keep their head instead of one losing all.
        others = [c for c, p, _ in sizes[1:] if p[: len(path)] != path]
        target = max(cost - over, others[0] if others else 0)
        items = list(value.items()) if isinstance(value, dict) else value
        measured: list[int] = []
        keep = _keep_count(items, target - 2, floor, measured)
        if keep >= len(items):
            keep = len(items) - 1
        kept, removed = items[:keep], items[keep:]
        parent = _get(data, path[:-1])
        parent[path[-1]] = shortened = dict(kept) if isinstance(value, dict) else kept
        self.body += _kept_size(kept, measured, isinstance(value, dict)) - cost
        self.found = _lists_after_cut(self.found, path, shortened)
        if VERIFY_SIZES:
            again = _lists(data)
            assert [p for p, _ in self.found] == [p for p, _ in again] and all(
                a is b for (_, a), (_, b) in zip(self.found, again, strict=True)
            )
        for q in [q for q in self.sized if q[: len(path)] == path or path[: len(q)] == q]:
            del self.sized[q]  # the cut list, the lists it holds and those holding it (their counters too)
        for inner in [q for q in self.cuts if len(q) > len(path) and q[: len(path)] == path]:
            if isinstance(inner[len(path)], int) and int(inner[len(path)]) >= keep:
                del self.cuts[inner]  # that entry itself is gone now: its own cut is part of this one
        self.body += _bump_counter(data, path, len(removed))
        prior = self.cuts.get(path)
        removed_json = [dict([r]) if isinstance(value, dict) else r for r in removed]
        if prior is None:
            self.cuts[path] = _Shortened(path, len(items), keep, removed_json)
        else:
            prior.shown = keep
            prior.omitted = removed_json + prior.omitted
        return True


def _count_tokens(data: dict[str, Any]) -> None:
    """Write the answer's own size into its ``budget.estimated_tokens`` (the count changes the size it counts by a
    digit at most: settled in a round or two)."""
    for _ in range(3):
        n = tokens_of(compact_json(data))
        if data["budget"]["estimated_tokens"] == n:
            return
        data["budget"]["estimated_tokens"] = n


VERIFY_SIZES = False
"""Tests set this: every size :func:`fit` works out is checked against the compact JSON it stands for."""


def _cuts_note(max_tokens: int, cuts: Mapping[JsonPath, _Shortened]) -> str:
    """What the summary says of the cuts (appended to it)."""
    return (
        f" [Shortened to fit {max_tokens:,} tokens: "
        + ", ".join(_cut_words(s) for s in cuts.values())
        + "; budget.omitted gives the call that shows the rest.]"
    )


def _more(s: _Shortened) -> str:
    n = s.total - s.shown
    return f"{n} more {'entry' if n == 1 else 'entries'}"


def _cut_words(s: _Shortened) -> str:
    return f"{path_text(s.path)} {s.shown} of {s.total}"


def _omission(
    call: NextCall,
    original: Mapping[str, Any],
    s: _Shortened,
    follow_up: FollowUp | None,
    whole_tokens: Callable[[], int],
) -> Omission:
    field = path_text(s.path)
    tool = call.tool
    cut = Cut(tool, field, s.shown, s.total, s.omitted, call.arguments, original)
    hook = follow_up(cut) if follow_up is not None else None
    if hook is not None:
        args, how = hook
        return Omission(
            field=field, shown=s.shown, total=s.total, next_call=NextCall(tool=tool, arguments=args), how=how
        )
    need = whole_tokens() + 500
    if need <= MAX_MAX_TOKENS:
        args = {**call.arguments, "max_tokens": max(need, DEFAULT_MAX_TOKENS)}
        how = f"{_more(s)}: call again with max_tokens={args['max_tokens']} to see all of them."
        return Omission(
            field=field, shown=s.shown, total=s.total, next_call=NextCall(tool=tool, arguments=args), how=how
        )
    how = (
        f"{_more(s)}; the whole answer (~{need:,} tokens) is larger than one result may be: "
        "narrow the call with the tool's filters or a smaller limit."
    )
    return Omission(field=field, shown=s.shown, total=s.total, next_call=None, how=how)


def non_default_arguments(arguments: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a caller would have to write: those that differ from their defaults."""
    return {k: v for k, v in arguments.items() if k not in defaults or defaults[k] != v}
