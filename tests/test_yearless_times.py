"""A job whose lines state no year (c10 ``[E0521 07:32:12...]`` headers only): the report shows times as the logs wrote
them (``05-21 07:32:12``), never a year nobody logged, and the JSON says the year in ``time_local`` stands in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from debug_training_logs.printers.markdown import render_report
from debug_training_logs.tools.diagnose import diagnose

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_styles" / "torch-2.7" / "logs"
FULL_DATE = re.compile(r"\b(19|20)\d\d[-/]\d\d[-/]\d\d")


def _yearless_copy(dest: Path) -> Path:
    dest.mkdir()
    for f in sorted(FIXTURE.iterdir()):
        lines = f.read_text().splitlines(keepends=True)
        (dest / f.name).write_text("".join(ln for ln in lines if not FULL_DATE.search(ln)))
    return dest


def test_a_job_without_years_is_reported_without_an_invented_year(tmp_path: Path) -> None:
    logs = _yearless_copy(tmp_path / "logs")
    result = diagnose(logs_dir=str(logs))
    report = render_report(result)
    assert not re.search(r"\b2000-\d\d-\d\d", report), report
    assert re.search(r"\| 05-21 08:02:12 \|", report), report
    timed = [e for e in result.timeline if e.time_local]
    assert timed and all("no log line states a year" in e.time_note for e in timed)
    untimed = [e for e in result.timeline if not e.time_local and "between" in e.time_note]
    assert untimed and all("2000" not in e.time_note for e in untimed)


def test_a_job_with_dates_keeps_them(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURE, logs)
    report = render_report(diagnose(logs_dir=str(logs)))
    assert "2026-05-21" in report and "no log line states a year" not in report
