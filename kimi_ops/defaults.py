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

#: ``kimi.router``: where the router runs and how it checks the replicas. ``port`` unset means no
#: router is configured (see kimi_ops/router.py).
ROUTER_DEFAULTS: dict[str, Any] = {
    # "local" (the machine running fab) or an SSH target user@host[:port].
    "host": "local",
    "bind": "0.0.0.0",
    "port": None,
    "balance": "leastconn",
    "health_path": "/health",
    "check_interval": 2.0,  # seconds between health checks of each replica
    "fall": 2,  # failed checks before a replica is marked DOWN
    "rise": 2,  # passed checks before it is UP again
    "run_dir": "~/kimi-ops-router",
    "haproxy": "haproxy",
    "python": "python3",  # runs the HTTP probe and, without socat, the admin-socket client
    "request_timeout": 600.0,  # seconds a replica may take to answer (long generations)
    "drain_timeout": 300.0,  # seconds a rolling deploy waits for a drained replica's sessions
    "ready_timeout": 60.0,  # seconds to wait for replicas to be UP after a change
    # fleet host name -> "address[:port]" the router uses to reach that replica's server.
    "addresses": {},
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
    # How many launches' logs (logs/<launch id>.log) to keep in run_dir; older ones are deleted
    # at each launch (the current launch's log and the one before are never deleted).
    "keep_logs": 10,
    # Seconds verify waits for a ready server, and for a silent log before calling it stalled.
    "startup_timeout": 1800,
    "stall_timeout": 900,
    "poll_interval": 2.0,
    # `fab logs` shows at most this many characters of a line (the rest is marked as cut).
    "log_line_limit": 2000,
    # Seconds kill-stale and stop wait between SIGTERM and SIGKILL.
    "grace_seconds": 20.0,
    # Where vLLM's leaked shared memory (psm_*, sem.mp-*) lives; clean-shm looks only here.
    "shm_dir": "/dev/shm",
    # "vllm" runs the real server; "standin" runs the stand-in (standin/), which emulates it.
    "engine": "vllm",
    # What the server runs on: "auto" (CUDA when nvidia-smi answers on the host, else the CPU),
    # "cuda", or "cpu" (vLLM's CPU build).
    "device": "auto",
    # "auto" lets the plan decide; True/False force the KV-cache config patch.
    "patch_kv_config": "auto",
    # None: --max-model-len from extra_args, else the model's own (max_position_embeddings); an
    # integer; or "auto": vLLM's --max-model-len auto where the version has it, else the largest
    # length preflight's sizing estimate fits.
    "max_model_len": None,
    # Secrets: the API key itself, or the name of a local environment variable holding it.
    "api_key": None,
    "api_key_env": None,
    # Local environment variables whose values are passed to the server via the 0600 env file.
    "secret_env": ["HF_TOKEN"],
    # A kimi.env value whose NAME contains one of these (any case) is a secret: it goes only to
    # the 0600 env file and is shown as *** everywhere else. A profile's own list adds to these.
    "secret_patterns": [
        "TOKEN",
        "KEY",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "AUTH",
        "PRIVATE",
    ],
    # SSH host-key policy: "reject" unknown/changed keys (default), or "accept-new".
    "host_key_policy": "reject",
    "known_hosts": "~/.ssh/known_hosts",
    "connect_timeout": 10.0,
    # Seconds any one remote command may take (unless the step sets its own): the host ends it
    # with coreutils `timeout` (SIGTERM, SIGKILL 5 s later) and the step fails naming it.
    "command_timeout": 120.0,
    "standin": dict(STANDIN_DEFAULTS),
    # Fleet settings.
    "hosts": [],
    "host_overrides": {},
    "parallel": 8,
    # Replicas behind one endpoint (HAProxy).
    "router": dict(ROUTER_DEFAULTS),
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
DIAGNOSE_MODULE = "kimi_diagnose.py"  # kimi_ops.diagnose in one file (tasks/bundle.py)
DIAGNOSE_RUNNER = "kimi_diagnose_run.py"

#: Backups of the model's config files written by patch-kv-config.
BACKUP_SUFFIX = ".kimi-ops.orig"
