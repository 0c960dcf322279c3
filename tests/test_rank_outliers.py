"""A size mismatch whose odd rank its own words show: gloo's "Received data size doesn't match expected size" names
only the rank that received the buffer; the rank whose line, before it, differs from what every other rank wrote in
its place (``gathering 255 predictions`` where the others gather 256, ``shards [] -> 0 batches``) is the one whose
collective differed.

Held out: a console of sixteen ranks whose rank 9 dropped a record and gathered 255 predictions; rank 9 itself
received the bigger buffer and aborted, so the report named "suspect 9" and no culprit. And a console of five ranks
whose rank 4 got no validation shard and skipped the validation all-reduce; rank 3 received the wrong size and
aborted, and the report named rank 3 a suspect.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import GLOO_CLOSED, NodeLog, seconds, write

WORLD = 6
ABORT = [
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
    "  what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= "
    "op.nbytes. 1024 vs 1020. Received data size doesn't match expected size. Is there a distributed collective "
    "mismatch in your code?",
]


def _tag(form: str, r: int) -> str:
    return f"[rank {r}]" if form == "rank" else f"[r{r}]"


def _said(kind: str, r: int, odd: int | None) -> str:
    """What rank ``r`` says before the collective; ``odd`` says otherwise."""
    if kind == "count":
        return f"eval at step 15: gathering {255 if r == odd else 256} predictions"
    if kind == "shape":
        return "validation shards [] -> 0 batches" if r == odd else f"validation shards [{10 + r}] -> 4 batches"
    metrics = "['loss', 'acc', 'f1', 'auroc']" if r == odd else "['loss', 'acc', 'f1']"
    return f"loaded config configs/finetune.yaml, eval metrics {metrics}"


def _console(form: str, kind: str, odd: int | None, receiver: int, late: bool = False) -> list[str]:
    node = NodeLog(0, WORLD, 0, agent_pid=2353, tee=False)
    node.banner(seconds(0))
    for r in range(WORLD):
        node.lines.append(f"{seconds(2):%Y-%m-%d %H:%M:%S},100 - trainer - INFO - {_tag(form, r)} world_size={WORLD}")
    for step in (5, 10):
        for r in range(WORLD):
            node.lines.append(f"{seconds(step):%Y-%m-%d %H:%M:%S},200 - trainer - INFO - {_tag(form, r)} step={step}")
    for r in range(WORLD):
        if not (late and r == odd):
            node.lines.append(
                f"{seconds(14):%Y-%m-%d %H:%M:%S},300 - trainer - INFO - {_tag(form, r)} {_said(kind, r, odd)}"
            )
    node.lines += ABORT
    if late and odd is not None:  # the odd line only after the failure: no evidence of what came before it
        node.lines.append(
            f"{seconds(15):%Y-%m-%d %H:%M:%S},300 - trainer - INFO - {_tag(form, odd)} {_said(kind, odd, odd)}"
        )
    for r in range(WORLD):
        if r != receiver:
            node.victim(r, GLOO_CLOSED.format(peer=1, port=40000 + r))
    node.sigterms(seconds(16), [r for r in range(WORLD) if r != receiver])
    node.failed(seconds(16.05), receiver, -6)
    node.child_failed(seconds(16), (receiver, -6), {r: -15 for r in range(WORLD) if r != receiver})
    return node.lines


MATRIX = list(itertools.product(("rank", "r"), ("count", "shape", "list"), ("receiver", "other"), (False, True)))


@pytest.mark.parametrize(("form", "kind", "who", "gz"), MATRIX)
def test_the_rank_that_said_otherwise_before_a_size_mismatch(
    form: str, kind: str, who: str, gz: bool, tmp_path: Path
) -> None:
    odd = 4
    receiver = odd if who == "receiver" else 2
    logs = write(tmp_path, {"train.out": _console(form, kind, odd, receiver)}, compress=gz)
    d = diagnose(str(logs), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("collective_mismatch", [odd]), d.verdict.explanation
    assert d.verification.accepted, d.verification.summary
    assert any(
        link.source.split(":")[0] in ("train.out", "train.out.gz") and "[" in link.text for link in d.root_cause_chain
    )


@pytest.mark.parametrize("case", ["alike", "two_differ", "late"])
def test_no_single_rank_said_otherwise_before_it(case: str, tmp_path: Path) -> None:
    """Every rank wrote alike, two ranks wrote otherwise, or the odd line came only after the failure: the receiver
    stays the suspect and no rank is convicted."""
    if case == "two_differ":
        lines = _console("rank", "count", 4, 2)
        lines = [
            ln.replace("[rank 1] eval at step 15: gathering 256", "[rank 1] eval at step 15: gathering 254")
            for ln in lines
        ]
    else:
        lines = _console("rank", "count", None if case == "alike" else 4, 2, late=case == "late")
    d = diagnose(str(write(tmp_path, {"train.out": lines})), history=False)
    assert d.verdict.category == "collective_mismatch", d.verdict.explanation
    assert d.verdict.culprit_ranks == [], d.verdict.explanation
    assert 2 in d.verdict.suspect_ranks


def test_the_only_rank_of_its_node_is_not_convicted_for_writing_its_nodes_words(tmp_path: Path) -> None:
    """Uneven nodes (five ranks and one): the lone rank's host line differs from the five others' for no fault of its
    own, so it is no evidence of the size mismatch."""

    def rank_lines(r: int) -> list[str]:
        at = f"{seconds(2):%Y-%m-%d %H:%M:%S}"
        out = [f"{at},100 - trainer - INFO - [rank {r}] world_size={WORLD} host {'gpu-b' if r == 5 else 'gpu-a'}"]
        out += [f"{at},200 - trainer - INFO - [rank {r}] step={s}" for s in (5, 10)]
        out.append(f"{at},300 - trainer - INFO - [rank {r}] {_said('count', r, None)}")
        if r == 2:
            out.append(f"[rank {r}] RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
                       "op.preamble.length <= op.nbytes. 1024 vs 1020")  # fmt: skip
        else:
            out.append(f"[rank {r}] " + GLOO_CLOSED.format(peer=1, port=40000 + r))
        return out

    node0 = [ln for lines in zip(*(rank_lines(r) for r in range(5)), strict=True) for ln in lines]  # as written
    logs = write(tmp_path, {"node0.log": node0, "node1.log": rank_lines(5)})
    d = diagnose(str(logs), history=False)
    assert d.verdict.category == "collective_mismatch", d.verdict.explanation
    assert d.verdict.culprit_ranks == [], d.verdict.explanation


def test_rank_0_saying_otherwise_is_the_odd_one_too(tmp_path: Path) -> None:
    """The odd rank's number is 0: it is found as any other rank is (a rank of 0 is no "not found")."""
    logs = write(tmp_path, {"train.out": _console("rank", "count", 0, 2)})
    d = diagnose(str(logs), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("collective_mismatch", [0]), d.verdict.explanation
