"""fetch_ais_logs against a real loopback HTTP server that behaves like an AIS cluster (tests/fake_ais_server.py).

Each test is one situation a user meets: a healthy cluster, a node that keeps failing, a slow node, a hostile
archive, a wrong token, a second run into the same directory, a cluster that cannot be reached.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from fake_ais_server import FakeAis, FakeNode, Member, ais_log_text, make_archive, serve

from debug_training_logs.ais_fetch import fetch_ais_logs
from debug_training_logs.ais_fetch.config import Secret, parse_bool, resolve_config
from debug_training_logs.ais_fetch.extract import ArchiveError, ExtractLimits, safe_extract
from debug_training_logs.errors import UserInputError
from debug_training_logs.progress import reporting_to

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQtZm9yLXRlc3Rz.Zm9vYmFyYmF6cXV4LXNpZ25hdHVyZQ"


def _cluster(**kw: object) -> FakeAis:
    nodes = [
        FakeNode.typical("Rw3pX9kd", "proxy", "ais-proxy-0"),
        FakeNode.typical("hJkL0aBc", "target", "ais-target-0"),
        FakeNode.typical("mN4qZ7Lb", "target", "ais-target-1"),
    ]
    return FakeAis(nodes, **kw)  # type: ignore[arg-type]


def _env(endpoint: str | None = None, token: str | None = TOKEN) -> dict[str, str]:
    env: dict[str, str] = {}
    if endpoint:
        env["AIS_ENDPOINT"] = endpoint
    if token:
        env["AIS_AUTHN_TOKEN"] = token
    return env


def _no_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return home


def _names(dest: Path) -> set[str]:
    return {p.relative_to(dest).as_posix() for p in dest.rglob("*")}


# --- a healthy cluster ----------------------------------------------------------------------------------------------


def test_every_proxy_and_target_is_downloaded_and_extracted_like_the_cli(tmp_path: Path) -> None:
    cluster = _cluster(token=TOKEN)
    dest = tmp_path / "ais_logs"  # does not exist yet: created
    events: list[tuple[float, float | None, str | None]] = []
    with serve(cluster) as url, reporting_to(lambda d, t, m: events.append((d, t, m))):
        res = fetch_ais_logs(dest, env=_env(url), home=_no_home(tmp_path))

    assert res.cluster_reachable and res.nodes_ok == 3 and res.nodes_failed == 0
    assert [(n.daemon, n.status) for n in res.nodes] == [
        ("p[Rw3pX9kd]", "ok"),
        ("t[hJkL0aBc]", "ok"),
        ("t[mN4qZ7Lb]", "ok"),
    ]
    info = dest / "aistarget-hJkL0aBc" / "aistarget.ais-target-0.INFO.0521-143022.1"
    assert info.read_bytes() == ais_log_text("target", "hJkL0aBc", "ais-target-0")
    assert (dest / "aistarget-hJkL0aBc.tar.gz").is_file()
    assert (dest / "aisproxy-Rw3pX9kd" / "aisproxy.ais-proxy-0.ERROR.0521-143022.1").is_file()
    assert int(info.stat().st_mtime) == 1_747_837_822  # the archive's mtime: when AIS last wrote the file
    assert oct(info.stat().st_mode & 0o777) == "0o644"
    target = next(n for n in res.nodes if n.node_id == "hJkL0aBc")
    assert {f.path for f in target.files} == {
        "aistarget-hJkL0aBc/aistarget.ais-target-0.INFO.0521-143022.1",
        "aistarget-hJkL0aBc/aistarget.ais-target-0.ERROR.0521-143022.1",
    }
    assert target.archive == "aistarget-hJkL0aBc.tar.gz" and target.extracted_dir == "aistarget-hJkL0aBc"
    assert all(f.mtime_utc == "2025-05-21T14:30:22+00:00" for f in target.files)
    # no temporary names left behind
    assert not [n for n in _names(dest) if n.startswith(".")]
    # the request is the one the CLI/SDK make
    reqs = cluster.log_requests("hJkL0aBc")
    assert len(reqs) == 1 and reqs[0].authorized
    assert reqs[0].query == {"what": "log", "severity": "info", "all": "true"}
    # one progress event per node, ending at total (the indexer reports its own progress afterwards)
    node_events = [e for e in events if e[1] == 3]
    assert [d for d, _, _ in node_events][-3:] == [1, 2, 3]
    assert any("t[mN4qZ7Lb]" in (m or "") for _, _, m in events)
    assert res.next_steps[0] == f"ais_counter_deltas(ais_dir={str(dest.resolve())!r})"
    assert any(s.startswith("align_timezones(") for s in res.next_steps)
    assert res.manual_fallback == []
    assert "3 of 3 AIS nodes (1 proxy, 2 targets)" in res.summary
    if importlib.util.find_spec("debug_training_logs.analysis.ais_index") is not None:
        assert res.ais_index is not None
        assert [d.daemon for d in res.ais_index.daemons] == ["p[Rw3pX9kd]", "t[hJkL0aBc]", "t[mN4qZ7Lb]"]
        info_files = [f for f in res.ais_index.daemons[1].files if f.severity == "INFO"]
        assert len(info_files) == 1 and (info_files[0].start or "").startswith("2025-05-21T14:30:22")


def test_current_log_only_is_saved_under_the_cli_name_without_extraction(tmp_path: Path) -> None:
    cluster = _cluster()
    with serve(cluster) as url:
        res = fetch_ais_logs(
            tmp_path / "d", include_rotated=False, severity="w", env=_env(url), home=_no_home(tmp_path)
        )
    dest = tmp_path / "d"
    assert res.nodes_ok == 3 and res.severity == "warning"
    assert (dest / "aistarget-mN4qZ7Lb").read_bytes() == ais_log_text("target", "mN4qZ7Lb", "ais-target-1")
    assert not list(dest.glob("*.tar.gz"))
    assert cluster.log_requests("mN4qZ7Lb")[0].query == {"what": "log", "severity": "warning"}


def test_requested_nodes_only_in_log_notation_and_unknown_ids_reported(tmp_path: Path) -> None:
    cluster = _cluster()
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / ".aistarget-old.x1y2.part").write_bytes(b"left by a killed run")
    with serve(cluster) as url:
        res = fetch_ais_logs(dest, nodes=["t[mN4qZ7Lb]", "nope42"], env=_env(url), home=_no_home(tmp_path))
        assert [(n.node_id, n.status) for n in res.nodes] == [("mN4qZ7Lb", "ok"), ("nope42", "failed")]
        assert "not in the cluster map" in (res.nodes[1].reason or "")
        assert cluster.log_requests("hJkL0aBc") == [] and cluster.log_requests("Rw3pX9kd") == []
        assert any("interrupted earlier fetch" in w and ".aistarget-old.x1y2.part" in w for w in res.warnings)
        # an empty list means every node (MCP clients send [] for "no filter")
        res_all = fetch_ais_logs(dest, nodes=[], env=_env(url), home=_no_home(tmp_path))
    assert [n.status for n in res_all.nodes] == ["ok", "ok", "skipped"]


# --- hostile archives -----------------------------------------------------------------------------------------------


def test_hostile_archive_members_are_refused_with_reasons_and_nothing_escapes(tmp_path: Path) -> None:
    good = b"Started up at 2025/05/21 14:30:22, host ais-target-9, go1.22.3 for linux/amd64\n"
    evil = make_archive(
        [
            Member("aistarget.ais-target-9.INFO.0521-143022.1", good),
            Member("../evil", b"escaped"),
            Member("/abs/path", b"absolute"),
            Member("passwd", kind="symlink", linkname="/etc/passwd"),
            Member("up", kind="symlink", linkname="../../outside"),
            Member("hard", kind="hardlink", linkname="../../etc/shadow"),
            Member("pipe", kind="fifo"),
            Member("tty", kind="chardev"),
            Member("huge.INFO", size_override=3 << 20),  # 3 MiB of zeros, above the 1 MiB cap
            Member("aistarget.ais-target-9.ERROR.0521-143022.1", b"after the huge one\n"),
        ]
    )
    cluster = FakeAis([FakeNode("bAdArch1", "target", archive=evil)])
    outer = tmp_path / "outer"
    outer.mkdir()
    dest = outer / "d"
    with serve(cluster) as url:
        res = fetch_ais_logs(dest, max_member_bytes=1 << 20, env=_env(url), home=_no_home(tmp_path))

    node = res.nodes[0]
    assert node.status == "ok"
    extracted = dest / "aistarget-bAdArch1"
    assert sorted(p.name for p in extracted.iterdir()) == [
        "aistarget.ais-target-9.ERROR.0521-143022.1",
        "aistarget.ais-target-9.INFO.0521-143022.1",
    ]
    reasons = {r.name: r.reason for r in node.refused}
    assert "'..'" in reasons["../evil"]
    assert "absolute path" in reasons["/abs/path"]
    assert "points outside" in reasons["passwd"] and "/etc/passwd" in reasons["passwd"]
    assert "points outside" in reasons["up"]
    assert "hard link" in reasons["hard"] and "points outside" in reasons["hard"]
    assert "FIFO" in reasons["pipe"]
    assert "device" in reasons["tty"]
    assert "cap" in reasons["huge.INFO"] and str(3 << 20) in reasons["huge.INFO"]
    # nothing was written outside dest, not even next to it
    assert sorted(p.name for p in outer.iterdir()) == ["d"]
    assert not (tmp_path / "evil").exists() and not Path("/abs/path").exists()
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert "8 archive members refused" in res.summary


def test_total_cap_per_node_refuses_members_beyond_it(tmp_path: Path) -> None:
    archive = make_archive([Member(f"aistarget.h.INFO.0521-14302{i}.1", bytes(600)) for i in range(4)])
    assert len(archive) < 1300  # the download fits the cap; the extracted total (2400 bytes) does not
    cluster = FakeAis([FakeNode("capNode1", "target", archive=archive)])
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", max_node_bytes=1300, env=_env(url), home=_no_home(tmp_path))
    node = res.nodes[0]
    assert node.status == "ok" and node.extracted_bytes == 1200
    assert [f.path.rsplit(".", 2)[-2][-1] for f in node.files] == ["0", "1"]
    assert len(node.refused) == 2 and all("above the cap of 1300 bytes" in r.reason for r in node.refused)


def test_a_download_beyond_the_node_cap_is_refused_and_removed(tmp_path: Path) -> None:
    archive = make_archive([Member("aistarget.h.INFO.0521-143020.1", os.urandom(5000))])
    cluster = FakeAis([FakeNode("bigNode1", "target", archive=archive)])
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", max_node_bytes=2000, env=_env(url), home=_no_home(tmp_path))
    node = res.nodes[0]
    assert node.status == "failed" and "larger than the cap of 2000 bytes" in (node.reason or "")
    assert node.attempts == 1 and _names(tmp_path / "d") == set()


def test_archive_bomb_stops_reading_at_the_scan_limit(tmp_path: Path) -> None:
    archive_path = tmp_path / "bomb.tar.gz"
    archive_path.write_bytes(
        make_archive([Member("a.INFO", size_override=8 << 20), Member("b.INFO", b"never reached")])
    )
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    rep = safe_extract(
        archive_path, out, ExtractLimits(max_total_bytes=1 << 20, max_member_bytes=1 << 20, max_members=100)
    )
    assert time.monotonic() - t0 < 5
    assert rep.files == [] and rep.stopped and "archive bomb guard" in rep.stopped
    assert [r.name for r in rep.refused] == ["a.INFO"]


def test_truncated_or_foreign_archive_is_an_archive_error(tmp_path: Path) -> None:
    data = make_archive([Member("x.INFO", os.urandom(200_000))])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "o1"
    out.mkdir()
    with pytest.raises(ArchiveError) as info:
        safe_extract(cut, out)
    assert info.value.damaged
    plain = tmp_path / "plain.tar.gz"
    plain.write_bytes(b"I 14:30:22.000001 not an archive\n")
    out2 = tmp_path / "o2"
    out2.mkdir()
    with pytest.raises(ArchiveError) as info2:
        safe_extract(plain, out2)
    assert not info2.value.damaged and "not a gzip" in str(info2.value)


# --- failures, retries and time limits ------------------------------------------------------------------------------


def test_a_node_that_keeps_failing_is_given_up_on_in_time_and_the_others_are_fetched(tmp_path: Path) -> None:
    cluster = _cluster()
    cluster.nodes.append(FakeNode("brKn500x", "target", behavior="fail"))
    dest = tmp_path / "d"
    t0 = time.monotonic()
    with serve(cluster) as url:
        res = fetch_ais_logs(dest, timeout_s=1.5, env=_env(url), home=_no_home(tmp_path))
    elapsed = time.monotonic() - t0
    assert elapsed < 4.0, elapsed
    bad = next(n for n in res.nodes if n.node_id == "brKn500x")
    assert bad.status == "failed" and bad.http_status == 500
    assert "HTTP 500" in (bad.reason or "") and "write too long" in (bad.reason or "")
    assert "gave up after" in (bad.reason or "") and bad.attempts >= 2
    assert res.nodes_ok == 3 and res.nodes_failed == 1
    # nothing of the failed node on disk, and no temporary files
    assert not [n for n in _names(dest) if "brKn500x" in n or n.startswith(".")]
    assert "1 failed" in res.summary and "t[brKn500x]" in res.summary
    assert any("nodes=['brKn500x']" in s for s in res.next_steps)


def test_a_slow_node_is_given_up_on_within_the_timeout(tmp_path: Path) -> None:
    cluster = FakeAis(
        [
            FakeNode.typical("fastNod1", "target", "ais-target-0"),
            FakeNode.typical("slowNod1", "target", "ais-target-1", behavior="slow", delay_s=30),
        ]
    )
    t0 = time.monotonic()
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", timeout_s=1.0, env=_env(url), home=_no_home(tmp_path))
    assert time.monotonic() - t0 < 3.0
    slow = next(n for n in res.nodes if n.node_id == "slowNod1")
    assert slow.status == "failed" and "did not answer in time" in (slow.reason or "")
    assert slow.seconds <= 1.6
    assert next(n for n in res.nodes if n.node_id == "fastNod1").status == "ok"


def test_a_node_that_fails_twice_then_answers_is_retried(tmp_path: Path) -> None:
    cluster = FakeAis([FakeNode.typical("flaky001", "target", "ais-target-0", behavior="flaky", fail_first=2)])
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", timeout_s=20, env=_env(url), home=_no_home(tmp_path))
    node = res.nodes[0]
    assert node.status == "ok" and node.attempts == 3 and node.reason is None and node.http_status is None


def test_a_truncated_transfer_is_retried_then_reported_without_leftovers(tmp_path: Path) -> None:
    node = FakeNode.typical("trunc001", "target", "ais-target-0", behavior="truncated")
    cluster = FakeAis([node])
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", timeout_s=1.5, env=_env(url), home=_no_home(tmp_path))
    r = res.nodes[0]
    assert r.status == "failed" and r.attempts >= 2
    assert "bytes short" in (r.reason or "") or "closed" in (r.reason or "")
    assert _names(tmp_path / "d") == set()


def test_unreachable_cluster_gives_the_manual_cli_commands(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    res = fetch_ais_logs(
        tmp_path / "d", endpoint=f"http://127.0.0.1:{port}", timeout_s=1.0, env={}, home=_no_home(tmp_path)
    )
    assert time.monotonic() - t0 < 3.0
    assert not res.cluster_reachable and res.nodes == []
    assert "cannot reach" in (res.error or "") and "connection refused" in (res.error or "")
    dest = str((tmp_path / "d").resolve())
    assert res.manual_fallback[0] == f"export AIS_ENDPOINT=http://127.0.0.1:{port}"
    assert res.manual_fallback[1].startswith("export AIS_AUTHN_TOKEN=<token>")
    assert f"mkdir -p {dest} && ais log get cluster {dest} --yes" in res.manual_fallback
    assert any("tar xzf" in line for line in res.manual_fallback)


def test_https_fallback_mentions_tls_variables(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = fetch_ais_logs(
        tmp_path / "d", endpoint=f"https://127.0.0.1:{port}", timeout_s=1.0, env={}, home=_no_home(tmp_path)
    )
    text = "\n".join(res.manual_fallback)
    assert "AIS_CLIENT_CA" in text and "AIS_SKIP_VERIFY_CRT=true" in text and "AIS_SERVER_CRT" not in text


# --- never overwrite ------------------------------------------------------------------------------------------------


def test_second_run_skips_what_is_there_and_overwrites_nothing(tmp_path: Path) -> None:
    cluster = _cluster()
    dest = tmp_path / "d"
    with serve(cluster) as url:
        first = fetch_ais_logs(dest, env=_env(url), home=_no_home(tmp_path))
        f = dest / "aistarget-hJkL0aBc" / "aistarget.ais-target-0.INFO.0521-143022.1"
        f.write_bytes(b"edited by the user\n")
        before = len(cluster.log_requests())
        second = fetch_ais_logs(dest, env=_env(url), home=_no_home(tmp_path))
        assert len(cluster.log_requests()) == before  # nothing downloaded again
    assert first.nodes_ok == 3
    assert second.nodes_skipped == 3 and second.nodes_ok == 0
    assert f.read_bytes() == b"edited by the user\n"
    node = next(n for n in second.nodes if n.node_id == "hJkL0aBc")
    assert "already in dest_dir" in (node.reason or "") and len(node.files) == 2
    assert "3 already there" in second.summary


def test_a_file_already_named_like_the_archive_is_kept_and_the_node_skipped(tmp_path: Path) -> None:
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "aistarget-hJkL0aBc.tar.gz").write_bytes(b"mine")
    cluster = _cluster()
    with serve(cluster) as url:
        res = fetch_ais_logs(dest, env=_env(url), home=_no_home(tmp_path))
    assert (dest / "aistarget-hJkL0aBc.tar.gz").read_bytes() == b"mine"
    assert [n.status for n in res.nodes] == ["ok", "skipped", "ok"]
    assert cluster.log_requests("hJkL0aBc") == []


# --- tokens ---------------------------------------------------------------------------------------------------------


def test_wrong_token_gives_a_clear_401_message_without_the_token(tmp_path: Path) -> None:
    wrong = "wrong-" + TOKEN[6:]
    cluster = _cluster(token=TOKEN)
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", env=_env(url, token=wrong), home=_no_home(tmp_path))
    assert not res.cluster_reachable
    err = res.error or ""
    assert "HTTP 401" in err and "invalid token" in err
    assert "AIS_AUTHN_TOKEN" in err and "AIS_AUTHN_TOKEN_FILE" in err and "auth.token" in err
    assert "bearer token from AIS_AUTHN_TOKEN" in err
    assert any("<token>" in line for line in res.manual_fallback)
    assert wrong not in res.model_dump_json() and TOKEN[8:40] not in res.model_dump_json()


def test_missing_token_on_node_requests_is_reported_per_node(tmp_path: Path) -> None:
    cluster = _cluster(token=TOKEN, smap_requires_token=False)
    with serve(cluster) as url:
        res = fetch_ais_logs(tmp_path / "d", env=_env(url, token=None), home=_no_home(tmp_path))
    assert res.cluster_reachable and res.nodes_failed == 3
    r = res.nodes[0]
    assert r.http_status == 401 and r.attempts == 1  # not retried
    assert "token is missing" in (r.reason or "") and "this run: no token" in (r.reason or "")
    assert res.manual_fallback  # nothing fetched: the CLI route is offered


def test_the_token_never_appears_in_results_errors_logs_or_output(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    cluster = _cluster(token=TOKEN)
    cluster.nodes.append(FakeNode("leaky001", "target", behavior="leak"))  # echoes the Authorization header
    cluster.nodes.append(FakeNode("brKn500y", "target", behavior="fail"))
    texts: list[str] = []
    with serve(cluster) as url:
        userinfo_url = url.replace("http://", "http://admin:hunter2secret@")
        allowed = {**_env(None), "DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS": url}  # the user allowed this endpoint
        res = fetch_ais_logs(tmp_path / "d", endpoint=userinfo_url, timeout_s=1.0, env=allowed, home=_no_home(tmp_path))
        texts.append(res.model_dump_json())
        res_bad = fetch_ais_logs(tmp_path / "d2", env=_env(url, token="bad" + TOKEN), home=_no_home(tmp_path))
        texts.append(res_bad.model_dump_json())
        with reporting_to(lambda d, t, m: texts.append(str(m))):
            fetch_ais_logs(tmp_path / "d3", timeout_s=1.0, env=_env(url), home=_no_home(tmp_path))
    leaky = next(n for n in res.nodes if n.node_id == "leaky001")
    assert leaky.status == "failed" and "<redacted>" in (leaky.reason or "")
    assert res.nodes_ok == 3  # the token was sent: the argument's endpoint is on the user's allow-list
    assert any("user:password part was ignored" in w for w in res.warnings)
    # exceptions: a token the HTTP layer cannot send, and a config repr
    with pytest.raises(UserInputError) as info:
        resolve_config("http://127.0.0.1:1", env={"AIS_AUTHN_TOKEN": TOKEN + "\r\nX-Evil: 1"})
    texts.append(str(info.value))
    cfg = resolve_config("http://127.0.0.1:1", env={"AIS_AUTHN_TOKEN": TOKEN})
    texts += [repr(cfg), str(cfg.token), f"{cfg.token}"]
    out, err = capsys.readouterr()
    texts += [out, err]
    texts += [r.getMessage() for r in caplog.records]
    blob = "\n".join(texts)
    for secret in (TOKEN, TOKEN[:20], TOKEN[-20:], "hunter2secret"):
        assert secret not in blob


def test_the_token_is_not_sent_to_an_endpoint_other_than_ais_endpoint(tmp_path: Path) -> None:
    cluster = _cluster(token=TOKEN)
    with serve(cluster) as url:
        other = url.replace("127.0.0.1", "localhost")
        res = fetch_ais_logs(tmp_path / "d", endpoint=other, env=_env(url), home=_no_home(tmp_path))
    assert not res.cluster_reachable and "HTTP 401" in (res.error or "")
    assert any("token was not sent" in w for w in res.warnings)
    assert all(not r.authorized for r in cluster.requests)


# --- configuration --------------------------------------------------------------------------------------------------


def test_token_file_and_cli_token_file_are_read(tmp_path: Path) -> None:
    home = _no_home(tmp_path)
    (home / ".config/ais/cli").mkdir(parents=True)
    (home / ".config/ais/cli/auth.token").write_text(json.dumps({"token": TOKEN}))
    cfg = resolve_config(None, env={"AIS_ENDPOINT": "http://h:1"}, home=home)
    assert cfg.token is not None and cfg.token.reveal() == TOKEN and cfg.token_source.endswith("auth.token")
    f = tmp_path / "tok.json"
    f.write_text(json.dumps({"token": "other.tok.en"}))
    cfg2 = resolve_config(None, env={"AIS_ENDPOINT": "http://h:1", "AIS_AUTHN_TOKEN_FILE": str(f)}, home=home)
    assert cfg2.token is not None and cfg2.token.reveal() == "other.tok.en"
    assert cfg2.token_source == "AIS_AUTHN_TOKEN_FILE"
    with pytest.raises(UserInputError, match="does not exist"):
        resolve_config("http://h:1", env={"AIS_AUTHN_TOKEN_FILE": str(tmp_path / "missing")}, home=home)
    f.write_text('{"tok": 1}')
    with pytest.raises(UserInputError, match="not JSON of the form"):
        resolve_config(None, env={"AIS_ENDPOINT": "http://h:1", "AIS_AUTHN_TOKEN_FILE": str(f)}, home=home)
    assert "secret" not in repr(Secret("secret")) and "secret" not in str(Secret("secret"))


def test_endpoint_and_tls_settings(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="No AIS endpoint"):
        resolve_config(None, env={}, home=tmp_path)
    with pytest.raises(UserInputError, match="needs a scheme"):
        resolve_config("10.0.0.1:8080", env={}, home=tmp_path)
    cfg = resolve_config(None, env={"AIS_ENDPOINT": "https://ais.example.com/"}, home=tmp_path)
    assert cfg.endpoint.display == "https://ais.example.com:443" and cfg.endpoint_source == "AIS_ENDPOINT"
    assert cfg.ssl_context is not None and cfg.ssl_context.check_hostname
    skip = resolve_config("https://h", env={"AIS_SKIP_VERIFY_CRT": "Yes"}, home=tmp_path)
    assert skip.ssl_context is not None and not skip.ssl_context.check_hostname
    assert "skipped" in skip.tls_description
    with pytest.raises(UserInputError, match="AIS_CLIENT_CA"):
        resolve_config("https://h", env={"AIS_CLIENT_CA": str(tmp_path / "nope.pem")}, home=tmp_path)
    half = resolve_config("https://h", env={"AIS_CRT": "/x.crt"}, home=tmp_path)
    assert any("Only one of AIS_CRT" in w for w in half.warnings)
    assert [parse_bool(v) for v in ("y", "on", "TRUE", "1", "no", "0", "", "maybe")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
        None,
    ]


def test_bad_arguments_are_user_errors(tmp_path: Path) -> None:
    env = {"AIS_ENDPOINT": "http://127.0.0.1:1"}
    home = _no_home(tmp_path)
    with pytest.raises(UserInputError, match="severity"):
        fetch_ais_logs(tmp_path / "d", severity="debug", env=env, home=home)
    with pytest.raises(UserInputError, match="parent of dest_dir"):
        fetch_ais_logs(tmp_path / "no" / "such" / "d", env=env, home=home)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match="is a file"):
        fetch_ais_logs(tmp_path / "file", env=env, home=home)
    with pytest.raises(UserInputError, match="timeout_s"):
        fetch_ais_logs(tmp_path / "d", timeout_s=0, env=env, home=home)
    with pytest.raises(UserInputError, match="No AIS endpoint"):
        fetch_ais_logs(tmp_path / "d", env={}, home=home)
    assert not (tmp_path / "d").exists()  # nothing created for a call that could not start


def test_safe_extract_keeps_the_first_of_duplicate_names(tmp_path: Path) -> None:
    p = tmp_path / "dup.tar.gz"
    p.write_bytes(make_archive([Member("a.INFO", b"first"), Member("a.INFO", b"second")]))
    out = tmp_path / "o"
    out.mkdir()
    rep = safe_extract(p, out)
    assert (out / "a.INFO").read_bytes() == b"first"
    assert [r.reason for r in rep.refused] == ["a file of this name was already extracted; first copy kept"]
    with tarfile.open(p) as tf:  # sanity: the fixture really has two members
        assert len(tf.getmembers()) == 2


# --- the two front ends: CLI subprocess and MCP in memory -----------------------------------------------------------


def test_cli_fetch_ais_prints_the_result_json_and_never_the_token(tmp_path: Path) -> None:
    cluster = _cluster(token=TOKEN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIS_")}
    env.update(HOME=str(_no_home(tmp_path)), AIS_AUTHN_TOKEN=TOKEN)
    dest = tmp_path / "ais"
    with serve(cluster) as url:
        env["AIS_ENDPOINT"] = url  # configured out of band: the token may go there
        proc = subprocess.run(
            [sys.executable, "-m", "debug_training_logs", "-vv", "fetch-ais", str(dest), "--endpoint", url, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["nodes_ok"] == 3 and out["dest_dir"] == str(dest.resolve())
    assert (dest / "aistarget-mN4qZ7Lb" / "aistarget.ais-target-1.INFO.0521-143022.1").is_file()
    assert TOKEN not in proc.stdout + proc.stderr and TOKEN[:20] not in proc.stdout + proc.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "fetch-ais", str(tmp_path / "no" / "x"), "--endpoint", url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad.returncode == 2 and "parent of dest_dir" in bad.stderr


@pytest.mark.anyio
async def test_mcp_tool_fetches_reports_progress_and_keeps_to_the_allowed_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp import Client

    from debug_training_logs.server.app import create_server

    monkeypatch.setenv("AIS_AUTHN_TOKEN", TOKEN)
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    monkeypatch.delenv("AIS_AUTHN_TOKEN_FILE", raising=False)
    monkeypatch.setenv("HOME", str(_no_home(tmp_path)))
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    cluster = _cluster(token=TOKEN)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    with serve(cluster) as url:
        monkeypatch.setenv("AIS_ENDPOINT", url)  # configured out of band: the token may go there
        async with Client(create_server([allowed])) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            ann = tools["fetch_ais_logs"].annotations
            assert ann is not None and ann.read_only_hint is False and ann.open_world_hint is True
            assert ann.idempotent_hint is True
            res = await client.call_tool(
                "fetch_ais_logs",
                {"dest_dir": str(allowed / "ais"), "endpoint": url, "timeout_s": 10},
                progress_callback=on_progress,
            )
            assert res.is_error is False, res.content
            sc = res.structured_content
            assert sc is not None and sc["nodes_ok"] == 3 and TOKEN not in json.dumps(sc)
            outside = await client.call_tool(
                "fetch_ais_logs", {"dest_dir": str(tmp_path / "elsewhere"), "endpoint": url}
            )
            assert outside.is_error and "outside the directories" in outside.content[0].text  # type: ignore[union-attr]
            assert not (tmp_path / "elsewhere").exists()
    assert seen and seen == sorted(seen)
    assert len(cluster.log_requests()) == 3


# --- TLS ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_tls_untrusted_certificate_then_client_ca_then_skip_verify(
    tmp_path: Path, self_signed: tuple[Path, Path]
) -> None:
    cert, key = self_signed
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    cluster = _cluster()
    with serve(cluster, tls=server_ctx) as url:
        assert url.startswith("https://")
        t0 = time.monotonic()
        untrusted = fetch_ais_logs(tmp_path / "a", env=_env(url), home=_no_home(tmp_path))
        assert time.monotonic() - t0 < 5  # not retried: a certificate does not fix itself
        assert not untrusted.cluster_reachable
        assert "not trusted" in (untrusted.error or "") and "AIS_CLIENT_CA" in (untrusted.error or "")
        with_ca = fetch_ais_logs(tmp_path / "b", env={**_env(url), "AIS_CLIENT_CA": str(cert)}, home=_no_home(tmp_path))
        assert with_ca.nodes_ok == 3 and f"AIS_CLIENT_CA={cert}" in with_ca.tls
        skip = fetch_ais_logs(tmp_path / "c", env={**_env(url), "AIS_SKIP_VERIFY_CRT": "yes"}, home=_no_home(tmp_path))
        assert skip.nodes_ok == 3 and "skipped" in skip.tls
    with serve(_cluster()) as plain_url:  # https:// to a plain-HTTP port: a clear message at once, no retries
        t0 = time.monotonic()
        wrong = fetch_ais_logs(
            tmp_path / "e", endpoint=plain_url.replace("http://", "https://"), env={}, home=_no_home(tmp_path)
        )
        assert time.monotonic() - t0 < 5 and "TLS handshake" in (wrong.error or "")


# --- the token never leaves for a stranger (issue 16) ---------------------------------------------------------------


def test_token_is_withheld_from_an_argument_endpoint_when_nothing_is_configured(tmp_path: Path) -> None:
    stranger = _cluster(token=TOKEN, smap_requires_token=False)
    with serve(stranger) as url:
        res = fetch_ais_logs(tmp_path / "d", endpoint=url, env=_env(None), home=_no_home(tmp_path))
    assert stranger.requests and not any(r.sent_authorization for r in stranger.requests)
    assert res.nodes_ok == 0 and "withheld" in res.auth
    assert any("DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS" in w for w in res.warnings)


def test_token_goes_to_the_configured_endpoints_only(tmp_path: Path) -> None:
    home = _no_home(tmp_path)
    mine, stranger = _cluster(token=TOKEN), _cluster(token=TOKEN, smap_requires_token=False)
    with serve(mine) as my_url, serve(stranger) as other_url:
        (home / ".config/ais/cli").mkdir(parents=True)
        (home / ".config/ais/cli/cli.json").write_text(json.dumps({"cluster": {"url": my_url}}))
        # the ais CLI config's cluster.url: the default endpoint, and the token may go there as an argument too
        by_default = fetch_ais_logs(tmp_path / "a", env=_env(None), home=home)
        as_argument = fetch_ais_logs(tmp_path / "b", endpoint=my_url, env=_env(None), home=home)
        elsewhere = fetch_ais_logs(tmp_path / "c", endpoint=other_url, env=_env(None), home=home)
        before_allowed = list(stranger.requests)
        allowed = fetch_ais_logs(
            tmp_path / "e",
            endpoint=other_url,
            env={**_env(None), "DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS": f"http://x:1, {other_url}"},
            home=home,
        )
    assert by_default.endpoint_source == "ais CLI config (cluster.url)" and by_default.nodes_ok == 3
    assert as_argument.nodes_ok == 3 and all(r.sent_authorization for r in mine.requests)
    assert elsewhere.nodes_ok == 0 and "withheld" in elsewhere.auth
    assert allowed.nodes_ok == 3  # the user listed that endpoint explicitly
    assert before_allowed and not any(r.sent_authorization for r in before_allowed)


@pytest.mark.anyio
async def test_mcp_endpoint_from_log_text_never_gets_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp import Client

    from debug_training_logs.server.app import create_server

    monkeypatch.setenv("AIS_AUTHN_TOKEN", TOKEN)
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    monkeypatch.delenv("DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS", raising=False)
    monkeypatch.setenv("HOME", str(_no_home(tmp_path)))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    attacker = _cluster(token=TOKEN, smap_requires_token=False)
    with serve(attacker) as url:
        async with Client(create_server([tmp_path])) as client:
            res = await client.call_tool("fetch_ais_logs", {"dest_dir": str(tmp_path / "ais"), "endpoint": url})
    assert attacker.requests and not any(r.sent_authorization for r in attacker.requests)
    assert res.structured_content is not None and "withheld" in res.structured_content["auth"]


def test_refused_connection_fails_at_once_and_the_cli_exits_nonzero(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIS_")}
    env["HOME"] = str(_no_home(tmp_path))
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "debug_training_logs",
            "fetch-ais",
            str(tmp_path / "d"),
            "--endpoint",
            f"http://127.0.0.1:{port}",
            "--timeout-s",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert time.monotonic() - t0 < 30  # it spent the whole 60 s budget retrying before
    assert proc.returncode == 1
    assert "nothing was fetched" in proc.stderr and "connection refused" in proc.stderr
    none = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "fetch-ais", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert none.returncode == 2 and "--endpoint http://HOST:PORT" in none.stderr
