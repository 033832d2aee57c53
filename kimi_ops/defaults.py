"""Every default of kimi-ops, in one place.

``DEFAULTS`` is the ``kimi`` section of Fabric's configuration as the tool ships it: the
nvidia/Kimi-K2.5-NVFP4 deployment on eight RTX PRO 6000 Blackwell GPUs (compute capability 12.0)
with tensor parallel 8. A project ``fabric.yaml``, ``~/.fabric.yaml`` or ``fab -f FILE`` overrides
any key; ``kimi_ops.profile.load_profile`` validates the merged result.
"""

from __future__ import annotations

from typing import Any

#: Emulated hardware and vLLM for the stand-in engine (``engine: standin``).
STANDIN_DEFAULTS: dict[str, Any] = {
    "gpu": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_count": 8,
    "compute_capability": "12.0",
    "vllm_version": "0.17.1",
    "load_seconds": 3.0,
    "memory_mib": 97887,
    "driver_version": "580.95.05",
    "crash_after_seconds": None,
    "hang": False,
    "echo_argv": True,
    # What `kimi.device: auto` resolves to with the stand-in: it emulates GPUs ("cuda"); "cpu"
    # runs the CPU checks against the host's real CPU facts instead.
    "device": "cuda",
    # Where the emulated GPUs record who holds them (default: beside the stand-in in run_dir).
    # Point two deployments at one file to make them share the emulated GPUs.
    "state_file": None,
}

DEFAULTS: dict[str, Any] = {
    # What to serve.
    "model": "/models/Kimi-K2.5-NVFP4",
    "served_model_name": "kimi-k2.5",
    "python": "/root/ml-env/bin/python3",
    "tensor_parallel_size": 8,
    "host": "0.0.0.0",
    "port": 8000,
    "tool_call_parser": "kimi_k2",
    "reasoning_parser": "kimi_k2",
    "trust_remote_code": True,
    "env": {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"},
    "extra_args": [],
    # Where the script, pidfile and logs live on the host ("~" is the login user's home).
    "run_dir": "~/kimi-ops",
    # Seconds verify waits for a ready server, and for a silent log before calling it stalled.
    "startup_timeout": 1800,
    "stall_timeout": 900,
    "poll_interval": 2.0,
    # Seconds kill-stale and stop wait between SIGTERM and SIGKILL.
    "grace_seconds": 20.0,
    # Where vLLM's leaked shared memory (psm_*, sem.mp-*) lives; clean-shm looks only here.
    "shm_dir": "/dev/shm",
    # "vllm" runs the real server; "standin" runs kimi_ops/standin.py, which emulates it.
    "engine": "vllm",
    # What the server runs on: "auto" (CUDA when nvidia-smi answers on the host, else the CPU),
    # "cuda", or "cpu" (vLLM's CPU build).
    "device": "auto",
    # "auto" lets the plan decide; True/False force the KV-cache config patch.
    "patch_kv_config": "auto",
    # Secrets: the API key itself, or the name of a local environment variable holding it.
    "api_key": None,
    "api_key_env": None,
    # Local environment variables whose values are passed to the server via the 0600 env file.
    "secret_env": ["HF_TOKEN"],
    # SSH host-key policy: "reject" unknown/changed keys (default), or "accept-new".
    "host_key_policy": "reject",
    "known_hosts": "~/.ssh/known_hosts",
    "connect_timeout": 10.0,
    "standin": dict(STANDIN_DEFAULTS),
    # Fleet settings.
    "hosts": [],
    "host_overrides": {},
    "parallel": 8,
    # One model across several hosts on Ray: head, workers, Ray port (kimi_ops.cluster).
    "cluster": {},
}

#: File names inside ``run_dir``.
LAUNCH_SCRIPT = "launch.sh"
PIDFILE = "server.pid"
LAUNCH_ID_FILE = "launch.id"
CURRENT_LOG = "current.log"
LOG_DIR = "logs"
ENV_FILE = "server.env"
LOCK_FILE = "kimi-ops.lock"
PROBE_SCRIPT = "kimi_probe.py"
STANDIN_SCRIPT = "kimi_standin.py"
STANDIN_CONFIG = "standin.json"

#: Backups of the model's config files written by patch-kv-config.
BACKUP_SUFFIX = ".kimi-ops.orig"
