"""Verify's decisions: from what each poll saw to waiting / ready / failed (pure).

Each poll reads only the log bytes written since the last one (from an offset), whether the
server's PID is alive, and, once the log says the server is up, the HTTP checks (health, model
list, one chat completion with max_tokens=2). Ready means the completion answered AND the
process listening on the port is the launched server's (its PID, below it, or in its session:
:func:`check_port`); another process on the port fails verify naming it (``port_taken``), and a
listener that cannot be told (another user's, /proc unreadable) is said so beside the ready.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import ipaddress
import json
from dataclasses import dataclass, field, replace
from typing import Any

from .defaults import CURRENT_LOG, LAUNCH_ID_FILE, PIDFILE
from .diagnose import Diagnosis, LogDiagnoser
from .facts.ports import (
    LISTEN_MARK,
    PortListeners,
    PortSocket,
    SocketOwner,
    listeners_command,
    parse_listeners,
)
from .hoststate import (
    STOP_MARKER,
    continue_advice,
    parse_stop_marker,
    stopped_by,
    stopped_outside,
)
from .printable import one_line
from .procs import parse_pidfile_process, pidfile_process_command
from .redact import cut
from .shell import quote as q

#: The most log bytes one poll reads.
MAX_POLL_BYTES = 4 * 1024 * 1024
#: Seconds a process may stay alive after the log shows a fatal error before it counts as crashed.
CRASH_EXIT_GRACE = 10.0


def poll_command(run_dir: str, offset: int, max_bytes: int = MAX_POLL_BYTES) -> str:
    """One line: the pidfile's PID and its command line, the current launch id and the stop
    marker, the log size, then the new log bytes in base64 (a read may end inside a UTF-8
    character: the bytes arrive as they are, and the caller's incremental decoder joins the
    character with the next poll's bytes)."""
    r = q(run_dir.rstrip("/") or "/")
    log = f"{r}/{CURRENT_LOG}"
    off = int(offset)
    return (
        f'pid=$(cat {r}/{PIDFILE} 2>/dev/null || true); echo "pid=$pid"; '
        f'echo "launch_id=$(cat {r}/{LAUNCH_ID_FILE} 2>/dev/null)"; '
        f'echo "stop=$(head -n 1 {r}/{STOP_MARKER} 2>/dev/null)"; '
        + pidfile_process_command(f"{r}/{PIDFILE}")
        + "; "
        f"if [ -e {log} ]; then s=$(stat -L -c %s {log}); else s=-1; fi; "
        f"n=$((s-{off})); if [ $n -gt {int(max_bytes)} ]; then n={int(max_bytes)}; fi; "
        "if [ $n -lt 0 ]; then n=0; fi; "
        'echo "size=$s"; echo "read=$n"; echo @@log; '
        f'if [ "$n" -gt 0 ]; then tail -c +{off + 1} {log} | head -c "$n" | base64 -w0; fi'
    )


def log_decoder() -> codecs.IncrementalDecoder:
    """The decoder for one log read in pieces (UTF-8; invalid bytes become U+FFFD)."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


@dataclass(frozen=True)
class PollFacts:
    """What one poll saw."""

    pid: int | None
    alive: bool  # the pidfile's PID is a live vLLM server (not a reused PID)
    log_size: int  # -1 when the log does not exist
    read: int  # bytes of log returned
    chunk: str
    launch_id: str = ""  # run_dir's current launch id ("" when none)
    stop: str = ""  # the stop marker's line ("" when none)
    #: The pidfile's server is stopped by a signal (process state T: SIGSTOP, SIGTSTP, a tracer).
    stopped: bool = False

    @property
    def log_exists(self) -> bool:
        return self.log_size >= 0


def parse_poll(
    text: str, decoder: codecs.IncrementalDecoder | None = None, run_dir: str = ""
) -> PollFacts:
    """What a :func:`poll_command` printed. Pass the same ``decoder`` (:func:`log_decoder`) for
    every poll of one log, so a character split between two polls is decoded whole.

    Alive means the pidfile's PID runs a server by its exact argv (an argument with a space in
    it stays whole), and is not a reused PID: not another run_dir's (its ``KIMI_OPS_RUN_DIR``
    when ``run_dir`` is given), not started after the pidfile was written
    (:meth:`kimi_ops.procs.PidfileProcess.server_alive`)."""
    head, sep, encoded = text.partition("@@log\n")
    if not sep:
        head, encoded = text, ""
    try:
        data = base64.b64decode(encoded.strip(), validate=False)
    except (binascii.Error, ValueError):
        data = b""
    chunk = (decoder or log_decoder()).decode(data)
    values: dict[str, str] = {}
    for line in head.splitlines():
        key, eq, value = line.partition("=")
        if eq and (key in ("pid", "args", "size", "read", "launch_id", "stop") or key[:3] == "pf_"):
            values[key] = value
    pid_text = values.get("pid", "").strip()
    proc = parse_pidfile_process(values)
    alive = proc.server_alive(run_dir)
    return PollFacts(
        pid=int(pid_text) if pid_text.isdigit() else None,
        alive=alive,
        log_size=int(values.get("size", "-1") or -1),
        read=int(values.get("read", "0") or 0),
        chunk=chunk,
        launch_id=values.get("launch_id", "").strip(),
        stop=values.get("stop", "").strip(),
        stopped=alive and proc.stopped,
    )


@dataclass(frozen=True)
class ProbeResult:
    """The HTTP checks, as the probe script on the host reports them."""

    health: int | None = None
    models: tuple[str, ...] = ()
    models_status: int | None = None
    chat_status: int | None = None
    answer: str = ""
    error: str = ""

    def ready_for(self, served_model_name: str) -> bool:
        return (
            self.health == 200
            and served_model_name in self.models
            and self.chat_status == 200
            and not self.error
        )

    def describe(self, served_model_name: str) -> str:
        parts = [f"health {self.health or 'no answer'}"]
        listed = "listed" if served_model_name in self.models else "not listed"
        parts.append(f"/v1/models {self.models_status or 'no answer'} ({listed})")
        parts.append(f"chat {self.chat_status or 'no answer'}")
        if self.error:
            parts.append(self.error)
        return ", ".join(parts)


def parse_probe(text: str) -> ProbeResult:
    """Parse the probe script's JSON (the last JSON line of its output)."""
    data: dict[str, Any] = {}
    for line in reversed(text.strip().splitlines()):
        try:
            data = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if not data:
        return ProbeResult(error=f"probe printed no result: {text.strip()[-200:]!r}")
    return ProbeResult(
        health=data.get("health"),
        models=tuple(data.get("models") or ()),
        models_status=data.get("models_status"),
        chat_status=data.get("chat_status"),
        answer=str(data.get("answer") or ""),
        error=str(data.get("error") or ""),
    )


@dataclass(frozen=True)
class Verdict:
    """What verify concluded after a poll. ``state`` is one of :data:`STATES`."""

    state: str
    message: str
    diagnosis: Diagnosis
    probe_due: bool = False
    #: What the port check found when it did not decide (the listener, or why it is unknown).
    note: str = ""

    @property
    def done(self) -> bool:
        return self.state != "waiting"

    @property
    def ok(self) -> bool:
        return self.state == "ready"


SILENT_DEATH_HINT = (
    "the server process is gone and its log shows no error: it was killed by a signal or by "
    "the kernel's OOM killer (check `dmesg` or `journalctl -k` on the host); the last log "
    "lines show how far it got"
)

#: Seconds a server may stay stopped by a signal (state T) before verify calls it stalled: a
#: debugger's brief stop or a Ctrl-Z put right at once is not a stall.
STOPPED_GRACE = 10.0


def stopped_hint(pid: int | None) -> str:
    """What to do about a server stopped by a signal."""
    return (
        f"{continue_advice(pid)} (whoever stopped it: a Ctrl-Z in its terminal, a "
        "debugger, `kill -STOP`); `fab deploy --restart` replaces it"
    )


STATES = (
    "waiting",
    "ready",
    "never_started",
    "crashed",
    "timed_out",
    "stalled",
    "stopped",  # kimi-ops ended this launch on purpose (stop marker)
    "replaced",  # another launch took this run's place (a second deploy)
    "port_taken",  # a process that is not this deployment's server listens on its port
)


@dataclass
class VerifyState:
    """Feeds each poll into the streaming diagnosis and decides.

    Times are seconds from the start of verify, supplied by the caller (no clock here).
    """

    served_model_name: str
    startup_timeout: float
    stall_timeout: float
    context: dict[str, Any] = field(default_factory=dict)
    offset: int = 0
    polls: int = 0
    last_growth: float = 0.0
    seen_alive: bool = False
    fatal_since: float | None = None
    #: When the server was first seen stopped by a signal (state T), in this stretch.
    stopped_since: float | None = None
    last_probe: ProbeResult | None = None
    #: The launch this run started (deploy): a different current launch id fails verify, so it
    #: never reports another run's server as its own. None: whatever launch is current.
    expected_launch_id: str | None = None
    diagnoser: LogDiagnoser = field(init=False)

    def __post_init__(self) -> None:
        self.diagnoser = LogDiagnoser(self.context)

    def feed_poll(self, facts: PollFacts, now: float) -> Verdict:
        self.polls += 1
        if facts.log_exists and facts.log_size < self.offset:
            # The log was replaced (a new launch): start over.
            self.offset = 0
            self.diagnoser = LogDiagnoser(self.context)
        if facts.read > 0:
            self.diagnoser.feed(facts.chunk)
            self.offset += facts.read
            self.last_growth = now
        if facts.alive:
            self.seen_alive = True
        return self._decide(facts, now)

    def feed_probe(self, probe: ProbeResult, now: float, port: PortCheck | None = None) -> Verdict:
        """The HTTP checks, and ``port``: whose socket answered them (:func:`check_port`).
        Ready needs the completion AND a listener that is not another process's; a port held
        by another process fails whatever answered. ``port`` None: not checked (said so)."""
        self.last_probe = probe
        diag = self.diagnoser.diagnosis()
        if port is not None and port.verdict == "foreign":
            return Verdict("port_taken", port.message, replace(diag, hint=port.hint))
        note = port.message if port is not None else "port: which process listens was not checked"
        if probe.ready_for(self.served_model_name):
            answer = cut(probe.answer.strip().replace("\n", " "), 120)
            return Verdict(
                "ready", f"ready: the chat completion answered {answer!r}", diag, note=note
            )
        if probe.health is None:  # nothing answered HTTP at all (e.g. connection refused)
            return Verdict("waiting", "not answering HTTP yet: " + probe.error, diag)
        return Verdict(
            "waiting", "up but not ready: " + probe.describe(self.served_model_name), diag
        )

    def _decide(self, facts: PollFacts, now: float) -> Verdict:
        diag = self.diagnoser.diagnosis()
        expected = self.expected_launch_id
        if expected and facts.launch_id and facts.launch_id != expected:
            return Verdict(
                "replaced",
                f"the server this run launched (launch {expected}) is no longer the current "
                f"one: launch {facts.launch_id} replaced it (another kimi-ops run?); "
                "not reporting that server as this run's",
                replace(diag, hint="run `fab status` to see which server runs now"),
            )
        by = stopped_by(parse_stop_marker(facts.stop), facts.launch_id)
        if by is not None and not facts.alive:
            return Verdict(
                "stopped",
                f"stopped: launch {facts.launch_id} was ended on purpose ({by}); no server runs",
                replace(diag, hint="`fab deploy` starts it again"),
            )
        if not facts.alive and facts.log_exists and diag.lifecycle == "stopped":
            return Verdict(
                "stopped",
                f"stopped: {stopped_outside(facts.launch_id, diag)}; no server runs",
                replace(diag, hint="`fab deploy` starts it again"),
            )
        if not facts.log_exists and not facts.alive:
            if facts.launch_id and facts.pid is not None:
                return Verdict(
                    "crashed",
                    f"no server runs: launch {facts.launch_id} (PID {facts.pid}) is not alive and "
                    f"its log {CURRENT_LOG} is missing (deleted?)",
                    replace(diag, hint=SILENT_DEATH_HINT),
                )
            return Verdict(
                "never_started",
                "never started: no log file and no server process",
                diag,
            )
        if not facts.log_exists and now < self.startup_timeout:
            # Alive, but someone deleted the log: ask over HTTP instead.
            return Verdict(
                "waiting",
                f"server PID {facts.pid} is alive but its log {CURRENT_LOG} is missing "
                "(deleted?): checking over HTTP",
                diag,
                probe_due=self.polls % 3 == 1,
            )
        if diag.failed:
            if not facts.alive:
                return Verdict("crashed", _crashed(diag), diag)
            if self.fatal_since is None:
                self.fatal_since = now
            if now - self.fatal_since >= CRASH_EXIT_GRACE:
                return Verdict("crashed", f"failed (process still alive): {diag.summary}", diag)
            return Verdict("waiting", f"fatal error in the log: {diag.summary}", diag)
        if not facts.alive:
            diag = replace(diag, hint=SILENT_DEATH_HINT) if not diag.failed else diag
            # No pidfile and a log that got nowhere: it never started. A log that reached a
            # stage ran a server: stop / kill-stale remove the pidfile once it is gone.
            if facts.pid is None and not self.seen_alive and diag.stage is None:
                what = "never started: the launch script wrote no pidfile"
                return Verdict("never_started", what, diag)
            if not self.seen_alive and diag.stage is None:
                return Verdict(
                    "never_started", "never started: the server process is not alive", diag
                )
            # a log that names no failure (it says "healthy: server up") is no reason: say so
            what = (
                diag.summary if diag.failed else f"its log names no error (it said {diag.summary})"
            )
            return Verdict("crashed", f"the server exited: {what}", diag)
        if not facts.stopped:
            self.stopped_since = None
        elif self.stopped_since is None:
            self.stopped_since = now
        if self.stopped_since is not None and now - self.stopped_since >= STOPPED_GRACE:
            return Verdict(
                "stalled",
                f"stalled: server PID {facts.pid} is stopped by a signal (process state T: "
                f"SIGSTOP, SIGTSTP or a debugger) for {now - self.stopped_since:.0f} s; it "
                "makes no progress until it is continued",
                replace(diag, hint=stopped_hint(facts.pid)),
            )
        if now >= self.startup_timeout:
            return Verdict(
                "timed_out",
                f"timed out after {self.startup_timeout:.0f} s at stage {diag.stage or 'none'}; "
                f"the log last grew {now - self.last_growth:.0f} s ago",
                diag,
            )
        if now - self.last_growth >= self.stall_timeout:
            return Verdict(
                "stalled",
                f"stalled: the log has not grown for {now - self.last_growth:.0f} s "
                f"(stage {diag.stage or 'none'})",
                diag,
            )
        probe_due = diag.ready or (self.polls % 5 == 0 and diag.stage is not None)
        return Verdict("waiting", _progress_line(diag), diag, probe_due=probe_due)


def _crashed(diag: Diagnosis) -> str:
    return diag.summary if diag.summary.startswith("crashed") else f"crashed: {diag.summary}"


def _progress_line(diag: Diagnosis) -> str:
    stage = diag.stage or "starting"
    return f"{stage} {diag.progress}" if diag.progress else stage


def probe_address(bind_host: str) -> str:
    """Where the probe on the host reaches a server bound to ``bind_host``: loopback for a
    wildcard bind, otherwise that very address."""
    return "127.0.0.1" if bind_host in ("", "0.0.0.0", "::", "[::]") else bind_host.strip("[]")


def probe_command(
    python: str, probe_path: str, port: int, model: str, env_file: str, bind_host: str = ""
) -> str:
    """Run the HTTP probe on the host (so no firewall between us and the server matters)."""
    argv = [python, probe_path, "--port", str(port), "--model", model, "--env-file", env_file]
    argv += ["--address", probe_address(bind_host)]
    return " ".join(q(x) for x in argv)


def probe_and_listeners_command(
    python: str, probe_path: str, port: int, model: str, env_file: str, bind_host: str = ""
) -> str:
    """The HTTP probe, then (same round trip, right after its answer) who listens on the port
    (:func:`kimi_ops.facts.ports.listeners_command`). Read with :func:`read_probe`."""
    probe = probe_command(python, probe_path, port, model, env_file, bind_host)
    return f"{probe}; {listeners_command(port)}"


def parse_probe_report(
    stdout: str, stderr: str, port: int
) -> tuple[ProbeResult, PortListeners | None]:
    """The probe's result and the listener facts from :func:`probe_and_listeners_command`'s
    output (the listener facts None when its output has none)."""
    head, sep, _ = stdout.partition(LISTEN_MARK + "\n")
    listeners = parse_listeners(stdout, port) if sep else None
    return parse_probe(head + stderr), listeners


@dataclass(frozen=True)
class PortCheck:
    """Whose socket answered on the port. ``verdict``: ``ours`` (the server's process tree),
    ``foreign`` (another process: never ready) or ``unknown`` (could not be told: said so)."""

    verdict: str
    message: str
    hint: str = ""
    foreign: tuple[SocketOwner, ...] = ()


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        addr = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _reaching(listeners: PortListeners, target: str) -> list[PortSocket]:
    """The sockets a connection to ``target`` may reach: those bound to it or to its family's
    wildcard; only when there is none, an IPv6 ``::`` socket for an IPv4 target (dual-stack: a
    ``::`` socket beside a matching IPv4 one is IPv6-only, or they could not both be bound).
    Unparsable addresses always count (better a check too many than a listener missed)."""
    want = _ip(target)
    exact: list[PortSocket] = []
    dual: list[PortSocket] = []
    unsure: list[PortSocket] = []
    for s in listeners.sockets:
        addr = _ip(s.address)
        if addr is None or want is None:
            unsure.append(s)
        elif addr == want or (addr.is_unspecified and addr.version == want.version):
            exact.append(s)
        elif addr.is_unspecified:
            dual.append(s)
    return (exact or dual) + unsure


def _owner_line(o: SocketOwner) -> str:
    return f"PID {o.pid} ({cut(one_line(o.args), 160) or 'command unknown'})"


def check_port(
    listeners: PortListeners | None, server_pid: int | None, port: int, bind_host: str = ""
) -> PortCheck:
    """Is the process listening where the probe connects (``bind_host``'s :func:`probe_address`)
    this deployment's server: ``server_pid`` (the pidfile's PID, a session leader: the launch
    runs it under setsid), a process below it, or one in its session?"""
    where = f"{probe_address(bind_host)}:{port}"
    if listeners is None:
        return PortCheck("unknown", f"port {port}: which process listens was not checked")
    if not listeners.readable:
        return PortCheck(
            "unknown",
            f"port {port}: /proc/net/tcp could not be read, so which process listens on it is "
            "unknown (HTTP alone was checked)",
        )
    sockets = _reaching(listeners, probe_address(bind_host))
    if not sockets:
        return PortCheck(
            "unknown",
            f"port {port}: no socket listening on {where} was found in /proc/net/tcp (another "
            "network namespace?), so which process answered is unknown (HTTP alone was checked)",
        )

    def ours(o: SocketOwner) -> bool:
        return server_pid is not None and (server_pid in o.chain or o.sid == server_pid)

    foreign: list[SocketOwner] = []
    hidden: list[PortSocket] = []
    holders: list[SocketOwner] = []
    for s in sockets:
        owners = listeners.owners_of(s.inode)
        if not owners:
            hidden.append(s)
        elif any(ours(o) for o in owners):
            holders += [o for o in owners if ours(o)]
        else:
            foreign += [o for o in owners if o.pid not in {f.pid for f in foreign}]
    server = f"PID {server_pid}" if server_pid is not None else "none running"
    if foreign:
        names = "; ".join(_owner_line(o) for o in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        return PortCheck(
            "foreign",
            f"port {port} is held by {names}{more}, not by this deployment's server ({server}): "
            "whatever answers there is not this server",
            hint=(
                f"something else is listening on port {port}: stop PID {foreign[0].pid} or set "
                "kimi.port to a free port, then `fab deploy` (a server that cannot bind its "
                "port dies with 'address already in use')"
            ),
            foreign=tuple(foreign),
        )
    if hidden:
        uids = ", ".join(sorted({str(s.uid) for s in hidden if s.uid is not None})) or "?"
        why = "find is missing" if listeners.find_missing else "another user's process?"
        return PortCheck(
            "unknown",
            f"port {port}: the socket listening on {where} (uid {uids}) shows no process this "
            f"user can read ({why}), so whether it is this server is unknown "
            "(HTTP alone was checked)",
        )
    pids = ", ".join(str(p) for p in sorted({o.pid for o in holders}))
    return PortCheck("ours", f"port {port}: held by PID {pids}, this deployment's server's tree")


def read_probe(
    stdout: str, stderr: str, server_pid: int | None, port: int, bind_host: str = ""
) -> tuple[ProbeResult, PortCheck]:
    """What :func:`probe_and_listeners_command` printed: the HTTP answers, and whose socket
    gave them (:func:`check_port` against ``server_pid``, the pidfile's server)."""
    answer, listeners = parse_probe_report(stdout, stderr, port)
    return answer, check_port(listeners, server_pid, port, bind_host)
