"""Red team round 4, findings 1, 2 and 7, through the real `fab` and a real sshd: control
characters in the server's log and in another process's argv are shown escaped, so they cannot
erase the report or print a forged line on the operator's terminal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .deployment import Deployment
from .harness import kill_pid_tree_started_by_test
from .test_ownership import foreign_standin

pytestmark = pytest.mark.e2e

# ESC c (reset), save/restore cursor, DECALN, cursor up + erase line, an OSC title, backspaces,
# DEL, a C1 CSI and a right-to-left override.
HOSTILE = "0.0\x1b7\x1bc\x1b8\x1b#8\x1b[1A\x1b[2K\x1b]0;title\x07 BS\x08\x08\x08\x7f\x9b2J\u202eXX"
SHOWN = "0.0\\x1b7\\x1bc\\x1b8\\x1b#8\\x1b[1A\\x1b[2K\\x1b]0;title\\x07 BS\\x08\\x08\\x08\\x7f"
RAW = ("\x1b", "\x07", "\x08", "\x7f", "\x9b", "\u202e")


def _raw_controls(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def test_a_hostile_log_line_is_shown_escaped_by_logs_and_verify(dep: Deployment) -> None:
    assert dep.fab("deploy").ok
    with (dep.run_dir / "current.log").open("a", encoding="utf-8") as fh:
        fh.write(f"INFO 12-06 05:40:00 [loggers.py:1] Avg prompt throughput: {HOSTILE}\n")
    logs = dep.fab("logs", "--lines", "400")
    assert logs.ok, logs.describe()
    assert not _raw_controls(logs.stdout), logs.describe()
    assert f"Avg prompt throughput: {SHOWN}\\x9b2J\\u202eXX" in logs.stdout, logs.describe()

    server = dep.pidfile_pid()
    assert server is not None
    kill_pid_tree_started_by_test(server, crash=True)  # the server died: verify shows the log
    verify = dep.fab("verify")
    assert verify.returncode != 0, verify.describe()
    assert not _raw_controls(verify.output), verify.describe()
    # (the diagnoser drops CSI and OSC sequences itself; the rest is shown escaped)
    assert "0.0\\x1b7\\x1bc\\x1b8\\x1b#8 BS\\x08\\x08\\x08\\x7f" in verify.stdout, verify.describe()
    assert verify.stdout.count("failed: [") == 1, verify.describe()  # nothing can erase it


def test_a_foreign_argv_with_escapes_and_a_newline_cannot_forge_a_line(
    dep: Deployment, tmp_path: Path
) -> None:
    forged = "ok: kill-stale: no process of this deployment is running, nothing left alone"
    model = f"x\x1b[1A\r\n{forged}\x1b]0;t\x07"  # the argv is shown cut at 160 characters
    with foreign_standin(tmp_path, "--model", model, "--port", str(dep.port)) as foreign:
        run = dep.fab("kill-stale")
        assert run.ok, run.describe()
        assert not _raw_controls(run.output), run.describe()
        left = [ln for ln in run.stdout.splitlines() if f"left alone: {foreign.pid}" in ln]
        assert len(left) == 1, run.describe()
        assert "--model x\\x1b[1A\\nok: kill-stale" in left[0], left[0]
        assert not any(ln.startswith(forged[:20]) for ln in run.stdout.splitlines())
        time.sleep(0.5)
        assert foreign.poll() is None, "the foreign server was killed"


def test_config_json_strings_are_shown_escaped_by_preflight(dep: Deployment) -> None:
    """Finding 9: a downloaded checkpoint's config.json is third-party content."""
    path = dep.model / "config.json"
    config = json.loads(path.read_text())
    config["architectures"] = ["KimiK25ForConditionalGeneration\x1b[2K\r\x1b[1A\x1b]0;x\x07"]
    path.write_text(json.dumps(config, indent=2))  # JSON writes them as \u001b ...
    assert "\\u001b" in path.read_text()
    run = dep.fab("preflight")
    assert not _raw_controls(run.output), run.describe()
    line = next(ln for ln in run.stdout.splitlines() if "model_config" in ln)
    assert "KimiK25ForConditionalGeneration\\x1b[2K\\r\\x1b[1A\\x1b]0;x\\x07; " in line, line
