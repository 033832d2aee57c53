"""What every preflight module shares: Check, the thresholds and small formatting helpers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..facts import Gpu
from ..shm import human_bytes

if TYPE_CHECKING:
    from ..profile import Profile

Status = Literal["pass", "warn", "fail"]

GIB = 1024**3
#: Below this much free space in run_dir's file system (logs) preflight warns.
MIN_RUN_DIR_FREE_BYTES = 1 * GIB
#: Room for a new launch's log (and its startup output) that run_dir must have besides the files.
LOG_RESERVE_BYTES = 1024**2
#: Below this much free space in /dev/shm (NCCL and vLLM's shm broadcast) preflight warns.
MIN_SHM_FREE_BYTES = 1 * GIB
#: GPU memory in use with no compute process listed above which preflight warns (MiB).
UNLISTED_MEMORY_WARN_MIB = 2048
#: Uids below this are system users, which logind's RemoveIPC= never applies to (SYS_UID_MAX+1).
FIRST_NORMAL_UID = 1000

RESTORE_COMMAND = "fab patch-kv-config --restore"


@dataclass(frozen=True)
class Check:
    """One preflight check: its name, pass/warn/fail, and a one-line reason."""

    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, str]:
        """``{"name", "status", "detail"}``."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


def failed(checks: Sequence[Check]) -> list[Check]:
    """The checks that failed."""
    return [c for c in checks if c.status == "fail"]


def _gib(n_bytes: int) -> str:
    """A size in the unit that shows it (``4.0 KiB``, ``540.2 GiB``), never ``0.0 GiB``."""
    return human_bytes(n_bytes)


def _size(n_bytes: int) -> str:
    """GiB with one decimal, or MiB below 1 GiB (a tiny model's weights)."""
    return _gib(n_bytes) if n_bytes >= GIB else f"{n_bytes / 1024**2:.1f} MiB"


def _model_path(profile: Profile, name: str) -> str:
    return f"{profile.model.rstrip('/')}/{name}"


def _gpu_summary(gpus: Sequence[Gpu]) -> str:
    parts = []
    for name, count in Counter(g.name for g in gpus).items():
        mem = {g.memory_total_mib for g in gpus if g.name == name and g.memory_total_mib}
        each = f", {max(mem)} MiB each" if mem else ""
        parts.append(f"{count} x {name or 'unnamed GPU'}{each}")
    return "; ".join(parts)


def _main_cc(gpus: Sequence[Gpu]) -> str | None:
    ccs = [g.compute_capability for g in gpus if g.compute_capability]
    return Counter(ccs).most_common(1)[0][0] if ccs else None


def _engine_note(profile: Profile) -> str:
    return " (stand-in)" if getattr(profile, "is_standin", False) else ""


def _env_value(profile: Profile, name: str) -> str | None:
    value = profile.env.get(name)
    return value if value not in (None, "") else None
