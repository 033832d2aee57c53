"""Task-level tests on a scripted connection: the commands issued and each failure's handling."""

from __future__ import annotations

import base64
import hashlib
import re

import paramiko
import pytest
from invoke import Config, Context
from invoke.exceptions import Exit

from kimi_ops.errors import RemoteKilled, StepFailed
from kimi_ops.procs import Proc, format_row
from kimi_ops.profile import load_profile
from kimi_ops.result import Status, clip
from tasks import steps
from tasks.host import AcceptNewPolicy, Host
from tasks.report import Reporter
from tasks.session import session
from tasks.testing import Reply, ScriptedConnection

PROFILE = load_profile({"run_dir": "/srv/kimi", "grace_seconds": 2, "poll_interval": 0.01})
SERVER = "/root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server --model /m --port 8000"
OURS = (("KIMI_OPS_RUN_DIR", "/srv/kimi"), ("KIMI_OPS_LAUNCH_ID", "L1"))


def _rows(*procs: Proc, self_pid: int) -> str:
    return f"pidfile=100\nlaunch_id=L1\nself_pid={self_pid}\n" + "".join(
        format_row(p) + "\n" for p in procs
    )


INIT = Proc(1, 0, 1, ("/sbin/init",), 1)
TAIL = Proc(300, 1, 300, ("tail", "-f", "/srv/kimi/current.log"), 300)
LISTING = _rows(
    INIT,
    Proc(50, 1, 50, ("sshd: root@notty",), 50),
    Proc(900, 50, 900, ("bash", "-c", "cat /srv/kimi/server.pid; ps"), 900),
    Proc(100, 1, 100, tuple(SERVER.split()), 100, OURS),
    Proc(101, 100, 100, ("VLLM::EngineCore",), 100, OURS),
    TAIL,
    self_pid=900,
)
GONE = _rows(INIT, TAIL, self_pid=901)
LIST_CMD = r"for d in /proc/"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _host(conn: ScriptedConnection, profile=PROFILE) -> Host:
    return Host(conn, profile)  # type: ignore[arg-type]


def test_kill_stale_terms_the_server_tree_only_and_never_pkills() -> None:
    conn = ScriptedConnection()
    conn.on(LIST_CMD, Reply(LISTING), Reply(GONE))
    conn.on(r"kill -TERM", stdout="sent 100\nsent 101\n")
    clock = FakeClock()
    res = steps.kill_stale(_host(conn), PROFILE, sleep=clock.sleep, clock=clock)
    assert res.status is Status.CHANGED
    assert res.data["pids"] == [100, 101] and res.data["killed"] == []
    (term,) = conn.ran(r"kill -TERM")
    assert re.search(r"for p in 100 101;", term)
    assert not conn.ran(r"kill -KILL")
    assert not conn.ran(r"pkill|killall")


def test_kill_stale_escalates_to_sigkill_after_the_grace_period() -> None:
    conn = ScriptedConnection()
    conn.on(LIST_CMD, *[Reply(LISTING)] * 15, Reply(GONE))
    conn.on(r"kill -TERM", stdout="sent 100\nsent 101\n")
    conn.on(r"kill -KILL", stdout="sent 100\nsent 101\n")
    clock = FakeClock()
    res = steps.kill_stale(_host(conn), PROFILE, sleep=clock.sleep, clock=clock)
    assert res.status is Status.CHANGED and res.data["killed"] == [100, 101]
    assert clock.now >= PROFILE.grace_seconds
    assert "SIGKILL to 2" in res.message


def test_kill_stale_with_nothing_running_is_ok() -> None:
    conn = ScriptedConnection().on(LIST_CMD, stdout=GONE)
    res = steps.kill_stale(_host(conn), PROFILE)
    assert res.status is Status.OK and "no process of this deployment" in res.message
    assert not conn.ran(r"kill -")


def test_a_remote_shell_killed_by_a_signal_is_reported_as_such() -> None:
    conn = ScriptedConnection().on(LIST_CMD, exited=-1)
    with pytest.raises(RemoteKilled) as info:
        steps.kill_stale(_host(conn), PROFILE)
    assert info.value.exited == -1
    assert "killed its own session" in info.value.hint
    assert "for d in /proc/" in info.value.command


def test_a_failing_command_names_the_step_command_and_stderr() -> None:
    conn = ScriptedConnection().on(r"mkdir -p", stderr="mkdir: Permission denied\n", exited=1)
    with pytest.raises(StepFailed) as info:
        steps.upload_script(_host(conn), PROFILE)
    err = info.value
    assert err.step == "upload-script" and err.exited == 1
    assert "mkdir -p -m 700 /srv/kimi" in err.command
    assert "Permission denied" in err.stderr and "cannot create run_dir /srv/kimi" in str(err)
    assert "kimi.run_dir" in err.hint


def test_upload_script_is_atomic_checked_and_idempotent() -> None:
    conn = ScriptedConnection()
    conn.on(r"sha256sum -c", stdout="")
    secrets = {"VLLM_API_KEY": "sk-very-secret"}
    res = steps.upload_script(_host(conn), PROFILE, secrets_env=secrets)
    assert res.status is Status.CHANGED
    sftp = conn.sftp()
    tmp_script = next(p for p in sftp.files if "launch.sh" in p)
    assert tmp_script.startswith("/srv/kimi/.launch.sh.kimi-ops-") and tmp_script.endswith(".tmp")
    assert sftp.modes[tmp_script] == 0o700
    env_tmp = next(p for p in sftp.files if "server.env" in p)
    assert sftp.modes[env_tmp] == 0o600
    assert sftp.files[env_tmp] == b"export VLLM_API_KEY=sk-very-secret\n"
    (swap,) = conn.ran(r"sha256sum < .* && mv -f -- ")  # one round trip for all
    assert swap.count("mv -f -- ") == len(sftp.files)
    assert not any("sk-very-secret" in c for c in conn.commands)  # never on a command line
    # Second run: the host already has these bytes -> nothing uploaded.
    files = steps.upload_files(PROFILE, secrets_env=secrets)
    listing = "".join(
        f"{hashlib.sha256(data).hexdigest()}  /srv/kimi/{name}\n"
        for name, (data, _) in files.items()
    )
    again = ScriptedConnection().on(r"sha256sum /srv", stdout=listing + "@@script\n")
    res2 = steps.upload_script(_host(again), PROFILE, secrets_env=secrets)
    assert res2.status is Status.OK and "up to date" in res2.message
    assert again.sftp().files == {}


def test_a_failed_checksum_leaves_the_previous_script() -> None:
    conn = ScriptedConnection()
    conn.on(r"sha256sum <", exited=1)
    with pytest.raises(StepFailed, match="previous files are unchanged"):
        steps.upload_script(_host(conn), PROFILE)
    (swap,) = conn.ran(r"sha256sum <")
    assert " mv -f -- " in swap and "|| { rm -f -- " in swap


def test_launch_that_never_started_names_what_is_missing() -> None:
    conn = ScriptedConnection()
    conn.on(r"setsid nohup", stdout="pid=4242\n")
    conn.on(
        r"stat= -p 4242",
        stdout="alive=0\nlogfile=1\npidfile=\n@@log\nkimi-ops: the profile's python is not an "
        "executable file: /nope/python3\n",
    )
    res = steps.launch(_host(conn), PROFILE, sleep=lambda s: None)
    assert res.failed
    assert "never started: process 4242 missing" in res.message
    assert any("not an executable file" in line for line in res.lines)


def test_launch_reports_pid_and_log() -> None:
    conn = ScriptedConnection()
    conn.on(r"setsid nohup", stdout="pid=4242\n")
    conn.on(r"stat= -p 4242", stdout="alive=1\nlogfile=1\npidfile=4242\n@@log\n")
    res = steps.launch(_host(conn), PROFILE, sleep=lambda s: None)
    assert res.status is Status.CHANGED
    assert res.data["pid"] == 4242 and res.data["log"].startswith("/srv/kimi/logs/")
    (cmd,) = conn.ran("setsid nohup")
    assert "< /dev/null" in cmd and "\n" not in cmd


def _poll(pid: int | None, alive: bool, size: int, chunk: str) -> Reply:
    head = f"pid={pid or ''}\n" + (f"args={SERVER}\n" if alive else "")
    read = len(chunk.encode())
    encoded = base64.b64encode(chunk.encode()).decode()  # the poll sends the bytes in base64
    return Reply(f"{head}size={size}\nread={read}\n@@log\n{encoded}")


READY_LOG = (
    "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    "INFO 12-02 10:00:05 [launcher.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
)


def test_verify_is_ready_only_after_the_chat_completion_answers() -> None:
    conn = ScriptedConnection()
    conn.on(
        r"@@log",
        _poll(7, True, 0, ""),
        _poll(7, True, len(READY_LOG), READY_LOG),
        _poll(7, True, len(READY_LOG), ""),
    )
    conn.on(
        r"kimi_probe\.py",
        Reply(
            '{"health": 200, "models_status": 200, "models": ["kimi-k2.5"], "chat_status": 503,'
            ' "answer": "", "error": "POST answered 503"}'
        ),
        Reply(
            '{"health": 200, "models_status": 200, "models": ["kimi-k2.5"], "chat_status": 200,'
            ' "answer": "Hi", "error": ""}'
        ),
    )
    clock = FakeClock()
    res = steps.verify(_host(conn), PROFILE, Reporter(quiet=True), sleep=clock.sleep, clock=clock)
    assert res.status is Status.OK and "ready" in res.message
    assert len(conn.ran(r"kimi_probe\.py")) == 2
    # Only new bytes are read: the second poll starts where the first stopped.
    offsets = [int(m) for c in conn.ran(r"@@log") for m in re.findall(r"tail -c \+(\d+)", c)]
    assert offsets[:3] == [1, 1, len(READY_LOG) + 1]


def _poll_launch(chunk: str, size: int, launch_id: str = "L1") -> Reply:
    encoded = base64.b64encode(chunk.encode()).decode()
    head = f"pid=7\nargs={SERVER}\nlaunch_id={launch_id}\n"
    return Reply(f"{head}size={size}\nread={len(chunk.encode())}\n@@log\n{encoded}")


ANSWERS = (
    '{"health": 200, "models_status": 200, "models": ["kimi-k2.5"], "chat_status": 200,'
    ' "answer": "Hi", "error": ""}'
)


def test_verify_rechecks_the_lock_before_reporting_ready_and_fails_if_it_was_lost() -> None:
    """The probe answered, but the re-check poll (run through the lock guard like a mutating
    command) finds another run holds the lock: verify fails, it never reports ready."""
    from tasks.lock import LOST, LOST_STATUS, LockGuard

    conn = ScriptedConnection()
    lost = Reply(stderr=f"{LOST} holder=other token=T2 remote_pid=4242\n", exited=LOST_STATUS)
    conn.on(r"@@log", _poll_launch(READY_LOG, len(READY_LOG)), lost)
    conn.on(r"kimi_probe\.py", Reply(ANSWERS))
    host = _host(conn)
    host.guard = LockGuard(host, "/srv/kimi", "T1")
    with pytest.raises(StepFailed) as info:
        steps.verify(
            host, PROFILE, Reporter(quiet=True), sleep=lambda s: None, expect_launch_id="L1"
        )
    assert "lost the deployment lock" in str(info.value)
    first, recheck = conn.ran(r"@@log")
    assert "token=T1" not in first  # the first poll is a read: not guarded
    assert "token=T1" in recheck and recheck.index("token=T1") < recheck.index("@@log")


def test_verify_with_the_lock_held_reports_ready_after_the_recheck() -> None:
    from tasks.lock import LockGuard

    conn = ScriptedConnection()
    conn.on(r"@@log", _poll_launch(READY_LOG, len(READY_LOG)), _poll_launch("", len(READY_LOG)))
    conn.on(r"kimi_probe\.py", Reply(ANSWERS))
    host = _host(conn)
    host.guard = LockGuard(host, "/srv/kimi", "T1")
    res = steps.verify(
        host, PROFILE, Reporter(quiet=True), sleep=lambda s: None, expect_launch_id="L1"
    )
    assert res.status is Status.OK and len(conn.ran(r"@@log")) == 2


def test_verify_reports_a_crash_with_label_evidence_and_hint() -> None:
    crash = (
        "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
        "(EngineCore_DP0 pid=12) NotImplementedError: TritonMLA V1 with FP8 KV cache not yet "
        "supported\n"
    )
    conn = ScriptedConnection().on(r"@@log", _poll(7, False, len(crash), crash))
    res = steps.verify(_host(conn), PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.failed and res.message.startswith("crashed")
    assert res.data["diagnosis"]["label"] == "kv_cache_dtype_unsupported"
    assert "patch-kv-config" in res.hint
    assert any("FP8 KV cache not yet supported" in line for line in res.lines)


def test_verify_says_never_started_when_there_is_no_log_and_no_process() -> None:
    conn = ScriptedConnection().on(r"@@log", Reply("pid=\nsize=-1\nread=0\n@@log\n"))
    res = steps.verify(_host(conn), PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.failed and res.message.startswith("never started")


def test_verify_times_out_naming_the_stage_and_silence() -> None:
    log = "INFO 12-02 10:00:00 [loader.py:1] Starting to load model /m...\n"
    profile = load_profile({"run_dir": "/srv/kimi", "startup_timeout": 30, "poll_interval": 5})
    conn = ScriptedConnection().on(r"@@log", _poll(7, True, len(log), log), _poll(7, True, 0, ""))
    clock = FakeClock()
    res = steps.verify(_host(conn), profile, Reporter(quiet=True), sleep=clock.sleep, clock=clock)
    assert res.failed and res.message.startswith("timed out after 30 s")
    assert "the log last grew" in res.message


def test_profile_errors_stop_before_any_remote_command(capsys: pytest.CaptureFixture) -> None:
    conn = ScriptedConnection()
    conn.config = Config(overrides={"kimi": {"port": 99999}})
    with pytest.raises(Exit) as info, session(conn, step="deploy"):  # type: ignore[arg-type]
        pass
    assert info.value.code == 1
    assert conn.commands == []
    assert "kimi.port" in capsys.readouterr().err


def test_host_keys_are_checked_by_default_and_accept_new_is_opt_in(tmp_path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    strict = ScriptedConnection()
    Host(strict, load_profile({"known_hosts": str(known)}))  # type: ignore[arg-type]
    assert isinstance(strict.client.policy, paramiko.RejectPolicy)
    assert strict.client.loaded == [str(known)]
    relaxed = ScriptedConnection()
    Host(relaxed, load_profile({"known_hosts": str(known), "host_key_policy": "accept-new"}))  # type: ignore[arg-type]
    assert isinstance(relaxed.client.policy, AcceptNewPolicy)


def test_dry_mode_runs_read_only_commands_and_prints_the_rest(capsys) -> None:
    conn = ScriptedConnection().on(LIST_CMD, stdout=LISTING)
    host = Host(conn, PROFILE, dry=True)  # type: ignore[arg-type]
    res = steps.kill_stale(host, PROFILE)
    assert res.status is Status.SKIPPED and "would end 2" in res.message
    assert not conn.ran(r"kill -")


def test_local_context_is_the_local_machine(tmp_path) -> None:
    host = Host(Context(), PROFILE)
    assert not host.remote and host.name == "local"
    out = host.run("echo hello", step="t")
    assert out.stdout == "hello\n"
    assert host.resolve("~/x").endswith("/x") and not host.resolve("~/x").startswith("~")


SHM_USAGE = (
    "dir=/dev/shm\nnow=1000000\n"
    "F\t104857600\t999000\t0\t600\t26\t12\t/dev/shm/psm_theirs\n"
    "F\t32\t999000\t0\t600\t26\t13\t/dev/shm/sem.mp-ours\n"
    "F\t4096\t999000\t0\t600\t26\t14\t/dev/shm/psm_held\n"
    "O\t26\t13\tsem.mp-ours\nO\t26\t14\tpsm_held\n"
    "/proc/777/maps:7f00-7f10 rw-s 00000000 00:1a 12 /dev/shm/psm_theirs\n"
    "/proc/778/maps:7f00-7f10 rw-s 00000000 00:1a 14 /dev/shm/psm_held\n"
)
SHM_CMD = r"^bash -c .*O.t%s.*shm\.owned"


def test_clean_shm_removes_unused_files_and_names_the_kept_ones() -> None:
    conn = ScriptedConnection().on(SHM_CMD, stdout=SHM_USAGE)
    res = steps.clean_shm(_host(conn), PROFILE)
    assert res.status is Status.CHANGED, res
    assert (
        "removed 1 stale shm file(s), 32 B freed; kept 1 in use; left alone 1 not made by this "
        "deployment" in res.message
    )
    assert res.lines[:3] == (
        "removed /dev/shm/sem.mp-ours",
        "kept /dev/shm/psm_held: still in use by PID 778",
        "left alone /dev/shm/psm_theirs: not made by this deployment (never recorded as used "
        "by its server); in use by PID 777",
    )
    (rm,) = conn.ran(r"^rm -f")
    assert rm == "rm -f -- /dev/shm/sem.mp-ours"
    # the record forgets the removed file, keeps the one in use
    (forget,) = conn.ran(r"shm\.owned\.tmp")
    assert "grep -vxF -e '26\t13\tsem.mp-ours' /srv/kimi/shm.owned" in forget
    assert "psm_held" not in forget


def test_clean_shm_leaves_alone_every_file_this_deployment_did_not_record() -> None:
    """Red team 2026-12-06: a hand-made psm_rtorphan in shm_dir, unused and old, was removed."""
    usage = (
        "dir=/dev/shm\nnow=1000000\n"
        "F\t4096\t900000\t0\t600\t26\t20\t/dev/shm/psm_rtorphan\n"
        "F\t4096\t900000\t0\t600\t26\t21\t/dev/shm/psm_rtapp_keep\n"
    )
    conn = ScriptedConnection().on(SHM_CMD, stdout=usage)
    res = steps.clean_shm(_host(conn), PROFILE)
    assert res.status is Status.OK, res
    assert "left alone 2 not made by this deployment" in res.message
    assert any("left alone /dev/shm/psm_rtorphan: not made by" in ln for ln in res.lines)
    assert any("crashed before" in ln for ln in res.lines)  # what was left, and why
    assert not conn.ran(r"^rm ")
    dry = steps.clean_shm(Host(conn, PROFILE, dry=True), PROFILE)  # type: ignore[arg-type]
    assert dry.status is Status.OK and "left alone 2" in dry.message


def test_clean_shm_on_a_missing_shm_dir_says_it_skipped() -> None:
    """Red team 2026-12-06: shm_dir /tmp/rt/nonexist-shm read "ok: no stale shared memory"."""
    profile = load_profile({"run_dir": "/srv/kimi", "shm_dir": "/tmp/rt/nonexist-shm"})
    conn = ScriptedConnection().on(SHM_CMD, stdout="nodir\n")
    res = steps.clean_shm(_host(conn, profile), profile)
    assert res.status is Status.SKIPPED, res
    assert "/tmp/rt/nonexist-shm does not exist" in res.message
    assert not conn.ran(r"^rm ")


def test_clean_shm_fails_when_unreadable_maps_leave_nothing_decidable() -> None:
    usage = SHM_USAGE.replace("/maps:", "/nomaps:") + "U 4242 0\n"
    conn = ScriptedConnection().on(SHM_CMD, stdout=usage)
    res = steps.clean_shm(_host(conn), PROFILE)
    assert res.status is Status.FAILED and "cannot tell whether 2 shm file(s)" in res.message
    assert "run it as root" in res.hint
    kept = [ln for ln in res.lines if ln.startswith("kept ")]
    assert len(kept) == 2 and all("possibly in use: the maps of PID 4242" in ln for ln in kept)
    assert not conn.ran(r"^rm ")
    # deploy's clean-shm (refuse_fails=False) reports the same and goes on.
    res2 = steps.clean_shm(_host(conn), PROFILE, refuse_fails=False)
    assert res2.status is Status.OK and "kept 2" in res2.message


def test_kill_stale_records_the_shm_files_of_what_it_ends_before_it_signals() -> None:
    """A server's files are this deployment's: recorded before kill-stale ends it, so
    clean-shm removes them afterwards (and nothing the server did not use)."""
    held = (
        "dir=/dev/shm\nnow=1000000\n"
        "F\t4096\t999000\t0\t600\t26\t30\t/dev/shm/psm_srv\n"
        "O\t26\t31\tpsm_old\n"
        "/proc/101/maps:7f00-7f10 rw-s 00000000 00:1a 30 /dev/shm/psm_srv\n"
    )
    conn = ScriptedConnection()
    conn.on(LIST_CMD, Reply(LISTING), Reply(GONE))
    conn.on(r"set -- /proc/100 /proc/101;", stdout=held)
    conn.on(r"kill -TERM", stdout="sent 100\nsent 101\n")
    clock = FakeClock()
    res = steps.kill_stale(_host(conn), PROFILE, sleep=clock.sleep, clock=clock)
    assert res.status is Status.CHANGED, res
    order = [c for c in conn.commands if re.search(r"set -- /proc/|>> |kill -TERM", c)]
    assert "set -- /proc/100 /proc/101;" in order[0]
    assert order[1] == "printf '%s\\t%s\\t%s\\n' 26 30 psm_srv >> /srv/kimi/shm.owned"
    assert "kill -TERM" in order[2]


def test_a_long_tool_message_keeps_its_reason_in_a_report() -> None:
    # mv names both paths first and says why last: deep paths must not cut the why
    deep = "/tmp/" + "d/" * 150
    said = f"mv: cannot move '{deep}.x.tmp' to '{deep}x': Operation not permitted"
    short = clip(said)
    assert len(short) <= 300 and short.startswith("mv: cannot move '/tmp/")
    assert short.endswith("Operation not permitted")
    assert clip("mv: failed") == "mv: failed"
