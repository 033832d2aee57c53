"""A server that is alive but makes no progress (red team 2026-12-05: a SIGSTOPped server read
"starting" in `fab status` forever). Status and verify call it stalled: at once for a process
stopped by a signal (state T), after the profile's stall_timeout for a log that stopped growing."""

from __future__ import annotations

import base64

from kimi_ops import hoststate, procs
from kimi_ops.diagnose import diagnose
from kimi_ops.hoststate import StateFacts, classify
from kimi_ops.verify import STOPPED_GRACE, PollFacts, VerifyState, parse_poll

LOADING = diagnose("INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n")
UP = diagnose("INFO:     Application startup complete.\n")


def facts(**kw: object) -> StateFacts:
    base: dict[str, object] = {
        "launch_id": "L1",
        "pid": 100,
        "alive": True,
        "answered": False,
        "log_exists": True,
        "log_path": "/srv/kimi/current.log",
        "diagnosis": LOADING,
        "stall_timeout": 900.0,
    }
    base.update(kw)
    return StateFacts(**base)  # type: ignore[arg-type]


def test_a_server_stopped_by_a_signal_while_loading_is_stalled_not_starting() -> None:
    got = classify(facts(stopped=True, log_silent_for=3.0))
    assert (got.state, got.code) == ("stalled", 9), got
    assert "state T" in got.message and "kill -CONT 100" in got.message


def test_a_log_silent_past_stall_timeout_is_stalled_and_below_it_starting() -> None:
    assert classify(facts(log_silent_for=899.0)).state == "starting"
    got = classify(facts(log_silent_for=901.0))
    assert got.state == "stalled" and "901 s" in got.message and "900 s" in got.message, got
    # unknown silence (an old host's output) or no log: no stall claimed from it
    assert classify(facts(log_silent_for=None)).state == "starting"
    assert classify(facts(log_exists=False, log_silent_for=5000.0)).state == "starting"


def test_a_stopped_server_whose_log_says_up_is_unresponsive_and_says_why() -> None:
    got = classify(facts(diagnosis=UP, stopped=True, http="timed out"))
    assert got.state == "unresponsive" and "state T" in got.message, got
    # a fatal error in the log still wins: it is the cause
    failed = diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert classify(facts(diagnosis=failed, stopped=True)).state == "crashed"


def test_stalled_has_its_own_exit_code_and_meaning() -> None:
    codes = list(hoststate.STATE_CODES.values())
    assert hoststate.STATE_CODES["stalled"] == 9 and len(set(codes)) == len(codes)
    assert "state T" in hoststate.STATE_MEANINGS["stalled"]


def _stat_lines(state: str) -> str:
    argv = b"python3\0-m\0vllm.entrypoints.openai.api_server\0--port\x008000\0"
    return (
        "pid=4242\npf_mtime=1000\npf_boot=0\npf_hz=100\n"
        f"pf_stat={state} 100000\npf_argv={base64.b64encode(argv).decode()}\n"
    )


def test_the_pidfile_process_state_letter_is_read() -> None:
    stopped = procs.parse_pidfile_process(
        dict(ln.split("=", 1) for ln in _stat_lines("T").splitlines())
    )
    assert stopped.alive and stopped.stopped and stopped.state == "T"
    running = procs.parse_pidfile_process(
        dict(ln.split("=", 1) for ln in _stat_lines("S").splitlines())
    )
    assert running.alive and not running.stopped
    poll = parse_poll(_stat_lines("t") + "size=10\nread=0\n@@log\n")
    assert poll.alive and poll.stopped


def _poll(stopped: bool) -> PollFacts:
    return PollFacts(
        pid=100, alive=True, log_size=10, read=0, chunk="", launch_id="L1", stopped=stopped
    )


def test_verify_calls_a_server_stopped_past_the_grace_stalled_with_the_way_out() -> None:
    v = VerifyState("kimi-k2.5", 600, 300)
    assert v.feed_poll(_poll(True), 1.0).state == "waiting"
    assert v.feed_poll(_poll(True), 1.0 + STOPPED_GRACE / 2).state == "waiting"
    got = v.feed_poll(_poll(True), 1.0 + STOPPED_GRACE)
    assert got.state == "stalled" and not got.ok, got
    assert "state T" in got.message and "kill -CONT 100" in got.diagnosis.hint


def test_verify_forgets_a_stop_that_was_continued() -> None:
    v = VerifyState("kimi-k2.5", 600, 300)
    v.feed_poll(_poll(True), 0.0)
    v.feed_poll(_poll(False), 5.0)  # continued (a debugger let go, `fg`)
    assert v.feed_poll(_poll(True), 12.0).state == "waiting"  # a new stop: its own grace
    assert v.feed_poll(_poll(True), 12.0 + STOPPED_GRACE).state == "stalled"


def test_the_interrupted_runs_now_line_says_stopping_for_a_server_kimi_ops_signalled() -> None:
    """Red team 2026-12-05: Ctrl-C in kill-stale, SIGTERM sent and the server not yet gone:
    "now: ... is running" read as if nothing had been done to it."""
    marker = hoststate.StopMarker("L1", "by=root@laptop pid=7 step=kill-stale at=T")
    line = hoststate.now_message(facts(stop=marker), 8000)
    assert "is running" not in line and "signalled it to stop" in line, line
    assert "step=kill-stale" in line and "PID 100" in line
    # an older launch's marker says nothing of this one: it is running
    old = hoststate.StopMarker("L0", "by=x step=stop at=T")
    assert "is running" in hoststate.now_message(facts(stop=old), 8000)
    assert "kill -CONT 100" in hoststate.now_message(facts(stopped=True), 8000)
    gone = hoststate.now_message(facts(alive=False, stop=marker), 8000)
    assert gone.startswith("now: stopped:") and "nothing serves on port 8000" in gone, gone
