"""Numbers no job has, in every place a number stands in a real line: every tool answers, in bounded memory.

Each line shape of the fixtures' worker logs (one line per shape: the same line with other digits) is written with
its digit runs made long: every run of the line, or one run per line (a different one line by line). The lengths: 9
digits (a rank or a world size that would size a table of a billion entries), 41 (an integer no machine word holds)
and 5,000 (Python refuses to make an integer of over 4,300 digits). The lines go to four rank files and one file of
them all; the AIS daemon logs of every fixture, made alike, go beside them. Every tool runs in a child process whose
address space is capped, so a table sized by such a number fails the test instead of the machine.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
CAP_BYTES = 3 << 30

_RUN = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from debug_training_logs.logs.discovery import one_walk
from debug_training_logs.memo import one_command
from debug_training_logs.tools.registry import tool_by_name
logs, ais = sys.argv[1], sys.argv[2]
calls = [
    ("diagnose", {{"logs_dir": logs, "ais_dir": ais, "history": False}}),
    ("job_overview", {{"logs_dir": logs}}),
    ("nccl_state_table", {{"logs_dir": logs}}),
    ("timeline", {{"logs_dir": logs, "ais_dir": ais}}),
    ("grep_all_ranks", {{"logs_dir": logs, "patterns": ["9999", "rank"]}}),
    ("align_timezones", {{"logs_dir": logs, "ais_dir": ais}}),
    ("ais_counter_deltas", {{"ais_dir": ais}}),
]
answered = []
for name, args in calls:
    spec = tool_by_name(name)
    with one_command(), one_walk():
        result = spec.call(**args)
    answered.append((name, len(json.dumps(result.model_dump(mode="json")))))
print(json.dumps(answered))
"""


def _shapes(paths: list[Path]) -> list[str]:
    """One line per shape (digits masked) of ``paths``, each with a digit."""
    seen: set[str] = set()
    out: list[str] = []
    for p in paths:
        data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        for line in data.decode("utf-8", "replace").splitlines()[:4000]:
            shape = re.sub(r"\d+", "0", line)[:160]
            if shape not in seen and re.search(r"\d", line):
                seen.add(shape)
                out.append(line)
    return out


def _worker_logs() -> list[Path]:
    return sorted(
        p
        for p in FIXTURES.rglob("*")
        if p.is_file()
        and "logs" in p.relative_to(FIXTURES).parts
        and p.suffix not in (".json", ".py", ".pkl", ".pickle")
        and not any(part in ("ais", "fr") for part in p.relative_to(FIXTURES).parts)
    )


def _lengthen(lines: list[str], number: str, every: bool) -> list[str]:
    out = []
    for i, line in enumerate(lines):
        if every:
            out.append(re.sub(r"\d+", number, line))
            continue
        runs = list(re.finditer(r"\d+", line))
        m = runs[i % len(runs)]
        out.append(line[: m.start()] + number + line[m.end() :])
    return out


@pytest.mark.parametrize(("digits", "every"), [(9, True), (9, False), (41, True), (5000, True), (5000, False)], ids=str)
def test_every_tool_answers_lines_whose_numbers_no_job_has(tmp_path: Path, digits: int, every: bool) -> None:
    number = "987654321"[:digits] if digits <= 9 else "9" * digits
    worker = _lengthen(_shapes(_worker_logs()), number, every)
    logs, ais = tmp_path / "logs", tmp_path / "ais"
    logs.mkdir()
    ais.mkdir()
    for r in range(4):
        (logs / f"rank{r}.log").write_text("\n".join(worker[r::4]) + "\n")
    (logs / "all.log").write_text("\n".join(worker) + "\n")
    for p in sorted(FIXTURES.glob("*/ais/*")):
        if p.is_file() and p.suffix != ".gz":
            daemon = _lengthen(
                [ln for ln in p.read_text(errors="replace").splitlines() if re.search(r"\d", ln)], number, every
            )
            (ais / f"{p.parent.parent.name}-{p.name}").write_text("\n".join(daemon) + "\n")
    run = subprocess.run(
        [sys.executable, "-c", _RUN.format(cap=CAP_BYTES), str(logs), str(ais)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    answered = json.loads(run.stdout.strip().splitlines()[-1])
    assert [name for name, _ in answered] == [
        "diagnose",
        "job_overview",
        "nccl_state_table",
        "timeline",
        "grep_all_ranks",
        "align_timezones",
        "ais_counter_deltas",
    ]
