"""Benchmark 2: time to diagnosis.

(i) Crash after ready: a stand-in deployed by kimi-ops dies ``crash_after_seconds`` after it is
ready (the delay varies per rep, so the poll phase varies). Two watchers start together when the
deploy returns, both checking every 5 s (`while sleep 5; do ...; done`): kimi-ops' `fab status`
and the manual ssh poll (curl; if that fails, `kill -0 PID`; if dead, the log tail). Measured:
from the moment the server process is gone (seen locally, 10 ms resolution) until each watcher
has the failure in hand -- kimi-ops with a label, the manual way with a raw log tail to read.
Then the cost of one check on demand: `fab status`, `fab verify`, one manual poll.

(ii) A launch that never starts: the profile's python does not exist. kimi-ops `fab deploy`
(preflight catches it before anything is killed), kimi-ops `fab launch` when the python vanished
after the upload (the "never started" path), and the manual launch + 5 s polling. The seed slept
a fixed 45 s before its first curl (quoted, not run).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import lib

SEED_SLEEP = 45.0
#: Labels that are wrong for a server that crashed.
WRONG_LABELS = (None, "healthy", "unknown")


def _label(output: str) -> str | None:
    m = re.search(r"^\s*log: ([a-z_]+)", output, re.M)
    return m.group(1) if m else None


def _lines_after(text: str, needle: str) -> int | None:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if needle in line:
            return len(lines) - i - 1
    return None


def _first_failed(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("failed:"):
            return line.strip()
    return (output.strip().splitlines() or [""])[-1]


def crash_once(run: lib.Run, host: lib.SshdHost, delay: float) -> dict[str, Any]:
    t = lib.make_target(host, run.newdir("crash"))
    standin = {"load_seconds": 0, "crash_after_seconds": delay}
    try:
        dep = lib.fab(t, "deploy", standin=standin)
        pid = t.server_pid()
        if not (dep.ok and pid):
            return {"ok": False, "failure": dep.describe()[-4000:]}
        dead_at: list[float] = []
        stop = threading.Event()

        def watch_pid() -> None:
            while not stop.is_set():
                if not lib.pid_alive(pid):
                    dead_at.append(time.monotonic())
                    return
                time.sleep(0.01)

        current = str(t.run_dir / "current.log")  # where this (kimi-ops) launch logs
        kimi: dict[str, Any] = {}
        manual: dict[str, Any] = {}

        def kimi_loop() -> None:
            polls = 0
            while not stop.is_set():
                time.sleep(5.0)
                r = lib.fab(t, "status", standin=standin)
                polls += 1
                if r.returncode == 5:  # `fab status`: crashed
                    kimi.update(
                        at=time.monotonic(),
                        polls=polls,
                        label=_label(r.stdout),
                        output=r.stdout[-1500:],
                    )
                    return
                if polls > 30:
                    return

        def manual_loop() -> None:
            state, _, polls = lib.manual_poll_until(t, pid, ("DEAD",), limit=150, log=current)
            manual.update(at=time.monotonic(), polls=polls, state=state)

        threads = [
            threading.Thread(target=f, daemon=True) for f in (watch_pid, kimi_loop, manual_loop)
        ]
        for th in threads:
            th.start()
        for th in threads[1:]:
            th.join(200)
        stop.set()
        threads[0].join(5)
        if not dead_at or "at" not in kimi or manual.get("state") != "DEAD":
            return {"ok": False, "failure": f"dead={dead_at} kimi={kimi} manual={manual}"}
        died = dead_at[0]
        # On demand, once dead: one check each.
        s = lib.fab(t, "status", standin=standin)
        v = lib.fab(t, "verify", standin=standin)
        start = time.monotonic()
        m = lib.ssh(host, lib.manual_poll_command(t, pid, current))
        m_seconds = time.monotonic() - start
        label = kimi["label"]
        out = {
            "ok": True,
            "label_ok": label not in WRONG_LABELS,
            "crash_after_seconds": delay,
            "kimi_ops_seconds": kimi["at"] - died,
            "kimi_ops_polls": kimi["polls"],
            "kimi_ops_label": kimi["label"],
            "manual_seconds": manual["at"] - died,
            "manual_polls": manual["polls"],
            "status_once_seconds": s.seconds,
            "status_once_label": _label(s.stdout),
            "verify_once_seconds": v.seconds,
            "verify_once_exit": v.returncode,
            "verify_once_line": _first_failed(v.stdout),
            "manual_once_seconds": m_seconds,
            "manual_once_tail_lines": max(0, len(m.stdout.splitlines()) - 1),
        }
        if not out["label_ok"]:
            # kimi-ops named a crashed server's log wrongly: keep the evidence.
            log_text = (t.run_dir / "current.log").read_text(errors="replace")
            out["status_output"] = kimi["output"]
            out["verify_output"] = v.stdout[-1500:]
            out["log_lines_after_fatal"] = _lines_after(log_text, "EngineCore encountered")
            out["log_tail"] = log_text.splitlines()[-25:]
        return out
    finally:
        t.stop()


def never_started(run: lib.Run, host: lib.SshdHost, reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"seed_fixed_sleep_seconds": SEED_SLEEP}

    # (a) fab deploy with a python that does not exist: preflight stops it.
    t = lib.make_target(host, run.newdir("never-deploy"))
    runs = []
    for _ in range(reps):
        r = lib.fab(t, "deploy", python="/nonexistent/python3")
        runs.append(
            {"seconds": r.seconds, "exit": r.returncode, "line": _first_failed(r.stdout)[:300]}
        )
    t.stop()
    out["kimi_ops_deploy"] = {
        "runs": runs,
        "median_seconds": lib.median([x["seconds"] for x in runs if x["exit"] != 0]),
        "reported": runs[0]["line"] if runs else "",
    }

    # (b) fab launch after the python vanished (uploaded with a python that existed then).
    t = lib.make_target(host, run.newdir("never-launch"))
    link = Path(t.root) / "bin" / "python3"
    link.parent.mkdir()
    link.symlink_to(lib.PY)
    up = lib.fab(t, "upload-script", python=str(link))
    runs = []
    if up.ok:
        link.unlink()
        for _ in range(reps):
            r = lib.fab(t, "launch", python=str(link))
            runs.append(
                {
                    "seconds": r.seconds,
                    "exit": r.returncode,
                    "line": _first_failed(r.stdout)[:300],
                    "never_started": "never started" in r.stdout,
                }
            )
    t.stop()
    out["kimi_ops_launch"] = {
        "runs": runs,
        "setup_ok": up.ok,
        "setup_failure": "" if up.ok else up.describe()[-3000:],
        "median_seconds": lib.median([x["seconds"] for x in runs if x["exit"] != 0]),
        "reported": runs[0]["line"] if runs else "",
    }

    # (c) the manual way: launch, then poll every 5 s (curl, kill -0, log tail).
    t = lib.make_target(host, run.newdir("never-manual"))
    lib.preinstall_standin(t)
    argv = ["/nonexistent/python3", *lib.server_argv(t)[1:]]
    runs = []
    for _ in range(reps):
        start = time.monotonic()
        launch = lib.ssh(host, lib.manual_launch_command(t, argv))
        text = launch.stdout.strip()
        if not text.isdigit():
            runs.append({"seconds": None, "state": f"no pid: {launch.stdout!r} {launch.stderr!r}"})
            continue
        t.remember(int(text))
        state, _, polls = lib.manual_poll_until(t, int(text), ("READY", "DEAD"))
        runs.append({"seconds": time.monotonic() - start, "state": state, "polls": polls})
    t.stop()
    out["manual"] = {
        "runs": runs,
        "median_seconds": lib.median([x["seconds"] for x in runs if x.get("state") == "DEAD"]),
    }
    return out


def run_section(run: lib.Run, reps: int) -> dict[str, Any]:
    host = run.sshd()
    crash_runs = []
    for k in range(reps):
        delay = 4.0 + (5.0 * k / (reps - 1) if reps > 1 else 0.0)
        lib.log(f"crash rep {k + 1}/{reps} (crash {delay:.1f} s after ready)")
        crash_runs.append(crash_once(run, host, round(delay, 2)))
    good = [r for r in crash_runs if r.get("ok")]

    def med(key: str) -> float | None:
        return lib.median([r[key] for r in good]) if good else None

    crash = {
        "runs": crash_runs,
        "ok_runs": len(good),
        "kimi_ops_median_seconds": med("kimi_ops_seconds"),
        "manual_median_seconds": med("manual_seconds"),
        "kimi_ops_label": good[0]["kimi_ops_label"] if good else None,
        "labels": [r["kimi_ops_label"] for r in good],
        "wrong_labels": sum(1 for r in good if not r["label_ok"]),
        "status_once_median_seconds": med("status_once_seconds"),
        "verify_once_median_seconds": med("verify_once_seconds"),
        "manual_once_median_seconds": med("manual_once_seconds"),
        "verify_once_line": good[0]["verify_once_line"] if good else None,
    }
    lib.log("never-started runs")
    return {"crash": crash, "never_started": never_started(run, host, reps), "reps": reps}
