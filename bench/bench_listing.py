"""Benchmark the /proc listing (kimi_ops.procs.LISTING_COMMAND) and clean-shm's usage command with
many processes on the host.

Starts N extra processes (``sleep``, each its own argv and a KIMI_OPS_* variable, in one session
this script creates), runs each command a few times, prints the seconds, the output size, and
the parse and ownership decision times; then ends its processes by PID.

Usage: ``python bench/bench_listing.py [--procs N] [--runs R]`` (default 2000, 3).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kimi_ops.procs import LISTING_COMMAND, owned_processes, parse_listing  # noqa: E402
from kimi_ops.shm import parse_usage, usage_command  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KIMI_OPS_RUN_DIR": "/srv/bench"}
    script = f"for i in $(seq {args.procs}); do sleep 600 & done; wait"
    leader = subprocess.Popen(["bash", "-c", script], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n = len(
                [p for p in parse_listing(_run(LISTING_COMMAND)[0]).procs if p.sid == leader.pid]
            )
            if n > args.procs:
                break
            time.sleep(0.5)
        for name, command in (("listing", LISTING_COMMAND), ("shm usage", usage_command())):
            times = []
            for _ in range(args.runs):
                out, seconds = _run(command)
                times.append(seconds)
            print(f"{name}: {min(times):.3f} s best of {args.runs}, {len(out) / 1024:.0f} KiB")
        text, _ = _run(LISTING_COMMAND)
        t = time.perf_counter()
        listing = parse_listing(text)
        parsed = time.perf_counter() - t
        t = time.perf_counter()
        sel = owned_processes(listing, "/srv/bench", leader.pid)
        decided = time.perf_counter() - t
        print(f"processes listed: {len(listing.procs)}; owned: {len(sel.pids)}")
        print(f"parse: {parsed * 1000:.1f} ms; ownership decision: {decided * 1000:.1f} ms")
        usage_text, _ = _run(usage_command())
        t = time.perf_counter()
        parse_usage(usage_text)
        print(f"shm usage parse: {(time.perf_counter() - t) * 1000:.1f} ms")
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # the session this script created
        leader.wait()
    return 0


def _run(command: str) -> tuple[str, float]:
    t = time.perf_counter()
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    return out.stdout, time.perf_counter() - t


if __name__ == "__main__":
    raise SystemExit(main())
