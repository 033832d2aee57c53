"""A throwaway checkpoint with Kimi-K2.5-NVFP4's quantization settings (for the demo and tests).

The files follow the layout the ModelOpt exporter writes (facts.md section 2): config.json with
``quantization_config.kv_cache_scheme`` (FP8) and hf_quant_config.json with
``quantization.kv_cache_quant_algo: FP8``, plus a safetensors index naming a few tiny shards.
No weights: the stand-in engine loads no model.
"""

from __future__ import annotations

import json
from typing import Any


def kimi_config(*, fp8_kv: bool = True) -> dict[str, Any]:
    quant: dict[str, Any] = {
        "config_groups": {
            "group_0": {
                "input_activations": {
                    "dynamic": False,
                    "num_bits": 4,
                    "type": "float",
                    "group_size": 16,
                },
                "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
                "targets": ["Linear"],
            }
        },
        "ignore": ["lm_head", "re:.*mlp.gate$"],
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quant_algo": "NVFP4",
        "quant_method": "modelopt",
    }
    if fp8_kv:
        quant["kv_cache_scheme"] = {"dynamic": False, "num_bits": 8, "type": "float"}
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "num_hidden_layers": 61,
            "n_routed_experts": 384,
            "kv_lora_rank": 512,
            "q_lora_rank": 1536,
            "qk_rope_head_dim": 64,
        },
        "quantization_config": quant,
        "torch_dtype": "bfloat16",
    }


def hf_quant_config(*, fp8_kv: bool = True) -> dict[str, Any]:
    quantization: dict[str, Any] = {
        "quant_algo": "NVFP4",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    }
    if fp8_kv:
        quantization["kv_cache_quant_algo"] = "FP8"
    return {"producer": {"name": "modelopt", "version": "0.37.0"}, "quantization": quantization}


def shard_names(count: int) -> list[str]:
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def checkpoint_files(*, shards: int = 4, fp8_kv: bool = True) -> dict[str, str]:
    """File name -> text for a demo model directory (shards are written as tiny files)."""
    names = shard_names(shards)
    index = {
        "metadata": {"total_size": 0},
        "weight_map": {f"model.layers.{i}.weight": names[i % shards] for i in range(shards * 2)},
    }
    files = {
        "config.json": json.dumps(kimi_config(fp8_kv=fp8_kv), indent=2) + "\n",
        "hf_quant_config.json": json.dumps(hf_quant_config(fp8_kv=fp8_kv), indent=4) + "\n",
        "model.safetensors.index.json": json.dumps(index, indent=2) + "\n",
    }
    for name in names:
        files[name] = "stand-in shard: no weights\n"
    return files
