"""vLLM's api_server / `vllm serve` command-line flags, parsed like vLLM does."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from standin.logfmt import write_out

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
            allow_abbrev=True,  # as vLLM: --por 9999 is --port 9999
        )
        p.add_argument("model_tag", nargs="?", default=None)
    else:
        p = VllmArgumentParser(
            prog="api_server.py",
            description="vLLM OpenAI-Compatible RESTful API server.",
            allow_abbrev=True,  # as vLLM: --por 9999 is --port 9999
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
            write_out(sys.stderr, f"{SERVE_TOP_USAGE}\nvllm: error: {msg}\n")
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
