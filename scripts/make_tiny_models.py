#!/usr/bin/env python3
"""Make three tiny checkpoints with random weights, locally (no download), for the real engine.

Run it with the python of the vLLM CPU venv (it needs torch, transformers and tokenizers):

    "$(bash scripts/install_vllm_cpu.sh --print)" scripts/make_tiny_models.py [DIR]

DIR defaults to ``$KIMI_OPS_TINY_MODELS`` or ``${XDG_CACHE_HOME:-~/.cache}/kimi-ops/tiny-models``.
It makes ``DIR/tiny-llama`` (LlamaForCausalLM) and ``DIR/tiny-dsv3`` (DeepseekV3ForCausalLM, the
architecture of Kimi-K2.5, with MLA): bf16 weights from a fixed seed, hidden size 256, 2 layers,
head size 64 (head size 16 loads on vLLM's CPU build, then crashes on the first request), a
512-token context, and a word-level tokenizer with a chat template. vLLM's CPU build serves the
DeepSeek-V3 one with its AMX_MLA backend only with kv_lora_rank 512, qk_rope_head_dim 64 and
``topk_method: noaux_tc`` (without it, weight loading fails with a KeyError). A third,
``DIR/tiny-llama-hd80``, is tiny-llama with heads of size 80: only for a failure test (the CPU
attention backend has kernels for 80, but refuses an FP8 KV cache for a head size that is not a
multiple of 32). And ``DIR/tiny-llama-custom`` is tiny-llama whose config.json points at custom
modeling code in the checkpoint (``auto_map``), as a model that needs ``--trust-remote-code``.

Cached: each model directory gets a ``kimi-ops-tiny.json`` stamp with the hash of the recipe;
a directory whose stamp matches is left alone, so a re-run takes about a second. Prints the
directory on stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

RECIPE_VERSION = 1
SEED = 0
STAMP = "kimi-ops-tiny.json"
MAX_LEN = 512

_WORD_TEXT = (
    "hello hi world the a an is are was be to of and in on for with you i we it this that "
    "what how why who where when yes no ok good bad model server answer question test one two "
    "three four five six seven eight nine ten red green blue cat dog sun moon day night kimi "
    "vllm cpu gpu fast slow big small up down left right please thanks user assistant system"
)
WORDS = _WORD_TEXT.split()
SPECIAL = ["<unk>", "<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' ' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)

COMMON: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": MAX_LEN,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "bos_token_id": 2,
    "eos_token_id": 3,
    "pad_token_id": 1,
}

MODELS: dict[str, dict[str, Any]] = {
    "tiny-llama": {"model_type": "llama", **COMMON, "head_dim": 64},
    "tiny-llama-hd80": {"model_type": "llama", **COMMON, "head_dim": 80},
    "tiny-llama-custom": {
        "model_type": "llama",
        **COMMON,
        "head_dim": 64,
        # files written into the checkpoint, and the config.json keys that name them (both
        # part of the recipe, so a change to either remakes the model)
        "custom_code": {
            "files": {
                "configuration_tiny.py": "from transformers import LlamaConfig\n\n\n"
                "class TinyConfig(LlamaConfig):\n    model_type = 'llama'\n",
                "modeling_tiny.py": "from transformers import LlamaForCausalLM\n\n\n"
                "class TinyCustomForCausalLM(LlamaForCausalLM):\n    pass\n",
            },
            "config": {
                "architectures": ["TinyCustomForCausalLM"],
                "auto_map": {
                    "AutoConfig": "configuration_tiny.TinyConfig",
                    "AutoModelForCausalLM": "modeling_tiny.TinyCustomForCausalLM",
                },
            },
        },
    },
    "tiny-dsv3": {
        "model_type": "deepseek_v3",
        **COMMON,
        # MLA: the CPU build's AMX_MLA backend needs these sizes.
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 64,
        "v_head_dim": 64,
        # A small MoE with the routing Kimi-K2.5 / DeepSeek-V3 use.
        "moe_intermediate_size": 128,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "routed_scaling_factor": 1.0,
        "norm_topk_prob": True,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "rope_scaling": None,
    },
}


def recipe_hash(name: str) -> str:
    text = json.dumps(
        {
            "version": RECIPE_VERSION,
            "seed": SEED,
            "words": WORDS,
            "special": SPECIAL,
            "chat_template": CHAT_TEMPLATE,
            "config": MODELS[name],
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_dir() -> Path:
    if os.environ.get("KIMI_OPS_TINY_MODELS"):
        return Path(os.environ["KIMI_OPS_TINY_MODELS"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kimi-ops" / "tiny-models"


def is_current(path: Path, name: str) -> bool:
    try:
        stamp = json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("recipe") == recipe_hash(name) and (path / "config.json").is_file()


def save_tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIAL, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=SPECIAL[4:],
        model_max_length=MAX_LEN,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return len(vocab)


def make_model(path: Path, name: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    vocab_size = save_tokenizer(tmp)
    spec = dict(MODELS[name])
    model_type = spec.pop("model_type")
    custom_code: dict[str, Any] = spec.pop("custom_code", {})
    config = AutoConfig.for_model(model_type, vocab_size=vocab_size, **spec)
    config.dtype = torch.bfloat16
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(tmp), safe_serialization=True)
    GenerationConfig(bos_token_id=2, eos_token_id=3, pad_token_id=1).save_pretrained(str(tmp))
    if custom_code:
        for filename, text in custom_code["files"].items():
            (tmp / filename).write_text(text)
        cfg = json.loads((tmp / "config.json").read_text())
        cfg.update(custom_code["config"])
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (tmp / STAMP).write_text(
        json.dumps({"recipe": recipe_hash(name), "seed": SEED, "model_type": model_type}) + "\n"
    )
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else default_dir()
    out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        path = out / name
        if is_current(path, name):
            print(f"make_tiny_models: ok: cached {path}", file=sys.stderr)
            continue
        make_model(path, name)
        print(f"make_tiny_models: made {path}", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
