"""A live server is known without its pidfile, and `fab launch` never starts a second one beside
it (red-team problems 4 and 6): the pure decisions, the restore command run by bash, and the
steps on a scripted host."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_ops import hoststate, liveserver
from kimi_ops.procs import Listing, Proc, format_row, owned_processes
from kimi_ops.profile import load_profile
from kimi_ops.result import Status
from kimi_ops.script import parse_key_values
from tasks import state as host_state
from tasks import steps
from tasks.host import Host
from tasks.report import Reporter
from tasks.testing import Reply, ScriptedConnection
from tests.test_port_owner import ANSWERS, SERVER_ON_PORT

RUN = "/srv/kimi"
PROFILE = load_profile({"run_dir": RUN, "grace_seconds": 2, "poll_interval": 0.01})
SERVER = ("/root/ml-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")
ENV = (("KIMI_OPS_RUN_DIR", RUN), ("KIMI_OPS_LAUNCH_ID", "L1"))
LEADER = Proc(7, 1, 7, SERVER, 7, ENV)
ENGINE = Proc(8, 7, 7, ("VLLM::EngineCore",), 7, None)  # setproctitle: environ unreadable
TRACKER = Proc(9, 7, 7, (SERVER[0], "-c", "from multiprocessing..."), 7, ENV)
SELF = Proc(900, 1, 900, ("bash", "-c", "listing"), 900)
INIT = Proc(1, 0, 1, ("/sbin/init",), 1)


def _listing(*procs: Proc) -> Listing:
    return Listing((INIT, *procs, SELF), 900)


# --- the pure decisions ------------------------------------------------------------------------


def test_the_current_launchs_server_is_found_by_its_launch_id() -> None:
    listing = _listing(LEADER, ENGINE, TRACKER)
    assert liveserver.current_server(listing, RUN, "L1") == LEADER
    assert liveserver.current_server(listing, RUN + "//", "L1") == LEADER  # spelled otherwise
    # Another launch, another deployment, no launch id: not this launch's server.
    assert liveserver.current_server(listing, RUN, "L0") is None
    assert liveserver.current_server(listing, "/srv/other", "L1") is None
    assert liveserver.current_server(listing, RUN, None) is None


def test_only_a_live_session_leader_that_runs_a_server_is_the_server() -> None:
    orphan = Proc(9, 1, 7, TRACKER.argv, 7, ENV)  # its leader is gone
    assert liveserver.current_server(_listing(ENGINE, orphan), RUN, "L1") is None
    zombie = Proc(7, 1, 7, SERVER, 7, ENV, "Z")
    assert liveserver.current_server(_listing(zombie, TRACKER), RUN, "L1") is None
    tail = Proc(7, 1, 7, ("tail", "-f", f"{RUN}/current.log"), 7, ENV)
    assert liveserver.current_server(_listing(tail), RUN, "L1") is None
    # Two servers with the same launch id: nothing says which one is the server.
    twin = Proc(17, 1, 17, SERVER, 17, ENV)
    assert liveserver.current_server(_listing(LEADER, twin), RUN, "L1") is None


def test_a_leader_whose_environment_is_gone_is_found_by_its_sessions_members() -> None:
    renamed = Proc(7, 1, 7, ("VLLM::APIServer",), 7, ())  # setproctitle wiped its environ
    assert liveserver.current_server(_listing(renamed, TRACKER), RUN, "L1") == renamed
    # Without a member that carries this launch id, a renamed leader is nobody's.
    assert liveserver.current_server(_listing(renamed, ENGINE), RUN, "L1") is None
    # A leader whose environment names another deployment is never ours.
    other = Proc(7, 1, 7, SERVER, 7, (("KIMI_OPS_RUN_DIR", "/srv/other"),))
    assert liveserver.current_server(_listing(other, TRACKER), RUN, "L1") is None


def test_as_pidfile_process_is_alive_for_the_decisions_that_read_a_pidfile() -> None:
    found = liveserver.as_pidfile_process(LEADER)
    assert found.pid == 7 and found.server_alive(RUN) and not found.stopped
    stopped = liveserver.as_pidfile_process(Proc(7, 1, 7, SERVER, 7, ENV, "T"))
    assert stopped.stopped


def test_live_servers_are_the_session_leaders_of_what_kill_stale_would_end() -> None:
    sel = owned_processes(_listing(LEADER, ENGINE, TRACKER), RUN, None, "L1", port=8000)
    assert [p.pid for p in liveserver.live_servers(sel)] == [7]
    # Orphans of a server that is gone are no live server (launch may start one).
    orphan = Proc(9, 1, 7, TRACKER.argv, 7, ENV)
    sel = owned_processes(_listing(orphan), RUN, None, "L1", port=8000)
    assert sel.pids == [9] and liveserver.live_servers(sel) == []
    # A stale launch's server (another launch id) is alive too.
    stale = Proc(7, 1, 7, SERVER, 7, (("KIMI_OPS_RUN_DIR", RUN), ("KIMI_OPS_LAUNCH_ID", "L0")))
    sel = owned_processes(_listing(stale), RUN, None, "L1", port=8000)
    assert [p.pid for p in liveserver.live_servers(sel)] == [7]


def test_launch_refusal_names_the_server_and_what_it_keeps() -> None:
    text = liveserver.launch_refusal([LEADER], RUN, 8000)
    assert "PID 7 (launch L1)" in text and "port 8000" in text
    assert "launch.id" in text and "server.pid" in text and "nothing was started" in text


def test_the_note_says_how_the_server_was_found_and_what_became_of_the_pidfile() -> None:
    got = liveserver.parse_restore({"restore": "restored", "etime": "01:02"}, LEADER, "L1")
    assert got.restored and got.etime == "01:02"
    note = got.note(RUN)
    assert f"{RUN}/server.pid" in note and "PID 7" in note and "L1" in note
    assert note.endswith("pidfile restored")
    dry = liveserver.parse_restore({}, LEADER, "L1", dry=True)
    assert not dry.restored and "dry run" in dry.note(RUN)
    odd = liveserver.parse_restore({"restore": ""}, LEADER, "L1")
    assert "not restored" in odd.note(RUN)
    with pytest.raises(ValueError):
        liveserver.restore_pidfile_command(RUN, 7, "L1; rm -rf /")


# --- the restore command, run by bash ----------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A run_dir and a process of this test that carries its launch id L1."""
    run = tmp_path / "run dir"
    run.mkdir()
    (run / "launch.id").write_text("L1\n")
    env = {**os.environ, "KIMI_OPS_RUN_DIR": str(run), "KIMI_OPS_LAUNCH_ID": "L1"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        yield run, proc.pid
    finally:
        proc.kill()  # by PID: the process this fixture started
        proc.wait()


def _restore(run: Path, pid: int, launch_id: str = "L1") -> dict[str, str]:
    cmd = liveserver.restore_pidfile_command(str(run), pid, launch_id)
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True)
    return parse_key_values(out.stdout)


def test_the_missing_pidfile_is_restored_and_nothing_else_is_overwritten(
    server: tuple[Path, int],
) -> None:
    run, pid = server
    pidfile = run / "server.pid"
    got = _restore(run, pid)
    assert got["restore"] == "restored" and got["etime"], got
    assert pidfile.read_text() == f"{pid}\n"
    assert sorted(p.name for p in run.iterdir()) == ["launch.id", "server.pid"]  # no temp left
    pidfile.write_text("4242\n")  # a new launch's pidfile: kept
    assert _restore(run, pid)["restore"] == "exists" and pidfile.read_text() == "4242\n"
    pidfile.write_text("garbage\n")  # there, but names no PID: left as it is
    assert _restore(run, pid)["restore"] == "unreadable" and pidfile.read_text() == "garbage\n"
    pidfile.unlink()
    (run / "launch.id").write_text("L2\n")  # a new launch meanwhile
    assert _restore(run, pid)["restore"] == "relaunched" and not pidfile.exists()
    (run / "launch.id").write_text("L3\n")
    # The PID no longer carries the launch id (it ended, the PID was reused).
    assert _restore(run, pid, "L3")["restore"] == "gone" and not pidfile.exists()


def test_the_stop_marker_takes_the_server_found_by_its_launch_id(server: tuple[Path, int]) -> None:
    run, pid = server
    marker = run / hoststate.STOP_MARKER
    cmd = hoststate.stop_marker_command(str(run), "by=test")
    subprocess.run(["bash", "-c", cmd], check=True)
    assert not marker.exists()  # no pidfile, no PID: nothing says a server lives
    cmd = hoststate.stop_marker_command(str(run), "by=test", pid)
    subprocess.run(["bash", "-c", cmd], check=True)
    assert marker.read_text() == "launch_id=L1 by=test\n"


# --- the steps on a scripted host --------------------------------------------------------------


def _host(conn: ScriptedConnection) -> Host:
    return Host(conn, PROFILE)  # type: ignore[arg-type]


def _rows(*procs: Proc, pidfile: str = "") -> str:
    return f"pidfile={pidfile}\nlaunch_id=L1\nself_pid=900\n" + "".join(
        format_row(p) + "\n" for p in (INIT, *procs, SELF)
    )


LIST = r"for d in /proc/"
RESTORE = r"server\.pid\.restore"


def test_launch_refuses_while_a_server_of_this_deployment_lives_and_writes_nothing() -> None:
    for pidfile in ("7", ""):  # with its pidfile, and without it (found by its environment)
        conn = ScriptedConnection()
        conn.on(LIST, stdout=_rows(LEADER, ENGINE, TRACKER, pidfile=pidfile))
        res = steps.launch(_host(conn), PROFILE, sleep=lambda s: None)
        assert res.failed and "PID 7 (launch L1)" in res.message, res
        assert "fab stop" in res.hint and "fab deploy" in res.hint
        assert conn.commands == conn.ran(LIST)  # it only read: no launch, no file written


def test_launch_starts_when_only_orphans_or_nothing_of_this_deployment_lives() -> None:
    orphan = Proc(9, 1, 7, TRACKER.argv, 7, ENV)
    for procs in ((), (orphan,)):
        conn = ScriptedConnection()
        conn.on(LIST, stdout=_rows(*procs))
        conn.on(r"setsid nohup", stdout="pid=4242\n")
        conn.on(r"stat= -p 4242", stdout="alive=1\nlogfile=1\npidfile=4242\n@@log\n")
        res = steps.launch(_host(conn), PROFILE, sleep=lambda s: None)
        assert res.status is Status.CHANGED and res.data["pid"] == 4242, res
        assert conn.commands.index(conn.ran(LIST)[0]) < conn.commands.index(
            conn.ran("setsid nohup")[0]
        )


def _gather(pidfile: str) -> Reply:
    listing = "self_pid=900\n" + "".join(format_row(p) + "\n" for p in (LEADER, ENGINE, SELF))
    log = "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    return Reply(f"pid={pidfile}\nlaunch_id=L1\nstop=\nlog=1\n@@ps\n{listing}@@log\n{log}")


def test_status_without_a_pidfile_finds_the_serving_server_and_restores_the_pidfile() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@ps", _gather(""))
    conn.on(RESTORE, stdout="restore=restored\netime=05:00\n")
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + SERVER_ON_PORT))
    res, state = host_state.status(_host(conn), PROFILE)
    assert state.serving and state.code == 0, (state, res)
    assert "server PID 7" in res.message and "orphans" not in res.message
    assert "uptime: 05:00" in res.lines
    assert any("named no PID" in line and "pidfile restored" in line for line in res.lines)
    (restore,) = conn.ran(RESTORE)
    assert "ln " in restore and "KIMI_OPS_LAUNCH_ID=L1" in restore


def test_status_with_a_pidfile_restores_nothing() -> None:
    from tests.test_pidfile_owner import _pf

    conn = ScriptedConnection()
    conn.on(r"@@ps", Reply(_pf(7, SERVER, env=ENV) + _gather("7").stdout.split("\n", 1)[1]))
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + SERVER_ON_PORT))
    res, state = host_state.status(_host(conn), PROFILE)
    assert state.serving and not conn.ran(RESTORE), res
    assert not any("named no PID" in line for line in res.lines)


READY_LOG = (
    "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    "INFO 12-02 10:00:05 [launcher.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
)


def _poll(pid: str) -> Reply:
    encoded = base64.b64encode(READY_LOG.encode()).decode()
    head = f"pid={pid}\nlaunch_id=L1\nstop=\n" + (
        f"pf_stat=S 1\npf_argv={base64.b64encode(chr(0).join(SERVER).encode()).decode()}\n"
        if pid
        else ""
    )
    return Reply(f"{head}size={len(READY_LOG)}\nread={len(READY_LOG)}\n@@log\n{encoded}")


def test_verify_without_a_pidfile_is_ready_when_the_launchs_server_answers() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@log", _poll(""), _poll("7"))
    conn.on(LIST, stdout=_rows(LEADER, ENGINE, TRACKER))
    conn.on(RESTORE, stdout="restore=restored\netime=05:00\n")
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + SERVER_ON_PORT))
    res = steps.verify(_host(conn), PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.status is Status.OK and "ready" in res.message, res
    assert res.data["pid"] == 7 and "exited" not in res.message
    assert any("named no PID" in line and "restored" in line for line in res.lines), res.lines


def test_verify_without_a_pidfile_or_a_server_still_says_it_exited() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@log", _poll(""))
    conn.on(LIST, stdout=_rows(ENGINE))  # only an engine core: no server of launch L1
    res = steps.verify(_host(conn), PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.failed and "exited" in res.message and not conn.ran(RESTORE), res


def test_an_unchanged_deploy_without_a_pidfile_keeps_the_server() -> None:
    files = steps.upload_files(PROFILE)
    from kimi_ops import script as launch_script

    digest = launch_script.deployment_digest({n: d for n, (d, _) in files.items()})
    conn = ScriptedConnection()
    conn.on(r"^id=\$\(cat", stdout=f"launch_id=L1\ndigest={digest}\npid=\n")
    conn.on(LIST, stdout=_rows(LEADER, ENGINE, TRACKER))
    conn.on(RESTORE, stdout="restore=restored\netime=05:00\n")
    conn.on(r"kimi_probe\.py", Reply(ANSWERS + "\n" + SERVER_ON_PORT))
    res = steps.running_unchanged(_host(conn), PROFILE, files)
    assert res is not None and res.data["unchanged"] and res.data["pid"] == 7, res
    assert "server PID 7 (launch L1)" in res.message
    assert any("pidfile restored" in line for line in res.lines)


def test_stopping_a_server_without_a_pidfile_still_marks_the_stop() -> None:
    conn = ScriptedConnection()
    conn.on(r"^pid=\$\(head -n 1", stdout="pid=\n")
    conn.on(LIST, stdout=_rows(LEADER, ENGINE, TRACKER))
    conn.on(RESTORE, stdout="restore=not_owned\netime=05:00\n")
    host_state.mark_stopping(_host(conn), PROFILE, step="stop")
    (marker,) = conn.ran(hoststate.STOP_MARKER)
    assert "|| pid=7;" in marker
    # No server of this launch: no marker (a crash stays a crash).
    conn = ScriptedConnection()
    conn.on(r"^pid=\$\(head -n 1", stdout="pid=\n")
    conn.on(LIST, stdout=_rows(ENGINE))
    host_state.mark_stopping(_host(conn), PROFILE, step="stop")
    assert not conn.ran(hoststate.STOP_MARKER)
