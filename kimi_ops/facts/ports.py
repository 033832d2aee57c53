"""Port facts: listening TCP ports from /proc/net/tcp and their owners from ``ss -Hltnp``."""

from __future__ import annotations

import re


def parse_proc_net_tcp(text: str) -> set[int]:
    """Listening TCP ports (state ``0A``) from /proc/net/tcp and/or /proc/net/tcp6 content."""
    ports: set[int] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[0].rstrip(":").isdigit():
            continue
        local, state = parts[1], parts[3]
        if state.upper() != "0A" or ":" not in local:
            continue
        try:
            ports.add(int(local.rsplit(":", 1)[1], 16))
        except ValueError:
            continue
    return ports


_SS_USER = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


def _ss_port(local: str) -> int | None:
    """The port of an ss local-address column (``0.0.0.0:8000``, ``[::]:8000``, ``*:8000``)."""
    port = local.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def parse_ss_listen_processes(text: str) -> dict[int, list[tuple[str, int]]]:
    """Port -> [(process name, pid), ...] from ``ss -Hltnp`` output.

    A listening port whose owner ss cannot show (another user's process when not root) maps to
    an empty list. Also accepts output with the ``State Recv-Q ...`` header.
    """
    out: dict[int, list[tuple[str, int]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "State":
            continue
        # Columns: State Recv-Q Send-Q Local:Port Peer:Port [Process]; -H drops the header.
        offset = 0 if parts[0].isdigit() else 1
        if len(parts) < offset + 4:
            continue
        port = _ss_port(parts[offset + 2])
        if port is None:
            continue
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
