"""The operations: each gathers facts with a command, asks kimi_ops, acts, and returns a result.

Every function takes a :class:`~tasks.host.Host` and a validated Profile whose ``run_dir`` is
already resolved, and returns a :class:`~kimi_ops.result.StepResult` (or raises StepFailed).
They are composed by the Fabric tasks in :mod:`tasks.cli`.

One module per operation group: :mod:`.processes` (kill-stale, clean-shm), :mod:`.kvconfig`
(patch-kv-config), :mod:`.upload` (upload-script), :mod:`.checks` (preflight), :mod:`.start`
(launch), :mod:`.poll` (verify), :mod:`.logs` (logs, diagnose); :mod:`.common` what they share.
Every public name is re-exported here (and ``_probe_command``, which tasks.state uses).
"""

from __future__ import annotations

from .checks import PreflightOutcome, gather, preflight
from .common import Clock, Sleep
from .common import _probe_command as _probe_command  # tasks.state imports it from here
from .kvconfig import patch_kv_config
from .logs import (
    NO_LOG_HINT,
    diagnose_host_log,
    diagnosis_from_dict,
    follow_log,
    read_log,
    stream_diagnose_host_log,
)
from .poll import verify
from .processes import clean_shm, kill_stale, listing, owned, record_shm
from .start import launch, new_launch_id
from .upload import (
    check_secret_env,
    ensure_standin,
    env_file_text,
    running_unchanged,
    sync_files,
    upload_files,
    upload_script,
)

__all__ = [
    "Clock",
    "check_secret_env",
    "NO_LOG_HINT",
    "PreflightOutcome",
    "Sleep",
    "clean_shm",
    "diagnose_host_log",
    "diagnosis_from_dict",
    "ensure_standin",
    "env_file_text",
    "follow_log",
    "gather",
    "kill_stale",
    "launch",
    "listing",
    "new_launch_id",
    "owned",
    "record_shm",
    "patch_kv_config",
    "preflight",
    "read_log",
    "running_unchanged",
    "stream_diagnose_host_log",
    "sync_files",
    "upload_files",
    "upload_script",
    "verify",
]
