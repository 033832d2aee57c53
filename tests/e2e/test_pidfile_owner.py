"""The pidfile through the real `fab` and sshd: a space in run_dir (r1 F2), a run_dir spelled
with `//` (r2 F9), and a pidfile whose PID now runs a foreign server (r2 F1, r1 F3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .deployment import make_deployment
from .harness import SshdHost, kill_pid_tree_started_by_test, pid_alive

pytestmark = pytest.mark.e2e


def test_a_space_in_run_dir_serves_and_a_double_slash_stop_ends_it(
    sshd: SshdHost, tmp_path: Path
) -> None:
    root = tmp_path / "with space"
    root.mkdir()
    dep = make_deployment(sshd, root)
    try:
        deploy = dep.fab("deploy")
        assert deploy.ok and "ready" in deploy.output, deploy.describe()
        server = dep.pidfile_pid()
        assert server is not None and pid_alive(server)
        status = dep.fab("status")
        assert status.returncode == 0 and "serving" in status.output, status.describe()
        again = dep.fab("deploy")  # the running server is the one these files make: kept
        assert again.ok and dep.pidfile_pid() == server and pid_alive(server), again.describe()
        stop = dep.fab("stop", run_dir=f"{root}//run")
        assert stop.ok and "ended" in stop.output, stop.describe()
        time.sleep(0.5)
        assert not pid_alive(server)
        assert not (dep.run_dir / "server.pid").exists()  # its server is gone: so is the pidfile
        status = dep.fab("status")
        assert status.returncode == 4 and "stopped" in status.output, status.describe()
    finally:
        dep.cleanup()


FAKE_SERVER = "import time\ntime.sleep(120)\n"


def test_a_foreign_server_under_the_pidfiles_pid_is_never_ours(
    sshd: SshdHost, tmp_path: Path
) -> None:
    """What PID reuse leaves: the pidfile (written earlier) names a process started later, a
    session leader that looks like a vLLM server on this deployment's port."""
    dep = make_deployment(sshd, tmp_path)
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_OPS_")}
    env["PYTHONPATH"] = str(tmp_path / "fake")
    foreign = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--port", str(dep.port)],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        dep.run_dir.mkdir()
        pidfile = dep.run_dir / "server.pid"
        pidfile.write_text(f"{foreign.pid}\n")
        (dep.run_dir / "launch.id").write_text("L-old\n")
        written = time.time() - 120  # the pidfile was written before this process started
        os.utime(pidfile, (written, written))
        status = dep.fab("status")
        assert status.returncode != 3 and "still loading" not in status.output, status.describe()
        assert f"server PID {foreign.pid}" not in status.output, status.describe()
        kill = dep.fab("kill-stale")
        assert kill.ok and "no process of this deployment" in kill.output, kill.describe()
        assert f"left alone: {foreign.pid}" in kill.output, kill.describe()
        time.sleep(0.3)
        assert foreign.poll() is None  # never signalled
        assert not pidfile.exists()  # a pidfile naming a reused PID is dropped
        assert not (dep.run_dir / "stopped.launch").exists()  # nothing was stopped
    finally:
        if foreign.poll() is None:
            kill_pid_tree_started_by_test(foreign.pid)
        foreign.wait(timeout=10)
        dep.cleanup()
