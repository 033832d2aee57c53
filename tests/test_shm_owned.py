"""clean-shm removes only the shm files this deployment's server made (red team 2026-12-06): they
are recorded in run_dir while the server runs, by verify (while it polls and once it is ready),
status and kill-stale (tests/test_tasks.py), from what the deployment's processes map or hold."""

from __future__ import annotations

import re

from kimi_ops.procs import Proc
from kimi_ops.result import Status
from tasks import state as host_state
from tasks import steps
from tasks.report import Reporter
from tasks.testing import Reply, ScriptedConnection
from tests.test_pidfile_owner import PROFILE, RUN, SELF, STANDIN, _host, _pf, _status_output
from tests.test_tasks import PROFILE as VERIFY_PROFILE
from tests.test_tasks import READY_LOG, _poll

HELD = (
    "dir=/dev/shm\nnow=1000000\n"
    "F\t4096\t999000\t0\t600\t26\t30\t/dev/shm/psm_srv\n"
    "F\t32\t999000\t0\t600\t26\t31\t/dev/shm/sem.mp-srv\n"
    "F\t4096\t999000\t0\t600\t26\t32\t/dev/shm/psm_someone_elses\n"
    "O\t26\t31\tsem.mp-srv\n"
    "/proc/100/maps:7f00-7f10 rw-s 00000000 00:1a 30 /dev/shm/psm_srv\n"
    "/proc/101/maps:7f00-7f10 rw-s 00000000 00:1a 31 /dev/shm/sem.mp-srv\n"
)
APPEND = r" >> .*shm\.owned'?$"


def test_status_records_the_shm_files_the_deployments_processes_use() -> None:
    ours = Proc(100, 1, 100, STANDIN, 100, (("KIMI_OPS_RUN_DIR", RUN),))
    engine = Proc(101, 100, 100, ("VLLM::EngineCore",), 100)
    conn = ScriptedConnection()
    conn.on(r"@@ps", stdout=_status_output(_pf(), ours, engine, SELF))
    conn.on(r"set -- /proc/100 /proc/101;", stdout=HELD)
    res, _ = host_state.status(_host(conn), PROFILE)
    assert res.step == "status"
    (append,) = conn.ran(APPEND)
    # the new file only (sem.mp-srv is recorded already; psm_someone_elses no process of ours uses)
    assert append == "printf '%s\\t%s\\t%s\\n' 26 30 psm_srv >> '/srv/run dir/shm.owned'"


def test_status_with_nothing_of_this_deployment_running_records_nothing() -> None:
    conn = ScriptedConnection()
    conn.on(r"@@ps", stdout=_status_output("pid=\n", SELF))
    host_state.status(_host(conn), PROFILE)
    assert not conn.ran(r"shm\.owned")


def test_verify_records_the_servers_shm_files_while_it_starts_and_once_ready() -> None:
    """A server that crashes after the first poll still has its files recorded."""
    conn = ScriptedConnection()
    conn.on(r"@@log", _poll(7, True, 0, ""), _poll(7, True, len(READY_LOG), READY_LOG), Reply(""))
    conn.on(
        r"kimi_probe\.py",
        stdout='{"health": 200, "models_status": 200, "models": ["kimi-k2.5"], '
        '"chat_status": 200, "answer": "Hi", "error": ""}',
    )
    conn.on(r"sid=7;", stdout=HELD.replace("/proc/100/", "/proc/7/"))
    res = steps.verify(_host(conn), VERIFY_PROFILE, Reporter(quiet=True), sleep=lambda s: None)
    assert res.status is Status.OK, res
    reads = conn.ran(r"sid=7;")
    assert len(reads) == 2  # the first poll that saw it alive, and ready
    assert all("for s in /proc/[0-9]*/stat" in c for c in reads)
    appends = conn.ran(APPEND)
    assert appends and all(
        re.search(r" 26 30 psm_srv >> /srv/kimi/shm\.owned$", a) for a in appends
    )


def test_a_dry_run_records_nothing() -> None:
    from tasks.host import Host

    conn = ScriptedConnection()
    host = Host(conn, PROFILE, dry=True)  # type: ignore[arg-type]
    assert steps.record_shm(host, PROFILE, "status", pids=[100]) == []
    assert conn.commands == []
