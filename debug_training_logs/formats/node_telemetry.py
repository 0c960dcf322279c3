"""What a node says about its GPUs during a hang: the kernel log (NVRM Xid lines, fallen off the bus, PCIe AER) and
``nvidia-smi`` (``-q`` and the table).

Pure functions over text the caller read; nothing here opens a file or knows who asks. Kernel lines come as
``dmesg`` (``[ 1234.567890] NVRM: ...``), ``dmesg -T``, ``--time-format iso``, ``journalctl -k`` or syslog; Xid
lines as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`` with the variants of
older drivers (no ``name=``, no ``pid=``, no ``PCI:``) and MIG (``GPU-I:02`` in the parenthesis); ``nvidia-smi -q``
section names changed across drivers (``Clocks Throttle Reasons`` -> ``Clocks Event Reasons``, ECC ``Double Bit >
Total`` -> ``SRAM/DRAM Uncorrectable``). docs/hang_artifacts.md lists the formats and where they come from.

Bounded: lines are cut at :data:`MAX_LINE` before any regex sees them, regexes are anchored or start with a literal
and have no nested quantifiers, and the records kept are capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, cast

MAX_LINE: Final = 4096
"""Longer lines are cut before matching."""
MAX_TEXT: Final = 400
"""A record quotes at most this much of its line."""
MAX_RECORDS: Final = 20_000
"""Events / GPU statuses kept per call."""

Severity = Literal["fatal", "application", "consequence", "informational", "unknown"]
"""fatal: the GPU or node needs attention (reset, drain, RMA); application: the application's own fault surfaced by
the driver; consequence: cleanup after another error; informational: nothing to act on by itself; unknown: an Xid
not in :data:`XID`."""
TelemetryKind = Literal["nvidia_smi_q", "nvidia_smi_table", "dmesg"]


@dataclass(frozen=True, repr=False)
class XidInfo:
    """One Xid of NVIDIA's catalog: its mnemonic, meaning, our severity, and NVIDIA's immediate action bucket."""

    mnemonic: str
    meaning: str
    severity: Severity
    action: str


_CATALOG: Final = """
8|ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT|GPU stopped processing|application|RESTART_APP
13|ROBUST_CHANNEL_GR_EXCEPTION|Graphics Engine Exception|application|RESTART_APP
31|ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT|GPU memory page fault|application|RESTART_APP
32|ROBUST_CHANNEL_PBDMA_ERROR|Invalid or corrupted push buffer stream|fatal|RESTART_APP
38|ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT|Driver firmware error|informational|IGNORE
43|ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR|GPU stopped processing|application|IGNORE
44|ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW|Graphics Engine fault during context switch|informational|IGNORE
45|ROBUST_CHANNEL_PREEMPTIVE_REMOVAL|Preemptive cleanup, due to previous errors|consequence|WORKFLOW_XID_45
46|ROBUST_CHANNEL_GPU_TIMEOUT_ERROR|GPU stopped processing|fatal|RESET_GPU
48|ROBUST_CHANNEL_GPU_ECC_DBE|Double Bit ECC Error|fatal|WORKFLOW_XID_48
61|PMU_BREAKPOINT|Internal micro-controller breakpoint/warning|informational|CONTACT_SUPPORT
62|PMU_HALT_ERROR|Internal micro-controller halt|fatal|RESET_GPU
63|INFOROM_DRAM_RETIREMENT_EVENT|ECC page retirement or row remapping recording event|informational|IGNORE
64|INFOROM_DRAM_RETIREMENT_FAILURE|ECC page retirement or row remapper recording failure|fatal|RESET_GPU
68|ROBUST_CHANNEL_NVDEC0_ERROR|NVDEC0 Exception|application|RESTART_APP
69|ROBUST_CHANNEL_GR_CLASS_ERROR|Graphics Engine class error|application|RESTART_APP
74|NVLINK_ERROR|NVLink Error|fatal|WORKFLOW_NVLINK_ERR
79|ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS|GPU has fallen off the bus|fatal|RESTART_BM
92|EXCESSIVE_SBE_INTERRUPTS|High single-bit ECC error rate|informational|IGNORE
94|ROBUST_CHANNEL_CONTAINED_ERROR|Contained ECC error|fatal|RESTART_APP
95|ROBUST_CHANNEL_UNCONTAINED_ERROR|Uncontained ECC error|fatal|RESET_GPU
109|ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR|Context Switch Timeout Error|fatal|RESET_GPU
110|SEC_FAULT_ERROR|Security Fault Error|fatal|RESET_GPU
119|GSP_RPC_TIMEOUT|GSP RPC Timeout|fatal|RESET_GPU
120|GSP_ERROR|GSP Error|fatal|RESET_GPU
121|C2C_ERROR|C2C Error (corrected errors on the C2C NVLink to a Grace CPU)|informational|IGNORE
136|ALI_TRAINING_FAIL|Link Training Failed|fatal|RESET_GPU
137|NVLINK_PRIV_ERR|NVLink Privilege Error|application|IGNORE
140|UNRECOVERABLE_ECC_ERROR_ESCAPE|ECC Unrecovered Error|fatal|RESET_GPU
143|GPU_INIT_ERROR|GPU Initialization Error|fatal|RESET_GPU
144|NVLINK_SAW_ERROR|NVLink: SAW Error|fatal|WORKFLOW_NVLINK5_ERR
145|NVLINK_RLW_ERROR|NVLink: RLW Error|fatal|WORKFLOW_NVLINK5_ERR
146|NVLINK_TLW_ERROR|NVLink: TLW Error|fatal|WORKFLOW_NVLINK5_ERR
147|NVLINK_TREX_ERROR|NVLink: TREX Error|fatal|WORKFLOW_NVLINK5_ERR
148|NVLINK_NVLPW_CTRL_ERROR|NVLink: NVLPW_CTRL Error|fatal|WORKFLOW_NVLINK5_ERR
149|NVLINK_NETIR_ERROR|NVLink: NETIR Error|fatal|WORKFLOW_NVLINK5_ERR
150|NVLINK_MSE_ERROR|NVLink: MSE Error|fatal|WORKFLOW_NVLINK5_ERR
154|GPU_RECOVERY_ACTION_CHANGED|GPU Recovery Action Changed|fatal|XID_154
155|NVLINK_SW_DEFINED_ERROR|NVLink: SW Defined Error (intentional link down)|informational|RESET_GPU
156|RESOURCE_RETIREMENT_EVENT|Resource Retirement Event|informational|RESET_GPU
157|RESOURCE_RETIREMENT_FAILURE|Resource Retirement Failure|fatal|IGNORE
158|GPU_FATAL_TIMEOUT|GPU Fatal Timeout|fatal|RESET_GPU
"""
"""code|mnemonic|meaning|severity|NVIDIA's immediate action, one Xid a line (see :data:`XID`)."""


def _catalog(table: str) -> dict[int, XidInfo]:
    out: dict[int, XidInfo] = {}
    for row in table.strip().splitlines():
        code, mnemonic, meaning, severity, action = row.split("|")
        out[int(code)] = XidInfo(mnemonic, meaning, cast(Severity, severity), action)
    return out


XID: Final[dict[int, XidInfo]] = _catalog(_CATALOG)
"""The Xids that matter in training, from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, Ampere and newer;
61 and the wording of 63/64/94/95 from the catalog for older GPUs). ``action`` is the catalog's "Resolution Bucket
(Immediate Action)". Severity is ours, read from that action and the catalog's text: RESET_GPU / RESTART_BM /
the ECC and NVLink workflows are fatal (32 too: "primarily ... quality issues on PCI, not caused by user
application actions"), the user-fault Xids 13/31/43/69 are the application's, 45 is the teardown after another
error, IGNORE buckets are informational; 154 is fatal unless its new action is ``None``."""


def xid_info(code: int) -> XidInfo:
    """The catalog entry of ``code``, or an entry saying ``unknown Xid N``."""
    return XID.get(code) or XidInfo("", f"unknown Xid {code}", "unknown", "")


@dataclass(frozen=True, repr=False)
class GpuEvent:
    """One kernel log line about a GPU."""

    line_no: int
    """1-based index in the lines given."""
    text: str
    host: str | None
    """The caller's host, or the hostname a journal/syslog line carries."""
    time: datetime | None
    """Wall-clock time of ``dmesg -T`` / journal / ISO stamps (as written, without time zone); None for uptime
    stamps and for journal lines when no ``year`` was given."""
    uptime_s: float | None
    pci: str | None
    """Bus id as ``0000:3b:00.0``."""
    xid: int | None
    pid: int | None
    process: str | None
    what: str
    severity: Severity
    uuid: str | None = None
    """``GPU-...`` of a ``NVRM: GPU at PCI:...`` identity line."""


@dataclass(frozen=True, repr=False)
class GpuStatus:
    """One GPU as ``nvidia-smi`` showed it (or failed to: ``lost``)."""

    host: str | None
    pci: str | None
    index: int | None
    """The table's GPU index; in ``-q`` the ``Minor Number`` (``/dev/nvidiaN``, usually the same)."""
    uuid: str | None
    line_no: int
    lost: bool
    ecc_uncorrected: int | None = None
    """Volatile (since the driver loaded) uncorrectable ECC errors; aggregate when only that is shown."""
    remap_pending: bool | None = None
    """A row remap or page retirement waits for a GPU reset."""
    active_throttle: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    product: str | None = None
    temp_c: int | None = None
    util_pct: int | None = None


_BUS: Final = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_BUS_RE: Final = re.compile(
    r"(?P<dom>[0-9A-Fa-f]{4,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})(?:\.(?P<fn>[0-7]))?"
)


def normalize_pci(text: str) -> str | None:
    """``PCI:0000:3B:00`` / ``00000000:3B:00.0`` / ``0000:3b:00.0`` -> ``0000:3b:00.0``; None if not a bus id."""
    m = _BUS_RE.search(text)
    if m is None:
        return None
    return f"{int(m.group('dom'), 16):04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn') or '0'}"


# ---- kernel log ---------------------------------------------------------------------------------------------------

_MON: Final = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_MONTHS: Final = {m: i for i, m in enumerate(_MON[8:-1].split("|"), 1)}
_DECODE: Final = re.compile(r"^(?:<\d{1,3}>)?(?:[a-z]{3,8} {0,4}:[a-z]{3,6} {0,4}: ?)?")
"""``dmesg -r`` (``<4>``) and ``dmesg -x`` (``kern  :warn  : ``) prefixes."""
_UPTIME: Final = re.compile(r"\[ *(?P<up>\d{1,10}\.\d{1,9})\] ?")
_CTIME: Final = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) " + _MON + r" {1,2}(?P<d>\d{1,2}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d) "
    r"(?P<y>\d{4})\] ?"
)
_SYSLOG: Final = re.compile(
    _MON + r" {1,2}(?P<d>\d{1,2}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,6}))? (?P<host>[^\s:]{1,255}) "
    r"kernel: ?"
)
_ISO: Final = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)T(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?"
    r"(?:Z|[+-]\d\d:?\d\d)? (?:(?P<host>[^\s:]{1,255}) kernel: ?)?"
)
_UNSTAMPED: Final = re.compile(
    r" {0,20}(?:NVRM: |(?:nvidia|pcieport|pci) [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:|mce: \[Hardware Error\]"
    r"|-- (?:Logs begin|Boot|No entries|Journal begins))"
)
"""Kernel lines without a stamp (printk time off, a ``grep`` that cut it, journal separators)."""
_DMESG_ISO: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}[+-]\d\d:\d\d ")
"""``dmesg --time-format iso``; other ISO-stamped logs (a trainer's, docker's) are no kernel log."""
_HOST_KERNEL: Final = re.compile(r"(?P<host>[^\s:]{1,255}) kernel: ?")
"""``journalctl -o short-monotonic``: ``[ 1234.567890] host kernel: ...``."""

_XID: Final = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>" + _BUS + r")[^)]{0,60}\): (?P<xid>\d{1,5}),? ?"
    r"(?:pid=(?P<pid>\d{1,10}|'?<[^>]{0,20}>'?|[^,\s]{1,20}),? ?)?(?:name=(?P<name>[^,]{0,100}), ?)?(?P<msg>.*)$"
)
_IDENTITY: Final = re.compile(r"NVRM: GPU at PCI:(?P<pci>" + _BUS + r"): (?P<uuid>GPU-[0-9a-fA-F-]{8,64})")
_SERIAL: Final = re.compile(r"NVRM: GPU Board Serial Number: (?P<sn>\S{1,64})")
_FALLEN: Final = re.compile(
    r"NVRM: (?:GPU (?P<a>"
    + _BUS
    + r"): GPU has fallen off the bus|GPU at (?:PCI:)?(?P<b>"
    + _BUS
    + r") has fallen off "
    r"the bus|The NVIDIA GPU (?P<c>" + _BUS + r") .{0,80}has fallen off the bus)"
)
_INIT_FAIL: Final = re.compile(r"NVRM: GPU (?P<pci>" + _BUS + r"): (?:RmInitAdapter failed|rm_init_adapter failed)")
_CRASH_DUMP: Final = re.compile(r"NVRM: A GPU crash dump has been created")
_AER_DEV: Final = re.compile(
    r"(?P<drv>[\w-]{1,40}) (?P<pci>" + _BUS + r"): (?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]{1,40})"
)
_AER_RECEIVED: Final = re.compile(
    r"pcieport " + _BUS + r": AER: (?P<what>(?:Multiple )?(?:Corrected|Uncorrected|Uncorrectable)[^:]{0,40}?) "
    r"(?:error received|error message received from):? (?P<pci>" + _BUS + r")"
)
_LINK: Final = re.compile(r"\blink (?P<link>\d{1,3})\b")
_ACTION_154: Final = re.compile(r"to 0x[0-9a-fA-F]{1,4} \((?P<action>[^)]{1,40})\)")


def _stamp(line: str, year: int | None) -> tuple[datetime | None, float | None, str | None, int]:
    """(time, uptime, host, where the message starts) of a kernel log line's prefix."""
    pos = m.end() if (m := _DECODE.match(line)) else 0
    when: datetime | None = None
    host: str | None = None
    up: float | None = None
    try:
        if m := _CTIME.match(line, pos):
            when = datetime(int(m["y"]), _MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
            pos = m.end()
        elif m := _SYSLOG.match(line, pos):
            host = m["host"]
            if year is not None:
                frac = int((m["f"] or "0").ljust(6, "0"))
                when = datetime(year, _MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), frac)
            pos = m.end()
        elif m := _ISO.match(line, pos):
            host = m["host"]
            frac = int((m["f"] or "0")[:6].ljust(6, "0"))
            when = datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), frac)
            pos = m.end()
    except ValueError:  # a stamp-shaped prefix that is no date (Feb 30)
        when = None
    if m := _UPTIME.match(line, pos):
        up = float(m["up"])
        pos = m.end()
        if host is None and (k := _HOST_KERNEL.match(line, pos)):
            host, pos = k["host"], k.end()
    return when, up, host, pos


def is_kernel_line(line: str) -> bool:
    """Whether ``line`` looks like a kernel log line (a dmesg/journal stamp, or an ``NVRM:`` message)."""
    line = line[:MAX_LINE]
    when, up, host, _ = _stamp(line, 2000)
    if when is not None and host is None and up is None and line[:1].isdigit():  # an ISO stamp alone: dmesg's own?
        return _DMESG_ISO.match(line) is not None
    return when is not None or up is not None or host is not None or _UNSTAMPED.match(line) is not None


def parse_kernel_log(lines: Iterable[str], host: str | None, year: int | None = None) -> list[GpuEvent]:
    """The GPU events among kernel log ``lines`` (dmesg, ``dmesg -T``, journal or syslog form); other lines are
    skipped. ``year`` dates journal/syslog stamps, which carry none. A ``pcieport`` AER line is kept when the device
    it names is a GPU that an NVRM or ``nvidia`` driver line of the same log names."""
    events: list[GpuEvent] = []
    aer_elsewhere: list[GpuEvent] = []
    last_identity: str | None = None
    for line_no, raw in enumerate(lines, 1):
        line = raw[:MAX_LINE].rstrip("\r\n")
        if "NVRM" not in line and "AER" not in line and "PCIe Bus Error" not in line:
            continue
        when, up, line_host, pos = _stamp(line, year)
        msg = line[pos:]
        pci = uuid = process = None
        xid = pid = None
        gpu_driver = True
        if m := _XID.search(msg):
            xid = int(m["xid"])
            info = xid_info(xid)
            what, severity = (f"Xid {xid}: {info.meaning}" if xid in XID else info.meaning), info.severity
            if xid == 74 and (lk := _LINK.search(m["msg"])):
                what += f" (link {lk['link']})"
            if xid == 154 and (act := _ACTION_154.search(m["msg"])):
                what = f"Xid 154: GPU recovery action changed to {act['action']}"
                severity = "informational" if act["action"].strip().lower() == "none" else "fatal"
            pci = normalize_pci(m["pci"])
            pid = int(m["pid"]) if m["pid"] and m["pid"].isdigit() else None
            name = (m["name"] or "").strip()
            process = name if name and not name.startswith("<") else None
        elif m := _IDENTITY.search(msg):
            pci = last_identity = normalize_pci(m["pci"])
            uuid = m["uuid"]
            what, severity = f"GPU identity {uuid}", "informational"
        elif m := _SERIAL.search(msg):
            pci = last_identity  # the driver prints it right after the identity line
            what, severity = f"GPU board serial number {m['sn']}", "informational"
        elif m := _FALLEN.search(msg):
            pci = normalize_pci(m["a"] or m["b"] or m["c"])
            what, severity = "GPU has fallen off the bus", "fatal"
        elif m := _INIT_FAIL.search(msg):
            pci = normalize_pci(m["pci"])
            what, severity = "GPU initialization failed", "fatal"
        elif _CRASH_DUMP.search(msg):
            what, severity = "GPU crash dump created", "consequence"
        elif "PCIe Bus Error" in msg and (m := _AER_DEV.match(msg)):
            sev = m["sev"].strip()
            pci, gpu_driver = normalize_pci(m["pci"]), m["drv"].startswith("nvidia")
            what, severity = f"PCIe AER {sev}", "informational" if sev.startswith("Corrected") else "fatal"
        elif m := _AER_RECEIVED.match(msg):
            kind = m["what"].strip()
            pci, gpu_driver = normalize_pci(m["pci"]), False
            what = f"PCIe AER {kind} error reported by the root port"
            severity = "informational" if kind.split()[-1] == "Corrected" else "fatal"
        else:
            continue
        ev = GpuEvent(
            line_no, line[:MAX_TEXT], line_host or host, when, up, pci, xid, pid, process, what, severity, uuid
        )
        if gpu_driver:
            events.append(ev)
        elif len(aer_elsewhere) < MAX_RECORDS:
            aer_elsewhere.append(ev)
        if len(events) >= MAX_RECORDS:
            break
    gpus = {e.pci for e in events if e.pci is not None}
    events.extend(e for e in aer_elsewhere if e.pci in gpus)
    events.sort(key=lambda e: e.line_no)
    return events[:MAX_RECORDS]


# ---- nvidia-smi ---------------------------------------------------------------------------------------------------

_Q_GPU: Final = re.compile(r"^GPU (?P<pci>" + _BUS + r")\s*$")
_Q_KV: Final = re.compile(r"^(?P<ind> *)(?P<key>[^\s:][^:]{0,100}?) *: ?(?P<val>.*)$")
_TABLE_HEAD: Final = re.compile(r"NVIDIA-SMI \d{2,4}\.\d{1,4}.{0,40}(?:Driver|KMD) Version")
_ROW1: Final = re.compile(
    r"^\| *(?P<idx>\d{1,4}) +(?P<name>.{0,60}?) +(?:On|Off|ERR!) *\| *(?P<bus>" + _BUS + r") +\S{1,8} *\| *"
    r"(?P<ecc>\S{1,12}) *\|$"
)
_ROW2: Final = re.compile(
    r"^\| *(?P<fan>\S{1,8}) +(?P<temp>\S{1,8}) +(?P<perf>\S{1,8}) +(?P<pwr>\S{1,10}) */ *(?P<cap>\S{1,10}) *\| *"
    r"(?P<mem>\S{1,12}) */ *(?P<memtot>\S{1,12}) *\| *(?P<util>\S{1,8}) +(?P<cm>\S{1,20}) *\|$"
)
_LOST: Final = re.compile(
    rf"Unable to determine the device handle for GPU ?(?:(?P<bus1>{_BUS})|(?P<idx>\d{{1,4}})(?:: ?(?P<bus2>{_BUS}))?)"
    r"[: ] ?(?P<why>.{0,200})$"
)
_NO_DEVICES: Final = re.compile(
    r"No devices were found|NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
)
_INT: Final = re.compile(r"^(?P<n>\d{1,12})")
_THROTTLE_SECTIONS: Final = ("Clocks Throttle Reasons", "Clocks Event Reasons")
_NOT_THROTTLE: Final = ("Idle", "Applications Clocks Setting", "Display Clock Setting")
_NEW_UNCORRECTABLE: Final = frozenset(
    ("SRAM Uncorrectable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable")
)


def kind_of(head: str) -> TelemetryKind | None:
    """Which node artifact the first few KB of a file are: ``nvidia-smi -q``, the ``nvidia-smi`` table (or the lines
    a lost GPU leaves instead), or a kernel log; None for anything else."""
    head = head[:16384]
    if "NVSMI LOG" in head or any(_Q_GPU.match(ln[:200]) for ln in head.splitlines()[:200]):
        return "nvidia_smi_q"
    if _TABLE_HEAD.search(head) or _NO_DEVICES.search(head) or "Unable to determine the device handle" in head:
        return "nvidia_smi_table"
    lines = head.splitlines()[:200]
    if len(lines) > 1 and not head.endswith("\n"):
        lines = lines[:-1]  # the head cut its last line somewhere
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        return None
    kernel = sum(is_kernel_line(ln) for ln in lines)
    return "dmesg" if kernel * 2 >= len(lines) else None


def _int(text: str) -> int | None:
    m = _INT.match(text.strip())
    return int(m["n"]) if m else None


class _Gpu:
    """A GPU section of ``nvidia-smi -q`` being read."""

    def __init__(self, pci: str | None, line_no: int) -> None:
        self.pci, self.line_no = pci, line_no
        self.index: int | None = None
        self.uuid: str | None = None
        self.product: str | None = None
        self.ecc: dict[str, int] = {}
        self.old_ecc: dict[str, list[int]] = {}
        self.pending: bool | None = None
        self.throttle: list[str] = []
        self.notes: list[str] = []
        self.temp: int | None = None
        self.util: int | None = None

    def take(self, path: list[str], key: str, val: str) -> None:
        val = val.strip()
        top = path[0] if path else ""
        if not path:
            if key == "Minor Number":
                self.index = _int(val)
            elif key == "GPU UUID":
                self.uuid = val or None
            elif key in ("Product Name", "Name"):
                self.product = val or None
            elif "Xid" in key and val not in ("", "N/A", "None"):
                self.notes.append(f"{key}: {val}")
        elif top == "ECC Errors" and len(path) >= 2 and path[1] in ("Volatile", "Aggregate"):
            n = _int(val)
            if n is not None and len(path) == 2 and key in _NEW_UNCORRECTABLE:
                self.ecc[path[1]] = self.ecc.get(path[1], 0) + n
            elif n is not None and len(path) == 3 and path[2] == "Double Bit":
                if key == "Total":
                    self.ecc[path[1]] = n
                else:
                    self.old_ecc.setdefault(path[1], []).append(n)
            elif key == "SRAM Threshold Exceeded" and val == "Yes":
                self.notes.append("SRAM uncorrectable error threshold exceeded")
        elif top in ("Retired Pages", "Remapped Rows", "Row Remapper"):
            if key.startswith("Pending") and val in ("Yes", "No"):
                self.pending = bool(self.pending) or val == "Yes"
            elif key == "Remapping Failure Occurred" and val == "Yes":
                self.notes.append("row remapping failure occurred")
            elif key in ("Double Bit ECC", "Uncorrectable Error") and (_int(val) or 0) > 0:
                self.notes.append(f"{top}: {key} {val}")
        elif top in _THROTTLE_SECTIONS and len(path) == 1 and val == "Active":
            if key == "Idle":
                self.notes.append("clocks idle (no work on the GPU)")
            elif key not in _NOT_THROTTLE:
                self.throttle.append(key)
        elif top == "GPU Reset Status" and val == "Yes":
            self.notes.append(f"{key}")
        elif top == "Temperature" and key == "GPU Current Temp":
            self.temp = _int(val)
        elif top == "Utilization" and key == "Gpu":
            self.util = _int(val)

    def status(self, host: str | None) -> GpuStatus:
        ecc = self.ecc.get("Volatile")
        if ecc is None and "Volatile" in self.old_ecc:
            ecc = sum(self.old_ecc["Volatile"])
        if ecc is None:
            ecc = self.ecc.get("Aggregate")
        agg = self.ecc.get("Aggregate")
        notes = list(self.notes)
        if agg and agg != ecc:
            notes.append(f"aggregate uncorrectable ECC errors: {agg}")
        return GpuStatus(
            host, self.pci, self.index, self.uuid, self.line_no, lost=False, ecc_uncorrected=ecc,
            remap_pending=self.pending, active_throttle=tuple(self.throttle), notes=tuple(notes),
            product=self.product, temp_c=self.temp, util_pct=self.util,
        )  # fmt: skip


def _table_row(line_no: int, m: re.Match[str], row2: re.Match[str] | None, host: str | None) -> GpuStatus:
    errs = [k for k in ("name", "ecc") if m[k].strip() == "ERR!"]
    fields = row2.groupdict() if row2 else {}
    errs += [k for k, v in fields.items() if v == "ERR!"]
    notes = (f"ERR! in {', '.join(errs)}",) if errs else ()
    temp = fields.get("temp", "")
    util = fields.get("util", "")
    name = m["name"].strip()
    return GpuStatus(
        host, normalize_pci(m["bus"]), int(m["idx"]), None, line_no, lost=False, ecc_uncorrected=_int(m["ecc"]),
        notes=notes, product=name if name and name != "ERR!" else None,
        temp_c=_int(temp) if temp.endswith("C") else None, util_pct=_int(util) if util.endswith("%") else None,
    )  # fmt: skip


def parse_nvidia_smi(text: str, host: str | None) -> list[GpuStatus]:
    """Every GPU ``nvidia-smi -q`` or the ``nvidia-smi`` table shows, and a ``lost`` status for each line saying
    a GPU could not be reached (``Unable to determine the device handle ...``, ``No devices were found``)."""
    out: list[GpuStatus] = []
    gpu: _Gpu | None = None
    path: list[tuple[int, str]] = []
    pending_row: tuple[int, re.Match[str]] | None = None
    for line_no, raw in enumerate(text.splitlines(), 1):
        if len(out) >= MAX_RECORDS:
            break
        line = raw[:MAX_LINE].rstrip()
        if m := _LOST.search(line):
            pci = normalize_pci(m["bus1"] or m["bus2"] or "")
            why = m["why"].strip() or "device handle not found"
            idx = int(m["idx"]) if m["idx"] else None
            out.append(GpuStatus(host, pci, idx, None, line_no, lost=True, notes=(why[:MAX_TEXT],)))
            continue
        if m := _NO_DEVICES.search(line):
            out.append(GpuStatus(host, None, None, None, line_no, lost=True, notes=(m.group(0),)))
            continue
        if m := _Q_GPU.match(line):
            if gpu is not None:
                out.append(gpu.status(host))
            gpu, path = _Gpu(normalize_pci(m["pci"]), line_no), []
            continue
        if line.startswith("|"):
            if pending_row is not None:
                out.append(_table_row(*pending_row, _ROW2.match(line), host))
                pending_row = None
            elif m := _ROW1.match(line):
                pending_row = (line_no, m)
            continue
        if gpu is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:  # back at the top level (e.g. a second NVSMI LOG)
            out.append(gpu.status(host))
            gpu = None
            continue
        while path and path[-1][0] >= indent:
            path.pop()
        kv = _Q_KV.match(line)
        if kv is None:
            path.append((indent, line.strip()))
        else:
            gpu.take([p for _, p in path], kv["key"].strip(), kv["val"])
    if pending_row is not None:
        out.append(_table_row(*pending_row, None, host))
    if gpu is not None and len(out) < MAX_RECORDS:
        out.append(gpu.status(host))
    out.sort(key=lambda s: s.line_no)
    return out
