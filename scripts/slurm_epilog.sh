#!/bin/bash
# SLURM epilog for debug-training-logs: after a failed job, run `analyze --json --html` on its log directory, keep
# the report, and record the diagnosis in the job history. Install and configure: docs/slurm-epilog.md.
#
# It never fails the epilog: it always exits 0 (a failing epilog drains nodes or holds jobs), bounds the analysis in
# time (DTL_TIMEOUT), and writes its own errors to DTL_EPILOG_LOG. It never writes into the log directory.
#
# Settings (environment; an epilog has no PATH, so give absolute paths):
#   DTL_BIN         the debug-training-logs executable (default: found on PATH, else
#                   /opt/debug-training-logs/.venv/bin/debug-training-logs)
#   DTL_LOGS_DIR    the job's log directory; %j becomes the job id, %u the user, %x the job name
#                   (default: the directory of the job's stderr file, else of its stdout file: SLURM_JOB_STDERR /
#                   SLURM_JOB_STDOUT, else `scontrol show job`)
#   DTL_AIS_DIR     an AIStore log directory to read as well (same substitutions), optional
#   DTL_REPORT_DIR  where the reports go, one directory per job: <job id>/diagnosis.json, report.html, analyze.log
#                   (default: ${XDG_STATE_HOME:-$HOME/.local/state}/debug-training-logs/reports)
#   DTL_TIMEOUT     seconds the analysis may take (default 300); then it is stopped (and killed 10 s later)
#   DTL_ALL_JOBS=1  analyse jobs that succeeded too (default: failed jobs only)
#   DTL_DETACH=1    return at once and analyse in the background (still bounded by DTL_TIMEOUT)
#   DTL_EPILOG_LOG  this script's own log (default: $DTL_REPORT_DIR/epilog.log)
#   DEBUG_TRAINING_LOGS_HISTORY  the history: a SQLite path or the team's postgresql:// DSN (README)
#
# By hand (or to test it): scripts/slurm_epilog.sh [LOGS_DIR [AIS_DIR]] with SLURM_JOB_ID set or not.
set -u

job="${SLURM_JOB_ID:-${SLURM_JOBID:-}}"
report_root="${DTL_REPORT_DIR:-${XDG_STATE_HOME:-${HOME:-/tmp}/.local/state}/debug-training-logs/reports}"
log_file="${DTL_EPILOG_LOG:-$report_root/epilog.log}"
timeout_s="${DTL_TIMEOUT:-300}"

log_dirs=()  # the job's log directories once known: nothing of ours is written below them

inside_logs() {
    local target d real
    target="$(realpath -m "$1" 2>/dev/null)" || return 1
    for d in "${log_dirs[@]}"; do
        real="$(realpath -e "$d" 2>/dev/null)" || continue
        case "$target/" in "$real"/*) return 0 ;; esac
    done
    return 1
}

say() {
    # one line per event into our own log (created on demand, never inside a log directory); stderr too
    local line
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) debug-training-logs epilog job=${job:-?}: $*"
    if ! inside_logs "$log_file"; then
        { mkdir -p "$(dirname "$log_file")" && printf '%s\n' "$line" >>"$log_file"; } 2>/dev/null
    fi
    printf '%s\n' "$line" >&2
}

failed_job() {
    # true when SLURM says the job (a step of it) failed; by hand (no SLURM variables) every job counts as failed
    [ "${DTL_ALL_JOBS:-0}" = 1 ] && return 0
    local seen=0 v
    for v in "${SLURM_JOB_EXIT_CODE:-}" "${SLURM_JOB_DERIVED_EC:-}"; do
        [ -n "$v" ] || continue
        seen=1
        [ "$v" != 0 ] && return 0
    done
    if [ -n "${SLURM_JOB_EXIT_CODE2:-}" ]; then
        seen=1
        [ "$SLURM_JOB_EXIT_CODE2" != "0:0" ] && return 0
    fi
    case "${SLURM_JOB_STATE:-}" in
        "") ;;
        COMPLETED) seen=1 ;;
        *) return 0 ;;
    esac
    [ "$seen" = 0 ]
}

expand() {
    local s="$1"
    s="${s//%j/$job}"
    s="${s//%u/${SLURM_JOB_USER:-}}"
    s="${s//%x/${SLURM_JOB_NAME:-}}"
    printf '%s' "$s"
}

job_file_dir() {
    # the directory of the job's stderr (else stdout) file, from the epilog's environment or scontrol
    local f
    for f in "${SLURM_JOB_STDERR:-}" "${SLURM_JOB_STDOUT:-}"; do
        if [ -n "$f" ] && [ -d "$(dirname "$f")" ]; then
            dirname "$f"
            return 0
        fi
    done
    [ -n "$job" ] || return 1
    local info
    info="$(scontrol show job -o "$job" 2>/dev/null)" || return 1
    for key in StdErr StdOut; do
        f="$(printf '%s\n' "$info" | tr ' ' '\n' | sed -n "s/^$key=//p" | head -n 1)"
        if [ -n "$f" ] && [ -d "$(dirname "$f")" ]; then
            dirname "$f"
            return 0
        fi
    done
    return 1
}

run() {
    local logs_dir="$1" ais_dir="$2" bin out
    bin="${DTL_BIN:-$(command -v debug-training-logs 2>/dev/null || echo /opt/debug-training-logs/.venv/bin/debug-training-logs)}"
    if [ ! -x "$bin" ]; then
        say "cannot run $bin (set DTL_BIN to the debug-training-logs executable); nothing analysed"
        return 0
    fi
    if [ ! -d "$logs_dir" ]; then
        say "log directory '$logs_dir' does not exist (set DTL_LOGS_DIR); nothing analysed"
        return 0
    fi
    out="$report_root/${job:-manual-$(date -u +%Y%m%dT%H%M%S)-$$}"
    if inside_logs "$out"; then  # checked before anything is created
        say "the report directory $out is inside the log directory; set DTL_REPORT_DIR elsewhere"
        return 0
    fi
    mkdir -p "$out" || { say "cannot create the report directory $out"; return 0; }
    exec 9>"$out/.lock"
    if ! flock -n 9; then  # a per-node Epilog runs on every node of the job: one analysis is enough
        say "another epilog is analysing this job already; skipped"
        return 0
    fi
    local args=(analyze "$logs_dir")
    [ -n "$ais_dir" ] && args+=("$ais_dir")
    args+=(--json --html "$out/report.html")
    [ -n "$job" ] && args+=(--job-id "$job")
    say "analysing $logs_dir${ais_dir:+ and $ais_dir} (timeout ${timeout_s} s) into $out"
    local status=0
    timeout --kill-after=10 "$timeout_s" "$bin" "${args[@]}" >"$out/diagnosis.json.tmp" 2>"$out/analyze.log" || status=$?
    if [ "$status" = 0 ]; then
        mv -f "$out/diagnosis.json.tmp" "$out/diagnosis.json"
        say "done: $out/diagnosis.json, $out/report.html"
    else
        rm -f "$out/diagnosis.json.tmp"
        case "$status" in
            124 | 137) say "the analysis did not finish within ${timeout_s} s and was stopped (see $out/analyze.log)" ;;
            *) say "the analysis failed with status $status: $(tail -n 3 "$out/analyze.log" | tr '\n' ' ')" ;;
        esac
    fi
    return 0
}

main() {
    if ! failed_job; then
        return 0
    fi
    local logs_dir="${1:-}" ais_dir="${2:-}"
    if [ -z "$logs_dir" ]; then
        if [ -n "${DTL_LOGS_DIR:-}" ]; then
            logs_dir="$(expand "$DTL_LOGS_DIR")"
        else
            logs_dir="$(job_file_dir)" || {
                say "no log directory: set DTL_LOGS_DIR (SLURM gave neither SLURM_JOB_STDERR nor SLURM_JOB_STDOUT)"
                return 0
            }
        fi
    fi
    [ -z "$ais_dir" ] && [ -n "${DTL_AIS_DIR:-}" ] && ais_dir="$(expand "$DTL_AIS_DIR")"
    log_dirs=("$logs_dir")
    [ -n "$ais_dir" ] && log_dirs+=("$ais_dir")
    if [ "${DTL_DETACH:-0}" = 1 ]; then
        (run "$logs_dir" "$ais_dir" </dev/null >/dev/null 2>&1 &)
        return 0
    fi
    run "$logs_dir" "$ais_dir"
}

main "$@" || say "unexpected failure (status $?)"
exit 0
