"""Benchmark kimi_ops.diagnose on a large synthetic vLLM log.

Builds (in memory only; nothing is written to disk) a log of realistic vLLM lines:
a full startup with process prefixes and ``\\r`` tqdm progress, then serving traffic
(metrics, access log, request lines, a few warnings), and a CUDA OOM crash at the end.
Times ``diagnose(text)`` and a ``LogDiagnoser`` fed in 1 MiB chunks, and prints MB/s.

Usage: ``python bench/bench_diagnose.py [--mb N]`` (default 200).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kimi_ops.diagnose import LogDiagnoser, diagnose  # noqa: E402

API = "(APIServer pid=1) "
ENG = "(EngineCore_DP0 pid=211) "
WRK = "(VllmWorker TP{rank} pid={pid}) "


def _ts(i: int) -> str:
    return f"03-20 {10 + (i // 3600) % 12:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"


def startup(rng: random.Random) -> str:
    """One startup sequence, as vLLM 0.1x prints it (TP=8, 64 shards)."""
    t = _ts(0)
    lines = [
        f"{API}INFO {t} [api_server.py:1896] vLLM API server version 0.17.1",
        f"{API}INFO {t} [utils.py:328] non-default args: {{'model_tag': '/models/Kimi-K2.5-NVFP4',"
        " 'port': 8000, 'model': '/models/Kimi-K2.5-NVFP4', 'trust_remote_code': True, "
        "'max_model_len': 131072, 'tensor_parallel_size': 8}",
        f"{ENG}INFO {t} [core.py:654] Waiting for init message from front-end.",
        f"{ENG}INFO {t} [core.py:75] Initializing a V1 LLM engine (v0.17.1) with config: "
        "model='/models/Kimi-K2.5-NVFP4', tensor_parallel_size=8, kv_cache_dtype=auto",
    ]
    for r in range(8):
        w = WRK.format(rank=r, pid=300 + r)
        lines.append(
            f"{w}INFO {t} [gpu_model_runner.py:1932] Starting to load model "
            "/models/Kimi-K2.5-NVFP4..."
        )
    bar = ""
    for k in range(65):
        bar += (
            f"\rLoading safetensors checkpoint shards: {k * 100 // 64:3d}% Completed | "
            f"{k}/64 [{k // 60:02d}:{k % 60:02d}<01:30, {rng.uniform(1, 3):.2f}s/it]"
        )
    lines.append(bar)
    lines += [
        f"{ENG}INFO {t} [default_loader.py:262] Loading weights took 93.12 seconds",
        f"{ENG}INFO {t} [gpu_model_runner.py:1984] Model loading took 71.2 GiB memory and "
        "95.0 seconds",
        f"{ENG}INFO {t} [backends.py:548] Using cache directory: /root/.cache/vllm/"
        "torch_compile_cache/d7f9b2c1b1/rank_0_0/backbone for vLLM's torch.compile",
        f"{ENG}INFO {t} [monitor.py:34] torch.compile takes 41.5 s in total",
        f"{ENG}INFO {t} [gpu_worker.py:276] Available KV cache memory: 12.3 GiB",
        f"{ENG}INFO {t} [kv_cache_utils.py:849] GPU KV cache size: 840,160 tokens",
        f"{ENG}INFO {t} [kv_cache_utils.py:853] Maximum concurrency for 131072 tokens per "
        "request: 6.41x",
    ]
    bar = ""
    for k in range(68):
        bar += (
            f"\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): {k * 100 // 67:3d}%|"
            f"{'#' * (k // 7):10s}| {k}/67 [00:{k // 5:02d}<00:06, 5.7it/s]"
        )
    lines += [
        bar,
        f"{ENG}INFO {t} [gpu_model_runner.py:2589] Graph capturing finished in 12 secs, took "
        "0.55 GiB",
        f"{ENG}INFO {t} [core.py:210] init engine (profile, create kv cache, warmup model) took "
        "212.4 seconds",
        f"{API}INFO {t} [api_server.py:1927] Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"{API}INFO {t} [launcher.py:29] Available routes are:",
        f"{API}INFO {t} [launcher.py:37] Route: /v1/chat/completions, Methods: POST",
        f"{API}INFO:     Started server process [1]",
        f"{API}INFO:     Waiting for application startup.",
        f"{API}INFO:     Application startup complete.",
    ]
    return "\n".join(lines) + "\n"


def serving_line(rng: random.Random, i: int) -> str:
    """One line of a busy server's log."""
    t = _ts(i)
    k = rng.random()
    req = f"chatcmpl-{rng.getrandbits(64):016x}"
    if k < 0.30:
        return (
            f"{API}INFO:     10.0.{rng.randrange(256)}.{rng.randrange(256)}:"
            f'{rng.randrange(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        )
    if k < 0.55:
        return (
            f"{API}INFO {t} [logger.py:43] Received request {req}: params: SamplingParams("
            f"n=1, temperature=0.6, top_p=0.95, top_k=20, max_tokens={rng.randrange(64, 4096)}"
            "), prompt_token_ids: None, lora_request: None."
        )
    if k < 0.80:
        return f"{API}INFO {t} [async_llm.py:270] Added request {req}."
    if k < 0.95:
        return (
            f"{API}INFO {t} [loggers.py:123] Engine 000: Avg prompt throughput: "
            f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
            f"{rng.uniform(0, 900):.1f} tokens/s, Running: {rng.randrange(64)} reqs, "
            f"Waiting: 0 reqs, GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache "
            f"hit rate: {rng.uniform(0, 100):.1f}%"
        )
    if k < 0.99:
        return (
            f"{ENG}DEBUG {t} [core.py:412] EngineCore busy loop: scheduled "
            f"{rng.randrange(64)} requests, {rng.randrange(100000)} tokens"
        )
    w = WRK.format(rank=rng.randrange(8), pid=300)
    return (
        f"{w}WARNING {t} [shm_broadcast.py:466] No available shared memory broadcast block "
        "found in 60 second. This typically happens when some processes are hanging."
    )


CRASH = (
    f"{ENG}ERROR 03-20 23:59:59 [core.py:711] EngineCore encountered a fatal error.\n"
    f"{ENG}ERROR 03-20 23:59:59 [core.py:711] Traceback (most recent call last):\n"
    f'{ENG}ERROR 03-20 23:59:59 [core.py:711]   File "/usr/lib/python3.12/site-packages/vllm/'
    'v1/engine/core.py", line 702, in run_engine_core\n'
    f"{ENG}ERROR 03-20 23:59:59 [core.py:711]     engine_core.run_busy_loop()\n"
    f"{ENG}ERROR 03-20 23:59:59 [core.py:711] torch.OutOfMemoryError: CUDA out of memory. Tried "
    "to allocate 2.00 GiB. GPU 3 has a total capacity of 94.97 GiB of which 1.02 GiB is free.\n"
    f"{API}ERROR 03-20 23:59:59 [async_llm.py:480] AsyncLLM output_handler failed.\n"
    f"{API}ERROR 03-20 23:59:59 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
)


def build_log(mb: float, seed: int = 1) -> str:
    """A log of about ``mb`` megabytes ending in a crash."""
    rng = random.Random(seed)
    target = int(mb * 1_000_000)
    parts = [startup(rng)]
    size = len(parts[0])
    i = 0
    while size < target:
        block = "\n".join(serving_line(rng, i + j) for j in range(2000)) + "\n"
        parts.append(block)
        size += len(block)
        i += 2000
    parts.append(CRASH)
    return "".join(parts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="log size in MB (default 200)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    text = build_log(args.mb)
    t_build = time.perf_counter() - t0
    size_mb = len(text.encode()) / 1e6
    lines = text.count("\n")
    print(f"log: {size_mb:.1f} MB, {lines:,} lines (built in {t_build:.1f} s, in memory)")

    # Wall time and this process's CPU time: on a shared machine other processes slow the
    # wall clock; CPU time shows what the diagnosis itself costs.
    t0, c0 = time.perf_counter(), time.process_time()
    whole = diagnose(text, {"port": 8000})
    t_whole, c_whole = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"diagnose(text):          {t_whole:6.2f} s  {size_mb / t_whole:7.1f} MB/s  "
        f"label={whole.label} stage={whole.stage}  (cpu time: {size_mb / c_whole:.1f} MB/s)"
    )

    chunk = 1 << 20
    t0, c0 = time.perf_counter(), time.process_time()
    d = LogDiagnoser({"port": 8000})
    for k in range(0, len(text), chunk):
        d.feed(text[k : k + chunk])
    streamed = d.diagnosis()
    t_stream, c_stream = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"LogDiagnoser 1 MiB feed: {t_stream:6.2f} s  {size_mb / t_stream:7.1f} MB/s  "
        f"label={streamed.label} same={streamed == whole}  "
        f"(cpu time: {size_mb / c_stream:.1f} MB/s)"
    )
    print(f"summary: {whole.summary}")


if __name__ == "__main__":
    main()
