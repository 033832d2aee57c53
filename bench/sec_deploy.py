"""Benchmark 1: deploy overhead to ready (stand-in, load_seconds 0), kimi-ops vs manual vs Ansible.

Every run starts from the same cold state: a fresh model dir (FP8 KV settings as shipped), an
empty run dir and no server. The methods take turns (kimi-ops, manual, Ansible, kimi-ops, ...)
so background load hits them alike. SSH connections and remote commands come from the sshd log.
"""

from __future__ import annotations

import time
from typing import Any

import ansible_env
import lib


def kimi_ops_once(run: lib.Run, host: lib.SshdHost, counter: lib.LogCounter) -> dict[str, Any]:
    t = lib.make_target(host, run.newdir("deploy-kimi"))
    try:
        counter.mark()
        r = lib.fab_stream(t, "deploy")
        count = counter.count()
        ok = r.ok and "verify: ready" in r.output
        out = {"seconds": r.seconds, "ok": ok, "steps": r.steps, **count.to_dict()}
        if not ok:
            out["failure"] = (
                f"$ fab -H {host.target} deploy\nexit={r.returncode}\n" + r.output[-4000:]
            )
        return out
    finally:
        t.stop()


def manual_once(run: lib.Run, host: lib.SshdHost, counter: lib.LogCounter) -> dict[str, Any]:
    t = lib.make_target(host, run.newdir("deploy-manual"))
    lib.preinstall_standin(t)
    pid = None
    try:
        counter.mark()
        start = time.monotonic()
        kill = lib.ssh(host, lib.manual_kill_command())
        lib.ssh(host, lib.manual_shm_command(t))
        patch = lib.ssh(host, lib.manual_patch_command(t))
        launch = lib.ssh(host, lib.manual_launch_command(t))
        text = launch.stdout.strip()
        pid = int(text) if text.isdigit() else None
        state = "NO-PID"
        polls = 0
        if pid is not None:
            t.remember(pid)
            state, _, polls = lib.manual_poll_until(t, pid, ("READY", "DEAD"))
        seconds = time.monotonic() - start
        count = counter.count()
        ok = state == "READY" and patch.returncode == 0
        out = {
            "seconds": seconds,
            "ok": ok,
            "polls": polls,
            "kill_rc": kill.returncode,
            **count.to_dict(),
        }
        if not ok:
            out["failure"] = (
                f"state={state} patch={patch.returncode} {patch.stderr[-500:]} "
                f"launch={launch.stdout!r} {launch.stderr[-500:]}"
            )
        return out
    finally:
        t.stop()


def ansible_once(
    run: lib.Run, runner: ansible_env.AnsibleRunner, counter: lib.LogCounter
) -> dict[str, Any]:
    t = lib.make_target(runner.host, run.newdir("deploy-ansible"))
    lib.preinstall_standin(t)
    try:
        counter.mark()
        proc, seconds, pid = runner.deploy(t)
        t.remember(pid)
        runner.close_masters()  # so every run opens (and is charged) its own connection
        count = counter.count()
        ok = proc.returncode == 0
        out = {
            "seconds": seconds,
            "ok": ok,
            "uri_retries": proc.stdout.count("RETRYING"),
            **count.to_dict(),
        }
        if not ok:
            out["failure"] = (proc.stdout + proc.stderr)[-3000:]
        return out
    finally:
        t.stop()


def step_medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds per kimi-ops step (the first includes fab's own start-up)."""
    per: dict[str, list[float]] = {}
    for r in runs:
        for name, secs in r.get("steps", []):
            per.setdefault(name, []).append(secs)
    return {k: round(lib.median(v) or 0.0, 2) for k, v in per.items()}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if r.get("ok")]
    pick = good or runs
    return {
        "step_median_seconds": step_medians(good),
        "runs": runs,
        "ok_runs": len(good),
        "median_seconds": lib.median([r["seconds"] for r in good]) if good else None,
        "connections": lib.median([r["connections"] for r in pick]) if pick else None,
        "commands": lib.median([r["commands"] for r in pick]) if pick else None,
        "sftp": lib.median([r["sftp"] for r in pick]) if pick else None,
    }


def run_section(run: lib.Run, reps: int, with_ansible: bool) -> dict[str, Any]:
    host = run.sshd()
    counter = lib.LogCounter(host)
    runner = None
    ansible_note = "skipped (--no-ansible)"
    ansible_version = ""
    if with_ansible:
        exe, ansible_note = ansible_env.ensure_venv()
        if exe is not None:
            runner = ansible_env.AnsibleRunner(exe, host)
            ansible_version = ansible_env.version(exe)
    results: dict[str, list[dict[str, Any]]] = {"kimi_ops": [], "manual": [], "ansible": []}
    try:
        for i in range(reps):
            lib.log(f"deploy rep {i + 1}/{reps}: kimi-ops")
            results["kimi_ops"].append(kimi_ops_once(run, host, counter))
            lib.log(f"deploy rep {i + 1}/{reps}: manual")
            results["manual"].append(manual_once(run, host, counter))
            if runner is not None:
                lib.log(f"deploy rep {i + 1}/{reps}: ansible")
                results["ansible"].append(ansible_once(run, runner, counter))
    finally:
        if runner is not None:
            runner.cleanup()
    out = {k: summarize(v) for k, v in results.items() if v}
    base = out["kimi_ops"]["median_seconds"]
    for v in out.values():
        med = v["median_seconds"]
        v["ratio_to_kimi_ops"] = round(med / base, 2) if med and base else None
    out["ansible_note"] = ansible_note
    out["ansible_version"] = ansible_version
    out["reps"] = reps
    return out
