"""What the operations share: run_dir, the sleep/clock types, uploaded files, the probe."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from kimi_ops import verify as vfy
from kimi_ops.defaults import (
    DIAGNOSE_MODULE,
    ENV_FILE,
    PROBE_SCRIPT,
    STANDIN_SCRIPT,
)
from kimi_ops.profile import Profile
from standin import bundle as standin_bundle
from tasks import bundle as diagnose_bundle

Sleep = Callable[[float], None]
Clock = Callable[[], float]


def _run_dir(p: Profile) -> str:
    return p.run_dir.rstrip("/") or "/"


def _resource(name: str) -> bytes:
    if name == STANDIN_SCRIPT:
        return standin_bundle.build()
    if name == DIAGNOSE_MODULE:
        return diagnose_bundle.build()
    return resources.files("tasks.remote").joinpath(name).read_bytes()


def _probe_command(p: Profile) -> str:
    """The HTTP probe, then who listens on the port (read with ``vfy.read_probe``)."""
    r = _run_dir(p)
    return vfy.probe_and_listeners_command(
        p.python, f"{r}/{PROBE_SCRIPT}", p.port, p.served_model_name, f"{r}/{ENV_FILE}", p.host
    )
