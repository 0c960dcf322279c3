"""A launcher's task labels (``srun --label``'s ``3: ``, Open MPI ``mpirun --tag-output``'s ``[1,3]<stdout>:``) name
the rank that wrote each line of a combined file, whichever torch wrote the tracebacks (with its ``[rankN]:`` prefix
or without), and a rank whose own traceback ended on a peer's failure is torn down, not of unknown fate. Before
torchrun's ``--tee`` prefix (``srun -l torchrun``: one task per node) the label is the node and the prefix the local
rank: a rank that printed no ``[rankN]:`` line of its own is its node's local rank all the same.

Held out: a real 4-rank gloo job under an ``--tag-output`` launcher gave every rank's progress to no rank and called
the victims' fate unknown although each traceback ended on "Connection closed by peer"."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import GLOO_CLOSED, write

LABELS = {
    "mpi": lambda r, stream: f"[1,{r}]<{stream}>:",
    "mpi_spaced": lambda r, stream: f"[1,{r}]<{stream}>: ",
    "srun": lambda r, stream: f"{r}: ",
}
FRAMES = (
    '  File "/srv/job/train.py", line 18, in <module>',
    "    dist.all_reduce(t)",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce',
    "    work.wait()",
)


def _combined(world: int, bad: int, label: str, torch_prefix: bool) -> list[str]:
    """One file of every rank's output as the launcher tags it: progress, then ``bad`` raises in step 3 and the
    others lose their peer in the all-reduce."""
    tag = LABELS[label]
    out = [
        f"{tag(r, 'stdout')}2026-12-08 00:10:29,9{r}3 INFO process group ready world_size={world}" for r in range(world)
    ]
    for step in range(3):
        for r in range(world):
            out.append(f"{tag(r, 'stdout')}2026-12-08 00:10:3{step},9{r}3 INFO step={step} loss={1 / (step + 1):.4f}")

    def traceback(r: int, frames: tuple[str, ...], error: str) -> None:
        pre = f"[rank{r}]: " if torch_prefix else ""
        for t in ("Traceback (most recent call last):", *frames, error):
            out.append(f"{tag(r, 'stderr')}{pre}{t}")

    traceback(bad, ('  File "/srv/job/train.py", line 14, in <module>',), "ValueError: bad sample shape (3, 224)")
    for r in range(world):
        if r != bad:
            traceback(r, FRAMES, GLOO_CLOSED.format(peer=bad, port=29400 + r))
    return out


MATRIX = list(
    itertools.product(
        (3, 4),  # world size
        ("first", "last"),  # which rank raised
        tuple(LABELS),  # the launcher's label
        (True, False),  # torch 2.4+ prefixes tracebacks with [rankN]:, older ones do not
        (False, True),  # gzip
    )
)


@pytest.mark.parametrize(("world", "which", "label", "torch_prefix", "gz"), MATRIX)
def test_a_task_label_names_the_rank_of_each_line(
    world: int, which: str, label: str, torch_prefix: bool, gz: bool, tmp_path: Path
) -> None:
    bad = 0 if which == "first" else world - 1
    logs = write(tmp_path, {"job.out": _combined(world, bad, label, torch_prefix)}, compress=gz)
    d = diagnose(str(logs), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [bad]), d.verdict.explanation
    states = {s.state: s.ranks for s in d.rank_states}
    others = sorted(set(range(world)) - {bad})
    assert states == {"crashed": str(bad), "torn_down": _ranges(others)}, d.rank_states
    assert d.verification.accepted, d.verification.summary
    # the last progress of every rank is known (each progress line carries only the label)
    assert {e.ranks for e in d.timeline if e.event.startswith("last progress line")} <= {str(r) for r in range(world)}


def _ranges(ranks: list[int]) -> str:
    from debug_training_logs.ranges import format_ranges

    return format_ranges(ranks)


@pytest.mark.parametrize(
    ("line", "rank", "source"),
    [
        ("[1,3]<stdout>:step=2", 3, "mpi_tag"),
        ("[12,7]<stderr>:Traceback (most recent call last):", 7, "mpi_tag"),
        ("[1,5]<stddiag>: warning", 5, "mpi_tag"),
        ("[1,3]<stderr>:[rank9]: RuntimeError: x", 9, "rank_prefix"),  # torch's own prefix names the global rank
        ("[1,3]<stdin>:x", None, "none"),
        ("[1]<stdout>:x", None, "none"),
        ("x [1,3]<stdout>:y", None, "none"),  # a label opens the line
        ("  4: step 2", 4, "srun_label"),
    ],
)
def test_the_label_forms(line: str, rank: int | None, source: str) -> None:
    got = line_rank(line)
    assert (got.rank, got.source) == (rank, source)


def test_labels_that_are_not_the_ranks_name_no_file_rank(tmp_path: Path) -> None:
    """One ``mpirun`` task per node running torchrun: the labels are node ids, the ``[rankN]:`` prefixes say otherwise,
    and the file's ranks are the prefixes'."""
    lines = [f"[1,{n}]<stderr>:[rank{2 * n + k}]: step=1" for n in range(2) for k in range(2)] * 3
    logs = write(tmp_path, {"job.out": lines})
    from debug_training_logs.analysis.evidence import gather_evidence

    inv = gather_evidence(find_sources(logs)).worker.job.inventory
    assert [sorted(f.ranks) for f in inv.files] == [[0, 1, 2, 3]]
    assert "launcher task labels" not in (inv.files[0].rank_source or "")


# ---------------------------------------------------------------------------------------------------------------------
# torchrun under a launcher that labels its tasks (one task per node): the label is the node, --tee the local rank

GLOO_RECV_TIMEOUT = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms "
    "for recv operation to complete"
)


def _nodes_under_labels(nodes: int, nproc: int, stalled: int, label: str) -> list[str]:
    """``srun -l torchrun --tee 3`` (or ``mpirun --tag-output`` with one torchrun per node) into one file: each line
    is '<node label>[default<local>]:...'; ``stalled`` stops after step 2 and prints nothing more, the others time
    out in the all-reduce (their tracebacks carry torch's ``[rankN]:``)."""
    tag = LABELS[label]
    world = nodes * nproc
    out = []

    def line(g: int, text: str) -> None:
        out.append(f"{tag(g // nproc, 'stdout')}[default{g % nproc}]:{text}")

    for g in range(world):
        line(g, f"2026-12-08 01:00:00,1{g:02d} INFO process group ready world_size={world}")
    for step in range(4):
        for g in range(world):
            if g != stalled or step < 3:
                line(g, f"2026-12-08 01:00:0{step + 1},2{g:02d} INFO step={step} loss={1 / (step + 1):.4f}")
    for g in range(world):
        if g != stalled:
            for t in ("Traceback (most recent call last):", *FRAMES, GLOO_RECV_TIMEOUT):
                line(g, f"[rank{g}]: {t}")
    return out


NODE_MATRIX = list(itertools.product((2, 3), (2, 4), ("first", "last"), ("srun", "mpi"), (False, True)))


@pytest.mark.parametrize(("nodes", "nproc", "which", "label", "gz"), NODE_MATRIX)
def test_a_label_before_a_tee_prefix_is_the_node_and_the_prefix_its_local_rank(
    nodes: int, nproc: int, which: str, label: str, gz: bool, tmp_path: Path
) -> None:
    stalled = 0 if which == "first" else nodes * nproc - 1
    logs = write(tmp_path, {"slurm-4242.out": _nodes_under_labels(nodes, nproc, stalled, label)}, compress=gz)
    d = diagnose(str(logs), history=False)
    assert d.verdict.culprit_ranks == [stalled], d.verdict.explanation
    assert d.verdict.missing_ranks == []  # the stalled rank's lines are its own, under its node's label
    assert d.verification.accepted, d.verification.summary


@pytest.mark.parametrize(
    ("mapped", "world", "filled"),
    [
        ({0: 0, 2: 2}, None, {0: 0, 1: 1, 2: 2}),  # one node: the local rank between follows the offset
        ({1: 9}, None, {1: 9}),  # one mapping without a label: nothing to fill
        ({0: 0, 1: 5}, None, {0: 0, 1: 5}),  # no one offset
        (
            {(1 << 20) + 0: 0, (1 << 20) + 1: 1, (2 << 20) + 0: 2},
            None,
            {(1 << 20) + 0: 0, (1 << 20) + 1: 1, (2 << 20) + 0: 2, (2 << 20) + 1: 3},
        ),
        (
            {(1 << 20) + 0: 0, (1 << 20) + 1: 1, (2 << 20) + 0: 2},
            3,
            {(1 << 20) + 0: 0, (1 << 20) + 1: 1, (2 << 20) + 0: 2},
        ),
    ],
)
def test_a_nodes_local_ranks_are_filled_in_only_where_the_map_says_so(
    mapped: dict[int, int], world: int | None, filled: dict[int, int]
) -> None:
    from debug_training_logs.analysis.inventory_build import consecutive_locals

    assert consecutive_locals(mapped, world) == filled
