"""The program's early start of its command's scan: ``analyze``, ``nccl`` and ``grep`` on a log directory start
reading it before the program imports pydantic, builds its argument parser and checks the arguments, work of one core
(0.1-0.2 s) while the other one idled. The command's own scan then reads the results of the scan started here
(:func:`~debug_training_logs.analysis.inventory.start_scan`), the workers having read on meanwhile.

Only the plain forms start early: ``analyze LOGS [AIS]``, ``nccl LOGS`` and ``grep LOGS`` (and ``diagnose``, the other
name of ``analyze``), with at most ``--json`` beside them. Any other option may change what the command scans, so the
command then scans as it always did. Nothing here decides anything: the command's scan reads the started one only when
it asks for exactly the same scan (directory, consumers, companions, inventory markers), and gives it up otherwise.
Whatever fails here (no such directory, an unreadable one) is left for the command to meet and report: :func:`start`
never raises and never prints.

Each starter below mirrors its command's first scan (``tests/test_early_scan.py`` checks that the command reads it).
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Sequence


def start(argv: Sequence[str]) -> None:
    """Start the scan of the command ``argv`` (the program's arguments) names, if it is a plain form (see above)."""
    if not argv:
        return
    command, dirs = argv[0], [a for a in argv[1:] if a != "--json"]
    starter, most_dirs = _STARTERS.get(command, (None, 0))
    if starter is None or not 0 < len(dirs) <= most_dirs or any(d.startswith("-") for d in dirs):
        return
    from debug_training_logs.analysis.inventory import drop_started_scan

    try:
        starter(dirs[0])
    except Exception:  # the command meets the same failure and says what it is
        drop_started_scan()
        return
    atexit.register(drop_started_scan)  # a command that ends before its scan (an error) leaves no worker behind


def _analyze(logs_dir: str) -> None:
    """``diagnose``' scan (:func:`~debug_training_logs.analysis.evidence.gather_evidence`)."""
    from debug_training_logs.analysis.evidence import job_scan_consumers
    from debug_training_logs.analysis.inventory import start_scan

    start_scan(logs_dir, job_scan_consumers())


def _nccl(logs_dir: str) -> None:
    """The NCCL table's scan: the attempts' launcher facts with the table as a companion, of the lean inventory
    (:func:`~debug_training_logs.tools.nccl_state_table.nccl_state_table`,
    :func:`~debug_training_logs.tools.attempt_choice.choose`)."""
    from debug_training_logs.analysis import attempts
    from debug_training_logs.analysis.inventory import lean_inventory, start_scan
    from debug_training_logs.analysis.nccl_table import table_consumer
    from debug_training_logs.logs.scan_cache import together

    with lean_inventory(), together(table_consumer()):
        start_scan(logs_dir, [attempts.launcher_consumer()])


def _grep(logs_dir: str) -> None:
    """``grep``'s scan for its default patterns (:func:`~debug_training_logs.tools.grep_all_ranks.grep_all_ranks`)."""
    from debug_training_logs.analysis.grep import GREP_INVENTORY_MARKERS, grep_consumer, parse_patterns
    from debug_training_logs.analysis.inventory import lean_inventory, start_scan

    with lean_inventory(GREP_INVENTORY_MARKERS):
        start_scan(logs_dir, [grep_consumer(parse_patterns(None, None))])


_STARTERS: dict[str, tuple[Callable[[str], None], int]] = {
    "analyze": (_analyze, 2),
    "diagnose": (_analyze, 2),
    "nccl": (_nccl, 1),
    "grep": (_grep, 1),
}
"""The CLI command -> the starter of its scan, and how many directories it takes positionally (the logs first)."""
