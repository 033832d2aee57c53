"""Process plumbing of the emulated engine: forking the engine core and its TP workers."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable


def set_comm(title: str) -> None:
    """vLLM's setproctitle ("VLLM::Worker_TP0"); only the 15-char kernel comm can be set."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w", encoding="utf-8") as fh:
        fh.write(title[:15])


def worker_main(parent: int, rank: int) -> int:
    set_comm(f"VLLM::Worker_TP{rank}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by fork_child
    while os.getppid() == parent:  # exit when the engine core goes away
        time.sleep(0.5)
    return 0


def fork_child(target: Callable[[], int], close_fds: tuple[int, ...] = ()) -> int:
    """Fork a child that runs ``target`` and exits with its code; the parent gets its PID.

    SIGTERM is blocked across the fork and stays blocked in the child until ``target`` has
    installed its own handler and unblocks it: a SIGTERM sent right after the fork (an engine
    that fails at once stops its workers) waits for that handler instead of running the
    parent's copy, which set a flag the child never reads and left it sleeping forever (a
    stand-in that hung on exit under load, 2026-12-06)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        raise
    if pid == 0:
        code = 1
        try:
            for fd in close_fds:
                os.close(fd)
            code = target()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return pid


def reap_child(pid: int, deadline: float) -> int:
    """Wait for the child ``pid`` (already asked to stop) until ``deadline`` (monotonic), then
    SIGKILL it; its wait status."""
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]
