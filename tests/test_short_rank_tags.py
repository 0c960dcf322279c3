"""A trainer's short rank tag, ``[r3]``, ``[r3/8]`` or ``[r3/8 l1]`` (rank 3 of 8, local rank 1), names the line's
rank in the inventory (the ranks a file holds, the world ``/8`` states) and in each line's attribution alike.

An error line followed in its file by steps the file had reported already is no error the training went on after:
the nodes' logs concatenated into one file (``cat node-*.log``) repeat the steps after a node's last line.

Held out: three nodes' files of a job whose trainer tagged every line ``[r3/5 l1]``; rank 3's shard was shorter, it
finished its loop and left while the others waited in the next collective. The report named no rank ("ranks seen:
0-2,4", the world unknown): rank 3's lines were nobody's.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import GLOO_CLOSED, write

TIMEOUT = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms "
    "for recv operation to complete"
)


def _tag(form: str, rank: int, world: int, per_node: int) -> str:
    return {"r": f"[r{rank}]", "rw": f"[r{rank}/{world}]", "rwl": f"[r{rank}/{world} l{rank % per_node}]"}[form]


def _node_lines(form: str, node: int, per_node: int, world: int, early: int, cause: str) -> list[str]:
    out: list[str] = []
    ranks = range(node * per_node, min(world, (node + 1) * per_node))
    t = 1796688651.0
    for g in ranks:
        out.append(f"{t:.3f} {_tag(form, g, world, per_node)} init done, world_size={world}")
    for step in range(0, 25, 5):
        t += 2.0
        for g in ranks:
            if g == early and step > 15:
                continue
            out.append(f"{t:.3f} {_tag(form, g, world, per_node)} step {step} loss 0.{40 + step}")
    t += 1.0
    for g in sorted(ranks, key=lambda g: g != early):  # the rank that left or failed writes its last line first
        tag = _tag(form, g, world, per_node)
        if g == early:
            if cause == "exit":
                out.append(f"{t:.3f} {tag} epoch 0 finished after 17 iters, saving and exiting")
            else:
                out.append(f"{t:.3f} {tag} ValueError: shard 17 holds a record of 0 tokens")
        elif cause == "exit":  # (the others wait in the collective until it times out)
            out.append(f"{t + 31:.3f} {tag} {TIMEOUT}")
        else:  # a crashed process closes its connections: the others' collective fails at once
            out.append(f"{t + 0.2:.3f} {tag} {GLOO_CLOSED.format(peer=early, port=29500)}")
    return out


MATRIX = list(
    itertools.product(("r", "rw", "rwl"), ("per_node", "one", "cat"), (1, 4), ("exit", "error"), (False, True))
)


@pytest.mark.parametrize(("form", "files", "early", "cause", "gz"), MATRIX)
def test_a_short_rank_tag_names_the_lines_rank(
    form: str, files: str, early: int, cause: str, gz: bool, tmp_path: Path
) -> None:
    world, per_node = 6, 2
    nodes = [_node_lines(form, n, per_node, world, early, cause) for n in range(world // per_node)]
    if files == "one":
        merged = sorted((ln for lines in nodes for ln in lines), key=lambda ln: float(ln.split()[0]))  # by time
        logs = write(tmp_path, {"job.log": merged}, compress=gz)
    elif files == "cat":  # the nodes' logs concatenated: the first node's last lines before the next node's steps
        logs = write(tmp_path, {"job.log": [ln for lines in nodes for ln in lines]}, compress=gz)
    else:
        logs = write(tmp_path, {f"node-{n}.log": lines for n, lines in enumerate(nodes)}, compress=gz)
    d = diagnose(str(logs), history=False)
    assert d.verdict.culprit_ranks == [early], d.verdict.explanation
    assert d.coverage.missing_ranks == "", d.coverage


@pytest.mark.parametrize("text", ["[resnet50] loaded", "[r2d2] beep", "[rx] x", "see [r] here", "[r12345678901] x"])
def test_brackets_that_are_no_rank_tag(text: str) -> None:
    assert line_rank(text).rank is None
