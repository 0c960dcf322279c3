"""Demo of fetch_ais_logs against the loopback fake AIS cluster of the tests: a healthy proxy and target, a node
that always fails, and a node whose archive is hostile; once through the CLI, once through the MCP Inspector CLI.

    .venv/bin/python scripts/demo_fetch_ais.py        (needs `npm install --prefix tests/e2e` for the Inspector part)
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)
from tests.fake_ais_server import FakeAis, FakeNode, Member, ais_log_text, make_archive, serve  # noqa: E402

bad = make_archive(
    [
        Member("aistarget.ais-target-9.INFO.0521-143022.1", ais_log_text("target", "tEvil", "ais-target-9")),
        Member("../evil.sh", b"echo pwned"),
        Member("/etc/cron.d/x", b"x"),
        Member("link", kind="symlink", linkname="/etc/passwd"),
        Member("huge.INFO", size_override=3 << 30),
    ]
)
cluster = FakeAis(
    nodes=[
        FakeNode.typical("pA1", "proxy", "ais-proxy-0"),
        FakeNode.typical("tB2", "target", "ais-target-0"),
        FakeNode("tDead", "target", behavior="fail"),
        FakeNode("tEvil", "target", archive=bad),
    ],
    token="s3cret-token-value",
)
dest = tempfile.mkdtemp() + "/ais"
with serve(cluster) as ep:
    env = {**os.environ, "AIS_AUTHN_TOKEN": "s3cret-token-value"}
    p = subprocess.run(
        [".venv/bin/debug-training-logs", "fetch-ais", dest, "--endpoint", ep, "--timeout-s", "3"],
        capture_output=True,
        text=True,
        env=env,
    )
    print(p.stdout[:2500])
    print("rc", p.returncode, "token in output:", "s3cret" in p.stdout + p.stderr)
    insp = "tests/e2e/node_modules/.bin/mcp-inspector"
    args = json.dumps({"dest_dir": dest + "2", "endpoint": ep, "timeout_s": 3})
    q = subprocess.run(
        [
            insp,
            "--cli",
            ".venv/bin/debug-training-logs",
            "serve",
            "--root",
            os.path.dirname(dest),
            "--",
            "--method",
            "tools/call",
            "--tool-name",
            "fetch_ais_logs",
            "--tool-args-json",
            args,
            "--format",
            "json",
            "-q",
        ],
        capture_output=True,
        text=True,
        env={**env, "HOME": tempfile.mkdtemp(), "MCP_INSPECTOR_SECRET_STORE": "memory"},
        timeout=120,
    )
    print("inspector rc", q.returncode, q.stderr[-300:])
    sc = json.loads(q.stdout)["result"]["structuredContent"]
    print(sc["summary"])
    for n in sc["nodes"]:
        print(
            n["node_id"],
            n["status"],
            (n["reason"] or "")[:120],
            [r["name"] + ": " + r["reason"][:60] for r in n["refused"]],
        )
    print("token in inspector output:", "s3cret" in q.stdout + q.stderr)
