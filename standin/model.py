"""What vLLM would learn from a model directory (config.json, quantization, shards)."""

from __future__ import annotations

import json
import os
from typing import Any


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
