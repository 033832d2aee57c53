"""The deployment plan: the KV-config patch, the attention backend and the launch adjustments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.specifiers import SpecifierSet

from .. import compat, sizing
from ..facts import HostFacts
from .common import RESTORE_COMMAND, _main_cc
from .cpu import resolve_device, weights_bytes
from .kvrequest import _kv_request

if TYPE_CHECKING:
    from ..profile import Profile


@dataclass(frozen=True)
class Plan:
    """What deploy will do, decided from the facts.

    ``launch_args`` are the profile's extra_args adjusted for the vLLM version (plus any pinned
    attention backend and --enable-auto-tool-choice); ``env`` the adjusted environment.
    """

    patch_kv_config: bool
    reason: str
    attention_backend: str | None
    launch_args: tuple[str, ...]
    env: dict[str, str]
    notes: tuple[str, ...] = ()
    restore_suggested: bool = False
    kv_cache_dtype: str = "auto"
    kv_cache_source: str = ""
    compute_capability: str | None = None
    vllm_version: str | None = None
    is_mla: bool | None = None
    device: str = "cuda"
    sizing: sizing.Sizing | None = None
    sizing_error: str = ""
    max_model_len_mode: str = "default"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping of every field."""
        out = asdict(self)
        out["sizing"] = self.sizing.to_dict() if self.sizing is not None else None
        out["launch_args"] = list(self.launch_args)
        out["notes"] = list(self.notes)
        out["env"] = dict(self.env)
        return out


def _generic_decision(profile: Profile, kv: compat.KvCacheDtype) -> tuple[bool, str] | None:
    """(patch, reason) when the device does not matter: forced by the profile, a
    --kv-cache-dtype flag overrides the checkpoint, or the checkpoint's KV cache is not FP8."""
    forced = profile.patch_kv_config
    if forced is True or forced is False:
        return forced, f"forced by profile (patch_kv_config: {str(forced).lower()})"
    if kv.source == "--kv-cache-dtype":
        return False, (
            f"--kv-cache-dtype {kv.value} is set in extra_args, so the checkpoint's KV setting "
            "is not used"
        )
    if not kv.is_fp8:
        return False, f"the checkpoint's KV cache is {kv.value} ({kv.source}), not FP8"
    return None


class _Decision(NamedTuple):
    """What the plan decided about the KV config, before the launch arguments are adjusted."""

    patch: bool
    reason: str
    restore: bool
    kv: compat.KvCacheDtype
    mla: bool | None
    notes: tuple[str, ...]
    pinned: str | None = None
    cc: str | None = None


def _cpu_decision(profile: Profile, facts: HostFacts) -> _Decision:
    """The KV-config decision on a CPU host.

    vLLM's CPU build picks its attention backend itself (AMX_MLA or CPU_MLA for MLA models,
    CPU_ATTN otherwise); MLA there keeps a 16-bit KV cache only, so an FP8 KV request in the
    checkpoint is patched out before launch.
    """
    notes: list[str] = []
    version = facts.vllm_version
    kv, mla, patched_before = _kv_request(profile, facts)
    flags = facts.cpu.cpuinfo.flags if facts.cpu and facts.cpu.cpuinfo else None
    backend = compat.cpu_attention_backend(bool(mla), flags)
    served = backend.accepts(kv.value, version)

    generic = _generic_decision(profile, kv)
    if generic is not None:
        patch, reason = generic
        if kv.source == "--kv-cache-dtype" and not served:
            notes.append(
                f"--kv-cache-dtype {kv.value} will fail on CPU: {backend.name} does not serve it "
                "(see the kv_cache check)"
            )
    elif mla is None:
        patch = False
        reason = "cannot decide: no readable config.json (see the failed checks); config left as is"
    elif mla:
        patch = True
        reason = (
            f"the checkpoint asks for an FP8 KV cache ({kv.value}, from {kv.source}) but on a "
            f"CPU host the MLA attention backend ({backend.name}; vLLM's CPU build has AMX_MLA "
            "and CPU_MLA) serves only a 16-bit KV cache: patch the config to a 16-bit KV cache"
        )
    elif served:
        patch = False
        reason = (
            f"not an MLA model: {backend.name} serves an FP8 KV cache on CPU with vLLM "
            f"{version}; keeping the checkpoint's {kv.value} KV cache"
        )
    else:
        patch = False
        reason = (
            f"not an MLA model; {backend.name} is not known to serve an FP8 KV cache with vLLM "
            f"{version or '(unknown)'}: config left as is"
        )
        notes.append(f"{backend.name} FP8 KV support is verified on vLLM 0.32.0 only")

    if patch and patched_before:
        notes.append("the checkpoint is already patched (backup present); patching is idempotent")
    restore = bool(not patch and patched_before and kv.is_fp8 and mla is False and served)
    if restore:
        notes.append(
            f"the checkpoint was patched earlier ({', '.join(sorted(facts.backups))} present); "
            f"{backend.name} serves FP8 KV, so restoring ({RESTORE_COMMAND}) gives FP8's larger "
            "KV capacity"
        )
    notes.append(f"attention backend on CPU: {backend.name} (chosen by vLLM, not pinned)")
    return _Decision(patch, reason, restore, kv, mla, tuple(notes))


#: vLLM versions with ``--max-model-len auto`` (vllm-project/vllm#29431, merged 2025-11-25 after
#: 0.11.2; 0.13.0 is the first release certain to have it, it may be in 0.12.0). Older versions
#: get the length the sizing estimate computes.
MAX_MODEL_LEN_AUTO = SpecifierSet(">=0.13.0")


def _gpu_memory_bytes(profile: Profile, facts: HostFacts) -> tuple[int | None, str]:
    """(the smallest total memory of the GPUs TP uses, their name)."""
    gpus = sorted(facts.gpus or [], key=lambda g: g.index)[: profile.tensor_parallel_size]
    totals = [g.memory_total_mib for g in gpus]
    if not gpus or any(t is None for t in totals):
        return None, ""
    return min(t for t in totals if t is not None) * sizing.MIB, gpus[0].name


def _plan_sizing(
    profile: Profile,
    facts: HostFacts,
    kv_dtype: str,
    version: Any,
    args: Sequence[str],
    env: dict[str, str],
    *,
    device: sizing.Device = "cuda",
) -> tuple[sizing.Sizing | None, str, tuple[str, ...], str, list[str]]:
    """(estimate, why none, extra launch args, max_model_len mode, notes)."""
    config = facts.config_json or facts.config_json_orig
    if config is None:
        return None, "no config.json", (), "default", []
    wanted: int | str | None = profile.max_model_len
    source = "kimi.max_model_len"
    if wanted is None:
        wanted = sizing.max_model_len_arg(args)
        source = "--max-model-len in extra_args"
    gpu_bytes, gpu_name = _gpu_memory_bytes(profile, facts)
    common: dict[str, Any] = {
        "kv_cache_dtype": kv_dtype,
        "tp": profile.tensor_parallel_size,
        "device": device,
        "weights_bytes_total": weights_bytes(facts),
        "gpu_memory_bytes": gpu_bytes,
        "gpu_name": gpu_name,
        "utilization": sizing.gpu_memory_utilization(args),
        "cpu_kvcache_space_bytes": sizing.cpu_kvcache_bytes(env),
    }
    try:
        if isinstance(wanted, int):
            est = sizing.estimate(
                config, max_model_len=wanted, max_model_len_source=source, **common
            )
        else:
            est = sizing.estimate(config, **common)
    except ValueError as exc:
        return None, str(exc), (), "default", []
    if wanted != "auto":
        extra = ("--max-model-len", str(wanted)) if profile.max_model_len is not None else ()
        return est, "", extra, "fixed" if isinstance(wanted, int) else "default", []
    from_profile = profile.max_model_len == "auto"
    if version is not None and compat.in_range(version, MAX_MODEL_LEN_AUTO):
        extra = ("--max-model-len", "auto") if from_profile else ()
        note = f"vLLM {version} has --max-model-len auto: it picks the largest length that fits"
        return est, "", extra, "vllm-auto", [note]
    largest = est.largest_max_model_len
    if not largest:
        return est, "", (), "computed", ["max_model_len auto: no length fits the estimate"]
    est = sizing.estimate(
        config,
        max_model_len=largest,
        max_model_len_source=f"computed for max_model_len auto (vLLM {version or '?'} has no "
        "--max-model-len auto)",
        **common,
    )
    extra = ("--max-model-len", str(largest)) if from_profile else ()
    note = f"max_model_len auto: using the estimated largest length that fits, {largest:,}"
    return est, "", extra, "computed", [note]


def build_plan(profile: Profile, facts: HostFacts) -> Plan:
    """Decide the KV-config patch, the attention backend and the launch adjustments.

    The KV config is patched only when the checkpoint (as shipped: backups of an earlier patch
    count) asks for an FP8 KV cache AND no MLA backend serves FP8 KV for this GPU's compute
    capability and vLLM version -- e.g. 12.0 with 0.17.1, but not 0.18.0+, nor 9.0 / 10.0.
    ``profile.patch_kv_config`` True/False forces the decision. On a CPU host (``kimi.device``
    cpu, or auto without nvidia-smi) see :func:`_cpu_decision`.
    """
    cpu = resolve_device(profile, facts)[0] == "cpu"
    decision = _cpu_decision(profile, facts) if cpu else _gpu_decision(profile, facts)
    version = facts.vllm_version
    kv = decision.kv
    patch = decision.patch
    notes = list(decision.notes)
    adjusted = compat.adjust_launch(
        profile.extra_args, dict(profile.env), version, profile.tool_call_parser, decision.pinned
    )
    notes.extend(adjusted.notes)
    chosen = compat.attention_backend_in_args(adjusted.args) or adjusted.env.get(
        "VLLM_ATTENTION_BACKEND"
    )
    estimate, sizing_error, length_args, mode, length_notes = _plan_sizing(
        profile,
        facts,
        "auto" if patch else kv.value,
        version,
        adjusted.args,
        adjusted.env,
        device="cpu" if cpu else "cuda",
    )
    notes.extend(length_notes)
    return Plan(
        patch_kv_config=patch,
        reason=decision.reason,
        attention_backend=chosen,
        launch_args=adjusted.args + length_args,
        env=adjusted.env,
        notes=tuple(notes),
        restore_suggested=decision.restore,
        kv_cache_dtype="auto" if patch else kv.value,
        kv_cache_source=kv.source if not patch else f"patched (was {kv.value} from {kv.source})",
        compute_capability=decision.cc,
        vllm_version=str(version) if version is not None else None,
        is_mla=decision.mla,
        device="cpu" if cpu else "cuda",
        sizing=estimate,
        sizing_error=sizing_error,
        max_model_len_mode=mode,
    )


def _gpu_decision(profile: Profile, facts: HostFacts) -> _Decision:
    """The KV-config decision on a CUDA host (see :func:`build_plan`)."""
    notes: list[str] = []
    cc = _main_cc(facts.gpus) if facts.gpus else None
    version = facts.vllm_version
    kv, mla, patched_before = _kv_request(profile, facts)
    fp8_ok = bool(cc and version and compat.fp8_kv_supported(cc, version))

    undecided = False
    generic = _generic_decision(profile, kv)
    if generic is not None:
        patch, reason = generic
        cli_fails = kv.source == "--kv-cache-dtype" and kv.is_fp8 and mla and not fp8_ok
        if cli_fails and cc and version:
            notes.append(
                f"--kv-cache-dtype {kv.value} will fail: no MLA backend serves FP8 KV on compute "
                f"capability {cc} with vLLM {version}"
            )
    elif cc is None or version is None:
        patch = False
        missing = " and ".join(
            w for w, v in (("GPU compute capability", cc), ("vLLM version", version)) if v is None
        )
        reason = f"cannot decide: {missing} unknown (see the failed checks); config left as is"
        undecided = True
    elif mla is False:
        patch = False
        reason = "not an MLA model: the MLA backends' FP8 limitation does not apply"
    elif fp8_ok:
        patch = False
        served = ", ".join(compat.backends_for(cc, version, kv.value))
        reason = (
            f"vLLM {version} serves an FP8 KV cache on compute capability {cc} ({served}); "
            f"keeping the checkpoint's {kv.value} KV cache"
        )
    else:
        patch = True
        reason = (
            f"the checkpoint asks for an FP8 KV cache ({kv.value}, from {kv.source}) but no MLA "
            f"attention backend serves FP8 KV on compute capability {cc} with vLLM {version} "
            "(TRITON_MLA gains it in 0.18.0): patch the config to a 16-bit KV cache"
        )

    if patch and patched_before:
        notes.append("the checkpoint is already patched (backup present); patching is idempotent")
    restore = bool(not patch and patched_before and kv.is_fp8 and not undecided)
    if restore:
        backups = ", ".join(sorted(facts.backups))
        gain = (
            f"vLLM {version} serves FP8 KV on compute capability {cc}, so restoring"
            if fp8_ok
            else "restoring"
        )
        notes.append(
            f"the checkpoint was patched earlier ({backups} present); {gain} ({RESTORE_COMMAND}) "
            "gives FP8's larger KV capacity"
        )

    effective_kv = "auto" if patch else kv.value
    pinned: str | None = None
    parsed_cc = compat.parse_cc(cc) if cc else None
    if mla and cc and version and parsed_cc:
        candidates = compat.backends_for(cc, version, effective_kv)
        if len(candidates) == 1 and parsed_cc[0] in compat.PIN_BACKEND_CC_MAJORS:
            pinned = candidates[0]
            notes.append(
                f"{pinned} is the only MLA backend for compute capability {cc} with "
                f"{effective_kv} KV on vLLM {version}: pinned"
            )
        elif not candidates:
            notes.append(
                f"no MLA backend serves {effective_kv} KV on compute capability {cc} with vLLM "
                f"{version}: the launch is expected to fail (kv_cache_dtype_unsupported)"
            )

    return _Decision(patch, reason, restore, kv, mla, tuple(notes), pinned, cc)
