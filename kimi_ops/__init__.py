"""kimi-ops: the pure core of a tool that deploys a vLLM OpenAI server to a GPU host over SSH.

Everything here turns facts (the text of ``ps``, ``nvidia-smi``, a log, a JSON file) into
decisions and commands. Nothing here does I/O or imports fabric, invoke, paramiko, subprocess
or socket, so it can be used from any script and tested with plain data. (The stand-in engine
that *emulates* vLLM on hosts is not part of it: it is the ``standin`` package.)

Example::

    from kimi_ops import load_profile, render_launch_script, diagnose
    profile = load_profile({"port": 8001, "run_dir": "/srv/kimi"})
    print(render_launch_script(profile))
    print(diagnose(open("vllm.log").read()).summary)
"""

from __future__ import annotations

__version__ = "0.1.0"

from .checkpoint import checkpoint_files
from .compat import backends_for, effective_kv_cache_dtype, fp8_kv_supported
from .defaults import DEFAULTS, STANDIN_DEFAULTS
from .diagnose import LABELS, RULES, STAGES, Diagnosis, LogDiagnoser, Rule, diagnose
from .errors import ConfigPatchError, KimiOpsError, ProfileError, RemoteKilled, StepFailed
from .facts import HostFacts, gather_command, parse_gathered
from .kvpatch import FilePatch, patch_text, plan_patch, remove_key, unified_diff
from .preflight import Check, Plan, build_plan, preflight_report, resolve_device, run_checks
from .procs import (
    LISTING_COMMAND,
    Listing,
    Proc,
    Selection,
    owned_processes,
    parse_listing,
    parse_ps,
    server_args,
    server_port,
    signal_command,
)
from .profile import Profile, StandinSettings, load_profile, secret_env_values
from .result import Status, StepResult, format_result
from .script import engine_command, launch_command, render_launch_script, server_argv
from .shell import quote
from .shm import ShmFile, ShmPlan, parse_shm_listing, plan_shm_cleanup
from .verify import PollFacts, ProbeResult, Verdict, VerifyState, parse_poll, poll_command

__all__ = [
    "__version__",
    "DEFAULTS",
    "STANDIN_DEFAULTS",
    # profile
    "Profile",
    "StandinSettings",
    "load_profile",
    "secret_env_values",
    # facts, compatibility and the plan
    "HostFacts",
    "gather_command",
    "parse_gathered",
    "Check",
    "Plan",
    "run_checks",
    "resolve_device",
    "build_plan",
    "preflight_report",
    "effective_kv_cache_dtype",
    "backends_for",
    "fp8_kv_supported",
    "checkpoint_files",
    "quote",
    # errors
    "KimiOpsError",
    "ProfileError",
    "ConfigPatchError",
    "StepFailed",
    "RemoteKilled",
    # results
    "Status",
    "StepResult",
    "format_result",
    # processes
    "LISTING_COMMAND",
    "Listing",
    "Proc",
    "Selection",
    "parse_listing",
    "parse_ps",
    "owned_processes",
    "server_args",
    "server_port",
    "signal_command",
    # shared memory
    "ShmFile",
    "ShmPlan",
    "parse_shm_listing",
    "plan_shm_cleanup",
    # config patch
    "FilePatch",
    "patch_text",
    "plan_patch",
    "remove_key",
    "unified_diff",
    # launch script
    "server_argv",
    "engine_command",
    "render_launch_script",
    "launch_command",
    # diagnosis
    "LABELS",
    "RULES",
    "STAGES",
    "Rule",
    "Diagnosis",
    "LogDiagnoser",
    "diagnose",
    # verify
    "PollFacts",
    "ProbeResult",
    "Verdict",
    "VerifyState",
    "parse_poll",
    "poll_command",
]
