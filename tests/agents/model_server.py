"""A scripted language model that the real coding agents talk to, offline (standard library only).

The agents tier runs each agent's real program against this server instead of a vendor's API, so
what the agent does is decided by a script and nothing leaves the machine. One module speaks the
five agents' wire dialects:

- ``anthropic``: ``POST /v1/messages`` (SSE when ``stream``), Claude Code;
- ``responses``: ``POST /v1/responses`` (SSE), Codex;
- ``gemini``: ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` (and ``:generateContent``),
  Gemini CLI;
- ``chat``: ``POST /v1/chat/completions`` (SSE or whole JSON), OpenCode with ``tool_calls`` and
  Aider with a plain answer holding its edit blocks.

A ``Script`` is one turn: a token that the turn's prompt carries, the tool calls the model makes
one per request (each answer to a tool result is the next call), then a final text. The step a
request is at is derived from the request itself: the tool calls already in the conversation after
the last message holding the token. That keeps the server stateless between requests, so retries,
side requests and resumed sessions (whose history holds earlier turns' calls) cannot shift it.

A request without tools (titles, summaries, next-speaker checks) gets ``Script.side_answer``; for
Aider, whose main request has no tools either, a request holding the token and no answer after it
gets ``Script.reply``. Every request is recorded, body and all, to a JSON-lines file, so a test can
assert what the agent sent (for example that a rollback notice reached the model).
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL = "scripted-model"
USAGE_ANTHROPIC = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
GEMINI_PATH = re.compile(r"^/v1beta/models/([^/:]+):(streamGenerateContent|generateContent|countTokens)$")


@dataclass(frozen=True)
class Call:
    """One tool call the model makes: the agent's own tool name and its arguments."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Script:
    """One turn of the model: its token, its calls in order, then its final text."""

    token: str
    calls: tuple[Call, ...] = ()
    final: str = "Done."
    reply: str = ""  # a tool-less agent's answer to the prompt (Aider's edit blocks)
    side_answer: str = "Scripted turn"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Script:
        calls = tuple(Call(c["name"], c["args"]) for c in data.get("calls", ()))
        return cls(
            data["token"],
            calls,
            data.get("final", "Done."),
            data.get("reply", ""),
            data.get("side_answer", "Scripted turn"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "calls": [{"name": c.name, "args": c.args} for c in self.calls],
            "final": self.final,
            "reply": self.reply,
            "side_answer": self.side_answer,
        }


# -- reading a conversation, per dialect ---------------------------------------------------------


def _messages(dialect: str, body: dict[str, Any]) -> list[Any]:
    key = {"anthropic": "messages", "responses": "input", "gemini": "contents", "chat": "messages"}[dialect]
    value = body.get(key) or []
    return value if isinstance(value, list) else [value]


def _calls_in(dialect: str, message: Any) -> int:
    """How many tool calls of the model one conversation entry holds."""
    if not isinstance(message, dict):
        return 0
    if dialect == "anthropic":
        content = message.get("content")
        blocks = content if message.get("role") == "assistant" and isinstance(content, list) else []
        return sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use")
    if dialect == "responses":
        return 1 if message.get("type") in ("function_call", "custom_tool_call", "local_shell_call") else 0
    if dialect == "gemini":
        parts = message.get("parts") or []
        return sum(1 for p in parts if isinstance(p, dict) and "functionCall" in p)
    if message.get("role") == "assistant":
        return len(message.get("tool_calls") or []) or (1 if message.get("content") else 0)
    return 0


def _has_tools(dialect: str, body: dict[str, Any]) -> bool:
    tools = body.get("tools") or []
    if dialect == "gemini":
        return any(t.get("functionDeclarations") for t in tools if isinstance(t, dict))
    return bool(tools)


def step_of(script: Script, dialect: str, body: dict[str, Any]) -> int | None:
    """The model's calls already made in this turn, or None when the request is not the turn's."""
    messages = _messages(dialect, body)
    last = None
    for i, message in enumerate(messages):
        if script.token in json.dumps(message):
            last = i
    if last is None:
        return None
    return sum(_calls_in(dialect, m) for m in messages[last + 1 :])


@dataclass
class Answer:
    """What the model says to one request: tool calls (possibly none) or a text."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)


def decide(script: Script, dialect: str, body: dict[str, Any]) -> Answer:
    """The scripted answer to one request."""
    step = step_of(script, dialect, body)
    if not _has_tools(dialect, body):
        return Answer(script.reply if step == 0 and script.reply else script.side_answer)
    if step is None:
        return Answer(script.final)
    if step < len(script.calls):
        return Answer(calls=[script.calls[step]])
    return Answer(script.final)


# -- writing an answer, per dialect ---------------------------------------------------------------


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def anthropic_stream(answer: Answer, n: int) -> Iterator[bytes]:
    message = {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": USAGE_ANTHROPIC,
    }
    yield _sse("message_start", {"type": "message_start", "message": message})
    if answer.calls:
        for i, call in enumerate(answer.calls):
            block = {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": call.name, "input": {}}
            yield _sse(
                "content_block_start", {"type": "content_block_start", "index": i, "content_block": block}
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call.args)}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
    else:
        block = {"type": "text", "text": ""}
        yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        delta = {"type": "text_delta", "text": answer.text}
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    stop = "tool_use" if answer.calls else "end_turn"
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 5},
    }
    yield _sse("message_delta", end)
    yield _sse("message_stop", {"type": "message_stop"})


def anthropic_whole(answer: Answer, n: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name, "input": c.args}
        for i, c in enumerate(answer.calls)
    ] or [{"type": "text", "text": answer.text}]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "tool_use" if answer.calls else "end_turn",
        "stop_sequence": None,
        "usage": USAGE_ANTHROPIC,
    }


def responses_stream(answer: Answer, n: int) -> Iterator[bytes]:
    base = {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 0,
        "model": MODEL,
        "status": "in_progress",
        "output": [],
    }
    yield _sse("response.created", {"type": "response.created", "response": base})
    items: list[dict[str, Any]] = []
    for i, call in enumerate(answer.calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": f"call_{n}_{i}",
                "name": call.name,
                "arguments": json.dumps(call.args),
                "status": "completed",
            }
        )
    if not answer.calls:
        items.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
        )
    for i, item in enumerate(items):
        yield _sse(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": i, "item": item},
        )
        yield _sse(
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": i, "item": item},
        )
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    done = dict(base, status="completed", output=items, usage=usage)
    yield _sse("response.completed", {"type": "response.completed", "response": done})


def gemini_chunk(answer: Answer) -> dict[str, Any]:
    parts = [{"functionCall": {"name": c.name, "args": c.args}} for c in answer.calls] or [
        {"text": answer.text}
    ]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": MODEL,
    }


def chat_stream(answer: Answer, n: int) -> Iterator[bytes]:
    head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
    if answer.calls:
        calls = [
            {
                "index": i,
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for i, c in enumerate(answer.calls)
        ]
        delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
    else:
        delta = {"role": "assistant", "content": answer.text}
    yield _sse(None, dict(head, choices=[{"index": 0, "delta": delta, "finish_reason": None}]))
    finish = "tool_calls" if answer.calls else "stop"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    yield _sse(None, dict(head, choices=[{"index": 0, "delta": {}, "finish_reason": finish}], usage=usage))
    yield _sse(None, "[DONE]")


def chat_whole(answer: Answer, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for i, c in enumerate(answer.calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if answer.calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


# -- the server -------------------------------------------------------------------------------------


class ModelServer(ThreadingHTTPServer):
    """The HTTP server: one script, a record of every request."""

    daemon_threads = True

    def __init__(self, port: int, script: Script, record: Path) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.script = script
        self.record = record
        self.count = 0
        self.lock = threading.Lock()

    def note(self, method: str, path: str, body: Any) -> int:
        with self.lock:
            self.count += 1
            with self.record.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"n": self.count, "method": method, "path": path, "body": body}) + "\n")
            return self.count


class Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        n = self.server.note("GET", self.path, None)
        path = self.path.split("?")[0]
        if path.endswith("/models"):
            self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "owned_by": "snapd-tests"}],
                    "models": [{"name": f"models/{MODEL}"}],
                },
            )
            return
        self._json(404, {"error": {"message": f"no such endpoint: GET {path} (request {n})"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        n = self.server.note("POST", self.path, body)
        path, _, query = self.path.partition("?")
        script = self.server.script
        if path.endswith("/messages/count_tokens"):
            self._json(200, {"input_tokens": 10})
        elif path.endswith("/messages"):
            answer = decide(script, "anthropic", body)
            if body.get("stream"):
                self._stream(anthropic_stream(answer, n))
            else:
                self._json(200, anthropic_whole(answer, n))
        elif path.endswith("/responses"):
            self._stream(responses_stream(decide(script, "responses", body), n))
        elif path.endswith("/chat/completions"):
            answer = decide(script, "chat", body)
            if body.get("stream"):
                self._stream(chat_stream(answer, n))
            else:
                self._json(200, chat_whole(answer, n))
        elif match := GEMINI_PATH.match(path):
            if match.group(2) == "countTokens":
                self._json(200, {"totalTokens": 10})
                return
            chunk = gemini_chunk(decide(script, "gemini", body))
            if match.group(2) == "streamGenerateContent":
                self._stream(
                    iter([_sse(None, chunk)]) if "alt=sse" in query else iter([json.dumps([chunk]).encode()])
                )
            else:
                self._json(200, chunk)
        else:
            self._json(404, {"error": {"message": f"no such endpoint: POST {path} (request {n})"}})


def serve(port: int, script: Script, record: Path) -> ModelServer:
    """Start the server on a daemon thread; the caller shuts it down."""
    server = ModelServer(port, script, record)
    threading.Thread(target=server.serve_forever, name="model-server", daemon=True).start()
    return server


def recorded(record: Path) -> list[dict[str, Any]]:
    """The requests a server recorded, in order."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines() if line]


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve one scripted turn until killed.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", type=Path, required=True, help="a Script as JSON")
    parser.add_argument("--record", type=Path, required=True, help="the JSON-lines file of requests")
    ns = parser.parse_args()
    server = ModelServer(ns.port, Script.from_json(json.loads(ns.script.read_text())), ns.record)
    server.serve_forever()


if __name__ == "__main__":
    main()
