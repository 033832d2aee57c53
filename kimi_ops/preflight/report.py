"""Every check in a fixed order (run_checks), and the checks and plan as JSON."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..cpu import CpuFacts
from ..facts import HostFacts
from ..redact import DEFAULT_SECRET_PATTERNS, redact_env
from .common import Check
from .cpu import _check_cpu_model, _check_device, _cpu_checks, resolve_device
from .fit import _check_kv_cache_fit
from .gpu import _check_gpu_processes, _check_gpus
from .host import _check_disk, _check_port, _check_remove_ipc, _check_shm
from .model import _check_model, _check_vllm
from .plan import Plan

if TYPE_CHECKING:
    from ..profile import Profile


def preflight_report(
    checks: Sequence[Check], plan: Plan, secret_patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS
) -> dict[str, Any]:
    """``{"checks": [{"name", "status", "detail"}, ...], "plan": {...}}`` (JSON-serialisable);
    the plan's secret-named env values are shown as ``***``."""
    out = plan.to_dict()
    out["env"] = redact_env(plan.env, secret_patterns)
    return {"checks": [c.to_dict() for c in checks], "plan": out}


def run_checks(
    profile: Profile, facts: HostFacts, *, own_pids: Collection[int] = (), run_dir_need: int = 0
) -> list[Check]:
    """Every preflight check, in a fixed order.

    ``own_pids`` are the processes of this deployment's own running server (which deploy
    replaces): GPU memory or the port held by them only warns; anything else holding them fails.
    ``run_dir_need``: bytes run_dir's file system must have free (the launch files and a log);
    less fails, before deploy ends anything.
    """
    own = set(own_pids)
    checks: list[Check] = []
    device, _ = resolve_device(profile, facts)
    if device == "cpu":
        checks.append(_check_device(profile, facts))
        checks += _cpu_checks(profile, facts, own)
    else:
        checks += _check_gpus(profile, facts)
        checks += _check_gpu_processes(profile, facts, own)
    checks.append(_check_vllm(profile, facts))
    checks += _check_model(profile, facts)
    if device == "cpu":
        checks += _check_cpu_model(profile, facts, facts.cpu or CpuFacts())
    checks.append(_check_kv_cache_fit(profile, facts, own))
    checks.append(_check_port(profile, facts, own))
    checks.append(_check_disk(profile, facts, run_dir_need))
    checks.append(_check_shm(profile, facts))
    checks.append(_check_remove_ipc(profile, facts))
    return checks
