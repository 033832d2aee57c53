"""Issue 12 (reports that lie): the state a host is in, verify's stopped / replaced verdicts,
the lock guard, and the launcher that printed nothing. Plain data and ScriptedConnection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kimi_ops import hoststate
from kimi_ops.diagnose import diagnose
from kimi_ops.errors import StepFailed
from kimi_ops.hoststate import StateFacts, classify
from kimi_ops.profile import load_profile
from kimi_ops.verify import PollFacts, ProbeResult, VerifyState
from tasks import state as host_state
from tasks import steps
from tasks.host import Host
from tasks.lock import LockGuard
from tasks.testing import ScriptedConnection

HEALTHY = diagnose(
    "INFO 12-02 10:00:05 [launcher.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
)
LOADING = diagnose("INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n")
MARKER = hoststate.StopMarker("L1", "by=root@laptop pid=7 step=stop at=T")


def facts(**kw: object) -> StateFacts:
    base: dict[str, object] = {
        "launch_id": "L1",
        "pid": 100,
        "alive": False,
        "log_exists": True,
        "log_path": "/srv/kimi/current.log",
        "diagnosis": HEALTHY,
    }
    base.update(kw)
    return StateFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "state"),
    [
        ({"alive": True, "answered": True}, "serving"),
        ({"alive": True, "answered": False, "diagnosis": LOADING}, "starting"),
        ({"alive": True, "answered": False}, "unresponsive"),
        ({"stop": MARKER}, "stopped"),
        ({"launch_id": None}, "stopped"),
        ({}, "crashed"),  # healthy log, gone, no stop marker for this launch
        ({"stop": hoststate.StopMarker("L0", "x")}, "crashed"),  # the marker is an older launch's
        ({"log_exists": False}, "crashed"),
        ({"orphans": (201, 202)}, "orphans"),
    ],
)
def test_each_state_has_its_own_code(kw: dict[str, object], state: str) -> None:
    got = classify(facts(**kw))
    assert got.state == state, got
    assert got.code == hoststate.STATE_CODES[state]
    assert (got.code == 0) == (state == "serving")


#: The real CPU engine (vLLM 0.32.0) after an operator's SIGTERM to the API server alone.
SIGTERM_STOP = diagnose(
    (
        Path(__file__).parent / "fixtures/corpus/logs/healthy__b004_cpu_sigterm_graceful_stop.log"
    ).read_text()
)


def test_a_graceful_signal_stop_outside_kimi_ops_is_stopped_not_crashed() -> None:
    """Issue 11/13: `kill PID` by an operator: healthy, then stopped; status exits 4, not 5."""
    assert (SIGTERM_STOP.label, SIGTERM_STOP.lifecycle) == ("healthy", "stopped")
    got = classify(facts(diagnosis=SIGTERM_STOP))
    assert (got.state, got.code) == ("stopped", 4), got
    assert "outside kimi-ops" in got.message
    # a live process with that log is not "stopped" (it is still up or shutting down)
    assert classify(facts(diagnosis=SIGTERM_STOP, alive=True, answered=True)).state == "serving"
    # the same launch with its log gone: no evidence of a stop, so still crashed
    assert classify(facts(diagnosis=SIGTERM_STOP, log_exists=False)).state == "crashed"


def test_verify_after_a_graceful_signal_stop_says_stopped() -> None:
    text = (
        Path(__file__).parent / "fixtures/corpus/logs/healthy__b004_cpu_sigterm_graceful_stop.log"
    ).read_text()
    verdict = _state().feed_poll(_poll(read=len(text), chunk=text, log_size=len(text)), 1.0)
    assert verdict.state == "stopped", verdict
    assert "outside kimi-ops" in verdict.message and "dmesg" not in verdict.diagnosis.hint


def test_state_codes_are_distinct_and_not_the_tool_failure_code() -> None:
    codes = list(hoststate.STATE_CODES.values())
    assert len(set(codes)) == len(codes) and 1 not in codes and 130 not in codes


def test_the_stop_marker_round_trips_and_is_written_only_while_the_server_lives(
    tmp_path: Path,
) -> None:
    (tmp_path / "launch.id").write_text("20261202T130501-94d622\n")
    (tmp_path / "server.pid").write_text("999999\n")  # not alive
    cmd = hoststate.stop_marker_command(str(tmp_path), "by=a@b step=stop at=T")
    subprocess.run(["bash", "-c", cmd], check=True)
    assert not (tmp_path / hoststate.STOP_MARKER).exists()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "server.pid").write_text(f"{sleeper.pid}\n")
        subprocess.run(["bash", "-c", cmd], check=True)
    finally:
        sleeper.kill()
        sleeper.wait()
    marker = hoststate.parse_stop_marker((tmp_path / hoststate.STOP_MARKER).read_text())
    assert marker == hoststate.StopMarker("20261202T130501-94d622", "by=a@b step=stop at=T")


def test_a_stop_record_that_cannot_be_written_fails_and_leaves_no_temp_file(
    tmp_path: Path,
) -> None:
    """Red team round 4 #3: a full run_dir (the temp name is a link to /dev/full: ENOSPC) or a
    rename that fails (a directory in the record's place) made `stop` say nothing and leave
    stopped.launch.tmp behind; the command now exits 1 with the reason, the temp file gone."""
    (tmp_path / "launch.id").write_text("L1\n")
    cmd = hoststate.stop_marker_command(str(tmp_path), "by=a@b step=stop at=T")
    tmp = tmp_path / (hoststate.STOP_MARKER + ".tmp")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "server.pid").write_text(f"{sleeper.pid}\n")
        tmp.symlink_to("/dev/full")
        full = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        assert full.returncode == 1 and "No space left on device" in full.stderr, full
        assert not tmp.is_symlink() and not tmp.exists()
        assert not (tmp_path / hoststate.STOP_MARKER).exists()
        (tmp_path / hoststate.STOP_MARKER).mkdir()
        taken = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        assert taken.returncode == 1 and "cannot overwrite directory" in taken.stderr, taken
        assert not tmp.exists() and not any((tmp_path / hoststate.STOP_MARKER).iterdir())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_mark_stopping_says_why_the_record_was_not_written() -> None:
    from tests.test_liveserver import LEADER, LIST, PROFILE, RESTORE, _host, _rows

    conn = ScriptedConnection()
    conn.on(r"^pid=\$\(head -n 1", stdout="pid=\n")
    conn.on(
        r"stopped\.launch",
        stderr="bash: line 1: printf: write error: No space left on device\n",
        exited=1,
    )
    conn.on(LIST, stdout=_rows(LEADER))
    conn.on(RESTORE, stdout="restore=not_owned\netime=05:00\n")
    said = host_state.mark_stopping(_host(conn), PROFILE, step="stop")
    assert said == (
        f"could not record the stop in {PROFILE.run_dir}/stopped.launch: No space left on "
        "device; status will not know that kimi-ops ended this launch (it reads as crashed, or "
        "as stopped outside kimi-ops)"
    ), said


def _poll(**kw: object) -> PollFacts:
    base: dict[str, object] = {
        "pid": 100,
        "alive": False,
        "log_size": 100,
        "read": 0,
        "chunk": "",
        "launch_id": "L1",
    }
    base.update(kw)
    return PollFacts(**base)  # type: ignore[arg-type]


def _state(expected: str | None = None) -> VerifyState:
    return VerifyState("kimi-k2.5", 60, 30, expected_launch_id=expected)


def test_verify_after_a_clean_stop_says_stopped_not_oom() -> None:
    v = _state()
    chunk = "INFO:     Application startup complete.\n"
    verdict = v.feed_poll(
        _poll(read=len(chunk), chunk=chunk, stop="launch_id=L1 by=root@laptop step=stop"), 1.0
    )
    assert verdict.state == "stopped" and "step=stop" in verdict.message
    assert "dmesg" not in verdict.diagnosis.hint and "OOM" not in verdict.diagnosis.hint


def test_verify_fails_when_another_launch_replaced_its_own() -> None:
    v = _state(expected="L1")
    verdict = v.feed_poll(_poll(alive=True, launch_id="L2"), 1.0)
    assert verdict.state == "replaced" and "L1" in verdict.message and "L2" in verdict.message
    assert not verdict.ok


def test_verify_with_a_deleted_log_checks_over_http_and_names_the_log() -> None:
    v = _state()
    alive = v.feed_poll(_poll(alive=True, log_size=-1), 1.0)
    assert alive.state == "waiting" and alive.probe_due and "missing" in alive.message
    assert v.feed_probe(ProbeResult(200, ("kimi-k2.5",), 200, 200, "Hi"), 1.5).ok
    gone = _state().feed_poll(_poll(alive=False, log_size=-1), 1.0)
    assert gone.state == "crashed" and "missing (deleted?)" in gone.message


def test_a_server_gone_with_a_log_that_names_no_error_is_not_headed_healthy() -> None:
    # (red team, 2026-12-05: a server killed with kill -9 after ready was headed "the server
    # exited: healthy: server up")
    v = _state()
    chunk = "INFO:     Application startup complete.\n"
    assert v.feed_poll(_poll(alive=True, read=len(chunk), chunk=chunk), 1.0).state == "waiting"
    gone = v.feed_poll(_poll(alive=False), 2.0)
    assert gone.state == "crashed" and not gone.ok
    assert gone.message.startswith("the server exited: its log names no error"), gone.message
    assert "OOM" in gone.diagnosis.hint  # (the silent-death hint: a signal or the OOM killer)


def test_a_refused_connection_is_not_called_up_but_not_ready() -> None:
    refused = ProbeResult(error="http://127.0.0.1:8000/health: [Errno 111] Connection refused")
    verdict = _state().feed_probe(refused, 1.0)
    assert "up but not ready" not in verdict.message and "Connection refused" in verdict.message


PROFILE = load_profile({"run_dir": "/srv/kimi"})


def test_the_lock_guard_wraps_mutating_commands_and_stops_when_the_lock_is_lost() -> None:
    conn = ScriptedConnection()
    conn.on(r"^\{ kimi_h=.*rm -f x", exited=75, stderr="@@kimi-ops-lock-lost: pid=9 token=zz\n")
    host = Host(conn, PROFILE)  # type: ignore[arg-type]
    host.guard = LockGuard(host, "/srv/kimi", "abc")
    host.run("cat /srv/kimi/server.pid", step="x", mutating=False)
    assert conn.commands[-1] == "cat /srv/kimi/server.pid"  # reads are not guarded
    with pytest.raises(StepFailed) as exc:
        host.run("rm -f x", step="kill-stale")
    assert "lost the deployment lock" in exc.value.message and "token=zz" in exc.value.message
    assert "token=abc " in conn.commands[-1]


def test_a_launcher_that_printed_nothing_never_points_at_output_above() -> None:
    conn = ScriptedConnection()
    conn.on(r"setsid nohup", stdout="pid=4242\n")
    conn.on(r"stat= -p 4242", stdout="alive=0\nlogfile=1\npidfile=\n@@log\n")
    res = steps.launch(Host(conn, PROFILE), PROFILE, sleep=lambda s: None)  # type: ignore[arg-type]
    assert res.failed and "above" not in res.hint
    assert res.lines and "printed nothing" in res.lines[0] and "df -h /srv/kimi" in res.hint


def test_status_help_lists_every_state_code() -> None:
    from tasks.cli import status

    for state, code in hoststate.STATE_CODES.items():
        assert f"{code} {state}: " in (status.__doc__ or "")


def test_diagnose_prints_the_label_once(capsys: pytest.CaptureFixture[str]) -> None:
    from kimi_ops.diagnose import LogDiagnoser
    from tasks.cli import print_diagnosis

    d = LogDiagnoser()
    d.feed("INFO:     Application startup complete.\n")
    print_diagnosis(d.diagnosis(), False, "vllm.log")
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("vllm.log: healthy: ") and "healthy: healthy" not in first


def test_deploy_verify_rechecks_the_launch_after_the_answer_came_from_the_port() -> None:
    """The chat answered, but by then another run's launch is current: not this run's ready."""
    from tasks.report import Reporter
    from tasks.testing import Reply

    server = "/root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server --port 8000"
    log = "INFO:     Application startup complete.\n"

    def poll(launch: str, chunk: str) -> Reply:
        return Reply(
            f"pid=7\nlaunch_id={launch}\nstop=\nargs={server}\nsize={len(log)}\n"
            f"read={len(chunk)}\n@@log\n{chunk}"
        )

    conn = ScriptedConnection()
    conn.on(r"@@log", poll("L1", log), poll("L2", ""))
    conn.on(
        r"kimi_probe\.py",
        stdout='{"health": 200, "models_status": 200, "models": ["kimi-k2.5"], '
        '"chat_status": 200, "answer": "Hi", "error": ""}',
    )
    profile = load_profile({"run_dir": "/srv/kimi", "poll_interval": 0.01})
    res = steps.verify(
        Host(conn, profile),  # type: ignore[arg-type]
        profile,
        Reporter(quiet=True),
        sleep=lambda s: None,
        expect_launch_id="L1",
    )
    assert res.failed and "launch L2 replaced it" in res.message, res
