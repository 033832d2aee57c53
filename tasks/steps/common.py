"""What the operations share: run_dir, the sleep/clock types, uploaded files, the probe, the
process listing."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from kimi_ops import procs
from kimi_ops import verify as vfy
from kimi_ops.defaults import (
    DIAGNOSE_MODULE,
    ENV_FILE,
    PROBE_SCRIPT,
    STANDIN_SCRIPT,
)
from kimi_ops.errors import StepFailed
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


def read_listing(text: str, *, step: str, command: str = "") -> procs.Listing:
    """The process listing in ``text`` (:data:`kimi_ops.procs.LISTING_COMMAND`'s output); a
    listing that stopped before reading every process fails the step: no decision about the
    processes it did not reach (ours or not, ended or not) may be made from it."""
    return require_complete(procs.parse_listing(text), step=step, command=command)


def require_complete(listing: procs.Listing, *, step: str, command: str = "") -> procs.Listing:
    """``listing`` itself, or StepFailed when it stopped before reading every process."""
    if listing.incomplete_from is not None:
        raise StepFailed(
            step,
            "the process listing stopped before reading every process (two passes in a row "
            f"were ended after {procs.LISTING_READ_TIMEOUT} s without reading one; it had not "
            f"reached PID {listing.incomplete_from or 'the first'})",
            command=command,
            hint="the host is overloaded or /proc does not answer; check `uptime` and "
            "`ps -eo pid,stat,wchan:32,args` for processes in D state, then run it again",
        )
    return listing
