"""One deployment at a time per host: an flock(1) held by a process that lives as long as we do.

The lock is ``run_dir/kimi-ops.lock``, taken with ``flock -n`` by a small shell on the host that
then waits on its stdin. Its stdin is our SSH channel (or, locally, a pipe from this process),
so when this process ends, cleanly or not, the channel closes, the holder exits and the kernel
releases the lock: a dead holder never blocks. A second run fails at once, naming the holder
(its PID, where it runs from, and when it started).
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from datetime import datetime, timezone
from typing import Any

from kimi_ops.defaults import LOCK_FILE
from kimi_ops.errors import StepFailed
from kimi_ops.shell import one_line, quote

from .host import Host

LOCKED = "kimi-ops-lock: acquired"
BUSY = "kimi-ops-lock: busy"
HOLDER_SUFFIX = ".holder"


def lock_command(run_dir: str, holder: str) -> str:
    r = run_dir.rstrip("/") or "/"
    lock = quote(f"{r}/{LOCK_FILE}")
    info = quote(f"{r}/{LOCK_FILE}{HOLDER_SUFFIX}")
    inner = (
        f'printf "%s remote_pid=%s\\n" {quote(holder)} "$$" > {info}; '
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
        f"mkdir -p -m 700 {quote(r)} && "
        f"{{ flock -n -E 75 {lock} sh -c {quote(inner)}; rc=$?; "
        f'if [ $rc -eq 75 ]; then echo "{BUSY}"; {wait_for_holder}; cat {info} 2>/dev/null; fi; '
        "exit $rc; }"
    )


def holder_text(step: str) -> str:
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"pid={os.getpid()} host={socket.gethostname()} user={getpass.getuser()} "
        f"step={step} started={started}"
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

    def __enter__(self) -> HostLock:
        if self.host.dry:
            return self
        command = one_line(lock_command(self.run_dir, holder_text(self.step)))
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
            return self
        self.__exit__(None, None, None)
        if first.strip() == BUSY:
            raise StepFailed(
                self.step,
                f"another kimi-ops run holds the deployment lock on {self.host.name}: "
                f"{rest.strip() or 'holder unknown'}",
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
