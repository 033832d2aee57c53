"""kimi_ops.preflight: checks and plan rules over facts built from real command output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kimi_ops.defaults import BACKUP_SUFFIX
from kimi_ops.facts import HostFacts, facts_from_sections, parse_gpus, shards_from_index
from kimi_ops.preflight import (
    RESTORE_COMMAND,
    Check,
    Plan,
    build_plan,
    failed,
    preflight_report,
    run_checks,
)
from kimi_ops.preflight.host import binds_clash
from kimi_ops.profile import load_profile

FIXTURES = Path(__file__).parent / "fixtures" / "facts"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


CONFIG = fixture("kimi_k25_nvfp4_config.json")
HF_QUANT = fixture("kimi_k25_nvfp4_hf_quant_config.json")
INDEX = fixture("kimi_small_model.safetensors.index.json")
SHARDS = sorted(shards_from_index(INDEX))
RTX8 = fixture("nvidia_smi_kimi_query_rtxpro6000_8gpu.csv")
H100_4 = fixture("nvidia_smi_kimi_query_h100_4gpu.csv")


def patched_config() -> str:
    data = json.loads(CONFIG)
    del data["quantization_config"]["kv_cache_scheme"]
    return json.dumps(data, indent=2)


def patched_hf_quant() -> str:
    data = json.loads(HF_QUANT)
    del data["quantization"]["kv_cache_quant_algo"]
    return json.dumps(data, indent=2)


def query_rows(fixture_name: str, fields: tuple[str, ...]) -> str:
    """A published nvidia-smi capture re-rendered in kimi-ops' own 7-field query format."""
    gpus = parse_gpus(fixture(fixture_name), fields)
    return "".join(
        f"{g.index}, {g.name}, {g.compute_capability}, {g.memory_total_mib}, 0, "
        f"{g.driver_version}, GPU-{g.index}\n"
        for g in gpus
    )


B200_8 = query_rows(
    "nvidia_smi_b200_8gpu.csv", ("name", "compute_cap", "memory.total", "driver_version")
)

MISSING = object()


def make_facts(**overrides: Any) -> HostFacts:
    """Facts of a healthy 8 x RTX PRO 6000 host with vLLM 0.17.1 and the Kimi checkpoint.

    Each keyword replaces one section: a string (rc 0), an (rc, text) pair, or MISSING.
    """
    listing = "".join(f"4096\t{s}\n" for s in SHARDS) + "1200\tconfig.json\n"
    sections: dict[str, Any] = {
        "home": "/root",
        "user": "0\nroot\n",
        "gpus": RTX8,
        "compute_apps": "",
        "python": "/root/ml-env/bin/python3\n",
        "vllm_version": "0.17.1\n",
        "config_json": CONFIG,
        "hf_quant_config_json": HF_QUANT,
        "index_json": INDEX,
        "config_json_orig": (1, "head: cannot open 'x' for reading: No such file or directory"),
        "hf_quant_config_json_orig": (1, "head: cannot open 'y': No such file or directory"),
        "model_listing": listing,
        "proc_net_tcp": fixture("proc_net_tcp_listener.txt")
        + fixture("proc_net_tcp6_listener.txt"),
        "ss_listen": fixture("ss_hltnp_listener.txt"),
        "df_run_dir": "/root\n" + fixture("df_pk_root.txt"),
        "df_shm": fixture("df_pk_dev_shm.txt"),
        "shm_files": "",
        "logind": fixture("logind_debian12_default.conf"),
        "pidfile": (1, "cat: /root/kimi-ops/server.pid: No such file or directory"),
    }
    sections.update(overrides)
    triples = []
    for name, value in sections.items():
        if value is MISSING:
            continue
        rc, text = value if isinstance(value, tuple) else (0, value)
        triples.append((name, rc, text))
    return facts_from_sections(triples)


def profile(**overrides: Any):
    return load_profile(overrides)


def by_name(checks: list[Check], name: str) -> Check:
    (check,) = [c for c in checks if c.name == name]
    return check


# --- plan rules -------------------------------------------------------------------------------


def test_cc12_vllm_0_17_1_fp8_checkpoint_patches() -> None:
    plan = build_plan(profile(), make_facts())
    assert plan.patch_kv_config is True
    assert "12.0" in plan.reason and "0.17.1" in plan.reason and "fp8_e4m3" in plan.reason
    assert plan.attention_backend == "TRITON_MLA"
    assert plan.launch_args == (
        "--enable-auto-tool-choice",
        "--attention-backend",
        "TRITON_MLA",
    )
    assert plan.env == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
    assert plan.kv_cache_dtype == "auto" and plan.restore_suggested is False
    assert plan.compute_capability == "12.0" and plan.vllm_version == "0.17.1"


@pytest.mark.parametrize("version", ["0.18.0", "0.19.0"])
def test_cc12_vllm_0_18_keeps_fp8(version: str) -> None:
    plan = build_plan(profile(), make_facts(vllm_version=version))
    assert plan.patch_kv_config is False
    assert "TRITON_MLA" in plan.reason and plan.kv_cache_dtype == "fp8_e4m3"
    assert plan.attention_backend == "TRITON_MLA"


def test_cc10_vllm_0_17_1_does_not_patch() -> None:
    plan = build_plan(profile(), make_facts(gpus=B200_8))
    assert plan.patch_kv_config is False
    assert "10.0" in plan.reason and "FLASHINFER_MLA" in plan.reason
    assert plan.attention_backend is None  # several backends: vLLM chooses


def test_cc9_does_not_patch() -> None:
    plan = build_plan(profile(tensor_parallel_size=4), make_facts(gpus=H100_4))
    assert plan.patch_kv_config is False and "FLASHMLA" in plan.reason
    assert plan.attention_backend is None  # vLLM's own choice (FLASHMLA) is trusted on 9.x
    assert plan.launch_args == ("--enable-auto-tool-choice",)


def test_no_fp8_in_checkpoint_does_not_patch() -> None:
    facts = make_facts(
        config_json=patched_config(), hf_quant_config_json=(1, "No such file or directory")
    )
    plan = build_plan(profile(), facts)
    assert plan.patch_kv_config is False and "not FP8" in plan.reason
    assert plan.attention_backend == "TRITON_MLA"


def test_forced_true_and_false() -> None:
    forced = build_plan(profile(patch_kv_config=True), make_facts(vllm_version="0.18.0"))
    assert forced.patch_kv_config is True and "forced by profile" in forced.reason
    kept = build_plan(profile(patch_kv_config=False), make_facts())
    assert kept.patch_kv_config is False and "forced by profile" in kept.reason
    assert any("expected to fail" in n for n in kept.notes)


def test_restore_suggested_after_upgrade_to_0_18() -> None:
    facts = make_facts(
        vllm_version="0.18.0",
        config_json=patched_config(),
        hf_quant_config_json=patched_hf_quant(),
        config_json_orig=CONFIG,
        hf_quant_config_json_orig=HF_QUANT,
    )
    assert facts.backups == {"config.json" + BACKUP_SUFFIX, "hf_quant_config.json" + BACKUP_SUFFIX}
    plan = build_plan(profile(), facts)
    assert plan.patch_kv_config is False and plan.restore_suggested is True
    note = next(n for n in plan.notes if RESTORE_COMMAND in n)
    assert "larger KV capacity" in note and "0.18.0" in note


def test_already_patched_on_0_17_1_stays_patched() -> None:
    facts = make_facts(config_json=patched_config(), config_json_orig=CONFIG)
    plan = build_plan(profile(), facts)
    assert plan.patch_kv_config is True and plan.restore_suggested is False
    assert any("already patched" in n for n in plan.notes)
    model = by_name(run_checks(profile(), facts), "model_config").detail
    assert "patched by kimi-ops earlier (config.json.kimi-ops.orig present)" in model


def test_unknown_vllm_version_leaves_config_alone() -> None:
    facts = make_facts(vllm_version=(1, "ModuleNotFoundError: No module named 'vllm'"))
    plan = build_plan(profile(), facts)
    assert plan.patch_kv_config is False and "vLLM version unknown" in plan.reason
    assert plan.attention_backend is None


def test_explicit_kv_cache_dtype_in_extra_args() -> None:
    plan = build_plan(profile(extra_args=["--kv-cache-dtype", "fp8"]), make_facts())
    assert plan.patch_kv_config is False and "--kv-cache-dtype fp8" in plan.reason
    assert any("will fail" in n for n in plan.notes)
    ok = build_plan(profile(extra_args=["--kv-cache-dtype=bfloat16"]), make_facts())
    assert ok.patch_kv_config is False and ok.attention_backend == "TRITON_MLA"


def test_flag_adjustments_old_vllm() -> None:
    p = profile(extra_args=["--disable-log-requests"], tool_call_parser=None)
    plan = build_plan(p, make_facts(vllm_version="0.11.2"))
    assert plan.launch_args == ("--disable-log-requests",)
    assert plan.env["VLLM_ATTENTION_BACKEND"] == "TRITON_MLA"
    assert plan.attention_backend == "TRITON_MLA"


def test_flag_adjustments_new_vllm() -> None:
    p = profile(extra_args=["--disable-log-requests"], env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA"})
    plan = build_plan(p, make_facts(vllm_version="0.26.0"))
    assert plan.launch_args == (
        "--no-enable-log-requests",
        "--enable-auto-tool-choice",
        "--attention-backend",
        "TRITON_MLA",
    )
    assert "VLLM_ATTENTION_BACKEND" not in plan.env
    assert any("ignores VLLM_ATTENTION_BACKEND" in n for n in plan.notes)


def test_plan_to_dict_and_report_are_json() -> None:
    p = profile()
    facts = make_facts()
    checks = run_checks(p, facts)
    plan = build_plan(p, facts)
    report = preflight_report(checks, plan)
    assert json.loads(json.dumps(report)) == report
    assert report["plan"]["patch_kv_config"] is True
    assert report["plan"]["launch_args"] == list(plan.launch_args)
    assert {"name", "status", "detail"} == set(report["checks"][0])
    assert isinstance(plan, Plan)


# --- checks -----------------------------------------------------------------------------------


def test_healthy_host_passes_everything() -> None:
    checks = run_checks(profile(), make_facts())
    assert failed(checks) == []
    assert [c.status for c in checks] == ["pass"] * len(checks)
    names = [c.name for c in checks]
    assert names == [
        "gpus",
        "compute_capability",
        "gpu_processes",
        "gpu_memory",
        "vllm",
        "model_config",
        "model_shards",
        "kv_cache_fit",
        "port",
        "disk",
        "shm",
        "remove_ipc",
    ]
    gpus = by_name(checks, "gpus").detail
    assert "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition" in gpus and "580.95.05" in gpus
    model = by_name(checks, "model_config").detail
    assert "KimiK25ForConditionalGeneration" in model and "modelopt NVFP4" in model
    assert "fp8_e4m3" in model
    assert "all 3 shards present" in by_name(checks, "model_shards").detail
    assert all("\n" not in c.detail for c in checks)


def test_stale_server_holding_gpu_fails_naming_pid_and_command() -> None:
    facts = make_facts(compute_apps=fixture("nvidia_smi_compute_apps_stale_python.csv"))
    check = by_name(run_checks(profile(), facts), "gpu_processes")
    assert check.status == "fail"
    assert "PID 269473" in check.detail
    assert "/home/eabban/.conda/envs/bitnet/bin/python" in check.detail
    assert "96860 MiB" in check.detail
    assert check.detail.startswith(
        "GPU memory is held by PID 269473 (/home/eabban/.conda/envs/bitnet/bin/python, 96860 MiB)"
    )


def test_own_server_on_gpu_only_warns() -> None:
    facts = make_facts(compute_apps=fixture("nvidia_smi_compute_apps_stale_python.csv"))
    check = by_name(run_checks(profile(), facts, own_pids={269473}), "gpu_processes")
    assert check.status == "warn" and "replaces" in check.detail


def test_busy_port_fails_naming_port_and_holder() -> None:
    check = by_name(run_checks(profile(port=18000), make_facts()), "port")
    assert check.status == "fail"
    assert "port 18000" in check.detail and "pid 4505 (python3)" in check.detail


@pytest.mark.parametrize(
    ("bind", "held", "clash"),
    [
        ("0.0.0.0", "127.0.0.3", True),  # a server on every address needs the port on each
        ("127.0.0.2", "0.0.0.0", True),
        ("127.0.0.2", "::", True),  # Linux's [::] listener is dual-stack
        ("127.0.0.2", "*", True),
        ("127.0.0.2", "127.0.0.3", False),
        ("127.0.0.2", "127.0.0.2", True),
        ("127.0.0.2", "::ffff:127.0.0.2", True),
        ("::1", "127.0.0.1", False),
        ("gpu-host", "127.0.0.3", True),  # a host name cannot be told apart
    ],
)
def test_binds_clash(bind: str, held: str, clash: bool) -> None:
    assert binds_clash(bind, held) is clash


def test_port_held_on_another_address_only_is_free_for_a_specific_bind() -> None:
    # 18000 is held on 127.0.0.1 (pid 4505); 2024 on 0.0.0.0 (a CI run failed on this check
    # going by port number alone: an sshd on 127.0.0.3 held the port the engine bound on .2)
    check = by_name(run_checks(profile(port=18000, host="127.0.0.2"), make_facts()), "port")
    assert check.status == "pass" and "free on 127.0.0.2 (held on 127.0.0.1 only)" in check.detail
    for bind, port in (("127.0.0.1", 18000), ("0.0.0.0", 18000), ("127.0.0.2", 2024)):
        check = by_name(run_checks(profile(port=port, host=bind), make_facts()), "port")
        assert check.status == "fail", (bind, port, check.detail)


def test_port_held_by_own_server_warns() -> None:
    check = by_name(run_checks(profile(port=18001), make_facts(), own_pids=[4505]), "port")
    assert check.status == "warn" and "4505" in check.detail


def test_port_held_by_invisible_process_fails() -> None:
    check = by_name(run_checks(profile(port=2024), make_facts()), "port")
    assert check.status == "fail" and "not visible" in check.detail


def test_port_busy_without_ss() -> None:
    facts = make_facts(ss_listen=(127, "sh: 1: ss: not found"))
    check = by_name(run_checks(profile(port=18000), facts), "port")
    assert check.status == "fail" and "18000" in check.detail


def test_missing_shard_fails_naming_it() -> None:
    listing = "".join(f"4096\t{s}\n" for s in SHARDS[:2])
    checks = run_checks(profile(), make_facts(model_listing=listing))
    check = by_name(checks, "model_shards")
    assert check.status == "fail"
    assert SHARDS[2] in check.detail and "1 of 3" in check.detail


def test_custom_code_without_trust_remote_code_warns_naming_the_files() -> None:
    """The Kimi checkpoint names its own code (auto_map): with trust_remote_code false the
    engine refuses to load it unless it implements the architecture itself (only it knows)."""
    check = by_name(run_checks(profile(trust_remote_code=False), make_facts()), "model_code")
    assert check.status == "warn", check.detail
    assert "configuration_kimi_k25.py, modeling_kimi_k25.py" in check.detail
    assert "kimi.trust_remote_code true" in check.detail
    # trusted (the default), or no custom code: nothing to say
    names = [c.name for c in run_checks(profile(), make_facts())]
    assert "model_code" not in names
    plain = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    checks = run_checks(profile(trust_remote_code=False), make_facts(config_json=plain))
    assert "model_code" not in [c.name for c in checks]


def test_missing_config_json_fails() -> None:
    facts = make_facts(config_json=(1, "head: cannot open 'c': No such file or directory"))
    check = by_name(run_checks(profile(), facts), "model_config")
    assert check.status == "fail" and "/models/Kimi-K2.5-NVFP4/config.json" in check.detail


def test_invalid_config_json_fails() -> None:
    check = by_name(run_checks(profile(), make_facts(config_json="{not json")), "model_config")
    assert check.status == "fail" and "not valid JSON" in check.detail


def test_tp8_on_four_gpus_fails() -> None:
    check = by_name(run_checks(profile(), make_facts(gpus=H100_4)), "gpus")
    assert check.status == "fail"
    assert "tensor_parallel_size is 8" in check.detail and "4 GPU(s)" in check.detail
    assert "NVIDIA H100 80GB HBM3" in check.detail


def test_nvidia_smi_failure_fails_when_cuda_is_required() -> None:
    facts = make_facts(gpus=(127, "sh: 1: nvidia-smi: not found"))
    check = by_name(run_checks(profile(device="cuda"), facts), "gpus")
    assert check.status == "fail" and "nvidia-smi: not found" in check.detail
    assert "kimi.device: cpu" in check.detail  # the way to the CPU build is named


def test_non_root_with_remove_ipc_unset_warns() -> None:
    facts = make_facts(user="1001\nkimi\n")
    check = by_name(run_checks(profile(), facts), "remove_ipc")
    assert check.status == "warn"
    assert "kimi" in check.detail and "systemd default: yes" in check.detail
    assert "/dev/shm" in check.detail and "SSH session" in check.detail


def test_non_root_with_remove_ipc_yes_warns_and_no_passes() -> None:
    yes = make_facts(user="1001\nkimi\n", logind=fixture("logind_removeipc_yes.conf"))
    assert by_name(run_checks(profile(), yes), "remove_ipc").status == "warn"
    no = make_facts(user="1001\nkimi\n", logind=fixture("logind_with_dropin_removeipc_no.conf"))
    assert by_name(run_checks(profile(), no), "remove_ipc").status == "pass"
    system = make_facts(user="999\nvllm\n")
    assert by_name(run_checks(profile(), system), "remove_ipc").status == "pass"


def test_missing_python_fails_naming_it() -> None:
    facts = make_facts(python=(1, ""), vllm_version=(127, "sh: 1: /opt/py/bin/python: not found"))
    check = by_name(run_checks(profile(python="/opt/py/bin/python"), facts), "vllm")
    assert check.status == "fail" and "/opt/py/bin/python" in check.detail


def test_vllm_not_importable_fails() -> None:
    facts = make_facts(vllm_version=(1, "ModuleNotFoundError: No module named 'vllm'"))
    check = by_name(run_checks(profile(), facts), "vllm")
    assert check.status == "fail" and "No module named 'vllm'" in check.detail


def test_low_disk_and_shm_warn() -> None:
    low = (
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        "/dev/sda1 1000000 900000 100000 90% /\n"
    )
    facts = make_facts(df_run_dir="/root\n" + low, df_shm=low.replace(" /\n", " /dev/shm\n"))
    checks = run_checks(profile(), facts)
    assert by_name(checks, "disk").status == "warn" and "97.7 MiB" in by_name(checks, "disk").detail
    assert by_name(checks, "shm").status == "warn"


def test_a_run_dir_that_cannot_hold_the_launch_files_and_a_log_fails_in_its_unit() -> None:
    full = "Filesystem 1024-blocks Used Available Capacity Mounted on\ntmpfs 64 60 4 94% /srv/run\n"
    facts = make_facts(df_run_dir="/srv/run\n" + full)
    check = by_name(run_checks(profile(), facts, run_dir_need=1_100_000), "disk")
    assert check.status == "fail", check
    assert "only 4.0 KiB free on /srv/run" in check.detail and "need 1.0 MiB" in check.detail
    roomy = by_name(run_checks(profile(), facts, run_dir_need=4096), "disk")
    assert roomy.status == "warn"


def _shm_usage(shm_dir: str = "/dev/shm", held: bool = False) -> str:
    """What shm.usage_command prints: two 100 MiB psm_* files, held by PID 300 or by none."""
    text = (
        f"dir={shm_dir}\nnow=1000000\n"
        f"F\t104857600\t999000\t0\t600\t26\t12\t{shm_dir}/psm_1a2b3c\n"
        f"F\t104857600\t999000\t0\t600\t26\t13\t{shm_dir}/psm_4d5e6f\n"
    )
    if held:
        text += (
            f"/proc/300/maps:7f00-7f10 rw-s 00000000 00:1a 12 {shm_dir}/psm_1a2b3c\n"
            "I\t/proc/300/fd/5\t26 13\n"
        )
    return text


def test_stale_psm_segments_warn() -> None:
    facts = make_facts(shm_files=_shm_usage())
    check = by_name(run_checks(profile(), facts), "shm")
    assert check.status == "warn" and "2 psm_*/sem.mp-* file(s) (200.0 MiB)" in check.detail
    assert "no process maps or holds open" in check.detail


def test_shm_segments_a_live_process_uses_are_not_called_leaked() -> None:
    """Red team 2026-12-06: preflight said "probably leaked" of files live processes hold."""
    facts = make_facts(shm_files=_shm_usage(held=True))
    check = by_name(run_checks(profile(), facts), "shm")
    assert check.status == "pass" and "leaked" not in check.detail, check
    # a process whose maps cannot be read could hold them: not called leaked either
    blind = make_facts(shm_files=_shm_usage() + "U 4242 0\n")
    assert by_name(run_checks(profile(), blind), "shm").status == "pass"


def test_a_shm_dir_that_does_not_exist_fails_preflight() -> None:
    """Red team 2026-12-06: shm_dir /tmp/rt/nonexist-shm passed (clean-shm then said "no stale
    shared memory" of a directory that is not there)."""
    facts = make_facts(shm_files="nodir\n", df_shm=(1, "df: /tmp/rt/nonexist-shm: No such file"))
    check = by_name(run_checks(profile(shm_dir="/tmp/rt/nonexist-shm"), facts), "shm")
    assert check.status == "fail", check
    assert "/tmp/rt/nonexist-shm does not exist" in check.detail and "/dev/shm" in check.detail


def test_the_shm_check_names_the_profiles_shm_dir_and_the_task_that_cleans_it() -> None:
    # (red team, 2026-12-05: it said /dev/shm and `fab kill-stale` for a profile whose shm_dir
    # is elsewhere; kill-stale removes no shm file, clean-shm does)
    facts = make_facts(shm_files=_shm_usage("/srv/shm"))
    check = by_name(run_checks(profile(shm_dir="/srv/shm"), facts), "shm")
    assert "in /srv/shm" in check.detail and "/dev/shm" not in check.detail
    assert "fab clean-shm" in check.detail and "kill-stale" not in check.detail


def test_gpu_memory_in_use_without_process_warns() -> None:
    busy = RTX8.replace(", 97887, 0, ", ", 97887, 90000, ")
    check = by_name(run_checks(profile(), make_facts(gpus=busy)), "gpu_memory")
    assert check.status == "warn" and "90000 of 97887 MiB" in check.detail


def test_compute_capability_checks() -> None:
    mixed = RTX8 + "8, NVIDIA H100 80GB HBM3, 9.0, 81559, 0, 555.42.02, GPU-8\n"
    assert (
        by_name(run_checks(profile(), make_facts(gpus=mixed)), "compute_capability").status
        == "warn"
    )
    old = "".join(f"{i}, Tesla T4, 7.5, 15360, 0, 535.1, GPU-{i}\n" for i in range(8))
    assert (
        by_name(run_checks(profile(), make_facts(gpus=old)), "compute_capability").status == "fail"
    )


def test_missing_sections_do_not_crash() -> None:
    facts = make_facts(
        **{
            name: MISSING
            for name in (
                "user",
                "compute_apps",
                "proc_net_tcp",
                "ss_listen",
                "df_run_dir",
                "df_shm",
            )
        }
    )
    checks = run_checks(profile(), facts)
    assert by_name(checks, "port").status == "warn"
    assert by_name(checks, "remove_ipc").status == "warn"
    assert by_name(checks, "gpu_processes").status == "warn"
    assert build_plan(profile(), facts).patch_kv_config is True


def test_standin_facts_use_the_same_rules() -> None:
    p = profile(engine="standin")
    facts = make_facts(vllm_version="0.18.0\n")
    assert by_name(run_checks(p, facts), "vllm").detail == "vLLM 0.18.0 (stand-in)"
    assert build_plan(p, facts).patch_kv_config is False
