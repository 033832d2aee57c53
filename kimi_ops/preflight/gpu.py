"""GPU checks: the GPUs nvidia-smi lists and the processes holding their memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import compat
from ..facts import GpuProcess, HostFacts
from .common import UNLISTED_MEMORY_WARN_MIB, Check, _engine_note, _gpu_summary, _main_cc

if TYPE_CHECKING:
    from ..profile import Profile


def _check_gpus(profile: Profile, facts: HostFacts) -> list[Check]:
    tp = profile.tensor_parallel_size
    if facts.gpus is None:
        cpu_hint = (
            "; for vLLM's CPU build set kimi.device: cpu (or auto)"
            if facts.nvidia_smi_missing
            else ""
        )
        return [
            Check(
                "gpus",
                "fail",
                f"cannot list GPUs{_engine_note(profile)}: {facts.gpu_error}{cpu_hint}",
            )
        ]
    gpus = facts.gpus
    if len(gpus) < tp:
        found = _gpu_summary(gpus) if gpus else "no GPUs"
        return [
            Check(
                "gpus",
                "fail",
                f"tensor_parallel_size is {tp} but the host has {len(gpus)} GPU(s): {found}",
            )
        ]
    drivers = sorted({g.driver_version for g in gpus if g.driver_version})
    driver = f", driver {', '.join(drivers)}" if drivers else ""
    checks = [Check("gpus", "pass", f"{_gpu_summary(gpus)}{driver} (TP {tp})")]

    ccs = sorted({g.compute_capability for g in gpus if g.compute_capability})
    cc = _main_cc(gpus)
    parsed = compat.parse_cc(cc) if cc else None
    if parsed is None:
        checks.append(
            Check("compute_capability", "warn", "nvidia-smi reported no compute capability")
        )
    elif len(ccs) > 1:
        checks.append(
            Check(
                "compute_capability",
                "warn",
                f"mixed compute capabilities {', '.join(ccs)}; tensor parallel needs matching GPUs",
            )
        )
    elif parsed < (8, 0):
        checks.append(
            Check(
                "compute_capability",
                "fail",
                f"compute capability {cc} is below 8.0; vLLM needs 8.0+ for bfloat16",
            )
        )
    else:
        checks.append(Check("compute_capability", "pass", f"compute capability {cc}"))
    return checks


def _check_gpu_processes(profile: Profile, facts: HostFacts, own: set[int]) -> list[Check]:
    checks: list[Check] = []
    if facts.compute_apps is None:
        checks.append(
            Check(
                "gpu_processes",
                "warn",
                f"cannot list GPU compute processes: {facts.compute_apps_error}",
            )
        )
    else:
        foreign = [p for p in facts.compute_apps if p.pid not in own]
        mine = [p for p in facts.compute_apps if p.pid in own]

        def describe(procs: Sequence[GpuProcess]) -> str:
            items = []
            for p in procs[:4]:
                mem = f", {p.used_memory_mib} MiB" if p.used_memory_mib is not None else ""
                items.append(f"PID {p.pid} ({p.process_name or 'unknown command'}{mem})")
            more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
            return ", ".join(items) + more

        if foreign:
            checks.append(
                Check(
                    "gpu_processes",
                    "fail",
                    f"GPU memory is held by {describe(foreign)}; stop it (fab kill-stale) "
                    "before deploying",
                )
            )
        elif mine:
            checks.append(
                Check(
                    "gpu_processes",
                    "warn",
                    f"this deployment's own server holds the GPUs ({describe(mine)}); "
                    "deploy replaces it",
                )
            )
        else:
            checks.append(Check("gpu_processes", "pass", "no compute processes on the GPUs"))

    if facts.gpus:
        listed = bool(facts.compute_apps)
        busy = [
            g
            for g in facts.gpus
            if g.memory_used_mib is not None and g.memory_used_mib > UNLISTED_MEMORY_WARN_MIB
        ]
        if busy and not listed:
            g = max(busy, key=lambda x: x.memory_used_mib or 0)
            checks.append(
                Check(
                    "gpu_memory",
                    "warn",
                    f"{len(busy)} GPU(s) have memory in use with no process listed (GPU {g.index}: "
                    f"{g.memory_used_mib} of {g.memory_total_mib} MiB); another container or "
                    "user may hold them",
                )
            )
        else:
            free = [g.memory_free_mib for g in facts.gpus if g.memory_free_mib is not None]
            detail = f"least free GPU memory: {min(free)} MiB" if free else "memory not reported"
            checks.append(Check("gpu_memory", "pass", detail))
    return checks
