"""kill-stale signals a process, not a PID (red team round 4, #12).

After SIGTERM, ``still_running`` used to take a PID with the same argv for the target still
running; a target that exited and whose PID was reused by a process with the same argv (vLLM's
``VLLM::Worker_TP0`` is the same title in every deployment) got SIGKILL. The listing now carries
each process's start time (``/proc/PID/stat`` field 22), and the signal command reads it again on
the host right before ``kill``. The end-to-end reproduction is tests/e2e/test_pid_reuse.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kimi_ops.procs import (
    LISTING_COMMAND,
    Listing,
    Proc,
    format_row,
    owned_processes,
    parse_listing,
    parse_signal_output,
    signal_command,
    still_running,
)

A = "/srv/kimi-a"
ENV = (("KIMI_OPS_LAUNCH_ID", "L1"), ("KIMI_OPS_RUN_DIR", A))
WORKER = ("VLLM::Worker_TP0",)


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_listing_rows_carry_the_start_time_and_old_rows_still_parse() -> None:
    text = (
        "self_pid=9\n"
        "100 1 100 100 S 4242 env\tEKIMI_OPS_RUN_DIR=/srv/kimi-a\tAvllm\tAserve\n"
        "101 100 100 100 S - noenv\tAVLLM::EngineCore\n"
        "102 100 100 100 D 4250 unread\n"
        "103 1 103 103 S env\tAsleep\tA9\n"  # a row of the listing before the start column
    )
    by = parse_listing(text).by_pid()
    assert by[100].start == 4242 and by[100].argv == ("vllm", "serve")
    assert by[101].start is None and by[101].env is None
    assert by[102].start == 4250 and by[102].unread and by[102].state == "D"
    assert by[103].start is None and by[103].argv == ("sleep", "9")
    p = Proc(7, 1, 7, WORKER, 7, ENV, "S", start=123456)
    assert parse_listing(format_row(p)).procs == (p,)


def test_a_reused_pid_with_the_same_argv_is_not_still_running() -> None:
    worker = Proc(341, 340, 337, WORKER, 337, (), "S", start=5000)
    server = Proc(337, 1, 337, ("vllm", "serve", "/m"), 337, ENV, "S", start=4990)
    before = owned_processes(Listing((server, worker)), A, pidfile_pid=337)
    assert sorted(before.pids) == [337, 341]
    # the worker exited on SIGTERM; an unrelated process took its PID, with the same title
    reused = Proc(341, 1, 341, WORKER, 341, (), "S", start=5600)
    assert still_running(before, Listing((server, reused))) == [server]
    # the same process (same start) is still running, a start unknown on either side falls
    # back to the argv, as before
    assert still_running(before, Listing((server, worker))) == [server, worker]
    legacy = Proc(341, 340, 337, WORKER, 337, (), "S")
    assert still_running(before, Listing((legacy,))) == [worker]


def test_the_signal_command_checks_the_start_time_on_the_host_right_before_kill() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = _start_ticks(sleeper.pid)
        wrong = Proc(sleeper.pid, 1, sleeper.pid, ("sleep", "60"), start=start + 1)
        out = subprocess.run(
            ["bash", "-c", signal_command("KILL", [wrong])], capture_output=True, text=True
        )
        assert parse_signal_output(out.stdout) == ([], [sleeper.pid]), out
        assert sleeper.poll() is None  # another process under that PID: left alone
        right = Proc(sleeper.pid, 1, sleeper.pid, ("sleep", "60"), start=start)
        out = subprocess.run(
            ["bash", "-c", signal_command("TERM", [right])], capture_output=True, text=True
        )
        assert parse_signal_output(out.stdout) == ([sleeper.pid], []), out
        assert sleeper.wait(10) == -15
    finally:
        sleeper.kill()
        sleeper.wait()
    # gone for good: reported gone, whatever its start time
    out = subprocess.run(
        ["bash", "-c", signal_command("TERM", [right, sleeper.pid])], capture_output=True, text=True
    )
    assert parse_signal_output(out.stdout) == ([], [sleeper.pid, sleeper.pid])


def test_the_real_listing_prints_each_processs_start_time() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        out = subprocess.run(
            ["bash", "-c", LISTING_COMMAND], capture_output=True, text=True, check=True
        )
        row = parse_listing(out.stdout).by_pid()[sleeper.pid]
        assert row.start == _start_ticks(sleeper.pid) and row.argv == ("sleep", "60")
        assert parse_listing(out.stdout).by_pid()[1].start is not None or sys.platform != "linux"
    finally:
        sleeper.kill()
        sleeper.wait()
