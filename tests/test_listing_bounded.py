"""The process listing bounds each process's reads.

Reading ``/proc/PID/environ`` waits for the process's exec lock and ``cmdline`` for its memory-map
lock: one process stuck there held the whole listing (and preflight) for its 120-s command timeout
on a shared CI host. Here the listing runs for real (bash, coreutils ``timeout``) over a tree of
fake ``/proc`` entries in which a FIFO with no writer stands for a read that blocks: opening it
blocks until SIGKILL, as the kernel's killable waits do. Then what the tasks make of the result.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kimi_ops.errors import StepFailed
from kimi_ops.procs import (
    Listing,
    Proc,
    format_row,
    listing_command,
    owned_processes,
    parse_listing,
    parse_pidfile_process,
    read_pidfile_command,
    still_running,
)
from kimi_ops.script import parse_key_values
from tasks import steps
from tasks.steps.common import read_listing
from tasks.testing import Reply, ScriptedConnection
from tests.test_tasks import LIST_CMD, OURS, PROFILE, SERVER, FakeClock, _host, _rows

ARGV = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")


def fake_proc(root: Path, pid: int, *, sid: int | None = None) -> Path:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} (py thon) S 1 {pid} {sid or pid} 0 -1 4194560\n")
    (d / "environ").write_bytes(b"PATH=/usr/bin\0KIMI_OPS_RUN_DIR=/srv/kimi\0HF_TOKEN=hf_x\0")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in ARGV) + b"\0")
    return d


def block(path: Path) -> None:
    """``path`` becomes a FIFO nobody writes: a read of it blocks until the reader is killed."""
    path.unlink()
    os.mkfifo(path)


def raw(root: Path, timeout: int = 1, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["bash", "-c", listing_command(str(root), timeout)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def run(root: Path, timeout: int = 1, env: dict[str, str] | None = None) -> tuple[Listing, float]:
    start = time.monotonic()
    text = raw(root, timeout, env)
    return parse_listing(text), time.monotonic() - start


@pytest.mark.parametrize("stuck", ["environ", "cmdline"])
def test_a_process_whose_reads_block_is_listed_unread_and_the_rest_in_full(
    tmp_path: Path, stuck: str
) -> None:
    for pid in (101, 102, 103):
        fake_proc(tmp_path, pid)
    block(tmp_path / "102" / stuck)
    listing, took = run(tmp_path, timeout=1)
    by_pid = listing.by_pid()
    assert sorted(by_pid) == [101, 102, 103] and listing.incomplete_from is None
    assert by_pid[102].unread and by_pid[102].argv == () and by_pid[102].env is None
    assert (by_pid[102].ppid, by_pid[102].pgid, by_pid[102].sid) == (1, 102, 102)
    for pid in (101, 103):  # read in full, secrets never printed
        assert by_pid[pid].argv == ARGV and by_pid[pid].env == (("KIMI_OPS_RUN_DIR", "/srv/kimi"),)
        assert not by_pid[pid].unread
    assert [p for p in listing.procs if p.unread] == [by_pid[102]]
    assert took < 30  # two bounded passes on the stuck process, not a hang


def test_a_read_that_answers_on_the_retry_is_not_called_unread(tmp_path: Path) -> None:
    """A pass killed while merely slow: the next pass starts at that process and reads it."""
    fake_proc(tmp_path, 201)
    environ = tmp_path / "201" / "environ"
    block(environ)

    def answer_later() -> None:
        time.sleep(4.5)  # after the first pass (3 s) was killed, inside the second
        with open(environ, "wb") as w:  # blocks until the second pass opens it
            w.write(b"KIMI_OPS_RUN_DIR=/srv/kimi\0")

    writer = threading.Thread(target=answer_later, daemon=True)
    writer.start()
    listing, _ = run(tmp_path, timeout=3)
    writer.join(timeout=30)
    (proc,) = listing.procs
    assert not proc.unread and proc.argv == ARGV
    assert proc.env == (("KIMI_OPS_RUN_DIR", "/srv/kimi"),)


def test_a_listing_that_cannot_read_any_process_says_it_is_incomplete(tmp_path: Path) -> None:
    fake_proc(tmp_path, 301)
    fake_proc(tmp_path, 302)
    block(tmp_path / "301" / "stat")  # the pass blocks before it names the process
    text = raw(tmp_path, timeout=1)
    assert parse_listing(text).incomplete_from == ""
    with pytest.raises(StepFailed) as info:
        read_listing(text, step="kill-stale")
    assert "stopped before reading every process" in str(info.value)
    assert "D state" in info.value.hint


def test_without_coreutils_timeout_the_listing_is_one_plain_pass(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    root = tmp_path / "proc"
    root.mkdir()
    for pid in (11, 12):
        fake_proc(root, pid)
    listing, _ = run(root, env={"PATH": str(bin_dir)})
    assert [p.argv for p in listing.procs] == [ARGV, ARGV]


# --- what the decisions make of an unread process ----------------------------------------------


def test_a_pid_listed_twice_keeps_its_last_row() -> None:
    """A pass killed after printing a row: the retry lists that PID again."""
    first = Proc(5, 1, 5, ("old",), 5, (), "S")
    again = Proc(5, 1, 5, ARGV, 5, OURS, "S")
    text = f"self_pid=1\n{format_row(first)}\n\n{format_row(again)}\n"
    assert parse_listing(text).procs == (again,)
    unread = Proc(6, 1, 6, (), 6, None, "D", unread=True)
    assert parse_listing(format_row(unread)).procs == (unread,)


def test_an_unread_process_in_our_session_is_ours_and_one_outside_is_reported() -> None:
    server = Proc(100, 1, 100, ARGV, 100, OURS)
    in_session = Proc(101, 100, 100, (), 100, None, "D", unread=True)
    elsewhere = Proc(400, 1, 400, (), 400, None, "D", unread=True)
    sel = owned_processes(Listing((server, in_session, elsewhere), 900), "/srv/kimi")
    assert sel.pids == [100, 101]
    assert "not read in time" in sel.reasons[101]
    (line,) = sel.describe_foreign()
    assert line.startswith("left alone: 400 (") and "did not answer" in line
    assert not line.endswith(": ")


def test_a_target_unread_or_not_reached_now_still_counts_as_running() -> None:
    server = Proc(100, 1, 100, ARGV, 100, OURS)
    sel = owned_processes(Listing((server,), 900), "/srv/kimi")
    stuck = Proc(100, 1, 100, (), 100, None, "D", unread=True)
    assert still_running(sel, Listing((stuck,), 900)) == [server]
    assert still_running(sel, Listing((), 900, incomplete_from="")) == [server]
    assert still_running(sel, Listing((), 900)) == []


def test_kill_stale_names_the_unread_process_it_left_alone() -> None:
    server = Proc(100, 1, 100, tuple(SERVER.split()), 100, OURS)
    stuck = Proc(400, 1, 400, (), 400, None, "D", unread=True)
    conn = ScriptedConnection()
    conn.on(LIST_CMD, Reply(_rows(server, stuck, self_pid=900)), Reply(_rows(stuck, self_pid=901)))
    conn.on(r"kill -TERM", stdout="sent 100\n")
    clock = FakeClock()
    res = steps.kill_stale(_host(conn), PROFILE, sleep=clock.sleep, clock=clock)
    assert res.data["pids"] == [100] and res.data["left_alone"] == [400]
    assert any(ln.startswith("left alone: 400 (its command line") for ln in res.lines)


def test_kill_stale_fails_on_an_incomplete_listing_and_ends_nothing() -> None:
    conn = ScriptedConnection()
    conn.on(LIST_CMD, stdout=_rows(self_pid=900) + "listing_incomplete=4711\n")
    with pytest.raises(StepFailed) as info:
        steps.kill_stale(_host(conn), PROFILE)
    assert info.value.step == "kill-stale" and "PID 4711" in str(info.value)
    assert "for d in /proc/" in info.value.command
    assert not conn.ran(r"kill -")


def test_a_pidfile_server_whose_command_line_did_not_answer_is_not_taken_for_gone() -> None:
    values = {"pid": "100", "pf_stat": "D 5000", "pf_unread": "1", "pf_boot": "1000"}
    values |= {"pf_hz": "100", "pf_mtime": "1060"}  # started at 1050, before its pidfile
    found = parse_pidfile_process(values)
    assert found.alive and found.unread and found.argv == ()
    assert found.server_alive("/srv/kimi") and not found.ended("/srv/kimi")
    assert found.owner_pid("/srv/kimi") == 100
    reused = parse_pidfile_process(values | {"pf_mtime": "900"})  # started after the pidfile
    assert reused.ended("/srv/kimi") and not reused.server_alive("/srv/kimi")


def test_the_pidfile_reads_of_a_live_process_print_its_argv(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    pidfile.write_text(f"{os.getpid()}\n")
    out = subprocess.run(
        ["bash", "-c", read_pidfile_command(str(pidfile))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = parse_pidfile_process(parse_key_values(out.stdout))
    assert found.pid == os.getpid() and found.alive and not found.unread
    assert found.argv and "python" in found.argv[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's process dir needs root")
def test_another_users_process_has_no_environment_read(tmp_path: Path) -> None:
    """Red team round 2: a decoy of another user (`runuser -u nobody -- env
    KIMI_OPS_RUN_DIR=<ours> ...`) was taken for this deployment's (kill-stale signalled it,
    launch refused, status said orphans): root reads any environment. kimi-ops never launches
    as another user, so such a process's environment is not read and it is never ours."""
    fake_proc(tmp_path, 100)
    other = fake_proc(tmp_path, 200)
    os.chown(other, 65534, 65534)
    listing, _ = run(tmp_path)
    procs = {p.pid: p for p in listing.procs}
    assert procs[100].getenv("KIMI_OPS_RUN_DIR") == "/srv/kimi"
    assert procs[200].env is None and procs[200].argv == tuple(ARGV)
