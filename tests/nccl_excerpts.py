"""Excerpts shaped like the watchdog output users paste into public bug reports (torch 1.x to 2.14): the layouts,
prefixes, wraps and wordings are the facts those reports show; every value (ranks, SeqNums, times, hosts) is ours.

Each excerpt is a directory of files as a user would hand them over, and what a correct reading must say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Excerpt:
    name: str
    story: str
    files: dict[str, list[str]]
    min_rows: int = 0
    """Rows the excerpt must yield (its ranks are named by the lines or the file)."""
    unattributed_timeouts: int = 0
    """(SeqNum, OpType) groups of timeouts whose global rank no line names."""
    expect: dict[str, object] = field(default_factory=dict)

    def write(self, root: Path) -> Path:
        d = root / self.name
        d.mkdir(parents=True, exist_ok=True)
        for name, lines in self.files.items():
            (d / name).write_text("\n".join(lines) + "\n")
        return d


def _t21(r: int, seq: int, ran: int) -> str:
    return (f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
            f"{seq}, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for {ran} milliseconds before timing out.")  # fmt: skip


EXCERPTS = [
    Excerpt(
        "torch1x_one_node_combined",
        "8 workers of one node, torch <= 2.1, all in one file: no [rankN]:, only the PG-local [Rank N]",
        {
            "train.log": ["WARNING:torch.distributed.run:", "*****************************************"]
            + [_t21(r, 391207, 1803310 + r) for r in (1, 3, 2, 6, 7, 5, 0, 4)]
        },
        unattributed_timeouts=1,
    ),
    Excerpt(
        "torch20_communicator_aborted",
        "torch <= 2.0 main thread: RuntimeError repeating the watchdog timeout, then torchrun's SIGABRT",
        {
            "rank-2.log": [
                '  File "/opt/conda/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 1536, in all_reduce',
                "    work = group.allreduce([tensor], opts)",
                "RuntimeError: NCCL communicator was aborted on rank 2.  Original reason for failure was: [Rank 2] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=20411, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
                "1800529 milliseconds before timing out.",
                "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 71345 closing signal SIGTERM",
            ]
        },
        min_rows=1,
    ),
    Excerpt(
        "torch22_what_only",
        "torch 2.2: only the C++ terminate block survived (stderr of one rank)",
        {
            "worker-rank5.err": [
                "frame #6: clone + 0x43 (0x7f1a2b3c4d5e in /lib/x86_64-linux-gnu/libc.so.6)",
                "",
                "terminate called after throwing an instance of 'c10::DistBackendError'",
                "  what():  [Rank 5] NCCL watchdog thread terminated with exception: [Rank 5] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=6620, OpType=BROADCAST, NumelIn=65536, NumelOut=65536, Timeout(ms)="
                "1800000) ran for 1800611 milliseconds before timing out.",
                "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:525 (most recent "
                "call first):",
            ]
        },
        min_rows=1,
    ),
    Excerpt(
        "torch23_pasted_wrapped_indented",
        "torch 2.3 test output pasted into an issue: wrapped at spaces, continuations indented",
        {
            "paste.txt": [
                "[rank0]:[E612 09:14:51.204518833 ProcessGroupNCCL.cpp:565] [Rank 0]",
                "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3,",
                "OpType=ALLREDUCE, NumelIn=24, NumelOut=24, Timeout(ms)=2000) ran for",
                "2107 milliseconds before timing out.",
                "[rank0]:[E612 09:14:51.206610342 ProcessGroupNCCL.cpp:1582] [PG 0 Rank",
                "0] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed",
                "   NCCL work: 2.",
                "   [rank0]:[E612 09:14:51.301151871 ProcessGroupNCCL.cpp:1346] [PG 0",
                "   Rank 0] Received a timeout signal from this local rank and will start",
                "   to dump the debug info. Last enqueued NCCL work: 3, last completed",
                "   NCCL work: 2.",
            ]
        },
        min_rows=1,
        expect={"last_enqueued": 3, "last_completed": 2, "seq": 3},
    ),
    Excerpt(
        "torch24_milabench_wrapped",
        "torch 2.4 through milabench: 'host [stderr] ' prefix, lines hard-wrapped after a word",
        {
            "bench.log": [
                "vit-g-nodes.cn-k012 [stderr] [rank9]:[E918 14:02:33.771204512 ProcessGroupNCCL.cpp:607] [Rank 9] Watchdog "
                "caught collective operation timeout: ",
                "WorkNCCL(SeqNum=5112, OpType=REDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600071 milliseconds "
                "before timing out.",
                "vit-g-nodes.cn-k012 [stderr] [rank9]:[E918 14:02:33.772300114 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) "
                "Rank 9] Exception (either an error or timeout) detected",
                "by watchdog at work: 5112, last enqueued NCCL work: 5112, last completed NCCL work: 5111.",
                "vit-g-nodes.cn-k012 [stderr] [rank10]:[E918 14:02:33.772804419 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg)"
                " Rank 10] Timeout at NCCL work: 5112, last enqueued ",
                "NCCL work: 5119, last completed NCCL work: 5111.",
            ]
        },
        min_rows=2,
    ),
    Excerpt(
        "torch24_viewer_prefix_sub_pg",
        "torch 2.4 in a log viewer ('[line] ' prefix): 3 of 8 ranks in a data-parallel PG, one of them ahead",
        {
            "job.txt": [
                f"[{40211 + i}] [rank{r}]:[E1019 03:11:42.{400000000 + i:09d} ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] "
                f"Exception (either an error or timeout) detected by watchdog at work: 2209, last enqueued NCCL work: {e}, "
                "last completed NCCL work: 2208."
                for i, (r, e) in enumerate([(0, 2211), (3, 2211), (2, 2214)])
            ]
        },
        min_rows=3,
    ),
    Excerpt(
        "torch25_fragment_one_status_missing",
        "torch 2.5 fragment: two ranks' timeouts, only one rank's status line pasted, plus a 2-rank sub-communicator",
        {
            "paste.txt": [
                "gpu-q07:40112:40301 [1] NCCL INFO comm 0x9c1e20 rank 1 nranks 2 cudaDev 1 busId 2a000 - Init COMPLETE",
                "[rank13]:[E304 22:17:09.118203311 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=402, OpType=ALLGATHER, NumelIn=4096, NumelOut=32768, Timeout(ms)=600000) ran for "
                "600077 milliseconds before timing out.",
                "[rank15]:[E304 22:17:09.118310004 ProcessGroupNCCL.cpp:616] [Rank 7] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=402, OpType=ALLGATHER, NumelIn=4096, NumelOut=32768, Timeout(ms)=600000) ran for "
                "600079 milliseconds before timing out.",
                "[rank15]:[E304 22:17:09.118502177 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 15] "
                "Exception (either an error or timeout) detected by watchdog at work: 402, last enqueued NCCL work: 402, "
                "last completed NCCL work: 401.",
            ]
        },
        min_rows=2,
    ),
    Excerpt(
        "torch23_ray_ansi",
        "torch 2.3 under Ray (vLLM style): ANSI colour, actor prefix without a rank, [rankN]: from the header",
        {
            "ray-driver.log": [
                "\x1b[36m(RayWorkerWrapper pid=51120)\x1b[0m [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=88120, OpType=GATHER, NumelIn=2867200, NumelOut=0, "
                "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",
                "\x1b[36m(RayWorkerWrapper pid=51120)\x1b[0m [rank1]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 1] Timeout at "
                "NCCL work: 88120, last enqueued NCCL work: 88120, last completed NCCL work: 88119.",
                "\x1b[36m(RayWorkerWrapper pid=51120)\x1b[0m [rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 1 Rank 1] Process group "
                "watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=88120, OpType=GATHER, NumelIn=2867200, NumelOut=0, Timeout(ms)=600000) ran for 600031 "
                "milliseconds before timing out.",
            ]
        },
        min_rows=1,
    ),
    Excerpt(
        "torch27_year_less_two_ranks",
        "torch 2.7 from a 2-rank job: times without a year, both ranks in the same collective",
        {
            "out.log": [
                "[rank0]:[E626 16:48:25.440100100 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=120049, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                "600041 milliseconds before timing out.",
                "[rank0]:[E626 16:48:25.440238649 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure "
                "detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120051, last completed "
                "work: 120048",
                "[rank1]:[E626 16:48:25.440300100 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=120049, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                "600043 milliseconds before timing out.",
            ]
        },
        min_rows=2,
        expect={"timeout_time": "06-26 16:48:25"},
    ),
    Excerpt(
        "torch210_what_in_node_file",
        "torch 2.10, one node's combined file: the only timeout record of rank 3 is its what(): copy",
        {
            "node0.out": [
                "[rank2]:[E1103 01:59:40.100200300 ProcessGroupNCCL.cpp:689] [Rank 2] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=77, OpType=_ALLGATHER_BASE, NumelIn=1024, NumelOut=8192, Timeout(ms)=600000) ran "
                "for 600012 milliseconds before timing out.",
                "terminate called after throwing an instance of 'c10::DistBackendError'",
                "[rank3]:  what():  [PG ID 2 PG GUID 5(DATA_PARALLEL_GROUP) Rank 1] Process group watchdog thread terminated "
                "with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, OpType="
                "_ALLGATHER_BASE, NumelIn=1024, NumelOut=8192, Timeout(ms)=600000) ran for 600019 milliseconds before timing "
                "out.",
            ]
        },
        min_rows=2,
    ),
]
