"""What the NCCL library itself writes (``NCCL_DEBUG=WARN/INFO``): a transport's failure on a link.

Pure functions over one line of text. NCCL prefixes its lines with ``host:pid:tid [cuda device]``; the lines that
say a link failed, as opposed to a peer process that went away in an orderly way, are the InfiniBand/RoCE work
completions with an error status (``NET/IB : Got completion from peer 10.0.0.7<51133> with error 12, ...``, newer
NCCL: ``with status=12``) and a failed verbs call (``Call to ibv_modify_qp failed``). A peer that died can leave
the same completion errors on the nodes that talked to it: the caller decides from the ranks' own fates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

HOST: Final = r"[A-Za-z0-9][\w.\-]*"
"""A host name as NCCL's line prefix writes it (pattern text)."""
PROCESS: Final = r":\d+:\d+ \[\d+\]"
"""What follows the host in NCCL's line prefix, ``:pid:tid [cuda device]`` (pattern text, no groups): the patterns of
other modules that go on after the prefix are ``HOST + PROCESS + ...``."""
PROCESS_PID: Final = r":(?P<pid>\d{1,9}):\d+ \[\d+\]"
""":data:`PROCESS` with the process id as the group ``pid``."""
PREFIX: Final = re.compile(r"(?:^|[\s:>\]])(?P<host>" + HOST + r"):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\]")
_COMPLETION: Final = re.compile(
    r"NET/IB\w* ?: ?Got completion from peer (?P<peer>[^\s<]+)<\d+> with (?:error |status=)(?P<status>\d+)"
)
_VERBS: Final = re.compile(r"\bCall to (?P<call>ibv_\w+) failed|\b(?P<call2>ibv_\w+) failed")


@dataclass(frozen=True, repr=False)
class LinkError:
    """A transport failure NCCL logged: the host (when the line's prefix says), the peer address (completion
    errors), the verbs status or the failed call."""

    host: str | None
    peer: str | None
    what: str


def process_of(line: str) -> tuple[str, int, int] | None:
    """(host, pid, CUDA device) of an NCCL line's ``host:pid:tid [dev]`` prefix, else None."""
    m = PREFIX.search(line)
    return (m.group("host"), int(m.group("pid")), int(m.group("dev"))) if m else None


def link_error(line: str) -> LinkError | None:
    """The link failure ``line`` reports, else None."""
    if "NET/IB" in line and (m := _COMPLETION.search(line)):
        host = PREFIX.search(line[: m.start()])
        status = m.group("status")
        return LinkError(host.group("host") if host else None, m.group("peer"), f"IB completion error {status}")
    if "ibv_" in line and (v := _VERBS.search(line)):
        host = PREFIX.search(line[: v.start()])
        return LinkError(host.group("host") if host else None, None, f"{v.group('call') or v.group('call2')} failed")
    return None
