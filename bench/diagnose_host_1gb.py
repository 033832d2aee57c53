"""`fab diagnose` (no --log) on a 1 GB host log: figures, not assertions (issue 12 item 17).

Starts a throwaway sshd on 127.0.0.1 (tests/e2e/harness.py), writes a 1 GB current.log in a
temporary run_dir (a real vLLM startup log repeated, then the real crash at its end), and times
the real `fab diagnose --json` over SSH: the diagnosis runs ON the host (kimi_diagnose.py with
the profile's python). For comparison it times the streaming path (what `fab diagnose` did
before, and still does when the host's python cannot run the module) on the first
--stream-mb MB. Everything it made is deleted at the end.

    .venv/bin/python bench/diagnose_host_1gb.py [--gb 1] [--stream-mb 64]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import run_fab, start_sshd  # noqa: E402

LOGS = Path("/work/shared/vllm/logs")


def write_log(path: Path, size: int) -> None:
    healthy = (LOGS / "004_healthy.log").read_bytes()
    crash = (LOGS / "034_kv_cache_insufficient.log").read_bytes()
    with path.open("wb") as fh:
        written = 0
        while written < size - len(crash):
            fh.write(healthy)
            written += len(healthy)
        fh.write(crash)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--stream-mb", type=int, default=64)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kimi-bench-diag-"))
    server = start_sshd()
    try:
        run_dir = tmp / "run"
        (run_dir / "logs").mkdir(parents=True)
        log = run_dir / "logs" / "big.log"
        write_log(log, int(args.gb * 2**30))
        (run_dir / "current.log").symlink_to("logs/big.log")
        config = {
            "kimi": {
                "known_hosts": str(server.host.known_hosts_path),
                "python": sys.executable,
                "run_dir": str(run_dir),
                "secret_env": [],
            }
        }
        size_mb = log.stat().st_size / 2**20
        run = run_fab(server.host, "diagnose", "--json", config=config, timeout=1200)
        label = json.loads(run.stdout)["label"] if run.ok else f"FAILED: {run.output[-500:]}"
        print(
            f"host-side diagnose of {size_mb:.0f} MiB: {run.seconds:.1f} s "
            f"({size_mb / run.seconds:.0f} MiB/s end to end), label {label}"
        )

        from fabric import Connection  # the streaming path, timed on a slice of the log

        from kimi_ops.profile import load_profile
        from tasks import steps
        from tasks.host import Host

        small = run_dir / "logs" / "small.log"
        with log.open("rb") as src, small.open("wb") as dst:
            dst.write(src.read(args.stream_mb * 2**20))
        (run_dir / "current.log").unlink()
        (run_dir / "current.log").symlink_to("logs/small.log")
        h = server.host
        conn = Connection(
            h.host, user=h.user, port=h.port, connect_kwargs={"key_filename": str(h.key_path)}
        )
        profile = load_profile({**config["kimi"], "run_dir": str(run_dir)})
        started = time.monotonic()
        steps.stream_diagnose_host_log(Host(conn, profile), profile)
        took = time.monotonic() - started
        print(
            f"streamed over SSH, {args.stream_mb} MiB: {took:.1f} s "
            f"({args.stream_mb / took:.0f} MiB/s; 1 GiB would take about "
            f"{1024 / (args.stream_mb / took):.0f} s)"
        )
        conn.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
