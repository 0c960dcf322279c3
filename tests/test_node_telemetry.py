"""FORMAT MATRIX of what a node says about its GPUs during a hang: kernel log presentation (dmesg, ``dmesg -T``,
``--time-format iso``, ``-x``, journalctl ``short``/``short-iso``/``short-monotonic``, syslog with printk stamps) x
NVRM message of several driver generations; ``nvidia-smi -q`` layouts R418 (``Double Bit > Total``, ``Clocks Throttle
Reasons``), R520 (``SRAM/DRAM Uncorrectable``, ``Remapped Rows``), R535 (``Clocks Event Reasons``) and R550
(``SRAM Uncorrectable Parity/SEC-DED``); the ``nvidia-smi`` table of R470, R535 and R570 widths, with an ``ERR!`` GPU
and with the lines a lost GPU leaves.

Lines are ours (hosts gpu-b07..., bus ids 0000:3b/5e/b3, pids 99xx), written in the formats the drivers print.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debug_training_logs.formats.node_telemetry import (
    XID,
    GpuStatus,
    kind_of,
    normalize_pci,
    parse_kernel_log,
    parse_nvidia_smi,
    xid_info,
)

WHEN = datetime(2026, 12, 7, 3, 12, 9)

# presentation -> (a line for a message, its time, its uptime, the host the line carries)
PRESENTATIONS = {
    "dmesg": (lambda m: f"[ 4254.197860] {m}", None, 4254.19786, None),
    "dmesg_T": (lambda m: f"[Mon Dec  7 03:12:09 2026] {m}", WHEN, None, None),
    "dmesg_iso": (lambda m: f"2026-12-07T03:12:09,197860+00:00 {m}", WHEN.replace(microsecond=197860), None, None),
    "dmesg_x": (lambda m: f"kern  :err   : [ 4254.197860] {m}", None, 4254.19786, None),
    "dmesg_r": (lambda m: f"<3>[ 4254.197860] {m}", None, 4254.19786, None),
    "journal": (lambda m: f"Dec 07 03:12:09 gpu-b07 kernel: {m}", WHEN, None, "gpu-b07"),
    "journal_iso": (lambda m: f"2026-12-07T03:12:09+0000 gpu-b07 kernel: {m}", WHEN, None, "gpu-b07"),
    "journal_monotonic": (lambda m: f"[ 4254.197860] gpu-b07 kernel: {m}", None, 4254.19786, "gpu-b07"),
    "syslog": (lambda m: f"Dec  7 03:12:09 gpu-b07 kernel: [ 4254.197860] {m}", WHEN, 4254.19786, "gpu-b07"),
    "unstamped": (lambda m: m, None, None, None),
}

# message -> (line, pci, xid, pid, process, what, severity)
MESSAGES = {
    "xid79_r4xx": ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "0000:3b:00.0", 79, None, None,
                   "Xid 79: GPU has fallen off the bus", "fatal"),
    "xid79_r470": ("NVRM: Xid (PCI:0000:3b:00): 79, pid=9921, GPU has fallen off the bus.", "0000:3b:00.0", 79, 9921,
                   None, "Xid 79: GPU has fallen off the bus", "fatal"),
    "xid79_r535": ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
                   "0000:3b:00.0", 79, None, None, "Xid 79: GPU has fallen off the bus", "fatal"),
    "xid31_named": ("NVRM: Xid (PCI:0000:5e:00): 31, pid=9934, name=pt_main_thread, Ch 00000018, intr 00000000. MMU "
                    "Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_2 faulted @ 0x7f3a_18000000. Fault is of type "
                    "FAULT_PDE ACCESS_TYPE_VIRT_READ", "0000:5e:00.0", 31, 9934, "pt_main_thread",
                    "Xid 31: GPU memory page fault", "application"),
    "xid48_dbe": ("NVRM: Xid (PCI:0000:b3:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
                  "(DBE) has been detected on GPU in the framebuffer at partition 5, subpartition 1.", "0000:b3:00.0",
                  48, None, None, "Xid 48: Double Bit ECC Error", "fatal"),
    "xid74_nvlink": ("NVRM: Xid (PCI:0000:b3:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on "
                     "link 11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "0000:b3:00.0", 74, None, None,
                     "Xid 74: NVLink Error (link 11)", "fatal"),
    "xid94_mig": ("NVRM: Xid (PCI:0000:3b:00 GPU-I:03 GPU-CI:00): 94, pid=4410, name=python3, Contained: SM (0x1). RST:"
                  " No, D-RST: No", "0000:3b:00.0", 94, 4410, "python3", "Xid 94: Contained ECC error", "fatal"),
    "xid45_cleanup": ("NVRM: Xid (PCI:0000:3b:00): 45, pid=9921, name=python, Ch 00000010", "0000:3b:00.0", 45, 9921,
                      "python", "Xid 45: Preemptive cleanup, due to previous errors", "consequence"),
    "xid63_remap": ("NVRM: Xid (PCI:0000:5e:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000"
                    "0024f1a0) marked for remapping, reset gpu to activate.", "0000:5e:00.0", 63, None, None,
                    "Xid 63: ECC page retirement or row remapping recording event", "informational"),
    "xid119_gsp": ("NVRM: Xid (PCI:0000:5e:00): 119, pid=9934, name=python, Timeout after 6s of waiting for RPC "
                   "response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).", "0000:5e:00.0",
                   119, 9934, "python", "Xid 119: GSP RPC Timeout", "fatal"),
    "xid154_reboot": ("NVRM: Xid (PCI:0000:b3:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node "
                      "Reboot Required)", "0000:b3:00.0", 154, None, None,
                      "Xid 154: GPU recovery action changed to Node Reboot Required", "fatal"),
    "xid13_r3xx": ("NVRM: Xid (0000:3b:00): 13, 0001 00000000 0000a0c0 00000144 00000000 00000100", "0000:3b:00.0", 13,
                   None, None, "Xid 13: Graphics Engine Exception", "application"),
    "xid_unknown": ("NVRM: Xid (PCI:0000:3b:00): 201, pid=9921, name=python, something new", "0000:3b:00.0", 201,
                    9921, "python", "unknown Xid 201", "unknown"),
    "fallen_new": ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", "0000:3b:00.0", None, None, None,
                   "GPU has fallen off the bus", "fatal"),
    "fallen_old": ("NVRM: GPU at 0000:3b:00.0 has fallen off the bus.", "0000:3b:00.0", None, None, None,
                   "GPU has fallen off the bus", "fatal"),
    "fallen_banner": ("NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has fallen off "
                      "the bus and is not responding to commands.", "0000:3b:00.0", None, None, None,
                      "GPU has fallen off the bus", "fatal"),
    "init_failed": ("NVRM: GPU 0000:5e:00.0: RmInitAdapter failed! (0x62:0x55:2477)", "0000:5e:00.0", None, None,
                    None, "GPU initialization failed", "fatal"),
    "crash_dump": ("NVRM: A GPU crash dump has been created. If possible, please run", None, None, None, None,
                   "GPU crash dump created", "consequence"),
    "aer_nvidia": ("nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
                   "(Requester ID)", "0000:3b:00.0", None, None, None, "PCIe AER Uncorrected (Fatal)", "fatal"),
    "aer_old_kernel": ("nvidia 0000:5e:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=5e00(Receiver"
                       " ID)", "0000:5e:00.0", None, None, None, "PCIe AER Corrected", "informational"),
}  # fmt: skip


@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("presentation", PRESENTATIONS)
def test_kernel_log_matrix(presentation: str, message: str) -> None:
    render, when, uptime, line_host = PRESENTATIONS[presentation]
    text, pci, xid, pid, process, what, severity = MESSAGES[message]
    lines = ["[    0.000000] Linux version 6.8.0-51-generic", render("e1000e 0000:00:1f.6 eno1: NIC Link is Up"),
             render(text), render("usb 1-4: new high-speed USB device number 3 using xhci_hcd")]  # fmt: skip
    (ev,) = parse_kernel_log(lines, "node-from-caller", year=2026)
    assert (ev.line_no, ev.pci, ev.xid, ev.pid, ev.process, ev.what, ev.severity) == (
        3, pci, xid, pid, process, what, severity)  # fmt: skip
    assert (ev.time, ev.uptime_s, ev.host) == (when, uptime, line_host or "node-from-caller")
    assert ev.text == render(text)[:400]
    assert kind_of("\n".join(lines) + "\n") == "dmesg"


@pytest.mark.parametrize("presentation", [p for p in PRESENTATIONS if p != "unstamped"])
def test_a_kernel_log_is_recognised_without_nvrm_lines_in_its_head(presentation: str) -> None:
    render = PRESENTATIONS[presentation][0]
    head = "\n".join(render(f"eth0: renamed from veth{i:04x}") for i in range(40)) + "\n"
    assert kind_of(head) == "dmesg"


def test_journal_without_a_year_has_no_time() -> None:
    (ev,) = parse_kernel_log([PRESENTATIONS["journal"][0](MESSAGES["xid79_r535"][0])], None)
    assert ev.time is None and ev.host == "gpu-b07"


def test_an_xid79_incident_in_order() -> None:
    """What an R535 driver writes when a GPU falls off the bus, with the identity lines printed once before."""
    lines = [
        "[ 4254.197850] NVRM: GPU at PCI:0000:3b:00: GPU-7f3e2c1a-90d4-4b1e-a8c2-1d0f5e6b7a99",
        "[ 4254.197852] NVRM: GPU Board Serial Number: 1324721009933",
        "[ 4254.197860] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[ 4254.197871] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "[ 4254.197913] NVRM: A GPU crash dump has been created. If possible, please run",
        "               NVRM: nvidia-bug-report.sh as root to collect this data before",
        "               NVRM: the NVIDIA kernel module is unloaded.",
        "[ 4254.300000] pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
        "[ 4254.300100] pcieport 0000:00:1d.0: AER: Corrected error received: 0000:05:00.0",
        "[ 4254.300200] nvme 0000:05:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
    ]
    events = parse_kernel_log(lines, "gpu-b07")
    assert [(e.line_no, e.what) for e in events] == [
        (1, "GPU identity GPU-7f3e2c1a-90d4-4b1e-a8c2-1d0f5e6b7a99"),
        (2, "GPU board serial number 1324721009933"),
        (3, "Xid 79: GPU has fallen off the bus"),
        (4, "GPU has fallen off the bus"),
        (5, "GPU crash dump created"),
        (8, "PCIe AER Uncorrected (Fatal) error reported by the root port"),
    ]
    assert events[0].uuid == "GPU-7f3e2c1a-90d4-4b1e-a8c2-1d0f5e6b7a99"
    assert {e.pci for e in events if e.pci} == {"0000:3b:00.0"}


def test_the_catalog_covers_the_training_xids() -> None:
    for code in (13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143,
                 149, 154):  # fmt: skip
        assert code in XID and XID[code].meaning
    assert {XID[c].severity for c in (48, 74, 79, 94, 95, 119, 120, 154)} == {"fatal"}
    assert {XID[c].severity for c in (13, 31, 43)} == {"application"}
    assert XID[45].severity == "consequence" and {XID[c].severity for c in (63, 92)} == {"informational"}
    assert xid_info(7).meaning == "unknown Xid 7" and xid_info(7).severity == "unknown"


@pytest.mark.parametrize(
    ("text", "norm"),
    [
        ("PCI:0000:3B:00", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:b3:00.1", "0000:b3:00.1"),
        ("00000004:04:00.0", "0004:04:00.0"),
        ("no bus", None),
    ],
)
def test_normalize_pci(text: str, norm: str | None) -> None:
    assert normalize_pci(text) == norm


# ---- nvidia-smi -q ------------------------------------------------------------------------------------------------

Q_LAYOUTS = ("r418", "r520", "r535", "r550")


def render_q(layout: str, gpus: list[dict[str, object]]) -> str:
    """``nvidia-smi -q`` of ``layout`` for GPUs given as {bus, minor, uuid, ecc, pending, active, idle}."""
    w = 30 if layout == "r418" else 38

    def kv(ind: int, key: str, value: str) -> str:
        return f"{' ' * ind}{key.ljust(w - ind)}: {value}"

    out = ["", "==============NVSMI LOG==============", "", kv(0, "Timestamp", "Mon Dec  7 03:20:01 2026"),
           kv(0, "Driver Version", {"r418": "418.67", "r520": "520.61.05", "r535": "535.129.03", "r550": "550.90.07"}[layout]),
           kv(0, "CUDA Version", "12.2"), "", kv(0, "Attached GPUs", str(len(gpus)))]  # fmt: skip
    for g in gpus:
        ecc, pending, idle = int(str(g.get("ecc", 0))), bool(g.get("pending")), bool(g.get("idle"))
        active = [str(a) for a in g.get("active") or ()]
        active += ["Idle"] if idle else []
        out += [f"GPU {g['bus']}", kv(4, "Product Name", "NVIDIA A100-SXM4-80GB"), kv(4, "Product Brand", "NVIDIA"),
                kv(4, "GPU UUID", str(g["uuid"])), kv(4, "Minor Number", str(g["minor"])), "    GPU Reset Status",
                kv(8, "Reset Required", "Yes" if pending else "No"), "    PCI", kv(8, "Bus Id", str(g["bus"])),
                kv(4, "Performance State", "P0"),
                "    Clocks Event Reasons" if layout in ("r535", "r550") else "    Clocks Throttle Reasons"]  # fmt: skip
        for name, ind in (("Idle", 8), ("Applications Clocks Setting", 8), ("SW Power Cap", 8), ("HW Slowdown", 8),
                          ("HW Thermal Slowdown", 12), ("HW Power Brake Slowdown", 12), ("Sync Boost", 8),
                          ("SW Thermal Slowdown", 8), ("Display Clock Setting", 8)):  # fmt: skip
            out.append(kv(ind, name, "Active" if name in active else "Not Active"))
        out += ["    Utilization", kv(8, "Gpu", "0 %" if g.get("idle") else "100 %"), kv(8, "Memory", "3 %")]
        out += ["    Ecc Mode" if layout in ("r418", "r520") else "    ECC Mode", kv(8, "Current", "Enabled")]
        out.append("    ECC Errors")
        for scope in ("Volatile", "Aggregate"):
            out.append(f"        {scope}")
            if layout == "r418":
                for bits, n in (("Single Bit", 4), ("Double Bit", ecc)):
                    out.append(f"            {bits}            ")
                    out += [kv(16, "Device Memory", str(n)), kv(16, "Register File", "0"),
                            kv(16, "Texture Memory", "N/A"), kv(16, "Total", str(n))]  # fmt: skip
            elif layout in ("r520", "r535"):
                out += [kv(12, "SRAM Correctable", "0"), kv(12, "SRAM Uncorrectable", "0"),
                        kv(12, "DRAM Correctable", "4"), kv(12, "DRAM Uncorrectable", str(ecc))]  # fmt: skip
            else:
                out += [kv(12, "SRAM Correctable", "0"), kv(12, "SRAM Uncorrectable Parity", "0"),
                        kv(12, "SRAM Uncorrectable SEC-DED", str(ecc)), kv(12, "DRAM Correctable", "4"),
                        kv(12, "DRAM Uncorrectable", "0")]  # fmt: skip
                if scope == "Aggregate":
                    out += [kv(12, "SRAM Threshold Exceeded", "No"), "        Aggregate Uncorrectable SRAM Sources",
                            kv(12, "SRAM L2", str(ecc)), kv(12, "SRAM SM", "0")]  # fmt: skip
        out += ["    Retired Pages", kv(8, "Single Bit ECC", "0" if layout == "r418" else "N/A"),
                kv(8, "Double Bit ECC", "0" if layout == "r418" else "N/A")]  # fmt: skip
        if layout == "r418":
            out.append(kv(8, "Pending", "Yes" if pending else "No"))
        else:
            out += [kv(8, "Pending Page Blacklist", "N/A"), "    Remapped Rows", kv(8, "Correctable Error", "0"),
                    kv(8, "Uncorrectable Error", str(ecc)), kv(8, "Pending", "Yes" if pending else "No"),
                    kv(8, "Remapping Failure Occurred", "No"), "        Bank Remap Availability Histogram",
                    kv(12, "Max", "639 bank(s)")]  # fmt: skip
        out += ["    Temperature", kv(8, "GPU Current Temp", "71 C"), kv(4, "Processes", "None"), ""]
    return "\n".join(out) + "\n"


GPUS: list[dict[str, object]] = [
    {"bus": "00000000:3B:00.0", "minor": 2, "uuid": "GPU-11111111-2222-3333-4444-3b3b3b3b3b3b", "ecc": 0},
    {"bus": "00000000:5E:00.0", "minor": 3, "uuid": "GPU-11111111-2222-3333-4444-5e5e5e5e5e5e", "ecc": 2,
     "pending": True, "active": ["HW Slowdown", "HW Thermal Slowdown"]},
    {"bus": "00000000:B3:00.0", "minor": 6, "uuid": "GPU-11111111-2222-3333-4444-b3b3b3b3b3b3", "idle": True},
]  # fmt: skip


@pytest.mark.parametrize("layout", Q_LAYOUTS)
def test_nvidia_smi_q_matrix(layout: str) -> None:
    text = render_q(layout, GPUS)
    assert kind_of(text[:4096]) == "nvidia_smi_q"
    statuses = parse_nvidia_smi(text, "gpu-b07")
    assert [(s.pci, s.index, s.uuid, s.lost, s.host) for s in statuses] == [
        ("0000:3b:00.0", 2, GPUS[0]["uuid"], False, "gpu-b07"), ("0000:5e:00.0", 3, GPUS[1]["uuid"], False, "gpu-b07"),
        ("0000:b3:00.0", 6, GPUS[2]["uuid"], False, "gpu-b07")]  # fmt: skip
    ok, hot, idle = statuses
    assert (ok.ecc_uncorrected, ok.remap_pending, ok.active_throttle, ok.notes) == (0, False, (), ())
    assert (hot.ecc_uncorrected, hot.remap_pending) == (2, True)
    assert hot.active_throttle == ("HW Slowdown", "HW Thermal Slowdown")
    assert "Reset Required" in hot.notes
    assert idle.util_pct == 0 and any("idle" in n for n in idle.notes) and idle.temp_c == 71
    assert ok.product == "NVIDIA A100-SXM4-80GB"
    lines = text.splitlines()
    assert lines[hot.line_no - 1] == "GPU 00000000:5E:00.0"


# ---- the nvidia-smi table -----------------------------------------------------------------------------------------

TABLES = {
    "r470": (
        "| NVIDIA-SMI 470.182.03   Driver Version: 470.182.03   CUDA Version: 11.4     |",
        "|   {i}  NVIDIA A100-SXM...  On   | 00000000:{bus}:00.0 Off |                    {ecc} |",
        "| N/A   {t}C    P0   {p}W / 400W |  40221MiB / 81251MiB |    {u}%      Default |",
    ),
    "r535": (
        "| NVIDIA-SMI 535.129.03             Driver Version: 535.129.03   CUDA Version: 12.2     |",
        "|   {i}  NVIDIA H100 80GB HBM3          On  | 00000000:{bus}:00.0 Off |                    {ecc} |",
        "| N/A   {t}C    P0            {p}W / 700W |  61234MiB / 81559MiB |     {u}%      Default |",
    ),
    "r570": (
        "| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |",
        "|   {i}  NVIDIA H100 80GB HBM3          On  |   00000000:{bus}:00.0 Off |                    {ecc} |",
        "| N/A   {t}C    P0            {p}W /  700W |   61234MiB /  81559MiB |     {u}%      Default |",
    ),
}
ERR_ROWS = (
    "|   {i}  ERR!                On   | 00000000:{bus}:00.0 Off |                 ERR! |",
    "|ERR!  ERR! ERR!    ERR! / ERR! |      0MiB / 81920MiB |    ERR!      Default |",
)


def render_table(version: str, lost: bool) -> str:
    head, row1, row2 = TABLES[version]
    out = ["Unable to determine the device handle for GPU1: 0000:5E:00.0: Unknown Error"] if lost else []
    out += ["Mon Dec  7 03:20:01 2026", "+" + "-" * (len(head) - 2) + "+", head, "|" + "=" * (len(head) - 2) + "|"]
    for i, bus in enumerate(("3B", "5E", "B3")):
        if bus == "5E" and lost:
            continue
        rows = ERR_ROWS if bus == "B3" else (row1, row2)
        out += [r.format(i=i, bus=bus, ecc=0, t=41 + i, p=310, u=97) for r in rows]
        out += ["|                               |                      |             Disabled |", "+" + "-" * 10 + "+"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("lost", [False, True])
@pytest.mark.parametrize("version", TABLES)
def test_nvidia_smi_table_matrix(version: str, lost: bool) -> None:
    text = render_table(version, lost)
    assert kind_of(text[:4096]) == "nvidia_smi_table"
    statuses = parse_nvidia_smi(text, None)
    got = [(s.index, s.pci, s.lost) for s in statuses]
    expected = [(1, "0000:5e:00.0", True)] if lost else []
    expected += [(0, "0000:3b:00.0", False)] + ([] if lost else [(1, "0000:5e:00.0", False)])
    assert got == [*expected, (2, "0000:b3:00.0", False)]
    first = next(s for s in statuses if s.pci == "0000:3b:00.0")
    assert (first.temp_c, first.util_pct, first.ecc_uncorrected, first.notes) == (41, 97, 0, ())
    err = statuses[-1]
    assert err.notes and err.notes[0].startswith("ERR! in") and err.product is None
    if lost:
        assert statuses[0].notes == ("Unknown Error",) and statuses[0].line_no == 1


@pytest.mark.parametrize(
    ("line", "pci", "index", "why"),
    [
        (
            "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
            "0000:3b:00.0",
            None,
            "Unknown Error",
        ),
        (
            "Unable to determine the device handle for GPU 0000:b3:00.0: GPU is lost.  Reboot the system to recover this "
            "GPU",
            "0000:b3:00.0",
            None,
            "GPU is lost.  Reboot the system to recover this GPU",
        ),
        (
            "Unable to determine the device handle for GPU1: 0000:5E:00.0: Unknown Error",
            "0000:5e:00.0",
            1,
            "Unknown Error",
        ),
        ("Unable to determine the device handle for GPU 3: Unknown Error", None, 3, "Unknown Error"),
        ("No devices were found", None, None, "No devices were found"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
            "NVIDIA driver is installed and running.",
            None,
            None,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        ),
    ],
)
def test_a_lost_gpu(line: str, pci: str | None, index: int | None, why: str) -> None:
    assert kind_of(line + "\n") == "nvidia_smi_table"
    (status,) = parse_nvidia_smi(line + "\n", "gpu-b07")
    assert (status.lost, status.pci, status.index, status.notes, status.line_no) == (True, pci, index, (why,), 1)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello\n",
        "[rank3]: RuntimeError: NCCL watchdog thread terminated\n" * 20,
        'Process 28406: python train.py\nPython v3.11.7\n\nThread 28406 (idle): "MainThread"\n    all_reduce (x.py:1)\n',
        "Job summary\n===========\n",
        "2026-12-07T03:12:09.123456Z INFO step 1200 loss=2.31\n" * 20,
        "2026-12-07 03:12:09,123 - INFO - step 1200\n" * 20,
    ],
)
def test_other_files_are_no_telemetry(text: str) -> None:
    assert kind_of(text) is None
    assert parse_kernel_log(text.splitlines(), None) == [] and parse_nvidia_smi(text, None) == []


# ---- hostile input ------------------------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=300 if os.environ.get("HYPOTHESIS_PROFILE") != "deep" else 3000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_SEEDS = [render_q("r418", GPUS), render_q("r550", GPUS), render_table("r535", True)]
_SEEDS += ["\n".join(p[0](m[0]) for p in PRESENTATIONS.values() for m in MESSAGES.values())]


def _bounded(text: str) -> None:
    start = time.perf_counter()
    kind_of(text[:8192])
    events = parse_kernel_log(text.splitlines(), "h", year=2026)
    statuses: list[GpuStatus] = parse_nvidia_smi(text, "h")
    assert all(e.line_no >= 1 and len(e.text) <= 400 for e in events)
    assert all(s.line_no >= 1 for s in statuses)
    assert time.perf_counter() - start < 2.0


@FUZZ
@given(st.text(max_size=3000))
def test_random_text_never_raises(text: str) -> None:
    _bounded(text)


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise(data: bytes) -> None:
    _bounded(data.decode("utf-8", errors="replace"))


@FUZZ
@given(st.sampled_from(_SEEDS), st.integers(0, 10**6), st.integers(0, 10**6), st.text(max_size=40))
def test_cut_and_spliced_artifacts_never_raise(seed: str, a: int, b: int, junk: str) -> None:
    a, b = sorted((a % (len(seed) + 1), b % (len(seed) + 1)))
    _bounded(seed[:a])
    _bounded(seed[:a] + junk + seed[b:])


@pytest.mark.parametrize(
    "line",
    [
        "[ 1.0] NVRM: Xid (PCI:" + "0" * 5000,
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=" + "'<" * 3000,
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, name=" + "x" * 5000,
        "|   0  " + "NVIDIA " * 1000 + " On |",
        "| " + "1 " * 3000 + "|",
        "Unable to determine the device handle for GPU" + "0:" * 3000,
        "Dec  7 03:12:09 " + "h" * 5000 + " kernel: NVRM: x",
        "[Mon Dec  7 03:12:09 2026] pcieport 0000:00:01.0: AER: " + "Corrected " * 1000,
        "    " + "Key " * 2000 + ": value",
    ],
)
def test_adversarial_lines_are_bounded(line: str) -> None:
    _bounded((line + "\n") * 100)
    _bounded("GPU 00000000:3B:00.0\n" + (line + "\n") * 100)
