"""The operations: each gathers facts with a command, asks kimi_ops, acts, and returns a result.

Every function takes a :class:`~tasks.host.Host` and a validated Profile whose ``run_dir`` is
already resolved, and returns a :class:`~kimi_ops.result.StepResult` (or raises StepFailed).
They are composed by the Fabric tasks in :mod:`tasks.cli`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import Any

from kimi_ops import facts as facts_mod
from kimi_ops import kvpatch, logview, procs, shm
from kimi_ops import script as launch_script
from kimi_ops import verify as vfy
from kimi_ops.defaults import (
    CURRENT_LOG,
    DIAGNOSE_MODULE,
    DIAGNOSE_RUNNER,
    ENV_FILE,
    LAUNCH_ID_FILE,
    LAUNCH_SCRIPT,
    LOG_DIR,
    PIDFILE,
    PROBE_SCRIPT,
    STANDIN_CONFIG,
    STANDIN_SCRIPT,
)
from kimi_ops.diagnose import Diagnosis, LogDiagnoser, diagnose
from kimi_ops.errors import StepFailed
from kimi_ops.facts import HostFacts
from kimi_ops.preflight import (
    LOG_RESERVE_BYTES,
    Check,
    Plan,
    build_plan,
    preflight_report,
    run_checks,
)
from kimi_ops.profile import Profile
from kimi_ops.result import StepResult, changed, failed, ok, skipped
from kimi_ops.shell import quote as q
from standin import bundle as standin_bundle

from .host import FileInfo, Host
from .report import Reporter

#: When run_dir has no current log: nothing was launched, or someone deleted it while a server
#: may still run; status tells which.
NO_LOG_HINT = (
    "nothing was launched yet (`fab deploy`), or the log was deleted: `fab status` says whether "
    "a server runs"
)

Sleep = Callable[[float], None]
Clock = Callable[[], float]


def _run_dir(p: Profile) -> str:
    return p.run_dir.rstrip("/") or "/"


# --- kill-stale / stop ------------------------------------------------------------------------


def listing(h: Host, p: Profile, step: str) -> tuple[procs.Listing, int | None, str | None]:
    """One round trip: the pidfile's PID, the current launch id and the process listing."""
    r = _run_dir(p)
    out = h.run(
        f"cat {q(r + '/' + PIDFILE)} 2>/dev/null | sed -n '1s/^/pidfile=/p'; "
        f"cat {q(r + '/' + LAUNCH_ID_FILE)} 2>/dev/null | sed -n '1s/^/launch_id=/p'; "
        + procs.LISTING_COMMAND,
        step=step,
        mutating=False,
    )
    head = launch_script.parse_key_values(
        "\n".join(ln for ln in out.stdout.split("\n") if ln.startswith(("pidfile=", "launch_id=")))
    )
    pid_text = head.get("pidfile", "").strip()
    launch_id = head.get("launch_id", "").strip() or None
    return (
        procs.parse_listing(out.stdout),
        int(pid_text) if pid_text.isdigit() else None,
        launch_id,
    )


def owned(h: Host, p: Profile, step: str) -> procs.Selection:
    """This deployment's processes on the host now (orphans and stale launches included)."""
    found, pidfile_pid, launch_id = listing(h, p, step)
    return procs.owned_processes(found, _run_dir(p), pidfile_pid, launch_id, port=p.port)


def kill_stale(
    h: Host,
    p: Profile,
    *,
    step: str = "kill-stale",
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
) -> StepResult:
    """End this deployment's processes (its server tree, orphans and stale launches): SIGTERM, a
    grace period, then SIGKILL. Never another deployment's, the shell running the command, its
    ancestors, or processes that merely mention vllm or carry a vLLM title."""
    selection = owned(h, p, step)
    foreign = tuple(selection.describe_foreign())
    if not selection.targets:
        return ok(
            step,
            f"no process of this deployment ({_run_dir(p)}, port {p.port}) is running",
            lines=foreign,
        )
    lines = tuple(selection.describe()) + foreign
    if h.dry:
        return skipped(
            step, f"dry run: would end {len(selection.targets)} process(es)", lines=lines
        )
    term = h.run(procs.signal_command("TERM", selection.pids), step=step)
    sent, _ = procs.parse_signal_output(term.stdout)
    deadline = clock() + p.grace_seconds
    remaining = list(selection.targets)
    while remaining and clock() < deadline:
        sleep(min(0.5, max(0.05, p.grace_seconds / 10)))
        now, _, _ = listing(h, p, step)
        remaining = procs.still_running(selection, now)
    killed: list[int] = []
    if remaining:
        out = h.run(procs.signal_command("KILL", [x.pid for x in remaining]), step=step)
        killed, _ = procs.parse_signal_output(out.stdout)
        for _ in range(20):
            sleep(0.25)
            now, _, _ = listing(h, p, step)
            remaining = procs.still_running(selection, now)
            if not remaining:
                break
        if remaining:
            return failed(
                step,
                f"{len(remaining)} process(es) survived SIGKILL: "
                + ", ".join(str(x.pid) for x in remaining),
                lines=lines,
                hint="a process in uninterruptible sleep (D state) may be stuck in the GPU "
                "driver; check `ps -o pid,stat,args -p PID` and nvidia-smi",
            )
    how = f"SIGTERM to {len(sent)}"
    if killed:
        how += f", SIGKILL to {len(killed)} after {p.grace_seconds:g} s"
    orphans = len(selection.orphans)
    what = f"{len(selection.targets)} process(es)" + (
        f", {orphans} of them orphans" if orphans else ""
    )
    return changed(
        step,
        f"ended {what} ({how})",
        lines=lines,
        data={
            "pids": selection.pids,
            "killed": killed,
            "orphans": sorted(selection.orphans),
            "left_alone": [x.pid for x, _ in selection.foreign],
        },
    )


# --- clean-shm --------------------------------------------------------------------------------


def clean_shm(
    h: Host, p: Profile, *, step: str = "clean-shm", refuse_fails: bool = True
) -> StepResult:
    """Remove the psm_* and sem.mp-* files in shm_dir that no live process maps or holds open
    (and that are older than a few seconds). Files in use (another deployment's live server)
    are kept and named. ``refuse_fails``: fail when a file had to be kept only because some
    process's maps could not be read (the `clean-shm` task); deploy passes False."""
    out = h.run(shm.usage_command(p.shm_dir), step=step, mutating=False)
    usage = shm.parse_usage(out.stdout, p.shm_dir)
    plan = shm.plan_shm_cleanup(usage)
    kept = tuple(f"kept {f.path}: {why}" for f, why in plan.kept)
    if plan.undecided and refuse_fails and not plan.files:
        return failed(
            step,
            f"cannot tell whether {len(plan.undecided)} shm file(s) are in use: "
            "some processes' maps cannot be read; nothing removed",
            lines=kept,
            hint="run it as root (or as the user of every process on the host)",
        )
    if not plan.files:
        if kept:
            return ok(step, f"no stale shared memory in {p.shm_dir}; kept {len(kept)}", lines=kept)
        return ok(step, f"no stale shared memory in {p.shm_dir}")
    size = shm.human_bytes(plan.total_bytes)
    if h.dry:
        return skipped(
            step,
            f"dry run: would remove {len(plan.files)} file(s), {size}",
            lines=tuple(f.path for f in plan.files[:20]) + kept,
        )
    for command in shm.remove_commands(plan.files, p.shm_dir):
        h.run(command, step=step)
    extra = f"; kept {len(kept)} in use" if kept else ""
    return changed(
        step,
        f"removed {len(plan.files)} stale shm file(s), {size} freed{extra}",
        lines=kept,
        data={
            "count": len(plan.files),
            "bytes": plan.total_bytes,
            "kept": [{"path": f.path, "why": why} for f, why in plan.kept],
        },
    )


# --- patch-kv-config --------------------------------------------------------------------------


def _model_files(h: Host, p: Profile, step: str) -> dict[str, FileInfo]:
    """config files and their backups, by name, in one round trip."""
    names = [*kvpatch.KV_KEYS, *(kvpatch.backup_name(n) for n in kvpatch.KV_KEYS)]
    paths = [f"{p.model}/{n}" for n in names]
    found = h.read_files(paths, step=step, require_dir=p.model)
    return {n: found[path] for n, path in zip(names, paths, strict=True)}


def patch_kv_config(
    h: Host, p: Profile, *, restore: bool = False, step: str = "patch-kv-config"
) -> StepResult:
    """Remove (or, with ``restore``, bring back) the checkpoint's FP8 KV-cache settings.

    Three round trips: read the files, write any missing backups (``cp -p``, never over an
    existing backup), upload the patched texts and swap them in together.
    """
    files = _model_files(h, p, step)
    if restore:
        return _restore(h, p, files, step)
    try:
        patches = kvpatch.plan_patch({n: files[n].text for n in kvpatch.KV_KEYS})
    except kvpatch.ConfigPatchError as exc:
        raise StepFailed(
            step, f"{p.model}/{exc.message}", hint=exc.hint or "nothing was changed"
        ) from exc
    todo = [fp for fp in patches if fp.changed]
    if not todo:
        return ok(
            step, "no FP8 KV-cache settings in the checkpoint: nothing to patch (already patched?)"
        )
    diff = "".join(fp.diff(p.model) for fp in todo)
    removed = ", ".join(k for fp in todo for k in fp.removed)
    if h.dry:
        return skipped(step, f"dry run: would remove {removed}", diff=diff)
    backups = " && ".join(
        f"{{ test -e {q(f'{p.model}/{kvpatch.backup_name(fp.name)}')} || cp -p -- "
        f"{q(f'{p.model}/{fp.name}')} {q(f'{p.model}/{kvpatch.backup_name(fp.name)}')}; }}"
        for fp in todo
    )
    h.run(
        backups,
        step=step,
        hint="cannot write a backup in the model directory: is it writable (and not full)?",
    )
    uploads = [
        (fp.new.encode(), f"{p.model}/{fp.name}", files[fp.name].mode or 0o644) for fp in todo
    ]
    try:
        h.put_files(uploads, step=step)
    except StepFailed as exc:
        raise StepFailed(
            step,
            f"{exc.reason}. Changed: nothing (the config files are as they were; backups "
            f"*{kvpatch.backup_name('')} hold the originals)",
            command=exc.command,
            exited=exc.exited,
            stderr=exc.stderr,
            hint=exc.hint,
        ) from exc
    return changed(
        step,
        f"removed {removed}; originals kept as *{kvpatch.backup_name('')}",
        diff=diff,
    )


def _restore(h: Host, p: Profile, files: dict[str, FileInfo], step: str) -> StepResult:
    """Move each backup back over its file: byte for byte, atomic (rename), backup gone."""
    restored: list[str] = []
    diffs: list[str] = []
    for name in kvpatch.KV_KEYS:
        original = files[kvpatch.backup_name(name)].text
        if original is None:
            continue
        path = f"{p.model}/{name}"
        diffs.append(kvpatch.unified_diff(files[name].text or "", original, path))
        restored.append(name)
    if not restored:
        return ok(step, "no backups to restore: the checkpoint was not patched by kimi-ops")
    if h.dry:
        return skipped(step, "dry run: would restore " + ", ".join(restored), diff="".join(diffs))
    h.run(
        " && ".join(
            f"mv -f -- {q(f'{p.model}/{kvpatch.backup_name(n)}')} {q(f'{p.model}/{n}')}"
            for n in restored
        ),
        step=step,
    )
    return changed(step, "restored the originals of " + ", ".join(restored), diff="".join(diffs))


# --- upload-script ----------------------------------------------------------------------------


def _resource(name: str) -> bytes:
    if name == STANDIN_SCRIPT:
        return standin_bundle.build()
    if name == DIAGNOSE_MODULE:
        return resources.files("kimi_ops").joinpath("diagnose.py").read_bytes()
    return resources.files("tasks.remote").joinpath(name).read_bytes()


def env_file_text(values: dict[str, str]) -> str:
    return "".join(f"export {k}={q(v)}\n" for k, v in sorted(values.items()))


def upload_files(
    p: Profile,
    *,
    plan: Plan | None = None,
    secrets_env: dict[str, str] | None = None,
) -> dict[str, tuple[bytes, int]]:
    """Every file upload-script puts in run_dir: name -> (content, mode)."""
    script = launch_script.render_launch_script(
        p,
        extra_args=plan.launch_args if plan else None,
        env=plan.env if plan else None,
    )
    files: dict[str, tuple[bytes, int]] = {
        LAUNCH_SCRIPT: (script.encode(), 0o700),
        PROBE_SCRIPT: (_resource(PROBE_SCRIPT), 0o600),
    }
    if p.is_standin:
        files[STANDIN_SCRIPT] = (_resource(STANDIN_SCRIPT), 0o700)
        settings = {**p.standin.to_dict(), "shm_dir": p.shm_dir}
        config = json.dumps(settings, indent=2, sort_keys=True) + "\n"
        files[STANDIN_CONFIG] = (config.encode(), 0o600)
    if secrets_env:
        files[ENV_FILE] = (env_file_text(secrets_env).encode(), 0o600)
    return files


def sync_files(
    h: Host,
    p: Profile,
    files: dict[str, tuple[bytes, int]],
    *,
    step: str,
    remove: Sequence[str] = (),
) -> tuple[list[str], str]:
    """Make run_dir hold ``files`` (and not ``remove``): (changed names, launch-script diff).

    Two round trips when something changed: create run_dir, delete ``remove``, read the
    checksums and the old launch script; then upload and swap everything in at once.
    """
    r = _run_dir(p)
    names = " ".join(q(f"{r}/{n}") for n in files)
    script = q(f"{r}/{LAUNCH_SCRIPT}")
    prepare = f"mkdir -p -m 700 {q(r)} {q(r + '/' + LOG_DIR)}"
    for name in remove:
        path = q(f"{r}/{name}")
        prepare += f" && {{ if [ -e {path} ]; then rm -f -- {path} && echo @@removed:{name}; fi; }}"
    read = f"sha256sum {names} 2>/dev/null; echo @@script; cat {script} 2>/dev/null; true"
    out = h.run(
        read if h.dry else f"{prepare} && {{ {read}; }}", step=step, check=False, mutating=False
    )
    if not out.ok:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.exited}"])[-1]
        raise StepFailed(
            step,
            f"cannot create run_dir {r}: {why}",
            command=out.command,
            exited=out.exited,
            stderr=out.stderr,
            hint="set kimi.run_dir to a directory the SSH user can create and write",
        )
    sums, _, old_script = out.stdout.partition("@@script\n")
    current = {}
    changed_names = [
        f"(removed {ln.split(':', 1)[1]})"
        for ln in sums.splitlines()
        if ln.startswith("@@removed:")
    ]
    for line in sums.splitlines():
        digest, _, path = line.partition("  ")
        current[path.rsplit("/", 1)[-1]] = digest
    todo = [
        name
        for name, (data, _) in files.items()
        if current.get(name) != hashlib.sha256(data).hexdigest()
    ]
    diff = ""
    if LAUNCH_SCRIPT in todo:
        new_script = files[LAUNCH_SCRIPT][0].decode()
        diff = kvpatch.unified_diff(old_script, new_script, f"{r}/{LAUNCH_SCRIPT}")
    h.put_files([(files[n][0], f"{r}/{n}", files[n][1]) for n in todo], step=step)
    return todo + changed_names, diff


def ensure_standin(h: Host, p: Profile, *, step: str) -> None:
    """With ``engine: standin``, the emulator must be on the host before facts are gathered."""
    if p.is_standin:
        files = upload_files(p)
        sync_files(h, p, {n: files[n] for n in (STANDIN_SCRIPT, STANDIN_CONFIG)}, step=step)


def upload_script(
    h: Host,
    p: Profile,
    *,
    plan: Plan | None = None,
    secrets_env: dict[str, str] | None = None,
    step: str = "upload-script",
) -> StepResult:
    """Render the launch script (with the plan's launch arguments) and upload what changed."""
    r = _run_dir(p)
    files = upload_files(p, plan=plan, secrets_env=secrets_env)
    # Files that are not part of this deployment (secrets removed from the profile, engine no
    # longer the stand-in) must not stay behind.
    stale = [n for n in (ENV_FILE, STANDIN_CONFIG) if n not in files]
    uploaded, diff = sync_files(h, p, files, step=step, remove=stale)
    if not uploaded:
        return ok(step, f"{r}/{LAUNCH_SCRIPT} is up to date", data={"uploaded": []})
    verb = "would upload" if h.dry else "uploaded"
    res = changed if not h.dry else skipped
    return res(step, f"{verb} {', '.join(uploaded)} to {r}", diff=diff, data={"uploaded": uploaded})


def running_unchanged(
    h: Host, p: Profile, files: dict[str, tuple[bytes, int]], *, step: str = "deploy"
) -> StepResult | None:
    """If the server that runs now was launched from exactly ``files`` and answers a chat
    completion, an ok result saying nothing needs to change; otherwise None."""
    r = _run_dir(p)
    state = launch_script.parse_key_values(
        h.run(launch_script.running_state_command(r), step=step, mutating=False).stdout
    )
    args = state.get("args", "")
    if not args or procs.server_args(args) is None and not procs.is_vllm_title(args):
        return None
    expected = launch_script.deployment_digest({n: d for n, (d, _) in files.items()})
    if state.get("digest") != expected:
        return None
    probe = h.run(_probe_command(p), step=step, check=False, mutating=False, timeout=90)
    result = vfy.parse_probe(probe.stdout + probe.stderr)
    if not result.ready_for(p.served_model_name):
        return None
    return ok(
        step,
        f"server PID {state.get('pid')} (launch {state.get('launch_id')}) already runs this exact "
        "profile and answers: nothing changed (--restart forces a new launch)",
        data={
            "pid": int(state["pid"]) if state.get("pid", "").isdigit() else None,
            "unchanged": True,
        },
    )


def _probe_command(p: Profile) -> str:
    r = _run_dir(p)
    return vfy.probe_command(
        p.python, f"{r}/{PROBE_SCRIPT}", p.port, p.served_model_name, f"{r}/{ENV_FILE}", p.host
    )


# --- preflight --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreflightOutcome:
    result: StepResult
    checks: tuple[Check, ...]
    plan: Plan
    facts: HostFacts
    own_pids: tuple[int, ...]

    secret_patterns: tuple[str, ...] = ()

    def report(self) -> dict[str, Any]:
        return preflight_report(self.checks, self.plan, self.secret_patterns)


def gather(h: Host, p: Profile, *, step: str) -> tuple[HostFacts, tuple[int, ...]]:
    """All preflight facts in one round trip: the gather command and the process listing."""
    ensure_standin(h, p, step=step)
    out = h.run(
        f"{facts_mod.gather_command(p)}; echo @@kimi-ops:ps; {procs.LISTING_COMMAND}",
        step=step,
        check=False,
        mutating=False,
    )
    gathered, _, ps_text = out.stdout.rpartition("@@kimi-ops:ps\n")
    host_facts = facts_mod.parse_gathered(gathered)
    own = procs.owned_processes(
        procs.parse_listing(ps_text), _run_dir(p), host_facts.pidfile_pid, port=p.port
    )
    return host_facts, tuple(own.pids)


def preflight(h: Host, p: Profile, *, step: str = "preflight") -> PreflightOutcome:
    """Check GPUs, vLLM, the model, the port, disk, /dev/shm and RemoveIPC; decide the plan."""
    host_facts, own = gather(h, p, step=step)
    need = sum(len(data) for data, _ in upload_files(p).values()) + LOG_RESERVE_BYTES
    checks = tuple(run_checks(p, host_facts, own_pids=own, run_dir_need=need))
    plan = build_plan(p, host_facts)
    lines = [f"{c.status:<4} {c.name}: {c.detail}" for c in checks]
    lines.append(f"plan: patch_kv_config={str(plan.patch_kv_config).lower()}: {plan.reason}")
    if plan.attention_backend:
        lines.append(f"plan: attention backend {plan.attention_backend}")
    lines += [f"plan: {note}" for note in plan.notes]
    if plan.sizing is not None:
        lines.append(f"plan: sizing: {plan.sizing.summary()}")
    bad = [c for c in checks if c.status == "fail"]
    warn = [c for c in checks if c.status == "warn"]
    data = {"report": preflight_report(checks, plan, p.secret_patterns)}
    if bad:
        res = failed(
            step,
            f"{len(bad)} check(s) failed: " + "; ".join(f"{c.name}: {c.detail}" for c in bad),
            lines=tuple(lines),
            hint="fix these before deploying; nothing was killed or changed",
            data=data,
        )
    else:
        extra = f", {len(warn)} warning(s)" if warn else ""
        res = ok(step, f"{len(checks)} checks passed{extra}", lines=tuple(lines), data=data)
    return PreflightOutcome(res, checks, plan, host_facts, own, p.secret_patterns)


# --- launch -----------------------------------------------------------------------------------


def new_launch_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return launch_script.new_launch_id(stamp, secrets.token_hex(3))


def launch(
    h: Host,
    p: Profile,
    *,
    step: str = "launch",
    settle: float = 1.0,
    sleep: Sleep = time.sleep,
) -> StepResult:
    """Start the uploaded script detached; confirm the PID is alive and the log exists."""
    r = _run_dir(p)
    launch_id = new_launch_id()
    log = f"{r}/{LOG_DIR}/{launch_id}.log"
    if h.dry:
        return skipped(
            step,
            "dry run: would start the server detached",
            lines=(launch_script.launch_command(r, launch_id, p.keep_logs),),
        )
    started = time.monotonic()
    out = h.run(launch_script.launch_command(r, launch_id, p.keep_logs), step=step, check=False)
    if "@@no-script" in out.stdout:
        return failed(
            step,
            f"no launch script at {r}/{LAUNCH_SCRIPT}",
            hint="run `fab upload-script` first (deploy does it for you)",
        )
    if not out.ok:
        return failed(
            step,
            f"the launcher failed with exit status {out.exited}",
            command=out.command,
            stderr=out.stderr,
        )
    pid = launch_script.parse_launch_output(out.stdout)
    if pid is None:
        return failed(
            step, "the launcher printed no PID", command=out.command, stderr=out.stderr + out.stdout
        )
    sleep(settle)
    confirm = launch_script.parse_confirm_output(
        h.run(launch_script.confirm_command(r, pid, launch_id), step=step, mutating=False).stdout
    )
    alive, has_log = confirm.get("alive") == "1", confirm.get("logfile") == "1"
    if not (alive and has_log):
        took = time.monotonic() - started
        printed = confirm.get("log", "")
        diag = diagnose(printed, {"port": p.port}) if printed.strip() else None
        data = {"pid": pid, "log": log, "launch_id": launch_id}
        if diag is not None:
            data["diagnosis"] = diag.to_dict()
        if has_log and diag is not None and (diag.failed or diag.stage is not None):
            # The server ran and died: that is a crash, with its cause.
            message = f"the server exited {took:.1f} s after launch: {diag.summary}"
        else:
            missing = " and ".join(
                x
                for x, bad in (("the log file", not has_log), (f"process {pid}", not alive))
                if bad
            )
            message = f"never started: {missing} missing {took:.1f} s after launch"
        tail = printed.strip().splitlines()[-30:]
        if diag is not None and diag.failed:
            tail = [f"label: {diag.label}", *(f"evidence: {e}" for e in diag.evidence[:3]), *tail]
        if diag is not None and diag.failed:
            hint = diag.hint
        elif tail or out.stderr.strip():
            hint = "the launcher's output above says why"
        else:
            where = f"{log} exists but is empty" if has_log else f"{log} was not created"
            tail = [f"the launcher printed nothing: {where}"]
            hint = (
                f"nothing could write to {r}: check its free space and permissions "
                f"(`df -h {r}`, `ls -ld {r}`)"
            )
        return failed(step, message, lines=tuple(tail), stderr=out.stderr, hint=hint, data=data)
    return changed(
        step,
        f"started PID {pid}; log {log}",
        data={"pid": pid, "log": log, "launch_id": launch_id},
    )


# --- verify -----------------------------------------------------------------------------------


def verify(
    h: Host,
    p: Profile,
    reporter: Reporter,
    *,
    step: str = "verify",
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
    from_end: bool = False,
    expect_launch_id: str | None = None,
) -> StepResult:
    """Poll until ready, failed, or startup_timeout (see :mod:`kimi_ops.verify`).

    ``expect_launch_id``: the launch this run started; verify fails if another launch replaced
    it rather than follow a server this run did not start."""
    r = _run_dir(p)
    state = vfy.VerifyState(
        p.served_model_name,
        p.startup_timeout,
        p.stall_timeout,
        context={"port": p.port, "served_model_name": p.served_model_name},
        expected_launch_id=expect_launch_id,
    )
    start = clock()
    probe = _probe_command(p)
    decoder = vfy.log_decoder()
    while True:
        out = h.run(vfy.poll_command(r, state.offset), step=step, mutating=False)
        facts = vfy.parse_poll(out.stdout, decoder)
        if facts.log_exists and facts.log_size < state.offset:  # a new log: nothing pending
            decoder = vfy.log_decoder()
        verdict = state.feed_poll(facts, clock() - start)
        if verdict.probe_due and not verdict.done:
            res = h.run(probe, step=step, check=False, mutating=False, timeout=90)
            verdict = state.feed_probe(vfy.parse_probe(res.stdout + res.stderr), clock() - start)
            if verdict.ok and expect_launch_id:
                # The answer came from the port: prove the launch there is still this run's.
                out = h.run(vfy.poll_command(r, state.offset), step=step, mutating=False)
                facts = vfy.parse_poll(out.stdout)
                recheck = state.feed_poll(facts, clock() - start)
                if recheck.done:  # replaced, stopped or gone meanwhile
                    verdict = recheck
        if verdict.done:
            break
        reporter.progress(step, verdict.message)
        if facts.read < vfy.MAX_POLL_BYTES:  # caught up with the log: wait for more
            sleep(p.poll_interval)
    diag = verdict.diagnosis
    data = {
        "state": verdict.state,
        "diagnosis": diag.to_dict(),
        "seconds": round(clock() - start, 1),
        "pid": facts.pid,
        "launch_id": facts.launch_id,
    }
    if verdict.ok:
        return ok(
            step,
            verdict.message,
            data=data,
            lines=(f"PID {facts.pid}, {p.served_model_name} on port {p.port}",),
        )
    lines = [f"label: {diag.label}"]
    lines += [f"evidence: {e}" for e in diag.evidence[:3]]
    lines.append("last log lines:")
    lines += [f"  {ln}" for ln in state.diagnoser.tail[-30:]]
    return failed(step, verdict.message, lines=tuple(lines), hint=diag.hint, data=data)


# --- logs (status is in tasks/state.py) ------------------------------------------------------


def read_log(h: Host, p: Profile, lines: int, *, step: str = "logs") -> str:
    """The last ``lines`` lines of the current log, each cut to ``kimi.log_line_limit``
    characters (the host sends at most that many bytes of a line: ``cut -b``)."""
    path = f"{_run_dir(p)}/{CURRENT_LOG}"
    out = h.run(
        f"test -e {q(path)} && tail -n {int(lines)} {q(path)} "
        f"| cut -b 1-{logview.host_byte_limit(p.log_line_limit)}",
        step=step,
        check=False,
        mutating=False,
    )
    if not out.ok:
        raise StepFailed(
            step,
            f"no log at {path}",
            command=out.command,
            stderr=out.stderr,
            hint=NO_LOG_HINT,
        )
    return logview.cap_lines(out.stdout, p.log_line_limit)


def follow_log(
    h: Host,
    p: Profile,
    write: Callable[[str], None],
    *,
    step: str = "logs",
    sleep: Sleep = time.sleep,
    until: Callable[[], bool] = lambda: False,
) -> None:
    """Print new log bytes as they arrive (reads from an offset; Ctrl-C ends it), each line
    cut to ``kimi.log_line_limit`` characters."""
    r = _run_dir(p)
    offset = -1
    decoder, capper = vfy.log_decoder(), logview.LineCapper(p.log_line_limit)
    while not until():
        if offset < 0:
            size = h.run(vfy.poll_command(r, 0, 0), step=step, mutating=False)
            offset = max(0, vfy.parse_poll(size.stdout).log_size)
        out = h.run(vfy.poll_command(r, offset), step=step, mutating=False)
        facts = vfy.parse_poll(out.stdout, decoder)
        if facts.log_size >= 0 and facts.log_size < offset:
            offset = 0
            decoder = vfy.log_decoder()
            continue
        if facts.read:
            write(capper.feed(facts.chunk))
            offset += facts.read
        else:
            sleep(p.poll_interval)


def diagnose_host_log(
    h: Host,
    p: Profile,
    *,
    step: str = "diagnose",
    progress: Callable[[str], None] | None = None,
) -> Diagnosis:
    """The diagnosis of the host's current log, made ON the host: kimi_ops/diagnose.py and a
    small runner are uploaded to run_dir and run with the profile's python, which reads the log
    where it lies and prints the diagnosis as JSON (a log of gigabytes answers in seconds, not
    after crossing SSH). If that python cannot run it, the log is streamed here instead, with
    ``progress`` told how far it got."""
    r = _run_dir(p)
    context = {"port": p.port, "served_model_name": p.served_model_name}
    files = {n: (_resource(n), 0o600) for n in (DIAGNOSE_MODULE, DIAGNOSE_RUNNER)}
    sync_files(h, p, files, step=step)
    out = h.run(
        f"{q(p.python)} {q(f'{r}/{DIAGNOSE_RUNNER}')} {q(f'{r}/{CURRENT_LOG}')} "
        f"{q(json.dumps(context))}",
        step=step,
        check=False,
        mutating=False,
        timeout=max(600.0, p.command_timeout),
        show_stderr=progress is not None,
    )
    answer = _last_json(out.stdout) if out.ok else None
    if answer is not None and "missing" in answer:
        raise _no_log(step, r)
    if answer is not None and isinstance(answer.get("diagnosis"), dict):
        return diagnosis_from_dict(answer["diagnosis"])
    if progress is not None:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.exited}"])[-1]
        progress(f"cannot diagnose on the host ({why[:200]}): streaming the log here")
    return stream_diagnose_host_log(h, p, step=step, progress=progress).diagnosis()


def _no_log(step: str, run_dir: str) -> StepFailed:
    return StepFailed(
        step,
        f"no log at {run_dir}/{CURRENT_LOG}",
        hint="nothing has been launched yet (`fab deploy`)",
    )


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def diagnosis_from_dict(d: dict[str, Any]) -> Diagnosis:
    """A :class:`Diagnosis` back from its ``to_dict`` form."""
    return Diagnosis(
        label=str(d.get("label", "unknown")),
        stage=d.get("stage"),
        progress=d.get("progress"),
        evidence=tuple(d.get("evidence") or ()),
        hint=str(d.get("hint", "")),
        summary=str(d.get("summary", "")),
        facts=dict(d.get("facts") or {}),
    )


def stream_diagnose_host_log(
    h: Host,
    p: Profile,
    *,
    step: str = "diagnose",
    progress: Callable[[str], None] | None = None,
) -> LogDiagnoser:
    """Stream the host's current log through the diagnosis, a bounded chunk per round trip."""
    r = _run_dir(p)
    diagnoser = LogDiagnoser({"port": p.port, "served_model_name": p.served_model_name})
    decoder = vfy.log_decoder()
    offset = 0
    while True:
        facts = vfy.parse_poll(
            h.run(vfy.poll_command(r, offset), step=step, mutating=False).stdout, decoder
        )
        if not facts.log_exists:
            raise _no_log(step, r)
        diagnoser.feed(facts.chunk)
        offset += facts.read
        if progress is not None and facts.log_size > 0:
            progress(f"read {offset / 2**20:.0f} of {facts.log_size / 2**20:.0f} MiB")
        if facts.read < vfy.MAX_POLL_BYTES:
            return diagnoser
