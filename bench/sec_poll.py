"""Benchmark 4: what one verify poll costs on a big log.

A 100 MB vLLM-style log (lines from bench_diagnose.py) grows by about 1 KB before every poll.
Each poll runs through a fresh ssh connection to the bench sshd; measured: the bytes that come
back (stdout) and the seconds per poll, for

* kimi-ops: ``kimi_ops.verify.poll_command(run_dir, offset)`` parsed by ``parse_poll``; the
  offset advances by what was read (steady state: the log was read once already, so ``offset``
  starts at the current size -- a first poll on an existing log reads it once, 4 MiB a poll);
* ``tail -n 250 LOG`` (what a careful manual poll reads; 250 lines: facts.md section 5);
* ``cat LOG`` (the naive way).
"""

from __future__ import annotations

import random
import subprocess
import time
from typing import Any

import bench_diagnose
import lib

from kimi_ops.verify import parse_poll, poll_command


def ssh_bytes(host: lib.SshdHost, command: str, keep: bool) -> tuple[int, float, bytes]:
    argv = [*lib.ssh_base_args(host), host.host, command]
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    total = 0
    kept = []
    while chunk := proc.stdout.read(1 << 20):
        total += len(chunk)
        if keep:
            kept.append(chunk)
    proc.wait(120)
    return total, time.monotonic() - start, b"".join(kept)


def make_log(path, mb: float) -> tuple[int, list[str]]:
    rng = random.Random(7)
    block = (
        bench_diagnose.startup(rng)
        + "\n".join(bench_diagnose.serving_line(rng, i) for i in range(4000))
        + "\n"
    )
    data = block.encode()
    target = int(mb * 1_000_000)
    with open(path, "wb") as fh:
        written = 0
        while written < target:
            fh.write(data)
            written += len(data)
    lines = [bench_diagnose.serving_line(rng, i) + "\n" for i in range(400)]
    return written, lines


def grow(path, lines: list[str], k: int, size: int = 1024) -> int:
    """Append about `size` bytes of whole lines."""
    out = []
    n = 0
    i = k * 7
    while n < size:
        line = lines[i % len(lines)]
        out.append(line)
        n += len(line)
        i += 1
    with open(path, "a") as fh:
        fh.write("".join(out))
    return n


def run_section(run: lib.Run, mb: float, polls: int, cat_polls: int) -> dict[str, Any]:
    host = run.sshd()
    d = run.newdir("poll")
    run_dir = d / "run"
    run_dir.mkdir()
    log_path = run_dir / "current.log"
    size, lines = make_log(log_path, mb)
    out: dict[str, Any] = {"log_mb": round(size / 1e6, 1), "growth_bytes_per_poll": 1024}

    # kimi-ops
    offset = log_path.stat().st_size
    recs = []
    for k in range(polls):
        added = grow(log_path, lines, k)
        n, secs, data = ssh_bytes(host, poll_command(str(run_dir), offset), keep=True)
        facts = parse_poll(data.decode(errors="replace"))
        offset += facts.read
        recs.append({"bytes": n, "seconds": secs, "log_bytes": facts.read, "added": added})
    out["kimi_ops"] = {
        "polls": recs,
        "median_bytes": lib.median([r["bytes"] for r in recs]),
        "median_seconds": lib.median([r["seconds"] for r in recs]),
        "caught_up": offset == log_path.stat().st_size,
    }
    for name, cmd, count in (
        ("tail_250", f"tail -n 250 {log_path}", polls),
        ("cat", f"cat {log_path}", cat_polls),
    ):
        recs = []
        for k in range(count):
            grow(log_path, lines, k)
            n, secs, _ = ssh_bytes(host, cmd, keep=False)
            recs.append({"bytes": n, "seconds": secs})
        out[name] = {
            "command": cmd.replace(str(log_path), "LOG"),
            "polls": recs,
            "median_bytes": lib.median([r["bytes"] for r in recs]),
            "median_seconds": lib.median([r["seconds"] for r in recs]),
        }
    base = out["kimi_ops"]["median_bytes"]
    for key in ("kimi_ops", "tail_250", "cat"):
        out[key]["bytes_ratio_to_kimi_ops"] = round(out[key]["median_bytes"] / base, 1)
    log_path.unlink()
    return out
