"""Preflight: checks over gathered host facts, and the deployment plan. Pure: no I/O.

:func:`run_checks` turns :class:`~kimi_ops.facts.HostFacts` into one :class:`Check` per concern
(pass / warn / fail with a one-line reason naming the culprit). :func:`build_plan` decides what
the deploy does about the KV-cache config, which attention backend to pin, and how to adjust the
launch arguments for the vLLM version on the host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from . import compat
from .facts import CONFIG_BACKUP, HF_QUANT_BACKUP, Gpu, GpuProcess, HostFacts
from .shm import human_bytes

if TYPE_CHECKING:
    from .profile import Profile

Status = Literal["pass", "warn", "fail"]

GIB = 1024**3
#: Below this much free space in run_dir's file system (logs) preflight warns.
MIN_RUN_DIR_FREE_BYTES = 1 * GIB
#: Room for a new launch's log (and its startup output) that run_dir must have besides the files.
LOG_RESERVE_BYTES = 1024**2
#: Below this much free space in /dev/shm (NCCL and vLLM's shm broadcast) preflight warns.
MIN_SHM_FREE_BYTES = 1 * GIB
#: GPU memory in use with no compute process listed above which preflight warns (MiB).
UNLISTED_MEMORY_WARN_MIB = 2048
#: Uids below this are system users, which logind's RemoveIPC= never applies to (SYS_UID_MAX+1).
FIRST_NORMAL_UID = 1000

RESTORE_COMMAND = "fab patch-kv-config --restore"


@dataclass(frozen=True)
class Check:
    """One preflight check: its name, pass/warn/fail, and a one-line reason."""

    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, str]:
        """``{"name", "status", "detail"}``."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping of every field."""
        out = asdict(self)
        out["launch_args"] = list(self.launch_args)
        out["notes"] = list(self.notes)
        out["env"] = dict(self.env)
        return out


def failed(checks: Sequence[Check]) -> list[Check]:
    """The checks that failed."""
    return [c for c in checks if c.status == "fail"]


def preflight_report(checks: Sequence[Check], plan: Plan) -> dict[str, Any]:
    """``{"checks": [{"name", "status", "detail"}, ...], "plan": {...}}`` (JSON-serialisable)."""
    return {"checks": [c.to_dict() for c in checks], "plan": plan.to_dict()}


# --- helpers ----------------------------------------------------------------------------------


def _gib(n_bytes: int) -> str:
    """A size in the unit that shows it (``4.0 KiB``, ``540.2 GiB``), never ``0.0 GiB``."""
    return human_bytes(n_bytes)


def _model_path(profile: Profile, name: str) -> str:
    return f"{profile.model.rstrip('/')}/{name}"


def _gpu_summary(gpus: Sequence[Gpu]) -> str:
    parts = []
    for name, count in Counter(g.name for g in gpus).items():
        mem = {g.memory_total_mib for g in gpus if g.name == name and g.memory_total_mib}
        each = f", {max(mem)} MiB each" if mem else ""
        parts.append(f"{count} x {name or 'unnamed GPU'}{each}")
    return "; ".join(parts)


def _main_cc(gpus: Sequence[Gpu]) -> str | None:
    ccs = [g.compute_capability for g in gpus if g.compute_capability]
    return Counter(ccs).most_common(1)[0][0] if ccs else None


def _engine_note(profile: Profile) -> str:
    return " (stand-in)" if getattr(profile, "is_standin", False) else ""


# --- checks -----------------------------------------------------------------------------------


def _check_gpus(profile: Profile, facts: HostFacts) -> list[Check]:
    tp = profile.tensor_parallel_size
    if facts.gpus is None:
        return [
            Check("gpus", "fail", f"cannot list GPUs{_engine_note(profile)}: {facts.gpu_error}")
        ]
    gpus = facts.gpus
    if len(gpus) < tp:
        found = _gpu_summary(gpus) if gpus else "no GPUs"
        return [
            Check(
                "gpus",
                "fail",
                f"tensor_parallel_size is {tp} but the host has {len(gpus)} GPU(s): {found}",
            )
        ]
    drivers = sorted({g.driver_version for g in gpus if g.driver_version})
    driver = f", driver {', '.join(drivers)}" if drivers else ""
    checks = [Check("gpus", "pass", f"{_gpu_summary(gpus)}{driver} (TP {tp})")]

    ccs = sorted({g.compute_capability for g in gpus if g.compute_capability})
    cc = _main_cc(gpus)
    parsed = compat.parse_cc(cc) if cc else None
    if parsed is None:
        checks.append(
            Check("compute_capability", "warn", "nvidia-smi reported no compute capability")
        )
    elif len(ccs) > 1:
        checks.append(
            Check(
                "compute_capability",
                "warn",
                f"mixed compute capabilities {', '.join(ccs)}; tensor parallel needs matching GPUs",
            )
        )
    elif parsed < (8, 0):
        checks.append(
            Check(
                "compute_capability",
                "fail",
                f"compute capability {cc} is below 8.0; vLLM needs 8.0+ for bfloat16",
            )
        )
    else:
        checks.append(Check("compute_capability", "pass", f"compute capability {cc}"))
    return checks


def _check_gpu_processes(profile: Profile, facts: HostFacts, own: set[int]) -> list[Check]:
    checks: list[Check] = []
    if facts.compute_apps is None:
        checks.append(
            Check(
                "gpu_processes",
                "warn",
                f"cannot list GPU compute processes: {facts.compute_apps_error}",
            )
        )
    else:
        foreign = [p for p in facts.compute_apps if p.pid not in own]
        mine = [p for p in facts.compute_apps if p.pid in own]

        def describe(procs: Sequence[GpuProcess]) -> str:
            items = []
            for p in procs[:4]:
                mem = f", {p.used_memory_mib} MiB" if p.used_memory_mib is not None else ""
                items.append(f"PID {p.pid} ({p.process_name or 'unknown command'}{mem})")
            more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
            return ", ".join(items) + more

        if foreign:
            checks.append(
                Check(
                    "gpu_processes",
                    "fail",
                    f"GPU memory is held by {describe(foreign)}; stop it (fab kill-stale) "
                    "before deploying",
                )
            )
        elif mine:
            checks.append(
                Check(
                    "gpu_processes",
                    "warn",
                    f"this deployment's own server holds the GPUs ({describe(mine)}); "
                    "deploy replaces it",
                )
            )
        else:
            checks.append(Check("gpu_processes", "pass", "no compute processes on the GPUs"))

    if facts.gpus:
        listed = bool(facts.compute_apps)
        busy = [
            g
            for g in facts.gpus
            if g.memory_used_mib is not None and g.memory_used_mib > UNLISTED_MEMORY_WARN_MIB
        ]
        if busy and not listed:
            g = max(busy, key=lambda x: x.memory_used_mib or 0)
            checks.append(
                Check(
                    "gpu_memory",
                    "warn",
                    f"{len(busy)} GPU(s) have memory in use with no process listed (GPU {g.index}: "
                    f"{g.memory_used_mib} of {g.memory_total_mib} MiB); another container or "
                    "user may hold them",
                )
            )
        else:
            free = [g.memory_free_mib for g in facts.gpus if g.memory_free_mib is not None]
            detail = f"least free GPU memory: {min(free)} MiB" if free else "memory not reported"
            checks.append(Check("gpu_memory", "pass", detail))
    return checks


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
    return Check("vllm", "pass", f"vLLM {facts.vllm_version}{_engine_note(profile)}")


def _quant_summary(facts: HostFacts) -> str:
    config = facts.config_json or {}
    qc, where = compat.quantization_config(config)
    parts = []
    if qc is not None:
        method = qc.get("quant_method") or "?"
        algo = qc.get("quant_algo")
        parts.append(f"{method}{' ' + str(algo) if algo else ''}")
    elif facts.hf_quant_config is not None:
        quant = facts.hf_quant_config.get("quantization")
        algo = quant.get("quant_algo") if isinstance(quant, dict) else None
        parts.append(f"hf_quant_config.json {algo or '?'}")
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
            ", ".join(map(str, archs)) if isinstance(archs, list) and archs else "no architectures"
        )
        patched = (
            f"; patched by kimi-ops earlier ({', '.join(sorted(facts.backups))} present)"
            if facts.backups
            else ""
        )
        checks.append(Check("model_config", "pass", f"{arch}; {_quant_summary(facts)}{patched}"))

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


def _check_port(profile: Profile, facts: HostFacts, own: set[int]) -> Check:
    port = profile.port
    listening = facts.listening_ports
    holders = (facts.port_processes or {}).get(port)
    if listening is None and facts.port_processes is None:
        return Check("port", "warn", f"cannot read listening ports; port {port} not checked")
    in_use = (listening is not None and port in listening) or holders is not None
    if not in_use:
        return Check("port", "pass", f"port {port} is free")
    holders = holders or []
    if holders and all(pid in own for _, pid in holders):
        pids = ", ".join(str(pid) for _, pid in holders)
        return Check(
            "port",
            "warn",
            f"port {port} is held by this deployment's server (pid {pids}); deploy replaces it",
        )
    foreign = [(n, pid) for n, pid in holders if pid not in own]
    if foreign:
        who = ", ".join(f"pid {pid} ({name})" for name, pid in foreign)
        return Check("port", "fail", f"port {port} is already in use by {who}")
    user = facts.user or "the login user"
    return Check(
        "port",
        "fail",
        f"port {port} is already in use by a process not visible to {user} (ss shows no owner)",
    )


def _check_disk(profile: Profile, facts: HostFacts, need: int) -> Check:
    disk = facts.run_dir_disk
    where = facts.run_dir_probe or profile.run_dir
    if disk is None:
        return Check("disk", "warn", f"cannot read free space for run_dir {profile.run_dir}")
    free = human_bytes(disk.free_bytes)
    if need and disk.free_bytes < need:
        return Check(
            "disk",
            "fail",
            f"only {free} free on {disk.path} (run_dir {where}); the launch files and a log "
            f"need {human_bytes(need)}",
        )
    if disk.free_bytes < MIN_RUN_DIR_FREE_BYTES:
        return Check(
            "disk", "warn", f"only {free} free on {disk.path} (run_dir {where}); logs may fill it"
        )
    return Check("disk", "pass", f"{free} free on {disk.path} (run_dir {where})")


def _check_shm(profile: Profile, facts: HostFacts, own: set[int]) -> Check:
    disk = facts.shm_disk
    if disk is None:
        return Check("shm", "warn", "cannot read free space in /dev/shm")
    psm = facts.shm_psm_files or {}
    stale = bool(psm) and facts.compute_apps == [] and not own
    if disk.free_bytes < MIN_SHM_FREE_BYTES:
        extra = f"; {len(psm)} psm_* segments ({_gib(sum(psm.values()))})" if psm else ""
        return Check(
            "shm",
            "warn",
            f"only {_gib(disk.free_bytes)} free in /dev/shm{extra}; NCCL and vLLM need "
            "shared memory",
        )
    if stale:
        return Check(
            "shm",
            "warn",
            f"{len(psm)} psm_* shared-memory segments ({_gib(sum(psm.values()))}) in /dev/shm with "
            "no GPU process running: leaked by a crashed vLLM (fab kill-stale removes them)",
        )
    return Check("shm", "pass", f"{_gib(disk.free_bytes)} free in /dev/shm")


def _check_remove_ipc(profile: Profile, facts: HostFacts) -> Check:
    if facts.uid is None:
        return Check("remove_ipc", "warn", "cannot tell the login user; RemoveIPC not checked")
    user = facts.user or f"uid {facts.uid}"
    if facts.uid == 0:
        return Check("remove_ipc", "pass", "login user is root: logind's RemoveIPC does not apply")
    if facts.uid < FIRST_NORMAL_UID:
        return Check("remove_ipc", "pass", f"{user} is a system user: RemoveIPC does not apply")
    if facts.remove_ipc is False:
        return Check("remove_ipc", "pass", f"RemoveIPC=no: {user}'s shared memory survives logout")
    setting = "RemoveIPC=yes" if facts.remove_ipc else "RemoveIPC is unset (systemd default: yes)"
    return Check(
        "remove_ipc",
        "warn",
        f"{setting} and the login user {user} is not root: systemd-logind deletes {user}'s "
        "/dev/shm segments when their last SSH session ends, killing vLLM's shared memory; set "
        "RemoveIPC=no in /etc/systemd/logind.conf or run loginctl enable-linger " + user,
    )


def run_checks(
    profile: Profile, facts: HostFacts, *, own_pids: Collection[int] = (), run_dir_need: int = 0
) -> list[Check]:
    """Every preflight check, in a fixed order.

    ``own_pids`` are the processes of this deployment's own running server (which deploy
    replaces): GPU memory or the port held by them only warns; anything else holding them fails.
    ``run_dir_need``: bytes run_dir's file system must have free (the launch files and a log);
    less fails, before deploy ends anything.
    """
    own = set(own_pids)
    checks: list[Check] = []
    checks += _check_gpus(profile, facts)
    checks += _check_gpu_processes(profile, facts, own)
    checks.append(_check_vllm(profile, facts))
    checks += _check_model(profile, facts)
    checks.append(_check_port(profile, facts, own))
    checks.append(_check_disk(profile, facts, run_dir_need))
    checks.append(_check_shm(profile, facts, own))
    checks.append(_check_remove_ipc(profile, facts))
    return checks


# --- the plan ---------------------------------------------------------------------------------


def _original_configs(
    facts: HostFacts,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, bool]:
    """(config.json, hf_quant_config.json, patched_before) as the checkpoint shipped them.

    When patch-kv-config left backups, they hold the original files.
    """
    patched = bool(facts.backups)
    config = facts.config_json_orig if CONFIG_BACKUP in facts.backups else facts.config_json
    hf_quant = (
        facts.hf_quant_config_orig if HF_QUANT_BACKUP in facts.backups else facts.hf_quant_config
    )
    return config, hf_quant, patched


def build_plan(profile: Profile, facts: HostFacts) -> Plan:
    """Decide the KV-config patch, the attention backend and the launch adjustments.

    The KV config is patched only when the checkpoint (as shipped: backups of an earlier patch
    count) asks for an FP8 KV cache AND no MLA backend serves FP8 KV for this GPU's compute
    capability and vLLM version -- e.g. 12.0 with 0.17.1, but not 0.18.0+, nor 9.0 / 10.0.
    ``profile.patch_kv_config`` True/False forces the decision.
    """
    notes: list[str] = []
    cc = _main_cc(facts.gpus) if facts.gpus else None
    version = facts.vllm_version
    cli_kv = compat.find_option(profile.extra_args, "--kv-cache-dtype")
    config, hf_quant, patched_before = _original_configs(facts)
    kv = compat.effective_kv_cache_dtype(config, hf_quant, cli_kv)
    mla = compat.is_mla_model(config)
    fp8_ok = bool(cc and version and compat.fp8_kv_supported(cc, version))

    forced = profile.patch_kv_config
    undecided = False
    if forced is True or forced is False:
        patch = forced
        reason = f"forced by profile (patch_kv_config: {str(forced).lower()})"
    elif kv.source == "--kv-cache-dtype":
        patch = False
        reason = (
            f"--kv-cache-dtype {kv.value} is set in extra_args, so the checkpoint's KV setting "
            "is not used"
        )
        if kv.is_fp8 and mla and cc and version and not fp8_ok:
            notes.append(
                f"--kv-cache-dtype {kv.value} will fail: no MLA backend serves FP8 KV on compute "
                f"capability {cc} with vLLM {version}"
            )
    elif not kv.is_fp8:
        patch = False
        reason = f"the checkpoint's KV cache is {kv.value} ({kv.source}), not FP8"
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

    adjusted = compat.adjust_launch(
        profile.extra_args, dict(profile.env), version, profile.tool_call_parser, pinned
    )
    notes.extend(adjusted.notes)
    chosen = compat.attention_backend_in_args(adjusted.args) or adjusted.env.get(
        "VLLM_ATTENTION_BACKEND"
    )
    return Plan(
        patch_kv_config=patch,
        reason=reason,
        attention_backend=chosen,
        launch_args=adjusted.args,
        env=adjusted.env,
        notes=tuple(notes),
        restore_suggested=restore,
        kv_cache_dtype=effective_kv,
        kv_cache_source=kv.source if not patch else f"patched (was {kv.value} from {kv.source})",
        compute_capability=cc,
        vllm_version=str(version) if version is not None else None,
        is_mla=mla,
    )
