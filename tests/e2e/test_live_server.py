"""A live server is never mistaken for a dead one, nor launched over (red-team problems 4, 6):
the pidfile moved away while the server serves, and `fab launch` on a serving deployment."""

from __future__ import annotations

import time

import pytest

from .deployment import Deployment
from .harness import pid_alive

pytestmark = pytest.mark.e2e


def _serving(dep: Deployment) -> int:
    deploy = dep.fab("deploy")
    assert deploy.ok and "verify: ready" in deploy.output, deploy.describe()
    server = dep.pidfile_pid()
    assert server is not None and pid_alive(server)
    return server


def test_a_missing_pidfile_does_not_make_status_verify_or_deploy_lie(dep: Deployment) -> None:
    server = _serving(dep)
    pidfile = dep.run_dir / "server.pid"
    pidfile.rename(dep.root / "moved.pid")

    status = dep.fab("status")
    assert status.returncode == 0 and "serving" in status.output, status.describe()
    assert f"server PID {server}" in status.output and "pidfile" in status.output
    assert "orphans" not in status.output, status.describe()
    assert dep.pidfile_pid() == server  # restored: it was missing, the process is ours

    pidfile.unlink()
    verify = dep.fab("verify")
    assert verify.ok and "ready" in verify.output, verify.describe()
    assert "exited" not in verify.output and "pidfile" in verify.output, verify.describe()

    pidfile.unlink()
    launch_id = (dep.run_dir / "launch.id").read_text()
    again = dep.fab("deploy")  # the same profile: the healthy server is left alone
    assert again.ok and "nothing changed" in again.output, again.describe()
    assert "kill-stale" not in again.output, again.describe()
    assert pid_alive(server) and (dep.run_dir / "launch.id").read_text() == launch_id
    assert dep.chat()["choices"]


def test_launch_on_a_serving_deployment_refuses_and_changes_nothing(dep: Deployment) -> None:
    server = _serving(dep)
    before = {name: (dep.run_dir / name).read_bytes() for name in ("launch.id", "server.pid")}
    current = (dep.run_dir / "current.log").resolve()
    launch = dep.fab("launch")
    assert launch.returncode == 1 and "fab stop" in launch.output, launch.describe()
    assert "fab deploy" in launch.output and f"PID {server}" in launch.output
    for name, data in before.items():
        assert (dep.run_dir / name).read_bytes() == data, name
    assert (dep.run_dir / "current.log").resolve() == current
    time.sleep(0.3)
    assert pid_alive(server) and dep.chat()["choices"]
    status = dep.fab("status")
    assert status.returncode == 0 and "serving" in status.output, status.describe()

    # With the pidfile gone too, the live server (found by its launch id) still refuses it.
    (dep.run_dir / "server.pid").unlink()
    launch = dep.fab("launch")
    assert launch.returncode == 1 and f"PID {server}" in launch.output, launch.describe()
    assert (dep.run_dir / "launch.id").read_bytes() == before["launch.id"]

    # deploy's own path (kill-stale, then launch) still replaces it.
    redeploy = dep.fab("deploy", "--restart")
    assert redeploy.ok and "verify: ready" in redeploy.output, redeploy.describe()
    assert not pid_alive(server) and dep.pidfile_pid() not in (None, server)
