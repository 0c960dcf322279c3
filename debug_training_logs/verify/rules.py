"""The rules of the double-check in the order they run (:data:`RULES`), one function each: ``rule(ctx) -> Check``,
in a module of its family (``culprit_rules``, ``order_rules``, ``storage_rules``, ``citation_rules``,
``category_rules``, ``fate_rules``, ``hang_rules``; shared helpers in ``rule_helpers``).

Every rule re-derives what it needs from :class:`~debug_training_logs.verify.context.RuleContext` (the evidence the
verifier gathered itself and the cited lines as the files have them). A rule that cannot decide says so (status
``undecided``, which rejects the conclusion) or says why it does not apply (``not_applicable``, with the reason):
never a silent pass. Rules never key on fixture names or paths: only on what the lines say.
"""

from __future__ import annotations

from collections.abc import Callable

from debug_training_logs.verify.category_rules import category_specific
from debug_training_logs.verify.citation_rules import citations
from debug_training_logs.verify.context import RuleContext
from debug_training_logs.verify.culprit_rules import coverage, fabric_vs_straggler, rank0_ahead, straggler_consistency
from debug_training_logs.verify.fate_rules import rank_fates
from debug_training_logs.verify.hang_rules import node_telemetry, stack_dumps
from debug_training_logs.verify.models import Check
from debug_training_logs.verify.order_rules import causality, clock
from debug_training_logs.verify.storage_rules import all_daemon_files, noise

Rule = Callable[[RuleContext], Check]

RULES: tuple[Rule, ...] = (
    coverage,
    straggler_consistency,
    fabric_vs_straggler,
    causality,
    clock,
    noise,
    citations,
    all_daemon_files,
    rank0_ahead,
    category_specific,
    rank_fates,
    stack_dumps,
    node_telemetry,
)
"""Every rule, in the order a person would check."""
