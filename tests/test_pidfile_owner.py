"""The pidfile's PID is this deployment's server only while it is the process the pidfile was
written for (r2 F1, r1 F3), read by its exact argv (r1 F2: a space in run_dir or kimi.python)."""

from __future__ import annotations

import base64

from kimi_ops.hoststate import classify
from kimi_ops.procs import (
    PIDFILE_START_SLACK,
    Proc,
    format_row,
    parse_pidfile_process,
    remove_pidfile_command,
)
from kimi_ops.profile import load_profile
from kimi_ops.result import Status
from kimi_ops.script import parse_key_values
from kimi_ops.verify import parse_poll
from tasks import state as host_state
from tasks import steps
from tasks.host import Host
from tasks.testing import Reply, ScriptedConnection

RUN = "/srv/run dir"
PROFILE = load_profile({"run_dir": RUN, "grace_seconds": 2, "poll_interval": 0.01})
STANDIN = ("/opt/my env/bin/python3", f"{RUN}/kimi_standin.py", "--port", "8000")
VLLM = ("/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m")
BOOT, HZ = 1_000_000, 100
MTIME = 1_000_500  # the pidfile was written 500 s after boot


def _pf(
    pid: int = 100,
    argv: tuple[str, ...] = STANDIN,
    started: float = MTIME - 1,
    env: tuple[tuple[str, str], ...] | None = (),
    state: str = "S",
    key: str = "pid",
) -> str:
    """What pidfile_process_command prints for a live ``pid``."""
    cmdline = base64.b64encode("".join(a + "\0" for a in argv).encode()).decode()
    lines = [
        f"{key}={pid}",
        f"pf_mtime={MTIME}",
        f"pf_boot={BOOT}",
        f"pf_hz={HZ}",
        f"pf_stat={state} {int((started - BOOT) * HZ)}",
        f"pf_argv={cmdline}",
    ]
    if env is not None:
        text = "".join(f"{k}={v}\n" for k, v in env)
        lines.append("pf_env=" + base64.b64encode(text.encode()).decode())
    return "\n".join(lines) + "\n"


def _dead(pid: int = 100, key: str = "pid") -> str:
    return f"{key}={pid}\npf_mtime={MTIME}\npf_boot={BOOT}\npf_hz={HZ}\n"


def _host(conn: ScriptedConnection) -> Host:
    return Host(conn, PROFILE)  # type: ignore[arg-type]


# --- r1 F2: the exact argv --------------------------------------------------------------------


def test_a_server_whose_paths_hold_a_space_is_alive_in_verifys_poll() -> None:
    for argv in (STANDIN, ("/opt/my env/bin/python3", *VLLM[1:])):
        facts = parse_poll(_pf(argv=argv) + "size=0\nread=0\n@@log\n", run_dir=RUN)
        assert facts.alive and facts.pid == 100, argv


def test_the_same_argv_joined_by_ps_and_split_on_spaces_was_not_a_server() -> None:
    """What the poll used to read (`ps -o args=`): kept readable, and why it failed."""
    facts = parse_poll(f"pid=100\nargs={' '.join(STANDIN)}\nsize=0\nread=0\n@@log\n")
    assert not facts.alive
    assert parse_poll(f"pid=100\nargs={' '.join(VLLM)}\nsize=0\nread=0\n@@log\n").alive


def test_not_a_server_and_a_zombie_are_not_alive() -> None:
    assert not parse_pidfile_process(parse_key_values(_pf(argv=("sleep", "600")))).server_alive(RUN)
    assert not parse_pidfile_process(parse_key_values(_pf(state="Z"))).server_alive(RUN)


# --- r2 F1 / r1 F3: a reused PID --------------------------------------------------------------


def test_a_process_started_after_the_pidfile_is_a_reused_pid() -> None:
    later = MTIME + PIDFILE_START_SLACK + 1
    found = parse_pidfile_process(
        parse_key_values(_pf(argv=VLLM + ("--port", "8000"), started=later))
    )
    assert found.started_after_pidfile and found.foreign(RUN)
    assert not found.server_alive(RUN) and found.owner_pid(RUN) is None and found.ended(RUN)
    # Our server (started before its pidfile, or within the slack) is trusted.
    for started in (MTIME - 100, MTIME + PIDFILE_START_SLACK - 1):
        ours = parse_pidfile_process(parse_key_values(_pf(started=started)))
        assert ours.server_alive(RUN) and ours.owner_pid(RUN) == 100 and not ours.ended(RUN)


def test_the_environment_decides_before_the_clock() -> None:
    later = MTIME + 3600  # e.g. the wall clock was stepped since the launch
    ours = (("KIMI_OPS_RUN_DIR", RUN + "/"), ("KIMI_OPS_LAUNCH_ID", "L1"))
    assert parse_pidfile_process(parse_key_values(_pf(started=later, env=ours))).server_alive(RUN)
    other = (("KIMI_OPS_RUN_DIR", "/srv/other"),)
    found = parse_pidfile_process(parse_key_values(_pf(env=other)))
    assert found.foreign(RUN) and not found.server_alive(RUN)


def test_a_dead_pid_has_ended_but_still_names_its_session() -> None:
    found = parse_pidfile_process(parse_key_values(_dead()))
    assert not found.alive and found.ended(RUN) and found.owner_pid(RUN) == 100
    assert not parse_pidfile_process({"pid": ""}).ended(RUN)


def test_remove_pidfile_command_keeps_a_new_launchs_pidfile() -> None:
    cmd = remove_pidfile_command("'/srv/run dir/server.pid'", 100)
    assert cmd == (
        'if [ "$(head -n 1 \'/srv/run dir/server.pid\' 2>/dev/null)" = "100" ]; '
        "then rm -f '/srv/run dir/server.pid'; fi"
    )


FOREIGN = Proc(100, 1, 100, VLLM + ("--port", "8000"), 100, ())  # a session leader, no env
SELF = Proc(900, 1, 900, ("bash", "-c", "listing"), 900)
LATER = MTIME + 60


def _listing(*procs: Proc, pidfile: str) -> str:
    return pidfile + "launch_id=L1\nself_pid=900\n" + "".join(format_row(p) + "\n" for p in procs)


def test_kill_stale_leaves_a_foreign_server_under_a_reused_pidfile_pid_and_drops_the_pidfile() -> (
    None
):
    conn = ScriptedConnection()
    head = _pf(argv=FOREIGN.argv, started=LATER, key="pidfile")
    conn.on(r"for d in /proc/", stdout=_listing(FOREIGN, SELF, pidfile=head))
    conn.on(r"^pid=\$\(head -n 1", stdout=_pf(argv=FOREIGN.argv, started=LATER))
    res = steps.kill_stale(_host(conn), PROFILE)
    assert res.status is Status.OK and "no process of this deployment" in res.message, res
    assert not conn.ran(r"kill -")
    assert any("left alone: 100" in line for line in res.lines)
    (rm,) = conn.ran(r"rm -f")
    assert '= "100" ]' in rm and "server.pid" in rm
    # The same process started before the pidfile was written is the pidfile's server.
    conn = ScriptedConnection()
    head = _pf(argv=FOREIGN.argv, started=MTIME - 1, key="pidfile")
    conn.on(r"for d in /proc/", Reply(_listing(FOREIGN, SELF, pidfile=head)), Reply(""))
    conn.on(r"kill -TERM", stdout="sent 100\n")
    conn.on(r"^pid=\$\(head -n 1", stdout=_dead())
    res = steps.kill_stale(_host(conn), PROFILE, sleep=lambda s: None)
    assert res.status is Status.CHANGED and res.data["pids"] == [100], res
    assert conn.ran(r"rm -f")  # its server is gone: the pidfile goes too


def test_kill_stale_keeps_the_pidfile_of_a_server_that_still_lives() -> None:
    conn = ScriptedConnection()
    conn.on(r"for d in /proc/", stdout=_listing(SELF, pidfile=_dead(key="pidfile")))
    conn.on(r"^pid=\$\(head -n 1", stdout=_pf())  # meanwhile a new launch wrote its pidfile
    res = steps.kill_stale(_host(conn), PROFILE)
    assert res.status is Status.OK and not conn.ran(r"rm -f")


def _status_output(pidfile: str, *procs: Proc) -> str:
    return (
        pidfile
        + "launch_id=L1\nstop=\nlog=1\n@@ps\nself_pid=900\n"
        + "".join(format_row(p) + "\n" for p in procs)
        + "@@log\nINFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    )


def test_status_does_not_call_a_foreign_process_under_a_reused_pid_this_deployments() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@ps", stdout=_status_output(_pf(argv=FOREIGN.argv, started=LATER), FOREIGN, SELF))
    facts, _ = host_state.gather(_host(conn), PROFILE, step="status")
    assert not facts.alive and facts.orphans == ()
    assert classify(facts).state == "crashed"
    # The deployment's own server, with a space in run_dir, is alive (starting: not probed).
    ours = Proc(100, 1, 100, STANDIN, 100, (("KIMI_OPS_RUN_DIR", RUN),))
    conn = ScriptedConnection()
    conn.on(r"@@ps", stdout=_status_output(_pf(), ours, SELF))
    facts, _ = host_state.gather(_host(conn), PROFILE, step="status")
    assert facts.alive and facts.orphans == ()
    assert classify(facts).state == "starting"


def test_a_reused_pid_does_not_turn_a_crash_into_a_stop() -> None:
    conn = ScriptedConnection()
    conn.on(r"^pid=\$\(head -n 1", stdout=_pf(argv=("sleep", "600"), started=LATER))
    host_state.mark_stopping(_host(conn), PROFILE, step="kill-stale")
    assert not conn.ran("stopped.launch")
    conn = ScriptedConnection()
    conn.on(r"^pid=\$\(head -n 1", stdout=_pf())
    host_state.mark_stopping(_host(conn), PROFILE, step="kill-stale")
    assert conn.ran("stopped.launch")


def test_preflight_does_not_count_a_foreign_server_under_a_reused_pid_as_ours() -> None:
    from kimi_ops.facts import render_sections
    from tests.test_preflight import make_facts

    facts = make_facts(pidfile="100\n")
    gathered = render_sections((n, s.rc, s.text) for n, s in facts.sections.items())
    listing = "self_pid=900\n" + format_row(FOREIGN) + "\n" + format_row(SELF) + "\n"

    def own(started: float) -> tuple[int, ...]:
        pf = _pf(argv=FOREIGN.argv, started=started)
        out = f"{gathered}@@kimi-ops:pf\n{pf}@@kimi-ops:ps\n{listing}"
        conn = ScriptedConnection().on(r"@@kimi-ops:ps", stdout=out)
        return steps.preflight(_host(conn), PROFILE).own_pids

    assert own(LATER) == ()
    assert own(MTIME - 1) == (100,)  # the pidfile's own (older kimi-ops) server


def test_verify_after_kill_stale_dropped_a_crashed_servers_pidfile_says_it_exited() -> None:
    """kill-stale removes the pidfile of a server that is gone: verify then sees no pidfile,
    but a log that reached a stage, so the server ran and exited (it did start)."""
    from kimi_ops.verify import PollFacts, VerifyState

    log = "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    state = VerifyState("kimi-k2.5", 60, 30)
    gone = PollFacts(None, False, len(log), len(log), log, launch_id="L1")
    verdict = state.feed_poll(gone, 1.0)
    assert verdict.state == "crashed" and "never started" not in verdict.message, verdict
    # No pidfile and an empty log: the launch script never got as far as the server.
    fresh = VerifyState("kimi-k2.5", 60, 30)
    verdict = fresh.feed_poll(PollFacts(None, False, 0, 0, "", launch_id="L1"), 1.0)
    assert verdict.state == "never_started" and "wrote no pidfile" in verdict.message


def test_a_live_server_reached_through_another_path_keeps_its_pidfile() -> None:
    """`stop --run-dir <a symlink to run_dir>`: the server's environment names the real path.
    Its PID was not reused (it started before its pidfile), so the pidfile, which names a live
    server, must not be deleted, even though the server is not taken as this run_dir's."""
    real = (("KIMI_OPS_RUN_DIR", "/srv/real"), ("KIMI_OPS_LAUNCH_ID", "L1"))
    found = parse_pidfile_process(parse_key_values(_pf(started=MTIME - 100, env=real)))
    assert found.foreign(RUN) and not found.ended(RUN)
    reused = parse_pidfile_process(
        parse_key_values(_pf(started=MTIME + PIDFILE_START_SLACK + 1, env=real))
    )
    assert reused.ended(RUN)
