"""The /proc listing run for real on this machine, against process trees this test starts.

Every process started here is ended by PID (or by its session, which the test created).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kimi_ops.procs import LISTING_COMMAND, Listing, owned_processes, parse_listing

ODD = ["a\tb", "new\nline", "back\\slash", "  spaced  ", "é日本", "--port 9000"]


def run_listing(*prefix: str) -> Listing:
    out = subprocess.run(
        [*prefix, "bash", "-c", LISTING_COMMAND], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return parse_listing(out.stdout)


@contextlib.contextmanager
def session(script: str, env: dict[str, str]) -> Iterator[int]:
    """``bash -c script`` as a new session leader with exactly ``env``; yields its PID."""
    proc = subprocess.Popen(
        ["bash", "-c", script, "bash", *ODD],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # a loaded machine may take seconds to fork and exec the tree: wait for both (the loop
        # ends as soon as they are there)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            members = [p for p in run_listing().procs if p.sid == proc.pid]
            if len(members) >= 2 and all(p.argv[:1] != ("bash",) for p in members):
                break
            time.sleep(0.1)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        # then every live member of the session this test created, by PID, until none is left
        # (a child forked while the leader was being killed is caught by the next round; a
        # killed orphan stays a zombie until init reaps it)
        for _ in range(50):
            left = [p.pid for p in run_listing().procs if p.sid == proc.pid and not p.zombie]
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)


ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HF_TOKEN": "hf_must_never_be_listed",
    "KIMI_OPS_RUN_DIR": "/srv/kimi a\tb",
    "KIMI_OPS_LAUNCH_ID": "L-real",
}
# The server's exact argv (the odd strings are its arguments), and a renamed child.
SLEEP = "import time; time.sleep(300)"
TREE = (
    f"(exec -a VLLM::EngineCore sleep 300) & exec -a python3 {shlex.quote(sys.executable)} "
    f'-c "{SLEEP}" "$@"'
)


def test_exact_argv_titles_and_only_kimi_ops_variables() -> None:
    with session(TREE, ENV) as sid:
        listing = run_listing()
    by = listing.by_pid()
    assert by[sid].argv == ("python3", "-c", SLEEP, *ODD)
    (child,) = [p for p in listing.procs if p.sid == sid and p.pid != sid]
    assert child.argv == ("VLLM::EngineCore", "300")
    for p in (by[sid], child):
        assert dict(p.env or ()) == {
            "KIMI_OPS_RUN_DIR": "/srv/kimi a\tb",
            "KIMI_OPS_LAUNCH_ID": "L-real",
        }
    assert listing.self_pid in by
    sel = owned_processes(listing, "/srv/kimi a\tb/", sid, "L-real")
    assert sorted(sel.pids) == sorted([sid, child.pid]) and sel.current == set(sel.pids)


def test_the_listing_prints_no_other_variable() -> None:
    with session(TREE, ENV):
        out = subprocess.run(
            ["bash", "-c", LISTING_COMMAND], capture_output=True, text=True, timeout=60
        ).stdout
    assert "hf_must_never_be_listed" not in out and "HF_TOKEN" not in out


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_unreadable_environment_falls_back_to_the_launch_session() -> None:
    """Seen by another user (nobody), root's processes have no readable environment: they are
    ours only inside the pidfile's session, never by title."""
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    with session(TREE, ENV) as ours, session(TREE, {**ENV, "KIMI_OPS_RUN_DIR": "/other"}):
        listing = run_listing(*nobody)
    mine = [p for p in listing.procs if p.sid == ours]
    assert len(mine) == 2 and all(p.env is None for p in mine)
    sel = owned_processes(listing, "/srv/kimi a\tb", pidfile_pid=ours)
    assert sorted(sel.pids) == sorted(p.pid for p in mine)
    assert all("environment unreadable" in sel.reasons[p.pid] for p in mine)
    # Without the pidfile there is nothing to go by: nothing is ours.
    assert owned_processes(listing, "/srv/kimi a\tb", pidfile_pid=None).pids == []
