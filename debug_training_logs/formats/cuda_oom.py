"""PyTorch's CUDA caching allocator's out-of-memory message: the device it names.

Pure functions over one line of text. The message names the GPU of the process that ran out (torch >= 2.1: ``CUDA
out of memory. Tried to allocate 564.00 MiB. GPU 1 has a total capacity of 22.20 GiB ...``; earlier: ``... (GPU 1;
22.20 GiB total capacity; ...``): on a job of one process per GPU, the process on that device, whichever rank it is.
"""

from __future__ import annotations

import re
from typing import Final

_DEVICE: Final = re.compile(r"\bGPU (\d{1,4})(?: has a total capac| ?; [\d.]+ [KMGT]iB total capacity)")


def oom_device(line: str) -> int | None:
    """The CUDA device an allocator OOM message names, else None."""
    if "out of memory" not in line:
        return None
    m = _DEVICE.search(line)
    return int(m.group(1)) if m else None
