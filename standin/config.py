"""Settings of what the stand-in emulates: standin.json (or $KIMI_STANDIN_CONFIG), checked."""

from __future__ import annotations

import json
import os
import re
from typing import Any

CONFIG_ENV = "KIMI_STANDIN_CONFIG"
CONFIG_NAME = "standin.json"
STATE_NAME = "standin-gpu-state.json"
# Where the running file is: RUN_DIR on a host (the one-file bundle, kimi_standin.py), or
# standin/ when the package itself runs (python -m standin).
HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULTS: dict[str, Any] = {
    "gpu": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_count": 8,
    "compute_capability": "12.0",
    "vllm_version": "0.17.1",
    "load_seconds": 3.0,  # total emulated loading time (shards take 70 %)
    "memory_mib": 97887,  # per GPU
    "driver_version": "580.95.05",
    "crash_after_seconds": None,  # engine dies this long after "ready" (exit 1)
    "hang": False,  # print the first stages, then go silent forever
    "echo_argv": True,  # print "kimi-standin argv: <json>" first
    # Extras beyond the brief:
    "cuda_version": "13.0",  # nvidia-smi table header only
    "model_weights_gib": 71.2,  # per-GPU weights ("Model loading took 71.2 GiB memory")
    "entrypoint": "api_server",  # "api_server" (python -m ...) or "serve" (vllm serve)
    "state_file": None,  # default: <dir of this file>/standin-gpu-state.json
    "shm_dir": "/dev/shm",
    "compute_app_name": "title",  # nvidia-smi process_name: "title" (VLLM::Worker_TP0) | "python"
    # --distributed-executor-backend ray: seconds to wait for the placement group (vLLM: 1800)
    "ray_pg_timeout": 30.0,
}


class ConfigError(Exception):
    pass


def _number(cfg: dict[str, Any], key: str, allow_none: bool = False) -> float | None:
    value = cfg[key]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{key} must be a non-negative number, got {value!r}")
    return float(value)


def load_config() -> dict[str, Any]:
    """Settings from $KIMI_STANDIN_CONFIG, else standin.json beside this file, else defaults."""
    cfg = dict(DEFAULTS)
    path = os.environ.get(CONFIG_ENV) or ""
    if not path and os.path.isfile(os.path.join(HERE, CONFIG_NAME)):
        path = os.path.join(HERE, CONFIG_NAME)
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object")
        cfg.update({k: v for k, v in data.items() if k in cfg})
    count = cfg["gpu_count"]
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 64:
        raise ConfigError(f"gpu_count must be an integer 0..64, got {count!r}")
    cfg["compute_capability"] = str(cfg["compute_capability"])
    if not re.match(r"^\d+\.\d+$", cfg["compute_capability"]):
        raise ConfigError(f"compute_capability must look like 12.0: {cfg['compute_capability']!r}")
    for key in ("gpu", "vllm_version", "driver_version", "cuda_version", "shm_dir"):
        cfg[key] = str(cfg[key])
    cfg["load_seconds"] = _number(cfg, "load_seconds")
    cfg["memory_mib"] = int(_number(cfg, "memory_mib") or 0)
    cfg["model_weights_gib"] = _number(cfg, "model_weights_gib")
    cfg["crash_after_seconds"] = _number(cfg, "crash_after_seconds", allow_none=True)
    cfg["ray_pg_timeout"] = _number(cfg, "ray_pg_timeout")
    for key in ("hang", "echo_argv"):
        if not isinstance(cfg[key], bool):
            raise ConfigError(f"{key} must be true or false, got {cfg[key]!r}")
    if cfg["entrypoint"] not in ("api_server", "serve"):
        raise ConfigError(f"entrypoint must be 'api_server' or 'serve': {cfg['entrypoint']!r}")
    if cfg["compute_app_name"] not in ("title", "python"):
        raise ConfigError(
            f"compute_app_name must be 'title' or 'python': {cfg['compute_app_name']!r}"
        )
    cfg["state_file"] = str(cfg["state_file"] or os.path.join(HERE, STATE_NAME))
    return cfg


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.17.1' -> (0, 17, 1); pre-release suffixes (rc1, .dev5+g...) count as the release."""
    m = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)) if m else (0, 0, 0)


def visible_gpus(cfg: dict[str, Any]) -> list[int]:
    """GPU indices this process may use: CUDA_VISIBLE_DEVICES (numeric ids) if set."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(cfg["gpu_count"]))
    out: list[int] = []
    for part in env.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= cfg["gpu_count"]:
            break  # like CUDA: an invalid id hides itself and everything after it
        out.append(int(part))
    return out
