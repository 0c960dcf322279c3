"""Which global rank wrote a line, and which node a file belongs to.

Sources, most trusted first:

1. ``[rankN]:`` anywhere in the line (PyTorch 2.2+ c10 prefix and the 2.4+ traceback excepthook): the GLOBAL rank;
   else ``[rankN] `` (a user logging format that puts it after the time).
2. Ray actor prefixes ``(MegatronPolicyWorker[rank=12] pid=481552, ip=10.20.3.17)``.
3. ``srun --label`` prefixes ``" 3: "`` and ``mpirun --tag-output``'s ``[1,3]<stdout>:``: the launcher's task id,
   equal to the global rank only with one task per GPU.
4. The file name: ``rank-R.log``, ``rank_R``, ``slurm-%j_%t.out``-style task ids.
5. NCCL init lines ``... NCCL INFO ... rank R nranks N ...`` (the communicator rank; equals the global rank only for
   the world communicator, i.e. when ``N`` is the world size).

Never trusted: ``[Rank N]`` inside ProcessGroupNCCL/WorkNCCL messages. It is PG-local and, in torch 2.4-2.13, a cached
static that can belong to another process group. A torchrun ``[host:localrank]:`` prefix gives the node and local
rank, not the global rank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from debug_training_logs.formats.prefixes import (
    GLOBAL_RANK,
    INLINE_RANK,
    LEAD_PREFIXES,
    LOCAL_RANK,
    SHORT_RANK_TAG,
    TASK_LABEL,
    strip_ansi,
)

RAY_PREFIX = re.compile(
    r"\((?P<actor>[A-Za-z_][\w.]*)?(?:\[rank=(?P<rank>\d{1,9})\])? ?pid=(?P<pid>\d{1,9})(?:, ip=(?P<ip>[\w.:\-]+))?\)"
)
# A trainer's own formats that state the writer's rank: a JSON log record's ``"rank": N``, ``[rank N/M]``, Lightning's
# ``[rank: N]`` prefix.
STATED_RANK = re.compile(
    r"\"rank\": ?(\d{1,9})\b|\[rank(?: |: ?)(\d{1,9})(?:/\d+)?\]|\[RANK (\d{1,9})\]|(?:^|[\s|\]])rank=(\d{1,9}) \|"
    r"|^\s*rank ?(\d{1,9}) ?[|:] |" + SHORT_RANK_TAG  # (its world's group comes after its rank's)
)
"""A trainer's own statement of its rank: JSON ``"rank": N``, ``[rank N/M]``, ``[rank: N]``, ``[RANK N]``, a
``rank=N |`` label field, a ``rankN| ``/``rank N: `` label opening the line, and the short tags ``[rN]`` and
``[rN/M ...]`` (``[r3/8 l1]``: rank 3 of 8, local rank 1)."""
TORCHRUN_PREFIX = re.compile(r"^\[(?P<host>[A-Za-z0-9][\w.\-]*):(?P<local>\d+)\]:")
TASK_LABEL_AT_START = re.compile("^" + TASK_LABEL)
"""A launcher's task label opening a line (:func:`task_of_label`)."""
NCCL_INIT_RANK = re.compile(r"NCCL INFO .*?\brank (?P<rank>\d+) nranks (?P<nranks>\d+)\b")

FILE_RANK_PATTERNS = (
    re.compile(r"(?:^|[^a-z])rank[-_.]?(?P<rank>\d+)(?:[^0-9]|$)", re.IGNORECASE),
    re.compile(r"(?:^|/)slurm-\d+_(?P<rank>\d+)\.(?:out|err|log)$"),
)
TORCHRUN_LOG_DIR = re.compile(r"(?:^|/)attempt_(?P<attempt>\d+)/(?P<local>\d+)/(?:stdout|stderr|error)\.(?:log|json)$")
"""torchrun's ``--log-dir`` tree (``<run_id>/attempt_<n>/<local rank>/stdout.log``): the directory is the local rank."""
FILE_NODE_PATTERNS = (
    # error-<JOBID>-<N>.out / output-%j-%n.out: per-node (or per-task) files; N is taken as the node index.
    re.compile(r"(?:^|/)(?:error|output|out|err|log|slurm)[-_]\d+[-_](?P<node>\d+)\.(?:out|err|log|txt)$"),
    re.compile(r"(?:^|/)node[-_]?(?P<node>\d+)", re.IGNORECASE),
)


@dataclass(frozen=True, repr=False, eq=False)
class LineRank:
    """The rank a line was attributed to and how."""

    rank: int | None
    source: str
    """``rank_prefix``, ``inline_rank``, ``ray``, ``stated_rank``, ``srun_label``, ``mpi_tag``, or ``none``."""


def line_rank(text: str) -> LineRank:
    """The global rank that wrote ``text``, from the line alone (no file context)."""
    rank, source = _rank_and_source(text)
    return LineRank(rank, source)


def rank_of_line(text: str) -> int | None:
    """``line_rank(text).rank`` without building the :class:`LineRank` (called once per hit line in the scan)."""
    return rank_and_source_plain(strip_ansi(text))[0]


def _rank_and_source(text: str) -> tuple[int | None, str]:
    return rank_and_source_plain(strip_ansi(text))


def rank_and_source_plain(text: str) -> tuple[int | None, str]:
    """(rank, source) as :func:`line_rank` gives them, for a line whose ANSI codes are already stripped.

    Both rank patterns hold the literal ``[rank``: a line without it (the common case for unprefixed output) skips
    their searches."""
    if "[rank" in text:
        m = GLOBAL_RANK.search(text)
        if m:
            return int(m.group(1)), "rank_prefix"
        i = INLINE_RANK.search(text)
        if i:
            return int(i.group(1)), "inline_rank"
    if "pid=" in text:
        r = RAY_PREFIX.search(text)
        if r and r.group("rank") is not None:
            return int(r.group("rank")), "ray"
    if (
        '"rank"' in text
        or "[rank " in text
        or "[rank:" in text
        or "[RANK " in text
        or "[r" in text
        or "rank=" in text
        or text.lstrip().startswith("rank")
    ):
        st = STATED_RANK.search(text)
        if st:
            return int(next(g for g in st.groups() if g is not None)), "stated_rank"
    s = TASK_LABEL_AT_START.match(text)
    if s:
        return task_of_label(s)
    return None, "none"


def task_of_label(m: re.Match[str]) -> tuple[int, str]:
    """(task id, ``srun_label`` or ``mpi_tag``) of a :data:`TASK_LABEL_AT_START` match."""
    srun, mpi = m.group(1), m.group(2)
    return (int(srun), "srun_label") if srun is not None else (int(mpi), "mpi_tag")


TASK_STRIDE = 1 << 20
"""The slots of one launcher task's local ranks in a file's local map (:func:`local_slot`)."""


def local_slot(local: int, task: int | None = None) -> int:
    """Where a file's map of torchrun ``--tee`` local ranks to global ones keeps local rank ``local``: the local rank
    itself, or, behind a launcher's task label (``srun -l torchrun``: one task per node, the label its index), the
    slot of that task's own local rank (the nodes' local ranks repeat)."""
    return local if task is None else local + (task + 1) * TASK_STRIDE


def tee_slot(text: str) -> int | None:
    """The local-map slot of the line's ``--tee`` prefix (:func:`local_slot`), after a task label when there is one;
    None without the prefix; ANSI codes already stripped."""
    m = tee_prefix(text)
    if m is not None:
        return int(m.group(1))
    t = TASK_LABEL_AT_START.match(text)
    if t is None or (m := tee_prefix(text[t.end() :])) is None:
        return None
    return local_slot(int(m.group(1)), task_of_label(t)[0])


def tee_prefix(text: str) -> re.Match[str] | None:
    """The ``--tee`` prefix opening ``text`` (its group: the local rank); torch's own ``[rankN]:`` (a global rank)
    is none."""
    m = LOCAL_RANK.match(text)
    return None if m is None or GLOBAL_RANK.match(text) is not None else m


def rank_of_key(key: int | None, single: int | None, local: Mapping[int, int]) -> int | None:
    """A line's rank as the job sees it, from its :func:`rank_or_local` key: a global rank as is; a ``--tee`` slot
    (encoded ``-(S + 1)``) through the file's ``local`` map; else (or unmapped) the file's ``single`` rank."""
    if key is None:
        return single
    return local.get(-key - 1, single) if key < 0 else key


def agreed_offset(local_to_global: Mapping[int, int], least: int = 2) -> int | None:
    """The global rank of local rank 0 when every local rank the map holds (``least`` at least) agrees on it:
    torchrun numbers a node's workers consecutively."""
    offsets = {g - k for k, g in local_to_global.items()}
    return offsets.pop() if len(offsets) == 1 and len(local_to_global) >= least else None


def rank_or_local(text: str) -> int | None:
    """The line's global rank (:func:`rank_and_source_plain`), else its torchrun ``--tee`` local slot ``S``
    (:func:`tee_slot`) encoded as ``-(S + 1)`` (the file's local-to-global map resolves it), else None; ANSI codes
    already stripped. A task label followed by a ``--tee`` prefix is a node's (torchrun under ``srun -l``), not a
    rank."""
    r, source = rank_and_source_plain(text)
    if (r is not None and source not in ("srun_label", "mpi_tag")) or (r is None and text[:1] != "["):
        return r
    slot = tee_slot(text)
    return -(slot + 1) if slot is not None else r


def file_name_rank(rel: str) -> int | None:
    """A rank the file name states (``rank-7.log``, ``slurm-123_7.out``), else None."""
    for pat in FILE_RANK_PATTERNS:
        m = pat.search(rel)
        if m:
            return int(m.group("rank"))
    return None


def file_name_node(rel: str) -> str | None:
    """A node index or name the file name states (``error-48213-3.out`` -> ``"3"``), else None."""
    for pat in FILE_NODE_PATTERNS:
        m = pat.search(rel)
        if m:
            return m.group("node")
    return None


def strip_rank_prefix(text: str) -> str:
    """``text`` without its leading launcher task label (srun's ``N:``, mpirun's ``[1,N]<stdout>:``), Ray actor prefix
    and ``[rankN]:`` (what the process wrote)."""
    return LEAD_PREFIXES.sub("", text, count=1)


def log_dir_local_rank(rel: str) -> tuple[str, int] | None:
    """(the attempt's directory, the local rank) of a file in torchrun's ``--log-dir`` tree, else None."""
    m = TORCHRUN_LOG_DIR.search(rel)
    if m is None:
        return None
    return rel[: m.start("local")].rstrip("/"), int(m.group("local"))
