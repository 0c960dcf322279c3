"""The double-check as a program: deterministic rules that accept or reject a conclusion about a failed job.

A conclusion (:class:`~debug_training_logs.verify.models.Conclusion`) names a category and culprit ranks and may cite
log lines. The verifier never trusts the caller's reading of the logs: it re-derives the facts with the same analysis
the tools use (:func:`debug_training_logs.analysis.evidence.gather_evidence`) and runs every rule of
:mod:`debug_training_logs.verify.rules` against them. Each rule either passes, fails with the reason and what to look
at next, is undecided (counts as a failure: the logs cannot prove it), or says explicitly why it does not apply.

This package reads analysis results and files; nothing in ``analysis`` imports it.
"""

from debug_training_logs.verify.engine import verify, verify_with_evidence
from debug_training_logs.verify.models import CATEGORIES, Check, Conclusion, Verification

__all__ = ["CATEGORIES", "Check", "Conclusion", "Verification", "verify", "verify_with_evidence"]
