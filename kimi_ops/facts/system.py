"""Host-setting facts: systemd-logind's RemoveIPC and the pid in the server's pidfile."""

from __future__ import annotations


def parse_logind_remove_ipc(text: str) -> bool | None:
    """The effective ``RemoveIPC=`` of systemd-logind from its concatenated config files.

    Pass /etc/systemd/logind.conf followed by its drop-ins (logind.conf.d/*.conf) in the order
    systemd reads them: the last assignment wins. Comments (``#``/``;``) are ignored. Returns
    None when no file sets it, in which case the systemd default applies, and that default is
    ``yes``: logind removes a normal (non-system) user's SysV IPC objects and POSIX shared
    memory (/dev/shm) when the user's last session ends.
    """
    value: bool | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, sep, raw = stripped.partition("=")
        if not sep or key.strip() != "RemoveIPC":
            continue
        word = raw.strip().strip('"').lower()
        if word in ("yes", "true", "on", "1"):
            value = True
        elif word in ("no", "false", "off", "0"):
            value = False
        elif word == "":
            value = None  # an empty assignment resets to the default
    return value


def parse_pidfile(text: str) -> int | None:
    """The pid in a pidfile (first token), None when absent or not a number."""
    token = text.strip().split(maxsplit=1)
    return int(token[0]) if token and token[0].isdigit() else None
