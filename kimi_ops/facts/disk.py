"""Disk facts: size and free space of a file system, from ``df -Pk``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiskSpace:
    """Size and free space of the file system holding ``path`` (from ``df -Pk``)."""

    path: str
    total_bytes: int
    free_bytes: int

    @property
    def free_gib(self) -> float:
        """Free space in GiB."""
        return self.free_bytes / 1024**3


def parse_df(text: str) -> DiskSpace | None:
    """Parse ``df -Pk PATH`` output (POSIX format, 1024-byte blocks).

    ``path`` is the mount point df reports. Returns None when no data line is found.
    """
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        # The mount point is the last column; the file-system name may contain spaces, so
        # read the numeric columns from the right.
        for i in range(1, len(parts) - 4):
            if all(p.isdigit() for p in parts[i : i + 3]) and parts[i + 3].endswith("%"):
                return DiskSpace(
                    path=" ".join(parts[i + 4 :]),
                    total_bytes=int(parts[i]) * 1024,
                    free_bytes=int(parts[i + 2]) * 1024,
                )
    return None
