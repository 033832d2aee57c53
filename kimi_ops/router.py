"""Replicas behind one endpoint: the HAProxy router's profile, config and runtime state (pure).

kimi-ops puts several independent vLLM servers (the fleet's hosts) behind one HAProxy
instance. This module turns the ``kimi.router`` profile section and the replica list into
HAProxy's configuration text, builds the commands that talk to HAProxy's runtime API (its admin
socket), and parses what ``show stat`` answers into replica states. It does no I/O: the tasks in
``tasks/router.py`` run the commands.

Why HAProxy: one Debian package with no runtime dependencies, it runs on any host without
Kubernetes, it health-checks every replica actively (``option httpchk GET /health``), retries a
failed request on another replica (``retries``, ``option redispatch``, ``retry-on``), and its
runtime API drains and re-enables one server without a reload (``set server B/S state drain``).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .defaults import ROUTER_DEFAULTS
from .errors import ProfileError
from .procs import parse_pidfile_process, read_pidfile_command
from .rundir import absolute_run_dir
from .sections import merged_section
from .shell import quote as q
from .verify import probe_address

BALANCES = ("leastconn", "roundrobin", "random", "first")
BACKEND = "kimi_replicas"
FRONTEND = "kimi_endpoint"
CONFIG_FILE = "haproxy.cfg"
NEXT_CONFIG = "haproxy.cfg.next"
PIDFILE = "router.pid"
SOCKET = "admin.sock"
LOG_FILE = "router.log"
#: What a replica's ``status`` column says, reduced to four states.
UP, DOWN, DRAIN, MAINT = "UP", "DOWN", "DRAIN", "MAINT"

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]")
_PATH_OK = re.compile(r"^/[A-Za-z0-9._~/?=&%-]*$")


@dataclass(frozen=True)
class RouterSettings:
    """``kimi.router``, validated."""

    host: str = ROUTER_DEFAULTS["host"]
    bind: str = ROUTER_DEFAULTS["bind"]
    port: int | None = None
    balance: str = ROUTER_DEFAULTS["balance"]
    health_path: str = ROUTER_DEFAULTS["health_path"]
    check_interval: float = ROUTER_DEFAULTS["check_interval"]
    fall: int = ROUTER_DEFAULTS["fall"]
    rise: int = ROUTER_DEFAULTS["rise"]
    run_dir: str = ROUTER_DEFAULTS["run_dir"]
    haproxy: str = ROUTER_DEFAULTS["haproxy"]
    python: str = ROUTER_DEFAULTS["python"]
    request_timeout: float = ROUTER_DEFAULTS["request_timeout"]
    drain_timeout: float = ROUTER_DEFAULTS["drain_timeout"]
    ready_timeout: float = ROUTER_DEFAULTS["ready_timeout"]
    addresses: Mapping[str, str] = field(default_factory=dict)

    @property
    def configured(self) -> bool:
        return self.port is not None

    @property
    def is_local(self) -> bool:
        return self.host == "local"


def _positive(key: str, value: Any, *, integer: bool = False) -> Any:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ProfileError(f"router.{key}", f"must be {kind}, got {value!r}")
    return value


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or any(c in value for c in "\x00\n\r"):
        raise ProfileError(f"router.{key}", f"must be a non-empty one-line string, got {value!r}")
    return value


def _address(key: str, value: Any) -> tuple[str, int | None]:
    text = _text(key, value)
    host, sep, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if sep and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ProfileError(key, f"must be address[:port] with a port 1-65535, got {value!r}")
    if not host or any(c.isspace() or c in "#'\"" for c in host):
        raise ProfileError(key, f"is not an address: {value!r}")
    return host, int(port) if sep else None


def parse_router(value: Any) -> RouterSettings:
    """Validate ``kimi.router`` (merged over :data:`ROUTER_DEFAULTS`); errors name the key."""
    data = merged_section("router", value, ROUTER_DEFAULTS)
    port = data["port"]
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
    ):
        raise ProfileError("router.port", f"must be an integer from 1 to 65535, got {port!r}")
    if data["balance"] not in BALANCES:
        raise ProfileError(
            "router.balance", f"must be one of {', '.join(BALANCES)}, got {data['balance']!r}"
        )
    health = _text("health_path", data["health_path"])
    if not _PATH_OK.match(health):
        raise ProfileError("router.health_path", f"must be a URL path like /health, got {health!r}")
    addresses = data["addresses"]
    if not isinstance(addresses, Mapping):
        raise ProfileError(
            "router.addresses", f"must map host names to address[:port]: {addresses!r}"
        )
    for name, addr in addresses.items():
        _address(f"router.addresses.{name}", addr)
    _address("router.bind", data["bind"])
    return RouterSettings(
        host=_text("host", data["host"]),
        bind=data["bind"],
        port=port,
        balance=data["balance"],
        health_path=health,
        check_interval=float(_positive("check_interval", data["check_interval"])),
        fall=_positive("fall", data["fall"], integer=True),
        rise=_positive("rise", data["rise"], integer=True),
        run_dir=absolute_run_dir("router.run_dir", _text("run_dir", data["run_dir"])),
        haproxy=_text("haproxy", data["haproxy"]),
        python=_text("python", data["python"]),
        request_timeout=float(_positive("request_timeout", data["request_timeout"])),
        drain_timeout=float(_positive("drain_timeout", data["drain_timeout"])),
        ready_timeout=float(_positive("ready_timeout", data["ready_timeout"])),
        addresses={str(k): str(v) for k, v in addresses.items()},
    )


# --- replicas ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replica:
    """One server behind the router: its HAProxy name and the address the router reaches."""

    host: str  # the fleet host name (as in -H / kimi.hosts, without user and SSH port)
    name: str  # HAProxy server name
    address: str
    port: int


def server_name(host: str) -> str:
    """A fleet host name as an HAProxy server name (letters, digits, ``_.-``)."""
    return _NAME_BAD.sub("_", host) or "replica"


def replica_for(settings: RouterSettings, host: str, server_host: str, server_port: int) -> Replica:
    """Where the router reaches ``host``'s server: ``router.addresses[host]`` if given, else the
    server's bind address when it is a specific one, else the host name itself."""
    override = settings.addresses.get(host)
    if override is not None:
        address, port = _address(f"router.addresses.{host}", override)
        return Replica(host, server_name(host), address, port or server_port)
    wildcard = server_host in ("0.0.0.0", "::", "[::]", "")
    return Replica(host, server_name(host), host if wildcard else server_host, server_port)


def unique_names(replicas: Sequence[Replica]) -> list[Replica]:
    """Make server names unique (two fleet entries may sanitise to the same name)."""
    seen: dict[str, int] = {}
    out = []
    for r in replicas:
        n = seen.get(r.name, 0)
        seen[r.name] = n + 1
        out.append(r if n == 0 else Replica(r.host, f"{r.name}-{n + 1}", r.address, r.port))
    return out


# --- configuration ----------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{max(1, round(value * 1000))}ms"


def render_config(settings: RouterSettings, replicas: Sequence[Replica], run_dir: str) -> str:
    """HAProxy's configuration for the endpoint in front of ``replicas``.

    Active checks (``option httpchk GET <health_path>``, every ``check_interval``, ``fall`` /
    ``rise``); a request whose connection fails, that gets an empty response, a response
    timeout or a 503 is retried (``retries 3``) on another replica (``option redispatch 1``), so
    a replica that dies costs no request. The admin socket (mode 0600 in run_dir) serves the
    runtime API and hands the listening sockets to the next process on a reload (``-x``).
    """
    if settings.port is None:
        raise ValueError("kimi.router.port is not set")
    if not replicas:
        raise ValueError("no replicas")
    r = run_dir.rstrip("/") or "/"
    inter = _seconds(settings.check_interval)
    lines = [
        "# kimi-ops router (HAProxy): rendered by `fab router-deploy`; edits are overwritten",
        "global",
        f"    stats socket {r}/{SOCKET} mode 600 level admin expose-fd listeners",
        "    stats timeout 30s",
        "",
        "defaults",
        "    mode http",
        "    option log-health-checks",
        "    timeout connect 2s",
        "    timeout client " + _seconds(settings.request_timeout),
        "    timeout server " + _seconds(settings.request_timeout),
        "    timeout queue 30s",
        "    timeout check " + inter,
        "    retries 3",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response response-timeout 503",
        "    option http-buffer-request",
        "",
        f"frontend {FRONTEND}",
        f"    bind {settings.bind}:{settings.port}",
        f"    default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        f"    balance {settings.balance}",
        f"    option httpchk GET {settings.health_path}",
        "    http-check expect status 200",
        f"    default-server check inter {inter} fall {settings.fall} rise {settings.rise}",
    ]
    for rep in unique_names(replicas):
        lines.append(f"    server {rep.name} {rep.address}:{rep.port}")
    return "\n".join(lines) + "\n"


# --- commands ---------------------------------------------------------------------------------

_SOCKET_CLIENT = (
    "import socket,sys;s=socket.socket(socket.AF_UNIX);s.settimeout(10);s.connect(sys.argv[1]);"
    's.sendall(sys.argv[2].encode()+b"\\n");'
    'sys.stdout.write(b"".join(iter(lambda:s.recv(65536),b"")).decode())'
)


def admin_command(settings: RouterSettings, run_dir: str, command: str) -> str:
    """Send one runtime-API command (``show stat``, ``set server ...``) to the admin socket:
    with socat when the router host has it, else with a python3 stdlib one-liner."""
    sock = q(f"{run_dir.rstrip('/')}/{SOCKET}")
    cmd = q(command)
    return (
        "if command -v socat >/dev/null 2>&1; then "
        f"printf '%s\\n' {cmd} | socat -t 5 stdio UNIX-CONNECT:{sock}; "
        f"else {q(settings.python)} -c {q(_SOCKET_CLIENT)} {sock} {cmd}; fi"
    )


def set_state_command(name: str, state: str) -> str:
    if state not in ("ready", "drain", "maint"):
        raise ValueError(f"bad state {state!r}")
    return f"set server {BACKEND}/{server_name(name)} state {state}"


def start_command(settings: RouterSettings, run_dir: str, old_pid: int | None = None) -> str:
    """Start HAProxy detached (its own session, stdin /dev/null, output to router.log) and
    record its PID. With ``old_pid``: a seamless reload: the new process takes the listening
    sockets over the admin socket (``-x``) and tells the old one to finish its sessions and
    exit (``-sf``)."""
    r = q(run_dir.rstrip("/"))
    argv = f"{q(settings.haproxy)} -f {CONFIG_FILE}"
    if old_pid is not None:
        argv += f" -x {SOCKET} -sf {int(old_pid)}"
    return (
        f"cd {r} && {{ setsid nohup {argv} >> {LOG_FILE} 2>&1 < /dev/null & "
        f'echo $! > {PIDFILE}.tmp && mv -f {PIDFILE}.tmp {PIDFILE} && echo "pid=$!"; }}'
    )


def port_command(settings: RouterSettings) -> str:
    """Exit 0 when something accepts a TCP connection on the router's port (bash's /dev/tcp,
    so the router host needs no extra tool); a wildcard bind is tried on loopback."""
    address = probe_address(settings.bind)
    return f"timeout 2 bash -c {q(f': < /dev/tcp/{address}/{int(settings.port or 0)}')}"


def state_command(run_dir: str) -> str:
    """The recorded PID and the facts of its process (:func:`kimi_ops.procs.
    read_pidfile_command`: state, exact argv, start time against the pidfile's mtime), and the
    config's checksum. Read with :func:`recorded_pid`."""
    r = q(run_dir.rstrip("/"))
    return (
        read_pidfile_command(f"{r}/{PIDFILE}")
        + f'; echo "sha=$(sha256sum < {r}/{CONFIG_FILE} 2>/dev/null | cut -d" " -f1)"'
    )


def recorded_pid(info: Mapping[str, str], settings: RouterSettings) -> int | None:
    """The pidfile's PID if it is still the HAProxy kimi-ops started: alive (not a zombie), its
    command line ours (:func:`is_our_haproxy`), and not started after the pidfile was written
    (a reused PID running another HAProxy with a config of the same name is not ours)."""
    proc = parse_pidfile_process(info)
    if proc.pid is None or not proc.alive or proc.started_after_pidfile:
        return None
    return proc.pid if is_our_haproxy(" ".join(proc.argv), settings) else None


def is_our_haproxy(args: str, settings: RouterSettings) -> bool:
    """Is this command line the HAProxy kimi-ops started (its binary, with our config file)?"""
    parts = args.split()
    if not parts:
        return False
    binary = parts[0].rsplit("/", 1)[-1]
    want = settings.haproxy.rsplit("/", 1)[-1]
    return binary in (want, "haproxy") and "-f" in parts and CONFIG_FILE in parts


# --- show stat --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerStat:
    """One replica as ``show stat`` reports it."""

    name: str
    address: str
    status: str  # HAProxy's own text: "UP", "DOWN", "DRAIN", "MAINT", "UP 1/2", "no check"...
    state: str  # UP / DOWN / DRAIN / MAINT
    sessions: int  # current sessions (scur)
    total: int  # sessions so far (stot)
    check_status: str  # e.g. L7OK, L4CON, L7STS
    check_code: str
    check_desc: str  # last_chk, e.g. "Connection refused"
    last_change: int  # seconds since the last state change
    check_failures: int

    def describe(self) -> str:
        check = " ".join(x for x in (self.check_status, self.check_code) if x)
        if self.check_desc:
            check += f" ({self.check_desc})"
        return (
            f"{self.name} {self.address}: {self.state}"
            + (f" [{self.status}]" if self.status != self.state else "")
            + f", {self.sessions} active session(s), check {check or 'none'}, "
            f"for {self.last_change}s"
        )


def _int(text: str) -> int:
    return int(text) if text.strip().isdigit() else 0


def classify(status: str) -> str:
    """HAProxy's status text as UP, DOWN, DRAIN or MAINT ("UP 1/2" is still UP: it is serving
    while it fails its first checks; "DOWN 1/2" is still DOWN)."""
    s = status.strip().upper()
    if s.startswith("MAINT"):
        return MAINT
    if s.startswith("DRAIN") or s.startswith("NOLB"):
        return DRAIN
    if s.startswith("UP") or s == "NO CHECK":
        return UP
    return DOWN


def parse_show_stat(text: str, backend: str = BACKEND) -> list[ServerStat]:
    """The servers of ``backend`` from ``show stat``'s CSV (header ``# pxname,svname,...``)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("# pxname,")), None)
    if start is None:
        raise ValueError("not the output of `show stat` (no '# pxname,' header)")
    body = "\n".join([lines[start][2:], *lines[start + 1 :]])
    out = []
    for row in csv.DictReader(io.StringIO(body)):
        if row.get("pxname") != backend or row.get("svname") in ("FRONTEND", "BACKEND", None):
            continue
        status = row.get("status", "")
        out.append(
            ServerStat(
                name=row["svname"],
                address=row.get("addr", "") or "",
                status=status,
                state=classify(status),
                sessions=_int(row.get("scur", "")),
                total=_int(row.get("stot", "")),
                check_status=(row.get("check_status") or "").lstrip("* "),
                check_code=row.get("check_code") or "",
                check_desc=row.get("last_chk") or row.get("check_desc") or "",
                last_change=_int(row.get("lastchg", "")),
                check_failures=_int(row.get("chkfail", "")),
            )
        )
    return out


def drain_refusal(stats: Sequence[ServerStat], name: str, draining: Sequence[str] = ()) -> str:
    """Why ``name`` must not be drained now ("" when it may): draining it would leave the
    endpoint with no replica that is UP (``draining``: replicas already being taken out)."""
    others = [s for s in stats if s.name != name and s.state == UP and s.name not in draining]
    if others:
        return ""
    me = next((s for s in stats if s.name == name), None)
    if me is None:
        return ""  # not behind the router: nothing to drain
    if me.state != UP:
        return ""  # already not serving: draining it changes nothing for clients
    return (
        f"refused to drain {name}: it is the last replica UP behind the router "
        "(the endpoint would have no ready replica)"
    )
