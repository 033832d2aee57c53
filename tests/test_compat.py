"""kimi_ops.compat: KV-dtype precedence, the MLA backend table, launch-flag adjustments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from kimi_ops import compat
from kimi_ops.compat import (
    FLAG_CHANGES,
    MLA_BACKENDS,
    adjust_launch,
    backends_for,
    effective_kv_cache_dtype,
    fp8_kv_supported,
    is_mla_model,
)

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
CONFIG = json.loads((FIXTURES / "kimi_k25_nvfp4_config.json").read_text())
HF_QUANT = json.loads((FIXTURES / "kimi_k25_nvfp4_hf_quant_config.json").read_text())


def _without_kv_scheme(config: dict) -> dict:
    patched = json.loads(json.dumps(config))
    del patched["quantization_config"]["kv_cache_scheme"]
    return patched


# --- effective KV-cache dtype -----------------------------------------------------------------


def test_kv_from_config_quantization_config() -> None:
    kv = effective_kv_cache_dtype(CONFIG, HF_QUANT)
    assert kv.value == "fp8_e4m3" and kv.is_fp8
    assert kv.source == "config.json quantization_config.kv_cache_scheme"


def test_explicit_cli_dtype_wins() -> None:
    kv = effective_kv_cache_dtype(CONFIG, HF_QUANT, "bfloat16")
    assert (kv.value, kv.source) == ("bfloat16", "--kv-cache-dtype")
    assert not kv.is_fp8


def test_cli_auto_does_not_win() -> None:
    assert effective_kv_cache_dtype(CONFIG, HF_QUANT, "auto").value == "fp8_e4m3"


def test_hf_quant_config_ignored_when_config_has_quantization_config() -> None:
    """The patched config.json (no kv_cache_scheme) is authoritative: hf_quant's FP8 is unused."""
    kv = effective_kv_cache_dtype(_without_kv_scheme(CONFIG), HF_QUANT)
    assert kv.value == "auto" and "no KV-cache scheme" in kv.source


def test_hf_quant_config_used_without_quantization_config() -> None:
    config = {k: v for k, v in CONFIG.items() if k != "quantization_config"}
    kv = effective_kv_cache_dtype(config, HF_QUANT)
    assert kv.value == "fp8_e4m3"
    assert kv.source == "hf_quant_config.json quantization.kv_cache_quant_algo"
    assert effective_kv_cache_dtype(None, HF_QUANT).value == "fp8_e4m3"


@pytest.mark.parametrize(
    ("scheme", "expected"),
    [
        ("FP8", "fp8_e4m3"),
        ("fp8", "fp8_e4m3"),
        ({"num_bits": 8, "type": "float", "dynamic": False}, "fp8_e4m3"),
        ({"num_bits": 8, "type": "int"}, "auto"),
        (None, "auto"),
    ],
)
def test_kv_cache_scheme_forms(scheme: object, expected: str) -> None:
    config = {"quantization_config": {"quant_method": "modelopt", "kv_cache_scheme": scheme}}
    assert effective_kv_cache_dtype(config, None).value == expected


def test_modelopt_kv_cache_quant_algo_in_config_and_text_config() -> None:
    config = {"quantization_config": {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}}
    assert effective_kv_cache_dtype(config, None).value == "fp8_e4m3"
    nested = {"text_config": {"quantization_config": {"kv_cache_scheme": "FP8"}}}
    kv = effective_kv_cache_dtype(nested, {"quantization": {"kv_cache_quant_algo": None}})
    assert kv.value == "fp8_e4m3" and "text_config" in kv.source


def test_no_quantization_anywhere() -> None:
    kv = effective_kv_cache_dtype({"architectures": ["X"]}, None)
    assert kv.value == "auto" and kv.source.startswith("default")
    assert effective_kv_cache_dtype(None, None).value == "auto"


# --- the MLA backend table --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cc", "version", "kv", "expected"),
    [
        ("12.0", "0.17.1", "fp8_e4m3", []),
        ("12.0", "0.17.1", "auto", ["TRITON_MLA"]),
        ("12.0", "0.18.0", "fp8_e4m3", ["TRITON_MLA"]),
        ("12.0", "0.19.0", "fp8", ["TRITON_MLA"]),
        ("12.0", "0.18.0rc1", "fp8", []),
        ("12.0", "0.18.1.dev3+g0abc", "fp8", ["TRITON_MLA"]),
        ("10.0", "0.17.1", "fp8_e4m3", ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASHMLA"]),
        ("10.0", "0.17.1", "auto", ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASHMLA", "TRITON_MLA"]),
        ("9.0", "0.17.1", "fp8_e4m3", ["FLASHMLA"]),
        ("9.0", "0.17.1", "bfloat16", ["FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"]),
        ("9.0", "0.10.1", "fp8", []),
        ("8.0", "0.18.0", "fp8", []),  # Triton's fp8e4nv needs SM 8.9
        ("8.9", "0.18.0", "fp8", ["TRITON_MLA"]),
        ("8.0", "0.17.1", "auto", ["TRITON_MLA"]),
        ("7.5", "0.17.1", "auto", []),
        ("12.0", "not a version", "auto", []),
        ("twelve", "0.17.1", "auto", []),
        ("12.0", "0.17.1", "nvfp4", []),
    ],
)
def test_backends_for(cc: str, version: str, kv: str, expected: list[str]) -> None:
    assert backends_for(cc, version, kv) == expected


def test_fp8_kv_supported() -> None:
    assert not fp8_kv_supported("12.0", "0.17.1")
    assert fp8_kv_supported("12.0", Version("0.18.0"))
    assert fp8_kv_supported("10.0", "0.17.1")
    assert fp8_kv_supported("9.0", "0.17.1")


def test_backend_table_is_documented() -> None:
    names = [b.name for b in MLA_BACKENDS]
    assert names == ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"]
    assert all(b.source for b in MLA_BACKENDS)
    assert compat.mla_backend("triton_mla") is MLA_BACKENDS[-1]
    assert compat.mla_backend("nope") is None


def test_is_mla_model() -> None:
    assert is_mla_model(CONFIG) is True  # kv_lora_rank in text_config
    assert is_mla_model({"kv_lora_rank": 512}) is True
    assert is_mla_model({"architectures": ["DeepseekV3ForCausalLM"]}) is True
    assert is_mla_model({"architectures": ["LlamaForCausalLM"], "num_key_value_heads": 8}) is False
    assert is_mla_model(None) is None


# --- launch-argument adjustments --------------------------------------------------------------


def test_flag_changes_are_data_with_sources() -> None:
    names = {c.name for c in FLAG_CHANGES}
    assert names == {"disable-log-requests", "auto-tool-choice", "attention-backend-env"}
    assert all(c.source for c in FLAG_CHANGES)


def test_disable_log_requests_kept_on_old_vllm() -> None:
    adj = adjust_launch(["--disable-log-requests"], {}, "0.11.2", None)
    assert adj.args == ("--disable-log-requests",) and adj.notes == ()


@pytest.mark.parametrize("version", ["0.12.0", "0.17.1", "0.26.0"])
def test_disable_log_requests_replaced_on_new_vllm(version: str) -> None:
    adj = adjust_launch(["--max-model-len", "8192", "--disable-log-requests"], {}, version, None)
    assert adj.args == ("--max-model-len", "8192", "--no-enable-log-requests")
    assert any("--no-enable-log-requests" in n for n in adj.notes)


def test_auto_tool_choice_added_once() -> None:
    adj = adjust_launch([], {}, "0.17.1", "kimi_k2")
    assert adj.args == ("--enable-auto-tool-choice",)
    again = adjust_launch(adj.args, {}, "0.17.1", "kimi_k2")
    assert again.args == ("--enable-auto-tool-choice",) and again.notes == ()
    assert adjust_launch([], {}, "0.17.1", None).args == ()
    from_args = adjust_launch(["--tool-call-parser=hermes"], {}, "0.17.1", None)
    assert "--enable-auto-tool-choice" in from_args.args


def test_attention_env_kept_before_the_flag_exists() -> None:
    adj = adjust_launch([], {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, "0.11.0", None)
    assert adj.env == {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"} and adj.args == ()


@pytest.mark.parametrize(("version", "word"), [("0.17.1", "deprecates"), ("0.26.0", "ignores")])
def test_attention_env_moves_to_the_flag(version: str, word: str) -> None:
    env = {"VLLM_ATTENTION_BACKEND": "TRITON_MLA", "NCCL_PROTO": "LL"}
    adj = adjust_launch([], env, version, None)
    assert adj.args == ("--attention-backend", "TRITON_MLA")
    assert adj.env == {"NCCL_PROTO": "LL"}
    assert any(word in n for n in adj.notes)
    assert env == {"VLLM_ATTENTION_BACKEND": "TRITON_MLA", "NCCL_PROTO": "LL"}  # not mutated


def test_pinned_backend_flag_or_env_by_version() -> None:
    new = adjust_launch([], {}, "0.17.1", None, attention_backend="TRITON_MLA")
    assert new.args == ("--attention-backend", "TRITON_MLA") and new.env == {}
    old = adjust_launch([], {}, "0.11.0", None, attention_backend="TRITON_MLA")
    assert old.args == () and old.env == {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}


def test_users_backend_choice_wins_over_the_pin() -> None:
    adj = adjust_launch(
        ["--attention-config.backend", "FLASHMLA"], {}, "0.17.1", None, "TRITON_MLA"
    )
    assert adj.args == ("--attention-config.backend", "FLASHMLA")
    assert any("keeping the configured attention backend FLASHMLA" in n for n in adj.notes)


def test_unknown_version_adjusts_only_tool_choice() -> None:
    adj = adjust_launch(["--disable-log-requests"], {}, None, "kimi_k2")
    assert adj.args == ("--disable-log-requests", "--enable-auto-tool-choice")
    assert any("unknown" in n for n in adj.notes)


def test_find_option() -> None:
    args = ["--kv-cache-dtype", "fp8", "--x", "--kv-cache-dtype=bfloat16"]
    assert compat.find_option(args, "--kv-cache-dtype") == "bfloat16"
    assert compat.find_option(["--kv-cache-dtype"], "--kv-cache-dtype") is None
