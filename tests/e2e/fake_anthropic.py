"""A loopback fake of the Anthropic Messages API, to drive a real Claude Code session offline.

Point Claude Code at it with ``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`` and a dummy ``ANTHROPIC_API_KEY``. It
records every ``/v1/messages`` request body and answers (as SSE when the request streams, JSON otherwise):

1. a request that offers none of the planned MCP tools, or lacks the result of the last ``tool_use`` (titles,
   summaries and other side requests): a short text;
2. else the next planned call: a ``tool_use`` of ``mcp__<server>__<tool>`` with the input its builder makes from the
   request (e.g. the logs directory read from the expanded skill, or an earlier tool's result);
3. when the plan is done: a closing text (:attr:`final_text`).

So the transcript shows what Claude Code really sent the model: the skill body with its arguments, the tool list
with the MCP names, and the structured tool result. It binds 127.0.0.1 only.

Run by hand: ``python tests/e2e/fake_anthropic.py --port 8999 --tool job_overview --logs-dir /path/to/logs``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]


def _text_of(content: Any) -> str:
    """All text in a message's content (a string or a list of blocks, tool results included)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict):
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            if "content" in block:
                parts.append(_text_of(block["content"]))
    return "\n".join(parts)


def request_text(body: Json) -> str:
    """All message text of a request (not the system prompt)."""
    return "\n".join(_text_of(m.get("content")) for m in body.get("messages", []))


def tool_results(body: Json) -> list[Json]:
    """The ``tool_result`` blocks in a request's messages."""
    found: list[Json] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return found


class FakeAnthropic:
    """The fake API server; use as a context manager (it serves on a background thread).

    ``calls`` is the model's plan: (tool, input builder) pairs, issued one per turn in order. A builder gets the
    request body (to read the skill text or earlier tool results from it, as a model would) and returns the tool
    input, or None to leave that tool out (listed in :attr:`skipped`).
    """

    def __init__(
        self,
        calls: Sequence[tuple[str, Callable[[Json], Json | None]]] = (("job_overview", lambda body: {}),),
        final_text: str = "FAKE-MODEL: done.",
        port: int = 0,
    ) -> None:
        self.calls = list(calls)
        self.final_text = final_text
        self.requests: list[Json] = []
        self.tool_uses: list[Json] = []
        self.skipped: list[str] = []
        self._next = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @staticmethod
    def find_tool(body: Json, tool: str) -> str | None:
        """The full name of an MCP tool among the request's tools (``mcp__…__<tool>``)."""
        names = [t.get("name", "") for t in body.get("tools", []) if isinstance(t, dict)]
        return next((n for n in names if n.startswith("mcp__") and n.endswith(f"__{tool}")), None)

    def reply(self, body: Json) -> Json:
        """The assistant message answering ``body`` (see the module docstring)."""
        with self._lock:
            self.requests.append(body)
            offered = any(self.find_tool(body, tool) for tool, _ in self.calls)
            answered = {r.get("tool_use_id") for r in tool_results(body)}
            if not offered or (self.tool_uses and self.tool_uses[-1]["id"] not in answered):
                return _message([{"type": "text", "text": "ok"}], "end_turn")  # a side request
            while self._next < len(self.calls):
                tool, build = self.calls[self._next]
                self._next += 1
                name = self.find_tool(body, tool)
                arguments = build(body) if name is not None else None
                if name is None or arguments is None:
                    self.skipped.append(tool)
                    continue
                use: Json = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": name}
                use["input"] = arguments
                self.tool_uses.append(use)
                return _message([use], "tool_use")
            return _message([{"type": "text", "text": self.final_text}], "end_turn")

    def result_of(self, use: Json) -> Json | None:
        """The ``tool_result`` block Claude Code sent back for ``use``."""
        for body in self.requests:
            for result in tool_results(body):
                if result.get("tool_use_id") == use["id"]:
                    return result
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
                pass

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0]
                if path.endswith("/v1/messages/count_tokens"):
                    self._send(200, json.dumps({"input_tokens": 1000}).encode(), "application/json")
                    return
                if not path.endswith("/v1/messages"):
                    error = {"type": "error", "error": {"type": "not_found_error", "message": path}}
                    self._send(404, json.dumps(error).encode(), "application/json")
                    return
                body = json.loads(raw or b"{}")
                message = fake.reply(body)
                if body.get("stream"):
                    self._send(200, "".join(_sse(message)).encode(), "text/event-stream")
                else:
                    self._send(200, json.dumps(message).encode(), "application/json")

            def do_GET(self) -> None:
                self._send(404, b"{}", "application/json")

            do_HEAD = do_GET

        return Handler


def _message(content: list[Json], stop_reason: str) -> Json:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


def _event(kind: str, data: Json) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def _sse(message: Json) -> Iterator[str]:
    """``message`` as the Messages API's server-sent events."""
    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 100, "output_tokens": 1}}
    yield _event("message_start", {"message": start})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            delta: Json = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {**block, "input": {}}
            yield _event("content_block_start", {"index": index, "content_block": opening})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield _event("content_block_delta", {"index": index, "delta": delta})
        yield _event("content_block_stop", {"index": index})
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _event("message_delta", {"delta": stop, "usage": {"output_tokens": 20}})
    yield _event("message_stop", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8999, help="Port on 127.0.0.1 (0: any free port).")
    parser.add_argument("--tool", default="job_overview", help="The MCP tool to call (suffix of mcp__…__TOOL).")
    parser.add_argument("--logs-dir", default="", help="logs_dir argument of the tool call.")
    args = parser.parse_args()
    with FakeAnthropic([(args.tool, lambda body: {"logs_dir": args.logs_dir})], port=args.port) as fake:
        print(f"ANTHROPIC_BASE_URL={fake.url}  (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
        for body in fake.requests:
            print(json.dumps(body)[:2000])


if __name__ == "__main__":
    main()
