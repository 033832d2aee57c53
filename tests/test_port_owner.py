"""Red-team r1 F1: verify / status / deploy called an impostor's answer on the port "ready" /
"serving". Ready now needs the process listening on the port to be the launched server's (its
PID, a process below it, or one in its session); another process on the port is a failure that
names it; a listener that cannot be told is said so. Plain data, ScriptedConnection, and the
listener command run for real against a listener this test starts."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kimi_ops import hoststate
from kimi_ops.diagnose import diagnose
from kimi_ops.facts.ports import listeners_command, parse_listeners
from kimi_ops.hoststate import StateFacts, classify
from kimi_ops.procs import Proc, format_row
from kimi_ops.profile import load_profile
from kimi_ops.result import Status
from kimi_ops.verify import ProbeResult, VerifyState, check_port, parse_probe_report
from tasks import steps
from tasks.host import Host
from tasks.report import Reporter
from tasks.state import status
from tasks.testing import Reply, ScriptedConnection

PORT = 8000  # hex 1F40
SERVER = "/root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server --model /m --port 8000"
IMPOSTOR = "/usr/bin/python3 fakevllm.py 8000 ok"
ANSWERS = (
    '{"health": 200, "models_status": 200, "models": ["kimi-k2.5"], "chat_status": 200,'
    ' "answer": "IMPOSTOR", "error": ""}'
)
READY_PROBE = ProbeResult(health=200, models=("kimi-k2.5",), chat_status=200, answer="hi")


def _listen(*rows: str, tables: int = 2) -> str:
    return "@@listen\n" + f"tables={tables}\n" + "".join(r + "\n" for r in rows)


# 127.0.0.1:8000 owned by uid 0, inode 555; the impostor (PID 900, its own session 880) holds it
IMPOSTOR_ON_PORT = _listen("sock 0100007F:1F40 0 555", f"owner 555 900 880 900,880,1 {IMPOSTOR}")
# the server (PID 7, a session leader) holds 0.0.0.0:8000 itself
SERVER_ON_PORT = _listen("sock 00000000:1F40 0 556", f"owner 556 7 7 7,1 {SERVER}")


def test_parse_listeners_reads_sockets_and_owners() -> None:
    got = parse_listeners(
        _listen(
            "sock 00000000000000000000000000000000:1F40 1000 42",
            "owner 42 12 10 12,11,10,1 python3 -m vllm serve m --port 8000",
        ),
        PORT,
    )
    assert got is not None and got.readable
    (sock,) = got.sockets
    assert (sock.address, sock.uid, sock.inode) == ("::", 1000, 42)
    (owner,) = got.owners
    assert (owner.pid, owner.sid, owner.chain) == (12, 10, (12, 11, 10, 1))
    assert owner.args == "python3 -m vllm serve m --port 8000"
    assert parse_listeners("no section here", PORT) is None


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        (SERVER_ON_PORT, "ours"),
        # an API server process below the server (vLLM's --api-server-count) holds it
        (_listen("sock 0100007F:1F40 0 5", "owner 5 31 7 31,7,1 python3 api"), "ours"),
        # re-parented to init, still in the server's session
        (_listen("sock 0100007F:1F40 0 5", "owner 5 31 7 31,1 python3 api"), "ours"),
        (IMPOSTOR_ON_PORT, "foreign"),
        # a socket nobody readable holds (another user's process, as non-root)
        (_listen("sock 0100007F:1F40 1001 5"), "unknown"),
        (_listen(tables=0), "unknown"),  # /proc/net/tcp unreadable
        (_listen(), "unknown"),  # nothing listens on 127.0.0.1:8000 here
        (None, "unknown"),  # no listener facts at all (not checked)
        # a listener on another address is not what the probe reaches
        (
            _listen(
                "sock 0100007F:1F40 0 5",
                "owner 5 7 7 7,1 server",
                "sock 0200007F:1F40 0 6",
                "owner 6 900 880 900,1 other",
            ),
            "ours",
        ),
        # a dual-stack :: socket of another process takes IPv4 connections too
        (_listen("sock " + "0" * 32 + ":1F40 0 6", "owner 6 900 880 900,1 other"), "foreign"),
    ],
)
def test_check_port_tells_whose_socket_answers(text: str | None, verdict: str) -> None:
    listeners = parse_listeners(text, PORT) if text is not None else None
    got = check_port(listeners, 7, PORT, "0.0.0.0")
    assert got.verdict == verdict, got
    if verdict == "unknown":
        assert "unknown" in got.message or "not checked" in got.message


def test_check_port_names_the_foreign_pid_and_its_command() -> None:
    got = check_port(parse_listeners(IMPOSTOR_ON_PORT, PORT), 7, PORT, "127.0.0.1")
    assert got.verdict == "foreign"
    assert "PID 900" in got.message and "fakevllm.py" in got.message and "PID 7" in got.message
    assert "PID 900" in got.hint and "port 8000" in got.hint


def test_verify_state_never_calls_a_foreign_answer_ready() -> None:
    port = check_port(parse_listeners(IMPOSTOR_ON_PORT, PORT), 7, PORT)
    state = VerifyState("kimi-k2.5", 600, 300)
    verdict = state.feed_probe(READY_PROBE, 1.0, port)
    assert verdict.done and not verdict.ok and verdict.state == "port_taken", verdict
    ours = check_port(parse_listeners(SERVER_ON_PORT, PORT), 7, PORT)
    verdict = VerifyState("kimi-k2.5", 600, 300).feed_probe(READY_PROBE, 1.0, ours)
    assert verdict.ok and "PID 7" in verdict.note
    # not checked: still ready on HTTP, but the note says the listener was not checked
    verdict = VerifyState("kimi-k2.5", 600, 300).feed_probe(READY_PROBE, 1.0)
    assert verdict.ok and "not checked" in verdict.note


def test_a_live_server_with_another_process_on_its_port_is_port_taken_not_serving() -> None:
    loading = diagnose("INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n")
    facts = StateFacts(
        launch_id="L1",
        pid=7,
        alive=True,
        log_exists=True,
        log_path="/srv/kimi/current.log",
        diagnosis=loading,
        answered=True,
        port_taken="port 8000 is held by PID 900 (fakevllm.py)",
    )
    got = classify(facts)
    assert got.state == "port_taken" and not got.serving and got.code == 8
    assert "PID 900" in got.message
    assert hoststate.STATE_CODES["port_taken"] not in (0, 1)


def _poll(chunk: str) -> Reply:
    encoded = base64.b64encode(chunk.encode()).decode()
    return Reply(
        f"pid=7\nlaunch_id=L1\nstop=\nargs={SERVER}\nsize={len(chunk)}\n"
        f"read={len(chunk)}\n@@log\n{encoded}"
    )


LOADING_LOG = (
    "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    "INFO 12-02 10:00:05 [launcher.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
)
PROFILE = load_profile({"run_dir": "/srv/kimi", "poll_interval": 0.01})


def test_verify_fails_naming_the_impostor_when_another_process_answers_on_the_port() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@log", _poll(LOADING_LOG), _poll(""))
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + IMPOSTOR_ON_PORT))
    host = Host(conn, PROFILE)  # type: ignore[arg-type]
    res = steps.verify(host, PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.failed, res
    assert res.data["state"] == "port_taken"
    assert "PID 900" in res.message and "fakevllm.py" in res.message
    assert "something else is listening on port 8000" in res.hint
    (probe,) = conn.ran(r"kimi_probe\.py")
    assert "@@listen" in probe and "/proc/net/tcp" in probe  # same round trip as the answer


def test_verify_is_ready_when_the_listener_is_the_server_and_says_so() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@log", _poll(LOADING_LOG), _poll(""))
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + SERVER_ON_PORT))
    host = Host(conn, PROFILE)  # type: ignore[arg-type]
    res = steps.verify(host, PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.status is Status.OK and "ready" in res.message, res
    assert any("held by PID 7" in line for line in res.lines), res.lines


def _gather_reply() -> Reply:
    listing = "self_pid=950\n" + format_row(
        Proc(7, 1, 7, tuple(SERVER.split()), 7, (("KIMI_OPS_RUN_DIR", "/srv/kimi"),))
    )
    return Reply(
        f"pid=7\nlaunch_id=L1\nstop=\netime=00:05\nargs={SERVER}\nlog=1\n@@ps\n{listing}\n"
        f"@@log\n{LOADING_LOG}"
    )


def test_status_says_port_taken_not_serving_when_an_impostor_answers() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@ps", _gather_reply())
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + IMPOSTOR_ON_PORT))
    res, state = status(Host(conn, PROFILE), PROFILE)  # type: ignore[arg-type]
    assert state.state == "port_taken" and state.code == 8, state
    assert res.failed and "PID 900" in res.message and "fakevllm.py" in res.message
    assert "something else is listening" in res.hint
    conn = ScriptedConnection()
    conn.on(r"@@ps", _gather_reply())
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + SERVER_ON_PORT))
    res, state = status(Host(conn, PROFILE), PROFILE)  # type: ignore[arg-type]
    assert state.serving and any("held by PID 7" in line for line in res.lines), res


def test_parse_probe_report_keeps_the_probe_result_apart_from_the_listener_lines() -> None:
    probe, listeners = parse_probe_report(ANSWERS + "\n" + IMPOSTOR_ON_PORT, "", PORT)
    assert probe.ready_for("kimi-k2.5") and listeners is not None and listeners.owners
    probe, listeners = parse_probe_report(ANSWERS + "\n", "", PORT)
    assert probe.ready_for("kimi-k2.5") and listeners is None


@pytest.fixture
def listener() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A process of this test listening on 127.0.0.1:<free port>."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import socket, sys, time; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); print('up', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        yield proc, port
    finally:
        proc.kill()  # by PID: the process this fixture started
        proc.wait()


def test_the_listener_command_finds_the_process_on_the_port_for_real(
    listener: tuple[subprocess.Popen[bytes], int],
) -> None:
    proc, port = listener
    start = time.monotonic()
    out = subprocess.run(["sh", "-c", listeners_command(port)], capture_output=True, text=True)
    assert time.monotonic() - start < 10
    facts = parse_listeners(out.stdout, port)
    assert facts is not None and facts.readable, out
    assert [o.pid for o in facts.owners] == [proc.pid], out.stdout
    # the listener's own PID (a stand-in for the server), and its parent (this test): ours
    assert check_port(facts, proc.pid, port, "127.0.0.1").verdict == "ours"
    assert check_port(facts, os.getpid(), port, "127.0.0.1").verdict == "ours"
    # any other PID as the server: the listener is foreign, named with its command
    other = check_port(facts, 999_999_999, port, "127.0.0.1")
    assert other.verdict == "foreign" and f"PID {proc.pid}" in other.message
    assert "socket.socket()" in other.message


def test_deploy_does_not_call_an_impostors_answer_an_unchanged_running_server() -> None:
    """deploy's "already runs this exact profile and answers: nothing changed" needs the answer
    to come from that server, not from another process on its port."""
    from kimi_ops import script as launch_script
    from tasks.steps.upload import running_unchanged

    files = {"launch.sh": (b"exec server\n", 0o700)}
    digest = launch_script.deployment_digest({"launch.sh": b"exec server\n"})
    for listen, unchanged in ((IMPOSTOR_ON_PORT, False), (SERVER_ON_PORT, True)):
        conn = ScriptedConnection()
        conn.on(r"digest=", Reply(f"launch_id=L1\ndigest={digest}\npid=7\nargs={SERVER}\n"))
        conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + listen))
        got = running_unchanged(Host(conn, PROFILE), PROFILE, files)  # type: ignore[arg-type]
        assert (got is not None) is unchanged, (listen, got)
        if got is not None:
            assert any("held by PID 7" in line for line in got.lines), got
