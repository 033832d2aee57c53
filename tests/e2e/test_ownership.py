"""Every kill owns what it ends (issue 12.10-12.12, 11.5), through the real `fab` and a real sshd.

The process trees here are started by the test itself, each under setsid like a launch, shaped
like the real engine's (../shared/vllm/real-cpu-logs/ps_running.txt): an API server, a
resource_tracker-like child, ``VLLM::EngineCore`` (bash renamed with ``exec -a``) and its child
``VLLM::Worker``. Everything the test starts is ended by PID at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .deployment import Deployment, make_deployment
from .harness import SshdHost, pid_alive

pytestmark = pytest.mark.e2e

#: EngineCore and Worker run with a cleared environment: in the real engine setproctitle
#: overwrites their environ area, so /proc/PID/environ holds no KIMI_OPS_* variable there
#: (tests/fixtures/ps/real_vllm_kimi_launch.txt). Only their session says whose they are.
TREE = (
    'export KIMI_OPS_LAUNCH_PID="$$"; '  # as launch.sh: its PID leads the session (setsid)
    "(exec -a python3 sleep 600) & "  # a resource_tracker-like child
    "(exec env -i PATH=/usr/bin:/bin bash -c "
    "'exec -a VLLM::EngineCore bash -c \"(exec -a VLLM::Worker sleep 600) & wait\"') & "
    "exec -a python3 sleep 600"  # the API server (the session leader)
)


def session_members(sid: int) -> list[int]:
    """Live PIDs whose session is ``sid`` (from /proc/PID/stat)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry))
    return sorted(out)


def comm_and_argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


#: The tree's parent: a child subreaper (as systemd --user or a container's init are), so the
#: orphans are re-parented to it rather than to PID 1. Other sessions on this machine may run an
#: older kill-stale that ends every VLLM::* orphan of PID 1: this keeps the test independent of
#: them. It reaps whatever it adopts.
SUBREAPER = """
import ctypes, os, subprocess, sys, time
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
env = dict(os.environ, KIMI_OPS_RUN_DIR=sys.argv[2], KIMI_OPS_LAUNCH_ID=sys.argv[3])
root = subprocess.Popen(["bash", "-c", sys.argv[1]], env=env, start_new_session=True)
print(root.pid, flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


@contextlib.contextmanager
def tree(run_dir: Path | str, launch_id: str) -> Iterator[int]:
    """A vLLM-shaped tree in its own session with a deployment's variables; yields the session
    (the API server's PID). Everything is ended by PID afterwards."""
    reaper = subprocess.Popen(
        [sys.executable, "-c", SUBREAPER, TREE, str(run_dir), launch_id],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    sid = 0
    try:
        assert reaper.stdout is not None
        sid = int(reaper.stdout.readline())
        assert wait_until(lambda: len(session_members(sid)) == 4), session_members(sid)
        yield sid
    finally:
        for pid in session_members(sid) if sid else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reaper.kill()
        reaper.wait()


def wait_until(check, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def foreign_standin(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A process that looks like a stand-in server (``kimi_standin.py ARGS``) this deployment
    did not launch, in a session of its own, with no KIMI_OPS variable; yielded once its argv
    is in /proc, killed by its PID at the end."""
    fake = tmp_path / "kimi_standin.py"
    fake.write_text("import time\ntime.sleep(600)\n")
    argv = [sys.executable, str(fake), *args]
    proc = subprocess.Popen(
        argv,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        shown = b"".join(a.encode() + b"\0" for a in argv)
        assert wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes() == shown)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_stop_ends_this_deployments_orphans_and_never_the_identical_other_tree(
    dep: Deployment, tmp_path: Path
) -> None:
    """11.5 / 12.11: kill -9 of both API servers leaves EngineCore, Worker and the tracker of
    two deployments as orphans with the same titles; stop ends exactly ours."""
    with tree(dep.run_dir, "launch-ours") as ours, tree(tmp_path / "other-run", "x") as theirs:
        for root in (ours, theirs):
            os.kill(root, signal.SIGKILL)  # the API server: its children live on, re-parented
        assert wait_until(lambda: not pid_alive(ours) and not pid_alive(theirs))
        orphans = session_members(ours)
        others = session_members(theirs)
        assert len(orphans) == 3 and len(others) == 3, (orphans, others)  # as the real engine
        assert sorted(map(comm_and_argv0, orphans)) == sorted(map(comm_and_argv0, others))
        assert "VLLM::EngineCore" in map(comm_and_argv0, others)
        titled = [pid for pid in orphans if comm_and_argv0(pid).startswith("VLLM::")]
        assert len(titled) == 2
        for pid in titled:  # as after setproctitle: nothing in the environment says whose
            assert b"KIMI_OPS_RUN_DIR" not in Path(f"/proc/{pid}/environ").read_bytes()

        run = dep.fab("stop")
        assert run.ok, run.describe()
        assert "ended 3 process(es), 3 of them orphans" in run.output, run.describe()
        assert run.output.count(f"in session {ours} of this deployment") == 2, run.describe()
        assert wait_until(lambda: session_members(ours) == []), session_members(ours)
        assert all(pid_alive(pid) for pid in others), run.describe()
        for pid in others:
            assert f"{pid} (" not in run.output  # not even named as a target

        again = dep.fab("kill-stale")
        assert again.ok and "no process of this deployment" in again.output, again.describe()
        assert all(pid_alive(pid) for pid in others)


def _shm_files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir() if p.name.startswith(("psm_", "sem.mp-"))}


def test_an_unrelated_standin_survives_kill_stale_and_clean_shm_with_its_files(
    sshd: SshdHost, dep: Deployment, tmp_path: Path
) -> None:
    """12.10: the other deployment's model path holds " --port OUR_PORT" in one argv element;
    12.12: it shares our shm dir and lives while our leaked files are cleaned, file by file."""
    assert dep.fab("deploy").ok
    ours_server = dep.pidfile_pid()
    assert ours_server is not None
    ours_files = _shm_files(dep.shm_dir)
    assert ours_files

    (tmp_path / "other").mkdir()
    other = make_deployment(sshd, tmp_path / "other")
    model = other.root / f"Kimi --port {dep.port}"
    shutil.copytree(other.model, model)
    try:
        run = other.fab("deploy", model=str(model), shm_dir=str(dep.shm_dir))
        assert run.ok, run.describe()
        theirs = other.pidfile_pid()
        assert theirs is not None and pid_alive(theirs)
        their_files = _shm_files(dep.shm_dir) - ours_files
        assert their_files
        argv = Path(f"/proc/{theirs}/cmdline").read_bytes().split(b"\0")
        assert str(model).encode() in argv  # one element holding " --port OUR_PORT"

        os.killpg(ours_server, signal.SIGKILL)  # our server crashes: its shm files leak
        assert wait_until(lambda: not pid_alive(ours_server))
        assert ours_files <= _shm_files(dep.shm_dir)

        kill = dep.fab("kill-stale")
        assert kill.ok, kill.describe()
        assert pid_alive(theirs), f"the other deployment was killed\n{kill.describe()}"

        clean = dep.fab("clean-shm")
        assert clean.ok, clean.describe()
        assert f"removed {len(ours_files)} stale shm file(s)" in clean.output, clean.describe()
        # the other deployment's files are not ours (whatever their age), and in use
        for name in their_files:
            assert re.search(
                rf"left alone {dep.shm_dir / name}: not made by this deployment .*; in use by "
                rf"PID [0-9, ]*\b{theirs}\b",
                clean.output,
            ), clean.describe()
        assert _shm_files(dep.shm_dir) == their_files
        assert pid_alive(theirs)
        answer = other.chat()
        assert answer["choices"][0]["message"]["content"]
    finally:
        other.cleanup()


ABBREVIATED = ("--hf_tok=tokval77665544", "--api-ke", "plainword5555secret")


def test_a_foreign_server_on_our_port_is_reported_and_left_alone(
    dep: Deployment, tmp_path: Path
) -> None:
    """12.11: a `kimi_standin.py --port OUR_PORT` (or any vLLM on our port) that this deployment
    did not launch is not ours: kill-stale names it and leaves it alone (preflight reports the
    busy port). The old rule ended any stand-in or vLLM server whose argv named our port."""
    # its key given with abbreviations vLLM's parser takes (red team round 4, finding 10)
    # (first: kill-stale shows 160 characters of an argv)
    args = (*ABBREVIATED, "--model", "/m", "--port", str(dep.port))
    with foreign_standin(tmp_path, *args) as foreign:
        run = dep.fab("kill-stale")
        assert run.ok, run.describe()
        assert "no process of this deployment" in run.output, run.describe()
        assert f"left alone: {foreign.pid} (vLLM server on port {dep.port}, not launched" in (
            run.output
        ), run.describe()
        assert "plainw" not in run.output and "tokval" not in run.output, run.describe()
        assert "--hf_tok=***" in run.output, run.describe()
        time.sleep(0.5)
        assert foreign.poll() is None, "the foreign server was killed"
