#!/usr/bin/env python3
"""Capture tests/fixtures/ps/ownership_listing.txt: real output of kimi_ops.procs.LISTING_COMMAND
taken while vLLM-shaped process trees of two deployments ran on this machine.

What it starts (and kills again, by PID, at the end), each tree under ``setsid`` like a launch:

- tree A, "this deployment": env KIMI_OPS_RUN_DIR=/srv/kimi-a, KIMI_OPS_LAUNCH_ID=launch-a1; an
  API-server-shaped root (``exec -a`` gives the exact argv ``python3 -m
  vllm.entrypoints.openai.api_server --model '/models/k --port 9000' --port 8000``), a
  resource_tracker-shaped child, ``VLLM::EngineCore`` and its child ``VLLM::Worker`` (bash with
  ``exec -a``). The root is then SIGKILLed: the other three live on as orphans, as the real
  engine's do (../shared/vllm/real-cpu-logs/ps_running.txt).
- tree B, "another deployment": the same shape and titles and port, KIMI_OPS_RUN_DIR=/srv/kimi-b;
  its root stays alive.
- a foreign server without any KIMI_OPS_* variable on port 8000, started by ``--config``, and one
  whose argv has a tab and a newline in one element.
- a secret variable (HF_TOKEN) in every tree's environment, which the listing must not print.

Only the lines of these trees and of the listing shell's ancestry are kept (other processes of the
machine are not written: their argv may hold secrets); PIDs are real.

Usage: python3 scripts/capture_ownership_listing.py [OUTPUT]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimi_ops.procs import LISTING_COMMAND, format_row, parse_listing  # noqa: E402

SLEEPER = "import time; time.sleep(600)\n"
TREE = (
    "python3 -B -c 'from multiprocessing.resource_tracker import main;main(31)' "
    "31< <(sleep 600) & "
    "(exec -a VLLM::EngineCore bash -c '(exec -a VLLM::Worker sleep 600) & wait') & "
    "exec python3 -m vllm.entrypoints.openai.api_server "
    "--model '/models/k --port 9000' --port 8000"
)


def fake_packages(tmp: Path) -> Path:
    """A fake ``vllm`` package whose server entry points only sleep (argv stays exact)."""
    for mod in ("vllm/entrypoints/openai/api_server.py", "vllm/entrypoints/cli/main.py"):
        path = tmp / mod
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SLEEPER)
        for parent in path.relative_to(tmp).parents:
            if str(parent) != ".":
                (tmp / parent / "__init__.py").touch()
    (tmp / "kimi_standin.py").write_text(SLEEPER)
    return tmp


def start(script: str, env: dict[str, str], tmp: Path) -> subprocess.Popen[bytes]:
    """A session leader running ``script`` (with ``env`` added to a clean base environment)."""
    base = {"PATH": "/usr/bin:/bin", "HF_TOKEN": "hf_secret_never_printed", "PYTHONPATH": str(tmp)}
    return subprocess.Popen(
        ["bash", "-c", script],
        env={**base, **env},
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> int:
    out = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/ps/ownership_listing.txt"
    )
    tmp = fake_packages(Path(tempfile.mkdtemp(prefix="kimi-capture-")))
    a = start(TREE, {"KIMI_OPS_RUN_DIR": "/srv/kimi-a", "KIMI_OPS_LAUNCH_ID": "launch-a1"}, tmp)
    b = start(TREE, {"KIMI_OPS_RUN_DIR": "/srv/kimi-b", "KIMI_OPS_LAUNCH_ID": "launch-b1"}, tmp)
    foreign = start(
        "exec python3 -m vllm.entrypoints.cli.main serve /m --config serve.yaml", {}, tmp
    )
    odd = start(
        f"exec python3 {tmp}/kimi_standin.py --model $'a\\tb\\nc' --port=8000 --port 8001",
        {},
        tmp,
    )
    leaders = [a, b, foreign, odd]
    try:
        time.sleep(1.0)
        a.send_signal(signal.SIGKILL)  # kill -9 of the API server: its children live on
        a.wait()
        time.sleep(0.5)
        text = subprocess.run(
            ["bash", "-c", LISTING_COMMAND], capture_output=True, text=True, check=True
        ).stdout
    finally:
        listing_now = parse_listing(
            subprocess.run(["bash", "-c", LISTING_COMMAND], capture_output=True, text=True).stdout
        )
        sessions = {p.pid for p in leaders}
        for p in listing_now.procs:
            if p.sid in sessions and p.pid != os.getpid():
                os.kill(p.pid, signal.SIGKILL)
        for p in leaders:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    listing = parse_listing(text)
    by_pid = listing.by_pid()
    keep: set[int] = set()
    cur = listing.self_pid
    while cur and cur in by_pid and cur not in keep:  # the listing shell and its ancestors
        keep.add(cur)
        cur = by_pid[cur].ppid
    sessions = {p.pid for p in leaders}
    keep |= {1}
    ancestry = set(keep)
    keep |= {p.pid for p in listing.procs if p.sid in sessions}
    ancestry -= {listing.self_pid}
    lines = [f"self_pid={listing.self_pid}"]
    for ln in text.split("\n"):
        pid = ln.split(" ", 1)[0]
        if not pid.isdigit() or int(pid) not in keep:
            continue
        if int(pid) in ancestry:  # the session chain: keep argv[0] only (its argv is not ours)
            p = by_pid[int(pid)]
            ln = format_row(replace(p, argv=(*p.argv[:1], "[rest of argv redacted]")))
        lines.append(ln)
    assert "hf_secret" not in text, "the listing printed a non-KIMI_OPS variable"
    header = (
        "# Real output of kimi_ops.procs.LISTING_COMMAND (scripts/capture_ownership_listing.py).\n"
        f"# tree A (KIMI_OPS_RUN_DIR=/srv/kimi-a): session {a.pid}, root SIGKILLed (orphans)\n"
        f"# tree B (KIMI_OPS_RUN_DIR=/srv/kimi-b): session {b.pid}, alive\n"
        f"# foreign --config server: {foreign.pid}; odd argv stand-in: {odd.pid}\n"
    )
    out.write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {out}: {len(lines) - 1} processes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
