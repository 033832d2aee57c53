"""What vLLM supports where: MLA attention backends, KV-cache dtypes, launch-flag changes.

The knowledge is kept as DATA (tables with ``packaging`` version ranges) so a new vLLM release is
a table edit, not a logic change. Pure: no I/O.

Sources (checked in the stored public material; see /work/shared/vllm/facts.md as well):

* vLLM ``docs/design/attention_backends.md`` (generated from each backend's
  ``validate_configuration``): MLA decode backends and their compute capabilities --
  CUTLASS_MLA 10.x, FLASHINFER_MLA 10.x, FLASHMLA 9.x-10.x, FLASH_ATTN_MLA 9.x, TRITON_MLA any;
  KV dtypes: all but FLASH_ATTN_MLA list ``fp8``/``fp8_e4m3``. FLASHINFER_MLA_SPARSE /
  FLASHMLA_SPARSE serve sparse-attention models (DeepSeek V3.2 style) only, not Kimi K2.5.
* TRITON_MLA FP8 KV: vllm-project/vllm#34597 "[Kernel] Add FP8 KV cache support to Triton MLA
  decode attention" (opened 2026-02-16, merged), first released in 0.18.0 (facts.md section 1).
  Up to 0.17.1 it raised ``TritonMLA V1 with FP8 KV cache not yet supported``
  (vllm-project/vllm#35577). Triton stores FP8 as ``fp8e4nv``, which needs SM 8.9+
  (vllm-project/vllm#43914), hence ``fp8_min_cc`` below.
* FLASHMLA FP8 KV: vllm-project/vllm#22668 (merged 2025-08); first release after it is 0.10.2.
  Uncertain by one release: the range may be conservative.
* FLASHINFER_MLA FP8 KV: vllm-project/vllm#24705 (2025-09-11; before it "Only FlashMLA and
  CUTLASS_MLA support fp8"), first release 0.11.0. CUTLASS_MLA already had FP8 then; we claim
  it from 0.10.2 as well (conservative; earlier releases are not confirmed).
* FLASH_ATTN_MLA: no FP8 KV (docs table; vllm-project/vllm#46695 withdrew an attempt, 2026-06).

One module per table and its logic: :mod:`.versions`, :mod:`.kv` (KV-cache dtypes), :mod:`.mla`
(CUDA MLA backends, MLA models), :mod:`.launch` (flag changes, adjust_launch), :mod:`.cpu`
(vLLM's CPU build). Every public name is re-exported here.
"""

from __future__ import annotations

from .cpu import (
    CPU_ATTENTION_BACKENDS,
    CPU_DEFAULT_MEMORY_UTILIZATION,
    CPU_UNSUPPORTED_QUANT,
    CpuAttentionBackend,
    CpuUnsupportedQuant,
    attention_head_size,
    checkpoint_quantization,
    cpu_attention_backend,
    cpu_unsupported_quantization,
    is_cpu_build,
)
from .kv import (
    FP8_KV_DTYPES,
    WIDE_KV_DTYPES,
    KvCacheDtype,
    effective_kv_cache_dtype,
    is_fp8,
    kv_family,
    quantization_config,
)
from .launch import (
    ATTENTION_BACKEND_FLAG,
    ATTENTION_ENV_IGNORED,
    FLAG_CHANGES,
    FlagChange,
    LaunchAdjustment,
    adjust_launch,
    attention_backend_in_args,
    find_option,
    flag_change,
)
from .mla import (
    MLA_ARCHITECTURES,
    MLA_BACKENDS,
    PIN_BACKEND_CC_MAJORS,
    MlaBackend,
    backends_for,
    fp8_kv_supported,
    is_mla_model,
    mla_backend,
    parse_cc,
)
from .versions import as_version, in_range

__all__ = [
    "ATTENTION_BACKEND_FLAG",
    "ATTENTION_ENV_IGNORED",
    "CPU_ATTENTION_BACKENDS",
    "CPU_DEFAULT_MEMORY_UTILIZATION",
    "CPU_UNSUPPORTED_QUANT",
    "CpuAttentionBackend",
    "CpuUnsupportedQuant",
    "FLAG_CHANGES",
    "FP8_KV_DTYPES",
    "FlagChange",
    "KvCacheDtype",
    "LaunchAdjustment",
    "MLA_ARCHITECTURES",
    "MLA_BACKENDS",
    "MlaBackend",
    "PIN_BACKEND_CC_MAJORS",
    "WIDE_KV_DTYPES",
    "adjust_launch",
    "as_version",
    "attention_backend_in_args",
    "attention_head_size",
    "backends_for",
    "checkpoint_quantization",
    "cpu_attention_backend",
    "cpu_unsupported_quantization",
    "effective_kv_cache_dtype",
    "find_option",
    "flag_change",
    "fp8_kv_supported",
    "in_range",
    "is_cpu_build",
    "is_fp8",
    "is_mla_model",
    "kv_family",
    "mla_backend",
    "parse_cc",
    "quantization_config",
]
