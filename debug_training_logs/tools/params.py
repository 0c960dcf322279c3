"""Request parameters several tools take, described once (the same words in every tool's schema)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

WorldSize = Annotated[
    int | None,
    Field(
        ge=1,
        le=1 << 20,
        description="The job's world size when the logs do not state it (from the launch command: nodes x GPUs). "
        "Without it and without a line stating it, nothing is concluded from absence.",
    ),
]
"""A caller-given world size (``nccl_state_table``, ``diagnose``)."""

HangDir = Annotated[
    str | None,
    Field(
        description="Directory of what was collected during a live hang, when it is not in or next to logs_dir: "
        "py-spy dumps of the ranks (one file per rank or concatenated; --native, --locals, --json), NCCL RAS client "
        "output, nvidia-smi (-q) and dmesg/journal captures of the nodes. Files are recognised by their content."
    ),
]
"""Where the hang artifacts are (``diagnose``, ``job_overview``)."""
