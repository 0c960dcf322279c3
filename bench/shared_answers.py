"""The answers of the tools that read what another tool built (issue 33: ``tools/shared_results``), against the
answers each gives alone, on every job.

    python bench/shared_answers.py [--bench]

``same_outputs.py`` proves the CLI's outputs unchanged, but the CLI answers one command per process and never shares
a result between tools. Here, in one process as the server runs them, ``nccl_state_table`` (whole and ``ranks``),
``timeline`` (and with the AIS logs) and ``align_timezones`` answer on a fresh cache, after ``job_overview``, after
``diagnose`` and after both; every answer must be the one of the fresh cache. Jobs: every one of ``fixtures/`` and
``../shared/realworld`` (``--bench``: the 1,024-rank corpus alone). Prints the jobs compared, the ones that differ
and in how many ``diagnose`` kept its table; exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from same_outputs import jobs  # noqa: E402

from debug_training_logs import paths  # noqa: E402
from debug_training_logs.analysis.shared_scan import standard_consumers  # noqa: E402
from debug_training_logs.logs import scan_cache  # noqa: E402
from debug_training_logs.memo import MEMO  # noqa: E402
from debug_training_logs.tools import _cache  # noqa: E402
from debug_training_logs.tools.align_timezones import align_timezones  # noqa: E402
from debug_training_logs.tools.diagnose import diagnose  # noqa: E402
from debug_training_logs.tools.job_overview import job_overview  # noqa: E402
from debug_training_logs.tools.nccl_state_table import nccl_state_table  # noqa: E402
from debug_training_logs.tools.timeline import timeline  # noqa: E402


def answers(job: Path) -> list[Any]:
    logs = str(job / "logs")
    out = [nccl_state_table(logs), nccl_state_table(logs, ranks="0-3"), timeline(logs)]
    if (job / "ais").is_dir():
        out += [align_timezones(logs, str(job / "ais")), timeline(logs, str(job / "ais"))]
    return [a.model_dump() for a in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="store_true", help="the 1,024-rank corpus instead of the fixtures")
    args = ap.parse_args()
    os.environ["DEBUG_TRAINING_LOGS_HISTORY"] = "off"
    scan_cache.set_default_companions(standard_consumers())  # as the server scans
    found = [j for j in jobs(args.bench) if j[0].startswith("bench/") == args.bench]
    differ: list[str] = []
    kept = 0
    for name, job in found:
        logs = str(job / "logs")
        with paths.restricted_to([str(job)]):
            MEMO.clear()
            alone = answers(job)
            for first in (("job_overview",), ("diagnose",), ("job_overview", "diagnose")):
                MEMO.clear()
                for tool in first:
                    (job_overview if tool == "job_overview" else diagnose)(logs)
                if first == ("diagnose",):
                    kept += any(isinstance(k, tuple) and k[:2] == (_cache.TOOL, _cache.NCCL_TABLE) for k in MEMO._items)
                if answers(job) != alone:
                    differ.append(f"{name} after {' + '.join(first)}")
    for d in differ:
        print("differs:", d)
    print(f"{len(found)} job(s) compared, {len(differ)} differ; diagnose kept its table in {kept}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
