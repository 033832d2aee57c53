"""The HTTP server: a uvicorn/FastAPI look-alike serving vLLM's OpenAI API (canned reply)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standin.logfmt import Role
from standin.startup import Plan


class StandinApp:
    """State shared with the HTTP handler threads."""

    def __init__(self, plan: Plan, api: Role, api_keys: list[str]) -> None:
        self.plan = plan
        self.api = api
        self.api_keys = api_keys
        self.engine_dead = threading.Event()
        self.created = int(time.time())


class StandinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, sock: socket.socket, app: StandinApp) -> None:
        super().__init__(sock.getsockname()[:2], StandinHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock  # the pre-bound socket; server_activate() calls listen()
        self.server_address = sock.getsockname()
        self.app = app


class StandinHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: StandinHTTPServer

    def version_string(self) -> str:
        return "uvicorn"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # replaced by the uvicorn-style access line in log_request

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        try:
            status = HTTPStatus(int(code))
            text = f"{status.value} {status.phrase}"
        except ValueError:
            text = str(code)
        args = self.server.app.plan.args
        if args.disable_uvicorn_access_log or args.uvicorn_log_level not in (
            "debug",
            "info",
            "trace",
        ):
            return
        host, port = self.client_address[:2]
        line = f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {text}'
        self.server.app.api.uvicorn(line)

    # -- responses --------------------------------------------------------------------------
    def send_body(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, code: int, obj: Any) -> None:
        self.send_body(code, json.dumps(obj).encode())

    def send_err(self, code: int, message: str, etype: str, param: Any = None) -> None:
        if self.server.app.plan.ver >= (0, 10, 0):
            body: dict[str, Any] = {
                "error": {"message": message, "type": etype, "param": param, "code": code}
            }
        else:
            body = {
                "object": "error",
                "message": message,
                "type": etype,
                "param": param,
                "code": code,
            }
        self.send_json(code, body)

    # -- routing ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self.route()

    def do_POST(self) -> None:
        self.route()

    def do_HEAD(self) -> None:
        self.route()

    def do_PUT(self) -> None:
        self.route()

    def do_DELETE(self) -> None:
        self.route()

    def route(self) -> None:
        app = self.server.app
        path = self.path.split("?", 1)[0]
        body = b""
        length = self.headers.get("content-length") or "0"
        if length.isdigit() and int(length) > 0:
            body = self.rfile.read(int(length))
        keys = app.api_keys
        # vLLM's AuthenticationMiddleware: only /v1 paths need the key.
        needs_key = bool(keys) and path.startswith("/v1") and self.command != "OPTIONS"
        if needs_key and self.headers.get("Authorization", "") not in {f"Bearer {k}" for k in keys}:
            self.send_json(401, {"error": "Unauthorized"})
            return
        version = app.plan.cfg["vllm_version"]
        table: dict[str, tuple[tuple[str, ...], Callable[[bytes], None]]] = {
            "/health": (("GET",), self.health),
            "/ping": (("GET", "POST"), self.health),
            "/version": (("GET",), lambda _b: self.send_json(200, {"version": version})),
            "/metrics": (("GET",), self.metrics),
            "/v1/models": (("GET",), self.models),
            "/v1/chat/completions": (("POST",), self.chat),
            "/v1/completions": (("POST",), self.completions),
        }
        if path not in table:
            self.send_json(404, {"detail": "Not Found"})
            return
        methods, handler = table[path]
        method = "GET" if self.command == "HEAD" else self.command
        if method not in methods:
            self.send_json(405, {"detail": "Method Not Allowed"})
            return
        handler(body)

    def health(self, _body: bytes) -> None:
        self.send_body(503 if self.server.app.engine_dead.is_set() else 200, b"")

    def metrics(self, _body: bytes) -> None:
        name = self.server.app.plan.served[0]
        text = "".join(
            f"# HELP vllm:{m} {h}\n# TYPE vllm:{m} gauge\n"
            f'vllm:{m}{{engine="0",model_name="{name}"}} 0.0\n'
            for m, h in (
                ("num_requests_running", "Number of requests in model execution batches."),
                ("num_requests_waiting", "Number of requests waiting to be processed."),
            )
        )
        self.send_body(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def models(self, _body: bytes) -> None:
        app = self.server.app
        data = [
            {
                "id": name,
                "object": "model",
                "created": app.created,
                "owned_by": "vllm",
                "root": app.plan.args.model,
                "parent": None,
                "max_model_len": app.plan.max_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": app.created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in app.plan.served
        ]
        self.send_json(200, {"object": "list", "data": data})

    def parse_body(self, body: bytes) -> dict[str, Any] | None:
        """JSON body checked like vLLM does; None after an error response was sent."""
        try:
            req = json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            detail = str(exc).split(":")[0]
            self.send_err(
                400,
                "[{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', "
                f"'input': {{}}, 'ctx': {{'error': {detail!r}}}}}]",
                "BadRequestError",
            )
            return None
        app = self.server.app
        if not isinstance(req, dict):
            self.send_err(400, "Input should be a valid dictionary", "BadRequestError")
            return None
        model = req.get("model")
        if model is not None and model not in app.plan.served:
            self.send_err(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
            return None
        max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            self.send_err(
                400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError"
            )
            return None
        if app.engine_dead.is_set():
            self.send_err(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
            return None
        return req

    def answer(self, req: dict[str, Any]) -> tuple[str, str, int]:
        """The canned reply, cut to max_tokens words (one word = one token here)."""
        version = self.server.app.plan.cfg["vllm_version"]
        words = (
            f"Hello from the kimi-ops stand-in (emulated vLLM {version}, no model loaded).".split()
        )
        limit = req.get("max_completion_tokens", req.get("max_tokens"))
        if limit is not None and limit < len(words):
            return " ".join(words[:limit]), "length", limit
        return " ".join(words), "stop", len(words)

    def chat(self, body: bytes) -> None:
        req = self.parse_body(body)
        if req is None:
            return
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            self.send_err(400, "messages: Field required (a non-empty list)", "BadRequestError")
            return
        prompt_tokens = 0
        for msg in messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            prompt_tokens += len(str(content or "").split()) + 4
        text, finish, n = self.answer(req)
        name = req.get("model") or self.server.app.plan.served[0]
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if req.get("stream"):
            self.stream(rid, now, name, text, finish, chat=True)
            return
        message = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning_content": None,
        }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + n,
            "completion_tokens": n,
            "prompt_tokens_details": None,
        }
        resp = {
            "id": rid,
            "object": "chat.completion",
            "created": now,
            "model": name,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
        self.send_json(200, resp)

    def completions(self, body: bytes) -> None:
        req = self.parse_body(body)
        if req is None:
            return
        if req.get("prompt") is None:
            self.send_err(400, "prompt: Field required", "BadRequestError")
            return
        text, finish, n = self.answer(req)
        name = req.get("model") or self.server.app.plan.served[0]
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if req.get("stream"):
            self.stream(rid, now, name, text, finish, chat=False)
            return
        p_tokens = len(str(req["prompt"]).split())
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        usage = {"prompt_tokens": p_tokens, "total_tokens": p_tokens + n, "completion_tokens": n}
        resp = {"id": rid, "object": "text_completion", "created": now, "model": name}
        self.send_json(200, dict(resp, choices=[choice], usage=usage))

    def stream(self, rid: str, now: int, name: str, text: str, finish: str, chat: bool) -> None:
        """Server-sent events, one word per chunk, then 'data: [DONE]'."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        obj = "chat.completion.chunk" if chat else "text_completion"

        def event(delta: dict[str, Any] | str, done: str | None) -> bytes:
            choice: dict[str, Any] = {"index": 0}
            choice.update({"delta": delta} if chat else {"text": delta})
            choice.update({"logprobs": None, "finish_reason": done})
            payload = {"id": rid, "object": obj, "created": now, "model": name, "choices": [choice]}
            return f"data: {json.dumps(payload)}\n\n".encode()

        out = [event({"role": "assistant", "content": ""}, None)] if chat else []
        for i, word in enumerate(text.split(" ")):
            piece = word if i == 0 else " " + word
            out.append(event({"content": piece} if chat else piece, None))
        out.append(event({} if chat else "", finish))
        out.append(b"data: [DONE]\n\n")
        self.wfile.write(b"".join(out))
        self.wfile.flush()
