"""Which processes belong to this deployment: decided from one listing of ``/proc``.

The seed's ``pkill -9 -f "python3.*vllm"`` matched its own ``bash -c`` and killed the shell that was
to launch the server. Here a process is never chosen by a substring of its command line, nor by a
title (``VLLM::EngineCore``) or a port alone: it is chosen by what the deployment *owns*.

Ownership rule (see :func:`owned_processes`):

- The launch script exports ``KIMI_OPS_RUN_DIR`` (the absolute run_dir) and ``KIMI_OPS_LAUNCH_ID``
  before it ``exec``\\ s the server under ``setsid``. Every process of the tree inherits both and
  the session (API server, resource_tracker, EngineCore, workers, and the orphans that live on
  after a ``kill -9`` of the API server). A process whose environment holds this run_dir is ours:
  of the current launch when its launch id is the one in ``launch.id``, else a stale launch.
- When a process's environment holds no ``KIMI_OPS_RUN_DIR`` (vLLM's EngineCore and Worker:
  setproctitle overwrites the environ area, so ``/proc/PID/environ`` reads empty; or another
  user's process, unreadable without root), it is ours only if it sits in a session this
  deployment's launch created (the pidfile's PID, or the session of a process owned by
  environment whose ``KIMI_OPS_LAUNCH_PID``, the launch script's ``$$``, is that session: the
  launch led it) whose leader is gone or ours (a live foreign leader means the PID was reused).
  A session that merely holds a process owned by environment (launch.sh run by hand, without
  setsid, in a login session) is not ours: its other processes are left alone and named.
- Children of an owned process are ours unless their environment names another run_dir.
- A server that an older kimi-ops launched (no ``KIMI_OPS_RUN_DIR``) is ours only when it is the
  pidfile's PID, leads its own session, and is a vLLM server on this deployment's port.
- Never: the shell that ran the listing, its ancestors (the SSH session), its children, PID 0/1.
  A process with another ``KIMI_OPS_RUN_DIR`` is another deployment's, whatever its title or port.

The listing (:data:`LISTING_COMMAND`) needs only bash: it reads ``/proc/PID/stat``, the exact argv
from ``/proc/PID/cmdline`` (NUL-separated) and only the ``KIMI_OPS_*`` variables of
``/proc/PID/environ`` (other variables may hold secrets and are never printed).
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .defaults import STANDIN_SCRIPT
from .printable import one_line
from .redact import cut

#: Environment variables the launch script exports; the listing prints only ``KIMI_OPS_*``.
RUN_DIR_VAR = "KIMI_OPS_RUN_DIR"
LAUNCH_ID_VAR = "KIMI_OPS_LAUNCH_ID"
#: The launch script's own PID (``$$``; it ``exec``\ s the server, so the server's PID): equal to
#: a process's session only when the launch led that session (its ``setsid``).
LAUNCH_PID_VAR = "KIMI_OPS_LAUNCH_PID"

# The listing script (bash, no fork per process): one line per process,
#   PID PPID PGID SID STATE START env|noenv|unread[<TAB>E<NAME=VALUE>]...[<TAB>A<arg>]...
# START is /proc/PID/stat's field 22 (clock ticks since boot): with the PID it names one process
# for good (a reused PID has a later start), "-" when unknown.
# Values and args escape backslash, TAB, LF and CR as \\ \t \n \r. "noenv": environ unreadable;
# "unread": neither environ nor cmdline answered (see listing_command).
_ESCAPE = (
    "v=${v//\\\\/\\\\\\\\}; v=${v//$'\\t'/\\\\t}; v=${v//$'\\n'/\\\\n}; v=${v//$'\\r'/\\\\r}; "
)
# /proc/PID/stat of "$p" into $1.. (STATE PPID PGID SID ...); the command name, which may hold
# spaces and ")", is cut off first.
_READ_STAT = (
    "s=; {{ read -r s; }} 2>/dev/null < \"{root}/$p/stat\" && {{ s=${{s##*') '}}; set -- $s; }}"
)
#: Seconds one pass of the listing may take before the process it is reading is retried; a
#: process whose reads block twice in a row is listed as "unread".
LISTING_READ_TIMEOUT = 5


def _read_bound(var: str, seconds: int) -> str:
    """Shell: sets ``$var`` to the prefix that ends a read after ``seconds`` (``timeout -s KILL``:
    the waits on a process's exec and memory-map locks end on SIGKILL), or to nothing on a host
    without coreutils' ``timeout``."""
    return f"{var}=; command -v timeout >/dev/null 2>&1 && {var}='timeout -s KILL {int(seconds)}'; "


def _listing_pass(root: str) -> str:
    """One pass over ``root/[0-9]*`` from PID ``$1`` (in the glob's byte order, inclusive),
    skipping PID ``$2``. Writes each PID to fd 3 before reading its environ and cmdline."""
    return (
        f"export LC_ALL=C; from=$1; skip=$2; for d in {root}/[0-9]*; do p=${{d##*/}}; "
        '[[ -n $from && $p < $from || $p == "$skip" ]] && continue; '
        + _READ_STAT.format(root=root)
        + " || continue; "
        'echo "$p" >&3; e=noenv; v=; '
        # another user's process is never ours: its environment is not read (root could read
        # it, and a decoy's copy of KIMI_OPS_RUN_DIR would make it "this deployment's")
        '[ -O "$d" ] && '
        "{ e=env; while IFS= read -r -d '' v; do case $v in KIMI_OPS_*) "
        + _ESCAPE
        + 'e+=$\'\\t\'"E$v";; esac; done; } 2>/dev/null < "$d/environ"; a=; '
        "{ while IFS= read -r -d '' v || [ -n \"$v\" ]; do "
        + _ESCAPE
        + 'a+=$\'\\t\'"A$v"; done; } 2>/dev/null < "$d/cmdline"; '
        'printf \'%s %s %s %s %s %s %s%s\\n\' "$p" "$2" "$3" "$4" "$1" "${20:--}" "$e" "$a"; '
        "done; exit 0"
    )


def listing_command(root: str = "/proc", timeout: int = LISTING_READ_TIMEOUT) -> str:
    """The listing (one line per process; the first line names the shell running it,
    ``self_pid=N``), with every process's reads bounded.

    Reading ``/proc/PID/environ`` waits for the process's exec lock and ``cmdline`` for its
    memory-map lock, so one process stuck in exec (or holding its mmap lock in a long fault) could
    hold the whole listing until the caller's command timeout. The pass runs under ``timeout -s
    KILL`` (when the host has it; those waits end on SIGKILL); when it is killed, the next pass
    starts again at the process it was reading, and a process that blocks two passes in a row is
    listed as ``unread`` (its stat fields only) and skipped. Each pass and ``timeout`` are
    children of the listing shell, so no ownership decision ever takes them. ``root`` is for
    tests (a tree of fake ``/proc`` entries)."""
    script = (
        'export LC_ALL=C; echo "self_pid=$$"; exec 4>&1; '
        + _read_bound("to", timeout)
        + f"pass={shlex.quote(_listing_pass(root))}; from=; skip=; last=; empty=; "
        'while :; do cur=$($to bash -c "$pass" _ "$from" "$skip" 3>&1 >&4) && break; '
        "p=${cur##*$'\\n'}; if [ -z \"$p\" ]; then "
        '[ -n "$empty" ] && { echo "listing_incomplete=$from"; break; }; empty=1; continue; fi; '
        "empty=; echo; "
        'if [ "$p" = "$last" ]; then '
        + _READ_STAT.format(root=root)
        + ' && printf \'%s %s %s %s %s %s unread\\n\' "$p" "$2" "$3" "$4" "$1" "${20:--}"; '
        "skip=$p; last=; else skip=; last=$p; fi; from=$p; done"
    )
    return "bash -c " + shlex.quote(script)


#: The listing command (:func:`listing_command` of ``/proc``).
LISTING_COMMAND = listing_command()

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_SERVER_MODULES = {
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.api_server",
}
_CLI_MODULES = {"vllm.entrypoints.cli.main", "vllm"}
#: Interpreter options that take a separate argument (python -X opt, -W arg).
_PY_OPTS_WITH_ARG = {"-X", "-W", "-Q"}
#: vLLM names its engine and worker processes with setproctitle: "VLLM::EngineCore", ...
_VLLM_TITLE = re.compile(r"^VLLM::[A-Za-z_]+")
DEFAULT_VLLM_PORT = 8000
_DIGITS = re.compile(r"^[0-9]+$")  # str.isdigit() accepts "²", which int() rejects
_ROW = re.compile(r"^(\d+) (\d+) (-?\d+) (-?\d+) (\S+)(?: (\d+|-))? (env|noenv|unread)((?:\t.*)?)$")
_UNESCAPE = re.compile(r"\\(.)")
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def _unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: _UNESCAPES.get(m.group(1), "\\" + m.group(1)), text)


def norm_dir(path: str) -> str:
    """``path`` normalised as a directory name: ``a//b``, ``a/./b``, ``a/b/`` and ``a/c/../b``
    all become ``a/b`` (``posixpath.normpath``; a leading ``//`` becomes ``/``). Every task compares
    and builds paths from this form, so ``stop --run-dir /srv/x//run`` means ``/srv/x/run``.
    A leading ``~`` is kept (the host expands it)."""
    if not path:
        return path
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


@dataclass(frozen=True)
class Proc:
    """One process of the listing.

    ``argv`` is exact (trailing empty arguments, setproctitle's NUL padding, are dropped).
    ``env`` holds only the ``KIMI_OPS_*`` variables, or is None when the environment could not be
    read. ``sid`` is None for a listing that has no session column (``ps`` text). ``unread``:
    neither its environment nor its command line answered within the listing's bound (a process
    stuck in exec or on its memory-map lock): only its stat fields are known. ``start``: its
    start time (``/proc/PID/stat`` field 22, clock ticks since boot; None when the listing has
    none): (``pid``, ``start``) is one process, a reused PID starts later.
    """

    pid: int
    ppid: int
    pgid: int
    argv: tuple[str, ...] = ()
    sid: int | None = None
    env: tuple[tuple[str, str], ...] | None = ()
    state: str = ""
    unread: bool = False
    start: int | None = None

    @property
    def args(self) -> str:
        """The command line as ``ps`` would show it (for display, never for decisions)."""
        return " ".join(self.argv)

    @property
    def env_readable(self) -> bool:
        return self.env is not None

    def getenv(self, name: str) -> str | None:
        return dict(self.env or ()).get(name)

    @property
    def run_dir(self) -> str | None:
        value = self.getenv(RUN_DIR_VAR)
        return norm_dir(value) if value is not None else None

    @property
    def launch_id(self) -> str | None:
        return self.getenv(LAUNCH_ID_VAR)

    @property
    def launch_pid(self) -> int | None:
        """The PID of the launch this process came from (None: not recorded, e.g. launched by a
        kimi-ops before :data:`LAUNCH_PID_VAR`)."""
        value = self.getenv(LAUNCH_PID_VAR) or ""
        return int(value) if _DIGITS.match(value) else None

    @property
    def zombie(self) -> bool:
        return self.state.startswith(("Z", "X"))


@dataclass(frozen=True)
class Listing:
    """A parsed listing: the processes and the PID of the shell that produced it (if known).

    ``incomplete_from``: the listing stopped before it had read every process (two passes in a
    row were ended before reading any): the first PID it did not reach. Nothing may be decided
    from an incomplete listing about processes it does not show."""

    procs: tuple[Proc, ...]
    self_pid: int | None = None
    incomplete_from: str | None = None

    def by_pid(self) -> dict[int, Proc]:
        return {p.pid: p for p in self.procs}


@dataclass(frozen=True)
class Selection:
    """This deployment's processes, each with why it is ours; plus what was left alone.

    ``orphans``: owned processes whose server (their session leader) is gone.
    ``current``: owned processes of the current launch (launch id as in ``launch.id``).
    ``foreign``: vLLM servers on this deployment's port (or of unknown port) that are not ours,
    with why, for the report; they are never ended.
    """

    targets: tuple[Proc, ...]
    reasons: Mapping[int, str] = field(default_factory=dict)
    protected: frozenset[int] = frozenset()
    orphans: frozenset[int] = frozenset()
    current: frozenset[int] = frozenset()
    foreign: tuple[tuple[Proc, str], ...] = ()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.targets]

    @property
    def orphan_procs(self) -> list[Proc]:
        return [p for p in self.targets if p.pid in self.orphans]

    @property
    def stale(self) -> frozenset[int]:
        """Owned processes not of the current launch."""
        return frozenset(self.pids) - self.current

    def describe(self, most: int = 6) -> list[str]:
        """One line per process (the first ``most``), then how many more."""
        lines = [
            f"{p.pid} ({self.reasons.get(p.pid, '')}"
            + ("; orphan: its server is gone" if p.pid in self.orphans else "")
            + f"): {cut(one_line(p.args), 160)}"
            for p in self.targets
        ]
        if len(lines) > most:
            rest = len(lines) - most
            lines = lines[:most] + [f"... and {rest} more (the same deployment)"]
        return lines

    def describe_foreign(self) -> list[str]:
        return [
            f"left alone: {p.pid} ({why})" + (f": {cut(one_line(p.args), 160)}" if p.argv else "")
            for p, why in self.foreign
        ]


def parse_listing(text: str) -> Listing:
    """Parse :data:`LISTING_COMMAND` output. Lines it cannot read are skipped.

    Also reads ``ps -o pid=,ppid=,pgid=,args=`` rows (old fixtures): their argv is split on
    whitespace, and they have no session and an unknown environment.
    """
    procs: dict[int, Proc] = {}  # a PID listed twice (a pass retried): the last row wins
    self_pid: int | None = None
    incomplete: str | None = None
    for raw in text.split("\n"):
        m = re.match(r"^#?\s*self_pid=(\d+)\s*$", raw)
        if m:
            self_pid = int(m.group(1))
            continue
        m = re.match(r"^listing_incomplete=(\d*)\s*$", raw)
        if m:
            incomplete = m.group(1)
            continue
        row = _ROW.match(raw.rstrip("\r"))
        if row:
            proc = _parse_row(row)
            procs.pop(proc.pid, None)
            procs[proc.pid] = proc
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) < 3 or not all(_DIGITS.match(x) for x in parts[:3]):
            continue
        argv = tuple(parts[3].split()) if len(parts) == 4 else ()
        pid = int(parts[0])
        procs.pop(pid, None)
        procs[pid] = Proc(pid, int(parts[1]), int(parts[2]), argv, None, None)
    return Listing(tuple(procs.values()), self_pid, incomplete)


parse_ps = parse_listing  # the name callers used before the /proc listing


def _parse_row(row: re.Match[str]) -> Proc:
    pid, ppid, pgid, sid, state, start, env_state, rest = row.groups()
    env: list[tuple[str, str]] = []
    argv: list[str] = []
    for item in rest.split("\t")[1:]:
        kind, value = item[:1], _unescape(item[1:])
        if kind == "E" and "=" in value:
            name, _, val = value.partition("=")
            env.append((name, val))
        elif kind == "A":
            argv.append(value)
    while argv and argv[-1] == "":
        argv.pop()
    return Proc(
        int(pid),
        int(ppid),
        int(pgid),
        tuple(argv),
        int(sid),
        tuple(env) if env_state == "env" else None,
        state,
        env_state == "unread",
        int(start) if start and start != "-" else None,
    )


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def format_row(p: Proc) -> str:
    """One listing line for ``p``, exactly as :data:`LISTING_COMMAND` prints it (for fixtures)."""
    env = "".join(f"\tE{_escape(k)}={_escape(v)}" for k, v in (p.env or ()))
    argv = "".join(f"\tA{_escape(a)}" for a in p.argv)
    sid = p.pgid if p.sid is None else p.sid
    state = "unread" if p.unread else "env" if p.env is not None else "noenv"
    start = "" if p.start is None else f" {p.start}"
    return f"{p.pid} {p.ppid} {p.pgid} {sid} {p.state or 'S'}{start} {state}{env}{argv}"


def _python_target(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """For a Python command line: ("-m", module) or ("script", path), with the rest of argv."""
    if not argv or not _PYTHON.match(argv[0].rsplit("/", 1)[-1]):
        return None
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-m" and i + 1 < len(argv):
            return ("-m:" + argv[i + 1], list(argv[i + 2 :]))
        if tok.startswith("-m") and len(tok) > 2:
            return ("-m:" + tok[2:], list(argv[i + 1 :]))
        if tok in _PY_OPTS_WITH_ARG:
            i += 2
            continue
        if tok == "-c":
            return None  # inline code: never a server
        if tok.startswith("-"):
            i += 1
            continue
        return ("script:" + tok, list(argv[i + 1 :]))
    return None


def server_args(args: str | Sequence[str]) -> list[str] | None:
    """If ``args`` is a vLLM OpenAI server (or stand-in) command line, its server arguments.

    ``args`` is an exact argv (a sequence) or, for display strings from ``ps -o args=``, a string
    split on whitespace (then only good for "is it a server", not for reading its flags).
    Recognised: ``python -m vllm.entrypoints.openai.api_server ...``, ``python -m
    vllm.entrypoints.cli.main serve ...``, ``python .../bin/vllm serve ...``, ``vllm serve ...``
    and ``python .../kimi_standin.py ...``. Anything else (``tail -f vllm.log``, ``grep vllm``,
    ``bash -c '... python3 -m vllm ...'``, ``python3 -m vllm_tools``) gives None.
    """
    argv = args.split() if isinstance(args, str) else list(args)
    if not argv:
        return None
    base = argv[0].rsplit("/", 1)[-1]
    if base == "vllm":
        return argv[2:] if len(argv) > 1 and argv[1] == "serve" else None
    target = _python_target(argv)
    if target is None:
        return None
    what, rest = target
    if what.startswith("-m:"):
        module = what[3:]
        if module in _SERVER_MODULES:
            return rest
        if module in _CLI_MODULES and rest[:1] == ["serve"]:
            return rest[1:]
        return None
    script = what[len("script:") :].rsplit("/", 1)[-1]
    if script == "vllm" and rest[:1] == ["serve"]:
        return rest[1:]
    if script in (STANDIN_SCRIPT, "standin.py"):
        # Its nvidia-smi and vllm-version modes are one-shot queries, not servers.
        return None if rest[:1] in (["nvidia-smi"], ["vllm-version"]) else rest
    return None


def is_vllm_title(args: str | Sequence[str]) -> bool:
    """A process renamed by vLLM (``VLLM::EngineCore``, ``VLLM::Worker_TP3``...)."""
    first = args.strip() if isinstance(args, str) else (args[0] if args else "")
    return bool(_VLLM_TITLE.match(first))


def server_port(argv: Sequence[str]) -> int | None:
    """The port a vLLM server with these exact arguments listens on, as its parser reads them.

    ``--port N`` and ``--port=N``, the last one wins (argparse); vLLM's default 8000 without one.
    None when it cannot be known: a ``--config`` file (vLLM's YAML config can set the port), an
    abbreviated ``--por``/``--po`` (argparse accepts unique prefixes), or a bad value.
    One argv element that merely contains `` --port N`` (a model path) is not a flag.
    """
    port: int | None = DEFAULT_VLLM_PORT
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            break  # the rest is positional
        name, eq, inline = tok.partition("=")
        if name in ("--config", "--conf", "--confi") or tok.startswith("--config="):
            return None
        if name in ("--port", "--por", "--po"):
            if eq:
                value: str | None = inline
            else:
                value = argv[i + 1] if i + 1 < len(argv) else None
                i += 1
            if name != "--port" or value is None or not _DIGITS.match(value):
                return None
            port = int(value)
        i += 1
    return port


def ancestors(pid: int, by_pid: Mapping[int, Proc]) -> set[int]:
    """``pid`` and every ancestor of it present in the listing."""
    seen: set[int] = set()
    cur: int | None = pid
    while cur is not None and cur not in seen:
        seen.add(cur)
        proc = by_pid.get(cur)
        cur = proc.ppid if proc is not None and proc.ppid > 0 else None
    return seen


def descendants(roots: Iterable[int], procs: Iterable[Proc]) -> set[int]:
    """Every process below ``roots`` (roots not included)."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def protected_pids(listing: Listing, self_pid: int | None = None) -> set[int]:
    """PID 0 and 1, the listing shell, its ancestors and its descendants."""
    me = self_pid if self_pid is not None else listing.self_pid
    out: set[int] = {0, 1}
    if me is not None:
        out |= ancestors(me, listing.by_pid()) | descendants([me], listing.procs)
    return out


def owned_processes(
    listing: Listing,
    run_dir: str,
    pidfile_pid: int | None = None,
    current_launch_id: str | None = None,
    *,
    port: int | None = None,
    self_pid: int | None = None,
) -> Selection:
    """This deployment's processes in ``listing`` (the ownership rule in the module docstring).

    ``run_dir``: the deployment's absolute run_dir; ``pidfile_pid``: the PID in its pidfile (the
    session its current launch created); ``current_launch_id``: the content of ``launch.id``;
    ``port``: the profile's port, used only to recognise a server an older kimi-ops launched (the
    pidfile's PID, without ``KIMI_OPS_RUN_DIR``) and to report foreign servers on that port.
    """
    ours_dir = norm_dir(run_dir)
    procs = listing.procs
    by_pid = listing.by_pid()
    protected = protected_pids(listing, self_pid)
    reasons: dict[int, str] = {}
    launch_of: dict[int, str | None] = {}
    # The PID of the launch (its server) each came from, where recorded (KIMI_OPS_LAUNCH_PID,
    # or inherited from the parent); unrecorded, its session leader is taken for its server.
    server_of: dict[int, int | None] = {}

    def other_deployment(p: Proc) -> bool:
        return p.run_dir is not None and p.run_dir != ours_dir

    def take(p: Proc, why: str, launch: str | None, server: int | None = None) -> None:
        if p.pid not in reasons:
            reasons[p.pid] = why
            launch_of[p.pid] = p.launch_id if p.launch_id is not None else launch
            server_of[p.pid] = p.launch_pid if p.launch_pid is not None else server

    # 1. By environment: KIMI_OPS_RUN_DIR is this run_dir.
    for p in procs:
        if p.run_dir == ours_dir:
            lid = p.launch_id
            which = "this launch" if lid and lid == current_launch_id else f"launch {lid or '?'}"
            take(p, f"{RUN_DIR_VAR} of this deployment, {which}", lid)

    # 2. Sessions this deployment's launches created (setsid): the pidfile's, and the session of
    #    a process owned by environment whose KIMI_OPS_LAUNCH_PID (the launch script's $$) is
    #    that session: the launch led it. launch.sh run by hand without setsid leaves the server
    #    in the caller's session, which holds other processes of the caller: not ours (red team
    #    round 4, #8). A process from a launch before that variable names its session as before.
    #    A session counts while its leader is gone, owned by environment, or unreadable: a live
    #    leader that is readably not ours means PID reuse.
    def our_session(sid: int | None) -> bool:
        if sid is None or sid <= 1:
            return False
        leader = by_pid.get(sid)
        # Its leader gone, ours, or unreadable (nothing says the PID was reused).
        return leader is None or leader.zombie or sid in reasons or leader.env is None

    candidates: set[int | None] = set()
    not_created: dict[int, int] = {}  # a session holding our server that no launch created
    for pid in reasons:
        p = by_pid[pid]
        if p.launch_pid is None or p.launch_pid == p.sid:
            candidates.add(p.sid)
        elif p.sid is not None:
            not_created.setdefault(p.sid, p.launch_pid)
    if pidfile_pid:
        candidates.add(pidfile_pid)
    sessions = {sid for sid in candidates if sid is not None and our_session(sid)}
    # The launch a session belongs to: its members' launch id; the pidfile's is the current one.
    session_launch: dict[int, str | None] = {}
    if pidfile_pid:
        session_launch[pidfile_pid] = current_launch_id
    for pid in reasons:
        sid = by_pid[pid].sid
        if sid is not None and launch_of.get(pid):
            session_launch.setdefault(sid, launch_of[pid])

    # 3. A server launched by an older kimi-ops (no KIMI_OPS_RUN_DIR): the pidfile's PID, a
    #    session leader, a vLLM server on this port. Then the members of its session.
    legacy = by_pid.get(pidfile_pid) if pidfile_pid else None
    if (
        legacy is not None
        and port is not None
        and legacy.run_dir is None
        and legacy.sid == legacy.pid
        and not legacy.zombie
    ):
        argv = server_args(legacy.argv)
        if argv is not None and server_port(argv) == port:
            take(
                legacy,
                f"the pidfile's server on port {port} (launched without {RUN_DIR_VAR})",
                None,
            )
            for p in procs:
                if p.sid == legacy.pid and p.run_dir is None:
                    take(p, f"in the session of the pidfile's server {legacy.pid}", None)

    # 4. No KIMI_OPS_RUN_DIR to read: the environment is unreadable (another user's process), or
    #    setproctitle overwrote it (vLLM's EngineCore and Worker). Ours inside our sessions.
    for p in procs:
        if p.run_dir is None and p.sid is not None and p.sid in sessions:
            why = (
                "its command line and environment not read in time"
                if p.unread
                else "environment unreadable"
                if p.env is None
                else f"no {RUN_DIR_VAR} left in it"
            )
            take(p, f"in session {p.sid} of this deployment ({why})", session_launch.get(p.sid))

    # 5. Children of what is ours, unless they name another deployment.
    children: dict[int, list[Proc]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    stack = list(reasons)
    while stack:
        parent = stack.pop()
        for child in children.get(parent, ()):
            if child.pid not in reasons and not other_deployment(child):
                take(child, f"child of {parent}", launch_of.get(parent), server_of.get(parent))
                stack.append(child.pid)

    # A zombie has already exited: nothing to end (its parent reaps it).
    targets = tuple(
        p for p in procs if p.pid in reasons and p.pid not in protected and not p.zombie
    )
    owned = {p.pid for p in targets}

    def server_gone(p: Proc) -> bool:
        server = server_of.get(p.pid)
        if server is None:  # not recorded: its session leader (the launch's setsid) is its server
            sid = p.sid
            return sid is not None and sid != p.pid and (sid not in by_pid or by_pid[sid].zombie)
        if server == p.pid:
            return False
        # A live process under the recorded launch PID that is not ours: that PID was reused.
        leader = by_pid.get(server)
        return leader is None or leader.zombie or server not in reasons

    orphans = frozenset(p.pid for p in targets if server_gone(p))
    current = frozenset(
        pid for pid in owned if current_launch_id and launch_of.get(pid) == current_launch_id
    )
    foreign: list[tuple[Proc, str]] = []
    for p in procs:
        if p.unread and p.pid not in reasons and p.pid not in protected:
            foreign.append((p, _UNREAD_WHY))
            continue
        if p.pid in reasons or p.zombie:
            continue
        argv = server_args(p.argv)
        if argv is None:
            if (
                p.sid in not_created
                and p.sid not in sessions
                and p.pid not in protected
                and not other_deployment(p)
            ):
                foreign.append(
                    (
                        p,
                        f"in session {p.sid} with this deployment's server "
                        f"{not_created[p.sid]}, a session its launch did not create "
                        "(launch.sh run by hand without setsid?); not ours",
                    )
                )
            continue
        their = server_port(argv)
        if their is None:
            foreign.append((p, "vLLM server whose port cannot be known (--config?); not ours"))
        elif port is not None and their == port:
            whose = (
                f"another deployment's ({RUN_DIR_VAR}={p.run_dir})"
                if p.run_dir is not None
                else "not launched by this deployment"
            )
            foreign.append((p, f"vLLM server on port {their}, {whose}"))
    return Selection(
        targets,
        {pid: reasons[pid] for pid in owned},
        frozenset(protected & set(reasons)),
        orphans,
        current,
        tuple(foreign),
    )


_UNREAD_WHY = (
    "its command line and environment did not answer the listing in time, twice (a process stuck "
    "in exec or on its memory-map lock); not in a session of this deployment, so not ours"
)


def same_process(before: Proc, now: Proc) -> bool:
    """``now`` (a later listing's row for ``before.pid``) is still the process ``before`` was:
    the same start time (a PID reused during a grace period starts later; vLLM's titles such as
    ``VLLM::Worker_TP0`` are the same in every deployment, so the argv alone proves nothing) and
    the same argv (unless one of them could not be read in time)."""
    if before.start is not None and now.start is not None and before.start != now.start:
        return False
    return now.unread or before.unread or now.argv == before.argv


def still_running(before: Selection, listing: Listing) -> list[Proc]:
    """Targets of ``before`` still present, not zombies, and still the same process
    (:func:`same_process`: start time and argv; a reused PID is not). A process the listing
    could not read in time (or did not reach: an incomplete listing) counts as still running:
    nothing says it ended.

    The ownership decision is not taken again here: (PID, start time) names the very process
    that was decided to be ours, which stays ours when its parent or session leader exits."""
    now = listing.by_pid()

    def running(p: Proc) -> bool:
        q = now.get(p.pid)
        if q is None:
            return listing.incomplete_from is not None
        return not q.zombie and same_process(p, q)

    return [p for p in before.targets if running(p)]


def signal_command(signal: str, targets: Iterable[int | Proc]) -> str:
    """One-line command sending ``signal`` to each target, printing ``sent PID`` or ``gone PID``.

    A target given as a :class:`Proc` with a known start time is signalled only while
    ``/proc/PID/stat`` still shows that start time, read by the same shell just before ``kill``:
    a PID whose process ended and was reused by another one is reported ``gone`` and left alone.
    What remains is the window between that read and ``kill(2)`` in one shell (microseconds, no
    fork between them): a process ending and its PID being taken by a new one inside it. Only a
    pidfd (``pidfd_open`` + ``pidfd_send_signal``) would close it, and that needs more than the
    bash builtins these commands use. A bare PID is signalled unchecked."""
    if not re.match(r"^[A-Z0-9]+$", signal):
        raise ValueError(f"bad signal name {signal!r}")
    ids = " ".join(
        f"{int(t.pid)}:{int(t.start)}"
        if isinstance(t, Proc) and t.start is not None
        else str(int(t.pid if isinstance(t, Proc) else t))
        for t in targets
    )
    return (
        f"for p in {ids}; do case $p in *:*) t=${{p#*:}}; p=${{p%%:*}}; "
        "s=; { read -r s; } 2>/dev/null < \"/proc/$p/stat\"; s=${s##*') '}; set -- $s; "
        '[ "${20:-}" = "$t" ] || { echo "gone $p"; continue; };; esac; '
        f'if kill -{signal} "$p" 2>/dev/null; '
        'then echo "sent $p"; else echo "gone $p"; fi; done'
    )


def parse_signal_output(text: str) -> tuple[list[int], list[int]]:
    """(sent, gone) PIDs from :func:`signal_command` output."""
    sent: list[int] = []
    gone: list[int] = []
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) == 2 and _DIGITS.match(parts[1]):
            (sent if parts[0] == "sent" else gone).append(int(parts[1]))
    return sent, gone


# --- the pidfile's process --------------------------------------------------------------------

#: Seconds a process may seem to have started after its pidfile was written and still be the
#: pidfile's server. The launch script writes ``$$`` into the pidfile and then ``exec``\ s the
#: server, so the server started before its pidfile; the start time read here is whole-second
#: coarse (``/proc/stat``'s btime; the pidfile's mtime in whole seconds), hence the slack.
PIDFILE_START_SLACK = 5.0


def pidfile_process_command(pidfile: str) -> str:
    """Shell, run after the caller set ``$pid`` from ``pidfile`` (a shell word, already quoted):
    the facts that say whether ``$pid`` is still the process the pidfile was written for.

    Prints ``pf_mtime=`` (the pidfile's mtime), ``pf_boot=`` (btime), ``pf_hz=`` (CLK_TCK), and
    when ``/proc/$pid`` exists: ``pf_stat=STATE STARTTIME`` (``/proc/PID/stat`` fields 3 and 22),
    ``pf_argv=`` (the exact NUL-separated ``/proc/PID/cmdline``, base64) and, when the
    environment is readable, ``pf_env=`` (its ``KIMI_OPS_*`` lines, base64; never other
    variables, which may hold secrets). Each read is bounded as the listing's are
    (:data:`LISTING_READ_TIMEOUT`): a command line that does not answer prints ``pf_unread=1``
    instead of ``pf_argv=``."""
    return (
        'case "$pid" in ""|*[!0-9]*) ;; *) '
        + _read_bound("pf_to", LISTING_READ_TIMEOUT)
        + f'echo "pf_mtime=$(stat -c %Y {pidfile} 2>/dev/null)"; '
        "echo \"pf_boot=$(sed -n 's/^btime //p' /proc/stat 2>/dev/null)\"; "
        'echo "pf_hz=$(getconf CLK_TCK 2>/dev/null)"; '
        'if { read -r pf_s < "/proc/$pid/stat"; } 2>/dev/null; then '
        "pf_s=${pf_s##*') '}; set -- $pf_s; "
        'echo "pf_stat=$1 ${20}"; '
        'if pf_a=$($pf_to base64 -w0 "/proc/$pid/cmdline" 2>/dev/null) || [ $? -lt 124 ]; '
        'then echo "pf_argv=$pf_a"; else echo "pf_unread=1"; fi; '
        'if pf_e=$(set -o pipefail; $pf_to cat "/proc/$pid/environ" 2>/dev/null '
        '| tr "\\000" "\\n"); then '
        "echo \"pf_env=$(printf '%s\\n' \"$pf_e\" | grep -a '^KIMI_OPS_' | base64 -w0)\"; "
        "fi; fi;; esac"
    )


def read_pidfile_command(pidfile: str, key: str = "pid") -> str:
    """Shell: the pidfile's first line as ``KEY=PID`` (``KEY=`` when there is none), then
    :func:`pidfile_process_command`'s facts of that PID; read with
    :func:`parse_pidfile_process` (``pid_key=KEY``)."""
    return f'pid=$(head -n 1 {pidfile} 2>/dev/null); echo "{key}=$pid"; ' + pidfile_process_command(
        pidfile
    )


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.strip(), validate=False)
    except (binascii.Error, ValueError):
        return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None and text.strip() else None
    except ValueError:
        return None


@dataclass(frozen=True)
class PidfileProcess:
    """The pidfile's PID and what runs under it now (:func:`parse_pidfile_process`).

    ``argv`` is exact (NUL-split, so an argument with a space stays one argument); ``env`` holds
    only ``KIMI_OPS_*`` (None: unreadable); ``start`` and ``mtime`` are epoch seconds (None:
    unknown)."""

    pid: int | None
    alive: bool = False
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] | None = None
    start: float | None = None
    mtime: float | None = None
    #: ``/proc/PID/stat``'s state letter ("" when unknown): ``T`` / ``t`` is a process stopped
    #: by a signal (SIGSTOP, SIGTSTP) or a tracer, which makes no progress until SIGCONT.
    state: str = ""
    #: Its command line did not answer in time (stuck in exec or on its memory-map lock): alive,
    #: but what it runs is unknown; not taken for gone.
    unread: bool = False

    @property
    def stopped(self) -> bool:
        """The process is stopped (state T or t): alive, but it runs nothing until SIGCONT."""
        return self.alive and self.state in ("T", "t")

    @property
    def run_dir(self) -> str | None:
        value = dict(self.env or ()).get(RUN_DIR_VAR)
        return norm_dir(value) if value is not None else None

    @property
    def started_after_pidfile(self) -> bool:
        """The process started after its pidfile was written: the PID was reused."""
        if self.start is None or self.mtime is None:
            return False
        return self.start > self.mtime + PIDFILE_START_SLACK

    def foreign(self, run_dir: str) -> bool:
        """The live process under the PID is not the one the pidfile names: its environment
        names another run_dir, or (without this run_dir in it) it started after the pidfile."""
        if not self.alive:
            return False
        if self.run_dir is not None and run_dir:
            return self.run_dir != norm_dir(run_dir)
        return self.started_after_pidfile

    def owner_pid(self, run_dir: str) -> int | None:
        """The PID to trust as the pidfile's (for :func:`owned_processes`): None when reused."""
        return None if self.foreign(run_dir) else self.pid

    def ended(self, run_dir: str) -> bool:
        """The pidfile names a server that is gone: its PID is not alive, or was reused. Such a
        pidfile must go (:func:`remove_pidfile_command`), or a later run trusts a reused PID.

        A live process whose environment names another run_dir but that started before the
        pidfile was written is the pidfile's own server reached through another path (a
        symlink, a bind mount): not gone, so its pidfile stays."""
        if self.pid is None or not self.alive:
            return self.pid is not None
        if self.run_dir is not None and self.start is not None and self.mtime is not None:
            return self.foreign(run_dir) and self.started_after_pidfile
        return self.foreign(run_dir)

    def server_alive(self, run_dir: str) -> bool:
        """The pidfile's server lives: the PID is alive, is not a reused PID, and runs a vLLM
        server (or a process vLLM renamed). A process whose command line did not answer in time
        counts as the server while nothing says its PID was reused."""
        return (
            self.alive
            and not self.foreign(run_dir)
            and (self.unread or server_args(self.argv) is not None or is_vllm_title(self.argv))
        )


def parse_pidfile_process(values: Mapping[str, str], pid_key: str = "pid") -> PidfileProcess:
    """From the ``key=value`` lines of :func:`pidfile_process_command` (and ``pid_key``, the
    PID the caller read from the pidfile). Output of an older command that printed
    ``args=`` (``ps -o args=``, split on whitespace) is still read, without the time check."""
    pid_text = values.get(pid_key, "").strip()
    pid = int(pid_text) if _DIGITS.match(pid_text) else None
    if pid is None:
        return PidfileProcess(None)
    stat = values.get("pf_stat", "").split()
    argv: tuple[str, ...] = ()
    unread = values.get("pf_unread", "").strip() == "1"
    if unread:  # alive (its stat was read); what it runs is unknown
        alive = bool(stat) and not stat[0].startswith(("Z", "X"))
    elif "pf_argv" in values:
        raw = _b64(values["pf_argv"]) or b""
        parts = raw.decode("utf-8", "replace").split("\0")
        while parts and parts[-1] == "":
            parts.pop()
        argv = tuple(parts)
        alive = bool(stat) and not stat[0].startswith(("Z", "X"))
    elif values.get("args"):
        argv = tuple(values["args"].split())
        alive = True
    else:
        alive = False
    env: tuple[tuple[str, str], ...] | None = None
    if "pf_env" in values:
        lines = (_b64(values["pf_env"]) or b"").decode("utf-8", "replace").split("\n")
        env = tuple((name, value) for name, eq, value in (ln.partition("=") for ln in lines) if eq)
    boot, hz = _number(values.get("pf_boot")), _number(values.get("pf_hz"))
    ticks = _number(stat[1]) if len(stat) > 1 else None
    start = boot + ticks / hz if boot is not None and hz and ticks is not None else None
    mtime = _number(values.get("pf_mtime"))
    return PidfileProcess(pid, alive, argv, env, start, mtime, stat[0] if stat else "", unread)


def remove_pidfile_command(pidfile: str, pid: int) -> str:
    """Remove ``pidfile`` (a shell word) if it still holds ``pid`` (a new launch's is kept)."""
    return f'if [ "$(head -n 1 {pidfile} 2>/dev/null)" = "{int(pid)}" ]; then rm -f {pidfile}; fi'
