"""The SLURM epilog recipe (scripts/slurm_epilog.sh), run as slurmctld runs an EpilogSlurmctld: no PATH, the job's
variables in the environment, on the logs of a real failed job (fixtures/real_torch_2_14/sigkill: torch wrote them;
rank 1 was SIGKILLed). It analyses and records a failed job, leaves a successful one alone, never writes into the
log directory, and exits 0 whatever goes wrong, saying what in its own log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from debug_training_logs.history.location import Location
from debug_training_logs.history.store import open_store

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm_epilog.sh"
FAILED = REPO / "fixtures" / "real_torch_2_14" / "sigkill" / "logs"
BIN = Path(sys.executable).parent / "debug-training-logs"


def epilog(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    reports = tmp_path / "reports"
    base = {
        "HOME": str(tmp_path),
        "DTL_BIN": str(BIN),
        "DTL_REPORT_DIR": str(reports),
        "DEBUG_TRAINING_LOGS_HISTORY": str(tmp_path / "history.sqlite"),
        "SLURM_JOB_ID": "7312",
        "SLURM_JOB_EXIT_CODE": "256",  # wait status: the batch script exited 1
        "SLURM_JOB_EXIT_CODE2": "1:0",
        "SLURM_JOB_DERIVED_EC": "9",
        "SLURM_JOB_STDERR": str(FAILED / "train.7301.gpu-node-0.err"),
    }
    base.update(env)
    base = {k: v for k, v in base.items() if v != ""}
    ran = subprocess.run(
        ["/bin/bash", str(SCRIPT), *args], env=base, capture_output=True, text=True, timeout=600, check=False
    )
    return ran, reports


def snapshot(d: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(d)), p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*"))


def test_a_failed_job_is_analysed_reported_and_recorded(tmp_path: Path) -> None:
    before = snapshot(FAILED)
    ran, reports = epilog(tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = reports / "7312"
    d = json.loads((out / "diagnosis.json").read_text())
    assert d["verdict"]["category"] == "rank_crash" and d["verdict"]["culprit_ranks"] == [1]
    assert d["history"]["recorded"] is True and d["history"]["job"] == "7312"
    assert (out / "report.html").read_text().lower().startswith("<!doctype html>")
    assert "done:" in (reports / "epilog.log").read_text()
    assert snapshot(FAILED) == before  # nothing written into the log directory
    store = open_store(Location("sqlite", str(tmp_path / "history.sqlite")))
    assert store is not None
    try:
        assert store.rows("SELECT job_key, category FROM jobs") == [("slurm:7312", "rank_crash")]
    finally:
        store.close()


def test_a_job_that_succeeded_is_left_alone(tmp_path: Path) -> None:
    ran, reports = epilog(tmp_path, SLURM_JOB_EXIT_CODE="0", SLURM_JOB_EXIT_CODE2="0:0", SLURM_JOB_DERIVED_EC="0")
    assert ran.returncode == 0 and not reports.exists() and not (tmp_path / "history.sqlite").exists()


def test_whatever_goes_wrong_the_epilog_exits_0_and_says_why(tmp_path: Path) -> None:
    missing, reports = epilog(tmp_path, SLURM_JOB_STDERR="", DTL_LOGS_DIR=str(tmp_path / "no-such-%j"))
    assert missing.returncode == 0
    assert f"log directory '{tmp_path}/no-such-7312' does not exist" in (reports / "epilog.log").read_text()
    no_bin, _ = epilog(tmp_path, DTL_BIN=str(tmp_path / "nothing"))
    assert no_bin.returncode == 0 and "set DTL_BIN" in (reports / "epilog.log").read_text()
    slow, _ = epilog(tmp_path, DTL_TIMEOUT="0.05")
    assert slow.returncode == 0 and "did not finish within 0.05 s" in (reports / "epilog.log").read_text()
    inside, _ = epilog(tmp_path, DTL_REPORT_DIR=str(FAILED / "reports"))
    assert inside.returncode == 0 and not (FAILED / "reports").exists()
    assert "is inside the log directory" in inside.stderr


def test_the_log_directory_comes_from_scontrol_when_slurm_gives_no_file(tmp_path: Path) -> None:
    # scontrol here is a stand-in for the controller's answer (its one-line `show job -o` format)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "scontrol"
    stub.write_text(
        "#!/bin/sh\n"
        f"echo 'JobId=7312 JobName=train UserId=u(1) JobState=FAILED StdErr={FAILED}/train.7301.gpu-node-0.err "
        f"StdOut={FAILED}/train.7301.gpu-node-0.out'\n"
    )
    stub.chmod(0o755)
    ran, reports = epilog(tmp_path, SLURM_JOB_STDERR="", PATH=f"{bindir}:/usr/bin:/bin")
    assert ran.returncode == 0, ran.stderr
    assert json.loads((reports / "7312" / "diagnosis.json").read_text())["verdict"]["culprit_ranks"] == [1]


def test_detached_it_returns_at_once_and_finishes_in_the_background(tmp_path: Path) -> None:
    import time

    ran, reports = epilog(tmp_path, DTL_DETACH="1")
    assert ran.returncode == 0
    result = reports / "7312" / "diagnosis.json"
    deadline = time.monotonic() + 120
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads(result.read_text())["verdict"]["culprit_ranks"] == [1]
