"""HostLock on the local machine (a plain invoke Context, no sshd): one holder at a time, the
second is refused at once naming the holder, and a holder that died never blocks."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from invoke import Context

from kimi_ops.defaults import LOCK_FILE
from kimi_ops.errors import StepFailed
from kimi_ops.profile import load_profile
from tasks.host import Host
from tasks.lock import HostLock

REPO_ROOT = Path(__file__).resolve().parents[1]


def _host(run_dir: Path) -> Host:
    return Host(Context(), load_profile({"run_dir": str(run_dir)}))


def _acquire_within(run_dir: Path, seconds: float) -> tuple[HostLock, float]:
    """Take the lock, retrying busy answers for up to ``seconds`` (the kernel releases a dead
    holder's flock asynchronously, a few milliseconds after its pipe closes)."""
    start = time.monotonic()
    while True:
        lock = HostLock(_host(run_dir), str(run_dir), "deploy", timeout=5)
        try:
            lock.__enter__()
            return lock, time.monotonic() - start
        except StepFailed:
            if time.monotonic() - start > seconds:
                raise
            time.sleep(0.05)


def test_second_lock_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run dir with 'quotes'"  # the path is shell-quoted everywhere
    with HostLock(_host(run_dir), str(run_dir), "deploy"):
        assert (run_dir / LOCK_FILE).exists()
        start = time.monotonic()
        with pytest.raises(StepFailed) as info, HostLock(_host(run_dir), str(run_dir), "stop"):
            pytest.fail("the second lock must not be granted while the first is held")
        elapsed = time.monotonic() - start
    err = info.value
    assert elapsed < 3, f"the second run waited {elapsed:.1f} s instead of failing at once"
    assert err.step == "stop"
    assert "holds the deployment lock" in err.reason
    assert f"pid={os.getpid()}" in err.reason  # the holder's (this process's) PID
    assert "step=deploy" in err.reason
    assert re.search(r"started=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", err.reason), err.reason
    assert "\n" not in err.reason
    # Released on exit: the next one gets it straight away.
    with HostLock(_host(run_dir), str(run_dir), "deploy"):
        pass


def test_a_holder_killed_by_sigkill_does_not_block_the_next_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    holder_code = textwrap.dedent(
        f"""
        import sys, time
        from invoke import Context
        from kimi_ops.profile import load_profile
        from tasks.host import Host
        from tasks.lock import HostLock
        run_dir = {str(run_dir)!r}
        lock = HostLock(Host(Context(), load_profile({{"run_dir": run_dir}})), run_dir, "deploy")
        lock.__enter__()
        print("locked", flush=True)
        time.sleep(120)
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", holder_code],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        # While it lives, it holds the lock (and is named as the holder).
        with pytest.raises(StepFailed, match=rf"pid={holder.pid}\b"):
            HostLock(_host(run_dir), str(run_dir), "deploy").__enter__()
        os.kill(holder.pid, signal.SIGKILL)  # our own child, by PID
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()
    lock, waited = _acquire_within(run_dir, 5.0)
    try:
        assert waited < 5.0
        info = (run_dir / f"{LOCK_FILE}.holder").read_text()
        assert f"pid={os.getpid()} " in info, info  # the new holder replaced the dead one
    finally:
        lock.__exit__(None, None, None)


def test_lock_in_a_run_dir_that_cannot_be_created_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("a regular file, not a directory\n")
    run_dir = blocker / "run"
    with pytest.raises(StepFailed) as info:
        HostLock(_host(run_dir), str(run_dir), "deploy").__enter__()
    assert str(run_dir) in info.value.reason, info.value.reason
    assert "Not a directory" in info.value.reason, info.value.reason
    assert "\n" not in info.value.reason


def test_a_holder_file_that_cannot_be_written_is_no_lock_and_says_why(tmp_path: Path) -> None:
    # (red team, 2026-12-05: on a run_dir remounted read-only the lock was granted, the holder
    # file kept an old run's token, and every command then failed as "lost the deployment lock
    # ... the SSH connection may have dropped"; a directory in the holder file's place is this
    # test's unwritable file, as root can write to a read-only-permission file)
    run_dir = tmp_path / "run"
    (run_dir / f"{LOCK_FILE}.holder").mkdir(parents=True)
    lock = HostLock(_host(run_dir), str(run_dir), "deploy")
    with pytest.raises(StepFailed) as info:
        lock.__enter__()
        lock.__exit__(None, None, None)  # (granted after all: release it, then fail)
    assert "could not take the deployment lock" in info.value.reason, info.value.reason
    assert "Is a directory" in info.value.reason, info.value.reason


def test_a_busy_lock_names_the_live_holder_not_a_stale_holder_file(tmp_path: Path) -> None:
    """The holder writes its name just AFTER flock grants the lock; a run refused in between
    must not report the previous (dead) holder's leftover file, nor "holder unknown"."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock_file, info = run_dir / LOCK_FILE, run_dir / f"{LOCK_FILE}.holder"
    info.write_text(
        "pid=999999 host=gone user=x step=deploy started=2020-01-01T00:00:00Z remote_pid=999999\n"
    )  # left by a holder that died long ago
    slow_holder = (
        "sleep 0.5; printf 'pid=4242 host=h user=u step=deploy started=2026-01-01T00:00:00Z "
        f'remote_pid=%s\\n\' "$$" > {shlex.quote(str(info))}; exec cat > /dev/null'
    )
    holder = subprocess.Popen(
        ["flock", str(lock_file), "sh", "-c", slow_holder], stdin=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 5
        while subprocess.run(["flock", "-n", str(lock_file), "true"]).returncode == 0:
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.01)
        with pytest.raises(StepFailed) as err:
            HostLock(_host(run_dir), str(run_dir), "deploy").__enter__()
        assert "pid=4242 " in err.value.reason, err.value.reason
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
