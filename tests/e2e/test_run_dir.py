"""run_dir safety through the real `fab` command line (a real sshd, and locally): a run_dir
others can write is refused before anything is written to or run from it; a symlinked run_dir
is resolved to its real path; a relative one is a clean profile error."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from .deployment import Deployment, make_deployment
from .harness import REPO_ROOT, cause_line, pid_alive

pytestmark = pytest.mark.e2e

PLANTED = "import pathlib, sys; pathlib.Path({marker!r}).write_text('ran'); sys.exit(0)\n"


def _health(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
        return int(resp.status)


def test_a_world_writable_run_dir_is_refused_before_anything_runs(dep: Deployment) -> None:
    """The red-team shape: another user could replace launch.sh or kimi_probe.py in a 0777
    run_dir and have a root `fab launch` / read-only `fab status` run it. Both the attacker's
    files and ours stay unrun and unwritten."""
    dep.run_dir.mkdir()
    dep.run_dir.chmod(0o777)
    marker = dep.root / "planted-ran"
    (dep.run_dir / "kimi_probe.py").write_text(PLANTED.format(marker=str(marker)))
    (dep.run_dir / "launch.sh").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (dep.run_dir / "launch.sh").chmod(0o755)
    for task in ("status", "deploy", "launch", "verify", "stop", "preflight", "upload-script"):
        run = dep.fab(task)
        assert run.returncode == 1, (task, run.describe())
        assert "Traceback" not in run.output, run.describe()
        cause = cause_line(run.output)
        assert f"unsafe run_dir {dep.run_dir}" in cause and "mode 777" in cause, run.describe()
        assert f"chmod 700 {dep.run_dir}" in run.output, run.describe()
        assert not marker.exists(), (task, run.describe())
    assert sorted(p.name for p in dep.run_dir.iterdir()) == ["kimi_probe.py", "launch.sh"]
    assert dep.pidfile_pid() is None


def test_a_private_run_dir_works_and_a_group_writable_parent_is_refused(
    dep: Deployment, tmp_path: Path
) -> None:
    dep.run_dir.mkdir(mode=0o700)
    dep.run_dir.chmod(0o700)
    run = dep.fab("deploy")
    assert run.ok, run.describe()
    assert (dep.run_dir / "launch.sh").stat().st_mode & 0o777 == 0o700
    assert (dep.run_dir / "kimi_probe.py").stat().st_mode & 0o022 == 0
    assert dep.fab("status").returncode == 0
    # The same directory under a parent others can write (no sticky bit): refused.
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    bad = dep.fab("status", run_dir=str(open_parent / "run"))
    assert bad.returncode == 1 and "without the sticky bit" in cause_line(bad.output), (
        bad.describe()
    )
    assert not (open_parent / "run").exists()


def test_a_symlinked_run_dir_is_resolved_and_stop_ends_the_server(dep: Deployment) -> None:
    run = dep.fab("deploy")
    assert run.ok, run.describe()
    pid = dep.pidfile_pid()
    assert pid is not None and pid_alive(pid)
    link = dep.root / "runlink"
    link.symlink_to("run")
    status = dep.fab("status", run_dir=str(link))
    assert status.returncode == 0, status.describe()  # serving (was: crashed, exit 5)
    assert f"resolves to {dep.run_dir}" in status.output, status.describe()
    assert _health(dep.port) == 200
    stop = dep.fab("stop", run_dir=str(link))
    assert stop.ok, stop.describe()
    assert "no process of this deployment" not in stop.output, stop.describe()
    assert not pid_alive(pid)
    assert dep.fab("status").returncode == 4  # stopped


@pytest.mark.parametrize("local", [False, True])
def test_a_relative_run_dir_is_a_clean_error_that_creates_nothing(
    dep: Deployment, tmp_path: Path, local: bool
) -> None:
    """It was a ValueError traceback (script.py) after the lock had created ./relrun."""
    if local:
        (tmp_path / "local").mkdir()
    d = make_deployment(None, tmp_path / "local") if local else dep
    for task in ("preflight", "deploy"):
        run = d.fab(task, "--run-dir", "relrun")
        assert run.returncode == 1, run.describe()
        assert "Traceback" not in run.output, run.describe()
        assert "kimi.run_dir: must be an absolute path" in run.output, run.describe()
        assert not (REPO_ROOT / "relrun").exists()  # fab runs in the repository
