"""A dry run's stdout stays a report (one JSON document under --json), and a dry diagnose runs
nothing it did not upload (red team round 4 #6: `fab --dry diagnose --json` printed `[dry] ...
would upload` to stdout before the JSON, then ran the runner that was never uploaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Context

from kimi_ops.defaults import CURRENT_LOG, DIAGNOSE_RUNNER
from kimi_ops.profile import load_profile
from tasks import steps
from tasks.host import Host
from tasks.testing import ScriptedConnection

REPO = Path(__file__).resolve().parent.parent
OOM = (
    "INFO 12-06 05:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
    "ERROR 12-06 05:00:01 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB\n"
)


def test_dry_lines_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    profile = load_profile({"run_dir": "/srv/kimi"})
    h = Host(ScriptedConnection(), profile, dry=True)  # type: ignore[arg-type]
    h.run("rm -f /srv/kimi/x", step="t")
    h.put_files([(b"data", "/srv/kimi/f", 0o600)], step="t")
    out, err = capsys.readouterr()
    assert out == "", out
    assert "[dry] root@gpu-host: would run: rm -f /srv/kimi/x" in err
    assert "[dry] root@gpu-host: would upload 4 bytes to /srv/kimi/f (mode 600)" in err


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / CURRENT_LOG).write_text(OOM)
    return run


def test_a_dry_diagnose_streams_the_log_instead_of_running_a_runner_it_did_not_upload(
    tmp_path: Path,
) -> None:
    run = _run_dir(tmp_path)
    profile = load_profile({"run_dir": str(run), "python": sys.executable})
    h = Host(Context(), profile, dry=True)
    said: list[str] = []
    d = steps.diagnose_host_log(h, profile, progress=said.append)
    assert d.label == "cuda_oom", d
    assert not [c for c in h.commands if DIAGNOSE_RUNNER in c and sys.executable in c]
    assert sorted(p.name for p in run.iterdir()) == [CURRENT_LOG]  # nothing uploaded
    assert any("dry run: would upload" in s and "streaming the log here" in s for s in said)


def test_fab_dry_diagnose_json_prints_one_json_document(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    config = tmp_path / "profile.json"
    config.write_text(json.dumps({"kimi": {"run_dir": str(run), "python": sys.executable}}))
    fab = Path(sys.executable).parent / "fab"
    proc = subprocess.run(
        [str(fab), "-f", str(config), "--dry", "diagnose", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert proc.returncode == 0, proc
    doc = json.loads(proc.stdout)  # the whole stdout: one JSON document
    assert doc["label"] == "cuda_oom", doc
    assert "[dry]" in proc.stderr and "can't open file" not in proc.stderr, proc.stderr
