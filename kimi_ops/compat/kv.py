"""KV-cache dtypes: their families, and the dtype a checkpoint's config (or a flag) asks for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: KV-cache dtype names vLLM accepts that mean "FP8".
FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})
#: Names that mean "the model's own 16-bit dtype" (no quantized KV cache).
WIDE_KV_DTYPES = frozenset({"auto", "bfloat16", "float16", "half"})


def kv_family(kv_dtype: str) -> str:
    """``"fp8"`` for any FP8 name, ``"16bit"`` for auto/bfloat16/float16, else the name."""
    name = (kv_dtype or "auto").strip().lower()
    if name in FP8_KV_DTYPES:
        return "fp8"
    if name in WIDE_KV_DTYPES:
        return "16bit"
    return name


def is_fp8(kv_dtype: str) -> bool:
    """Whether a KV-cache dtype name means FP8."""
    return kv_family(kv_dtype) == "fp8"


@dataclass(frozen=True)
class KvCacheDtype:
    """The KV-cache dtype vLLM will use and where that came from."""

    value: str
    source: str

    @property
    def is_fp8(self) -> bool:
        """Whether the dtype is an FP8 variant."""
        return is_fp8(self.value)


def _fp8_from_scheme(scheme: object) -> bool | None:
    """True/False for a kv_cache_scheme / kv_cache_quant_algo value; None when absent."""
    if scheme is None:
        return None
    if isinstance(scheme, str):
        return scheme.strip().lower() in ("fp8", "float8", "fp8_e4m3")
    if isinstance(scheme, Mapping):
        bits = scheme.get("num_bits")
        kind = str(scheme.get("type", "")).lower()
        return bits == 8 and kind == "float"
    return False


def quantization_config(config: Mapping[str, object]) -> tuple[Mapping[str, object] | None, str]:
    """config.json's quantization_config (top level, else text_config's) and where it was."""
    qc = config.get("quantization_config")
    if isinstance(qc, Mapping):
        return qc, "config.json quantization_config"
    text = config.get("text_config")
    inner = text.get("quantization_config") if isinstance(text, Mapping) else None
    if isinstance(inner, Mapping):
        return inner, "config.json text_config.quantization_config"
    return None, ""


def effective_kv_cache_dtype(
    config_json: Mapping[str, object] | None,
    hf_quant_json: Mapping[str, object] | None,
    cli_kv_cache_dtype: str | None = None,
) -> KvCacheDtype:
    """The KV-cache dtype vLLM resolves for a checkpoint, following vLLM's precedence.

    1. An explicit ``--kv-cache-dtype`` other than ``auto`` wins.
    2. Otherwise config.json's ``quantization_config`` when present: ``kv_cache_scheme`` as a
       dict (``num_bits: 8, type: float``) or the string ``"FP8"``, or ModelOpt's
       ``kv_cache_quant_algo: "FP8"`` -> ``fp8_e4m3``; a quantization_config without a KV
       scheme means ``auto``.
    3. ONLY when config.json has no quantization_config: hf_quant_config.json
       ``quantization.kv_cache_quant_algo`` (``FP8`` -> ``fp8_e4m3``).
    4. Else ``auto`` (the model dtype).
    """
    cli = (cli_kv_cache_dtype or "").strip().lower()
    if cli and cli != "auto":
        return KvCacheDtype(cli, "--kv-cache-dtype")
    if config_json is not None:
        qc, where = quantization_config(config_json)
        if qc is not None:
            for key in ("kv_cache_scheme", "kv_cache_quant_algo"):
                fp8 = _fp8_from_scheme(qc.get(key))
                if fp8:
                    return KvCacheDtype("fp8_e4m3", f"{where}.{key}")
                if fp8 is False:
                    value = qc.get(key)
                    return KvCacheDtype("auto", f"{where}.{key} = {value!r} (not FP8)")
            return KvCacheDtype("auto", f"{where} (no KV-cache scheme)")
    if hf_quant_json is not None:
        quant = hf_quant_json.get("quantization")
        section = quant if isinstance(quant, Mapping) else hf_quant_json
        fp8 = _fp8_from_scheme(section.get("kv_cache_quant_algo"))
        if fp8:
            return KvCacheDtype("fp8_e4m3", "hf_quant_config.json quantization.kv_cache_quant_algo")
        return KvCacheDtype("auto", "hf_quant_config.json (no FP8 kv_cache_quant_algo)")
    return KvCacheDtype("auto", "default (no KV-cache quantization in the checkpoint)")
