"""A session is ours only when a launch created it (red team round 4, #8).

launch.sh run by hand (``nohup bash run_dir/launch.sh &`` from a login shell) leaves the server in
the caller's session. Once that session's leader (the login shell) is gone, the old rule 2 ("its
session is one of a process owned by environment, the leader gone") made every process left in
that session ours: the user's other ``nohup`` jobs were SIGTERMed and SIGKILLed. The launch
script now exports ``KIMI_OPS_LAUNCH_PID=$$`` (the server's PID, as it ``exec``\\ s the server); a
session is the launch's only when that PID is the session (the launch's ``setsid``), or it is
the pidfile's. Listings below are plain listing text (``PID PPID PGID SID STATE START env...``).
"""

from __future__ import annotations

from pathlib import Path

from kimi_ops.procs import owned_processes, parse_listing
from kimi_ops.profile import load_profile
from kimi_ops.script import render_launch_script
from tasks.demo import demo_profile

RUN = "/srv/kimi"
SERVER = "Apython3\tA/srv/kimi/kimi_standin.py\tA--port\tA8000"


def _env(launch_pid: int, launch: str = "manual-20261206T050000") -> str:
    return (
        f"env\tEKIMI_OPS_LAUNCH_ID={launch}\tEKIMI_OPS_LAUNCH_PID={launch_pid}"
        f"\tEKIMI_OPS_RUN_DIR={RUN}"
    )


# The finding's reproduction: session 7085 (a login shell, gone) holds the user's `sleep 901`
# and the server launch.sh became (PID 7087, not a session leader), with its tree.
MANUAL = f"""self_pid=9000
1 0 1 1 S 1 noenv\tA/sbin/init
7086 1 7085 7085 S 500 env\tAsleep\tA901
7087 1 7085 7085 S 510 {_env(7087)}\t{SERVER}
7088 7087 7085 7085 S 520 {_env(7087)}\tApython3\tA-c\tAresource_tracker
7090 7087 7085 7085 S 530 env\tAVLLM::EngineCore
7091 7090 7085 7085 S 540 env\tAVLLM::Worker_TP0
9000 1 9000 9000 R 900 env\tAbash\tA-c\tAlisting
"""


def test_a_users_job_in_the_session_of_a_server_run_by_hand_is_left_alone_and_named() -> None:
    listing = parse_listing(MANUAL)
    sel = owned_processes(listing, RUN, 7087, "manual-20261206T050000", port=8000)
    # the server, its environment-carrying child, and the titled processes below it
    assert sorted(sel.pids) == [7087, 7088, 7090, 7091]
    assert 7086 not in sel.pids
    (why,) = [w for p, w in sel.foreign if p.pid == 7086]
    assert "session 7085" in why and "did not create" in why
    # the live server is not an orphan of a gone server, and neither is anything below it
    assert sel.orphans == frozenset()
    assert sel.current == {7087, 7088, 7090, 7091}


def test_after_the_hand_run_server_crashed_its_wiped_titles_are_not_taken_by_session() -> None:
    """Nothing says the login session was the launch's: the titled orphans (no environment left,
    re-parented) are left alone and named; the tracker, carrying this run_dir, is still ours."""
    text = "\n".join(ln for ln in MANUAL.splitlines() if not ln.startswith("7087 ")).replace(
        "7090 7087", "7090 1"
    )
    sel = owned_processes(parse_listing(text), RUN, 7087, "manual-20261206T050000", port=8000)
    assert sel.pids == [7088]
    assert {p.pid for p, _ in sel.foreign} == {7086, 7090, 7091}


# A launch by kimi-ops (setsid): the server leads session 600; it was SIGKILLed, its tree lives.
CRASHED = f"""self_pid=9000
1 0 1 1 S 1 noenv\tA/sbin/init
601 1 600 600 S 610 {_env(600, "20261206T050000-ab12")}\tApython3\tA-c\tAresource_tracker
602 1 600 600 S 620 env\tAVLLM::EngineCore
603 602 600 600 S 630 env\tAVLLM::Worker_TP0
7086 1 7085 7085 S 500 env\tAsleep\tA901
"""


def test_the_orphans_of_a_crashed_server_in_its_launchs_own_session_are_still_ours() -> None:
    listing = parse_listing(CRASHED)
    for pidfile in (600, None):  # the pidfile's session, or the one the tracker's launch led
        sel = owned_processes(listing, RUN, pidfile, "20261206T050000-ab12", port=8000)
        assert sorted(sel.pids) == [601, 602, 603]
        assert sel.orphans == {601, 602, 603}
        assert "in session 600 of this deployment" in sel.reasons[602]
        assert sel.foreign == ()


def test_the_launch_script_records_its_own_pid() -> None:
    profile = load_profile(demo_profile(Path("/srv"), 8000, 1.0))
    text = render_launch_script(profile)
    assert 'KIMI_OPS_LAUNCH_PID="$$"' in text
    assert text.index("KIMI_OPS_LAUNCH_PID") < text.index("\nexec ")
