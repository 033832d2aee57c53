"""The deployment's state on a host: status, the stop marker, and "what runs now" lines.

:func:`status` gathers the facts in one round trip (plus the HTTP probe when the server lives)
and :func:`kimi_ops.hoststate.classify` names the state; ``fab status`` exits with its code.
:func:`mark_stopping` is called before kimi-ops ends a server on purpose, so status and verify can
tell a stopped server from a crashed one. :func:`now_line` says what runs on the host now, for
reports of runs that ended half way (a failed launch, Ctrl-C).
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from dataclasses import replace
from datetime import datetime, timezone

from kimi_ops import facts as facts_mod
from kimi_ops import hoststate, liveserver, procs
from kimi_ops import script as launch_script
from kimi_ops import verify as vfy
from kimi_ops.cpu import STATUS_MEMORY_COMMAND, memory_status, memory_status_line
from kimi_ops.defaults import CURRENT_LOG, LAUNCH_ID_FILE, PIDFILE
from kimi_ops.diagnose import diagnose
from kimi_ops.hoststate import HostState, StateFacts
from kimi_ops.profile import Profile
from kimi_ops.result import StepResult, failed, ok
from kimi_ops.shell import quote as q

from .host import Host
from .steps import _probe_command
from .steps.common import read_listing
from .steps.processes import adopt_server, pidfile_process, record_shm, restore_pidfile

#: Bytes of the current log status reads for the diagnosis.
LOG_TAIL_BYTES = 262144


def _run_dir(p: Profile) -> str:
    return p.run_dir.rstrip("/") or "/"


def mark_stopping(h: Host, p: Profile, *, step: str) -> str:
    """Before ending the server: mark its launch as ended on purpose by this run (who, which
    process, which step, when). Written only while the pidfile's server lives: a reused PID
    (another process under it now) does not turn a crash into a stop.

    Returns "" when the record was written (or none was needed), else one line saying it
    could not be, and why: the stop goes on, and the caller reports that line."""
    if h.dry:
        return ""
    server: int | None = None
    found = pidfile_process(h, p, step)
    if found.pid is None:  # no pidfile: the current launch's server, found by its launch id
        adopted = adopt_server(h, p, step)
        if adopted is None:
            return ""
        server = adopted.proc.pid
    elif not found.server_alive(_run_dir(p)):
        return ""
    at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    detail = f"by={who} pid={os.getpid()} step={step} at={at}"
    out = h.run(hoststate.stop_marker_command(_run_dir(p), detail, server), step=step, check=False)
    if out.ok:
        return ""
    said = (out.stderr or out.stdout).strip().splitlines()
    # "bash: line 1: printf: write error: No space left on device": the reason comes last
    why = said[-1].rsplit(": ", 1)[-1].strip() if said else f"exit status {out.exited}"
    return (
        f"could not record the stop in {_run_dir(p)}/{hoststate.STOP_MARKER}: {why}; "
        "status will not know that kimi-ops ended this launch (it reads as crashed, or as "
        "stopped outside kimi-ops)"
    )


def _gather_command(r: str, nvidia_smi: str) -> str:
    log = q(f"{r}/{CURRENT_LOG}")
    return (
        f'pid=$(cat {q(r + "/" + PIDFILE)} 2>/dev/null || true); echo "pid=$pid"; '
        f'echo "launch_id=$(cat {q(r + "/" + LAUNCH_ID_FILE)} 2>/dev/null)"; '
        f'echo "stop=$(head -n 1 {q(r + "/" + hoststate.STOP_MARKER)} 2>/dev/null)"; '
        'if [ -n "$pid" ]; then echo "etime=$(ps -o etime= -p "$pid" 2>/dev/null | tr -d " ")"; '
        "fi; " + procs.pidfile_process_command(q(r + "/" + PIDFILE)) + "; "
        f"{STATUS_MEMORY_COMMAND}; "
        f'echo "gpu=$({nvidia_smi} '
        "--query-gpu=memory.used,memory.total --format=csv,noheader,nounits 2>/dev/null "
        "| tr '\\n' ';')\"; "
        f'if [ -e {log} ]; then echo "log=1"; '
        f'echo "log_age=$(( $(date +%s) - $(stat -L -c %Y {log} 2>/dev/null || date +%s) ))"; '
        'else echo "log=0"; fi; '
        f"echo @@ps; {procs.LISTING_COMMAND}; "
        f"echo @@log; tail -c {LOG_TAIL_BYTES} {log} 2>/dev/null; true"
    )


def gather(h: Host, p: Profile, *, step: str) -> tuple[StateFacts, dict[str, str]]:
    """The state facts without the HTTP probe (one round trip), and the raw key=value info."""
    r = _run_dir(p)
    out = h.run(
        _gather_command(r, facts_mod.nvidia_smi_command(p)), step=step, mutating=False, timeout=60
    )
    head, _, rest = out.stdout.partition("@@ps\n")
    ps_text, _, log = rest.partition("@@log\n")
    info = launch_script.parse_key_values(head)
    # The pidfile's server by its exact argv, and only if the PID was not reused since.
    pidfile = procs.parse_pidfile_process(info)
    launch_id = info.get("launch_id", "").strip() or None
    listing = read_listing(ps_text, step=step, command=out.command)
    note = ""
    if pidfile.pid is None and launch_id:
        # No PID in the pidfile (moved, deleted, unreadable): the current launch's server is
        # still known by its launch id; put the pidfile back when that is safe.
        server = liveserver.current_server(listing, r, launch_id)
        if server is not None:
            adopted = restore_pidfile(h, p, server, launch_id, step)
            pidfile = liveserver.as_pidfile_process(server)
            info["etime"] = adopted.etime or "?"
            note = adopted.note(r)
    alive = pidfile.server_alive(r)
    pid = pidfile.pid
    owned = procs.owned_processes(listing, r, pidfile.owner_pid(r), launch_id, port=p.port)
    facts = StateFacts(
        launch_id=launch_id,
        pid=pid,
        alive=alive,
        log_exists=info.get("log") == "1",
        log_path=f"{r}/{CURRENT_LOG}",
        diagnosis=diagnose(log, {"port": p.port}),
        stop=hoststate.parse_stop_marker(info.get("stop", "")),
        # this deployment's processes alive although its server is not; with the server
        # alive, those whose own server (their session leader) is gone (an older launch's)
        orphans=tuple(sorted(owned.orphans if alive else owned.pids)),
        owned=tuple(owned.pids),
        stopped=alive and pidfile.stopped,
        log_silent_for=_seconds(info.get("log_age")),
        stall_timeout=p.stall_timeout,
        pidfile_note=note,
    )
    return facts, info


def _seconds(text: str | None) -> float | None:
    """A ``key=N`` value in whole seconds (None when missing or not a number; a clock that
    stepped back gives a negative age, read as 0)."""
    value = (text or "").strip()
    if not re.fullmatch(r"-?[0-9]+", value):
        return None
    return max(0.0, float(int(value)))


def now_line(h: Host, p: Profile, *, step: str) -> str:
    """One line: what runs on the host now (no HTTP probe, so it is quick)."""
    try:
        facts, _ = gather(h, p, step=step)
    except Exception as exc:  # the report of a failed run must not fail itself
        return f"now: unknown (could not read the host's state: {exc})"
    return hoststate.now_message(facts, p.port)


def status(h: Host, p: Profile, *, step: str = "status") -> tuple[StepResult, HostState]:
    """Process, PID, uptime, stage, health, GPU memory, and the state (with its exit code)."""
    facts, info = gather(h, p, step=step)
    # The shm files this deployment's processes use now are its own: recorded for clean-shm.
    record_shm(h, p, step, pids=facts.owned)
    diag = facts.diagnosis
    lines = [f"launch: {facts.launch_id or 'none'}"]
    lines.append(
        f"stage: {diag.stage or 'none'}" + (f" ({diag.progress})" if diag.progress else "")
    )
    if facts.log_exists:
        lines.append(f"log: {diag.label}" + (f": {diag.summary}" if diag.failed else ""))
    else:
        lines.append(f"log: {facts.log_path} is missing")
    memory = memory_status(info)
    if info.get("gpu"):
        lines.append("GPU memory used/total MiB: " + info["gpu"].rstrip(";"))
    elif line := memory_status_line(memory):
        lines.append(line)  # a CPU host (no nvidia-smi): the server's RSS and host memory
    if facts.pidfile_note:
        lines.append(facts.pidfile_note)
    if facts.alive and facts.orphans:
        pids = ", ".join(str(x) for x in facts.orphans)
        lines.append(f"orphans of an earlier launch: {pids} (`fab kill-stale` ends them)")
    data: dict[str, object] = {
        "pid": facts.pid,
        "alive": facts.alive,
        "uptime": info.get("etime") if facts.alive else None,
        "launch_id": facts.launch_id,
        "orphans": list(facts.orphans),
        "diagnosis": diag.to_dict() if facts.log_exists else None,  # no log: no label
        "memory": memory,
        "log_silent_s": facts.log_silent_for,  # seconds since the log last grew (None: unknown)
    }
    port_hint = ""
    if facts.alive:
        probe = h.run(_probe_command(p), step=step, check=False, mutating=False, timeout=60)
        result, port = vfy.read_probe(probe.stdout, probe.stderr, facts.pid, p.port, p.host)
        data["health"] = result.health
        data["port"] = {"check": port.verdict, "message": port.message}
        http = result.describe(p.served_model_name)
        lines.append("http: " + http)
        lines.append(port.message)
        port_hint = port.hint
        facts = replace(
            facts,
            answered=result.ready_for(p.served_model_name),
            http=http,
            port_taken=port.message if port.verdict == "foreign" else "",
        )
        lines.insert(0, f"uptime: {info.get('etime', '?')}")
    state = hoststate.classify(facts)
    data["state"] = state.state
    data["code"] = state.code
    message = f"{state.state}: {state.message}"
    res = ok if state.serving else failed
    if state.state == "port_taken":
        hint = port_hint
    elif facts.stopped and not state.serving:
        hint = vfy.stopped_hint(facts.pid)
    else:
        hint = "" if state.serving else diag.hint if diag.failed else _STATE_HINTS[state.state]
    return res(step, message, lines=tuple(lines), data=data, hint=hint), state


_STATE_HINTS = {
    "starting": "`fab verify` waits until it answers",
    "stopped": "`fab deploy` starts it",
    "crashed": "`fab diagnose` names the cause from the log; `fab deploy` starts it again",
    "orphans": "`fab stop` ends them",
    "unresponsive": "`fab logs` shows what it does; `fab deploy --restart` replaces it",
    "stalled": "`fab logs` shows where it stopped (a download or a compile that hangs, a "
    "deadlock); `fab deploy --restart` replaces it",
}
