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
