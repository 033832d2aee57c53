"""The Fabric tasks. Each is thin: open a session, run steps from :mod:`tasks.steps`, report.

Every deployment task accepts the common profile keys as flags (``--port 8001``,
``--model /models/x`` ...), which override the ``kimi`` configuration for that run.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from invoke import Context, Task, task
from invoke.exceptions import Exit

from kimi_ops.diagnose import Diagnosis, LogDiagnoser
from kimi_ops.errors import KimiOpsError
from kimi_ops.hoststate import STATE_CODES, STATE_MEANINGS
from kimi_ops.result import Status, StepResult, format_result, skipped

from . import masking, steps
from . import router as router_tasks
from . import state as host_state
from .cluster import CLUSTER_STEPS, cluster_configured, run_cluster
from .fleet import DRY_RUN, HostOutcome, connection_for, finish, host_name, run_fleet
from .host import host_names, is_connection
from .lock import HostLock
from .report import FleetBoard, Reporter, pipe_safe_stdout
from .session import Session, kimi_config, load, session

#: Profile keys every deployment task accepts as flags: name -> help.
COMMON_FLAGS: dict[str, str] = {
    "model": "model directory on the host (kimi.model)",
    "port": "server port (kimi.port)",
    "python": "the host's python with vLLM (kimi.python)",
    "run_dir": "where script, pidfile and logs live on the host (kimi.run_dir)",
    "engine": "vllm, or standin (emulates vLLM, loads no model)",
    "served_model_name": "name clients use (kimi.served_model_name)",
    "tensor_parallel_size": "GPUs per server (kimi.tensor_parallel_size)",
}
_INT_FLAGS = ("port", "tensor_parallel_size")


def overrides(flags: dict[str, Any]) -> dict[str, Any]:
    """Command-line values as profile overrides (numbers converted; unset flags dropped)."""
    out = {k: v for k, v in flags.items() if v is not None}
    for key in _INT_FLAGS:
        value = out.get(key)
        if isinstance(value, str) and value.lstrip("-").isdigit():
            out[key] = int(value)
    return out


def kimi_task(
    step: str,
    *,
    flags: dict[str, tuple[Any, str]] | None = None,
    dry: bool = False,
    lock: bool = False,
    fleet: bool = False,
) -> Callable[[Callable[..., None]], Task]:
    """Make a Fabric task from ``fn(session, **own_flags)``.

    The task takes its own ``flags`` (name -> (default, help)) plus :data:`COMMON_FLAGS`;
    the common ones become profile overrides. ``dry``: the task's own ``--dry`` flag (or
    ``fab --dry``) prints commands and diffs without changing anything. ``lock``: hold the
    host's deployment lock while the task runs (one deployment at a time per host). A
    ``--json`` flag, when the task has one, silences the step-by-step output.
    """
    own = dict(flags or {})
    task_json = "json" in own  # the task prints JSON itself (preflight)
    if dry:
        own["dry"] = (False, "print the commands and diffs; change nothing")
    if fleet:
        own.setdefault("json", (False, "print the result as one JSON document (the recap)"))
        own["fail_fast"] = (False, "with several hosts: stop the others at the first failure")

    def decorate(fn: Callable[..., None]) -> Task:
        def run(c: Context, ov: dict[str, Any], mine: dict[str, Any], **extra: Any) -> None:
            is_dry = bool(mine.pop("dry", False))
            quiet = bool(mine.get("json", False))
            if task_json and quiet and "reporter" not in extra:
                extra["reporter"] = Reporter(None, quiet=True)
                with json_on_failure(step, extra["reporter"]):
                    run_session(c, ov, mine, is_dry, quiet, **extra)
            else:
                run_session(c, ov, mine, is_dry, quiet, **extra)

        def run_session(
            c: Context, ov: dict[str, Any], mine: dict[str, Any], is_dry: bool, quiet: bool,
            **extra: Any,
        ) -> None:  # fmt: skip
            with session(c, ov, step=step, dry=is_dry, quiet=quiet, **extra) as s:
                try:
                    if lock:
                        with HostLock(s.host, s.profile.run_dir, step):
                            fn(s, **mine)
                    else:
                        fn(s, **mine)
                except KeyboardInterrupt:
                    # Say what the host runs now: the run may have ended the old server.
                    done = ", ".join(f"{r.step} {r.status}" for r in s.reporter.results)
                    s.reporter.info(f"interrupted after: {done or 'nothing'}")
                    s.reporter.info(host_state.now_line(s.host, s.profile, step=step))
                    raise

        def body(c: Context, **kw: Any) -> None:
            pipe_safe_stdout()  # `fab status | head -1` keeps the state's exit code
            fleet_hosts = kw.pop("fleet_hosts", None)
            mine = {k: kw.pop(k) for k in list(kw) if k in own}
            ov = overrides(kw)
            masking.install(kimi_config(c), ov)
            fail_fast = bool(mine.pop("fail_fast", False))
            as_json = bool(mine.get("json", False))
            clustered = step in CLUSTER_STEPS and not fleet_hosts and not is_connection(c)
            if clustered and cluster_configured(c):  # kimi.cluster: the task acts on every node
                run_cluster(c, step, ov, mine)
                return
            if fleet and not task_json:
                mine.pop("json", None)
            if fleet:
                specs = fleet_hosts or (
                    [] if is_connection(c) else fleet_specs(c, ov, step, as_json)
                )
                if not specs and as_json and not task_json:
                    specs = [c]  # one host: --json still prints the recap, as JSON
                if specs:
                    mine.pop("json", None)  # per host: step lines; the recap is the JSON
                    rolling = int(mine.pop("rolling", 0) or 0) if step == "deploy" else 0
                    dry_run = dry and (bool(mine.get("dry")) or global_dry(c))
                    run_on_fleet(
                        c, step, specs, run, ov, mine, as_json, fail_fast, rolling, dry_run
                    )
                    return
            mine.pop("rolling", None)
            run(c, ov, mine)

        params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        for name, (default, _) in own.items():
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
        for name in COMMON_FLAGS:
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None))
        body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        body.__name__ = fn.__name__
        body.__doc__ = fn.__doc__
        body.__module__ = fn.__module__
        helps = {**COMMON_FLAGS, **{k: h for k, (_, h) in own.items()}}
        return task(help=helps, auto_shortflags=False)(body)  # long flags only: see README

    return decorate


def print_json_error(step: str, message: str, hint: str = "") -> None:
    """The one JSON document of a --json run that failed before it had anything else."""
    print(_dumps({"task": step, "error": message, "hint": hint}), flush=True)


@contextmanager
def json_on_failure(step: str, reporter: Reporter) -> Iterator[None]:
    """With --json, a task that fails before it printed its document (no connection, a bad
    profile, a step that raised) still prints one: ``{"task", "error", "hint"}``."""
    try:
        yield
    except Exit:
        bad = [r for r in reporter.results if r.failed]
        if bad:
            print_json_error(step, bad[-1].message, bad[-1].hint)
        raise


def global_dry(c: Context) -> bool:
    """``fab --dry`` (Invoke's run.dry)."""
    return bool(getattr(getattr(c.config, "run", None), "dry", False))


def fleet_specs(c: Context, ov: dict[str, Any], step: str, as_json: bool = False) -> list[str]:
    """``kimi.hosts`` (when the task runs without -H)."""
    try:
        return list(load(c, ov).hosts)
    except KimiOpsError as exc:
        if as_json:
            print_json_error(step, exc.message, exc.hint)
        hint = f"\n  hint: {exc.hint}" if exc.hint else ""
        raise Exit(f"error: {step}: {exc.message}{hint}", code=1) from None


def run_on_fleet(
    c: Context,
    step: str,
    specs: list[Any],
    run: Callable[..., None],
    ov: dict[str, Any],
    mine: dict[str, Any],
    as_json: bool,
    fail_fast: bool,
    rolling: int,
    dry_run: bool = False,
) -> None:
    """Run the task on every host concurrently, then print the recap (exit 1 if any failed).
    ``dry_run``: a host that did not fail is ``dry run`` in the recap, never ready or ok."""
    try:
        profile = load(c, ov)  # validated once, before any host is contacted
        run_hosts = [host_names(connection_for(c, s)) for s in specs]
        profile.check_override_keys(run_hosts)
    except KimiOpsError as exc:
        if as_json:
            print_json_error(step, exc.message, exc.hint)
        raise Exit(f"error: {step}: {exc.message}", code=1) from None
    parallel = profile.parallel

    board = (
        FleetBoard([host_name(s) for s in specs]) if sys.stdout.isatty() and not as_json else None
    )
    reporters: list[Reporter] = []

    def one(spec: Any, cancel: Any) -> HostOutcome:
        conn = connection_for(c, spec)
        reporter = Reporter(host_name(spec), quiet=as_json, board=board)
        reporters.append(reporter)
        outcome = HostOutcome(host_name(spec))
        try:
            run(conn, ov, dict(mine), reporter=reporter, cancel=cancel, run_hosts=run_hosts)
            outcome.result = "ready" if step in ("deploy", "verify") else "ok"
        except Exit:
            outcome.result = "failed"
        finally:
            if is_connection(conn):
                conn.close()
        bad = [r for r in reporter.results if r.failed]
        last = bad[-1] if bad else (reporter.results[-1] if reporter.results else None)
        if last is not None:
            if step == "status" and last.data.get("state"):
                outcome.result = str(last.data["state"])  # serving, stopped, crashed, ...
            outcome.step = last.step if outcome.result == "failed" else ""
            outcome.message = last.message
            outcome.label = (last.data.get("diagnosis") or {}).get("label", "")
            pid = last.data.get("pid")
            outcome.pid = int(pid) if str(pid or "").isdigit() else None
            outcome.report = last.data.get("report")  # preflight's checks and plan
        if dry_run and outcome.result in ("ready", "ok"):
            outcome.result = DRY_RUN  # it changed nothing: not "ready", not "ok" (stopped)
        return outcome

    # With kimi.router: drain each host in the router, replace it, set it ready, confirm UP.
    if step == "deploy" and rolling and not mine.get("dry"):
        one = router_tasks.around_rolling(c, ov, one, quiet=as_json)
    outcomes = run_fleet(specs, one, parallel=parallel, fail_fast=fail_fast, rolling=rolling)
    if board is not None:  # the board showed one line per host: now the failures in full
        for rep in reporters:
            for res in rep.results:
                if res.failed:
                    print(format_result(res, host=rep.host), flush=True)
    finish(step, outcomes, as_json)


@kimi_task("kill-stale", dry=True)
def kill_stale(s: Session) -> None:
    """End this deployment's vLLM server (SIGTERM, grace, SIGKILL); never the shell or decoys."""
    stop_server(s, "kill-stale")


@kimi_task("clean-shm", dry=True)
def clean_shm(s: Session) -> None:
    """Remove stale /dev/shm/psm_* and sem.mp-* files, only while no vLLM server is alive."""
    s.report(steps.clean_shm(s.host, s.profile))


@kimi_task(
    "patch-kv-config",
    flags={"restore": (False, "put the original config files back, byte for byte")},
    dry=True,
    lock=True,
)
def patch_kv_config(s: Session, restore: bool = False) -> None:
    """Remove the checkpoint's FP8 KV-cache settings (backup kept; --restore undoes it)."""
    s.report(steps.patch_kv_config(s.host, s.profile, restore=restore))


@kimi_task("upload-script", dry=True)
def upload_script(s: Session) -> None:
    """Render the launch script from the profile and the plan; upload it (atomic, checked)."""
    h, p = s.host, s.profile
    plan = steps.preflight(h, p).plan
    note_unset_secret_env(s)
    s.report(steps.upload_script(h, p, plan=plan, secrets_env=s.secrets))


@kimi_task("launch", dry=True, lock=True)
def launch(s: Session) -> None:
    """Start the uploaded script detached; confirm the PID is alive and the log exists."""
    res = steps.launch(s.host, s.profile)
    s.report(with_now(s, res) if res.failed else res)


@kimi_task("verify", fleet=True)
def verify(s: Session) -> None:
    """Wait until the server answers a chat completion, or say why it failed."""
    s.report(steps.verify(s.host, s.profile, s.reporter))


@kimi_task(
    "preflight", flags={"json": (False, "print the checks and the plan as JSON")}, fleet=True
)
def preflight(s: Session, json: bool = False) -> None:
    """Check GPUs, vLLM, model files, port, disk, /dev/shm; print the plan. Changes nothing."""
    outcome = steps.preflight(s.host, s.profile)
    if json:
        print(_dumps(outcome.report()))
        if outcome.result.failed:
            raise Exit(code=1)
        return
    s.report(outcome.result)


@kimi_task(
    "deploy",
    flags={
        "restart": (False, "launch anew even if the same profile is already running"),
        "rolling": (0, "with several hosts: replace N hosts at a time; stop at a failure"),
    },
    dry=True,
    lock=True,
    fleet=True,
)
def deploy(s: Session, restart: bool = False) -> None:
    """Preflight, kill-stale, clean-shm, patch, upload, launch, verify; stops at a failure."""
    run_deploy(s, restart=restart)


def run_deploy(s: Session, *, restart: bool = False) -> None:
    """The deploy pipeline on one host (each step reported; the first failure ends it)."""
    h, p = s.host, s.profile
    pre = steps.preflight(h, p)
    s.report(pre.result)
    plan = pre.plan
    note_unset_secret_env(s, step="deploy")
    files = steps.upload_files(p, plan=plan, secrets_env=s.secrets)
    # A dry run takes the same decision: the shortcut only reads (no mutating command).
    unchanged = None if restart else steps.running_unchanged(h, p, files)
    if unchanged is not None:
        # The running server is the one these files make; the checkpoint on disk must still
        # be what the plan says (e.g. `patch-kv-config --restore` undid the patch since).
        if plan.patch_kv_config:
            s.report(steps.patch_kv_config(h, p))
        s.report(unchanged)
        s.reporter.recap()
        return
    if unrecorded := host_state.mark_stopping(h, p, step="deploy"):
        s.reporter.info(f"deploy: {unrecorded}")
    stale = steps.kill_stale(h, p)
    s.report(stale)
    s.report(steps.clean_shm(h, p, refuse_fails=False, after=stale))
    if plan.patch_kv_config:
        s.report(steps.patch_kv_config(h, p))
    else:
        s.report(skipped("patch-kv-config", plan.reason))
    s.report(steps.upload_script(h, p, plan=plan, secrets_env=s.secrets))
    if h.dry:
        s.report(skipped("launch", "dry run"))
        s.report(skipped("verify", "dry run"))
        return
    launched = steps.launch(h, p)
    if launched.failed:
        launched = with_now(s, launched)
    s.report(launched)
    launch_id = launched.data.get("launch_id")
    s.report(steps.verify(h, p, s.reporter, expect_launch_id=launch_id))
    s.reporter.recap()


def note_unset_secret_env(s: Session, *, step: str = "upload-script") -> None:
    """A secret_env name unset here: fail before anything changes if the host's server has it,
    else say that the server gets none (never a silent change)."""
    note = steps.check_secret_env(s.host, s.profile, os.environ, step=step)
    if note is not None:
        s.reporter.info(note)


def with_now(s: Session, res: StepResult) -> StepResult:
    """A failed result with one more line: what runs on the host now."""
    now = host_state.now_line(s.host, s.profile, step=res.step)
    return replace(res, lines=(*res.lines, now))


@kimi_task("status", fleet=True)
def status(s: Session) -> None:
    """Show the server's state, PID, uptime, stage, health and GPU memory.

    Exits with the state's code (1: the state could not be read, e.g. no SSH):
    {codes}
    With several hosts: 0 when all serve, else the highest code of any host.
    """
    res, state = host_state.status(s.host, s.profile)
    s.reporter.result(res)
    if not state.serving:
        raise Exit(code=state.code)


status.__doc__ = (status.__doc__ or "").replace(
    "{codes}", "\n    ".join(f"{v} {k}: {STATE_MEANINGS[k]}" for k, v in STATE_CODES.items())
)


@kimi_task(
    "logs",
    flags={
        # (a string: Invoke's own int cast answers "abc" with a traceback)
        "lines": ("50", "how many lines to print (default 50)"),
        "follow": (False, "keep printing new lines (Ctrl-C ends)"),
    },
)
def logs(s: Session, lines: str = "50", follow: bool = False) -> None:
    """Print the tail of the current server log (--follow to keep reading)."""
    count = str(lines).strip()
    if not count.isdigit() or not 0 < int(count) <= 1_000_000:
        raise Exit(f"error: logs: --lines must be a whole number from 1 to 1000000, got {lines!r}")
    _write(steps.read_log(s.host, s.profile, int(count)))
    if follow:
        steps.follow_log(s.host, s.profile, _write)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


@kimi_task("stop", dry=True, lock=True, fleet=True)
def stop(s: Session) -> None:
    """Stop this deployment's server (SIGTERM, then SIGKILL after the grace period)."""
    stop_server(s, "stop")


def stop_server(s: Session, step: str) -> None:
    """The stop marker (status and verify then say stopped, not crashed), then kill-stale.

    A stop record that could not be written does not keep the server running, but the step
    fails (exit 1) saying so, after what it ended: status will call the launch crashed."""
    unrecorded = host_state.mark_stopping(s.host, s.profile, step=step)
    try:
        res = steps.kill_stale(s.host, s.profile, step=step)
    except KimiOpsError:
        if unrecorded:
            s.reporter.info(f"{step}: {unrecorded}")
        raise
    if unrecorded and res.status in (Status.CHANGED, Status.FAILED):
        hint = res.hint or "free space in run_dir (or make it writable); the server is stopped"
        message = f"{res.message}; but {unrecorded}"
        res = replace(res, status=Status.FAILED, message=message, hint=hint)
    s.report(res)


@task(
    name="diagnose",
    auto_shortflags=False,
    help={
        "log": "a local log file to read (default: the current log on the host)",
        "json": "print the diagnosis as JSON",
    },
)
def diagnose_task(c: Context, log: str | None = None, json: bool = False) -> None:
    """Name the cause of a failed (or slow) vLLM launch from its log, with the fix."""
    as_json = json
    masking.install(kimi_config(c))
    if log:
        diagnoser = LogDiagnoser()
        try:  # any readable file: a pipe too (`--log <(docker logs vllm 2>&1)`)
            with open(log, encoding="utf-8", errors="replace", newline="") as fh:
                while chunk := fh.read(1 << 20):
                    diagnoser.feed(chunk)
        except OSError as exc:
            why = exc.strerror or exc
            raise Exit(f"error: diagnose: cannot read {log}: {why}", code=1) from exc
        path = Path(log)
        print_diagnosis(diagnoser.diagnosis(), as_json, source=str(path))
        return
    reporter = Reporter(None, quiet=as_json)
    with (
        json_on_failure("diagnose", reporter) if as_json else nullcontext(),
        session(c, step="diagnose", quiet=as_json, reporter=reporter) as s,
    ):
        d = steps.diagnose_host_log(s.host, s.profile, progress=_progress)
        print_diagnosis(d, as_json, s.host.name)


def _progress(text: str) -> None:
    print(f"diagnose: {text}", file=sys.stderr, flush=True)


def print_diagnosis(d: Diagnosis, as_json: bool, source: str) -> None:
    try:
        _print_diagnosis(d, as_json, source)
    except BrokenPipeError:  # `fab diagnose --log X | head`: the reader left; that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _print_diagnosis(d: Diagnosis, as_json: bool, source: str) -> None:
    if as_json:
        print(_dumps({"source": source, **d.to_dict()}))
        return
    said = d.summary if d.summary.startswith(f"{d.label}:") else f"{d.label}: {d.summary}"
    print(f"{source}: {said}")
    if d.stage:
        print(f"  stage: {d.stage}" + (f" ({d.progress})" if d.progress else ""))
    for line in d.evidence[:5]:
        print(f"  evidence: {line}")
    if d.hint:
        print(f"  hint: {d.hint}")


_dumps = json.JSONEncoder(indent=2, sort_keys=True).encode
