"""Stale shared memory left by a crashed or SIGKILLed vLLM: which files, and whether it is safe.

vLLM's shm_broadcast ring buffers are ``/dev/shm/psm_*`` (about 100 MiB each) and Python's
multiprocessing semaphores are ``/dev/shm/sem.mp-*``. They leak on a crash and fill /dev/shm,
after which NCCL fails. They are removed only while no vLLM server is alive.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"^(psm_|sem\.mp-)[^/\s]+$")


def list_command(shm_dir: str = SHM_DIR) -> str:
    """Lists candidates in ``shm_dir`` as ``size<TAB>path`` lines."""
    return (
        f"find {shlex.quote(shm_dir)} -maxdepth 1 -type f \\( -name 'psm_*' -o -name 'sem.mp-*' "
        "\\) -printf '%s\\t%p\\n'"
    )


def _safe(path: str, shm_dir: str) -> bool:
    head, _, name = path.rpartition("/")
    return head == shm_dir.rstrip("/") and bool(_NAME.match(name))


@dataclass(frozen=True)
class ShmFile:
    path: str
    size: int


@dataclass(frozen=True)
class ShmPlan:
    """Either the files to remove (and their bytes), or why nothing may be removed."""

    files: tuple[ShmFile, ...]
    refused: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def parse_shm_listing(text: str, shm_dir: str = SHM_DIR) -> list[ShmFile]:
    """Parse :func:`list_command` output, keeping only vLLM's shm files directly in shm_dir."""
    out: list[ShmFile] = []
    for line in text.splitlines():
        size, _, path = line.partition("\t")
        if size.strip().isdigit() and _safe(path, shm_dir):
            out.append(ShmFile(path, int(size)))
    return out


def plan_shm_cleanup(files: Sequence[ShmFile], live_server_pids: Sequence[int]) -> ShmPlan:
    """Remove every listed file, unless a vLLM server is alive (then refuse, naming the PIDs)."""
    if live_server_pids:
        pids = ", ".join(str(p) for p in live_server_pids)
        return ShmPlan((), refused=f"a vLLM server process is alive (PID {pids})")
    return ShmPlan(tuple(files))


def remove_commands(
    files: Sequence[ShmFile], shm_dir: str = SHM_DIR, batch: int = 200
) -> list[str]:
    """``rm -f --`` commands (batched so no command line grows unbounded)."""
    paths = [f.path for f in files if _safe(f.path, shm_dir)]
    return [
        "rm -f -- " + " ".join(shlex.quote(p) for p in paths[i : i + batch])
        for i in range(0, len(paths), batch)
    ]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
