"""What every task does first and last: load the profile, open the host, report, exit."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from invoke import Context
from invoke.exceptions import Exit

from kimi_ops import rundir
from kimi_ops.errors import KimiOpsError, StepFailed
from kimi_ops.procs import norm_dir
from kimi_ops.profile import Profile, load_profile, secret_env_values
from kimi_ops.result import StepResult, failed, skipped

from .host import Host, host_names
from .report import Reporter


def plain(obj: Any) -> Any:
    """Invoke's DataProxy (and nested ones) as plain dicts and lists."""
    if hasattr(obj, "items") and hasattr(obj, "__getitem__"):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(x) for x in obj]
    return obj


def kimi_config(c: Context) -> dict[str, Any]:
    try:
        section = c.config["kimi"]
    except (KeyError, AttributeError):
        return {}
    return plain(section)


def debug_enabled() -> bool:
    return os.environ.get("KIMI_OPS_DEBUG") == "1" or logging.getLogger("invoke").isEnabledFor(
        logging.DEBUG
    )


#: Tasks that upload the secrets env file: their secrets are resolved (and a missing
#: ``api_key_env`` variable reported) before any remote command. The others (status, stop,
#: verify, ...) never need them locally: the host's 0600 env file holds them.
SECRET_STEPS = frozenset({"deploy", "upload-script"})


@dataclass
class Session:
    host: Host
    profile: Profile
    reporter: Reporter
    _secrets: dict[str, str] | None = None
    cancel: threading.Event | None = None  # set when another host of a fleet run failed

    @property
    def secrets(self) -> dict[str, str]:
        """The secrets for the server's env file, resolved from the local environment."""
        if self._secrets is None:
            self._secrets = secret_env_values(self.profile, os.environ)
        return self._secrets

    def report(self, result: StepResult) -> StepResult:
        """Print a result; a failed one ends the task with exit status 1, and so does a fleet
        run that was cancelled (``--fail-fast``) before the next step."""
        self.reporter.result(result)
        if result.failed:
            raise Exit(code=1)
        if self.cancel is not None and self.cancel.is_set():
            self.reporter.result(skipped(result.step, "stopped: another host failed (--fail-fast)"))
            raise Exit(code=1)
        return result


def load(c: Context, overrides: Mapping[str, Any] | None = None) -> Profile:
    """The validated profile (before any remote command)."""
    return load_profile(kimi_config(c), overrides)


@contextmanager
def session(
    c: Context,
    overrides: Mapping[str, Any] | None = None,
    *,
    step: str,
    dry: bool = False,
    quiet: bool = False,
    reporter: Reporter | None = None,
    cancel: threading.Event | None = None,
    run_hosts: list[list[str]] | None = None,
) -> Iterator[Session]:
    """Load and validate the profile, wrap the host, resolve run_dir; turn every KimiOpsError
    into a failed result and a non-zero exit without a traceback (unless debugging)."""
    reporter = reporter or Reporter(None, quiet=quiet)
    with task_errors(step, reporter):
        profile = load(c, overrides)
        names = host_names(c)
        profile.check_override_keys(run_hosts or [names])
        profile = profile.for_host(names)  # kimi.host_overrides, by any name of this host
        secrets = secret_env_values(profile, os.environ) if step in SECRET_STEPS else None
        host = Host(c, profile, dry=dry, name=reporter.host)
        reporter.host = host.name if host.remote else None
        profile = safe_run_dir(host, profile, step, reporter)
        yield Session(host, profile, reporter, secrets, cancel)


def safe_run_dir(host: Host, profile: Profile, step: str, reporter: Reporter | None) -> Profile:
    """The profile with run_dir resolved on the host (``~`` expanded, symlinks resolved), after
    checking that no one else can write it or its parents (:mod:`kimi_ops.rundir`); StepFailed
    before anything is written to or run from an unsafe one."""
    return profile.with_run_dir(safe_dir(host, profile.run_dir, step, reporter))


def safe_dir(
    host: Host,
    path: str,
    step: str,
    reporter: Reporter | None,
    files: Sequence[str] = rundir.RUN_DIR_FILES,
    key: str = "run_dir",
) -> str:
    """``path`` (a run_dir) resolved on the host, once :func:`kimi_ops.rundir.check_run_dir`
    found it, its parents and its ``files`` safe: one read-only command."""
    given = host.resolve(path)
    out = host.run(rundir.facts_command(given, files), step=step, check=False, mutating=False)
    verdict = rundir.check_run_dir(rundir.parse_facts(out.stdout, files), given)
    if not verdict.ok:
        raise StepFailed(
            step,
            f"unsafe {key} {given}: {'; '.join(verdict.problems)}; refused before writing to "
            "or running anything from it",
            command=out.command,
            stderr=out.stderr,
            hint=verdict.hint,
        )
    if verdict.resolved != norm_dir(given) and reporter is not None:
        reporter.info(f"{key} {given} resolves to {verdict.resolved}: using that")
    return verdict.resolved


@contextmanager
def task_errors(step: str, reporter: Reporter) -> Iterator[None]:
    """Turn every KimiOpsError into a failed result (or an error line) and exit status 1,
    without a traceback (unless debugging); Ctrl-C into exit status 130."""
    try:
        yield
    except Exit:
        raise
    except StepFailed as exc:
        if debug_enabled():
            raise
        reporter.result(
            failed(exc.step, exc.reason, command=exc.command, stderr=exc.stderr, hint=exc.hint)
        )
        raise Exit(code=1) from None
    except KimiOpsError as exc:
        if debug_enabled():
            raise
        hint = f"\n  hint: {exc.hint}" if exc.hint else ""
        print(f"error: {step}: {exc.message}{hint}", file=sys.stderr, flush=True)
        reporter.results.append(failed(step, exc.message, hint=exc.hint))  # for a recap
        raise Exit(code=1) from None
    except KeyboardInterrupt:
        print(f"\n{step}: interrupted", file=sys.stderr)
        raise Exit(code=130) from None
