"""preflight: every fact in one round trip, the checks and the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kimi_ops import facts as facts_mod
from kimi_ops import procs
from kimi_ops.defaults import PIDFILE
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
from kimi_ops.result import StepResult, failed, ok
from kimi_ops.script import parse_key_values
from kimi_ops.shell import quote as q

from ..host import Host
from .common import _run_dir, read_listing
from .upload import ensure_standin, upload_files


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
    r = _run_dir(p)
    pidfile = q(r + "/" + PIDFILE)
    out = h.run(
        f"{facts_mod.gather_command(p)}; echo @@kimi-ops:pf; "
        f"{procs.read_pidfile_command(pidfile)}; "
        f"echo @@kimi-ops:ps; {procs.LISTING_COMMAND}",
        step=step,
        check=False,
        mutating=False,
    )
    gathered, _, ps_text = out.stdout.rpartition("@@kimi-ops:ps\n")
    head, sep, pf_text = gathered.rpartition("@@kimi-ops:pf\n")
    gathered, pf_text = (head, pf_text) if sep else (gathered, "")
    host_facts = facts_mod.parse_gathered(gathered)
    # A reused pidfile PID (the process under it started after the pidfile) is not ours.
    pidfile_proc = procs.parse_pidfile_process(parse_key_values(pf_text))
    pidfile_pid = host_facts.pidfile_pid
    if pidfile_pid is not None and pidfile_proc.pid == pidfile_pid:
        pidfile_pid = pidfile_proc.owner_pid(r)
    listing = read_listing(ps_text, step=step, command=out.command)
    own = procs.owned_processes(listing, r, pidfile_pid, port=p.port)
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
