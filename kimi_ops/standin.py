#!/usr/bin/env python3
"""kimi-ops stand-in engine: it EMULATES a vLLM OpenAI-compatible server for tests and demos.

THIS IS NOT vLLM. It loads no model, touches no GPU and needs only the Python standard library.
The deploy tool uploads it as ``<run_dir>/kimi_standin.py`` and starts it in place of
``python -m vllm.entrypoints.openai.api_server`` with the very same flags. It then behaves like
vLLM 0.1x as seen from outside: the same startup stage lines, process prefixes and tracebacks;
the same failures (FP8 KV cache with TRITON_MLA on SM120 before 0.18, busy port, missing model,
missing --trust-remote-code, unknown flags, GPUs held by a stale server, too little KV-cache
memory); a process tree (API server -> engine core -> TP workers); /dev/shm files like vLLM's
shared-memory queues; and finally an HTTP server whose /v1/chat/completions returns a canned
sentence.

Modes (first argument):
  (anything else)   serve mode; takes vLLM api_server flags (--model DIR --port 8000 ...)
  nvidia-smi ARGS   emulates nvidia-smi (--query-gpu, --query-compute-apps, -L, bare table)
                    for the emulated GPUs and the live stand-in servers
  vllm-version      prints the emulated vLLM version (as `import vllm; vllm.__version__` would)

Settings come from the JSON file named by $KIMI_STANDIN_CONFIG, else ``standin.json`` next to
this file, else defaults (see DEFAULTS; unknown keys are ignored).

This file must stay self-contained: it runs alone on the host and imports nothing from kimi_ops.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import mmap
import os
import random
import re
import secrets
import select
import signal
import socket
import string
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# ------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------

CONFIG_ENV = "KIMI_STANDIN_CONFIG"
CONFIG_NAME = "standin.json"
STATE_NAME = "standin-gpu-state.json"
HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULTS: dict[str, Any] = {
    "gpu": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_count": 8,
    "compute_capability": "12.0",
    "vllm_version": "0.17.1",
    "load_seconds": 3.0,  # total emulated loading time (shards take 70 %)
    "memory_mib": 97887,  # per GPU
    "driver_version": "580.95.05",
    "crash_after_seconds": None,  # engine dies this long after "ready" (exit 1)
    "hang": False,  # print the first stages, then go silent forever
    "echo_argv": True,  # print "kimi-standin argv: <json>" first
    # Extras beyond the brief:
    "cuda_version": "13.0",  # nvidia-smi table header only
    "model_weights_gib": 71.2,  # per-GPU weights ("Model loading took 71.2 GiB memory")
    "entrypoint": "api_server",  # "api_server" (python -m ...) or "serve" (vllm serve)
    "state_file": None,  # default: <dir of this file>/standin-gpu-state.json
    "shm_dir": "/dev/shm",
    "compute_app_name": "title",  # nvidia-smi process_name: "title" (VLLM::Worker_TP0) | "python"
    # --distributed-executor-backend ray: seconds to wait for the placement group (vLLM: 1800)
    "ray_pg_timeout": 30.0,
}


class ConfigError(Exception):
    pass


def _number(cfg: dict[str, Any], key: str, allow_none: bool = False) -> float | None:
    value = cfg[key]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{key} must be a non-negative number, got {value!r}")
    return float(value)


def load_config() -> dict[str, Any]:
    """Settings from $KIMI_STANDIN_CONFIG, else standin.json beside this file, else defaults."""
    cfg = dict(DEFAULTS)
    path = os.environ.get(CONFIG_ENV) or ""
    if not path and os.path.isfile(os.path.join(HERE, CONFIG_NAME)):
        path = os.path.join(HERE, CONFIG_NAME)
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object")
        cfg.update({k: v for k, v in data.items() if k in cfg})
    count = cfg["gpu_count"]
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 64:
        raise ConfigError(f"gpu_count must be an integer 0..64, got {count!r}")
    cfg["compute_capability"] = str(cfg["compute_capability"])
    if not re.match(r"^\d+\.\d+$", cfg["compute_capability"]):
        raise ConfigError(f"compute_capability must look like 12.0: {cfg['compute_capability']!r}")
    for key in ("gpu", "vllm_version", "driver_version", "cuda_version", "shm_dir"):
        cfg[key] = str(cfg[key])
    cfg["load_seconds"] = _number(cfg, "load_seconds")
    cfg["memory_mib"] = int(_number(cfg, "memory_mib") or 0)
    cfg["model_weights_gib"] = _number(cfg, "model_weights_gib")
    cfg["crash_after_seconds"] = _number(cfg, "crash_after_seconds", allow_none=True)
    cfg["ray_pg_timeout"] = _number(cfg, "ray_pg_timeout")
    for key in ("hang", "echo_argv"):
        if not isinstance(cfg[key], bool):
            raise ConfigError(f"{key} must be true or false, got {cfg[key]!r}")
    if cfg["entrypoint"] not in ("api_server", "serve"):
        raise ConfigError(f"entrypoint must be 'api_server' or 'serve': {cfg['entrypoint']!r}")
    if cfg["compute_app_name"] not in ("title", "python"):
        raise ConfigError(
            f"compute_app_name must be 'title' or 'python': {cfg['compute_app_name']!r}"
        )
    cfg["state_file"] = str(cfg["state_file"] or os.path.join(HERE, STATE_NAME))
    return cfg


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.17.1' -> (0, 17, 1); pre-release suffixes (rc1, .dev5+g...) count as the release."""
    m = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)) if m else (0, 0, 0)


def visible_gpus(cfg: dict[str, Any]) -> list[int]:
    """GPU indices this process may use: CUDA_VISIBLE_DEVICES (numeric ids) if set."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(cfg["gpu_count"]))
    out: list[int] = []
    for part in env.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= cfg["gpu_count"]:
            break  # like CUDA: an invalid id hides itself and everything after it
        out.append(int(part))
    return out


# ------------------------------------------------------------------------------------------
# Log output in vLLM's formats
# ------------------------------------------------------------------------------------------

_OUT_LOCK = threading.Lock()


def _write(stream: Any, text: str) -> None:
    with _OUT_LOCK:
        try:
            if stream is sys.stderr:
                sys.stdout.flush()
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass


def plain(text: str, stream: Any = None, end: str = "\n") -> None:
    _write(sys.stdout if stream is None else stream, text + end)


class Role:
    """One emulated vLLM process; its lines start with '(NAME pid=N) '."""

    def __init__(self, name: str, pid: int, prefixed: bool = True) -> None:
        self.name = name
        self.pid = pid
        self.prefix = f"({name} pid={pid}) " if prefixed else ""

    def log(self, level: str, src: str, msg: str) -> None:
        """A vLLM logger line; every line of a multi-line message repeats the header."""
        head = f"{self.prefix}{level} {time.strftime('%m-%d %H:%M:%S')} [{src}] "
        _write(sys.stdout, "".join(head + part + "\n" for part in msg.split("\n")))

    def info(self, src: str, msg: str) -> None:
        self.log("INFO", src, msg)

    def warning(self, src: str, msg: str) -> None:
        self.log("WARNING", src, msg)

    def error(self, src: str, msg: str) -> None:
        self.log("ERROR", src, msg)

    def uvicorn(self, msg: str) -> None:
        _write(sys.stdout, f"{self.prefix}INFO:     {msg}\n")

    def raw(self, text: str) -> None:
        """Unformatted stderr text (a traceback); vLLM still prefixes every line."""
        _write(sys.stderr, "".join(f"{self.prefix}{line}\n" for line in text.split("\n")))


# ------------------------------------------------------------------------------------------
# Traceback text
# ------------------------------------------------------------------------------------------

PYV = f"python{sys.version_info[0]}.{sys.version_info[1]}"
STDLIB = os.path.join(sys.base_prefix, "lib", PYV)
SITE = os.path.join(sys.prefix, "lib", PYV, "site-packages")
PATHS = {"V/": SITE + "/vllm/", "S/": SITE + "/", "L/": STDLIB + "/"}

Frame = tuple  # (path, line, function, code | None, caret: bool)


def tb(spec: str) -> list[Frame]:
    """Frames from a compact spec, one frame per 'PATH:LINE in FUNC' line, each optionally
    followed by an indented code line; a code line starting with '^' gets Python 3.11-style
    carets. PATH prefixes: V/ = vllm package, S/ = site-packages, L/ = stdlib."""
    frames: list[Frame] = []
    for raw in spec.strip("\n").splitlines():
        if not raw.strip():
            continue
        if raw.startswith(" "):
            code = raw.strip()
            path, line, func, _, _ = frames[-1]
            frames[-1] = (path, line, func, code.lstrip("^"), code.startswith("^"))
            continue
        loc, func = raw.rsplit(" in ", 1)
        path, line = loc.rsplit(":", 1)
        for short, full in PATHS.items():
            if path.startswith(short):
                path = full + path[len(short) :]
        frames.append((path, int(line), func, None, False))
    return frames


def _carets(code: str) -> str | None:
    """Underline the called expression like CPython >= 3.11 does (approximately)."""
    start = 0
    for marker in (" = ", "return ", "async with ", "with "):
        idx = code.find(marker)
        if idx != -1 and (marker != " = " or "(" not in code or idx < code.find("(")):
            start = idx + len(marker)
            break
    body = code[start:]
    if body.endswith(" as ("):
        body = body[: body.rfind(")") + 1]
    if not body or start == 0 and body == code:
        return None
    return " " * (4 + start) + "^" * len(body)


def traceback_text(
    frames: list[Frame], exc: str, cause: tuple[list[Frame], str] | None = None
) -> list[str]:
    lines: list[str] = []
    chain = ([cause] if cause else []) + [(frames, exc)]
    for i, (fr, text) in enumerate(chain):
        if i:
            lines += [
                "",
                "The above exception was the direct cause of the following exception:",
                "",
            ]
        lines.append("Traceback (most recent call last):")
        for path, line, func, code, caret in fr:
            lines.append(f'  File "{path}", line {line}, in {func}')
            if code:
                lines.append(f"    {code}")
                under = _carets(code) if caret and sys.version_info >= (3, 11) else None
                if under:
                    lines.append(under)
        lines += text.split("\n")
    return lines


def runpy_frames(entrypoint: str) -> list[Frame]:
    if entrypoint == "serve":
        return tb("""
/usr/local/bin/vllm:10 in <module>
    sys.exit(main())
V/entrypoints/cli/main.py:73 in main
    args.dispatch_function(args)
V/entrypoints/cli/serve.py:60 in cmd
    uvloop.run(run_server(args))
""")
    if sys.version_info >= (3, 11):
        head = tb("<frozen runpy>:198 in _run_module_as_main\n<frozen runpy>:88 in _run_code")
    else:
        head = tb("""
L/runpy.py:196 in _run_module_as_main
    return _run_code(code, main_globals, None,
L/runpy.py:86 in _run_code
    exec(code, run_globals)
""")
    return head + tb("""
V/entrypoints/openai/api_server.py:1041 in <module>
    uvloop.run(run_server(args))
""")


def api_prelude(entrypoint: str) -> list[Frame]:
    """Frames from process start down into api_server.run_server (0.1x layout)."""
    return runpy_frames(entrypoint) + tb("""
S/uvloop/__init__.py:96 in run
    ^return __asyncio.run(
L/asyncio/runners.py:195 in run
    ^return runner.run(main)
L/asyncio/runners.py:118 in run
    ^return self._loop.run_until_complete(task)
uvloop/loop.pyx:1518 in uvloop.loop.Loop.run_until_complete
S/uvloop/__init__.py:48 in wrapper
    ^return await main
""")


def engine_client_prelude(entrypoint: str) -> list[Frame]:
    return api_prelude(entrypoint) + tb("""
V/entrypoints/openai/api_server.py:1002 in run_server
    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)
V/entrypoints/openai/api_server.py:1021 in run_server_worker
    ^async with build_async_engine_client(
L/contextlib.py:210 in __aenter__
    ^return await anext(self.gen)
V/entrypoints/openai/api_server.py:171 in build_async_engine_client
    ^async with build_async_engine_client_from_engine_args(
L/contextlib.py:210 in __aenter__
    ^return await anext(self.gen)
""")


MODEL_CONFIG_FRAMES = """
V/entrypoints/openai/api_server.py:198 in build_async_engine_client_from_engine_args
    ^vllm_config = engine_args.create_engine_config(usage_context=usage_context)
V/engine/arg_utils.py:1374 in create_engine_config
    ^model_config = self.create_model_config()
V/engine/arg_utils.py:1228 in create_model_config
    ^return ModelConfig(
S/pydantic/_internal/_dataclasses.py:121 in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
V/config/model.py:458 in __post_init__
    ^hf_config = get_config(
"""

ENGINE_STARTUP_FRAMES = """
V/entrypoints/openai/api_server.py:212 in build_async_engine_client_from_engine_args
    ^async_llm = AsyncLLM.from_vllm_config(
V/v1/engine/async_llm.py:207 in from_vllm_config
    ^return cls(
V/v1/engine/async_llm.py:134 in __init__
    ^self.engine_core = EngineCoreClient.make_async_mp_client(
V/v1/engine/core_client.py:102 in make_async_mp_client
    ^return AsyncMPClient(*client_args)
V/v1/engine/core_client.py:769 in __init__
    super().__init__(
V/v1/engine/core_client.py:448 in __init__
    ^with launch_core_engines(vllm_config, executor_class, log_stats) as (
L/contextlib.py:144 in __exit__
    next(self.gen)
V/v1/engine/utils.py:732 in launch_core_engines
    wait_for_engine_startup(
V/v1/engine/utils.py:785 in wait_for_engine_startup
    raise RuntimeError(
"""

# ------------------------------------------------------------------------------------------
# Argument parsing: vLLM api_server / `vllm serve` flags
# ------------------------------------------------------------------------------------------

KV_CACHE_DTYPES = ["auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
MLA_BACKENDS = ["TRITON_MLA", "CUTLASS_MLA", "FLASHINFER_MLA", "FLASHMLA", "FLASH_ATTN_MLA"]
ATTENTION_BACKENDS = MLA_BACKENDS + [
    "FLASH_ATTN",
    "TRITON_ATTN",
    "FLASHINFER",
    "FLEX_ATTENTION",
    "TREE_ATTN",
    "TORCH_SDPA",
    "CPU_ATTN",
    "FLASHMLA_SPARSE",
    "FLASHINFER_MLA_SPARSE_SM120",
    "ROCM_ATTN",
    "ROCM_AITER_MLA",
    "ROCM_AITER_FA",
    "ROCM_AITER_UNIFIED_ATTN",
    "PALLAS",
    "IPEX",
    "NO_ATTENTION",
]
SERVE_TOP_USAGE = (
    "usage: vllm [-h] [-v] {chat,complete,serve,launch,bench,collect-env,run-batch} ..."
)


class VllmArgumentParser(argparse.ArgumentParser):
    """argparse with vLLM's FlexibleArgumentParser habit: '_' equals '-' in flag names."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        norm = []
        for arg in list(sys.argv[1:] if args is None else args):
            if arg.startswith("--") and len(arg) > 2:
                key, sep, value = arg.partition("=")
                arg = key.replace("_", "-") + sep + value
            norm.append(arg)
        return super().parse_known_args(norm, namespace)


def _model_len(text: str) -> int:
    """vLLM accepts human-readable lengths: 131072, 128k (x1000), 128K (x1024), 1m, 1M; and
    ``auto`` / ``-1`` (vllm#29431: fit the length to the KV cache), returned as -1."""
    if text.strip().lower() in ("auto", "-1"):
        return -1
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*$", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid length: {text!r}")
    mult = {"": 1, "k": 10**3, "K": 2**10, "m": 10**6, "M": 2**20, "g": 10**9, "G": 2**30}
    return int(float(m.group(1)) * mult[m.group(2)])


def build_parser(ver: tuple[int, int, int], entrypoint: str) -> argparse.ArgumentParser:
    if entrypoint == "serve":
        p = VllmArgumentParser(
            prog="vllm serve",
            usage="vllm serve [model_tag] [options]",
            description="Launch a local OpenAI-compatible API server to serve LLM completions.",
            allow_abbrev=False,
        )
        p.add_argument("model_tag", nargs="?", default=None)
    else:
        p = VllmArgumentParser(
            prog="api_server.py",
            description="vLLM OpenAI-Compatible RESTful API server.",
            allow_abbrev=False,
        )
    a = p.add_argument

    def flag(*names: str) -> None:
        a(*names, action="store_true", default=False)

    def pair(name: str) -> None:  # --x / --no-x (BooleanOptionalAction, py3.8-safe)
        dest = name.replace("-", "_")
        a(f"--{name}", dest=dest, action="store_true", default=None)
        a(f"--no-{name}", dest=dest, action="store_false", default=None)

    def opt(*names: str, **kw: Any) -> None:
        kw.setdefault("default", None)
        a(*names, **kw)

    # Frontend
    opt("--host")
    opt("--port", type=int, default=8000)
    opt("--uds")
    opt(
        "--uvicorn-log-level",
        default="info",
        choices=["critical", "debug", "error", "info", "trace", "warning"],
    )
    flag("--disable-uvicorn-access-log")
    flag("--allow-credentials")
    for name in ("--allowed-origins", "--allowed-methods", "--allowed-headers"):
        opt(name, default=["*"])
    opt("--api-key", nargs="+")
    opt("--lora-modules", nargs="+")
    opt("--chat-template")
    opt("--chat-template-content-format", default="auto", choices=["auto", "string", "openai"])
    opt("--response-role", default="assistant")
    for name in ("--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--root-path"):
        opt(name)
    opt("--middleware", action="append", default=[])
    flag("--return-tokens-as-token-ids")
    flag("--disable-frontend-multiprocessing")
    flag("--enable-request-id-headers")
    flag("--enable-auto-tool-choice")
    # Parser names are not validated: real vLLM has choices, but an incomplete list here would
    # reject flags that real vLLM accepts.
    opt("--tool-call-parser")
    opt("--tool-parser-plugin", default="")
    opt("--reasoning-parser", default="")
    opt("--max-log-len", type=int)
    flag("--disable-fastapi-docs")
    flag("--enable-prompt-tokens-details")
    flag("--enable-server-load-tracking")
    flag("--enable-force-include-usage")
    flag("--headless")
    opt("--api-server-count", "-asc", type=int, default=1)
    opt("--config", default="")
    # --enable-log-requests / --no-enable-log-requests replaced --disable-log-requests in 0.10
    # (approximate). --disable-log-requests was deprecated in 0.10/0.11 ("will be removed in
    # v0.12.0"); facts.md places the removal between 0.11 and 0.17: we pick 0.12, from which on
    # it is an argparse error ("unrecognized arguments").
    if ver >= (0, 10, 0):
        pair("enable-log-requests")
    if ver < (0, 12, 0):
        flag("--disable-log-requests")
    flag("--disable-log-stats")
    # Model
    opt("--model", default="Qwen/Qwen3-0.6B")
    opt("--served-model-name", nargs="+")
    opt("--tokenizer")
    opt("--tokenizer-mode", default="auto")
    pair("trust-remote-code")
    for name in ("--revision", "--code-revision", "--tokenizer-revision", "--download-dir"):
        opt(name)
    opt("--load-format", default="auto")
    opt("--safetensors-load-strategy", default="lazy")
    opt(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float", "float16", "float32", "half"],
    )
    opt("--seed", type=int)
    opt("--max-model-len", type=_model_len)
    opt("--quantization", "-q")
    pair("enforce-eager")
    opt("--max-logprobs", type=int, default=20)
    opt("--generation-config", default="auto")
    for name in (
        "--override-generation-config",
        "--hf-overrides",
        "--hf-config-path",
        "--limit-mm-per-prompt",
        "--mm-processor-kwargs",
        "--speculative-config",
        "--kv-transfer-config",
        "--additional-config",
        "--structured-outputs-config",
    ):
        opt(name)
    opt("--compilation-config", "-O")
    opt("--model-impl", default="auto")
    opt("--mm-encoder-tp-mode", default="weights", choices=["data", "weights"])
    # Parallel
    opt("--distributed-executor-backend", choices=["external_launcher", "mp", "ray", "uni"])
    opt("--pipeline-parallel-size", "-pp", type=int, default=1)
    opt("--tensor-parallel-size", "-tp", type=int, default=1)
    opt("--data-parallel-size", "-dp", type=int, default=1)
    pair("enable-expert-parallel")
    pair("enable-eplb")
    flag("--disable-custom-all-reduce")
    # Cache
    opt("--block-size", type=int)
    opt("--gpu-memory-utilization", type=float, default=0.9)
    opt("--kv-cache-memory-bytes", type=int)
    opt("--swap-space", type=float, default=4)
    opt("--cpu-offload-gb", type=float, default=0)
    opt("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    pair("calculate-kv-scales")
    pair("enable-prefix-caching")
    opt("--prefix-caching-hash-algo", default="sha256")
    # --attention-backend appeared around 0.11 (approximate); before, only the env var
    # VLLM_ATTENTION_BACKEND selected a backend.
    if ver >= (0, 11, 0):
        opt("--attention-backend", choices=ATTENTION_BACKENDS)
    # Scheduler / misc
    opt("--max-num-batched-tokens", type=int)
    opt("--max-num-seqs", type=int)
    opt("--max-num-partial-prefills", type=int, default=1)
    pair("enable-chunked-prefill")
    pair("async-scheduling")
    opt("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    pair("enable-lora")
    opt("--max-loras", type=int, default=1)
    opt("--max-lora-rank", type=int, default=16)
    pair("enable-sleep-mode")
    return p


def parse_serve_args(
    argv: list[str], ver: tuple[int, int, int], entrypoint: str
) -> tuple[Any, argparse.ArgumentParser]:
    parser = build_parser(ver, entrypoint)
    args, extras = parser.parse_known_args(argv)
    if extras:
        msg = "unrecognized arguments: " + " ".join(extras)
        if entrypoint == "serve":
            # `vllm serve` lets the top-level `vllm` parser report leftovers, so real vLLM
            # prints the top usage and "vllm: error: unrecognized arguments: ...".
            _write(sys.stderr, f"{SERVE_TOP_USAGE}\nvllm: error: {msg}\n")
            sys.exit(2)
        parser.error(msg)  # "usage: api_server.py ..." + "api_server.py: error: ...", exit 2
    if entrypoint == "serve" and args.model_tag:
        args.model = args.model_tag
    return args, parser


def non_default_args(args: Any, parser: argparse.ArgumentParser) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for action in parser._actions:
        if action.dest != "help" and action.dest not in out:
            value = getattr(args, action.dest, None)
            if value != action.default:
                out[action.dest] = value
    return out


# ------------------------------------------------------------------------------------------
# Model directory
# ------------------------------------------------------------------------------------------


def _scheme_is_fp8(scheme: Any) -> bool:
    if isinstance(scheme, str):
        return scheme.strip().upper().startswith("FP8")
    if isinstance(scheme, dict):
        return scheme.get("num_bits") == 8 and str(scheme.get("type", "float")) == "float"
    return False


class ModelInfo:
    """What vLLM would learn from config.json (+ hf_quant_config.json, index.json)."""

    def __init__(self, path: str, config: dict[str, Any]) -> None:
        self.path = path
        self.config = config
        text = config.get("text_config")
        self.text: dict[str, Any] = text if isinstance(text, dict) else {}
        archs = config.get("architectures") or self.text.get("architectures") or []
        self.arch = str(archs[0]) if archs else str(config.get("model_type") or "Unknown")
        auto_map = config.get("auto_map")
        self.auto_map: dict[str, Any] = auto_map if isinstance(auto_map, dict) else {}
        self.num_layers = int(self.get("num_hidden_layers", 61))
        lora_rank = self.get("kv_lora_rank", None)
        self.is_mla = lora_rank is not None or any(h in self.arch for h in ("Deepseek", "Kimi"))
        self.kv_lora_rank = int(lora_rank or 512)
        self.rope_dim = int(self.get("qk_rope_head_dim", 64))
        heads = int(self.get("num_attention_heads", 64))
        self.num_kv_heads = int(self.get("num_key_value_heads", heads))
        self.head_dim = int(self.get("head_dim", int(self.get("hidden_size", 7168)) // heads))
        self.max_pos = int(self.get("max_position_embeddings", 131072))
        self.quantization: str | None = None
        self.kv_fp8 = False
        self.kv_source = "none"
        self._read_quant()
        self.shards = self._count_shards()

    def get(self, key: str, default: Any) -> Any:
        return self.text[key] if key in self.text else self.config.get(key, default)

    def _read_quant(self) -> None:
        # vLLM's precedence: config.json's quantization_config wins; hf_quant_config.json is
        # read only when config.json has no quantization_config at all.
        qc = self.config.get("quantization_config")
        if isinstance(qc, dict):
            method, algo = str(qc.get("quant_method") or ""), str(qc.get("quant_algo") or "")
            if method == "modelopt":
                self.quantization = "modelopt_fp4" if "FP4" in algo.upper() else "modelopt"
            else:
                self.quantization = method or None
            self.kv_fp8 = _scheme_is_fp8(qc.get("kv_cache_scheme"))
            self.kv_source = "config.json quantization_config.kv_cache_scheme"
            return
        try:
            with open(os.path.join(self.path, "hf_quant_config.json"), encoding="utf-8") as fh:
                quant = json.load(fh).get("quantization")
        except (OSError, ValueError, AttributeError):
            return
        if isinstance(quant, dict):
            algo = str(quant.get("quant_algo") or "")
            if algo:
                self.quantization = "modelopt_fp4" if "FP4" in algo.upper() else "modelopt"
            kv_algo = quant.get("kv_cache_quant_algo")
            self.kv_fp8 = isinstance(kv_algo, str) and kv_algo.upper().startswith("FP8")
            self.kv_source = "hf_quant_config.json quantization.kv_cache_quant_algo"

    def _count_shards(self) -> int:
        try:
            with open(
                os.path.join(self.path, "model.safetensors.index.json"), encoding="utf-8"
            ) as fh:
                weight_map = json.load(fh).get("weight_map")
            if isinstance(weight_map, dict) and weight_map:
                return len(set(weight_map.values()))
        except (OSError, ValueError, AttributeError):
            pass
        try:
            return sum(f.endswith(".safetensors") for f in os.listdir(self.path)) or 64
        except OSError:
            return 64


# ------------------------------------------------------------------------------------------
# GPU state file (written by serve mode, read by nvidia-smi mode and by later servers)
# ------------------------------------------------------------------------------------------


def pid_alive(pid: Any) -> bool:
    """True for a live, non-zombie process."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _entry_alive(entry: dict[str, Any]) -> bool:
    pids = [entry.get("pid")] + list(entry.get("gpu_pids", {}).values())
    return any(pid_alive(p) for p in pids)


def _load_servers(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return []
    servers = data.get("servers") if isinstance(data, dict) else None
    return [s for s in servers or [] if isinstance(s, dict)]


def read_state(path: str) -> list[dict[str, Any]]:
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - flock needs the open file
    except OSError:
        return []
    with fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        return _load_servers(fh.read())


def update_state(path: str, fn: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Locked read-modify-write; dead entries are pruned; the file goes when empty."""
    for _ in range(50):
        with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                if os.fstat(fh.fileno()).st_ino != os.stat(path).st_ino:
                    continue  # unlinked by another process while we waited for the lock
            except FileNotFoundError:
                continue
            servers = fn([s for s in _load_servers(fh.read()) if _entry_alive(s)])
            if servers:
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps({"servers": servers}, indent=2) + "\n")
            else:
                os.unlink(path)
            return


def gpu_usage(cfg: dict[str, Any]) -> dict[int, list[tuple[int, str, int]]]:
    """GPU index -> [(pid, process name, MiB)] for live stand-in processes."""
    usage: dict[int, list[tuple[int, str, int]]] = {}
    for entry in read_state(cfg["state_file"]):
        for gpu, pid in entry.get("gpu_pids", {}).items():
            if pid_alive(pid) and str(gpu).isdigit():
                name = str(entry.get("python", "python3"))
                if cfg["compute_app_name"] == "title":
                    name = str(entry.get("gpu_process_names", {}).get(str(gpu), name))
                mem = int(entry.get("memory_mib_per_gpu", 0))
                usage.setdefault(int(gpu), []).append((int(pid), name, mem))
    return usage


# ------------------------------------------------------------------------------------------
# Shared-memory files (vLLM shm_broadcast buffers and multiprocessing semaphores)
# ------------------------------------------------------------------------------------------


#: Like vLLM, the stand-in keeps its shm files mapped while it runs (forked children inherit the
#: mappings): clean-shm decides per file from /proc/PID/maps, so a live server's files must show.
_SHM_MAPS: list[mmap.mmap] = []


def create_shm_files(shm_dir: str, queues: int, api: Role) -> list[str]:
    made: list[str] = []
    alphabet = string.ascii_lowercase + string.digits + "_"
    try:
        for _ in range(queues):
            # SharedMemory: "psm_" + 8 hex chars; SemLock: "sem.mp-" + 8 chars (a few KB only,
            # real ring buffers are ~100 MiB).
            sem = "sem.mp-" + "".join(random.choice(alphabet) for _ in range(8))
            for name, size in (("psm_" + secrets.token_hex(4), 4096), (sem, 32)):
                path = os.path.join(shm_dir, name)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                made.append(path)
                try:
                    os.ftruncate(fd, size)
                    _SHM_MAPS.append(mmap.mmap(fd, size))
                finally:
                    os.close(fd)
    except OSError as exc:
        api.warning(
            "standin.py:0",
            f"kimi-standin: cannot create shared-memory files in {shm_dir} ({exc}); continuing",
        )
    return made


def remove_files(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


# ------------------------------------------------------------------------------------------
# Output helpers
# ------------------------------------------------------------------------------------------

GIB = 1024**3


def _hms(seconds: float) -> str:
    m, s = divmod(max(0, int(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_text(desc: str, n: int, total: int, elapsed: float, bar: bool = False) -> str:
    pct = int(100 * n / total) if total else 100
    if n == 0 or elapsed <= 0:
        rate, remaining = "?it/s", "?"
    else:
        per_s = n / elapsed
        rate = f"{per_s:.2f}it/s" if per_s >= 1 else f"{1 / per_s:.2f}s/it"
        remaining = _hms((total - n) / per_s)
    stats = f"{n}/{total} [{_hms(elapsed)}<{remaining}, {rate}]"
    if bar:
        filled = int(10 * n / total) if total else 10
        return f"{desc}: {pct:3d}%|{'█' * filled}{' ' * (10 - filled)}| {stats}"
    return f"{desc}: {pct:3d}% Completed | {stats}"


# ------------------------------------------------------------------------------------------
# Serve mode: the plan (API-server side decisions)
# ------------------------------------------------------------------------------------------


class Plan:
    def __init__(self, cfg: dict[str, Any], args: Any, model: ModelInfo) -> None:
        self.cfg = cfg
        self.args = args
        self.model = model
        self.ver = parse_version(cfg["vllm_version"])
        self.tp = max(1, int(args.tensor_parallel_size))
        self.world = self.tp * max(1, int(args.pipeline_parallel_size))
        self.gpus = visible_gpus(cfg)[: self.world]
        self.served: list[str] = list(args.served_model_name or [args.model])
        self.auto_len = args.max_model_len == -1
        self.max_len = model.max_pos if self.auto_len else int(args.max_model_len or model.max_pos)
        self.util = float(args.gpu_memory_utilization)
        kv_arg = args.kv_cache_dtype or "auto"
        if kv_arg == "auto":  # "auto" takes the checkpoint's value (FP8 -> fp8_e4m3)
            self.kv_dtype = "fp8_e4m3" if model.kv_fp8 else "auto"
        else:
            self.kv_dtype = kv_arg
        self.kv_fp8 = self.kv_dtype.startswith("fp8")
        self.eager = bool(args.enforce_eager)
        self.batched = int(args.max_num_batched_tokens or 8192)
        env_backend = os.environ.get("VLLM_ATTENTION_BACKEND")
        if self.ver >= (0, 26, 0):
            env_backend = None  # deprecated env var, silently ignored from 0.26 (facts.md)
        self.backend_arg: str | None = getattr(args, "attention_backend", None) or env_backend
        self.total_gib = cfg["memory_mib"] / 1024.0
        self.weights_gib = float(cfg["model_weights_gib"])

    # Version-dependent process names (approximate switch points).
    def engine_name(self) -> str:
        if self.ver >= (0, 18, 0):
            return "EngineCore"
        return "EngineCore_DP0" if self.ver >= (0, 10, 0) else "EngineCore_0"

    def worker_name(self, rank: int) -> str:
        return f"Worker_TP{rank}" if self.ver >= (0, 11, 0) else f"VllmWorker TP{rank}"


def emit_banner(cfg: dict[str, Any], api: Role, args: Any, parser: argparse.ArgumentParser) -> None:
    ver = parse_version(cfg["vllm_version"])
    version = cfg["vllm_version"]
    if ver >= (0, 15, 0):  # the logo replaced "vLLM API server version X" (approximate)
        for line in (
            "",
            "       █     █     █▄   ▄█",
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
            f"  █▄█▀ █     █     █     █  model   {args.model}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
            "",
        ):
            api.info("utils.py:297", line)
    else:
        api.info("api_server.py:1839", f"vLLM API server version {version}")
    api.info("utils.py:233", f"non-default args: {non_default_args(args, parser)!r}")
    if getattr(args, "disable_log_requests", False) and ver >= (0, 10, 0):
        api.warning(
            "arg_utils.py:1902",
            "`--disable-log-requests` is deprecated and has been replaced with "
            "`--no-enable-log-requests`. This will be removed in v0.12.0.",
        )


def check_max_len(cfg: dict[str, Any], args: Any, model: ModelInfo, api: Role) -> int | None:
    """vLLM refuses --max-model-len above max_position_embeddings unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""
    want = args.max_model_len
    if not want or want == -1 or want <= model.max_pos:
        return None
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1":
        api.warning(
            "model.py:2150",
            f"User-specified max_model_len ({want}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model.max_pos} or model_max_length=None in model's "
            "config.json). VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the "
            "model uses relative position encoding (RoPE), positions exceeding "
            "derived_max_model_len lead to nan. If the model uses absolute position encoding, "
            "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds "
            "error.",
        )
        return None
    frames = engine_client_prelude(cfg["entrypoint"]) + tb(MODEL_CONFIG_FRAMES)[:4]
    msg = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        f"  Value error, User-specified max_model_len ({want}) is greater than the derived "
        f"max_model_len (max_position_embeddings={model.max_pos} or model_max_length=None in "
        "model's config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme "
        "caution. If the model uses relative position encoding (RoPE), positions exceeding "
        "derived_max_model_len lead to nan. If the model uses absolute position encoding, "
        "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error. "
        "[type=value_error, input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.11/v/value_error"
    )
    return fail_api(api, traceback_text(frames, msg))


def emit_config_lines(plan: Plan, api: Role) -> None:
    api.info("model.py:1580", f"Using max model len {plan.max_len}")
    if plan.model.quantization == "modelopt_fp4":
        api.info(
            "modelopt.py:925",
            "Detected ModelOpt NVFP4 checkpoint. Please note that the format is experimental "
            "and could change in future.",
        )
    if plan.kv_fp8:
        api.info(
            "cache.py:211",
            f"Using {plan.kv_dtype} data type to store kv cache. It reduces the GPU memory "
            "footprint and boosts the performance. Meanwhile, it may cause accuracy drop without "
            "a proper scaling factor.",
        )
    api.info(
        "scheduler.py:231",
        f"Chunked prefill is enabled with max_num_batched_tokens={plan.batched}.",
    )
    if plan.world > 1:
        api.info("parallel.py:540", "Defaulting to use mp for distributed inference")
    api.info("vllm.py:748", "Asynchronous scheduling is enabled.")
    if plan.eager:
        api.warning(
            "vllm.py:782",
            "Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to "
            "setting -cc.mode=none -cc.cudagraph_mode=none",
        )
    if os.environ.get("VLLM_ATTENTION_BACKEND") and plan.ver >= (0, 11, 0):
        api.warning(
            "envs.py:1528",
            "VLLM_ATTENTION_BACKEND is deprecated; use --attention-backend instead"
            + (" (it is ignored from v0.26)." if plan.ver < (0, 26, 0) else ". It is ignored."),
        )


def fail_api(api: Role, lines: list[str]) -> int:
    api.raw("\n".join(lines))
    return 1


NOT_FOUND = """ValueError: Invalid repository ID or local directory specified: '{path}'.
Please verify the following requirements:
1. Provide a valid Hugging Face repository ID.
2. Specify a local directory that contains a recognized configuration file.
   - For Hugging Face models: ensure the presence of a 'config.json'.
   - For Mistral models: ensure the presence of a 'params.json'.
3. For GGUF: pass the local path of the GGUF checkpoint.
   Loading GGUF from a remote repo directly is not yet supported.
"""


def check_model(cfg: dict[str, Any], args: Any, api: Role) -> ModelInfo | int:
    """ModelInfo, or vLLM's model-not-found / bad config / trust-remote-code error (-> 1)."""
    path = args.model
    outer = engine_client_prelude(cfg["entrypoint"]) + tb(MODEL_CONFIG_FRAMES)
    not_found_frames = outer + tb("""
V/transformers_utils/config.py:620 in get_config
    raise ValueError(error_message) from e
""")
    probe = tb("""
V/transformers_utils/config.py:598 in get_config
    if is_gguf or file_or_path_exists(model, HF_CONFIG_NAME, revision=revision):
V/transformers_utils/config.py:127 in file_or_path_exists
    ^return file_exists(
""")
    if not os.path.isdir(path):
        # Not a local directory: vLLM treats the name as a Hugging Face repo id.
        if re.match(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$", path):
            cause = (
                probe + tb("S/huggingface_hub/hf_api.py:3041 in file_exists"),
                "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: "
                f"Root=1-{secrets.token_hex(4)}-{secrets.token_hex(12)})\n\n"
                f"Repository Not Found for url: https://huggingface.co/{path}/resolve/main/"
                "config.json.\nPlease make sure you specified the correct `repo_id` and "
                "`repo_type`.\nIf you are trying to access a private or gated repo, make sure "
                "you are authenticated.",
            )
        else:
            cause = (
                probe
                + tb("""
S/huggingface_hub/utils/_validators.py:106 in _inner_fn
    validate_repo_id(arg_value)
S/huggingface_hub/utils/_validators.py:154 in validate_repo_id
    raise HFValidationError(
"""),
                "huggingface_hub.errors.HFValidationError: Repo id must be in the form "
                f"'repo_name' or 'namespace/repo_name': '{path}'. Use `repo_type` argument if "
                "needed.",
            )
        return fail_api(api, traceback_text(not_found_frames, NOT_FOUND.format(path=path), cause))
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        cause = (
            tb("V/transformers_utils/config.py:606 in get_config\n    raise ValueError("),
            "ValueError: Could not detect config format for no config file found. With "
            "config_format 'auto', ensure your model has either config.json (HF format) or "
            "params.json (Mistral format). Otherwise please specify your_custom_config_format "
            "in engine args for customized config parser.",
        )
        return fail_api(api, traceback_text(not_found_frames, NOT_FOUND.format(path=path), cause))
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            config = json.load(fh)
        if not isinstance(config, dict):
            raise ValueError("config.json does not hold a JSON object")
    except (OSError, ValueError) as exc:
        frames = outer + tb("""
V/transformers_utils/config.py:668 in get_config
    ^config_dict, config = config_parser.parse(
S/transformers/configuration_utils.py:715 in _get_config_dict
    raise OSError(
""")
        return fail_api(
            api,
            traceback_text(
                frames,
                f"OSError: It looks like the config file at '{cfg_path}' is not a valid JSON "
                f"file. ({exc})",
            ),
        )
    model = ModelInfo(path, config)
    if "AutoConfig" in model.auto_map and not args.trust_remote_code:
        cause = (
            tb("""
V/transformers_utils/config.py:301 in parse
    ^config = AutoConfig.from_pretrained(
S/transformers/models/auto/configuration_auto.py:1318 in from_pretrained
    ^trust_remote_code = resolve_trust_remote_code(
S/transformers/dynamic_module_utils.py:736 in resolve_trust_remote_code
    raise ValueError(
"""),
            f"ValueError: The repository {path} contains custom code which must be executed to "
            f"correctly load the model. You can inspect the repository content at {path} .\n"
            f" You can inspect the repository content at https://hf.co/{path}.\n"
            "Please pass the argument `trust_remote_code=True` to allow custom code to be run.",
        )
        frames = outer + tb("""
V/transformers_utils/config.py:668 in get_config
    ^config_dict, config = config_parser.parse(
V/transformers_utils/config.py:318 in parse
    raise RuntimeError(err_msg) from e
""")
        return fail_api(
            api,
            traceback_text(
                frames,
                "RuntimeError: Failed to load the model config. If the model is a custom model not "
                "yet available in the HuggingFace transformers library, consider setting "
                "`trust_remote_code=True` in LLM or using the `--trust-remote-code` flag in the "
                "CLI.",
                cause,
            ),
        )
    return model


def prebind(args: Any, entrypoint: str, api: Role) -> socket.socket | int:
    """Bind the listening address before loading, like vLLM's setup_server()."""
    family = socket.AF_INET6 if args.host and ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Real vLLM also sets SO_REUSEPORT; the stand-in does not, so that a second stand-in on
        # the same port fails with "Address already in use" like a test expects.
        sock.bind((args.host or "", args.port))
        args.port = sock.getsockname()[1]
        return sock
    except OSError as exc:
        sock.close()
        frames = api_prelude(entrypoint) + tb("""
V/entrypoints/openai/api_server.py:976 in run_server
    ^listen_address, sock = setup_server(args)
V/entrypoints/openai/api_server.py:953 in setup_server
    ^sock = create_server_socket(sock_addr)
V/utils/network_utils.py:231 in create_server_socket
    sock.bind(addr)
""")
        return fail_api(api, traceback_text(frames, f"OSError: [Errno {exc.errno}] {exc.strerror}"))


# ------------------------------------------------------------------------------------------
# Serve mode: the API-server (parent) process
# ------------------------------------------------------------------------------------------

ROUTES = [
    ("/openapi.json", "GET, HEAD"),
    ("/docs", "GET, HEAD"),
    ("/docs/oauth2-redirect", "GET, HEAD"),
    ("/redoc", "GET, HEAD"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/load", "GET"),
    ("/version", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/ping", "POST"),
    ("/invocations", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/v1/responses", "POST"),
    ("/v1/completions", "POST"),
]


class Server:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.ver = parse_version(cfg["vllm_version"])
        self.api = Role("APIServer", os.getpid(), prefixed=self.ver >= (0, 10, 0))
        self.stop_signal: int | None = None
        self.engine_pid: int | None = None
        self.engine_status: int | None = None
        self.shm: list[str] = []
        self.state_written = False
        self.pipe_buf = b""
        self.ray: RayExecutor | None = None

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_signal = signum

    # -- state file -------------------------------------------------------------------------
    def write_state(self, plan: Plan, pids: dict[str, Any], mem_mib: int) -> None:
        entry = {
            "pid": os.getpid(),
            "engine_pid": pids.get("engine"),
            "worker_pids": pids.get("workers", []),
            "gpu_pids": {str(g): p for g, p in pids.get("gpu_pids", {}).items()},
            "gpu_process_names": pids.get("gpu_names", {}),
            "memory_mib_per_gpu": int(mem_mib),
            "host": plan.args.host,
            "port": plan.args.port,
            "model": plan.args.model,
            "served_model_name": plan.served,
            "python": sys.executable,
            "standin": os.path.abspath(__file__),
            "shm_files": self.shm,
            "vllm_version": plan.cfg["vllm_version"],
            "started": time.time(),
        }
        me = os.getpid()
        try:
            update_state(
                self.cfg["state_file"], lambda ss: [s for s in ss if s.get("pid") != me] + [entry]
            )
            self.state_written = True
        except OSError as exc:
            self.api.warning("standin.py:0", f"kimi-standin: cannot write state file: {exc}")

    def drop_state(self) -> None:
        if self.state_written:
            me = os.getpid()
            with contextlib.suppress(OSError):
                update_state(
                    self.cfg["state_file"], lambda ss: [s for s in ss if s.get("pid") != me]
                )
            self.state_written = False

    # -- engine child -----------------------------------------------------------------------
    def stop_engine(self) -> None:
        pid = self.engine_pid
        if pid is None or self.engine_status is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.engine_status = status
                return
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.engine_status = os.waitpid(pid, 0)[1]

    def reap_engine(self) -> None:
        if self.engine_pid is not None and self.engine_status is None:
            self.engine_status = os.waitpid(self.engine_pid, 0)[1]

    def read_pipe(self, rfd: int, timeout: float) -> list[str] | None:
        """Complete lines from the engine; None at EOF (the engine exited)."""
        if not select.select([rfd], [], [], timeout)[0]:
            return []
        chunk = os.read(rfd, 65536)
        if not chunk:
            return None
        *lines, self.pipe_buf = (self.pipe_buf + chunk).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def clean_exit(self, serving: bool) -> int:
        """SIGTERM/SIGINT: stop the engine, remove shm + state, print shutdown lines, 0."""
        self.stop_engine()
        if self.ray is not None:
            self.ray.shutdown()
        self.drop_state()
        remove_files(self.shm)
        self.shutdown_lines(serving)
        return 0

    def shutdown_lines(self, serving: bool) -> None:
        api = self.api
        if serving:
            api.info("launcher.py:110", "Shutting down FastAPI HTTP server.")
            api.uvicorn("Shutting down")
            api.uvicorn("Waiting for application shutdown.")
            api.uvicorn("Application shutdown complete.")
            api.uvicorn(f"Finished server process [{api.pid}]")
        else:
            api.info("launcher.py:110", "Shutting down: signal received during engine startup.")

    # -- main flow --------------------------------------------------------------------------
    def run(self, argv: list[str]) -> int:
        cfg = self.cfg
        if cfg["echo_argv"]:
            plain("kimi-standin argv: " + json.dumps(argv))
        args, parser = parse_serve_args(argv, self.ver, cfg["entrypoint"])
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        emit_banner(cfg, self.api, args, parser)
        sock = prebind(args, cfg["entrypoint"], self.api)
        if isinstance(sock, int):
            return sock
        try:
            return self._after_bind(args, sock)
        finally:
            sock.close()
            if self.engine_pid is not None and self.engine_status is None:
                self.stop_engine()

    def _after_bind(self, args: Any, sock: socket.socket) -> int:
        cfg, api = self.cfg, self.api
        model = check_model(cfg, args, api)
        if isinstance(model, int):
            return model
        api.info("model.py:533", f"Resolved architecture: {model.arch}")
        failed = check_max_len(cfg, args, model, api)
        if failed is not None:
            return failed
        plan = Plan(cfg, args, model)
        emit_config_lines(plan, api)
        have = len(visible_gpus(cfg))
        if getattr(args, "distributed_executor_backend", None) == "ray":
            self.ray = RayExecutor(plan, api)
            code = self.ray.start()
            if code is not None:
                return code
            # The ranks are Ray actors spread over the nodes; the local engine emulates the
            # driver (rank 0's stages) only, so no local TP worker processes are forked.
            plan.world, plan.gpus = 1, plan.gpus[:1]
        elif plan.world > have:
            frames = engine_client_prelude(cfg["entrypoint"]) + tb(MODEL_CONFIG_FRAMES)[:2]
            frames += tb("V/config/parallel.py:612 in __post_init__\n    raise ValueError(")
            return fail_api(
                api,
                traceback_text(
                    frames,
                    f"ValueError: World size ({plan.world}) is larger than the number of available "
                    f"GPUs ({have}) in this node. please set tensor_parallel_size ({plan.tp}) to "
                    f"less than max local gpu count ({have})",
                ),
            )
        if self.stop_signal is not None:
            self.shutdown_lines(False)
            return 0
        self.shm = create_shm_files(cfg["shm_dir"], 2 if plan.world > 1 else 1, api)
        rfd, wfd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # engine-core child: never returns into the parent's code
            code = 1
            try:
                os.close(rfd)
                sock.close()
                code = Engine(plan, wfd, self.shm, api.pid).run()
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        self.engine_pid = pid
        os.close(wfd)
        try:
            return self._supervise(plan, rfd, sock)
        finally:
            os.close(rfd)

    def _supervise(self, plan: Plan, rfd: int, sock: socket.socket) -> int:
        pids: dict[str, Any] = {}
        while True:  # engine start-up
            if self.stop_signal is not None:
                return self.clean_exit(serving=False)
            lines = self.read_pipe(rfd, 0.1)
            if lines is None:  # engine exited before "ready"
                self.reap_engine()
                time.sleep(0.1)  # a process-group SIGTERM may reach us just after the child
                if self.stop_signal is not None:
                    return self.clean_exit(serving=False)
                self.drop_state()
                remove_files(self.shm)
                frames = engine_client_prelude(plan.cfg["entrypoint"]) + tb(ENGINE_STARTUP_FRAMES)
                return fail_api(
                    self.api,
                    traceback_text(
                        frames,
                        "RuntimeError: Engine core initialization failed. See root cause above. "
                        "Failed core proc(s): {}",
                    ),
                )
            for line in lines:
                kind, _, payload = line.partition(" ")
                if kind == "P":
                    pids = json.loads(payload)
                    self.write_state(plan, pids, 600)
                elif kind == "M":
                    self.write_state(plan, pids, int(payload))
                elif kind == "R":
                    return self._serve(plan, rfd, sock)

    def _serve(self, plan: Plan, rfd: int, sock: socket.socket) -> int:
        api, args = self.api, plan.args
        keys = list(args.api_key or [])
        if not keys and os.environ.get("VLLM_API_KEY"):
            keys = [os.environ["VLLM_API_KEY"]]
        api.info("api_server.py:569", "Supported tasks: ['generate']")
        if args.enable_auto_tool_choice:
            api.info("parser_manager.py:202", '"auto" tool choice has been enabled.')
        api.info(
            "hf.py:318",
            "Detected the chat template content format to be 'string'. You can set "
            "`--chat-template-content-format` to override this.",
        )
        host = args.host or "0.0.0.0"
        url = f"http://[{host}]:{args.port}" if ":" in host else f"http://{host}:{args.port}"
        if plan.ver >= (0, 13, 0):
            api.info("api_server.py:573", f"Starting vLLM server on {url}")
        elif plan.ver >= (0, 10, 0):
            api.info("api_server.py:1971", f"Starting vLLM API server 0 on {url}")
        else:
            api.info("api_server.py:1081", f"Starting vLLM API server on {url}")
        api.info("launcher.py:36", "Available routes are:")
        for route, methods in ROUTES:
            api.info("launcher.py:45", f"Route: {route}, Methods: {methods}")
        api.uvicorn(f"Started server process [{api.pid}]")
        api.uvicorn("Waiting for application startup.")
        app = StandinApp(plan, api, keys)
        httpd = StandinHTTPServer(sock, app)
        try:
            httpd.server_activate()  # listen(): the port answers from here on
        except OSError as exc:
            api.uvicorn("Application startup complete.")
            where = (args.host or "0.0.0.0", args.port)
            api.raw(
                f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"{where!r}: {str(exc.strerror).lower()}"
            )
            self.stop_engine()
            self.drop_state()
            remove_files(self.shm)
            return 1
        api.uvicorn("Application startup complete.")
        if plan.ver < (0, 10, 0):
            api.uvicorn(f"Uvicorn running on {url} (Press CTRL+C to quit)")
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1})
        thread.daemon = True
        thread.start()
        if self.ray is not None:
            self.ray.watch(self.engine_pid)
        while self.read_pipe(rfd, 0.1) is not None:
            if self.stop_signal is not None:
                httpd.shutdown()
                return self.clean_exit(serving=True)
        # The engine core died while we were serving.
        self.reap_engine()
        time.sleep(0.1)
        if self.stop_signal is not None:
            httpd.shutdown()
            return self.clean_exit(serving=True)
        app.engine_dead.set()
        frames = tb("""
V/v1/engine/async_llm.py:484 in output_handler
    ^outputs = await engine_core.get_output_async()
V/v1/engine/core_client.py:888 in get_output_async
    raise self._format_exception(outputs) from None
""")
        exc = (
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
            "stack trace (above) for the root cause."
        )
        api.error(
            "async_llm.py:525",
            "\n".join(["AsyncLLM output_handler failed."] + traceback_text(frames, exc)),
        )
        time.sleep(1.0)  # /health answers 503 meanwhile
        httpd.shutdown()
        self.shutdown_lines(serving=True)
        self.drop_state()  # like a real crash, the /dev/shm files are left behind
        return 1


# ------------------------------------------------------------------------------------------
# Serve mode with --distributed-executor-backend ray
# ------------------------------------------------------------------------------------------


class RankActor:
    """The placeholder of one vLLM worker rank (vLLM: RayWorkerWrapper); loads nothing."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "node_ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "vllm_host_ip": os.environ.get("VLLM_HOST_IP", ""),
        }

    def ping(self) -> int:
        return self.rank


class RayExecutor:
    """What vLLM's Ray executor does before loading: join the running cluster (``RAY_ADDRESS``
    or "auto"), check its GPUs, reserve one GPU bundle per rank in a placement group (the first
    on this node) and start one actor per rank across the nodes. Real Ray; emulated ranks."""

    def __init__(self, plan: Plan, api: Role) -> None:
        self.plan = plan
        self.api = api
        self.actors: list[Any] = []
        self.ray: Any = None
        self.stopping = False

    def fail(self, exc: str, frames: str) -> int:
        head = engine_client_prelude(self.plan.cfg["entrypoint"]) + tb(ENGINE_STARTUP_FRAMES)
        return fail_api(self.api, traceback_text(head + tb(frames), exc))

    def start(self) -> int | None:
        api, plan = self.api, self.plan
        try:
            import ray
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        except ImportError:
            return self.fail(
                "ValueError: Failed to import Ray, please install Ray with `pip install ray`.",
                "V/executor/ray_utils.py:271 in assert_ray_available\n    raise ValueError(",
            )
        self.ray = ray
        address = os.environ.get("RAY_ADDRESS") or "auto"
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # ConnectionError: no cluster at that address
            return self.fail(
                f"{type(exc).__name__}: {exc}",
                "V/executor/ray_utils.py:310 in initialize_ray_cluster\n    ray.init(",
            )
        world = plan.world
        total = ray.cluster_resources().get("GPU", 0)
        api.info("ray_utils.py:313", f"Connected to the Ray cluster at {address}: {total:g} GPU(s)")
        if world > total:
            api.warning(
                "ray_utils.py:351",
                "The number of required GPUs exceeds the total number of available GPUs in the "
                "placement group.",
            )
        ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
        specs: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(world)]
        specs[0][f"node:{ip}"] = 0.001
        pg = placement_group(specs, strategy="PACK")
        timeout = float(plan.cfg["ray_pg_timeout"])
        started = time.monotonic()
        ready = False
        while time.monotonic() - started < timeout:
            done, _ = ray.wait([pg.ready()], timeout=min(5.0, timeout))
            if done:
                ready = True
                break
            api.info(
                "ray_utils.py:296",
                f"Waiting for creating a placement group of specs for "
                f"{int(time.monotonic() - started)} seconds. specs={specs}. Check `ray status` and "
                "`ray list nodes` to see if you have enough resources, and make sure the IP "
                "addresses used by ray cluster are the same as VLLM_HOST_IP environment variable "
                "specified in each node if you are running on a multi-node.",
            )
        if not ready:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(pg)
            return self.fail(
                f"ValueError: Cannot provide a placement group of placement_group_specs={specs} "
                f"within {timeout:g} seconds. See `ray status` and `ray list nodes` to make sure "
                "the cluster has enough resources.",
                "V/executor/ray_utils.py:306 in _wait_until_pg_ready\n    raise ValueError(",
            )
        remote = ray.remote(RankActor)
        self.actors = [
            remote.options(
                num_cpus=0,
                num_gpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg,
                    placement_group_capture_child_tasks=True,
                    placement_group_bundle_index=rank,
                ),
            ).remote(rank)
            for rank in range(world)
        ]
        infos = ray.get([a.where.remote() for a in self.actors], timeout=120)
        nodes = sorted({i["node_ip"] for i in infos})
        for i in infos:
            api.info(
                "ray_executor.py:190",
                f"rank {i['rank']} (pp {i['rank'] // plan.tp}, tp {i['rank'] % plan.tp}): "
                f"actor pid {i['pid']} on node {i['node_ip']} ({i['node_id'][:12]})",
            )
        api.info(
            "ray_executor.py:205",
            f"Ray executor: {world} worker(s) on {len(nodes)} node(s): {', '.join(nodes)} "
            "(stand-in: the ranks are placeholder actors, no model is loaded)",
        )
        return None

    def watch(self, engine_pid: int | None) -> None:
        """A rank's actor died (its node went away): the engine dies, like vLLM's."""

        def loop() -> None:
            while True:
                time.sleep(2.0)
                try:
                    self.ray.get([a.ping.remote() for a in self.actors], timeout=30)
                except Exception as exc:
                    if self.stopping:
                        return
                    self.api.error(
                        "ray_executor.py:512",
                        f"A Ray worker died: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                    )
                    if engine_pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(engine_pid, signal.SIGKILL)
                    return

        threading.Thread(target=loop, daemon=True).start()

    def shutdown(self) -> None:
        self.stopping = True
        with contextlib.suppress(Exception):
            self.ray.shutdown()


# ------------------------------------------------------------------------------------------
# Serve mode: engine core (child) and TP workers (grandchildren)
# ------------------------------------------------------------------------------------------


def set_comm(title: str) -> None:
    """vLLM's setproctitle ("VLLM::Worker_TP0"); only the 15-char kernel comm can be set."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w", encoding="utf-8") as fh:
        fh.write(title[:15])


def worker_main(parent: int, rank: int) -> int:
    set_comm(f"VLLM::Worker_TP{rank}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while os.getppid() == parent:  # exit when the engine core goes away
        time.sleep(0.5)
    return 0


ENGINE_INIT = """
V/v1/engine/core.py:937 in run_engine_core
    ^engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)
V/v1/engine/core.py:691 in __init__
    super().__init__(
"""
EXECUTOR_INIT = """
V/v1/engine/core.py:105 in __init__
    ^self.model_executor = executor_class(vllm_config)
V/v1/executor/abstract.py:101 in __init__
    self._init_executor()
"""
WAIT_FOR_WORKERS = """
V/v1/executor/multiproc_executor.py:172 in _init_executor
    ^self.workers = WorkerProc.wait_for_ready(unready_workers)
V/v1/executor/multiproc_executor.py:658 in wait_for_ready
    raise e from None
"""
KV_INIT = """
V/v1/engine/core.py:114 in __init__
    ^num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(
"""
PROFILE_RPC = """
V/v1/engine/core.py:231 in _initialize_kv_caches
    ^available_gpu_memory = self.model_executor.determine_available_memory()
V/v1/executor/abstract.py:137 in determine_available_memory
    ^return self.collective_rpc("determine_available_memory")
"""
KV_CHECK = """
V/v1/engine/core.py:250 in _initialize_kv_caches
    ^kv_cache_configs = get_kv_cache_configs(
V/v1/core/kv_cache_utils.py:1290 in get_kv_cache_configs
    check_enough_kv_cache_memory(
V/v1/core/kv_cache_utils.py:{line} in check_enough_kv_cache_memory
    raise ValueError(
"""
LOAD_MODEL = """
V/v1/worker/gpu_worker.py:284 in load_model
    self.model_runner.load_model(eep_scale_up=eep_scale_up)
V/v1/worker/gpu_model_runner.py:4510 in load_model
    ^self.model = model_loader.load_model(
"""
LOAD_WEIGHTS = """
V/model_executor/model_loader/base_loader.py:56 in load_model
    self.load_weights(model, model_config)
V/model_executor/model_loader/default_loader.py:305 in load_weights
    ^loaded_weights = model.load_weights(
V/model_executor/model_loader/weight_utils.py:742 in safetensors_weights_iterator
    ^param = f.get_tensor(name)
"""
INIT_MODEL = """
V/model_executor/model_loader/base_loader.py:49 in load_model
    ^model = initialize_model(
V/model_executor/model_loader/utils.py:55 in initialize_model
    ^return model_class(vllm_config=vllm_config, prefix=prefix)
"""
TRITON_MLA_RAISE = """
V/v1/attention/backends/mla/triton_mla.py:96 in __init__
    raise NotImplementedError(
"""
KIMI_INIT = """
V/model_executor/models/kimi_k25.py:412 in __init__
    ^self.language_model = init_vllm_registered_model(
"""
MLA_INIT = """
V/model_executor/models/deepseek_v2.py:1325 in __init__
    ^self.model = DeepseekV2Model(
V/model_executor/models/deepseek_v2.py:1003 in __init__
    ^self.self_attn = attn_cls(
V/model_executor/models/deepseek_v2.py:905 in __init__
    ^self.mla_attn = MultiHeadLatentAttentionWrapper(
V/model_executor/layers/mla.py:141 in __init__
    ^self.mla_attn = MLAAttention(
V/attention/layer.py:691 in __init__
    ^self.impl = impl_cls(
"""


class Engine:
    """Engine-core emulation: forks the TP workers, prints the loading stages, reports to the
    API server over a pipe ("P <pids json>", "M <MiB per GPU>", "R" = ready)."""

    def __init__(self, plan: Plan, wfd: int, shm: list[str], api_pid: int) -> None:
        self.plan = plan
        self.wfd = wfd
        self.shm = shm
        self.api_pid = api_pid
        self.role = Role(plan.engine_name(), os.getpid())
        self.workers: list[int] = []
        self.stop = False

    # -- plumbing ---------------------------------------------------------------------------
    def send(self, msg: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wfd, (msg + "\n").encode())

    def sleep(self, seconds: float) -> None:
        """Sleep, but leave promptly on SIGTERM or when the API server has gone."""
        end = time.monotonic() + seconds
        while True:
            if self.stop or os.getppid() != self.api_pid:
                self.exit(0)
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def exit(self, code: int) -> None:
        for pid in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in self.workers:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.workers = []
        raise SystemExit(code)

    def loader(self) -> Role:
        """The rank-0 process, which prints the model-loading lines."""
        if self.plan.world > 1:
            return Role(self.plan.worker_name(0), self.workers[0])
        return self.role

    def ranks(self) -> list[Role]:
        if self.plan.world == 1:
            return [self.role]
        return [Role(self.plan.worker_name(r), pid) for r, pid in enumerate(self.workers)]

    # -- failures ---------------------------------------------------------------------------
    def fail_engine(self, frames: list[Frame], exc: str) -> None:
        """'EngineCore failed to start.' (logger) + the multiprocessing Process traceback."""
        role = self.role
        role.error(
            "core.py:946", "\n".join(["EngineCore failed to start."] + traceback_text(frames, exc))
        )
        role.raw(f"Process {self.plan.engine_name()}:")
        process = tb("""
L/multiprocessing/process.py:314 in _bootstrap
    self.run()
L/multiprocessing/process.py:108 in run
    self._target(*self._args, **self._kwargs)
V/v1/engine/core.py:950 in run_engine_core
    raise e
""")
        role.raw("\n".join(traceback_text(process + frames, exc)))
        self.exit(1)

    def fail_in_worker(self, inner: list[Frame], exc: str, during: str = "init") -> None:
        """Root cause raised in the worker(s); the engine core then fails to start.

        during="init": in WorkerProc construction (init_device / load_model);
        during="profile": in the memory-profiling RPC after the model was loaded.
        """
        plan = self.plan
        engine = tb(ENGINE_INIT)
        if plan.world == 1:  # UniProcExecutor: one traceback straight through the engine core
            if during == "init":
                frames = engine + tb(EXECUTOR_INIT) + inner
            else:
                frames = (
                    engine
                    + tb(KV_INIT + PROFILE_RPC)
                    + tb("""
V/v1/executor/uniproc_executor.py:83 in collective_rpc
    ^result = run_method(self.driver_worker, method, args, kwargs)
V/v1/serial_utils.py:479 in run_method
    ^return func(*args, **kwargs)
""")
                    + inner
                )
            self.fail_engine(frames, exc)
        if during == "init":
            head = tb("""
V/v1/executor/multiproc_executor.py:743 in worker_main
    ^worker = WorkerProc(*args, **kwargs)
""")
            for role in self.ranks():
                role.error(
                    "multiproc_executor.py:772",
                    "\n".join(["WorkerProc failed to start."] + traceback_text(head + inner, exc)),
                )
            self.fail_engine(
                engine + tb(EXECUTOR_INIT + WAIT_FOR_WORKERS),
                "Exception: WorkerProc initialization failed due to an exception in a background "
                "process. See stack trace for root cause.",
            )
        head = tb("""
V/v1/executor/multiproc_executor.py:810 in worker_busy_loop
    ^output = func(*args, **kwargs)
""")
        for role in self.ranks():
            role.error(
                "multiproc_executor.py:815",
                "\n".join(["WorkerProc hit an exception."] + traceback_text(head + inner, exc)),
            )
        frames = (
            engine
            + tb(KV_INIT + PROFILE_RPC)
            + tb(
                "V/v1/executor/multiproc_executor.py:360 in collective_rpc\n    raise RuntimeError("
            )
        )
        self.fail_engine(
            frames,
            f"RuntimeError: Worker failed with error '{exc.split(': ', 1)[-1]}', please check the "
            "stack trace above for the root cause",
        )

    def worker_entry(self, method: str, line: int) -> list[Frame]:
        if self.plan.world > 1:
            where, call = f"multiproc_executor.py:{line} in __init__", f"self.worker.{method}()"
        else:
            where, call = (
                "uniproc_executor.py:48 in _init_executor",
                f"self.driver_worker.{method}()",
            )
        return tb(f"V/v1/executor/{where}\n    {call}")

    def model_init_frames(self, weights: bool = False) -> list[Frame]:
        frames = self.worker_entry("load_model", 580) + tb(LOAD_MODEL)
        if weights:
            return frames + tb(LOAD_WEIGHTS)
        frames += tb(INIT_MODEL)
        if "Kimi" in self.plan.model.arch:
            frames += tb(KIMI_INIT)
        if self.plan.model.is_mla:
            frames += tb(MLA_INIT)
        return frames

    def crash(self, exc: str) -> None:
        frames = tb("""
V/v1/engine/core.py:857 in run_engine_core
    engine_core.run_busy_loop()
V/v1/engine/core.py:884 in run_busy_loop
    self._process_engine_step()
V/v1/engine/core.py:913 in _process_engine_step
    ^outputs, model_executed = self.step_fn()
V/v1/engine/core.py:340 in step
    ^model_output = self.model_executor.execute_model(scheduler_output)
V/v1/executor/multiproc_executor.py:360 in collective_rpc
    raise RuntimeError(
""")
        self.role.error(
            "core.py:866",
            "\n".join(["EngineCore encountered a fatal error."] + traceback_text(frames, exc)),
        )
        self.exit(1)

    # -- the emulation ----------------------------------------------------------------------
    def run(self) -> int:
        plan = self.plan
        set_comm("VLLM::EngineCore")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API server stops us with SIGTERM
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop", True))
        gpu_pids: dict[int, int] = {}
        gpu_names: dict[str, str] = {}
        try:
            if plan.world > 1:
                me = os.getpid()
                for rank in range(plan.world):
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        code = 1
                        try:
                            os.close(self.wfd)
                            code = worker_main(me, rank)
                        finally:
                            os._exit(code)
                    self.workers.append(pid)
                for rank, gpu in enumerate(plan.gpus):
                    gpu_pids[gpu] = self.workers[rank]
                    gpu_names[str(gpu)] = f"VLLM::Worker_TP{rank}"
            elif plan.gpus:
                gpu_pids[plan.gpus[0]] = os.getpid()
                gpu_names[str(plan.gpus[0])] = "VLLM::EngineCore"
            info = {"engine": os.getpid(), "workers": self.workers}
            self.send("P " + json.dumps(dict(info, gpu_pids=gpu_pids, gpu_names=gpu_names)))
            self.emulate()
            return self.serve_loop()
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1

    def emulate(self) -> None:
        plan, cfg, role, args, model = (
            self.plan,
            self.plan.cfg,
            self.role,
            self.plan.args,
            self.plan.model,
        )
        role.info(
            "core.py:101",
            f"Initializing a V1 LLM engine (v{cfg['vllm_version']}) with config: "
            f"model={args.model!r}, speculative_config=None, "
            f"tokenizer={(args.tokenizer or args.model)!r}, skip_tokenizer_init=False, "
            f"tokenizer_mode={args.tokenizer_mode}, revision=None, tokenizer_revision=None, "
            f"trust_remote_code={bool(args.trust_remote_code)}, dtype=torch.bfloat16, "
            f"max_seq_len={plan.max_len}, download_dir={args.download_dir!r}, "
            f"load_format={args.load_format}, tensor_parallel_size={plan.tp}, "
            f"pipeline_parallel_size={args.pipeline_parallel_size}, "
            f"data_parallel_size={args.data_parallel_size}, "
            f"disable_custom_all_reduce={args.disable_custom_all_reduce}, "
            f"quantization={model.quantization}, enforce_eager={plan.eager}, "
            f"kv_cache_dtype={args.kv_cache_dtype}, device_config=cuda, seed={args.seed}, "
            f"served_model_name={','.join(plan.served)}, "
            f"enable_prefix_caching={args.enable_prefix_caching is not False}, "
            f"enable_chunked_prefill={args.enable_chunked_prefill is not False}",
        )
        self.sleep(0.03)
        self.check_free_memory()  # init_device(): before the distributed-environment lines
        port = random.randint(30000, 60000)
        ranks = self.ranks()
        for rank, r in enumerate(ranks):
            r.info(
                "parallel_state.py:1395",
                f"world_size={plan.world} rank={rank} local_rank={rank} "
                f"distributed_init_method=tcp://127.0.0.1:{port} backend=nccl",
            )
        if plan.world > 1:
            ranks[0].info("pynccl.py:111", "vLLM is using nccl==2.27.5")
            psm = [os.path.basename(p) for p in self.shm if "psm_" in p]
            if psm:  # real vLLM names its shm_broadcast segment in this line
                ranks[0].info(
                    "shm_broadcast.py:289",
                    "vLLM message queue communication handle: Handle(local_reader_ranks="
                    f"{list(range(1, plan.world))}, buffer_handle=({plan.world - 1}, 4194304, 6, "
                    f"'{psm[0]}'), local_subscribe_addr='ipc:///tmp/{uuid.uuid4()}', "
                    "remote_subscribe_addr=None, remote_addr_ipv6=False)",
                )
        ep = "{rank}" if args.enable_expert_parallel else "N/A"
        for rank, r in enumerate(ranks):
            r.info(
                "parallel_state.py:1717",
                f"rank {rank} in world size {plan.world} is assigned as DP rank 0, PP rank 0, "
                f"PCP rank 0, TP rank {rank}, EP rank {ep.format(rank=rank)}, EPLB rank N/A",
            )
        load = self.loader()
        t_load = time.monotonic()
        load.info("gpu_model_runner.py:4501", f"Starting to load model {args.model}...")
        backend = self.select_backend(load)
        if plan.kv_fp8 and backend == "TRITON_MLA" and plan.ver < (0, 18, 0):
            # The SM120 failure: TRITON_MLA refused a quantized KV cache up to 0.17.x.
            self.sleep(0.05)
            self.fail_in_worker(
                self.model_init_frames() + tb(TRITON_MLA_RAISE),
                "NotImplementedError: TritonMLA V1 with FP8 KV cache not yet supported",
            )
        if model.quantization == "modelopt_fp4":
            load.info(
                "nvfp4.py:209",
                "Using 'VLLM_CUTLASS' NvFp4 MoE backend out of potential backends: "
                "['FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN'].",
            )
        self.load_shards()
        load.info(
            "gpu_model_runner.py:4584" if plan.ver >= (0, 11, 0) else "gpu_model_runner.py:1892",
            f"Model loading took {plan.weights_gib:.1f} GiB "
            + ("memory " if plan.ver >= (0, 11, 0) else "")
            + f"and {time.monotonic() - t_load:.6f} seconds",
        )
        self.send(f"M {int(plan.weights_gib * 1024 + 600)}")
        t_init = time.monotonic()
        self.init_kv_cache(load)
        self.capture_graphs(load)
        took = time.monotonic() - t_init
        role.info(
            "core.py:279",
            f"init engine (profile, create kv cache, warmup model) took {took:.2f} seconds",
        )
        self.send(f"M {int(round(cfg['memory_mib'] * plan.util))}")
        self.send("R")

    def load_shards(self) -> None:
        plan, cfg = self.plan, self.plan.cfg
        total, desc = plan.model.shards, "Loading safetensors checkpoint shards"
        plain(tqdm_text(desc, 0, total, 0.0), sys.stderr)
        if cfg["hang"]:
            while True:  # silent until SIGTERM or the API server goes away
                self.sleep(3600)
        oom = plan.weights_gib + 0.5 > plan.total_gib
        steps = max(1, min(total, 16))
        t0 = time.monotonic()
        for i in range(1, steps + 1):
            self.sleep(cfg["load_seconds"] * 0.7 / steps)
            n = total if i == steps else i * total // steps
            if oom and 2 * n >= total:
                self.fail_in_worker(self.model_init_frames(weights=True), self.oom_text())
            # tqdm updates with carriage returns; in a log file some updates share a line.
            end = "\r" if i % 4 == 2 and i != steps else "\n"
            plain(tqdm_text(desc, n, total, time.monotonic() - t0), sys.stderr, end=end)
        plain(tqdm_text(desc, total, total, time.monotonic() - t0), sys.stderr)
        load = self.loader()
        plain(load.prefix.rstrip())
        load.info(
            "default_loader.py:293", f"Loading weights took {time.monotonic() - t0:.2f} seconds"
        )

    def init_kv_cache(self, load: Role) -> None:
        plan, cfg, model = self.plan, self.plan.cfg, self.plan.model
        rest = cfg["load_seconds"] * 0.3
        if not plan.eager:
            load.info(
                "backends.py:548",
                "Using cache directory: /root/.cache/vllm/torch_compile_cache/"
                f"{secrets.token_hex(5)}/rank_0_0/backbone for vLLM's torch.compile",
            )
            self.sleep(rest * 0.3)
            load.info("backends.py:559", f"Dynamo bytecode transform time: {rest * 0.3:.2f} s")
            load.info("monitor.py:34", f"torch.compile takes {rest * 0.3:.2f} s in total")
        if plan.kv_dtype == "bfloat16" and model.is_mla and plan.ver < (0, 20, 0):
            # facts.md: an explicit --kv-cache-dtype bfloat16 failed until a fix after 0.19
            # (release unconfirmed; emulated for < 0.20).
            self.fail_in_worker(
                tb("""
V/v1/worker/gpu_worker.py:318 in determine_available_memory
    self.model_runner.profile_run()
V/v1/worker/gpu_model_runner.py:4880 in profile_run
    ^hidden_states, last_hidden_states = self._dummy_run(
V/_custom_ops.py:2113 in concat_and_cache_mla
    torch.ops._C_cache_ops.concat_and_cache_mla(
S/torch/_ops.py:1243 in __call__
    ^return self._op(*args, **kwargs)
"""),
                "RuntimeError: Unsupported data type of kv cache: bfloat16",
                during="profile",
            )
        avail = plan.total_gib * plan.util - plan.weights_gib - 1.6
        load.info("gpu_worker.py:452", f"Available KV cache memory: {avail:.2f} GiB")
        engine = tb(ENGINE_INIT + KV_INIT)
        if avail <= 0:
            self.fail_engine(
                engine + tb(KV_CHECK.format(line=716)),
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine.",
            )
        per_token = self.kv_bytes_per_token()
        tokens = int(avail * GIB // per_token) // 16 * 16
        if plan.auto_len and 0 < tokens < plan.max_len:
            plan.max_len = tokens
            self.role.info(
                "kv_cache_utils.py:1290",
                f"Auto-fit max_model_len: reduced to {tokens} to fit in available memory",
            )
        if tokens < plan.max_len:
            self.fail_engine(
                engine + tb(KV_CHECK.format(line=734)),
                "ValueError: To serve at least one request with the models's max seq len "
                f"({plan.max_len}), ({plan.max_len * per_token / GIB:.2f} GiB KV cache is needed, "
                f"which is larger than the available KV cache memory ({avail:.2f} GiB). Based on "
                f"the available memory, the estimated maximum model length is {tokens}. Try "
                "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine.",
            )
        self.role.info("kv_cache_utils.py:1316", f"GPU KV cache size: {tokens:,} tokens")
        ratio = tokens / plan.max_len
        self.role.info(
            "kv_cache_utils.py:1321",
            f"Maximum concurrency for {plan.max_len:,} tokens per request: {ratio:.2f}x",
        )

    def capture_graphs(self, load: Role) -> None:
        rest = self.plan.cfg["load_seconds"] * 0.3
        if self.plan.eager:
            self.sleep(rest * 0.5)
            return
        load.info(
            "gpu_model_runner.py:5599",
            "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)",
        )
        t0 = time.monotonic()
        for desc, n in (
            ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", 51),
            ("Capturing CUDA graphs (decode, FULL)", 35),
        ):
            self.sleep(rest * 0.25)
            plain(tqdm_text(desc, n, n, max(0.01, time.monotonic() - t0), bar=True), sys.stderr)
        secs = max(1, round(time.monotonic() - t0))
        load.info(
            "gpu_model_runner.py:4677", f"Graph capturing finished in {secs} secs, took 0.84 GiB"
        )

    def serve_loop(self) -> int:
        after = self.plan.cfg["crash_after_seconds"]
        deadline = None if after is None else time.monotonic() + after
        while True:
            if self.stop or os.getppid() != self.api_pid:
                self.exit(0)
            for rank, pid in enumerate(self.workers):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.workers.remove(pid)
                    self.role.error(
                        "multiproc_executor.py:231",
                        f"Worker proc VllmWorker-{rank} died unexpectedly, shutting down executor.",
                    )
                    self.crash(
                        f"RuntimeError: Worker failed with error 'Worker proc VllmWorker-{rank} "
                        "died unexpectedly', please check the stack trace above for the root cause"
                    )
            if deadline is not None and time.monotonic() >= deadline:
                self.crash(
                    "RuntimeError: Worker failed with error 'kimi-standin: emulated engine failure "
                    f"(crash_after_seconds={after})', please check the stack trace above for the "
                    "root cause"
                )
            time.sleep(0.1)

    # -- helpers ----------------------------------------------------------------------------
    def oom_text(self) -> str:
        total = self.plan.total_gib
        free = max(0.1, total * 0.015)
        return (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
            f"total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. Including "
            f"non-PyTorch memory, this process has {total - free:.2f} GiB memory in use. Of the "
            f"allocated memory {total - free - 0.5:.2f} GiB is allocated by PyTorch, and 310.00 "
            "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
            "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def check_free_memory(self) -> None:
        """Live stand-ins holding our GPUs -> vLLM's 'Free memory on device' error."""
        plan = self.plan
        others: dict[int, int] = {}
        for entry in read_state(plan.cfg["state_file"]):
            if entry.get("pid") == self.api_pid:
                continue
            for gpu, pid in entry.get("gpu_pids", {}).items():
                if pid_alive(pid) and str(gpu).isdigit():
                    others[int(gpu)] = others.get(int(gpu), 0) + int(
                        entry.get("memory_mib_per_gpu", 0)
                    )
        want = plan.total_gib * plan.util
        for rank, gpu in enumerate(plan.gpus):
            free = max(0.0, (plan.cfg["memory_mib"] - others.get(gpu, 0)) / 1024.0)
            if free < want:
                msg = (
                    f"ValueError: Free memory on device cuda:{rank} "
                    f"({free:.2f}/{plan.total_gib:.2f} GiB) on startup is less than desired "
                    f"GPU memory utilization ({plan.util}, {want:.2f} GiB). Decrease GPU memory "
                    "utilization or reduce GPU memory used by other processes."
                )
                self.fail_in_worker(
                    self.worker_entry("init_device", 571)
                    + tb("""
V/v1/worker/worker_base.py:326 in init_device
    self.worker.init_device()
V/v1/worker/gpu_worker.py:240 in init_device
    raise ValueError(
"""),
                    msg,
                )

    def select_backend(self, load: Role) -> str:
        plan = self.plan
        major = int(plan.cfg["compute_capability"].split(".")[0])
        if plan.model.is_mla:  # facts.md section 1
            valid = {
                12: ["TRITON_MLA"],
                10: ["CUTLASS_MLA", "FLASHINFER_MLA", "FLASHMLA", "TRITON_MLA"],
                9: ["FLASHMLA", "FLASH_ATTN_MLA", "TRITON_MLA"],
            }.get(major, ["TRITON_MLA"])
        elif major >= 8:
            valid = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
        else:
            valid = ["TRITON_ATTN", "FLEX_ATTENTION"]
        chosen = plan.backend_arg
        if chosen and chosen not in valid:
            if plan.model.is_mla and chosen not in MLA_BACKENDS:
                reason = "['MLA not supported']"
            elif not plan.model.is_mla and chosen in MLA_BACKENDS:
                reason = "['non-MLA not supported']"
            else:
                reason = "['compute capability not supported']"
            self.fail_in_worker(
                self.model_init_frames()
                + tb("""
V/attention/selector.py:140 in get_attn_backend
    ^return _cached_get_attn_backend(
V/platforms/cuda.py:330 in get_attn_backend_cls
    raise ValueError(
"""),
                f"ValueError: Selected backend AttentionBackendEnum.{chosen} is not valid for this "
                f"configuration. Reason: {reason}",
            )
        backend = chosen or valid[0]
        if plan.ver >= (0, 13, 0):
            load.info(
                "cuda.py:317",
                f"Using {backend} attention backend out of potential backends: {valid!r}.",
            )
        else:
            load.info("cuda.py:244", f"Using {backend} backend.")
        return backend

    def kv_bytes_per_token(self) -> int:
        plan, model = self.plan, self.plan.model
        elem = 1 if plan.kv_fp8 else 2
        if model.is_mla:  # the latent cache is replicated on every TP rank
            return model.num_layers * (model.kv_lora_rank + model.rope_dim) * elem
        heads = max(1, math.ceil(model.num_kv_heads / plan.tp))
        return 2 * model.num_layers * heads * model.head_dim * elem


# ------------------------------------------------------------------------------------------
# HTTP: a uvicorn/FastAPI look-alike
# ------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------
# nvidia-smi mode
# ------------------------------------------------------------------------------------------

# query field -> (canonical header name, unit)
GPU_FIELDS: dict[str, tuple[str, str | None]] = {
    "index": ("index", None),
    "name": ("name", None),
    "gpu_name": ("name", None),
    "compute_cap": ("compute_cap", None),
    "memory.total": ("memory.total", "MiB"),
    "memory.used": ("memory.used", "MiB"),
    "memory.free": ("memory.free", "MiB"),
    "driver_version": ("driver_version", None),
    "uuid": ("uuid", None),
    "gpu_uuid": ("uuid", None),
    "pci.bus_id": ("pci.bus_id", None),
    "gpu_bus_id": ("pci.bus_id", None),
    "count": ("count", None),
    "utilization.gpu": ("utilization.gpu", "%"),
    "temperature.gpu": ("temperature.gpu", None),
    "power.draw": ("power.draw", "W"),
    "persistence_mode": ("persistence_mode", None),
    "compute_mode": ("compute_mode", None),
}
APP_FIELDS: dict[str, tuple[str, str | None]] = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "name": ("process_name", None),
    "used_memory": ("used_gpu_memory", "MiB"),
    "used_gpu_memory": ("used_gpu_memory", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_bus_id": ("gpu_bus_id", None),
    "gpu_name": ("gpu_name", None),
}
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."


def gpu_uuid(index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"kimi-standin-gpu-{index}"))


def gpu_bus_id(index: int) -> str:
    return f"00000000:{(0x01 + 0x20 * index) % 0x100:02X}:00.0"


def smi_fail(msg: str, code: int = 2) -> int:
    plain(msg)  # real nvidia-smi prints its errors on stdout
    return code


def nvidia_smi_main(argv: list[str], cfg: dict[str, Any]) -> int:
    opts: dict[str, str] = {}
    list_gpus = False
    i = 0
    while i < len(argv):
        key, eq, val = argv[i].partition("=")
        if key in ("--query-gpu", "--query-compute-apps", "--format", "--id", "-i"):
            if not eq:
                if i + 1 >= len(argv):
                    return smi_fail(BAD_ARGS)
                i += 1
                val = argv[i]
            opts["--id" if key == "-i" else key] = val
        elif argv[i] in ("-L", "--list-gpus"):
            list_gpus = True
        elif argv[i] in ("-h", "--help"):
            plain(
                f"NVIDIA System Management Interface -- v{cfg['driver_version']} (kimi-standin "
                "emulation)\nSupported: -L, -i ID, --query-gpu=..., --query-compute-apps=..., "
                "--format=csv[,noheader][,nounits]"
            )
            return 0
        else:
            return smi_fail(BAD_ARGS)
        i += 1
    count = cfg["gpu_count"]
    if count == 0:
        return smi_fail(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
            "sure that the latest NVIDIA driver is installed and running.",
            9,
        )
    indices = list(range(count))
    if "--id" in opts:
        try:
            indices = [int(x) for x in opts["--id"].split(",")]
        except ValueError:
            return smi_fail(f"Invalid GPU identifier: {opts['--id']}", 6)
        if any(not 0 <= x < count for x in indices):
            return smi_fail(f"No devices were found matching the ID: {opts['--id']}", 6)
    usage = gpu_usage(cfg)
    if list_gpus:
        for idx in indices:
            plain(f"GPU {idx}: {cfg['gpu']} (UUID: {gpu_uuid(idx)})")
        return 0
    query_gpu, query_apps = opts.get("--query-gpu"), opts.get("--query-compute-apps")
    if query_gpu is None and query_apps is None:
        return smi_table(cfg, indices, usage)
    if query_gpu is not None and query_apps is not None:
        return smi_fail(BAD_ARGS)
    fmt = [o.strip() for o in opts.get("--format", "").split(",") if o.strip()]
    if "csv" not in fmt or any(o not in ("csv", "noheader", "nounits") for o in fmt):
        return smi_fail('"--format" must be csv, optionally with noheader and/or nounits.')
    units = "nounits" not in fmt
    table = GPU_FIELDS if query_gpu is not None else APP_FIELDS
    fields = [f.strip() for f in (query_gpu or query_apps or "").split(",") if f.strip()]
    for field in fields or [""]:
        if field not in table:
            return smi_fail(f'Field "{field}" is not a valid field to query.\n')
    cols = [table[f] for f in fields]
    if "noheader" not in fmt:
        plain(", ".join(h + (f" [{u}]" if u and units else "") for h, u in cols))
    rows: list[dict[str, Any]] = []
    for idx in indices:
        if query_gpu is not None:
            used = min(cfg["memory_mib"], sum(m for _, _, m in usage.get(idx, [])))
            rows.append(
                {
                    "index": idx,
                    "name": cfg["gpu"],
                    "compute_cap": cfg["compute_capability"],
                    "memory.total": cfg["memory_mib"],
                    "memory.used": used,
                    "memory.free": cfg["memory_mib"] - used,
                    "driver_version": cfg["driver_version"],
                    "uuid": gpu_uuid(idx),
                    "pci.bus_id": gpu_bus_id(idx),
                    "count": count,
                    "utilization.gpu": 0,
                    "temperature.gpu": 34 + idx % 4,
                    "power.draw": f"{(85.0 if used else 31.0) + idx * 0.37:.2f}",
                    "persistence_mode": "Enabled",
                    "compute_mode": "Default",
                }
            )
        else:
            for pid, pname, mem in usage.get(idx, []):
                rows.append(
                    {
                        "pid": pid,
                        "process_name": pname,
                        "used_gpu_memory": mem,
                        "gpu_uuid": gpu_uuid(idx),
                        "gpu_bus_id": gpu_bus_id(idx),
                        "gpu_name": cfg["gpu"],
                    }
                )
    for row in rows:
        plain(", ".join(f"{row[h]} {u}" if u and units else str(row[h]) for h, u in cols))
    return 0


def smi_table(
    cfg: dict[str, Any], indices: list[int], usage: dict[int, list[tuple[int, str, int]]]
) -> int:
    """An approximation of the default nvidia-smi table (layout not byte-exact)."""
    bar = "+" + "-" * 87 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    plain(time.strftime("%a %b %d %H:%M:%S %Y"))
    plain(bar)
    drv, cuda = cfg["driver_version"], cfg["cuda_version"]
    head = f"NVIDIA-SMI {drv:<22} Driver Version: {drv:<14} CUDA Version: {cuda}"
    plain(f"| {head:<85} |")
    plain(sep)
    for cells in (
        (
            "GPU  Name                 Persistence-M",
            "Bus-Id          Disp.A",
            "Volatile Uncorr. ECC",
        ),
        (
            "Fan  Temp   Perf          Pwr:Usage/Cap",
            "          Memory-Usage",
            "GPU-Util  Compute M.",
        ),
        ("", "", "              MIG M."),
    ):
        plain(f"| {cells[0]:<39} | {cells[1]:<22} | {cells[2]:<20} |")
    plain("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for idx in indices:
        used = min(cfg["memory_mib"], sum(m for _, _, m in usage.get(idx, [])))
        name = cfg["gpu"] if len(cfg["gpu"]) <= 24 else cfg["gpu"][:21] + "..."
        power = f"{'85W' if used else '31W'} /  600W"
        perf = "P0" if used else "P8"
        rows = (
            (f"{idx:>3}  {name:<24}     On", f"{gpu_bus_id(idx)} Off", f"{'0':>20}"),
            (
                f"N/A   {34 + idx % 4}C    {perf}   {power:>20}",
                f"{used}MiB / {cfg['memory_mib']}MiB",
                "0%      Default",
            ),
            ("", "", f"{'N/A':>20}"),
        )
        for c in rows:
            plain(f"| {c[0]:<39} | {c[1]:>22} | {c[2]:>20} |")
        plain(sep)
    plain("")
    plain(bar)
    plain(f"| {'Processes:':<85} |")
    plain("| " + " GPU   GI   CI              PID   Type   Process name".ljust(75) + "GPU Memory |")
    plain("| " + "       ID   ID".ljust(75) + "Usage      |")
    plain("|" + "=" * 87 + "|")
    procs = [(idx, pid, name, mem) for idx in indices for pid, name, mem in usage.get(idx, [])]
    if not procs:
        plain(f"| {' No running processes found':<85} |")
    for idx, pid, name, mem in procs:
        short = name if len(name) <= 31 else "..." + name[-28:]
        plain(f"| {f'  {idx:>3}   N/A  N/A   {pid:>14}      C   {short:<31} {mem:>7}MiB':<85} |")
    plain(bar)
    return 0


# ------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    try:
        cfg = load_config()
    except ConfigError as exc:
        _write(sys.stderr, f"kimi-standin: config error: {exc}\n")
        return 1
    if argv[:1] == ["nvidia-smi"]:
        return nvidia_smi_main(argv[1:], cfg)
    if argv[:1] == ["vllm-version"]:
        plain(cfg["vllm_version"])
        return 0
    return Server(cfg).run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
