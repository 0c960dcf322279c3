"""The command line: ``serve``, ``analyze``, and one subcommand per registry tool.

``debug-training-logs TOOL ARGS --json`` prints exactly the tool's result model as JSON (what MCP returns as
structured content); without ``--json`` a readable rendering. Exit status: 0 when the analysis ran (whatever it
found), 2 for bad input with the reason on stderr.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError, validate_call
from pydantic.fields import FieldInfo

from debug_training_logs import __version__
from debug_training_logs.errors import UserInputError
from debug_training_logs.render import render_text
from debug_training_logs.tools.registry import ToolSpec, all_tools, tool_by_name

ANALYZE_TOOL = "diagnose"
"""``analyze`` runs this tool (the whole protocol); until it exists, ``job_overview``."""


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
        (item,) = get_args(base) or (str,)
        kwargs.update(nargs="+", type=item if item in (int, float) else str)
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
        if has_default:
            kwargs["default"] = param.default
            if kwargs.get("help") and param.default not in (None, False, "") and base is not bool:
                kwargs["help"] += f" (default: {param.default})"
        else:
            kwargs["required"] = True
        parser.add_argument(flag, dest=name, **kwargs)


def _build_tool_parser(sub: Any, spec: ToolSpec, name: str | None = None) -> None:
    doc = spec.description
    p = sub.add_parser(
        name or spec.cli_name,
        help=doc.split("\n", 1)[0],
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hints = spec.hints
    for pname, param in spec.signature.parameters.items():
        _add_param(p, pname, param, hints[pname], pname in spec.positional)
    p.add_argument("--json", action="store_true", help="Print the result model as JSON (what MCP returns).")
    p.set_defaults(_tool=spec.name)


def _read_model_arg(value: str, model: type[BaseModel]) -> BaseModel:
    try:
        text = sys.stdin.read() if value == "-" else Path(value).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"Cannot read {value!r}: {exc.strerror or exc}. Give the path of a JSON file.") from exc
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
    for pname in spec.signature.parameters:
        value = getattr(ns, pname)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="debug-training-logs",
        description="Find the root cause of a failed distributed training job from every rank's logs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="More logging on stderr.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="Run the MCP server (stdio by default).")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1).")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765); endpoint /mcp.")
    serve.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="A directory tools may read (repeatable; default: the working directory). Paths outside are refused.",
    )

    analyze_spec = tool_by_name(ANALYZE_TOOL) or tool_by_name("job_overview")
    if analyze_spec is not None:
        _build_tool_parser(sub, analyze_spec, name="analyze")
    for spec in all_tools():
        _build_tool_parser(sub, spec)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    ns = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING - 10 * min(ns.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if ns.command == "serve":
        from debug_training_logs.server.app import run

        transport = "stdio" if ns.transport == "stdio" else "streamable-http"
        run(transport, ns.host, ns.port, ns.root)
        return
    spec = tool_by_name(ns._tool)
    assert spec is not None
    try:
        result = run_tool(spec, ns)
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


if __name__ == "__main__":
    main()
