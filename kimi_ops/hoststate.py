"""What state a deployment is in now, from facts (pure): serving, starting, stopped, crashed...

``fab status`` exits with the state's code (:data:`STATE_CODES`), so a script can tell a dead
server from a live one without parsing text. kimi-ops knows when it ends a server itself:
before ``stop``, ``kill-stale`` and deploy's kill-stale signal a live server, they write a stop
marker in run_dir naming its launch id, who and when (:func:`stop_marker_command`). A server
that is gone without such a marker for its launch crashed (or was killed by someone else); one
with it was stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .defaults import LAUNCH_ID_FILE, PIDFILE
from .diagnose import Diagnosis
from .shell import quote as q

#: run_dir's stop marker: ``launch_id=ID by=... step=... at=...`` of the last server kimi-ops
#: ended on purpose.
STOP_MARKER = "stopped.launch"

#: ``fab status`` exit codes, one per state (1 stays "the tool itself failed", e.g. no SSH).
STATE_CODES: dict[str, int] = {
    "serving": 0,  # the server answers a chat completion
    "starting": 3,  # the server process is alive and still loading
    "stopped": 4,  # ended on purpose (kimi-ops, or a graceful signal stop), or never launched
    "crashed": 5,  # gone (or failing) without kimi-ops ending it
    "orphans": 6,  # the server is gone but processes of this deployment are still alive
    "unresponsive": 7,  # alive, its log says it is up, but HTTP does not answer
    "port_taken": 8,  # alive, but another process listens on its port (whatever answers there)
    "stalled": 9,  # alive and not up, but stopped by a signal or its log silent too long
}

#: What each state means, for ``fab status --help`` and the README.
STATE_MEANINGS: dict[str, str] = {
    "serving": "the server answers a chat completion",
    "starting": "the server process is alive and still loading",
    "stopped": "kimi-ops ended it (stop, kill-stale, deploy), its log shows a graceful stop "
    "after serving (an operator's SIGTERM or Ctrl-C), or nothing was ever launched",
    "crashed": "the server is gone (or its log shows a fatal error) and kimi-ops did not end it",
    "orphans": "the server is gone but processes of this deployment are still alive",
    "unresponsive": "the server process is alive and its log says it is up, but HTTP fails",
    "port_taken": "the server process is alive, but a process that is not this deployment's "
    "server listens on its port (named: its PID and command); what answers there is not it",
    "stalled": "the server process is alive but not up, and makes no progress: it is stopped by "
    "a signal (process state T), or its log has not grown for the profile's stall_timeout",
}


def continue_advice(pid: int | None) -> str:
    """What continues a server stopped by a signal (state T); said the same way everywhere."""
    return f"`kill -CONT {pid}` continues it"


def state_codes_help() -> str:
    """One line: ``serving=0, starting=3, ...`` (for --help)."""
    return ", ".join(f"{s}={c}" for s, c in STATE_CODES.items())


@dataclass(frozen=True)
class StopMarker:
    """The last stop kimi-ops made: which launch it ended, and who/when (``detail``)."""

    launch_id: str
    detail: str


def stop_marker_command(run_dir: str, detail: str, server_pid: int | None = None) -> str:
    """Record that the current launch is being ended on purpose, BEFORE it is signalled (so
    nobody watching sees it die unexplained), and only while its server lives (a server that
    already crashed stays crashed). Atomic: a temp file, then a rename. ``server_pid``: the
    current launch's server when the pidfile names none (found by its launch id).

    A record that cannot be written (a full or read-only file system) exits 1 with the
    reason on stderr, its temp file removed."""
    r = q(run_dir.rstrip("/") or "/")
    fallback = f'[ -n "$pid" ] || pid={int(server_pid)}; ' if server_pid is not None else ""
    return (
        f"id=$(cat {r}/{LAUNCH_ID_FILE} 2>/dev/null || true); "
        f"pid=$(cat {r}/{PIDFILE} 2>/dev/null || true); "
        + fallback
        + 'if [ -n "$id" ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then '
        f"{{ printf 'launch_id=%s %s\\n' \"$id\" {q(detail)} > {r}/{STOP_MARKER}.tmp && "
        f"mv -fT {r}/{STOP_MARKER}.tmp {r}/{STOP_MARKER}; }} || "
        f"{{ rm -f {r}/{STOP_MARKER}.tmp 2>/dev/null; exit 1; }}; fi"
    )


def parse_stop_marker(text: str) -> StopMarker | None:
    line = text.strip().splitlines()[0] if text.strip() else ""
    if not line.startswith("launch_id="):
        return None
    launch_id, _, detail = line[len("launch_id=") :].partition(" ")
    return StopMarker(launch_id, detail.strip()) if launch_id else None


def stopped_by(marker: StopMarker | None, launch_id: str | None) -> str | None:
    """``detail`` when ``marker`` says kimi-ops ended exactly ``launch_id``, else None."""
    if marker is None or not launch_id or marker.launch_id != launch_id:
        return None
    return marker.detail or "kimi-ops"


def stopped_outside(launch_id: str | None, d: Diagnosis) -> str:
    """What status and verify say of a launch whose log shows a graceful signal stop after it
    served (lifecycle ``stopped``) that kimi-ops did not make."""
    return (
        f"launch {launch_id} served, then was stopped outside kimi-ops "
        f"(its log shows a graceful shutdown: {d.summary})"
    )


@dataclass(frozen=True)
class HostState:
    """The deployment's state now, and one line that says it."""

    state: str
    message: str

    @property
    def code(self) -> int:
        return STATE_CODES[self.state]

    @property
    def serving(self) -> bool:
        return self.state == "serving"


@dataclass(frozen=True)
class StateFacts:
    """What status saw on the host (one gather, plus the HTTP probe when the server lives)."""

    launch_id: str | None
    pid: int | None  # the pidfile's PID
    alive: bool  # that PID is a live server (not a reused PID)
    log_exists: bool
    log_path: str
    diagnosis: Diagnosis
    stop: StopMarker | None = None
    orphans: Sequence[int] = ()  # this deployment's processes alive without its server
    owned: Sequence[int] = ()  # every process of this deployment now (procs.owned_processes)
    answered: bool | None = None  # the probe's chat completion (None: not probed)
    http: str = ""  # the probe's one-line description
    #: Another process listens on the port: who (its PID and command); "" when none was seen.
    port_taken: str = ""
    #: The server is stopped by a signal (process state T).
    stopped: bool = False
    #: Seconds since the log last grew (None: unknown), and the limit for a loading server.
    log_silent_for: float | None = None
    stall_timeout: float | None = None
    #: The pidfile named no PID and the server was found by its launch id: what was done
    #: (:meth:`kimi_ops.liveserver.Adopted.note`); "" when the pidfile named it.
    pidfile_note: str = ""


def classify(f: StateFacts) -> HostState:
    """The state, checked in order: the live server first, then why there is none."""
    d = f.diagnosis
    if f.alive:
        if f.port_taken:  # whatever answered HTTP, it was not this server
            return HostState(
                "port_taken",
                f"server PID {f.pid} (launch {f.launch_id}) is alive, but {f.port_taken}",
            )
        if f.answered:
            return HostState("serving", f"server PID {f.pid} (launch {f.launch_id}) answers")
        if d.failed:
            return HostState(
                "crashed", f"server PID {f.pid} is alive but its log shows: {d.summary}"
            )
        halted = (
            f"; it is stopped by a signal (process state T), so it runs nothing until it is "
            f"continued: {continue_advice(f.pid)}"
            if f.stopped
            else ""
        )
        if d.ready:
            return HostState(
                "unresponsive",
                f"server PID {f.pid}'s log says it is up, but HTTP does not answer: "
                f"{f.http}{halted}",
            )
        stage = d.stage or "starting"
        if f.stopped:
            return HostState("stalled", f"server PID {f.pid} is still loading ({stage}){halted}")
        silent = f.log_silent_for
        if f.log_exists and silent is not None and f.stall_timeout and silent >= f.stall_timeout:
            return HostState(
                "stalled",
                f"server PID {f.pid} is alive, still loading ({stage}), but its log has not "
                f"grown for {silent:.0f} s (stall_timeout: {f.stall_timeout:.0f} s)",
            )
        gone = "" if f.log_exists else f"; its log {f.log_path} is missing (deleted?)"
        return HostState("starting", f"server PID {f.pid} is alive, still loading ({stage}){gone}")
    if f.orphans:
        pids = ", ".join(str(p) for p in f.orphans)
        return HostState(
            "orphans",
            f"no server runs, but {len(f.orphans)} process(es) of this deployment are alive: "
            f"{pids} (`fab stop` ends them)",
        )
    if not f.launch_id:
        return HostState("stopped", "no server: nothing was ever launched here")
    by = stopped_by(f.stop, f.launch_id)
    if by is not None:
        return HostState("stopped", f"no server: launch {f.launch_id} was stopped ({by})")
    if f.log_exists and d.lifecycle == "stopped":
        # Not kimi-ops, but its log says it served and then shut down on a signal (an
        # operator's `kill PID`, Ctrl-C, systemd): a stop, not a crash.
        return HostState("stopped", f"no server: {stopped_outside(f.launch_id, d)}")
    if not f.log_exists:
        return HostState(
            "crashed",
            f"no server: launch {f.launch_id} is not running and its log {f.log_path} is "
            "missing (deleted?); kimi-ops did not stop it",
        )
    why = d.summary if d.failed else "its log shows no error (killed by a signal or OOM?)"
    return HostState(
        "crashed", f"no server: launch {f.launch_id} ended without kimi-ops stopping it: {why}"
    )


def now_message(f: StateFacts, port: int) -> str:
    """One line for a report's end (an interrupted or failed run): what runs now, from facts
    gathered without the HTTP probe. A live server whose launch kimi-ops has just signalled (the
    stop marker names it: a Ctrl-C in the middle of stop / kill-stale) is said to be stopping,
    not running."""
    if f.alive:
        by = stopped_by(f.stop, f.launch_id)
        if by is not None:
            return (
                f"now: server PID {f.pid} (launch {f.launch_id}) is still alive although "
                f"kimi-ops signalled it to stop ({by}): it may be shutting down; `fab status` "
                "says whether it has gone, `fab stop` ends it"
            )
        if f.stopped:
            return (
                f"now: server PID {f.pid} (launch {f.launch_id}) is alive but stopped by a "
                f"signal (process state T); {continue_advice(f.pid)}"
            )
        stage = f.diagnosis.stage or "starting"
        return (
            f"now: server PID {f.pid} (launch {f.launch_id}) is running "
            f"(log stage {stage}; `fab verify` checks it)"
        )
    state = classify(f)
    return f"now: {state.state}: {state.message}; nothing serves on port {port}"
