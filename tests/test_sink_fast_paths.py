"""The per-hit sinks' cheap paths give what the plain paths give, over presentation matrices (never corpus lines).

* ``torch_nccl``: the byte-table check for absurd digit runs (``_text``), the ``[<sev>`` test before the c10 header
  search, the words tested before the dump-signal and timeout regexes. Each pre-test must hold on every line its regex
  matches: checked on every message of every torch family 2.0 .. 2.14, under every launcher/collector prefix, every
  hard-wrap position, with LF and CRLF endings.
* ``templates``: the process-wide template memo keyed on the UTF-8 digit shape equals :func:`template_of` of the line
  with its digits zeroed, for ASCII, non-ASCII, ANSI-coloured and CRLF lines, with the shared memo full or not.
* ``inventory``: the compiled, guarded prefix removal equals the three plain substitutions it replaced.
"""

from __future__ import annotations

import re

import pytest

from debug_training_logs.analysis import inventory_sink, templates
from debug_training_logs.analysis.templates import TemplateCache, template_of
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_patterns as tnp
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats import torch_nccl_wraps as tnw
from debug_training_logs.formats.prefixes import GLOBAL_RANK, GLOG_SECONDS, strip_ansi
from tests.nccl_render import EXTRA_PREFIXES, PREFIXES, TORCH, WRAPS, build_case, messages

ENDINGS = ("", "\r")


def _matrix_lines(version: str) -> list[str]:
    out: list[str] = []
    for msg in messages(version):
        for prefix in PREFIXES + EXTRA_PREFIXES:
            for wrap_style in WRAPS:
                case = build_case(version, msg, prefix, wrap_style)
                pieces = [*case.lines, tnw.join_wrapped(list(case.lines))]
                out += [p + end for p in pieces for end in ENDINGS]
    return out


def _plain_text(line: str) -> str:
    return tn._ABSURD_NUMBER.sub("#", strip_ansi(line))


@pytest.mark.parametrize("version", TORCH)
def test_nccl_pretests_hold_on_every_family_prefix_and_wrap(version: str) -> None:
    lines = _matrix_lines(version)
    assert len(lines) > 1000
    headers = dumps = timeouts = statuses = 0
    for line in lines:
        text = tn._text(line)
        assert text == _plain_text(line), line
        if tnp._HEADER.search(text) is not None:
            headers += 1
            assert tnp._HEADER_OPENING.search(text) is not None, line
        if tnp._GLOG.search(text) is not None:
            assert GLOG_SECONDS.search(text) is not None, line
        for _origin, family, rx in tnp._DUMP:
            if rx.search(text) is not None:
                dumps += 1
                assert tnp._DUMP_WORD[family] in text, line
        if tnp._TIMEOUT.search(text) is not None:
            timeouts += 1
            assert "WorkNCCL(" in text, line
        for family, rx in tnp._STATUS:
            if rx.search(text) is not None:
                statuses += 1
                assert tnp._STATUS_WORD[family] in text, line
        if GLOBAL_RANK.match(line) is not None:
            assert tnw._starts_new_record(line), line  # the fast path's answer for lines opening with [rankN]:
    assert headers and timeouts
    assert statuses or version in ("2.0", "2.1", "2.2")  # status lines exist from 2.3 on
    assert dumps or version in ("2.0", "2.1", "2.2")  # the dump signal exists from 2.3 on


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("where", ["start", "middle", "end", "alone"])
@pytest.mark.parametrize("run", [39, 40, 41, 200])
@pytest.mark.parametrize(
    "digits",
    ["ascii", "arabic_indic", "mixed", "ascii_in_unicode_line"],
)
def test_absurd_digit_runs_match_the_regex(digits: str, run: int, where: str, ending: str) -> None:
    if digits == "ascii":
        number = "7" * run
    elif digits == "arabic_indic":
        number = "\u0663" * run  # \d matches every Unicode decimal digit
    elif digits == "mixed":
        number = ("1\u0662" * run)[:run]
    else:
        number = "5" * run
    body = "[rank3]:[E521 08:02:12.442641787 ProcessGroupNCCL.cpp:689] [Rank 3] Timeout at NCCL work: "
    if digits == "ascii_in_unicode_line":
        body = "\u00e9t\u00e9 " + body
    line = {
        "start": number + " " + body,
        "middle": body + number + ", last enqueued NCCL work: 5, last completed NCCL work: 4.",
        "end": body + number,
        "alone": number,
    }[where] + ending
    for variant in (line, f"\x1b[31m{line}\x1b[0m", f"12: {line}"):
        assert tn._text(variant) == _plain_text(variant)
        assert tn.parse_line(variant) == _parse_plain(variant)


def _parse_plain(line: str) -> tnt.Parsed | None:
    """parse_line with the regex-only text cleaning (the reference for the byte-table check)."""
    saved = tn._text
    tn._text = _plain_text
    try:
        return tn.parse_line(line)
    finally:
        tn._text = saved


@pytest.mark.parametrize("sev", ["F", "E", "W", "I"])
@pytest.mark.parametrize("spaces", [" ", "   "])
@pytest.mark.parametrize("ending", ENDINGS)
def test_glog_headers_pass_the_pretest(sev: str, spaces: str, ending: str) -> None:
    glog = f"{sev}0521 08:02:14.862000{spaces}1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (x)"
    for prefix in ("", "[rank4]:", "4: ", "(RayWorker pid=7, ip=10.0.0.1) ", "\x1b[33m", "host]:", "a:"):
        text = tn._text(prefix + glog + ending)
        assert tnp._GLOG.search(text) is not None and GLOG_SECONDS.search(text) is not None
        h, at = tn.find_header(text)
        assert h is not None and h.style == "glog" and h.source.endswith("api.py:869") and h.severity == sev
        assert text[at:].startswith("failed")


def test_header_without_opening_finds_glog_and_nothing_else() -> None:
    glog = "E0521 08:02:14.862000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6)"
    for prefix in ("", "[rank4]:", "4: ", "(RayWorker pid=7, ip=10.0.0.1) "):
        h, at = tn.find_header(prefix + glog)
        assert h is not None and h.style == "glog" and h.source.endswith("api.py:869")
        assert (prefix + glog)[at:].startswith("failed")
    near = "W0521 08:02:14.86200 1234 api.py:869] five-digit fraction: no glog header"
    assert tn.find_header(near) == (None, 0)
    frame = "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x47e (0x7f3a001c32a2 in libtorch_cuda.so)"
    assert tn.find_header(frame) == (None, 0)


_TEMPLATE_LINES = (
    "[rank2]:[E521 08:02:12.442641787 ProcessGroupNCCL.cpp:689] [Rank 2] Watchdog caught collective operation timeout",
    "gpu-a01:23450:23962 [0] NCCL INFO ncclCommInitRank comm 0x55d3c8a0 rank 0 nranks 1024 cudaDev 0 busId 18000",
    "srun: error: node-017: task 12: Exited with exit code 1",
    "slurmstepd: error: *** STEP 48213.0 ON gpu-a01 CANCELLED AT 2026-05-21T08:02:45 DUE TO TASK FAILURE ***",
    "  traceback : Signal 6 (SIGABRT) received by PID 23451",
    "Fehler: Verbindung zur\u00fcckgesetzt nach 30 s (\u00e9t\u00e9 2026-05-21 08:02:12,443) rank 7",
    "\u4efb\u52a1 12 \u5931\u8d25 timed out after 600 s \U0001f525 shard-000017.tar",
    "digits \u0661\u0662\u0663 and 123 in one line: ReadTimeout 10.0.3.7:51000",
)


@pytest.mark.parametrize("shared_full", [False, True])
def test_template_memo_equals_template_of(monkeypatch: pytest.MonkeyPatch, shared_full: bool) -> None:
    monkeypatch.setattr(templates, "_shared", {})
    if shared_full:
        monkeypatch.setattr(templates, "SHARED_ENTRIES", 0)
    zero = str.maketrans("123456789", "000000000")
    variants = [
        v
        for line in _TEMPLATE_LINES
        for v in (line, line + "\r", f"\x1b[1;31m{line}\x1b[0m", f"[rank13]: {line}", f"3: {line}")
    ]
    first, second = TemplateCache(), TemplateCache()
    for v in variants:
        want = template_of(v.translate(zero))
        assert first(v) == want
        assert second(v) == want  # another file's sink: the memo (shared or its own) gives the same
        assert first(v.replace("7", "4")) == template_of(v.replace("7", "4").translate(zero))
    assert bool(templates._shared) is not shared_full


def _after_prefixes_plain(text: str) -> str:
    text = re.sub(r"^(?:\s*(?:P\d+ )?\d+: |\[\d+,\d+\]<(?:stdout|stderr|stddiag)>: ?)", "", text)
    text = re.sub(r"^\([^)]*pid=\d+[^)]*\)\s*", "", text)
    return re.sub(r"^\[rank\d+\]:\s*", "", text)


@pytest.mark.parametrize(
    "prefix",
    ["", "[rank3]:", "[rank3]: ", "12: ", "  7: ", "P1 4: ", "[1,6]<stderr>:", "[1,6]<stdout>: [rank6]: ",
     "(RayWorker pid=12, ip=10.0.0.1) ", "(pid=9) [rank5]:", "3: [rank3]:", "(x) "],
)  # fmt: skip
@pytest.mark.parametrize("ending", ENDINGS)
def test_inventory_prefix_removal_equals_plain_substitutions(prefix: str, ending: str) -> None:
    line = "gpu-a01:23450:23962 [0] NCCL INFO ncclCommInitRank comm 0x55d3 rank 3 nranks 16" + ending
    for text in (prefix + line, prefix, prefix + "[rank4]:[rank5]:" + line, prefix + "(pid=3)" + line):
        assert text[inventory_sink._prefixes_end(text) :] == _after_prefixes_plain(text)
        host = re.search(r"^(?P<host>[A-Za-z0-9][\w.\-]*):\d+:\d+ \[\d+\] NCCL ", _after_prefixes_plain(text))
        got = inventory_sink._NCCL_HOST.match(text, inventory_sink._prefixes_end(text))
        assert (got and got.group("host")) == (host and host.group("host"))
