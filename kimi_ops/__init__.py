"""kimi-ops: the pure core of a tool that deploys a vLLM OpenAI server to a GPU host over SSH.

Everything here turns facts (the text of ``ps``, ``nvidia-smi``, a log, a JSON file) into
decisions and commands. Nothing here does I/O or imports fabric, invoke, paramiko, subprocess
or socket, so it can be used from any script and tested with plain data. The one exception is
``kimi_ops/standin.py``, a stand-alone stdlib file uploaded to hosts to *emulate* vLLM.

Example::

    from kimi_ops import load_profile, render_launch_script, diagnose
    profile = load_profile({"port": 8001, "run_dir": "/srv/kimi"})
    print(render_launch_script(profile))
    print(diagnose(open("vllm.log").read()).summary)
"""

from __future__ import annotations

__version__ = "0.1.0"

from .defaults import DEFAULTS, STANDIN_DEFAULTS
from .diagnose import LABELS, RULES, STAGES, Diagnosis, LogDiagnoser, Rule, diagnose
from .errors import ConfigPatchError, KimiOpsError, ProfileError, RemoteKilled, StepFailed
from .kvpatch import FilePatch, patch_text, plan_patch, remove_key, unified_diff
from .procs import (
    LISTING_COMMAND,
    Listing,
    Proc,
    Selection,
    alive_servers,
    parse_ps,
    select_server_processes,
    server_args,
    signal_command,
)
from .profile import Profile, StandinSettings, load_profile
from .result import Status, StepResult, format_result
from .script import engine_command, launch_command, render_launch_script, server_argv
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
    "parse_ps",
    "select_server_processes",
    "alive_servers",
    "server_args",
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
