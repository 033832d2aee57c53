"""CPU hosts (vLLM's CPU build): which device, and the cores, ISA, memory and model checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import compat
from ..cpu import CpuFacts, MemoryNode, clamp_to_cgroup
from ..facts import HostFacts
from .common import GIB, Check, _env_value, _gib, _size
from .kvrequest import _kv_request, _original_configs

if TYPE_CHECKING:
    from ..profile import Profile


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
