"""Issue 5 end to end: preflight over the real sshd with the stand-in's emulated GPUs and vLLM."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from .deployment import Deployment, make_deployment
from .harness import SshdHost

pytestmark = pytest.mark.e2e


def _preflight(dep: Deployment, **standin: object) -> dict:
    run = dep.fab("preflight", "--json", standin={"load_seconds": 0.5, **standin})
    assert run.stdout.strip().startswith("{"), run.describe()
    return json.loads(run.stdout)


@pytest.mark.parametrize(
    ("standin", "patch"),
    [
        ({}, True),  # SM120 + vLLM 0.17.1 + FP8 checkpoint: TRITON_MLA cannot serve FP8 KV
        ({"vllm_version": "0.18.0"}, False),  # 0.18 added FP8 KV to TRITON_MLA
        ({"compute_capability": "10.0", "gpu": "NVIDIA B200"}, False),  # CUTLASS/FlashInfer MLA
    ],
)
def test_plan_decides_the_patch_from_gpu_and_version(
    dep: Deployment, standin: dict, patch: bool
) -> None:
    report = _preflight(dep, **standin)
    assert report["plan"]["patch_kv_config"] is patch, report["plan"]
    assert {c["name"] for c in report["checks"]} >= {"gpus", "vllm", "model_config", "port"}
    assert all(c["status"] != "fail" for c in report["checks"]), report["checks"]


def _failing(report: dict) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}


def _assert_deploy_changes_nothing(dep: Deployment, **kimi: object) -> str:
    before = {p.name: p.read_bytes() for p in dep.model.iterdir()}
    run = dep.fab("deploy", **kimi)
    assert run.returncode != 0, run.describe()
    assert "failed: [" in run.output and "preflight" in run.output
    assert not (dep.run_dir / "launch.sh").exists()
    assert {p.name: p.read_bytes() for p in dep.model.iterdir()} == before
    return run.output


def test_tp8_on_a_4_gpu_host_fails(dep: Deployment) -> None:
    fails = _failing(_preflight(dep, gpu_count=4))
    assert "gpus" in fails and "4" in fails["gpus"] and "8" in fails["gpus"]
    _assert_deploy_changes_nothing(dep, standin={"gpu_count": 4, "load_seconds": 0.5})


def test_missing_shard_fails_naming_it(dep: Deployment) -> None:
    shard = sorted(dep.model.glob("model-*.safetensors"))[1]
    shard.unlink()
    fails = _failing(_preflight(dep))
    assert shard.name in fails.get("model_shards", ""), fails
    _assert_deploy_changes_nothing(dep)


def test_busy_port_fails_naming_it(dep: Deployment) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", dep.port))
        listener.listen()
        fails = _failing(_preflight(dep))
        assert str(dep.port) in fails.get("port", ""), fails
        _assert_deploy_changes_nothing(dep)


def test_stale_server_holding_the_gpus_is_named(sshd: SshdHost, tmp_path: Path) -> None:
    shared = str(tmp_path / "gpu-state.json")  # both deployments see the same emulated GPUs
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = make_deployment(sshd, tmp_path / "old")
    new = make_deployment(sshd, tmp_path / "new")
    standin = {"load_seconds": 0.5, "state_file": shared}
    try:
        up = old.fab("deploy", standin=standin)
        assert up.ok, up.describe()
        holder = old.pidfile_pid()
        run = new.fab("preflight", "--json", standin=standin)
        report = json.loads(run.stdout)
        fails = _failing(report)
        assert "gpu_processes" in fails, report["checks"]
        # The holders are the old server's workers: their PIDs and command are named.
        assert "kimi_standin.py" in fails["gpu_processes"] or "VLLM::" in fails["gpu_processes"]
        assert holder is not None
        _assert_deploy_changes_nothing(new, standin=standin)
    finally:
        old.cleanup()
        new.cleanup()


def test_a_shm_dir_that_does_not_exist_fails_preflight_and_clean_shm_says_so(
    dep: Deployment,
) -> None:
    """Red team 2026-12-06: with shm_dir /tmp/rt/nonexist-shm, clean-shm (alone and inside
    deploy) printed "ok: ... no stale shared memory in ..." for a directory that is not there."""
    missing = str(dep.root / "nonexist-shm")
    run = dep.fab("preflight", "--json", shm_dir=missing, standin={"load_seconds": 0.5})
    fails = _failing(json.loads(run.stdout))
    assert f"shm_dir {missing} does not exist" in fails.get("shm", ""), run.describe()
    output = _assert_deploy_changes_nothing(dep, shm_dir=missing)
    assert "no stale shared memory" not in output
    clean = dep.fab("clean-shm", shm_dir=missing)
    assert "skipped: [" in clean.output and f"shm_dir {missing} does not exist" in clean.output
    assert "no stale shared memory" not in clean.output, clean.describe()


HOLDER = """
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
os.close(fd)
print("ready", flush=True)
time.sleep(120)
"""


def test_preflight_calls_leaked_only_the_shm_files_no_process_holds(dep: Deployment) -> None:
    """Red team 2026-12-06: preflight warned "psm_* segments ... probably leaked" about files
    that live processes map."""
    import os
    import subprocess
    import sys
    import time

    held, unused = dep.shm_dir / "psm_heldbyapp", dep.shm_dir / "psm_leakedone"
    for path in (held, unused):
        path.write_bytes(b"\0" * 4096)
        os.utime(path, (time.time() - 600,) * 2)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(held)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        checks = {c["name"]: c for c in _preflight(dep)["checks"]}
        shm = checks["shm"]
        assert shm["status"] == "warn" and "1 psm_*/sem.mp-* file(s)" in shm["detail"], shm
        assert "no process maps or holds open" in shm["detail"]
        holder.kill()
        holder.wait()
        unused.unlink()
        checks = {c["name"]: c for c in _preflight(dep)["checks"]}
        assert checks["shm"]["status"] == "warn" and "1 psm_*" in checks["shm"]["detail"]
    finally:
        holder.kill()
        holder.wait()
