"""The emulated GPUs' state file: which live stand-in processes hold which GPU."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from typing import Any


def pid_alive(pid: Any) -> bool:
    """True for a live, non-zombie process."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _entry_alive(entry: dict[str, Any]) -> bool:
    pids = [entry.get("pid")] + list(entry.get("gpu_pids", {}).values())
    return any(pid_alive(p) for p in pids)


def _load_servers(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return []
    servers = data.get("servers") if isinstance(data, dict) else None
    return [s for s in servers or [] if isinstance(s, dict)]


def read_state(path: str) -> list[dict[str, Any]]:
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - flock needs the open file
    except OSError:
        return []
    with fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        return _load_servers(fh.read())


def update_state(path: str, fn: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Locked read-modify-write; dead entries are pruned; the file goes when empty."""
    for _ in range(50):
        with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                if os.fstat(fh.fileno()).st_ino != os.stat(path).st_ino:
                    continue  # unlinked by another process while we waited for the lock
            except FileNotFoundError:
                continue
            servers = fn([s for s in _load_servers(fh.read()) if _entry_alive(s)])
            if servers:
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps({"servers": servers}, indent=2) + "\n")
            else:
                os.unlink(path)
            return


def gpu_usage(cfg: dict[str, Any]) -> dict[int, list[tuple[int, str, int]]]:
    """GPU index -> [(pid, process name, MiB)] for live stand-in processes."""
    usage: dict[int, list[tuple[int, str, int]]] = {}
    for entry in read_state(cfg["state_file"]):
        for gpu, pid in entry.get("gpu_pids", {}).items():
            if pid_alive(pid) and str(gpu).isdigit():
                name = str(entry.get("python", "python3"))
                if cfg["compute_app_name"] == "title":
                    name = str(entry.get("gpu_process_names", {}).get(str(gpu), name))
                mem = int(entry.get("memory_mib_per_gpu", 0))
                usage.setdefault(int(gpu), []).append((int(pid), name, mem))
    return usage
