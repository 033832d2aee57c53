"""Preflight: checks over gathered host facts, and the deployment plan. Pure: no I/O.

:func:`run_checks` turns :class:`~kimi_ops.facts.HostFacts` into one :class:`Check` per concern
(pass / warn / fail with a one-line reason naming the culprit). :func:`build_plan` decides what
the deploy does about the KV-cache config, which attention backend to pin, and how to adjust the
launch arguments for the vLLM version on the host.

The package holds one module per family: :mod:`.common` (Check, thresholds), :mod:`.gpu`,
:mod:`.cpu` (device and CPU-host checks), :mod:`.model` (vLLM and the checkpoint),
:mod:`.host` (port, disk, /dev/shm, RemoveIPC), :mod:`.kvrequest`, :mod:`.plan`
(:func:`build_plan`), :mod:`.fit` (the KV-cache fit check) and :mod:`.report` (:func:`run_checks`,
:func:`preflight_report`). Every public name is re-exported here.
"""

from __future__ import annotations

from .common import (
    FIRST_NORMAL_UID,
    GIB,
    LOG_RESERVE_BYTES,
    MIN_RUN_DIR_FREE_BYTES,
    MIN_SHM_FREE_BYTES,
    RESTORE_COMMAND,
    UNLISTED_MEMORY_WARN_MIB,
    Check,
    Status,
    failed,
)
from .cpu import (
    GPU_MEMORY_UTILIZATION_FLAG,
    KV_CACHE_MEMORY_FLAG,
    KVCACHE_SPACE_ENV,
    resolve_device,
    weights_bytes,
)
from .plan import MAX_MODEL_LEN_AUTO, Plan, build_plan
from .report import preflight_report, run_checks

__all__ = [
    "Check",
    "FIRST_NORMAL_UID",
    "GIB",
    "GPU_MEMORY_UTILIZATION_FLAG",
    "KVCACHE_SPACE_ENV",
    "KV_CACHE_MEMORY_FLAG",
    "LOG_RESERVE_BYTES",
    "MAX_MODEL_LEN_AUTO",
    "MIN_RUN_DIR_FREE_BYTES",
    "MIN_SHM_FREE_BYTES",
    "Plan",
    "RESTORE_COMMAND",
    "Status",
    "UNLISTED_MEMORY_WARN_MIB",
    "build_plan",
    "failed",
    "preflight_report",
    "resolve_device",
    "run_checks",
    "weights_bytes",
]
