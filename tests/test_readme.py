"""The README is the user's contract: CI runs exactly its install and test commands, and its example exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_exactly_the_readme_install_and_test_commands() -> None:
    blocks = _bash_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    install, example, test = blocks[0], blocks[1], blocks[2]
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    commands = [ln for ln in ci if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert commands == [install, test]
    assert "pytest" in test and "pip install" in install
    assert "analyze" in example


def test_readme_example_paths_exist() -> None:
    blocks = _bash_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    args = shlex.split(blocks[1])
    paths = [a for a in args if a.startswith("fixtures/")]
    assert paths, "the example should run on a bundled fixture"
    for p in paths:
        assert (ROOT / p).is_dir(), f"{p} is named in the README but not checked in"
