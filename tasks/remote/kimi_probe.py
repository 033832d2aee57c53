#!/usr/bin/env python3
"""kimi-ops HTTP probe, run ON the GPU host by verify (stdlib only, uploaded to run_dir).

Checks the server the way a client would, from the host itself so that no firewall in between
matters: GET /health, GET /v1/models, and one POST /v1/chat/completions with max_tokens=2
(a prefill and one decode step).
The API key is read from the 0600 env file (VLLM_API_KEY), never from the command line.
Prints one JSON line: {"health", "models_status", "models", "chat_status", "answer", "error"}.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import urllib.error
import urllib.request
from typing import Any

_ANSI_C_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "'": "'"}


def _ansi_c(body: str) -> str:
    """The value of bash's ``$'...'`` quoting as kimi-ops writes it (a value with a newline)."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc.startswith("x") and len(esc) > 1:
            return chr(int(esc[1:], 16))
        return _ANSI_C_ESCAPES.get(esc, "\\" + esc)

    return re.sub(r"\\(x[0-9a-fA-F]{1,2}|.)", one, body, flags=re.DOTALL)


def _env_value(value: str) -> str:
    if value.startswith("$'") and value.endswith("'") and len(value) >= 3:
        return _ansi_c(value[2:-1])
    try:
        parts = shlex.split(value) if value else [""]
    except ValueError:
        return ""
    return parts[0] if parts else ""


def read_env_file(path: str) -> dict[str, str]:
    env: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line.startswith("export "):
                    line = line[len("export ") :]
                if "=" not in line or line.startswith("#"):
                    continue
                name, _, value = line.partition("=")
                env[name.strip()] = _env_value(value)
    except OSError:
        pass
    return env


def request(
    url: str, *, key: str | None, body: dict[str, Any] | None, timeout: float
) -> tuple[int | None, Any, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, None, f"{url}: {reason}"
    try:
        return status, json.loads(raw.decode("utf-8", "replace") or "null"), ""
    except ValueError:
        return status, None, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True, help="served model name")
    ap.add_argument("--env-file", default="")
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    key = read_env_file(args.env_file).get("VLLM_API_KEY") if args.env_file else None
    host = f"[{args.address}]" if ":" in args.address else args.address
    base = f"http://{host}:{args.port}"
    out: dict[str, Any] = {
        "health": None,
        "models_status": None,
        "models": [],
        "chat_status": None,
        "answer": "",
        "error": "",
    }
    status, _, err = request(f"{base}/health", key=None, body=None, timeout=5)
    out["health"] = status
    if status != 200:
        out["error"] = err or f"GET /health answered {status}"
        print(json.dumps(out))
        return 0
    status, data, err = request(f"{base}/v1/models", key=key, body=None, timeout=10)
    out["models_status"] = status
    if isinstance(data, dict):
        out["models"] = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    if status != 200:
        out["error"] = err or f"GET /v1/models answered {status}"
        print(json.dumps(out))
        return 0
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": "Say hello."}],
        # Two tokens, EOS ignored: the answer needs one decode step after the prefill. vLLM's
        # CPU MLA backend without AMX prefills an FP8 KV cache, then dies on the first decode
        # (`expected scalar type BFloat16 but found Float8_e4m3fn`): one token read as ready.
        "max_tokens": 2,
        "ignore_eos": True,
    }
    status, data, err = request(
        f"{base}/v1/chat/completions", key=key, body=body, timeout=args.timeout
    )
    out["chat_status"] = status
    if status == 200 and isinstance(data, dict):
        try:
            out["answer"] = data["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            out["error"] = "chat completion answered 200 without choices"
    else:
        detail = data.get("error", data) if isinstance(data, dict) else ""
        said = f"POST /v1/chat/completions answered {status}: {detail}"
        # a cut is marked ("…"): fab masks a secret's head left before a cut mark
        out["error"] = err or (said if len(said) <= 300 else said[:300] + "…")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
