#!/bin/sh
# Start the debug-training-logs MCP server over stdio for the Claude Code plugin (.mcp.json runs this).
#
# Finds the package in this order, so the plugin works both pip-installed and straight from a checkout:
#   1. `debug-training-logs` on PATH (pip/pipx/uv tool install)
#   2. <plugin root>/.venv/bin/python -m debug_training_logs (a checkout with its own virtualenv)
#   3. python3 -m debug_training_logs with PYTHONPATH=<plugin root> (a checkout, dependencies installed in python3)
# and otherwise exits 1 with install instructions on stderr (Claude Code shows it under /mcp).
#
# Allowed roots: the directory Claude Code starts the server in (the user's project), plus every directory in
# DEBUG_TRAINING_LOGS_ROOTS (colon-separated), plus any --root given to this script. stdout is the MCP wire:
# nothing here may print to it.
set -u

root="${CLAUDE_PLUGIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}"

set -- --root "$PWD" "$@"
if [ -n "${DEBUG_TRAINING_LOGS_ROOTS:-}" ]; then
    old_ifs=$IFS
    IFS=:
    for dir in $DEBUG_TRAINING_LOGS_ROOTS; do
        [ -n "$dir" ] && set -- "$@" --root "$dir"
    done
    IFS=$old_ifs
fi

# Checks that the package and its dependencies can be imported, without importing them (fast).
probe='import importlib.util as u, sys
mods = ("debug_training_logs", "mcp", "pydantic", "anyio", "regex", "re2", "zstandard")
sys.exit(0 if all(u.find_spec(m) for m in mods) else 1)'

if command -v debug-training-logs >/dev/null 2>&1; then
    exec debug-training-logs serve "$@"
fi

if [ -x "$root/.venv/bin/python" ] && "$root/.venv/bin/python" -c "$probe" 2>/dev/null; then
    exec "$root/.venv/bin/python" -m debug_training_logs serve "$@"
fi

if command -v python3 >/dev/null 2>&1 && PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python3 -c "$probe" 2>/dev/null; then
    PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m debug_training_logs serve "$@"
fi

cat >&2 <<EOF
debug-training-logs: cannot start the MCP server: the Python package is not installed.
Install it (Python 3.11+) so that 'debug-training-logs' is on PATH, then restart Claude Code:
    pip install "$root"          # or: pipx install "$root"  /  uv tool install "$root"
or give the plugin checkout its own virtualenv:
    python3 -m venv "$root/.venv" && "$root/.venv/bin/pip" install -e "$root"
EOF
exit 1
