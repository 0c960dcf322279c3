"""Every command's output on every fixture and bench corpus, recorded by one checkout and compared with another's
(issue 33: a refactor must change no byte a user or an agent sees).

    python bench/same_outputs.py record OUT [--checkout PATH] [--bench] [--jobs 2]
    python bench/same_outputs.py compare OLD NEW

``record`` runs the checkout's own ``.venv/bin/debug-training-logs`` (this one by default) on every job under
``fixtures/`` and ``../shared/realworld`` (each directory holding a ``logs/``, with its ``ais/``, ``fr/`` and
``hang/`` when there) and, with ``--bench``, on the 1,024-rank corpus of ``bench/realistic.py``: ``analyze`` as
markdown, JSON and HTML, ``overview``, ``grep``, ``nccl``, ``timeline`` (``--json``), ``align`` and ``ais-deltas``
when there are AIS logs, and ``verify`` of the conclusion ``analyze`` reached. Each output goes to its own file
under OUT (stdout, stderr and exit status). The job paths are this checkout's, whichever checkout runs, so two
records differ only where the programs do. The history is off (``--no-history``) and the state directory is a fresh
one per run. ``compare`` prints every file that differs, with the first differing line, and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED_REALWORLD = REPO.parent / "shared" / "realworld"


def jobs(bench: bool) -> list[tuple[str, Path]]:
    """(name, job directory) of every job: each directory under fixtures/ and the shared real-world set with a
    logs/ in it, and the bench corpus when asked."""
    found: list[tuple[str, Path]] = []
    for root, label in ((REPO / "fixtures", "fixtures"), (SHARED_REALWORLD, "realworld")):
        if not root.is_dir():
            continue
        for logs in sorted(root.rglob("logs")):
            if logs.is_dir() and "logs" not in logs.parent.relative_to(root).parts:
                found.append((f"{label}/{logs.parent.relative_to(root)}", logs.parent))
    if bench:
        sys.path.insert(0, str(REPO / "bench"))
        from realistic import realistic_corpus

        logs, _ = realistic_corpus(REPO / "bench" / "out" / "real_1024", 1024, 1_000_000_000)
        found.append(("bench/real_1024", logs.parent))
    return found


def commands(job: Path, out: Path) -> list[tuple[str, list[str]]]:
    """(output name, arguments) of every command run on ``job``; ``verify`` comes last and reads what ``analyze
    --json`` wrote."""
    logs = str(job / "logs")
    ais = [str(job / "ais")] if (job / "ais").is_dir() else []
    extra: list[str] = []
    if (job / "fr").is_dir():
        extra += ["--fr-dir", str(job / "fr")]
    if (job / "hang").is_dir():
        extra += ["--hang-dir", str(job / "hang")]
    cmds = [
        ("analyze.md", ["analyze", logs, *ais, *extra, "--no-history"]),
        ("analyze.json", ["analyze", logs, *ais, *extra, "--no-history", "--json"]),
        ("analyze.html", ["analyze", logs, *ais, *extra, "--no-history", "--html", str(out / "page.html")]),
        ("overview.json", ["overview", logs, "--json"]),
        ("grep.json", ["grep", logs, "--json"]),
        ("nccl.json", ["nccl", logs, "--json"]),
        ("timeline.json", ["timeline", logs, *ais, "--json"]),
    ]
    if ais:
        cmds += [("align.json", ["align", logs, *ais, "--json"]), ("ais-deltas.json", ["ais-deltas", *ais, "--json"])]
    return cmds


def run(cli: Path, args: list[str], state: str) -> str:
    env = {**os.environ, "XDG_STATE_HOME": state, "DEBUG_TRAINING_LOGS_HISTORY": ""}
    env.pop("DEBUG_TRAINING_LOGS_HISTORY")
    p = subprocess.run([str(cli), *args], capture_output=True, text=True, env=env, timeout=600, check=False)
    return f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"


def record_job(cli: Path, name: str, job: Path, out: Path) -> None:
    where = out / name
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as state:
        for label, args in commands(job, where):
            (where / label).write_text(run(cli, args, state).replace(str(where / "page.html"), "PAGE.html"))
        conclusion = _conclusion(where / "analyze.json")
        if conclusion is not None:
            path = Path(state) / "conclusion.json"
            path.write_text(json.dumps(conclusion))
            (where / "verify.json").write_text(run(cli, ["verify", str(path), "--json"], state))
    html = where / "page.html"
    if html.exists():
        html.rename(where / "analyze.page.html")


def _conclusion(analyze_json: Path) -> dict[str, object] | None:
    text = analyze_json.read_text().split("--- stdout\n", 1)[1].split("\n--- stderr\n", 1)[0]
    try:
        result = json.loads(text)
    except ValueError:
        return None
    conclusion = result.get("conclusion") if isinstance(result, dict) else None
    return conclusion if isinstance(conclusion, dict) else None


def record(out: Path, checkout: Path, bench: bool, workers: int) -> None:
    cli = checkout / ".venv" / "bin" / "debug-training-logs"
    todo = jobs(bench)
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(lambda j: record_job(cli, j[0], j[1], out), todo):
            pass
    print(f"recorded {len(todo)} job(s) with {cli} into {out}")


def compare(old: Path, new: Path) -> int:
    names = sorted(
        {p.relative_to(old) for p in old.rglob("*") if p.is_file()}
        | {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    )
    differ = 0
    for name in names:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            differ += 1
            print(f"{name}: only in {'new' if not a.exists() else 'old'}")
            continue
        if a.read_bytes() == b.read_bytes():
            continue
        differ += 1
        la, lb = a.read_text().splitlines(), b.read_text().splitlines()
        first = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y), min(len(la), len(lb)))
        print(f"{name}: differs at line {first + 1}\n  old: {la[first][:200] if first < len(la) else '<end>'}")
        print(f"  new: {lb[first][:200] if first < len(lb) else '<end>'}")
    print(f"{len(names)} output(s) compared, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--checkout", type=Path, default=REPO)
    rec.add_argument("--bench", action="store_true", help="also the 1,024-rank corpus (bench/out/real_1024)")
    rec.add_argument("--jobs", type=int, default=2)
    cmp = sub.add_parser("compare")
    cmp.add_argument("old", type=Path)
    cmp.add_argument("new", type=Path)
    args = ap.parse_args()
    if args.what == "record":
        record(args.out, args.checkout, args.bench, args.jobs)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
