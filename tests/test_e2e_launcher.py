"""``scripts/serve.sh``, the plugin's server launcher: each way it finds the package starts a working server (checked
with the MCP client over stdio), it fails with install instructions when there is no package, and the user's project
directory plus ``DEBUG_TRAINING_LOGS_ROOTS`` are the directories the tools may read."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from e2e.support import REPO, write_data_stall_logs
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.anyio
LAUNCHER = REPO / "scripts" / "serve.sh"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _bin_dir(tmp_path: Path, **links: Path | str) -> Path:
    """A directory to put first on PATH holding only ``links`` (name -> target, or a shell script body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in links.items():
        if isinstance(target, Path):
            (bin_dir / name).symlink_to(target)
        else:
            (bin_dir / name).write_text(f"#!/bin/sh\n{target}\n")
            (bin_dir / name).chmod(0o755)
    return bin_dir


def _plugin_copy(tmp_path: Path, with_package: bool) -> Path:
    """A plugin root with the launcher (and optionally the package source) but no virtualenv."""
    root = tmp_path / "plugin"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(LAUNCHER, root / "scripts" / "serve.sh")
    if with_package:
        (root / "debug_training_logs").symlink_to(REPO / "debug_training_logs")
    return root


async def _serves(command: Path, env: dict[str, str], cwd: Path, logs: Path) -> tuple[bool, str]:
    """Start the server through ``command``; (job_overview on ``logs`` succeeded?, its summary or error text)."""
    params = StdioServerParameters(command=str(command), args=[], env=env, cwd=str(cwd))
    async with Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "job_overview" in tools
        assert [p.name for p in (await client.list_prompts()).prompts] == ["debug-training-logs"]
        result = await client.call_tool("job_overview", {"logs_dir": str(logs)})
    if result.is_error:
        return False, str(result.content)
    assert result.structured_content is not None
    return True, str(result.structured_content["summary"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The user's project (the server's cwd), holding the job's logs."""
    write_data_stall_logs(tmp_path / "project" / "logs")
    return tmp_path / "project"


async def test_uses_the_installed_command_on_path(tmp_path: Path, project: Path) -> None:
    bin_dir = _bin_dir(tmp_path, **{"debug-training-logs": VENV_BIN / "debug-training-logs"})
    root = _plugin_copy(tmp_path, with_package=False)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CLAUDE_PLUGIN_ROOT": str(root), "HOME": str(tmp_path)}
    ok, text = await _serves(root / "scripts" / "serve.sh", env, project, project / "logs")
    assert ok, text


async def test_uses_the_checkouts_virtualenv(tmp_path: Path, project: Path) -> None:
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip(f"no {REPO / '.venv'}: this launcher path needs the checkout's own virtualenv")
    env = {"PATH": "/usr/bin:/bin", "CLAUDE_PLUGIN_ROOT": str(REPO), "HOME": str(tmp_path)}
    ok, text = await _serves(LAUNCHER, env, project, project / "logs")
    assert ok, text


async def test_uses_python3_with_the_plugin_root_on_pythonpath(tmp_path: Path, project: Path) -> None:
    # The checkout's source found through PYTHONPATH by a python3 that has the dependencies (the test's python).
    bin_dir = _bin_dir(tmp_path, python3=f'exec "{sys.executable}" "$@"')
    root = _plugin_copy(tmp_path, with_package=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CLAUDE_PLUGIN_ROOT": str(root), "HOME": str(tmp_path)}
    ok, text = await _serves(root / "scripts" / "serve.sh", env, project, project / "logs")
    assert ok, text


def test_without_the_package_it_says_how_to_install(tmp_path: Path) -> None:
    bin_dir = _bin_dir(tmp_path, python3="exit 1")  # a python3 that cannot import the package
    root = _plugin_copy(tmp_path, with_package=False)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CLAUDE_PLUGIN_ROOT": str(root), "HOME": str(tmp_path)}
    if shutil.which("debug-training-logs", path=env["PATH"]):
        pytest.skip("debug-training-logs is installed system-wide, so the launcher always finds it")
    run = subprocess.run(
        [str(root / "scripts" / "serve.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 1 and run.stdout == ""
    assert "the Python package is not installed" in run.stderr and f'pip install "{root}"' in run.stderr


async def test_tools_read_the_project_and_the_extra_roots_only(tmp_path: Path, project: Path) -> None:
    elsewhere = write_data_stall_logs(tmp_path / "scratch" / "job" / "logs")
    base = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "CLAUDE_PLUGIN_ROOT": str(REPO), "HOME": str(tmp_path)}
    ok, text = await _serves(LAUNCHER, base, project, elsewhere)
    assert not ok and "outside the directories this server may access" in text
    extra = {**base, "DEBUG_TRAINING_LOGS_ROOTS": f"/nonexistent-root:{tmp_path / 'scratch'}"}
    ok, text = await _serves(LAUNCHER, extra, project, elsewhere)
    assert ok, text
