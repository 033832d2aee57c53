"""Sizing before loading: weights per GPU, KV cache per token and per request, and what fits.

Pure: no I/O. From config.json, the KV-cache dtype the plan leaves in place, the checkpoint's shard
sizes, the GPUs' memory, ``--gpu-memory-utilization`` and ``--max-model-len`` this module
estimates what vLLM will print after a long load ("Available KV cache memory", "GPU KV cache
size: N tokens", "Maximum concurrency for L tokens per request: Cx"), so preflight can refuse a
length that cannot fit before anything is killed.

How vLLM sizes the KV cache (V1 engine, ``gpu_worker.determine_available_memory`` and
``kv_cache_utils``):

* budget per GPU = total memory x gpu_memory_utilization - (weights on this GPU + the peak
  activation memory of a profiling forward pass + non-torch memory (NCCL, CUDA context growth)
  + CUDA graphs). vLLM measures the last three by profiling; we cannot, so we subtract a fixed
  :data:`GPU_OVERHEAD_BYTES` (see its comment for the measured values it is taken from).
* the cache is paged: ``num_blocks = budget // page_size // num_layers`` with
  ``page_size = block_size x KV bytes per token of one layer``; capacity in tokens is
  ``num_blocks x block_size``. One request of ``max_model_len`` must fit
  (``To serve at least one request with the models's max seq len ...`` otherwise), and the
  printed concurrency is ``capacity / max_model_len``.
* On the CPU backend the budget is ``VLLM_CPU_KVCACHE_SPACE`` GiB (per rank) and the block size
  128; weights live in host RAM and do not reduce it.

KV bytes per token and layer (on one tensor-parallel rank):

* MLA (DeepSeek-V2/V3, Kimi-K2/K2.5: ``kv_lora_rank`` set): ``(kv_lora_rank + qk_rope_head_dim)
  x dtype bytes``, the same on every rank (the latent cache is replicated, not sharded by TP).
* Standard and grouped-query attention: ``2 x kv_heads_per_rank x head_dim x dtype bytes`` with
  ``kv_heads_per_rank = max(1, num_key_value_heads // tp)`` (heads are replicated when there are
  fewer KV heads than ranks, as vLLM does).
* Sliding-window layers are counted as full-attention layers (vLLM keeps only the window for
  them, so the estimate is conservative: it may refuse a length that would fit); a note says so.
  Layers that hold no per-token KV (``layer_types`` entries other than ``full_attention`` /
  ``sliding_attention``: linear attention, Mamba) are left out, and their fixed state is not
  estimated (a note says so).
* KV dtype: FP8 variants 1 byte, ``auto``/bfloat16/float16 2 bytes (vLLM casts float32 models to
  16 bits, so ``auto`` is 2 bytes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .compat import find_option

GIB = 1024**3
MIB = 1024**2

Device = Literal["cuda", "cpu"]

#: vLLM's default ``--gpu-memory-utilization``.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: vLLM's default KV block size on CUDA (attention backends may use larger pages, which only
#: changes the rounding).
GPU_BLOCK_SIZE = 16
#: The CPU backend's default block size (measured: the real CPU engine's 465,920-token figure for
#: a 2-layer MLA model at VLLM_CPU_KVCACHE_SPACE=1 is 1 GiB // (128 x 1152) // 2 blocks of 128).
CPU_BLOCK_SIZE = 128
#: Memory per GPU that is neither weights nor KV cache: the activation peak of vLLM's profiling
#: run (a forward pass of max_num_batched_tokens), non-torch memory (NCCL, CUDA context growth),
#: CUDA graphs, and the ~0.5 GiB that nvidia-smi's total shows but CUDA cannot allocate. vLLM
#: measures it; we assume it, in the two tiers of vLLM's own defaults (``get_batch_defaults``:
#: GPUs of 70 GiB or more, except A100, batch 8192 tokens per step for the API server, others
#: 2048). Measured values it is taken from (GiB, non-weight non-KV memory): 8192-token tier: 5.4
#: (Llama-3.3-70B-FP8, TP 2, H100: activation 4.84 + non-torch 0.55), 7.4 (gpt-oss-120b on one
#: H100 80GB: -2.14 GiB available after 65.97 GiB of weights at 0.9 of 79.18 GiB), 7.9
#: (gpt-oss-20b, H100); 2048-token tier: 2.2 (Qwen3-8B on one A10 choosing 20,272 tokens with
#: --max-model-len auto, assuming 0.9 and 15.3 GiB of weights). A length that needs more than
#: :data:`TIGHT_FRACTION` of the estimated budget only warns.
GPU_OVERHEAD_BYTES = 6 * GIB
SMALL_GPU_OVERHEAD_BYTES = int(2.5 * GIB)
#: vLLM's threshold for its larger batch defaults (bytes of total GPU memory).
LARGE_GPU_BYTES = 70 * GIB


def default_overhead(gpu_memory_bytes: int | None, gpu_name: str = "") -> int:
    """The overhead allowance for a GPU: :data:`GPU_OVERHEAD_BYTES` on GPUs where vLLM batches
    8192 tokens by default (>= 70 GiB and not an A100), else :data:`SMALL_GPU_OVERHEAD_BYTES`."""
    large = gpu_memory_bytes is not None and gpu_memory_bytes >= LARGE_GPU_BYTES
    if large and "a100" not in gpu_name.lower():
        return GPU_OVERHEAD_BYTES
    return SMALL_GPU_OVERHEAD_BYTES


#: A request needing more than this fraction of the estimated KV budget is "tight": it may or
#: may not fit, given the error of the overhead estimate.
TIGHT_FRACTION = 0.85
#: Layer types that hold per-token KV.
_KV_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "attention"})


# --- config.json ------------------------------------------------------------------------------


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config: ``text_config`` when the model nests one (Kimi-K2.5's
    ``kimi_k25``, most vision-language models), else the config itself."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and inner.get("num_hidden_layers") is not None:
        return inner
    return config


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def kv_dtype_bytes(kv_cache_dtype: str) -> int:
    """Bytes per KV element: 1 for FP8 variants, else 2 (vLLM's ``auto`` on a 16-bit model)."""
    name = (kv_cache_dtype or "auto").strip().lower()
    return 1 if name.startswith("fp8") else 2


def derived_max_model_len(config: Mapping[str, Any]) -> int | None:
    """The context length vLLM derives from config.json when ``--max-model-len`` is not given
    (``max_position_embeddings`` of the text config), None when it is not there."""
    return _int(text_config(config).get("max_position_embeddings"))


@dataclass(frozen=True)
class KvLayout:
    """Per-token KV geometry on one tensor-parallel rank."""

    kind: Literal["mla", "attention"]
    layers: int
    bytes_per_token_layer: int
    dtype_bytes: int
    notes: tuple[str, ...] = ()

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token on one GPU (all its layers)."""
        return self.layers * self.bytes_per_token_layer


def kv_layout(
    config: Mapping[str, Any], kv_cache_dtype: str = "auto", tp: int = 1, pp: int = 1
) -> KvLayout:
    """The KV geometry of one rank for ``config`` (see the module docstring for the formulas).

    Raises ValueError naming the missing key when the config does not say enough.
    """
    text = text_config(config)
    dtype = kv_dtype_bytes(kv_cache_dtype)
    notes: list[str] = []
    layers = _int(text.get("num_hidden_layers"))
    if not layers or layers < 1:
        raise ValueError("config.json has no num_hidden_layers")
    layer_types = text.get("layer_types")
    if isinstance(layer_types, Sequence) and not isinstance(layer_types, str) and layer_types:
        kinds = [str(t) for t in layer_types]
        kv_layers = sum(k in _KV_LAYER_TYPES for k in kinds)
        if kv_layers < len(kinds):
            others = sorted({k for k in kinds if k not in _KV_LAYER_TYPES})
            notes.append(
                f"{len(kinds) - kv_layers} of {len(kinds)} layers ({', '.join(others)}) keep a "
                "fixed-size state, not per-token KV: not estimated"
            )
        if "sliding_attention" in kinds:
            notes.append(
                "sliding-window layers are counted as full attention (conservative: vLLM keeps "
                "only the window for them)"
            )
        layers = kv_layers
    elif _int(text.get("sliding_window")) and text.get("use_sliding_window", True) is not False:
        notes.append("sliding_window is set: counted as full attention (conservative estimate)")
    layers_per_rank = math.ceil(layers / max(1, pp))

    lora = _int(text.get("kv_lora_rank"))
    if lora:
        rope = _int(text.get("qk_rope_head_dim"))
        if rope is None:
            raise ValueError("config.json has kv_lora_rank but no qk_rope_head_dim")
        return KvLayout("mla", layers_per_rank, (lora + rope) * dtype, dtype, tuple(notes))

    heads = _int(text.get("num_attention_heads"))
    if not heads:
        raise ValueError("config.json has no num_attention_heads")
    kv_heads = _int(text.get("num_key_value_heads")) or heads
    head_dim = _int(text.get("head_dim"))
    if not head_dim:
        hidden = _int(text.get("hidden_size"))
        if not hidden:
            raise ValueError("config.json has neither head_dim nor hidden_size")
        head_dim = hidden // heads
    per_rank = max(1, kv_heads // max(1, tp))
    if kv_heads < tp:
        notes.append(f"{kv_heads} KV heads on TP {tp}: each rank keeps a replica of one head")
    return KvLayout(
        "attention", layers_per_rank, 2 * per_rank * head_dim * dtype, dtype, tuple(notes)
    )


# --- launch arguments -------------------------------------------------------------------------


_LEN = re.compile(r"^(\d+(?:\.\d+)?)([kKmM]?)$")


def parse_length(text: str) -> int | Literal["auto"] | None:
    """A ``--max-model-len`` value: an integer (``131072``, ``128k`` = 128000, ``128K`` =
    131072, as vLLM reads them), ``"auto"`` for ``auto``/``-1``, None when unparsable."""
    word = text.strip()
    if word.lower() == "auto" or word == "-1":
        return "auto"
    match = _LEN.match(word)
    if not match:
        return None
    factor = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}[match.group(2)]
    return int(float(match.group(1)) * factor)


def gpu_memory_utilization(args: Sequence[str]) -> float:
    """``--gpu-memory-utilization`` from the launch arguments, else vLLM's default 0.9."""
    value = find_option(args, "--gpu-memory-utilization")
    try:
        return float(value) if value is not None else DEFAULT_GPU_MEMORY_UTILIZATION
    except ValueError:
        return DEFAULT_GPU_MEMORY_UTILIZATION


def max_model_len_arg(args: Sequence[str]) -> int | Literal["auto"] | None:
    """``--max-model-len`` from the launch arguments (None when absent or unparsable)."""
    value = find_option(args, "--max-model-len")
    return parse_length(value) if value is not None else None


def cpu_kvcache_bytes(env: Mapping[str, str]) -> int | None:
    """``VLLM_CPU_KVCACHE_SPACE`` (GiB) from the server's environment, in bytes."""
    value = env.get("VLLM_CPU_KVCACHE_SPACE")
    try:
        gib = float(value) if value is not None else 0.0
    except ValueError:
        return None
    return int(gib * GIB) if gib > 0 else None


# --- the estimate -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizing:
    """The estimate for one deployment. Byte counts are per GPU (per rank) unless named total."""

    device: str
    tensor_parallel_size: int
    kv_layout: str
    kv_cache_dtype: str
    kv_bytes_per_token: int
    max_model_len: int | None
    max_model_len_source: str
    derived_max_model_len: int | None
    kv_bytes_per_request: int | None
    weights_bytes_total: int | None
    weights_bytes_per_gpu: int | None
    gpu_memory_bytes: int | None
    gpu_memory_utilization: float
    overhead_bytes: int
    kv_budget_bytes: int | None
    block_size: int
    capacity_tokens: int | None
    fits: bool | None
    largest_max_model_len: int | None
    concurrency: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tight(self) -> bool:
        """Fits by the estimate, but with little margin for the estimate's error."""
        return bool(
            self.fits
            and self.kv_bytes_per_request is not None
            and self.kv_budget_bytes
            and self.kv_bytes_per_request > TIGHT_FRACTION * self.kv_budget_bytes
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable, with GiB figures alongside the bytes."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        for key in (
            "kv_bytes_per_request",
            "weights_bytes_per_gpu",
            "gpu_memory_bytes",
            "kv_budget_bytes",
        ):
            value = out[key]
            out[key.replace("bytes", "gib")] = None if value is None else round(value / GIB, 2)
        return out

    def summary(self) -> str:
        """One line: weights/GPU, KV/token, budget, capacity, concurrency."""
        parts = []
        if self.weights_bytes_per_gpu is not None:
            parts.append(f"weights {self.weights_bytes_per_gpu / GIB:.1f} GiB/GPU")
        parts.append(
            f"KV {self.kv_bytes_per_token:,} B/token ({self.kv_layout}, {self.kv_cache_dtype})"
        )
        if self.kv_budget_bytes is not None:
            budget = f"KV budget {self.kv_budget_bytes / GIB:.1f} GiB/GPU"
            if self.device == "cuda" and self.gpu_memory_bytes is not None:
                budget += (
                    f" ({self.gpu_memory_bytes / GIB:.1f} GiB x {self.gpu_memory_utilization:g}"
                    f" - weights - {self.overhead_bytes / GIB:.0f} GiB overhead)"
                )
            parts.append(budget)
        if self.capacity_tokens is not None:
            parts.append(f"{self.capacity_tokens:,} tokens")
        if self.concurrency is not None and self.max_model_len:
            parts.append(f"concurrency {self.concurrency:.2f}x at {self.max_model_len:,}")
        return "; ".join(parts)


def capacity_tokens(budget: int, layout: KvLayout, block_size: int) -> int:
    """Tokens the paged KV cache holds: ``budget // page // layers`` blocks of ``block_size``."""
    if budget <= 0 or layout.layers < 1 or layout.bytes_per_token_layer < 1:
        return 0
    page = block_size * layout.bytes_per_token_layer
    return (budget // page // layout.layers) * block_size


def estimate(
    config: Mapping[str, Any],
    *,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    device: Device = "cuda",
    weights_bytes_total: int | None = None,
    gpu_memory_bytes: int | None = None,
    utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    max_model_len_source: str = "",
    cpu_kvcache_space_bytes: int | None = None,
    overhead_bytes: int | None = None,
    gpu_name: str = "",
) -> Sizing:
    """Estimate weights per GPU, KV per token and request, the budget, and what fits.

    ``max_model_len`` None means vLLM's default (the config's max_position_embeddings).
    Raises ValueError when config.json does not describe the attention (see :func:`kv_layout`).
    """
    layout = kv_layout(config, kv_cache_dtype, tp, pp)
    notes = list(layout.notes)
    derived = derived_max_model_len(config)
    if max_model_len is None:
        max_model_len = derived
        max_model_len_source = (
            "config.json max_position_embeddings" if derived is not None else "unknown"
        )
    shards = max(1, tp) * max(1, pp)
    weights_gpu = None if weights_bytes_total is None else math.ceil(weights_bytes_total / shards)

    block = CPU_BLOCK_SIZE if device == "cpu" else GPU_BLOCK_SIZE
    budget: int | None
    if device == "cpu":
        overhead = 0
    elif overhead_bytes is None:
        overhead = default_overhead(gpu_memory_bytes, gpu_name)
    else:
        overhead = overhead_bytes
    if device == "cpu":
        budget = cpu_kvcache_space_bytes
        if budget is None:
            notes.append("VLLM_CPU_KVCACHE_SPACE is not set: vLLM's CPU backend sizes the cache")
    elif gpu_memory_bytes is None or weights_gpu is None:
        budget = None
        missing = "GPU memory" if gpu_memory_bytes is None else "the shard sizes"
        notes.append(f"{missing} unknown: the KV budget is not estimated")
    else:
        budget = int(gpu_memory_bytes * utilization) - weights_gpu - overhead

    capacity = None if budget is None else capacity_tokens(budget, layout, block)
    per_request = None if max_model_len is None else max_model_len * layout.bytes_per_token
    fits: bool | None = None
    largest: int | None = None
    concurrency: float | None = None
    if capacity is not None:
        largest = capacity // GPU_BLOCK_SIZE * GPU_BLOCK_SIZE
        if derived is not None:
            largest = min(largest, derived)
        if max_model_len:
            needed = math.ceil(max_model_len / block) * block
            fits = capacity > 0 and needed <= capacity
            concurrency = capacity / max_model_len
    return Sizing(
        device=device,
        tensor_parallel_size=tp,
        kv_layout=layout.kind,
        kv_cache_dtype=kv_cache_dtype,
        kv_bytes_per_token=layout.bytes_per_token,
        max_model_len=max_model_len,
        max_model_len_source=max_model_len_source,
        derived_max_model_len=derived,
        kv_bytes_per_request=per_request,
        weights_bytes_total=weights_bytes_total,
        weights_bytes_per_gpu=weights_gpu,
        gpu_memory_bytes=gpu_memory_bytes,
        gpu_memory_utilization=utilization,
        overhead_bytes=overhead,
        kv_budget_bytes=budget,
        block_size=block,
        capacity_tokens=capacity,
        fits=fits,
        largest_max_model_len=largest,
        concurrency=concurrency,
        notes=tuple(notes),
    )
