"""Port facts: listening TCP ports from /proc/net/tcp and their owners from ``ss -Hltnp``; and
(:func:`listeners_command`) the sockets on one port with the processes holding them, from
/proc/net/tcp and /proc/PID/fd, for verify and status to tell whose server answers there."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass


def _proc_listeners(text: str) -> Iterator[tuple[str, int]]:
    """(hex local address, port) of each listening socket (state ``0A``) in /proc/net/tcp(6)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[0].rstrip(":").isdigit():
            continue
        local, state = parts[1], parts[3]
        if state.upper() != "0A" or ":" not in local:
            continue
        hexaddr, hexport = local.rsplit(":", 1)
        try:
            yield hexaddr, int(hexport, 16)
        except ValueError:
            continue


def parse_proc_net_tcp(text: str) -> set[int]:
    """Listening TCP ports (state ``0A``) from /proc/net/tcp and/or /proc/net/tcp6 content."""
    return {port for _, port in _proc_listeners(text)}


_SS_USER = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


def _ss_port(local: str) -> int | None:
    """The port of an ss local-address column (``0.0.0.0:8000``, ``[::]:8000``, ``*:8000``)."""
    port = local.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def _ss_rows(text: str) -> Iterator[tuple[str | None, str, int, str]]:
    """(state or None, local address column, port, line) of each socket line of ss output."""
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "State":
            continue
        # Columns: State Recv-Q Send-Q Local:Port Peer:Port [Process]; -H drops the header.
        offset = 0 if parts[0].isdigit() else 1
        if len(parts) < offset + 4:
            continue
        port = _ss_port(parts[offset + 2])
        if port is not None:
            yield (parts[0] if offset else None), parts[offset + 2], port, line


def parse_ss_listen_processes(text: str) -> dict[int, list[tuple[str, int]]]:
    """Port -> [(process name, pid), ...] from ``ss -Hltnp`` output.

    A listening port whose owner ss cannot show (another user's process when not root) maps to
    an empty list. Also accepts output with the ``State Recv-Q ...`` header.
    """
    out: dict[int, list[tuple[str, int]]] = {}
    for _, _, port, line in _ss_rows(text):
        holders = out.setdefault(port, [])
        for name, pid in _SS_USER.findall(line):
            entry = (name, int(pid))
            if entry not in holders:
                holders.append(entry)
    return out


def parse_ss_listen(text: str) -> dict[int, list[int]]:
    """Port -> pids of the processes listening on it, from ``ss -Hltnp`` output."""
    return {
        port: sorted({pid for _, pid in holders})
        for port, holders in parse_ss_listen_processes(text).items()
    }


def _proc_address(hexaddr: str) -> str | None:
    """The address of a /proc/net/tcp(6) ``local_address`` (hex, in 32-bit host-order words)."""
    try:
        raw = bytes.fromhex(hexaddr)
    except ValueError:
        return None
    if len(raw) not in (4, 16):
        return None
    # each 32-bit word is in the kernel's (little-endian, on x86 and arm64) byte order
    packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(packed))


def _ss_address(local: str) -> str:
    """The address of an ss local-address column (``127.0.0.1:80``, ``[::1]:80``, ``*:80``,
    ``127.0.0.53%lo:53``), without brackets or interface."""
    addr = local.rsplit(":", 1)[0].strip("[]").split("%", 1)[0]
    return addr or "*"


def parse_listen_addresses(text: str) -> dict[int, set[str]]:
    """Port -> the local addresses listening on it (``0.0.0.0``, ``::``, ``*`` for any), from
    ``ss -Hltn[p]`` output or /proc/net/tcp and /proc/net/tcp6 content (either, or both)."""
    out: dict[int, set[str]] = {}
    for hexaddr, port in _proc_listeners(text):
        addr = _proc_address(hexaddr)
        if addr is not None:
            out.setdefault(port, set()).add(addr)
    for state, local, port, _ in _ss_rows(text):
        if state in (None, "LISTEN"):
            out.setdefault(port, set()).add(_ss_address(local))
    return out


# --- Who listens on a port: the sockets and the processes holding them -------------------------

#: The line :func:`listeners_command` prints first; what follows it is its output.
LISTEN_MARK = "@@listen"


def listeners_command(port: int) -> str:
    """One line (POSIX sh): the sockets listening on TCP ``port`` and the processes holding them.

    Prints :data:`LISTEN_MARK`, ``tables=N`` (how many of /proc/net/tcp, tcp6 were readable),
    then ``sock ADDRESS_HEX UID INODE`` per listening socket, ``find=missing`` when ``find`` is
    missing, and ``owner INODE PID SID CHAIN ARGS`` per process with that socket open, where
    CHAIN is the PID and its ancestors, comma separated. Another user's processes are not
    readable without root: their sockets show no owner (only the socket's uid).
    """
    hexport = f"{int(port):04X}"
    return (
        f"echo {LISTEN_MARK}; n=0; for t in /proc/net/tcp /proc/net/tcp6; do "
        '[ -r "$t" ] && n=$((n+1)); done; echo "tables=$n"; '
        'socks=$(awk \'FNR > 1 && $4 == "0A" { k = split($2, a, ":"); '
        f'if (toupper(a[k]) == "{hexport}") print "sock", $2, $8, $10 }}\' '
        "/proc/net/tcp /proc/net/tcp6 2>/dev/null); "
        '[ -n "$socks" ] && echo "$socks"; '
        "command -v find >/dev/null 2>&1 || echo find=missing; "
        "for i in $(echo \"$socks\" | awk '{ print $4 }'); do "
        'for f in $(find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\\[$i\\]" 2>/dev/null); do '
        "p=${f#/proc/}; p=${p%%/*}; a=$p; c=; sid=; "
        'while [ -n "$a" ] && [ "$a" -gt 0 ] 2>/dev/null; do c="$c${c:+,}$a"; '
        's=; read -r s < "/proc/$a/stat" 2>/dev/null || break; s=${s##*) }; set -- $s; '
        '[ -n "$sid" ] || sid=$4; a=$2; done; '
        "args=$(tr '\\000\\n\\t' '   ' < \"/proc/$p/cmdline\" 2>/dev/null); "
        'echo "owner $i $p ${sid:-?} $c $args"; done; done; true'
    )


@dataclass(frozen=True)
class PortSocket:
    """One socket listening on the port: its local address, its owner's uid, its inode."""

    address: str
    uid: int | None
    inode: int


@dataclass(frozen=True)
class SocketOwner:
    """A process holding a listening socket open: its session and its ancestry."""

    inode: int
    pid: int
    sid: int | None
    chain: tuple[int, ...]  # the PID itself, then its parent, grandparent, ...
    args: str


@dataclass(frozen=True)
class PortListeners:
    """What :func:`listeners_command` saw. ``readable``: the socket tables could be read."""

    port: int
    readable: bool
    sockets: tuple[PortSocket, ...] = ()
    owners: tuple[SocketOwner, ...] = ()
    find_missing: bool = False

    def owners_of(self, inode: int) -> list[SocketOwner]:
        return [o for o in self.owners if o.inode == inode]


def parse_listeners(text: str, port: int) -> PortListeners | None:
    """Parse :func:`listeners_command` output (what follows :data:`LISTEN_MARK` in ``text``).
    None when the output holds no such section (the command did not run)."""
    head, sep, body = text.partition(LISTEN_MARK + "\n")
    if not sep:
        return None
    tables = 0
    sockets: list[PortSocket] = []
    owners: list[SocketOwner] = []
    find_missing = False
    for line in body.splitlines():
        parts = line.split(" ", 5)
        if line.startswith("tables=") and line[7:].strip().isdigit():
            tables = int(line[7:].strip())
        elif line.strip() == "find=missing":
            find_missing = True
        elif parts[0] == "sock" and len(parts) >= 4 and parts[3].isdigit():
            hexaddr = parts[1].rsplit(":", 1)[0]
            addr = _proc_address(hexaddr)
            uid = int(parts[2]) if parts[2].isdigit() else None
            sockets.append(PortSocket(addr or hexaddr, uid, int(parts[3])))
        elif parts[0] == "owner" and len(parts) >= 5 and parts[1].isdigit() and parts[2].isdigit():
            chain = tuple(int(x) for x in parts[4].split(",") if x.isdigit())
            sid = int(parts[3]) if parts[3].isdigit() else None
            args = " ".join(parts[5].split()) if len(parts) > 5 else ""
            owner = SocketOwner(int(parts[1]), int(parts[2]), sid, chain, args)
            if owner not in owners:
                owners.append(owner)
    return PortListeners(port, tables > 0, tuple(sockets), tuple(owners), find_missing)
