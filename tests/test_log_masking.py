"""Secrets in log lines that `fab logs` shows (red-team findings F7 and F3)."""

from __future__ import annotations

from kimi_ops.profile import load_profile
from kimi_ops.redact import Masker
from tasks import steps
from tasks.host import Host
from tasks.testing import Reply, ScriptedConnection

SECRET = "pw-REDTEAM-0123456789"


def _host(conn: ScriptedConnection, profile: object) -> Host:
    return Host(conn, profile)  # type: ignore[arg-type]


def test_logs_masks_a_secret_before_cutting_the_line() -> None:
    # F7: the cut at log_line_limit came first, so half the secret was shown
    profile = load_profile({"run_dir": "/srv/kimi", "log_line_limit": 2000})
    conn = ScriptedConnection()
    conn.on(r"tail -n", Reply("X" * 1990 + SECRET + " tail\nnext line\n"))
    shown = steps.read_log(_host(conn, profile), profile, 6, mask=Masker([SECRET]))
    assert SECRET[:4] not in shown
    assert shown == "X" * 1990 + "*** tail\nnext line\n"
