"""The real engine's whole life through `fab`: deploy -> ready -> redeploy -> status -> logs ->
stop, with vLLM's CPU build serving a tiny Llama over a real sshd on 127.0.0.1.

No fake nvidia-smi: the profile keeps the default ``device: auto``, which must find the CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .server import RealDeployment, mapped_shm, shm_names, wait_until

pytestmark = pytest.mark.real_vllm


def test_deploy_serve_redeploy_status_logs_stop(
    deployment: Callable[..., RealDeployment],
) -> None:
    dep = deployment("tiny-llama")

    # Ready means a real chat completion answered (random weights: nonsense words).
    tree = dep.serve()
    print(f"tree:\n{tree.describe()}")
    assert tree.by_title("VLLM::EngineCore"), tree.describe()
    assert tree.by_title("VLLM::Worker"), tree.describe()
    owned = set(dep.shm_owned)
    assert owned, (
        f"the server maps no psm_*/sem.mp-* file of /dev/shm: {sorted(mapped_shm(tree.pids()))}"
    )

    # Idempotent: the same profile again leaves the running server alone.
    again = dep.deploy()
    assert again.returncode == 0, again.describe()
    assert dep.pidfile_pid() == tree.api, again.describe()
    assert all(pid in tree.alive() for pid in tree.pids()), tree.describe()
    print(f"idempotent redeploy: {again.seconds:.1f} s")

    status = dep.fab("status")
    assert status.returncode == 0, status.describe()
    assert str(tree.api) in status.output, status.describe()
    assert "healthy" in status.output, status.describe()

    logs = dep.fab("logs", "--lines", "400")
    assert logs.returncode == 0, logs.describe()
    assert "Application startup complete" in logs.stdout or "/v1/chat/completions" in logs.stdout

    stop = dep.fab("stop")
    assert stop.returncode == 0, stop.describe()
    assert wait_until(lambda: not tree.alive(), 30), "alive after stop:\n" + tree.describe()
    left = owned & shm_names()
    assert wait_until(lambda: not (owned & shm_names()), 10), f"shm files left: {sorted(left)}"
    print(f"stop: {stop.seconds:.1f} s; removed shm files {sorted(owned)}")

    # Stopped is reported as stopped: verify says so and fails, status does not say serving.
    verify = dep.fab("verify")
    assert verify.returncode != 0, verify.describe()
    assert "stopped" in verify.output, verify.describe()
    status = dep.fab("status")
    assert status.returncode != 0, status.describe()
    assert "engine_dead_other" not in status.output, status.describe()
