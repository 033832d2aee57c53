"""kill-stale and clean-shm: this deployment's server processes and its /dev/shm files."""

from __future__ import annotations

import time
from collections.abc import Sequence

from kimi_ops import liveserver, procs, shm
from kimi_ops import script as launch_script
from kimi_ops.defaults import (
    LAUNCH_ID_FILE,
    PIDFILE,
)
from kimi_ops.profile import Profile
from kimi_ops.result import StepResult, changed, failed, ok, skipped
from kimi_ops.shell import quote as q

from ..host import Host
from .common import Clock, Sleep, _run_dir, read_listing


def listing(h: Host, p: Profile, step: str) -> tuple[procs.Listing, int | None, str | None]:
    """One round trip: the pidfile's PID, the current launch id and the process listing.

    The PID is None when it was reused: the process under it now is not the one the pidfile
    was written for (:meth:`kimi_ops.procs.PidfileProcess.owner_pid`), so nothing is taken
    as ours for being that PID."""
    found, pidfile_proc, launch_id = listing_facts(h, p, step)
    return found, pidfile_proc.owner_pid(_run_dir(p)), launch_id


def listing_facts(
    h: Host, p: Profile, step: str
) -> tuple[procs.Listing, procs.PidfileProcess, str | None]:
    """:func:`listing`, with the pidfile's process as it was read (its PID even if reused)."""
    r = _run_dir(p)
    pidfile = q(r + "/" + PIDFILE)
    out = h.run(
        f"cat {q(r + '/' + LAUNCH_ID_FILE)} 2>/dev/null | sed -n '1s/^/launch_id=/p'; "
        + procs.read_pidfile_command(pidfile, key="pidfile")
        + "; "
        + procs.LISTING_COMMAND,
        step=step,
        mutating=False,
    )
    head = launch_script.parse_key_values(
        "\n".join(
            ln for ln in out.stdout.split("\n") if ln.startswith(("pidfile=", "launch_id=", "pf_"))
        )
    )
    launch_id = head.get("launch_id", "").strip() or None
    pidfile_proc = procs.parse_pidfile_process(head, pid_key="pidfile")
    found = read_listing(out.stdout, step=step, command=out.command)
    return found, pidfile_proc, launch_id


def restore_pidfile(
    h: Host, p: Profile, proc: procs.Proc, launch_id: str, step: str
) -> liveserver.Adopted:
    """Put ``proc`` (the current launch's server, found by its launch id) back in the missing
    pidfile when that is safe (:func:`kimi_ops.liveserver.restore_pidfile_command`); a dry run
    only prints the command."""
    out = h.run(
        liveserver.restore_pidfile_command(_run_dir(p), proc.pid, launch_id),
        step=step,
        check=False,
    )
    values = launch_script.parse_key_values(out.stdout)
    return liveserver.parse_restore(values, proc, launch_id, dry=h.dry)


def adopt_server(h: Host, p: Profile, step: str) -> liveserver.Adopted | None:
    """When the pidfile names no PID (missing or unreadable): the current launch's server,
    found in the listing by ``launch.id`` (:func:`kimi_ops.liveserver.current_server`), with its
    pidfile restored when safe. None when the pidfile names a PID or no such server lives."""
    found, pidfile_proc, launch_id = listing_facts(h, p, step)
    if pidfile_proc.pid is not None or not launch_id:
        return None
    proc = liveserver.current_server(found, _run_dir(p), launch_id)
    return None if proc is None else restore_pidfile(h, p, proc, launch_id, step)


def pidfile_process(h: Host, p: Profile, step: str) -> procs.PidfileProcess:
    """The pidfile's PID and what runs under it now (one round trip)."""
    pidfile = q(_run_dir(p) + "/" + PIDFILE)
    out = h.run(
        procs.read_pidfile_command(pidfile) + "; true",
        step=step,
        mutating=False,
    )
    return procs.parse_pidfile_process(launch_script.parse_key_values(out.stdout))


def forget_ended_server(h: Host, p: Profile, step: str) -> None:
    """Remove the pidfile once the server it names is gone (or its PID was reused), so no later
    run takes a recycled PID for this deployment's server."""
    found = pidfile_process(h, p, step)
    if found.pid is not None and found.ended(_run_dir(p)):
        h.run(
            procs.remove_pidfile_command(q(_run_dir(p) + "/" + PIDFILE), found.pid),
            step=step,
            check=False,
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
        if not h.dry:
            forget_ended_server(h, p, step)
        return ok(
            step,
            f"no process of this deployment ({_run_dir(p)}, port {p.port}) is running",
            lines=foreign,
        )
    lines = tuple(selection.describe()) + foreign
    if h.dry:
        return skipped(
            step,
            f"dry run: would end {len(selection.targets)} process(es)",
            lines=lines,
            data={"pids": selection.pids},
        )
    # What the processes to be ended use in shm_dir is this deployment's: recorded first, so
    # clean-shm removes it once they are gone.
    record_shm(h, p, step, pids=selection.pids)
    term = h.run(procs.signal_command("TERM", selection.targets), step=step)
    sent, _ = procs.parse_signal_output(term.stdout)
    deadline = clock() + p.grace_seconds
    remaining = list(selection.targets)
    while remaining and clock() < deadline:
        sleep(min(0.5, max(0.05, p.grace_seconds / 10)))
        now, _, _ = listing(h, p, step)
        remaining = procs.still_running(selection, now)
    killed: list[int] = []
    if remaining:
        # Only the very processes SIGTERM went to (PID and start time, checked again on the host
        # right before the kill): a PID reused meanwhile is left alone (red team round 4, #12).
        out = h.run(procs.signal_command("KILL", remaining), step=step)
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
    forget_ended_server(h, p, step)
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


def owned_file(p: Profile) -> str:
    """This deployment's record of the shm files its processes were seen using."""
    return _run_dir(p) + "/" + shm.OWNED_FILE


def record_shm(
    h: Host,
    p: Profile,
    step: str,
    *,
    pids: Sequence[int] | None = None,
    session: int | None = None,
) -> list[shm.Owned]:
    """Record (in run_dir) the shm files that this deployment's processes use now: ``pids``, or
    the members of ``session`` (a live server's, which leads its own session). clean-shm removes
    only recorded files. Nothing in a dry run. Returns the files newly recorded."""
    if h.dry or (pids is not None and not pids) or (pids is None and session is None):
        return []
    record = owned_file(p)
    command = shm.usage_command(p.shm_dir, owned_file=record, pids=pids, session=session)
    out = h.run(command, step=step, mutating=False, check=False)
    new = shm.to_record(shm.parse_usage(out.stdout, p.shm_dir))
    if new:
        h.run(shm.record_command(record, new), step=step, check=False)
    return new


def _named(what: str, pairs: Sequence[tuple[shm.ShmFile, str]]) -> list[str]:
    lines = [f"{what} {f.path}: {why}" for f, why in pairs[: shm.SHOWN]]
    if len(pairs) > shm.SHOWN:
        lines.append(f"... and {len(pairs) - shm.SHOWN} more {what}")
    return lines


def _users(usage: shm.ShmUsage, f: shm.ShmFile) -> str:
    pids = sorted(usage.users.get(f.path, ()))
    return "; in use by PID " + ", ".join(map(str, pids)) if pids else ""


#: Why a file clean-shm leaves alone is not this deployment's, and what to do about it.
NOT_OURS = "not made by this deployment (never recorded as used by its server)"
NOT_OURS_NOTE = (
    "(clean-shm removes only files that verify, status or kill-stale saw this deployment's "
    "processes use; a server that crashed before any of them ran left its files unrecorded: "
    "remove such a file by hand once you know it is that server's)"
)


def clean_shm(
    h: Host,
    p: Profile,
    *,
    step: str = "clean-shm",
    refuse_fails: bool = True,
    after: StepResult | None = None,
) -> StepResult:
    """Remove the psm_* and sem.mp-* files in shm_dir that this deployment's server made (its
    record, :data:`kimi_ops.shm.OWNED_FILE`) and that no live process maps or holds open. Files
    in use are kept and named; files the record does not name are left alone and named.
    ``refuse_fails``: fail when a file had to be kept only because some process's maps could
    not be read (the `clean-shm` task); deploy passes False. ``after``: the kill-stale that ran
    before; in a dry run its processes are still alive, and the files only they use are
    reported as what the real run would remove once they are ended."""
    record = owned_file(p)
    out = h.run(
        shm.usage_command(p.shm_dir, owned_file=record), step=step, mutating=False, check=False
    )
    usage = shm.parse_usage(out.stdout, p.shm_dir)
    if usage.missing:
        return skipped(
            step,
            f"shm_dir {p.shm_dir} does not exist: nothing to clean there "
            "(vLLM's shared memory is in /dev/shm; check kimi.shm_dir)",
            data={"missing": True},
        )
    ending = after.data.get("pids", []) if h.dry and after is not None and after.data else []
    plan = shm.plan_shm_cleanup(usage, ending=ending)
    kept = tuple(f"kept {f.path}: {why}" for f, why in plan.kept)
    alone = _named("left alone", [(f, NOT_OURS + _users(usage, f)) for f in plan.not_ours])
    if alone:
        alone.append(NOT_OURS_NOTE)
    data = {
        "count": len(plan.files),
        "bytes": plan.total_bytes,
        "kept": [{"path": f.path, "why": why} for f, why in plan.kept],
        "not_ours": [f.path for f in plan.not_ours],
    }
    extra = (f"; kept {len(kept)} in use" if kept else "") + (
        f"; left alone {len(plan.not_ours)} not made by this deployment" if plan.not_ours else ""
    )
    if plan.undecided and refuse_fails and not plan.files:
        return failed(
            step,
            f"cannot tell whether {len(plan.undecided)} shm file(s) are in use: "
            "some processes' maps cannot be read; nothing removed",
            lines=(*kept, *alone),
            hint="run it as root (or as the user of every process on the host)",
            data=data,
        )
    if not h.dry and plan.forget and not plan.files:
        h.run(shm.forget_command(record, plan.forget), step=step, check=False)
    if not plan.files:
        return ok(
            step,
            f"no stale shared memory of this deployment in {p.shm_dir}{extra}",
            lines=(*kept, *alone),
            data=data,
        )
    size = shm.human_bytes(plan.total_bytes)
    if h.dry:
        freed = dict(plan.freed_by_ending)
        later = f" ({len(freed)} of them once kill-stale has ended their server)" if freed else ""
        shown = []
        for f in plan.files[:20]:
            pids = ", ".join(map(str, freed.get(f, ())))
            why = f" (in use now by PID {pids}, which kill-stale would end first)" if pids else ""
            shown.append(f.path + why)
        return skipped(
            step,
            f"dry run: would remove {len(plan.files)} file(s), {size}{later}{extra}",
            lines=(*shown, *kept, *alone),
            data=data,
        )
    for command in shm.remove_commands(plan.files, p.shm_dir):
        h.run(command, step=step)
    h.run(shm.forget_command(record, plan.forget), step=step, check=False)
    return changed(
        step,
        f"removed {len(plan.files)} stale shm file(s), {size} freed{extra}",
        lines=(*(f"removed {f.path}" for f in plan.files[: shm.SHOWN]), *kept, *alone),
        data=data,
    )
