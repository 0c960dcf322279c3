"""The token budget (tools/budget.py): what it keeps, what it says it left out, and that both front ends agree."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.server.app import create_server
from debug_training_logs.tools import budget
from debug_training_logs.tools.budget import DEFAULT_MAX_TOKENS, Cut, NextCall, chars_for, compact_json, fit
from debug_training_logs.tools.registry import all_tools, tool_by_name

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(autouse=True)
def _verified_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every size the budget works out cut by cut is checked against the JSON it stands for."""
    monkeypatch.setattr(budget, "VERIFY_SIZES", True)


def _result(rows: int, templates: int = 0) -> dict[str, Any]:
    return {
        "summary": "A job.",
        "coverage": {"ranks_found": f"0-{rows - 1}", "unreadable_files": []},
        "rows": [{"rank": r, "text": f"rank {r} waited in ALLREDUCE 4118 for 1800000 ms"} for r in range(rows)],
        "rows_truncated": 0,
        "templates": [{"template": f"template {t} " * 10, "ranks": "0-1023"} for t in range(templates)],
        "truncated": {"templates": 0},
        "verdict": {"culprit_ranks": list(range(500))},
    }


def test_a_result_within_budget_is_unchanged_and_says_so() -> None:
    data = _result(3)
    out = fit(data, call=NextCall(tool="t", arguments={"logs_dir": "/x"}))
    assert {k: v for k, v in out.items() if k != "budget"} == data
    assert out["budget"]["omitted"] == [] and out["budget"]["max_tokens"] == DEFAULT_MAX_TOKENS


def test_long_lists_keep_their_head_and_counts_stay_true() -> None:
    data = _result(600, templates=100)
    out = fit(data, call=NextCall(tool="t", arguments={"logs_dir": "/x"}), max_tokens=2000)
    assert len(compact_json(out)) <= chars_for(2000)
    shown_rows, shown_templates = len(out["rows"]), len(out["templates"])
    assert 0 < shown_rows < 600 and 0 < shown_templates < 100  # both long lists keep their head (water-filling)
    assert out["rows"] == data["rows"][:shown_rows] and out["templates"] == data["templates"][:shown_templates]
    assert out["rows_truncated"] == 600 - shown_rows  # the list's own counter
    assert out["truncated"]["templates"] == 100 - shown_templates  # or the shared truncated dict
    assert out["verdict"] == data["verdict"]  # never shortened, whatever its size
    omitted = {o["field"]: o for o in out["budget"]["omitted"]}
    assert (omitted["rows"]["shown"], omitted["rows"]["total"]) == (shown_rows, 600)
    # Without a hook, the same call with a budget that holds everything (under Claude Code's cap).
    need = omitted["rows"]["next_call"]["arguments"]["max_tokens"]
    assert omitted["rows"]["next_call"] == {"tool": "t", "arguments": {"logs_dir": "/x", "max_tokens": need}}
    assert len(compact_json(fit(data, call=NextCall(tool="t", arguments={}), max_tokens=need))) > len(compact_json(out))
    assert fit(data, call=NextCall(tool="t", arguments={}), max_tokens=need)["budget"]["omitted"] == []
    assert "Shortened to fit 2,000 tokens: rows" in out["summary"]


def test_the_answer_fits_its_budget_to_the_character_whatever_the_length_of_its_paths() -> None:
    """An answer echoes paths of any length, so its shortened size lands anywhere below the limit, a few characters
    under it too: the token count written last must still fit (it used to be counted as one digit, then written with
    four, 2-3 characters over)."""
    limit = chars_for(1000)
    for pad in range(80):
        data = _result(200)
        data["summary"] = "A job in /" + "x" * pad + "."
        out = fit(data, call=NextCall(tool="t", arguments={"logs_dir": "/" + "x" * pad}), max_tokens=1000)
        assert out["budget"]["omitted"] and len(compact_json(out)) <= limit, pad
        assert out["budget"]["estimated_tokens"] == budget.tokens_of(compact_json(out))


def test_a_tool_hook_names_the_follow_up_and_amends_dependent_fields() -> None:
    seen: list[Cut] = []

    def follow_up(cut: Cut) -> tuple[dict[str, Any], str] | None:
        seen.append(cut)
        if cut.field != "rows":
            return None
        ranks = [item["rank"] for item in cut.omitted_items]
        return {"ranks": f"{ranks[0]}-{ranks[-1]}"}, "the other ranks"

    def amend(data: dict[str, Any], cut: Cut) -> None:
        data["next_offset"] = cut.shown

    out = fit(_result(600), call=NextCall(tool="t", arguments={}), max_tokens=1000, follow_up=follow_up, amend=amend)
    shown = len(out["rows"])
    (rows,) = [o for o in out["budget"]["omitted"] if o["field"] == "rows"]
    assert rows["next_call"]["arguments"] == {"ranks": f"{shown}-599"} and rows["how"] == "the other ranks"
    assert out["next_offset"] == shown
    assert all(c.result["rows"][0]["rank"] == 0 and len(c.result["rows"]) == 600 for c in seen)  # the uncut result


def test_every_tool_takes_max_tokens_and_publishes_the_budget_field() -> None:
    for spec in all_tools():
        assert "max_tokens" in spec.signature.parameters, spec.name
        assert "budget" in spec.result_model.model_fields, spec.name


@pytest.mark.anyio
async def test_cli_json_is_the_mcp_structured_content_when_the_budget_cuts() -> None:
    """STYLE.md: the CLI's --json is byte-for-byte what MCP returns, also for a result the budget shortened."""
    logs = FIXTURES / "data_stall" / "logs"
    async with Client(create_server([FIXTURES]), raise_exceptions=True) as client:
        res = await client.call_tool("grep_all_ranks", {"logs_dir": str(logs), "max_tokens": 1000})
    assert res.is_error is False, res.content
    via_mcp = res.structured_content
    assert via_mcp is not None and via_mcp["budget"]["omitted"], "the fixture should need a cut at 1,000 tokens"
    cli = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "grep", str(logs), "--max-tokens", "1000", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == via_mcp
    assert cli.stdout.strip() == json.dumps(via_mcp, indent=2, ensure_ascii=False)
    # The text block is the readable rendering, not the JSON again, and it ends with what was left out.
    (block,) = res.content
    text = getattr(block, "text", "")
    assert text.startswith(via_mcp["summary"]) and "Left out to fit 1,000 tokens:" in text
    assert not text.lstrip().startswith("{") and len(text) <= chars_for(1000)


def test_bad_max_tokens_is_refused_with_the_bounds(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "overview", str(tmp_path), "--max-tokens", "10"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "max_tokens" in run.stderr and "1000" in run.stderr


def test_overview_groups_files_and_pages_through_all_of_them(tmp_path: Path) -> None:
    from conftest import write_small_job

    logs = write_small_job(tmp_path / "logs", nodes=12, gpus=4)
    (logs / "error-777-3.out").write_text("no rank in here\n" * 5, encoding="utf-8")  # one odd file
    spec = tool_by_name("job_overview")
    assert spec is not None
    first = spec.call(logs_dir=str(logs), limit=5).model_dump(mode="json")
    groups = first["file_groups"]
    assert sum(g["count"] for g in groups) == first["coverage"]["files_scanned"] == 12
    assert (groups[0]["count"], groups[0]["ranks_per_file"]) == (11, 4)
    assert first["files"][0]["file"] == "error-777-3.out"  # the odd one (no ranks) comes first
    seen = [f["file"] for f in first["files"]]
    offset = 5
    while len(seen) < 12:
        page = spec.call(logs_dir=str(logs), limit=5, offset=offset).model_dump(mode="json")
        assert page["files_truncated"] == 12 - len(page["files"])
        seen += [f["file"] for f in page["files"]]
        offset += 5
    assert sorted(seen) == sorted(p.name for p in logs.iterdir()) and len(set(seen)) == 12


def _nested(seed: int) -> dict[str, Any]:
    """A result with lists in lists, a large dict, counters of both kinds, escapes and non-ASCII text, and a budget
    field of its own (a result fitted again)."""
    rng = random.Random(seed)
    words = ["rank", "näive", 'quote"d', "back\\slash", "tab\tline\nbreak", "日本", "\u2028", "x" * 40]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randrange(1, 8)))

    groups = [
        {
            "name": text(),
            "members": [{"rank": r, "why": text()} for r in range(rng.randrange(0, 60))],
            "members_truncated": rng.randrange(0, 3),
        }
        for _ in range(rng.randrange(3, 12))
    ]
    out: dict[str, Any] = {
        "summary": text(),
        "groups": groups,
        "groups_truncated": 0,
        "per_file": {f"node{i:03d}.log": {"lines": rng.randrange(10**6), "note": text()} for i in range(80)},
        "samples": [text() for _ in range(rng.randrange(50, 300))],
        "numbers": [rng.random() * 10 ** rng.randrange(-3, 12) for _ in range(200)],
        "truncated": {"samples": 9, "per_file": 0, "numbers": 99},
        "verdict": {"culprit_ranks": list(range(50))},
    }
    if seed % 2:
        out["budget"] = {"max_tokens": 1, "estimated_tokens": 1, "omitted": []}
    return out


@pytest.mark.parametrize("seed", range(12))
def test_sizes_worked_out_cut_by_cut_equal_the_json(seed: int) -> None:
    """The sizes :func:`fit` works out cut by cut equal the compact JSON (checked on every round by the fixture), and
    the answer fits and keeps each list's head."""
    data = _nested(seed)
    for max_tokens in (1000, 2500, 6000):
        out = fit(data, call=NextCall(tool="t", arguments={}), max_tokens=max_tokens)
        assert out["budget"]["estimated_tokens"] == budget.tokens_of(compact_json(out))
        if out["budget"]["omitted"]:
            assert len(compact_json(out)) <= chars_for(max_tokens) or not any(
                len(v) > 1 for v in (out["samples"], out["numbers"], out["groups"])
            )
        assert out["samples"] == data["samples"][: len(out["samples"])]
