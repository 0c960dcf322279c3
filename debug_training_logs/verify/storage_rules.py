"""The storage rules: noise (connection resets and retries that succeeded are not a root cause) and all daemon files
(a storage conclusion rests on every AIS file covering the failure window)."""

from __future__ import annotations

import re

from debug_training_logs.analysis.alignment import to_ais_clock
from debug_training_logs.analysis.causal import causal_model
from debug_training_logs.analysis.evidence_states import killers
from debug_training_logs.analysis.evidence_triggers import AIS_LOOKBACK, data_hits, refine_times
from debug_training_logs.analysis.fate_events import reactions_at
from debug_training_logs.models import Evidence
from debug_training_logs.verify.context import RuleContext
from debug_training_logs.verify.context import check as _check
from debug_training_logs.verify.fate_rules import shown as launcher_supports
from debug_training_logs.verify.models import Check, CheckStatus
from debug_training_logs.verify.rule_helpers import RESET as _RESET
from debug_training_logs.verify.rule_helpers import STORAGE_CATEGORIES
from debug_training_logs.verify.rule_helpers import alignment_problem as _alignment_problem
from debug_training_logs.verify.rule_helpers import fmt_ranks as _fmt
from debug_training_logs.verify.rule_helpers import fmt_time as _t

# ---------------------------------------------------------------------------------------------------------------------
# noise


def _retry_outcome(ctx: RuleContext, rank: int | None, file: str, line: int) -> tuple[str, list[Evidence]]:
    """``exhausted``, ``succeeded`` or ``unknown`` for a request retried on ``rank`` (logged at ``file:line``).

    Succeeded: the rank went on (it later reached the collective, or logged progress), or training went on after it
    (synchronous training cannot progress while one rank is stuck on a request), or the run ended normally.
    """
    w = ctx.ev.worker
    ranks = {rank} if rank is not None else w.ranks_of_file(file)
    for r in ranks:
        for h in w.hits("retry_exhausted", r):
            if h.file != file or h.line >= line:
                return "exhausted", [h.cite()]
    rows = [r for r in ctx.ev.nccl.rows if r.rank in ranks and ((r.pending or 0) > 0 or r.signal == "detected")]
    if rows:
        return "succeeded", [rows[0].cite()]
    ends = w.hits("clean_end")
    if ends and not killers(w):
        return "succeeded", [ends[-1].cite()]
    at = next((h for s in ("conn_reset", "retry") for h in w.hits(s) if (h.file, h.line) == (file, line)), None)
    last_progress = {h.file: h for h in w.hits("progress")}  # the last kept progress line of each file
    refined = refine_times(w, [*([at] if at is not None else []), *last_progress.values()])
    when = refined[0].latest if at is not None else None
    for h in refined[1 if at is not None else 0 :]:
        if (h.file == file and h.line > line) or (when is not None and h.earliest is not None and h.earliest > when):
            return "succeeded", [h.cite()]
    return "unknown", []


def noise(ctx: RuleContext) -> Check:
    """Connection resets and retries that succeeded on retry are keep-alive noise, never a root cause."""
    root = ctx.root
    first = root if root is not None else (ctx.chain[0] if ctx.chain else None)
    if first is not None and first.exists and first.actual is not None and first.actual.text:
        text = first.actual.text
        if _RESET.search(text) and not re.search(r"Max retries exceeded|RetryError|[Rr]etries exhausted", text):
            peer = reactions_at(ctx.ev).get((first.file, first.line))
            if peer is not None:
                return _check(
                    "noise",
                    "passed",
                    f"The cited reset {first.where} is no storage request's: a collective raised it on rank "
                    f"{peer.rank} ({peer.what}), a consequence the conclusion reads as one.",
                    [first.cite()],
                )
            outcome, ev = _retry_outcome(ctx, first.rank, first.file, first.line)
            if outcome == "succeeded":
                return _check(
                    "noise",
                    "failed",
                    f"The root cause {first.where} is a connection reset/retry, and the request succeeded on retry "
                    f"(the rank kept training afterwards, {ev[0].file}:{ev[0].line}): AIS closes idle keep-alive "
                    "connections and the client's pool retries them. Noise, not a root cause.",
                    [first.cite(), *ev],
                    "Look past the resets: which rank stopped, and what its last lines say.",
                )
            if outcome == "exhausted":
                return _check(
                    "noise",
                    "passed",
                    f"The cited reset {first.where} was retried until the retries ran out ({ev[0].file}:{ev[0].line}).",
                    [first.cite(), *ev],
                )
            fate = causal_model(ctx.ev).fates.get(first.rank) if first.rank is not None else None
            p = fate.primary if fate is not None else None
            if (
                fate is not None
                and fate.end == "crashed"
                and p is not None
                and (p.line.file, p.line.line)
                == (
                    first.file,
                    first.line,
                )
            ):
                return _check(
                    "noise",
                    "passed",
                    f"The cited reset {first.where} was not retried away: it is the exception that reached the top of "
                    f"rank {first.rank}'s traceback and ended it ({fate.why}).",
                    [first.cite()],
                )
            return _check(
                "noise",
                "undecided",
                f"The root cause {first.where} is a connection reset/retry and the logs do not show whether the retry "
                "succeeded (no later progress and no 'Max retries exceeded' on that rank).",
                [first.cite()],
                "Show that the retries failed, or look for another cause.",
            )
    if ctx.category in STORAGE_CATEGORIES:
        real = [h for h in data_hits(ctx.ev, ctx.culprits or ctx.ev.worker.ranks, None) if not _RESET.search(h.text)]
        ais = ctx.ev.ais
        if real:
            return _check(
                "noise",
                "passed",
                f"The storage conclusion rests on data-loading errors that are not retried resets "
                f"({real[0].file}:{real[0].line}).",
                [h.cite() for h in real],
            )
        if ais is not None and (ais.spikes or ais.incident_lines()):
            return _check("noise", "passed", "The storage conclusion rests on AIS error lines and counter spikes.")
        resets = list({(h.file, h.line): h for s in ("conn_reset", "retry") for h in ctx.ev.worker.hits(s)}.values())
        if resets:
            outcome, ev = _retry_outcome(ctx, resets[-1].rank, resets[-1].file, resets[-1].line)
            status: CheckStatus = "failed" if outcome == "succeeded" else "undecided"
            who = f"Rank(s) {_fmt(ctx.culprits)} logged no data-loading error; the" if ctx.culprits else "The"
            return _check(
                "noise",
                status,
                f"{who} only storage-side lines in the logs are {len(resets)} connection reset/retry line(s)"
                + (", and training went on after them: keep-alive noise." if outcome == "succeeded" else "."),
                [h.cite() for h in resets[:4]] + ev,
                "Resets that succeed on retry are not a root cause: look for what actually stopped.",
            )
        ok, why, cites = launcher_supports(ctx)
        if ok:
            return _check("noise", "passed", f"No storage error is cited; the stall itself is shown: {why}", cites)
        return _check(
            "noise",
            "failed",
            "A storage category, but no rank logged a storage or data-loading error and no AIS evidence was given.",
            next_step="Find the data-loading error on the culprit rank, or pass the AIS logs.",
        )
    return _check(
        "noise", "not_applicable", "The conclusion does not rest on connection resets, retries or storage errors."
    )


# ---------------------------------------------------------------------------------------------------------------------
# all daemon files


def all_daemon_files(ctx: RuleContext) -> Check:
    """A storage conclusion rests on every file of the daemon that covers the failure window, not only the latest."""
    ais = ctx.ev.ais
    if ctx.category not in STORAGE_CATEGORIES or ais is None:
        return _check(
            "all_daemon_files",
            "not_applicable",
            "Not a storage conclusion with AIS logs: no daemon files to check.",
        )
    al = ais.alignment
    start, sym = ctx.start, ctx.symptom_time
    window = None
    if al.verified and start is not None:
        window = (to_ais_clock(start - AIS_LOOKBACK, al), to_ais_clock(sym or start, al))
    cited_by_daemon: dict[str, set[str]] = {}
    for c in ctx.cited:
        if c.source == "ais" and c.daemon:
            cited_by_daemon.setdefault(c.daemon, set()).add(c.file)
    if window is None:
        if not cited_by_daemon:
            return _check(
                "all_daemon_files",
                "not_applicable",
                "The conclusion cites no AIS line (it rests on the worker logs), and without a verified clock "
                f"alignment ({_alignment_problem(ctx)}) the failure window cannot be placed on the AIS clock to check "
                "which daemon files cover it.",
            )
        return _daemon_files_by_evidence(ctx, cited_by_daemon)
    lo, hi = window
    assert lo is not None and hi is not None
    problems: list[str] = []
    ev: list[Evidence] = []
    daemons = sorted(cited_by_daemon) or sorted(
        {s.daemon for s in ais.spikes} | {n.daemon for n in ais.incident_lines()}
    )
    covered_any = False
    for key in daemons:
        d = ais.daemon(key)
        if d is None:
            continue
        info = list(d.info_files)
        covering = [f for f in info if f.covers(lo, hi)]
        covered_any = covered_any or bool(covering)
        cited = cited_by_daemon.get(key, set())
        latest = info[-1].ref if info else None
        if cited and not any(f.ref in cited for f in d.files if f.covers(lo, hi)):
            problems.append(
                f"{key}: the cited file(s) {', '.join(sorted(cited))} do not cover the window {_t(lo)}-{_t(hi)} "
                f"(AIS clock); {', '.join(f.ref for f in covering) or 'no file'} does"
            )
        elif cited and len(covering) > 1 and cited & {f.ref for f in covering} == {latest}:
            earlier = ", ".join(f.ref for f in covering if f.ref != latest)
            problems.append(
                f"{key}: only the latest file {latest} is cited, but the window {_t(lo)}-{_t(hi)} (AIS clock) starts "
                f"in {earlier}"
            )
        first = info[0] if info else None
        if cited and first is not None and first.kind == "rotated" and first.start is not None and first.start > lo:
            problems.append(
                f"{key}: its earliest file given, {first.ref}, was rotated at {_t(first.start)}, after the window "
                f"starts ({_t(lo)}): the file(s) before it were not provided"
            )
    if problems:
        return _check(
            "all_daemon_files",
            "failed",
            "; ".join(problems[:4]) + ". The latest file may only cover the time after a restart or rotation.",
            ev,
            "Read every file of the daemon (INFO and rotated), especially the one covering the window.",
        )
    if not covered_any and daemons:
        return _check(
            "all_daemon_files",
            "failed",
            f"No file of {', '.join(daemons[:4])} covers the failure window {_t(lo)}-{_t(hi)} (AIS clock).",
            next_step="Fetch the rotated AIS log files (ais log get cluster) that cover the window.",
        )
    return _check(
        "all_daemon_files",
        "passed",
        f"The failure window {_t(lo)}-{_t(hi)} (AIS clock) is covered by the files the evidence comes from "
        f"({', '.join(daemons[:4]) or 'no daemon implicated'}); all files of each daemon were read.",
    )


def _daemon_files_by_evidence(ctx: RuleContext, cited_by_daemon: dict[str, set[str]]) -> Check:
    """Without a window on the AIS clock: a cited daemon whose error evidence lives in a file the conclusion did not
    use, or whose earliest file given is a rotation (its earlier files are missing)."""
    ais = ctx.ev.ais
    assert ais is not None
    problems = []
    status: CheckStatus = "failed"
    for key, cited in cited_by_daemon.items():
        evidence_files = {n.example.file for n in ais.incident_lines() if n.daemon == key}
        evidence_files |= {s.evidence.file for s in ais.spikes if s.daemon == key}
        if evidence_files and not (evidence_files & cited):
            problems.append(f"{key}: its error lines/spikes are in {', '.join(sorted(evidence_files))}, not cited")
        d = ais.daemon(key)
        info = list(d.info_files) if d is not None else []
        if info and info[0].kind == "rotated" and not evidence_files:
            status = "undecided" if not problems else status
            problems.append(
                f"{key}: its earliest file given, {info[0].ref}, starts with a rotation ({_t(info[0].start)}): its "
                "earlier files were not provided, and without a verified alignment it cannot be shown that they "
                "do not hold the failure window"
            )
    if problems:
        return _check(
            "all_daemon_files",
            status,
            "; ".join(problems) + ".",
            next_step="Fetch and read every file of the daemon (ais log get cluster), not only the latest.",
        )
    return _check(
        "all_daemon_files",
        "passed",
        "The cited AIS files hold the daemons' error evidence (the window itself could not be placed: no alignment).",
    )
