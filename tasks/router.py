"""Replicas behind one endpoint: deploy, check and stop the HAProxy router; gate rolling deploys.

``fab -H a,b router-deploy`` renders HAProxy's configuration for the fleet's servers
(:mod:`kimi_ops.router`), uploads it to ``kimi.router.run_dir`` on the router host (``local`` or
an SSH target), has ``haproxy -c`` validate it, then starts HAProxy detached (or reloads it
seamlessly with ``-x SOCKET -sf OLDPID``), confirms the PID and the port, waits until the
replicas are UP, and sends one chat completion through the router. ``router-status`` shows each
replica's state and check; ``router-stop`` ends the HAProxy whose PID kimi-ops recorded.

With a router configured, ``fab deploy --rolling N`` drains each replica in the router before
replacing it, waits (bounded) for its active sessions to end, and puts it back (confirmed UP)
before the next batch; it refuses to drain the last replica that is UP.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fabric import Connection
from invoke import Context, Task, task
from invoke.exceptions import Exit

from kimi_ops import router as rt
from kimi_ops import verify as vfy
from kimi_ops.defaults import ENV_FILE, PROBE_SCRIPT
from kimi_ops.errors import KimiOpsError, StepFailed
from kimi_ops.profile import Profile, secret_env_values
from kimi_ops.result import StepResult, changed, failed, ok, skipped
from kimi_ops.rundir import private_dir_test
from kimi_ops.script import parse_key_values
from kimi_ops.shell import quote as q

from .fleet import HostOutcome, connection_for, host_name
from .host import Host, host_names, is_connection, typed_host
from .report import Reporter
from .session import load, safe_dir, session
from .steps import env_file_text

Sleep = Callable[[float], None]


@dataclass
class RouterHost:
    """The router's host, its settings and its resolved run_dir."""

    host: Host
    settings: rt.RouterSettings
    run_dir: str
    profile: Profile

    def path(self, name: str) -> str:
        return f"{self.run_dir.rstrip('/')}/{name}"


def router_context(c: Context, settings: rt.RouterSettings) -> Context:
    """Where HAProxy runs: this machine (``local``) or an SSH target."""
    if settings.is_local:
        return Context(config=c.config)
    return Connection(settings.host, config=c.config)


def router_dir(
    host: Host, settings: rt.RouterSettings, step: str, reporter: Reporter | None = None
) -> str:
    """``kimi.router.run_dir`` resolved on the router host, refused if others can write it."""
    files = (
        rt.CONFIG_FILE,
        rt.NEXT_CONFIG,
        rt.PIDFILE,
        rt.SOCKET,
        rt.LOG_FILE,
        PROBE_SCRIPT,
        ENV_FILE,
    )
    return safe_dir(host, settings.run_dir, step, reporter, files, key="router run_dir")


def open_router(ctx: Context, profile: Profile) -> RouterHost:
    settings = profile.router
    if not settings.configured:
        raise KimiOpsError(
            "profile key kimi.router.port: no router is configured",
            hint="set kimi.router.port (and kimi.router.host, local or user@host)",
        )
    host = Host(ctx, profile)
    return RouterHost(host, settings, router_dir(host, settings, "router"), profile)


def replica_ids(c: Context, specs: Sequence[Any]) -> list[tuple[str, list[str]]]:
    """Each fleet entry as (the host as typed, every ``host_overrides`` key naming it)."""
    out = []
    for spec in specs:
        conn = connection_for(c, spec)
        out.append((typed_host(conn), host_names(conn)))
    return out


def replicas_of(profile: Profile, ids: Sequence[tuple[str, list[str]]]) -> list[rt.Replica]:
    """Each fleet host's server as the router reaches it (host_overrides and
    router.addresses applied)."""
    out = []
    for name, keys in ids:
        p = profile.for_host(keys)
        out.append(rt.replica_for(profile.router, name, p.host, p.port))
    return rt.unique_names(out)


# --- runtime API ------------------------------------------------------------------------------


def admin(rh: RouterHost, command: str, *, step: str) -> str:
    """One runtime-API command; its answer (HAProxy prints nothing for a successful ``set``)."""
    mutating = not command.startswith("show ")
    out = rh.host.run(
        rt.admin_command(rh.settings, rh.run_dir, command),
        step=step,
        check=False,
        mutating=mutating,
        timeout=30,
    )
    if not out.ok:
        raise StepFailed(
            step,
            f"the router's admin socket {rh.path(rt.SOCKET)} did not answer `{command}`",
            command=out.command,
            exited=out.exited,
            stderr=out.stderr,
            hint="is the router running? (`fab router-status`, `fab router-deploy`)",
        )
    return out.stdout


def set_state(rh: RouterHost, name: str, state: str, *, step: str) -> None:
    said = admin(rh, rt.set_state_command(name, state), step=step).strip()
    if said:
        raise StepFailed(
            step, f"HAProxy refused `{rt.set_state_command(name, state)}`: {said.splitlines()[0]}"
        )


def read_stats(rh: RouterHost, *, step: str) -> list[rt.ServerStat]:
    text = admin(rh, "show stat", step=step)
    try:
        return rt.parse_show_stat(text)
    except ValueError as exc:
        raise StepFailed(
            step, f"unexpected answer to `show stat`: {exc}", stderr=text[-2000:]
        ) from None


def wait_for(
    rh: RouterHost,
    done: Callable[[list[rt.ServerStat]], bool],
    timeout: float,
    *,
    step: str,
    sleep: Sleep = time.sleep,
) -> tuple[bool, list[rt.ServerStat]]:
    """Poll ``show stat`` until ``done`` (True) or ``timeout`` seconds (False)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = read_stats(rh, step=step)
        if done(stats):
            return True, stats
        if time.monotonic() >= deadline:
            return False, stats
        sleep(min(0.5, rh.settings.check_interval / 2))


# --- process ----------------------------------------------------------------------------------


def running_pid(rh: RouterHost, *, step: str) -> tuple[int | None, str]:
    """The recorded HAProxy PID if it is alive and is ours, and the config's sha256."""
    info = parse_key_values(
        rh.host.run(rt.state_command(rh.run_dir), step=step, mutating=False).stdout
    )
    return rt.recorded_pid(info, rh.settings), info.get("sha", "")


def _log_tail(rh: RouterHost, step: str) -> tuple[str, ...]:
    out = rh.host.run(
        f"tail -n 20 {q(rh.path(rt.LOG_FILE))} 2>/dev/null; true", step=step, mutating=False
    )
    return tuple(out.stdout.splitlines())


def _resource(name: str) -> bytes:
    return resources.files("tasks.remote").joinpath(name).read_bytes()


def _probe(rh: RouterHost, *, step: str) -> vfy.ProbeResult:
    s, p = rh.settings, rh.profile
    command = vfy.probe_command(
        s.python, rh.path(PROBE_SCRIPT), int(s.port or 0), p.served_model_name,
        rh.path(ENV_FILE), s.bind,
    )  # fmt: skip
    out = rh.host.run(command, step=step, check=False, mutating=False, timeout=90)
    return vfy.parse_probe(out.stdout + out.stderr)


def deploy_router(
    rh: RouterHost,
    replicas: Sequence[rt.Replica],
    secrets: dict[str, str],
    *,
    step: str = "router-deploy",
    sleep: Sleep = time.sleep,
) -> StepResult:
    """Render, upload, validate, start or reload, confirm, verify (see the module doc)."""
    h, s, r = rh.host, rh.settings, rh.run_dir
    text = rt.render_config(s, replicas, r)
    files = [(text.encode(), rh.path(rt.NEXT_CONFIG), 0o600)]
    files.append((_resource(PROBE_SCRIPT), rh.path(PROBE_SCRIPT), 0o600))
    key = secrets.get("VLLM_API_KEY")
    env = {"VLLM_API_KEY": key} if key else {}
    files.append((env_file_text(env).encode(), rh.path(ENV_FILE), 0o600))
    if h.dry:
        return skipped(
            step,
            f"dry run: would upload {rh.path(rt.CONFIG_FILE)}, check it with `{s.haproxy} -c`, "
            "and start or reload HAProxy",
            lines=tuple(text.splitlines()),
        )
    h.run(
        f"mkdir -p -m 700 {q(r)} && {{ {private_dir_test(r)}; }}",
        step=step,
        hint="set kimi.router.run_dir to a writable path",
    )
    h.put_files(files, step=step)
    check = h.run(f"cd {q(r)} && {q(s.haproxy)} -c -f {rt.NEXT_CONFIG}", step=step, check=False)
    if not check.ok:
        said = (check.stderr + check.stdout).strip().splitlines()
        return failed(
            step,
            f"`{s.haproxy} -c` rejected the configuration (exit {check.exited}); "
            "the running router, if any, is unchanged",
            lines=tuple(said[-20:]),
            command=check.command,
            hint="is HAProxy installed on the router host (apt-get install haproxy)? "
            "the rendered file is " + rh.path(rt.NEXT_CONFIG),
        )
    old_pid, old_sha = running_pid(rh, step=step)
    new_sha = hashlib.sha256(text.encode()).hexdigest()
    what = "unchanged"
    if old_pid is None or old_sha != new_sha:
        h.run(f"mv -f {q(rh.path(rt.NEXT_CONFIG))} {q(rh.path(rt.CONFIG_FILE))}", step=step)
        out = h.run(rt.start_command(s, r, old_pid), step=step)
        pid = _launched_pid(out.stdout)
        what = f"reloaded (-sf {old_pid})" if old_pid else "started"
        sleep(0.5)
        now_pid, _ = running_pid(rh, step=step)
        if pid is None or now_pid != pid:
            return failed(
                step,
                f"HAProxy {pid or '?'} is not running 0.5 s after start",
                lines=_log_tail(rh, step),
                hint=f"see {rh.path(rt.LOG_FILE)} (a port already in use?)",
            )
        if not _port_answers(rh, step=step, sleep=sleep):
            return failed(
                step,
                f"HAProxy PID {pid} runs, but nothing accepts connections on port {s.port}",
                lines=_log_tail(rh, step),
                hint=f"see {rh.path(rt.LOG_FILE)}",
            )
    else:
        pid = old_pid
        h.run(f"rm -f {q(rh.path(rt.NEXT_CONFIG))}", step=step)
    all_up, stats = wait_for(
        rh,
        lambda st: len(st) == len(replicas) and all(x.state == rt.UP for x in st),
        s.ready_timeout,
        step=step,
        sleep=sleep,
    )
    lines = [x.describe() for x in stats]
    up = [x for x in stats if x.state == rt.UP]
    if not up:
        return failed(
            step,
            f"HAProxy PID {pid} {what}, but no replica is UP after {s.ready_timeout:g} s",
            lines=(*lines, *_log_tail(rh, step)),
            hint="deploy the replicas first (`fab -H ... deploy`); check router.addresses",
        )
    probe = _probe(rh, step=step)
    if not probe.ready_for(rh.profile.served_model_name):
        return failed(
            step,
            "a chat completion through the router failed: "
            + probe.describe(rh.profile.served_model_name),
            lines=tuple(lines),
        )
    summary = f"{len(up)}/{len(replicas)} replicas UP"
    if not all_up:
        summary += f" (the others not UP after {s.ready_timeout:g} s)"
    res = ok if what == "unchanged" else changed
    return res(
        step,
        f"HAProxy PID {pid} {what} on {s.bind}:{s.port}; {summary}; a chat completion through "
        f"the router answered {probe.answer!r}",
        lines=tuple(lines),
        data={"pid": pid, "up": [x.name for x in up], "all_up": all_up},
    )


def _port_answers(rh: RouterHost, *, step: str, sleep: Sleep, tries: int = 20) -> bool:
    """Does the endpoint accept a TCP connection (bounded: ``tries`` x 0.25 s)?"""
    for _ in range(tries):
        out = rh.host.run(rt.port_command(rh.settings), step=step, check=False, mutating=False)
        if out.ok:
            return True
        sleep(0.25)
    return False


def _launched_pid(text: str) -> int | None:
    info = parse_key_values(text)
    pid = info.get("pid", "").strip()
    return int(pid) if pid.isdigit() else None


def router_status(rh: RouterHost, *, step: str = "router-status") -> StepResult:
    pid, _ = running_pid(rh, step=step)
    if pid is None:
        return failed(
            step, f"no router running (run_dir {rh.run_dir})", hint="`fab -H ... router-deploy`"
        )
    stats = read_stats(rh, step=step)
    up = [x for x in stats if x.state == rt.UP]
    lines = tuple(x.describe() for x in stats)
    data = {"pid": pid, "replicas": [x.__dict__ for x in stats]}
    message = f"HAProxy PID {pid} on port {rh.settings.port}: {len(up)}/{len(stats)} replicas UP"
    if not up:
        return failed(step, message, lines=lines, data=data, hint="no replica can serve requests")
    return ok(step, message, lines=lines, data=data)


def stop_router(
    rh: RouterHost, *, step: str = "router-stop", sleep: Sleep = time.sleep
) -> StepResult:
    """SIGTERM to the HAProxy kimi-ops recorded (checked to be ours), SIGKILL after 5 s."""
    pid, _ = running_pid(rh, step=step)
    if pid is None:
        return ok(step, f"no router running (run_dir {rh.run_dir})")
    if rh.host.dry:  # nothing is signalled: no wait, and no claim that it stopped
        return skipped(
            step,
            f"dry run: would stop HAProxy PID {pid} (SIGTERM, SIGKILL after 5 s)",
            lines=(f"would run: kill -TERM {pid}",),
            data={"pid": pid},
        )
    rh.host.run(f"kill -TERM {pid}", step=step)
    for _ in range(50):
        sleep(0.1)
        if running_pid(rh, step=step)[0] is None:
            return changed(step, f"stopped HAProxy PID {pid} (SIGTERM)", data={"pid": pid})
    rh.host.run(f"kill -KILL {pid} 2>/dev/null; true", step=step)
    return changed(step, f"stopped HAProxy PID {pid} (SIGKILL after 5 s)", data={"pid": pid})


# --- rolling deploys --------------------------------------------------------------------------


class RollingGate:
    """Around each host of ``deploy --rolling N``: drain it in the router, wait for its sessions,
    let the deploy replace it, put it back and confirm it UP. One router operation at a time, so
    two hosts of a batch cannot both decide they are not the last one UP."""

    def __init__(self, c: Context, ov: dict[str, Any], quiet: bool) -> None:
        self.c, self.ov, self.quiet = c, ov, quiet
        self.lock = threading.Lock()
        self.draining: set[str] = set()

    @contextlib.contextmanager
    def _router(self) -> Iterator[RouterHost]:
        profile = load(self.c, self.ov)
        ctx = router_context(self.c, profile.router)
        try:
            yield open_router(ctx, profile)
        finally:
            if is_connection(ctx):
                ctx.close()  # type: ignore[attr-defined]

    def drain(self, name: str, reporter: Reporter) -> None:
        step = "router-drain"
        with self.lock, self._router() as rh:
            stats = read_stats(rh, step=step)
            me = next((x for x in stats if x.name == name), None)
            if me is None:
                reporter.result(ok(step, f"{name} is not behind the router: nothing to drain"))
                return
            refusal = rt.drain_refusal(stats, name, sorted(self.draining))
            if refusal:
                raise StepFailed(
                    step,
                    refusal,
                    hint="bring another replica UP first (`fab router-status`)",
                )
            set_state(rh, name, "drain", step=step)
            self.draining.add(name)
            started = time.monotonic()
            idle, stats = wait_for(
                rh,
                lambda st: all(x.sessions == 0 for x in st if x.name == name),
                rh.settings.drain_timeout,
                step=step,
            )
            took = time.monotonic() - started
            left = next((x.sessions for x in stats if x.name == name), 0)
            if idle:
                msg = f"{name} drained: no new requests, 0 active sessions after {took:.1f} s"
            else:
                msg = (
                    f"{name} drained, but {left} session(s) still active after the "
                    f"drain_timeout of {rh.settings.drain_timeout:g} s: replacing it anyway"
                )
            reporter.result(changed(step, msg))

    def ready(self, name: str, reporter: Reporter, *, confirm: bool) -> None:
        """Set ``name`` ready again; with ``confirm``, wait (bounded) until it is UP."""
        step = "router-ready"
        with self.lock:
            if name not in self.draining:
                return
            with self._router() as rh:
                set_state(rh, name, "ready", step=step)
                self.draining.discard(name)
                if not confirm:
                    reporter.result(
                        ok(step, f"{name} set ready in the router; its health checks decide")
                    )
                    return
                is_up, stats = wait_for(
                    rh,
                    lambda st: any(x.name == name and x.state == rt.UP for x in st),
                    rh.settings.ready_timeout,
                    step=step,
                )
        me = [x.describe() for x in stats if x.name == name]
        if not is_up:
            raise StepFailed(
                step,
                f"{name} is not UP in the router {rh.settings.ready_timeout:g} s after it was "
                "set ready: " + "; ".join(me),
                hint="the server answers on its host, but the router cannot reach it: "
                "check kimi.router.addresses",
            )
        reporter.result(changed(step, f"{name} back in the router and UP", lines=tuple(me)))

    def wrap(self, one: Callable[[Any, Any], HostOutcome]) -> Callable[[Any, Any], HostOutcome]:
        def run(spec: Any, cancel: Any) -> HostOutcome:
            name = rt.server_name(typed_host(connection_for(self.c, spec)))
            reporter = Reporter(host_name(spec), quiet=self.quiet)
            try:
                self.drain(name, reporter)
            except KimiOpsError as exc:
                with contextlib.suppress(KimiOpsError):  # drained, then the wait failed
                    self.ready(name, reporter, confirm=False)
                return _failed_outcome(spec, reporter, "router-drain", exc)
            outcome = one(spec, cancel)
            try:
                self.ready(name, reporter, confirm=outcome.result == "ready")
            except KimiOpsError as exc:
                return _failed_outcome(spec, reporter, "router-ready", exc)
            return outcome

        return run


def _failed_outcome(spec: Any, reporter: Reporter, step: str, exc: KimiOpsError) -> HostOutcome:
    if isinstance(exc, StepFailed):
        res = failed(exc.step, exc.reason, command=exc.command, stderr=exc.stderr, hint=exc.hint)
    else:
        res = failed(step, exc.message, hint=exc.hint)
    reporter.result(res)
    return HostOutcome(host_name(spec), "failed", step, message=res.message)


def around_rolling(
    c: Context, ov: dict[str, Any], one: Callable[[Any, Any], HostOutcome], *, quiet: bool
) -> Callable[[Any, Any], HostOutcome]:
    """``one`` wrapped by the router gate when a router is configured, else ``one`` itself."""
    if getattr(getattr(c.config, "run", None), "dry", False):
        return one  # a dry run changes nothing, in the router either
    try:
        configured = load(c, ov).router.configured
    except KimiOpsError:
        return one  # the fleet run reports the profile error itself
    return RollingGate(c, ov, quiet).wrap(one) if configured else one


# --- tasks ------------------------------------------------------------------------------------


def _router_task(name: str, doc: str) -> Callable[[Callable[..., StepResult]], Task]:
    """A task that runs ``fn(router_host, hosts, profile)`` on the router's host; the fleet's
    hosts (-H a,b or kimi.hosts) are the replicas. Exit 1 when the step failed."""

    def decorate(fn: Callable[..., StepResult]) -> Task:
        def body(c: Context, fleet_hosts: Sequence[Any] | None = None) -> None:
            try:
                profile = load(c)  # validated before anything connects
            except KimiOpsError as exc:
                hint = f"\n  hint: {exc.hint}" if exc.hint else ""
                raise Exit(f"error: {name}: {exc.message}{hint}", code=1) from None
            if fleet_hosts:
                ids = replica_ids(c, fleet_hosts)
            elif is_connection(c):
                ids = replica_ids(c, [c])
            else:
                ids = replica_ids(c, profile.hosts)
            ctx = router_context(c, profile.router)
            run_hosts = [keys for _, keys in ids] + [host_names(ctx)]
            with session(ctx, step=name, run_hosts=run_hosts) as s:
                if not profile.router.configured:
                    raise KimiOpsError(
                        "profile key kimi.router.port: no router is configured",
                        hint="set kimi.router.port (and kimi.router.host: local or user@host)",
                    )
                run_dir = router_dir(s.host, profile.router, name, s.reporter)
                rh = RouterHost(s.host, profile.router, run_dir, profile)
                s.report(fn(rh, ids, profile))

        body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        )
        body.__name__ = name.replace("-", "_")
        body.__doc__ = doc
        return task(name=name)(body)

    return decorate


@_router_task("router-deploy", "Start (or reload) HAProxy in front of the fleet's servers; verify.")
def router_deploy(rh: RouterHost, ids: Sequence[Any], profile: Profile) -> StepResult:
    if not ids:
        raise KimiOpsError(
            "no replicas: give the fleet's hosts with -H a,b or kimi.hosts",
            hint="each host's server becomes one replica behind the router",
        )
    secrets = secret_env_values(profile, os.environ)
    return deploy_router(rh, replicas_of(profile, ids), secrets)


@_router_task("router-status", "Show each replica behind the router (UP/DOWN/DRAIN, checks).")
def router_status_task(rh: RouterHost, ids: Sequence[Any], profile: Profile) -> StepResult:
    return router_status(rh)


@_router_task("router-stop", "Stop the HAProxy router kimi-ops started (by its recorded PID).")
def router_stop(rh: RouterHost, ids: Sequence[Any], profile: Profile) -> StepResult:
    return stop_router(rh)


__all__ = ["around_rolling", "router_deploy", "router_status_task", "router_stop"]
