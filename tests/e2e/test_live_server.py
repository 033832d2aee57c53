"""A live server is never mistaken for a dead one (red-team problem 4): the pidfile moved away
while the server serves."""

from __future__ import annotations

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
