"""The command line: ``serve``, ``analyze``, and one subcommand per registry tool.

``debug-training-logs TOOL ARGS --json`` prints exactly the tool's result model as JSON (what MCP returns as
structured content); without ``--json`` a readable rendering. Exit status: 0 when the analysis ran (whatever it
found), 2 for bad input with the reason on stderr, 1 when ``fetch-ais`` fetched nothing (the reason on stderr).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import inspect
import json
import logging
import os
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError, validate_call
from pydantic.fields import FieldInfo

from debug_training_logs import __version__, meanwhile, progress
from debug_training_logs.collector import GC_THRESHOLDS
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.discovery import one_walk
from debug_training_logs.memo import one_command
from debug_training_logs.models import build_deferred
from debug_training_logs.render import render_text
from debug_training_logs.tools.registry import CLI_NAMES, ToolSpec, all_tools, tool_by_name

if TYPE_CHECKING:
    from debug_training_logs.ais_fetch.models import FetchAisLogsResult

ANALYZE_TOOL = "diagnose"
"""``analyze`` runs this tool (the whole protocol); ``diagnose``, the tool's own name, is an alias of ``analyze``."""

SHORT_HELP = {
    "analyze": "The whole investigation: verdict, timeline, root-cause chain, verification (--html for a page).",
    "overview": "Files, nodes, ranks per file, world size, missing ranks, framework, versions, start/end.",
    "grep": "The tiered failure patterns over every file: counts, ranks with/without hits, templates.",
    "nccl": "Every rank's NCCL watchdog state per process group, and the straggler.",
    "fetch-ais": "Download every AIStore daemon's logs (current and rotated) and extract them safely.",
    "ais-deltas": "Per AIS daemon and stats interval: counter deltas, restarts, spikes, notable errors.",
    "align": "The offset between worker and AIS clocks, verified by two methods or not.",
    "timeline": "One chronological list of key events from every source.",
    "verify": "Accept or reject a conclusion, rule by rule, from the logs themselves.",
    "history": "Earlier diagnoses: repeat-offender nodes and daemons, recurring failures, a node's or daemon's jobs.",
}
"""One complete sentence per command for ``--help``'s list (a docstring's first line is cut mid-sentence)."""

DESCRIPTION = """\
Find the root cause of a failed distributed training job (NeMo, Megatron, PyTorch) from every rank's logs and,
when storage is involved, the AIStore daemon logs. Start with 'analyze LOGS_DIR [AIS_DIR]'; each other command
is one MCP tool ('COMMAND --help' for its options, '--json' for the tool's result as MCP returns it)."""

EPILOG = """\
Exit status: 0 when the analysis ran (whatever it found), 2 for bad input (the reason on stderr).
Progress of long scans is drawn on stderr when it is a terminal; -v logs each phase, -vv every step."""


def _unwrap(annotation: Any) -> tuple[Any, FieldInfo | None, bool]:
    """(base type, Field info, optional?) of a parameter annotation."""
    info: FieldInfo | None = None
    if get_origin(annotation) is Annotated:
        base, *meta = get_args(annotation)
        info = next((m for m in meta if isinstance(m, FieldInfo)), None)
        annotation = base
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        if len(args) == 1:
            annotation = args[0]
    return annotation, info, optional


def _number_list(item: type) -> Any:
    """An argparse type reading ``1`` or ``1,2,3`` as a list of ``item``."""

    def parse(text: str) -> list[Any]:
        try:
            return [item(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number or comma-separated numbers") from None

    parse.__name__ = item.__name__
    return parse


def _add_param(
    parser: argparse.ArgumentParser, name: str, param: inspect.Parameter, hint: Any, positional: bool
) -> None:
    base, info, _optional = _unwrap(hint)
    help_text = (info.description if info and info.description else "") or ""
    has_default = param.default is not inspect.Parameter.empty
    kwargs: dict[str, Any] = {"help": help_text}
    if isinstance(base, type) and issubclass(base, BaseModel):
        kwargs["metavar"] = name.upper() + ".json"
        kwargs["help"] = (help_text + " (a JSON file, or - for standard input)").strip()
        kwargs["type"] = str
    elif base is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif get_origin(base) is list:
        # One value per flag, repeatable (``--patterns A --patterns B``): a flag taking several values would swallow
        # the positional arguments after it. Numbers may also come comma-separated (``--tiers 1,2``).
        (item,) = get_args(base) or (str,)
        if item in (int, float):
            kwargs.update(action="extend", type=_number_list(item), metavar=item.__name__.upper())
        else:
            kwargs.update(action="append", type=str)
        kwargs["help"] = (help_text + " (repeat the flag for several)").strip()
    elif get_origin(base) is Literal:
        kwargs.update(choices=list(get_args(base)))
    elif base in (int, float):
        kwargs["type"] = base
    else:
        kwargs["type"] = str
    if positional:
        if has_default:
            kwargs["nargs"] = "?"
            kwargs["default"] = param.default
        kwargs.pop("action", None)
        parser.add_argument(name, **kwargs)
    else:
        flag = "--" + name.replace("_", "-")
        flags = [flag]
        if get_origin(base) is list and flag.endswith("s"):
            flags.append(flag[:-1])  # --pattern X --pattern Y reads naturally
        if has_default:
            kwargs["default"] = param.default
            if kwargs.get("help") and param.default not in (None, False, "") and base is not bool:
                kwargs["help"] += f" (default: {param.default})"
        else:
            kwargs["required"] = True
        parser.add_argument(*flags, dest=name, **kwargs)


def _build_tool_parser(
    sub: Any, spec: ToolSpec, name: str | None = None, aliases: Sequence[str] = ()
) -> argparse.ArgumentParser:
    doc = spec.description
    command = name or spec.cli_name
    p: argparse.ArgumentParser = sub.add_parser(
        command,
        aliases=list(aliases),
        help=SHORT_HELP.get(command, spec.title + "."),
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hints = spec.hints
    for pname, param in spec.signature.parameters.items():
        if pname not in spec.mcp_only:
            _add_param(p, pname, param, hints[pname], pname in spec.positional)
    p.add_argument("--json", action="store_true", help="Print the result model as JSON (what MCP returns).")
    p.set_defaults(_tool=spec.name)
    return p


MAX_MODEL_ARG_BYTES = 16 << 20
"""A JSON argument file (a conclusion to verify) larger than this is refused: ``/dev/zero`` must not be read forever."""


def _read_model_arg(value: str, model: type[BaseModel]) -> BaseModel:
    try:
        if value == "-":
            raw = sys.stdin.buffer.read(MAX_MODEL_ARG_BYTES + 1)
        else:
            with open(value, "rb") as fh:
                raw = fh.read(MAX_MODEL_ARG_BYTES + 1)
    except OSError as exc:
        raise UserInputError(f"Cannot read {value!r}: {exc.strerror or exc}. Give the path of a JSON file.") from exc
    if len(raw) > MAX_MODEL_ARG_BYTES:
        raise UserInputError(
            f"{value!r} is larger than {MAX_MODEL_ARG_BYTES >> 20} MiB: not a {model.__name__} JSON file. "
            "Give the path of the JSON file you wrote."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserInputError(
            f"{value!r} is not UTF-8 text (byte {exc.start} is {raw[exc.start : exc.start + 1]!r}): not a JSON file. "
            "Give the path of the JSON file you wrote."
        ) from None
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise UserInputError(f"{value!r} is not a valid {model.__name__}: {_validation_text(exc)}") from exc


def _validation_text(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors())


def run_tool(spec: ToolSpec, ns: argparse.Namespace) -> BaseModel:
    """Call ``spec`` with the parsed CLI arguments, validated exactly as MCP validates them, held to the budget."""
    hints = spec.hints
    kwargs: dict[str, Any] = {}
    for pname, param in spec.signature.parameters.items():
        if pname in spec.mcp_only:
            continue  # keeps its default
        value = getattr(ns, pname, param.default)
        base, _, _ = _unwrap(hints[pname])
        if isinstance(base, type) and issubclass(base, BaseModel) and isinstance(value, str):
            value = _read_model_arg(value, base)
        kwargs[pname] = value

    def check(**arguments: Any) -> dict[str, Any]:
        return arguments

    check.__signature__ = spec.signature.replace(return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    check.__annotations__ = {**hints, "return": dict[str, Any]}
    check.__name__ = spec.name
    try:
        validated = validate_call(check)(**kwargs)
    except ValidationError as exc:
        raise UserInputError(f"Invalid arguments: {_validation_text(exc)}") from exc
    return spec.call(**validated)


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level options take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; given ``argv``, only the command it names is built with its options (importing that
    tool alone), the others are listed by name and one-line help: start-up then costs one tool's imports."""
    chosen = None if argv is None else _command_in(argv) or ""
    parser = argparse.ArgumentParser(
        prog="debug-training-logs",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="Log on stderr: -v each phase (files scanned, AIS files read, nodes fetched) with its time, -vv more.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="Run the MCP server (stdio by default).")
    serve.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default: the client starts the server) or http (streamable HTTP at http://HOST:PORT/mcp).",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP bind address (default 127.0.0.1). Anything but loopback needs --allow-remote.",
    )
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765); endpoint /mcp.")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="Allow --host beyond loopback (e.g. 0.0.0.0): prints a warning and requires a bearer token from "
        "DEBUG_TRAINING_LOGS_HTTP_TOKEN or --token-file (else one is generated and printed on stderr).",
    )
    serve.add_argument("--token-file", metavar="FILE", help="File holding the bearer token HTTP clients must present.")
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="Another Host header value to accept (repeatable; 'name:*' for any port). Loopback and this "
        "machine's names are accepted already.",
    )
    serve.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="Another Origin header value to accept (repeatable), e.g. https://inspector.example:443.",
    )
    serve.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="A directory tools may read (repeatable; default: the working directory). Paths outside are refused.",
    )

    if chosen is None:
        analyze_spec = tool_by_name(ANALYZE_TOOL)
        if analyze_spec is not None:
            _build_analyze_parser(sub, analyze_spec)
        for spec in all_tools():
            if spec.name != ANALYZE_TOOL:
                _build_tool_parser(sub, spec)
        return parser
    for tool, cli_name in {ANALYZE_TOOL: CLI_NAMES[ANALYZE_TOOL], **CLI_NAMES}.items():
        command, aliases = ("analyze", [cli_name]) if tool == ANALYZE_TOOL else (cli_name, [])
        if chosen not in (command, *aliases):
            sub.add_parser(command, aliases=aliases, help=SHORT_HELP.get(command, f"The {tool} tool."))
            continue
        chosen_spec = tool_by_name(tool)
        assert chosen_spec is not None, tool
        if tool == ANALYZE_TOOL:
            _build_analyze_parser(sub, chosen_spec)
        else:
            _build_tool_parser(sub, chosen_spec)
    return parser


def _build_analyze_parser(sub: Any, spec: ToolSpec) -> None:
    analyze = _build_tool_parser(sub, spec, name="analyze", aliases=[spec.cli_name])
    analyze.add_argument(
        "--html",
        metavar="FILE",
        help="Also write the HTML report (per-rank grid by node, timeline, AIS counters, step time/memory, "
        "verification; one self-contained page that opens offline) to FILE. Refused inside the log directories.",
    )


def _html_target(path: str, ns: argparse.Namespace) -> Path:
    """Where ``--html`` may write: not inside a log directory, in an existing directory, not over a directory."""
    target = Path(path).expanduser().resolve()
    for d in (ns.logs_dir, getattr(ns, "ais_dir", None)):
        if d and target.is_relative_to(Path(d).expanduser().resolve()):
            raise UserInputError(
                f"--html {path}: that is inside the log directory {d}; this tool never writes there. "
                "Give a path elsewhere (e.g. ./report.html)."
            )
    if target.is_dir():
        raise UserInputError(f"--html {path}: that is a directory; give a file name (e.g. {path}/report.html).")
    if not target.parent.is_dir():
        raise UserInputError(f"--html {path}: the directory {target.parent} does not exist.")
    return target


def _write_html(target: Path, page: str) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserInputError(f"--html {target}: cannot write it: {exc.strerror or exc}.") from exc


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """The collector at :data:`~debug_training_logs.collector.GC_THRESHOLDS` within the block (an in-process caller's
    own thresholds are restored after it)."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _skip_exit_collections() -> None:
    """Move every object to the collector's permanent generation: the process is about to exit, and the garbage
    collections of interpreter shutdown would otherwise walk every object of the command (the imported modules, the
    scan's results, the answer) for nothing: 55-70 ms of a 1,024-rank ``grep`` (about 5% of its wall time), ~0 after
    this. Objects are still freed by their reference counts; only cycles among them are left for the exit."""
    gc.freeze()


@contextmanager
def _cli_progress(verbose: int) -> Iterator[None]:
    """Progress on stderr: logged phases with -v, else a live line when stderr is a terminal, else nothing."""
    if verbose:
        with progress.reporting_to(progress.LoggedProgress(logging.getLogger("debug_training_logs.progress"))):
            yield
        return
    if not sys.stderr.isatty():
        yield
        return
    line = progress.TerminalProgress(sys.stderr)
    try:
        with progress.reporting_to(line):
            yield
    finally:
        line.close()


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    with _fewer_collections():  # building the parser imports the command's tool and its analysis modules
        ns = build_parser(args).parse_args(args)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING - 10 * min(ns.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if ns.command == "serve":
        gc.enable()  # the program turned the collector off for a one-shot command (entry); a server runs for hours
        from debug_training_logs.server.app import run
        from debug_training_logs.server.http import http_policy

        transport = "stdio" if ns.transport == "stdio" else "streamable-http"
        policy = None
        if transport != "stdio":
            try:
                policy = http_policy(
                    ns.host,
                    ns.port,
                    allow_remote=ns.allow_remote,
                    allowed_hosts=ns.allowed_host,
                    allowed_origins=ns.allowed_origin,
                    token_file=ns.token_file,
                )
            except UserInputError as exc:
                print(f"debug-training-logs serve: {exc}", file=sys.stderr)
                sys.exit(2)
        run(transport, ns.host, ns.port, ns.root, policy)
        return
    spec = tool_by_name(ns._tool)
    assert spec is not None
    meanwhile.later(build_deferred)  # the result models: built while the scan's workers read, if there is a scan
    try:
        with _cli_progress(ns.verbose), _fewer_collections(), one_command(), one_walk():
            result = _analyze_with_html(ns) if getattr(ns, "html", None) else run_tool(spec, ns)
    except UserInputError as exc:
        print(f"debug-training-logs {ns.command}: {exc}", file=sys.stderr)
        sys.exit(2)
    text = json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False) if ns.json else None
    if text is None:
        text = render_text(spec, result)
    try:
        print(text)
    except BrokenPipeError:  # `... | head`: the reader left; not an error of the analysis
        sys.stdout = None  # keep the interpreter from flushing into the closed pipe
    if argv is None:  # the program itself (the console script): it exits next
        _skip_exit_collections()
    failure = _nothing_done(result)
    if failure is not None:
        print(f"debug-training-logs {ns.command}: {failure}", file=sys.stderr)
        sys.exit(1)


def program() -> None:
    """The ``debug-training-logs`` program (run by :func:`debug_training_logs.entry.program`, its console script and
    ``python -m debug_training_logs``): :func:`main`, then the process ends without the interpreter's teardown
    (:func:`_exit_without_teardown`). A caller that goes on after the command (a test, a bench probe) calls
    :func:`main` instead."""
    main()
    _exit_without_teardown()


def _exit_without_teardown() -> None:
    """End the process now, status 0, once the answer is out: the exit handlers run and the standard streams are
    flushed as at a normal exit, but the interpreter's teardown, which frees every object of the command one by one
    (the scan's results, the evidence, the answer: ~7 ms of a 1,024-rank ``analyze``), is skipped; the system takes
    the memory back whole. Any failure to flush is left to the normal exit, which reports it as it always did, and so
    is a process with another thread still running (the normal exit waits for it)."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    try:
        _flush()
        atexit._run_exitfuncs()  # (their own errors are reported and swallowed there, as at a normal exit)
        _flush()
    except BaseException:  # a closed pipe: the normal exit says what it always said
        return
    os._exit(0)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


def _nothing_done(result: BaseModel) -> str | None:
    """Why a command that exists to produce files produced none (exit status 1), or None.

    ``fetch-ais`` that fetched no node's logs has failed, whatever the reason (cluster unreachable, every node
    failed): a script must not carry on as if ``DEST_DIR`` now held the AIS logs.
    """
    # a fetch result's module is loaded when there is one: other commands do not pay for importing the AIS client
    fetch_result: type[FetchAisLogsResult] | None = getattr(
        sys.modules.get("debug_training_logs.ais_fetch.models"), "FetchAisLogsResult", None
    )
    if fetch_result is not None and isinstance(result, fetch_result) and result.nodes_ok + result.nodes_skipped == 0:
        return f"nothing was fetched. {result.summary}"
    return None


def _analyze_with_html(ns: argparse.Namespace) -> BaseModel:
    from debug_training_logs.tools.diagnose import diagnose_with_html

    spec = tool_by_name(ANALYZE_TOOL)
    assert spec is not None
    target = _html_target(ns.html, ns)
    diagnosis, page = diagnose_with_html(
        ns.logs_dir,
        ns.ais_dir,
        getattr(ns, "attempt", None),
        getattr(ns, "fr_dir", None),
        getattr(ns, "world_size", None),
        job_id=getattr(ns, "job_id", None),
        history=getattr(ns, "history", True),
        hang_dir=getattr(ns, "hang_dir", None),
    )
    _write_html(target, page)
    print(f"HTML report: {target} ({len(page.encode()):,} bytes)", file=sys.stderr)
    return spec.fit(diagnosis, ns.max_tokens, logs_dir=ns.logs_dir, ais_dir=ns.ais_dir)


if __name__ == "__main__":
    main()
