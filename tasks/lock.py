"""One deployment at a time per host: an flock(1) held by a process that lives as long as we do.

The lock is ``run_dir/kimi-ops.lock``, taken with ``flock -n`` by a small shell on the host that
then waits on its stdin. Its stdin is our SSH channel (or, locally, a pipe from this process),
so when this process ends, cleanly or not, the channel closes, the holder exits and the kernel
releases the lock: a dead holder never blocks. A second run fails at once, naming the holder
(its PID, where it runs from, and when it started).

Holding the lock at the start is not enough: if the SSH connection drops, the holder dies with
its channel and Fabric reconnects silently for the next command, so the run would go on
unlocked while a second run takes the lock. So the holder file carries a random token, and while
the lock is held every mutating command on the host is prefixed by a guard (:class:`LockGuard`)
that checks, in the same shell, that the holder file still carries our token and its holder
process is alive. When it does not, the command is not run and the step fails, naming the lock.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import socket
import subprocess
import time
from datetime import datetime, timezone
from typing import Any

from kimi_ops.defaults import LOCK_FILE
from kimi_ops.errors import StepFailed
from kimi_ops.rundir import private_dir_test
from kimi_ops.shell import one_line, quote

from .host import Host, Output

LOCKED = "kimi-ops-lock: acquired"
BUSY = "kimi-ops-lock: busy"
HOLDER_SUFFIX = ".holder"
LOST = "@@kimi-ops-lock-lost:"
LOST_STATUS = 75


def guard_command(run_dir: str, token: str) -> str:
    """A prefix that exits 75 (printing :data:`LOST`) unless our holder still holds the lock."""
    r = run_dir.rstrip("/") or "/"
    info = quote(f"{r}/{LOCK_FILE}{HOLDER_SUFFIX}")
    return (
        f'{{ kimi_h=$(cat {info} 2>/dev/null); case "$kimi_h" in '
        f'*" token={token} remote_pid="*) kill -0 "${{kimi_h##*remote_pid=}}" 2>/dev/null;; '
        "*) false;; esac; } || "
        f'{{ echo "{LOST} ${{kimi_h:-no holder file}}" >&2; exit {LOST_STATUS}; }};'
    )


class LockGuard:
    """Installed on a Host while the lock is held: proves the lock before each change."""

    def __init__(self, host: Host, run_dir: str, token: str) -> None:
        self.host = host
        self.run_dir = run_dir
        self.prefix = guard_command(run_dir, token)

    def wrap(self, command: str) -> str:
        return f"{self.prefix} {command}"

    def check(self, out: Output, step: str) -> None:
        """Raise StepFailed when the guard refused to run ``out``'s command."""
        if out.exited != LOST_STATUS or LOST not in out.stderr:
            return
        holder = out.stderr.split(LOST, 1)[1].strip().splitlines()[0]
        raise StepFailed(
            step,
            f"lost the deployment lock on {self.host.name} (run_dir {self.run_dir}): its holder "
            f"process is gone or another run holds it now ({holder}); stopped before this "
            "command, which was not run",
            command=out.command,
            hint="the SSH connection may have dropped (the holder dies with it); check "
            "`fab status`, then run again",
        )


def lock_command(run_dir: str, holder: str) -> str:
    r = run_dir.rstrip("/") or "/"
    lock = quote(f"{r}/{LOCK_FILE}")
    info = quote(f"{r}/{LOCK_FILE}{HOLDER_SUFFIX}")
    # A holder file that cannot be written (a read-only file system) is no lock: the guard
    # would find another token there and call every command "lock lost"; say why instead.
    inner = (
        f'{{ printf "%s remote_pid=%s\\n" {quote(holder)} "$$" > {info}; }} 2>&1 || exit 1; '
        f'echo "{LOCKED}"; exec cat > /dev/null'
    )
    # The holder names itself just AFTER flock grants the lock: a run refused in between would
    # read a dead holder's leftover file (or none). Wait up to 1 s for a live remote_pid.
    wait_for_holder = (
        f"i=0; while [ $i -lt 20 ]; do h=$(cat {info} 2>/dev/null); p=${{h##*remote_pid=}}; "
        '[ -n "$h" ] && [ "$p" != "$h" ] && kill -0 "$p" 2>/dev/null && break; '
        "sleep 0.05; i=$((i+1)); done"
    )
    return (
        f"mkdir -p -m 700 {quote(r)} && {{ {private_dir_test(r)}; }} && "
        f"{{ flock -n -E 75 {lock} sh -c {quote(inner)}; rc=$?; "
        f'if [ $rc -eq 75 ]; then echo "{BUSY}"; {wait_for_holder}; cat {info} 2>/dev/null; fi; '
        "exit $rc; }"
    )


def holder_text(step: str, token: str = "") -> str:
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"pid={os.getpid()} host={socket.gethostname()} user={getpass.getuser()} "
        f"step={step} started={started}" + (f" token={token}" if token else "")
    )


class HostLock:
    """Context manager: hold the deployment lock on ``host`` for the duration."""

    def __init__(self, host: Host, run_dir: str, step: str, timeout: float = 30.0) -> None:
        self.host = host
        self.run_dir = run_dir
        self.step = step
        self.timeout = timeout
        self._chan: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.token = secrets.token_hex(8)

    def __enter__(self) -> HostLock:
        if self.host.dry:
            return self
        command = one_line(lock_command(self.run_dir, holder_text(self.step, self.token)))
        if self.host.remote:
            try:
                self.host.c.open()
                chan = self.host.c.client.get_transport().open_session()  # type: ignore[attr-defined]
                chan.exec_command(command)
            except Exception as exc:  # paramiko and socket errors alike
                raise self.host.connect_error(exc) from exc
            self._chan = chan
            first, rest = self._read_remote(chan)
        else:
            self._proc = subprocess.Popen(
                ["sh", "-c", command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            first, rest = self._read_local(self._proc)
        if first.strip() == LOCKED:
            self.host.guard = LockGuard(self.host, self.run_dir, self.token)
            return self
        self.__exit__(None, None, None)
        if first.strip() == BUSY:
            raise StepFailed(
                self.step,
                f"another kimi-ops run holds the deployment lock on {self.host.name}: "
                f"{re.sub(r' token=[0-9a-f]+', '', rest.strip()) or 'holder unknown'}",
                command=command,
                hint="wait for it to finish; a holder that died releases the lock by itself",
            )
        output = (first + rest).strip()
        cause = output.splitlines()[-1] if output else "no output"
        raise StepFailed(
            self.step,
            f"could not take the deployment lock in run_dir {self.run_dir}: {cause}",
            command=command,
            stderr=output,
            hint=f"is flock(1) (util-linux) installed, and is {self.run_dir} writable?",
        )

    def _read_remote(self, chan: Any) -> tuple[str, str]:
        chan.settimeout(self.timeout)
        buf = b""
        deadline = time.monotonic() + self.timeout
        while b"\n" not in buf and time.monotonic() < deadline:
            data = chan.recv(4096)
            if not data:
                break
            buf += data
        if buf.decode(errors="replace").startswith(BUSY):
            while not chan.exit_status_ready() and time.monotonic() < deadline:
                data = chan.recv(4096)
                if not data:
                    break
                buf += data
        if not buf:
            err = chan.recv_stderr(65536) if chan.recv_stderr_ready() else b""
            buf = err
        first, _, rest = buf.decode(errors="replace").partition("\n")
        return first, rest

    def _read_local(self, proc: subprocess.Popen[bytes]) -> tuple[str, str]:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode(errors="replace")
        if first.strip() == LOCKED:
            return first, ""
        rest = proc.stdout.read().decode(errors="replace")
        proc.wait(timeout=self.timeout)
        return first, rest

    def __exit__(self, *exc: object) -> None:
        self.host.guard = None
        if self._chan is not None:
            try:
                self._chan.shutdown_write()
                self._chan.close()
            except Exception:  # the connection may already be gone; the lock goes with it
                pass
            self._chan = None
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
