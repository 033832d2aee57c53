"""Which processes are this deployment's vLLM server: decided from one ``ps`` listing.

The seed's ``pkill -9 -f "python3.*vllm"`` matched its own ``bash -c`` and killed the shell that was
to launch the server. Here a process is selected by the *structure* of its command line (a Python
interpreter running vLLM's API server entry point, or the stand-in engine, on this deployment's
port), never by a substring; its descendants and process-group members follow it. The shell that
runs the listing, every ancestor of it (the SSH session), and PID 1 are never selected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .defaults import STANDIN_SCRIPT

#: ps invocation whose output :func:`parse_ps` reads (full command lines, no header).
PS_COMMAND = "ps -eww -o pid=,ppid=,pgid=,args="
#: The listing command: first line names the shell running it, then the listing.
LISTING_COMMAND = 'echo "self_pid=$$"; ' + PS_COMMAND

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


@dataclass(frozen=True)
class Proc:
    """One row of the listing."""

    pid: int
    ppid: int
    pgid: int
    args: str

    @property
    def argv(self) -> list[str]:
        return self.args.split()


@dataclass(frozen=True)
class Listing:
    """A parsed listing: the processes and the PID of the shell that produced it (if known)."""

    procs: tuple[Proc, ...]
    self_pid: int | None = None

    def by_pid(self) -> dict[int, Proc]:
        return {p.pid: p for p in self.procs}


@dataclass(frozen=True)
class Selection:
    """The processes to end, each with why it was chosen; and which were protected."""

    targets: tuple[Proc, ...]
    reasons: Mapping[int, str] = field(default_factory=dict)
    protected: frozenset[int] = frozenset()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.targets]

    def describe(self, most: int = 6) -> list[str]:
        """One line per process (the first ``most``), then how many more."""
        lines = [f"{p.pid} ({self.reasons.get(p.pid, '')}): {p.args[:160]}" for p in self.targets]
        if len(lines) > most:
            rest = len(lines) - most
            lines = lines[:most] + [f"... and {rest} more (the same tree)"]
        return lines


def parse_ps(text: str) -> Listing:
    """Parse ``LISTING_COMMAND`` / ``PS_COMMAND`` output. Lines it cannot read are skipped.

    Also reads the fixture form with ``# self_pid=N`` comment lines.
    """
    procs: list[Proc] = []
    self_pid: int | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"^#?\s*self_pid=(\d+)$", line)
        if m:
            self_pid = int(m.group(1))
            continue
        if line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) < 3 or not all(_DIGITS.match(x) for x in parts[:3]):
            continue
        args = parts[3] if len(parts) == 4 else ""
        procs.append(Proc(int(parts[0]), int(parts[1]), int(parts[2]), args))
    return Listing(tuple(procs), self_pid)


def _python_target(argv: list[str]) -> tuple[str, list[str]] | None:
    """For a Python command line: ("-m", module) or ("script", path), with the rest of argv."""
    if not argv or not _PYTHON.match(argv[0].rsplit("/", 1)[-1]):
        return None
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-m" and i + 1 < len(argv):
            return ("-m:" + argv[i + 1], argv[i + 2 :])
        if tok.startswith("-m") and len(tok) > 2:
            return ("-m:" + tok[2:], argv[i + 1 :])
        if tok in _PY_OPTS_WITH_ARG:
            i += 2
            continue
        if tok == "-c":
            return None  # inline code: never a server
        if tok.startswith("-"):
            i += 1
            continue
        return ("script:" + tok, argv[i + 1 :])
    return None


def server_args(args: str) -> list[str] | None:
    """If ``args`` is a vLLM OpenAI server (or stand-in) command line, its server arguments.

    Recognised: ``python -m vllm.entrypoints.openai.api_server ...``, ``python -m
    vllm.entrypoints.cli.main serve ...``, ``python .../bin/vllm serve ...``, ``vllm serve ...``
    and ``python .../kimi_standin.py ...``. Anything else (``tail -f vllm.log``, ``grep vllm``,
    ``bash -c '... python3 -m vllm ...'``, ``python3 -m vllm_tools``) gives None.
    """
    argv = args.split()
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


def is_vllm_title(args: str) -> bool:
    """A process renamed by vLLM (``VLLM::EngineCore``, ``VLLM::Worker_TP3``...)."""
    return bool(_VLLM_TITLE.match(args.strip()))


def server_port(argv: list[str]) -> int:
    """The ``--port`` in server arguments (vLLM's default 8000 when absent)."""
    for i, tok in enumerate(argv):
        value = None
        if tok == "--port" and i + 1 < len(argv):
            value = argv[i + 1]
        elif tok.startswith("--port="):
            value = tok.split("=", 1)[1]
        if value is not None and _DIGITS.match(value):
            return int(value)
    return DEFAULT_VLLM_PORT


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


def select_server_processes(
    listing: Listing,
    *,
    port: int | None,
    pidfile_pid: int | None = None,
    self_pid: int | None = None,
    include_orphans: bool = True,
) -> Selection:
    """Select this deployment's vLLM server processes from one listing.

    - API servers whose command line is a vLLM (or stand-in) server on ``port`` (``None``: any);
    - the pidfile's PID, only if its command line is still a vLLM server or a vLLM-titled process;
    - their descendants (engine core, TP workers) and the members of their process groups;
    - with ``include_orphans``, vLLM-titled processes adopted by init (their server is gone).
    Never: the listing shell (``self_pid`` or the listing's own), its ancestors and its own
    children (the ``ps`` itself), or PID 1.
    """
    procs = listing.procs
    by_pid = listing.by_pid()
    me = self_pid if self_pid is not None else listing.self_pid
    protected: set[int] = {0, 1}
    if me is not None:
        protected |= ancestors(me, by_pid) | descendants([me], procs)

    reasons: dict[int, str] = {}
    for p in procs:
        argv = server_args(p.args)
        if argv is None:
            continue
        if port is None or server_port(argv) == port:
            reasons[p.pid] = f"vLLM server on port {server_port(argv)}"
    if pidfile_pid is not None and pidfile_pid not in reasons:
        p = by_pid.get(pidfile_pid)
        if p is not None and (server_args(p.args) is not None or is_vllm_title(p.args)):
            reasons[p.pid] = "pidfile"
    roots = [pid for pid in reasons if pid not in protected]
    for pid in descendants(roots, procs):
        reasons.setdefault(pid, "child of the server")
    root_set = set(roots)
    for p in procs:
        if p.pgid in root_set and p.pid not in reasons:
            reasons[p.pid] = f"in the server's process group {p.pgid}"
        if include_orphans and p.ppid == 1 and is_vllm_title(p.args) and p.pid not in reasons:
            reasons[p.pid] = "orphaned vLLM process"
    targets = tuple(p for p in procs if p.pid in reasons and p.pid not in protected)
    kept = {p.pid: reasons[p.pid] for p in targets}
    return Selection(targets, kept, frozenset(protected & set(reasons)))


def alive_servers(listing: Listing) -> Selection:
    """Every vLLM server or vLLM-titled process on the host, whatever its port (for clean-shm)."""
    return select_server_processes(listing, port=None, include_orphans=True)


def still_running(before: Selection, listing: Listing) -> list[Proc]:
    """Targets of ``before`` that are still present with the same command line (no PID reuse)."""
    now = listing.by_pid()
    return [p for p in before.targets if p.pid in now and now[p.pid].args == p.args]


def signal_command(signal: str, pids: Iterable[int]) -> str:
    """One-line command sending ``signal`` to each PID, printing ``sent PID`` or ``gone PID``."""
    if not re.match(r"^[A-Z0-9]+$", signal):
        raise ValueError(f"bad signal name {signal!r}")
    ids = " ".join(str(int(p)) for p in pids)
    return (
        f'for p in {ids}; do if kill -{signal} "$p" 2>/dev/null; '
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
