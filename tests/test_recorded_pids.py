"""ray.pid and router.pid are trusted only for the process they were written for (red team
2026-12-05: both were taken on the command line alone, so a reused PID running another
`ray start` or another HAProxy with a config of the same name could be signalled)."""

from __future__ import annotations

import base64

from kimi_ops import cluster as cl
from kimi_ops import router as rt


def _facts(key: str, argv: list[str], start_ticks: int, env: str | None = None) -> str:
    """What procs.read_pidfile_command prints: the pidfile written at t=1000 (btime 0, 100 Hz)."""
    raw = "\0".join(argv).encode() + b"\0"
    lines = [
        f"{key}=4242",
        "pf_mtime=1000",
        "pf_boot=0",
        "pf_hz=100",
        f"pf_stat=S {start_ticks}",
        f"pf_argv={base64.b64encode(raw).decode()}",
    ]
    if env is not None:
        lines.append(f"pf_env={base64.b64encode(env.encode()).decode()}")
    return "\n".join(lines) + "\n"


HAPROXY = ["/usr/sbin/haproxy", "-f", "haproxy.cfg"]


def _info(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_router_pid_is_ours_only_if_it_started_before_the_pidfile() -> None:
    s = rt.parse_router({"port": 9000})
    assert rt.recorded_pid(_info(_facts("pid", HAPROXY, 99_000)), s) == 4242  # t=990
    # the same command line, started at t=1200: the PID was reused by another HAProxy
    assert rt.recorded_pid(_info(_facts("pid", HAPROXY, 120_000)), s) is None
    assert rt.recorded_pid(_info(_facts("pid", ["python3", "app.py"], 99_000)), s) is None
    assert rt.recorded_pid({"pid": "4242"}, s) is None  # gone
    assert "pf_stat=" in rt.state_command("/srv/router")  # the facts are gathered


RAY = ["/venv/bin/python3", "/venv/bin/ray", "start", "--block", "--head"]


def _probe(head: str) -> str:
    return (
        head + "launch_id=L1\n@@ps\nself_pid=900\n 4242 1 4242 /venv/bin/ray start --block\n@@log\n"
    )


def test_the_recorded_ray_start_is_ours_only_for_its_run_dir_and_start_time() -> None:
    mine = "KIMI_OPS_RUN_DIR=/srv/ray\n"
    ok = cl.parse_probe(_probe(_facts("ray_pid", RAY, 99_000, mine)), "/srv/ray")
    assert ok.ray_pid == 4242 and ok.leader_alive
    other = cl.parse_probe(
        _probe(_facts("ray_pid", RAY, 99_000, "KIMI_OPS_RUN_DIR=/srv/other\n")), "/srv/ray"
    )
    assert other.ray_pid is None and 4242 not in other.selection.pids
    reused = cl.parse_probe(_probe(_facts("ray_pid", RAY, 120_000)), "/srv/ray")
    assert reused.ray_pid is None and 4242 not in reused.selection.pids
    assert "ray.pid" in cl.probe_command("/srv/ray", "true")
