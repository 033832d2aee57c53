"""Issue 12, "Reports that lie": every report says the state the host is really in.

Real `fab` command line, real sshd on 127.0.0.1, the stand-in engine (it EMULATES vLLM; no model).
Processes are ended only by PID, and only ones this test started (the servers its deploys
launched, the lock holder its sshd runs, a decoy it spawned).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .deployment import Deployment, make_deployment
from .harness import (
    REPO_ROOT,
    SshdHost,
    base_config,
    deep_merge,
    fab_executable,
    fab_host_args,
    kill_pid_tree_started_by_test,
    pid_alive,
    run_fab,
)

pytestmark = pytest.mark.e2e

#: `fab status` exit codes: a documented contract (README, `fab status --help`), so spelled out
#: here rather than imported from the code under test.
STATE_CODES = {"serving": 0, "starting": 3, "stopped": 4, "crashed": 5, "orphans": 6}


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until(pred, timeout: float = 20.0, step: float = 0.05) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


class Background:
    """A `fab` run in the background (its own process group), output in a file."""

    def __init__(self, dep: Deployment, *args: str, **kimi: object) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kimi-e2e-bg-"))
        cfg = self.dir / "fab-config.json"
        cfg.write_text(json.dumps(dep.config(**kimi), default=str))
        self.out = self.dir / "out.txt"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [str(fab_executable()), *fab_host_args(dep.sshd), "-f", str(cfg), *args]
        with open(self.out, "w") as fh:
            self.proc = subprocess.Popen(
                cmd,
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # a shell that ran the suite in the background handed it SIGINT ignored, and
                # exec keeps that: fab would never see the Ctrl-C these tests send
                preexec_fn=_default_sigint,
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextlib.contextmanager
def background(dep: Deployment, *args: str, **kimi: object) -> Iterator[Background]:
    bg = Background(dep, *args, **kimi)
    try:
        yield bg
    finally:
        bg.close()
        dep.remember_server()


def holder_pid(dep: Deployment, step: str = "deploy") -> int | None:
    """The remote lock holder's PID (our sshd's session child), from the lock's holder file."""
    try:
        text = (dep.run_dir / "kimi-ops.lock.holder").read_text()
    except OSError:
        return None
    m = re.search(r"step=(\S+) .*remote_pid=(\d+)", text)
    if m is None or m.group(1) != step or not pid_alive(int(m.group(2))):
        return None
    return int(m.group(2))


def status_line(run_output: str) -> str:
    return next(ln for ln in run_output.splitlines() if " status: " in ln)


# --- 1, 2: status states with exit codes; verify after stop ---------------------------------


def test_status_says_serving_stopped_crashed_with_distinct_codes(dep: Deployment) -> None:
    none = dep.fab("status")
    assert none.returncode == STATE_CODES["stopped"], none.describe()
    assert "nothing was ever launched" in none.output

    assert dep.fab("deploy").ok
    serving = dep.fab("status")
    assert serving.returncode == 0 and "serving:" in status_line(serving.output), serving.describe()

    stop = dep.fab("stop")
    assert stop.ok, stop.describe()
    stopped = dep.fab("status")
    assert stopped.returncode == STATE_CODES["stopped"], stopped.describe()
    assert "stopped:" in status_line(stopped.output) and "step=stop" in stopped.output
    assert not status_line(stopped.output).startswith("ok:")
    # 2: verify after a clean stop reads as stopped, not as a crash with an OOM hint.
    verify = dep.fab("verify")
    assert verify.returncode != 0, verify.describe()
    assert "stopped" in verify.output and "dmesg" not in verify.output, verify.describe()
    assert "OOM" not in verify.output

    assert dep.fab("deploy").ok
    server = dep.pidfile_pid()
    assert server is not None
    kill_pid_tree_started_by_test(server, crash=True)  # SIGKILL without kimi-ops: a crash
    crashed = dep.fab("status")
    assert crashed.returncode == STATE_CODES["crashed"], crashed.describe()
    assert "crashed:" in status_line(crashed.output)
    assert "kimi-ops did not" in crashed.output or "without kimi-ops" in crashed.output


def test_a_stop_that_cannot_record_itself_says_so_and_exits_non_zero(dep: Deployment) -> None:
    """Red team round 4 #3: run_dir is a small tmpfs that fills up (ENOSPC) before `fab stop`;
    where this test cannot mount, a directory in the record's place makes its rename fail.
    stop still ends the server, but fails naming the error, leaves no temp file, and what
    status then says is what stop announced."""
    dep.run_dir.mkdir(mode=0o700)
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m,mode=700", "tmpfs", str(dep.run_dir)],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        assert dep.fab("deploy").ok
        server = dep.pidfile_pid()
        assert server is not None
        if mounted:
            with contextlib.suppress(OSError), open(dep.run_dir / "filler", "wb") as fh:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            why = "No space left on device"
        else:
            (dep.run_dir / "stopped.launch").mkdir()
            why = "cannot overwrite directory"
        stop = dep.fab("stop")
        assert stop.returncode == 1, stop.describe()
        line = next(ln for ln in stop.output.splitlines() if " stop: " in ln)
        assert line.startswith("failed:") and "ended " in line, stop.describe()
        assert "could not record the stop in" in line and why in line, line
        assert "status will not know that kimi-ops ended this launch" in line
        assert not (dep.run_dir / "stopped.launch.tmp").exists()
        assert not (dep.run_dir / "stopped.launch").is_file()
        assert not pid_alive(server)
        status = dep.fab("status")
        # what stop announced: not "stopped (by=... step=stop)" (the stand-in shuts down
        # gracefully on SIGTERM, so its log reads as a stop outside kimi-ops)
        assert status.returncode in (STATE_CODES["crashed"], STATE_CODES["stopped"]), status
        assert "step=stop" not in status.output
        assert re.search(r"(outside|without) kimi-ops", status.output), status.describe()
    finally:
        dep.cleanup()
        if mounted:
            subprocess.run(["umount", "-l", str(dep.run_dir)], check=False)


def test_status_says_starting_while_the_server_loads(dep: Deployment) -> None:
    assert dep.fab("patch-kv-config").ok  # the emulated vLLM 0.17.1 on SM120 needs it
    assert dep.fab("upload-script", standin={"load_seconds": 30}).ok
    assert dep.fab("launch", standin={"load_seconds": 30}).ok
    starting = dep.fab("status")
    assert starting.returncode == STATE_CODES["starting"], starting.describe()
    assert "starting:" in status_line(starting.output)


def test_status_names_orphans_of_the_deployment(dep: Deployment) -> None:
    """A process of this deployment (its environment names this run_dir, as the launch script
    sets it) alive after its server is gone: orphans. An unrelated one on the port is not."""
    assert dep.fab("deploy").ok
    server = dep.pidfile_pid()
    launch_id = (dep.run_dir / "launch.id").read_text().strip()
    env = dict(os.environ, KIMI_OPS_RUN_DIR=str(dep.run_dir), KIMI_OPS_LAUNCH_ID=launch_id)
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        assert server is not None
        kill_pid_tree_started_by_test(server, crash=True)
        run = dep.fab("status")
        assert run.returncode == STATE_CODES["orphans"], run.describe()
        assert "orphans:" in status_line(run.output) and str(orphan.pid) in run.output
    finally:
        orphan.kill()
        orphan.wait()
    gone = dep.fab("status")
    assert gone.returncode == STATE_CODES["crashed"], gone.describe()


def test_fleet_status_recap_and_json_carry_the_state(
    dep: Deployment, make_sshd, sshd: SshdHost
) -> None:
    other = make_sshd("127.0.0.2")
    hosts = [sshd, other]
    config = deep_merge(dep.config(), base_config(hosts))
    assert dep.fab("deploy").ok
    up = run_fab(hosts, "status", "--json", config=config)
    assert up.returncode == 0, up.describe()
    assert [h["result"] for h in json.loads(up.stdout)["hosts"]] == ["serving", "serving"]
    assert dep.fab("stop").ok
    down = run_fab(hosts, "status", "--json", config=config)
    assert down.returncode == STATE_CODES["stopped"], down.describe()
    rows = json.loads(down.stdout)["hosts"]
    assert [h["result"] for h in rows] == ["stopped", "stopped"], down.describe()
    table = run_fab(hosts, "status", config=config)
    assert table.returncode == STATE_CODES["stopped"]
    recap = table.stdout[table.stdout.index("RECAP") :]
    assert recap.count("stopped") == 2 and " ok " not in recap, table.describe()


# --- 4: a lost lock stops the run; verify follows only its own launch -------------------------


def test_a_lost_lock_holder_stops_the_deploy_before_it_changes_more(dep: Deployment) -> None:
    with background(dep, "deploy") as run:
        assert wait_until(lambda: holder_pid(dep) is not None), run.text()
        pid = holder_pid(dep)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # as if the SSH channel dropped: the holder dies
        code = run.wait()
        out = run.text()
    assert code != 0, out
    assert "lost the deployment lock" in out, out
    assert "verify: ready" not in out
    assert "launch: started" not in out, out  # stopped before it launched anything


def test_verify_never_follows_a_server_another_run_launched(dep: Deployment) -> None:
    with background(dep, "deploy", standin={"load_seconds": 8}) as first:
        assert wait_until(lambda: "launch: started" in first.text(), 60), first.text()
        pid = holder_pid(dep)
        assert pid is not None, first.text()
        os.kill(pid, signal.SIGKILL)  # the first run's lock is gone (dropped connection)
        second = dep.fab("deploy")  # takes the lock, ends the first server, launches its own
        assert second.ok, second.describe()
        code = first.wait()
        out = first.text()
    assert code != 0, out
    assert "verify: ready" not in out, out
    # which one depends on timing: the second run replaced or ended the first's server, or
    # (when the first server was up before the second run launched) the first run found its
    # lock gone when it proved its launch
    assert any(
        why in out for why in ("replaced it", "ended on purpose", "lost the deployment lock")
    ), out


# --- 5, 6: dry runs decide like real ones; the checkpoint's state is part of "unchanged" ----


def test_dry_deploy_on_an_identical_healthy_server_changes_nothing(dep: Deployment) -> None:
    first = dep.fab("deploy")
    assert first.ok, first.describe()
    plan = [ln.split("plan: ", 1)[1] for ln in first.output.splitlines() if "plan: " in ln]
    assert plan and len(plan) == len(set(plan)), first.describe()  # each plan line once
    server = dep.pidfile_pid()
    dry = dep.fab("deploy", "--dry")
    assert dry.ok, dry.describe()
    assert "nothing changed" in dry.output and "would end" not in dry.output, dry.describe()
    assert dep.pidfile_pid() == server and server is not None and pid_alive(server)


def test_deploy_after_restore_patches_the_checkpoint_again(dep: Deployment) -> None:
    assert dep.fab("deploy").ok
    server = dep.pidfile_pid()
    assert dep.fab("patch-kv-config", "--restore").ok
    assert "kv_cache_scheme" in (dep.model / "config.json").read_text()
    again = dep.fab("deploy")
    assert again.ok, again.describe()
    assert "changed: [" in again.output and "patch-kv-config: removed" in again.output
    assert "kv_cache_scheme" not in (dep.model / "config.json").read_text()
    assert dep.pidfile_pid() == server  # the server (loaded from the patched config) stays


# --- 7: a full run_dir is refused before anything is killed ---------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "kimi-e2e-tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_run_dir_is_refused_before_the_healthy_server_is_ended(
    sshd: SshdHost, tmp_path: Path, small_tmpfs: Path
) -> None:
    (tmp_path / "dep").mkdir()
    d = make_deployment(sshd, tmp_path / "dep")
    run_dir = small_tmpfs / "run"
    try:
        first = d.fab("deploy", run_dir=str(run_dir))
        assert first.ok, first.describe()
        d.started.append(int((run_dir / "server.pid").read_text()))
        server = d.started[-1]
        with contextlib.suppress(OSError), open(small_tmpfs / "filler", "wb") as fh:
            while True:  # fill it up
                fh.write(b"\0" * 4096)
                fh.flush()
        run = d.fab("deploy", "--restart", run_dir=str(run_dir))
        assert run.returncode != 0, run.describe()
        assert "failed: [" in run.output and "preflight" in run.output
        assert re.search(r"only \d+(\.\d)? (B|KiB) free", run.output), run.describe()
        disk = next(line for line in run.output.splitlines() if "disk:" in line)
        assert "MiB" in disk and "0.0 GiB" not in disk, disk
        assert "kill-stale" not in run.output and pid_alive(server)
        assert "see the launcher output above" not in run.output
    finally:
        d.cleanup()


# --- 8: the state now, after a deleted log, a Ctrl-C and a launch that never started --------


def test_a_deleted_log_is_named_and_the_server_still_checked(dep: Deployment) -> None:
    assert dep.fab("deploy").ok
    current = dep.run_dir / "current.log"
    current.resolve().unlink()
    status = dep.fab("status")
    assert status.returncode == 0 and "serving:" in status_line(status.output), status.describe()
    assert "is missing" in status.output
    logs = dep.fab("logs")
    assert logs.returncode != 0 and "the log was deleted" in logs.output, logs.describe()
    assert "nothing has been launched" not in logs.output
    verify = dep.fab("verify")
    assert verify.ok and "ready" in verify.output, verify.describe()
    server = dep.pidfile_pid()
    assert server is not None
    kill_pid_tree_started_by_test(server)
    gone = dep.fab("status")
    assert gone.returncode == STATE_CODES["crashed"], gone.describe()
    assert "missing (deleted?)" in gone.output
    after = dep.fab("verify")
    assert after.returncode != 0 and "never started" not in after.output, after.describe()
    assert "missing (deleted?)" in after.output


def test_ctrl_c_after_the_old_server_was_ended_says_what_runs_now(dep: Deployment) -> None:
    assert dep.fab("deploy").ok
    old = dep.pidfile_pid()
    with background(dep, "deploy", "--restart", standin={"load_seconds": 8}) as run:
        assert wait_until(lambda: "kill-stale: ended" in run.text(), 60), run.text()
        os.killpg(run.proc.pid, signal.SIGINT)  # Ctrl-C to the fab process group we started
        code = run.wait()
        out = run.text()
    assert code == 130, out
    assert old is not None and not pid_alive(old)
    now = next((ln for ln in out.splitlines() if "now: " in ln), "")
    assert now, out
    assert "interrupted after: preflight ok, kill-stale changed" in out, out
    server = dep.pidfile_pid()
    if "is running" in now:
        assert server is not None and server != old and pid_alive(server)
        assert f"PID {server}" in now
    else:
        assert f"nothing serves on port {dep.port}" in now and "stopped" in now, out


def test_a_launch_that_never_started_says_nothing_runs_now(dep: Deployment) -> None:
    missing = str(dep.root / "no-such-env" / "bin" / "python3")
    assert dep.fab("upload-script", python=missing).ok
    launch = dep.fab("launch", python=missing)
    assert launch.returncode != 0 and "never started" in launch.output, launch.describe()
    now = next((ln for ln in launch.output.splitlines() if "now: " in ln), "")
    assert "nothing was ever launched here" in now, launch.describe()
    assert f"nothing serves on port {dep.port}" in now
    assert "see the launcher output above" not in launch.output


# --- r1 F1: an impostor on the port is never this deployment's "ready" / "serving" ----------

#: Answers /health, /v1/models and a chat completion like vLLM: not vLLM, not this deployment.
IMPOSTOR = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def _j(self, obj):
        b = json.dumps(obj).encode(); self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        self._j({"object": "list", "data": [{"id": "kimi-k2.5", "object": "model"}]})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        msg = {"role": "assistant", "content": "IMPOSTOR"}
        self._j({"choices": [{"index": 0, "message": msg}]})
    def log_message(self, *a): pass
srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("up", flush=True); srv.serve_forever()
"""


def test_an_impostor_answering_on_the_port_is_never_ready_or_serving(dep: Deployment) -> None:
    """r1 F1: while the launched server still loads, another process binds its port and answers
    like vLLM. deploy must not say ready (it names the impostor's PID), nor status serving."""
    load = {"load_seconds": 8}
    with background(dep, "deploy", standin=load) as run:
        assert wait_until(lambda: "launch: started" in run.text(), 60), run.text()
        impostor = subprocess.Popen(
            [sys.executable, "-c", IMPOSTOR, str(dep.port)], stdout=subprocess.PIPE
        )
        try:
            assert impostor.stdout is not None and impostor.stdout.readline() == b"up\n"
            code = run.wait()
            out = run.text()
            status = dep.fab("status", standin=load)
        finally:
            impostor.kill()  # by PID: the process this test started
            impostor.wait()
    assert code != 0, out
    assert "verify: ready" not in out and "'IMPOSTOR'" not in out, out
    assert f"PID {impostor.pid}" in out and "something else is listening" in out, out
    # the server still loads (port_taken, 8) or has died of "address already in use" (crashed)
    assert status.returncode in (8, STATE_CODES["crashed"]), status.describe()
    assert "serving" not in status_line(status.output), status.describe()


def test_status_into_a_closed_pipe_still_exits_with_the_state_code(dep: Deployment) -> None:
    """r1 F9: `fab status | head -1` printed a BrokenPipeError traceback and exited 1 ("the
    state could not be read"): a script piping status lost the state's code. Here the reader
    is gone before fab writes a byte (deterministic, unlike a real `head`)."""
    cfg = dep.root / "fab-config.json"
    cfg.write_text(json.dumps(dep.config(), default=str))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has left
    try:
        run = subprocess.run(
            [str(fab_executable()), *fab_host_args(dep.sshd), "-f", str(cfg), "status"],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert run.returncode == STATE_CODES["stopped"], run.stderr  # nothing was ever launched
    assert "Traceback" not in run.stderr and "BrokenPipeError" not in run.stderr, run.stderr


def test_status_calls_a_server_stopped_by_a_signal_stalled_until_it_is_continued(
    dep: Deployment,
) -> None:
    """Red team 2026-12-05: a SIGSTOPped loading server read "starting" forever. Now: stalled
    (exit 9) naming state T and `kill -CONT`; continued, it is starting again. A log silent for
    longer than the profile's stall_timeout is stalled too."""
    assert dep.fab("patch-kv-config").ok
    assert dep.fab("upload-script", standin={"load_seconds": 60}).ok
    assert dep.fab("launch", standin={"load_seconds": 60}).ok
    server = dep.pidfile_pid()
    assert server is not None and server in dep.started  # this test's own launch
    os.kill(server, signal.SIGSTOP)
    try:
        stalled = dep.fab("status")
        assert stalled.returncode == 9, stalled.describe()
        line = status_line(stalled.output)
        assert "stalled:" in line and "state T" in line, stalled.describe()
        assert f"kill -CONT {server}" in stalled.output
    finally:
        os.kill(server, signal.SIGCONT)
    going = dep.fab("status")
    assert going.returncode == STATE_CODES["starting"], going.describe()


def test_status_calls_a_loading_server_whose_log_went_silent_stalled(dep: Deployment) -> None:
    """The stand-in's `hang` goes silent at the weights (a download or load that hangs): with
    the log quiet for longer than the profile's stall_timeout, status says stalled (exit 9)."""
    assert dep.fab("patch-kv-config").ok
    assert dep.fab("upload-script", standin={"hang": True}).ok
    assert dep.fab("launch", standin={"hang": True}).ok
    log = dep.run_dir / "current.log"
    assert wait_until(lambda: "Loading safetensors" in dep.log_text(), timeout=30), dep.log_text()
    patient = dep.fab("status", standin={"hang": True})  # the default stall_timeout, 900 s
    assert patient.returncode == STATE_CODES["starting"], patient.describe()
    assert wait_until(lambda: time.time() - log.stat().st_mtime >= 3, timeout=30)
    stalled = dep.fab("status", standin={"hang": True}, stall_timeout=2)
    assert stalled.returncode == 9, stalled.describe()
    line = status_line(stalled.output)
    assert "stalled:" in line and "has not grown for" in line, stalled.describe()


def test_a_dry_deploy_on_a_fresh_stand_in_host_says_why_it_cannot_check(dep: Deployment) -> None:
    """Red team 2026-12-05: `deploy --dry` on a host without the stand-in failed preflight with
    "can't open file .../kimi_standin.py" (a dry run uploads nothing). Now it says so, changes
    nothing, and names the way on; after `upload-script` the dry deploy runs through."""
    fresh = dep.fab("deploy", "--dry")
    assert fresh.returncode == 1, fresh.describe()
    assert "the stand-in engine is not on the host yet" in fresh.output, fresh.describe()
    assert "fab upload-script" in fresh.output and "can't open file" not in fresh.output
    assert not dep.run_dir.exists()  # nothing was created
    assert dep.fab("upload-script").ok
    dry = dep.fab("deploy", "--dry")
    assert dry.ok, dry.describe()
    assert dep.pidfile_pid() is None  # still nothing launched


def test_a_dry_restart_names_the_shm_files_the_real_one_would_remove(dep: Deployment) -> None:
    """Red team 2026-12-05: `deploy --restart --dry` said clean-shm would keep the running
    server's ring buffers (in use), though the real run removes them once kill-stale has ended
    it. The dry run names them, and which PID holds them now; nothing is removed."""
    assert dep.fab("deploy").ok
    server = dep.pidfile_pid()
    files = sorted(p.name for p in dep.shm_dir.iterdir() if p.name.startswith("psm_"))
    assert files, "the stand-in maps its psm_* files"
    dry = dep.fab("deploy", "--restart", "--dry")
    assert dry.ok, dry.describe()
    line = next(ln for ln in dry.output.splitlines() if "clean-shm" in ln)
    assert "would remove" in line and "once kill-stale has ended their server" in line, line
    for name in files:
        shown = next(ln for ln in dry.output.splitlines() if name in ln)
        assert f"in use now by PID {server}" in shown, shown  # the stand-in's API server maps them
    assert sorted(p.name for p in dep.shm_dir.iterdir() if p.name.startswith("psm_")) == files
    assert server is not None and pid_alive(server)
