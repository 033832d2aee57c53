"""Port facts: listening TCP ports from /proc/net/tcp and their owners from ``ss -Hltnp``."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator


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
