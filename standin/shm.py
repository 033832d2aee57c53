"""Shared-memory files like vLLM's shm_broadcast buffers and multiprocessing semaphores."""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import secrets
import string

from standin.logfmt import Role

#: Like vLLM, the stand-in keeps its shm files mapped while it runs (forked children inherit the
#: mappings): clean-shm decides per file from /proc/PID/maps, so a live server's files must show.
_SHM_MAPS: list[mmap.mmap] = []


def create_shm_files(shm_dir: str, queues: int, api: Role) -> list[str]:
    made: list[str] = []
    alphabet = string.ascii_lowercase + string.digits + "_"
    try:
        for _ in range(queues):
            # SharedMemory: "psm_" + 8 hex chars; SemLock: "sem.mp-" + 8 chars (a few KB only,
            # real ring buffers are ~100 MiB).
            sem = "sem.mp-" + "".join(random.choice(alphabet) for _ in range(8))
            for name, size in (("psm_" + secrets.token_hex(4), 4096), (sem, 32)):
                path = os.path.join(shm_dir, name)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                made.append(path)
                try:
                    os.ftruncate(fd, size)
                    _SHM_MAPS.append(mmap.mmap(fd, size))
                finally:
                    os.close(fd)
    except OSError as exc:
        api.warning(
            "standin.py:0",
            f"kimi-standin: cannot create shared-memory files in {shm_dir} ({exc}); continuing",
        )
    return made


def remove_files(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
