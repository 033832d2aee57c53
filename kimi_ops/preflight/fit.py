"""The KV-cache fit check: does one request of max_model_len fit the plan's estimate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import sizing
from ..facts import HostFacts
from .common import GIB, Check
from .plan import build_plan

if TYPE_CHECKING:
    from ..profile import Profile


def _free_memory_short(profile: Profile, facts: HostFacts, est: sizing.Sizing) -> str:
    """Why vLLM's startup check (free memory >= total x utilization) would fail, or ""."""
    gpus = sorted(facts.gpus or [], key=lambda g: g.index)[: profile.tensor_parallel_size]
    free = [(g.memory_free_mib, g.index) for g in gpus if g.memory_free_mib is not None]
    if est.device != "cuda" or not free or est.gpu_memory_bytes is None:
        return ""
    least, index = min(free)
    wanted = est.gpu_memory_bytes * est.gpu_memory_utilization
    if least * sizing.MIB >= wanted:
        return ""
    return (
        f"GPU {index} has {least * sizing.MIB / GIB:.1f} GiB free but vLLM wants "
        f"{wanted / GIB:.1f} GiB (total x {est.gpu_memory_utilization:g}) free at startup "
        "('Free memory on device ... is less than desired GPU memory utilization')"
    )


def _check_kv_cache_fit(profile: Profile, facts: HostFacts, own: set[int]) -> Check:
    """Whether one request of max_model_len fits the estimated KV budget (see kimi_ops.sizing)."""
    plan = build_plan(profile, facts)
    est = plan.sizing
    if est is None:
        return Check("kv_cache_fit", "warn", f"not estimated: {plan.sizing_error}")
    summary = est.summary()
    auto = plan.max_model_len_mode == "vllm-auto"
    if est.kv_budget_bytes is None:
        return Check("kv_cache_fit", "warn", f"not estimated ({'; '.join(est.notes)}): {summary}")
    if not est.capacity_tokens:
        return Check(
            "kv_cache_fit",
            "fail",
            f"no room for the KV cache: {summary}; use more GPUs (tensor_parallel_size), raise "
            "--gpu-memory-utilization or free GPU memory",
        )
    if est.max_model_len is None:
        return Check("kv_cache_fit", "pass", f"max_model_len unknown; {summary}")
    length = f"{est.max_model_len:,} tokens ({est.max_model_len_source})"
    derived = est.derived_max_model_len
    allow_long = plan.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1"
    if derived is not None and est.max_model_len > derived and not allow_long and not auto:
        return Check(
            "kv_cache_fit",
            "fail",
            f"max_model_len {length} is greater than the model's max_position_embeddings "
            f"({derived:,}); vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is in kimi.env",
        )
    if auto:
        return Check(
            "kv_cache_fit",
            "pass",
            f"vLLM chooses the length (--max-model-len auto); estimated largest "
            f"{est.largest_max_model_len:,}; {summary}",
        )
    if est.fits is False:
        need = (est.kv_bytes_per_request or 0) / GIB
        return Check(
            "kv_cache_fit",
            "fail",
            f"one request of {length} needs {need:.1f} GiB of KV cache per GPU, more than the "
            f"estimated budget: {summary}; the largest max_model_len that fits is "
            f"{est.largest_max_model_len:,} (set kimi.max_model_len to it, or to auto)",
        )
    if est.tight:
        return Check(
            "kv_cache_fit",
            "warn",
            f"{length} fits with little margin for the estimate's error: {summary}",
        )
    short = "" if own else _free_memory_short(profile, facts, est)
    if short:
        return Check("kv_cache_fit", "warn", f"{length} fits, but {short}: {summary}")
    return Check("kv_cache_fit", "pass", f"{length} fits: {summary}")
