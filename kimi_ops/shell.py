"""Quoting for one-line shell commands, including values that hold newlines.

``shlex.quote`` keeps a newline inside its quotes, which would make the command multi-line.
:func:`quote` writes each newline as ``"$kimi_ops_nl"`` instead, and :func:`one_line` prepends
the definition of that variable to a command that uses it, so any string (a model path with a
newline in it, say) travels as one line and arrives byte for byte.
"""

from __future__ import annotations

import shlex

NL_VAR = "kimi_ops_nl"
#: Defines $kimi_ops_nl as a single newline (command substitution strips trailing newlines,
#: hence the dot).
NL_PRELUDE = f"{NL_VAR}=$(printf '\\n.'); {NL_VAR}=${{{NL_VAR}%.}}; "


def quote(value: object) -> str:
    """Like shlex.quote, but the result never contains a newline."""
    text = str(value)
    if "\n" not in text:
        return shlex.quote(text)
    return f'"${NL_VAR}"'.join(shlex.quote(part) if part else "" for part in text.split("\n"))


#: Characters ANSI-C quoting ($'...') writes as an escape.
_ANSI_C = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def file_quote(value: object) -> str:
    """A value for one ``NAME=value`` line of a file bash sources (the 0600 server.env): as
    shlex.quote, but a value with a newline or another control character (a PEM key) is
    written in bash's ANSI-C quoting, ``$'...\\n...'``, so the line stays one line and needs no
    helper variable (``$kimi_ops_nl`` is defined only in one-line commands)."""
    text = str(value)
    if not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return shlex.quote(text)
    out = []
    for c in text:
        if c in _ANSI_C:
            out.append(_ANSI_C[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def one_line(command: str) -> str:
    """``command`` with the newline variable defined if it uses it; raises if multi-line."""
    if "\n" in command:
        raise ValueError("kimi-ops never sends a multi-line command inline")
    if f"${NL_VAR}" in command and not command.startswith(NL_PRELUDE):
        return NL_PRELUDE + command
    return command


#: Seconds between the SIGTERM coreutils ``timeout`` sends and its SIGKILL.
KILL_AFTER = 5


def with_timeout(command: str, seconds: float) -> str:
    """``command`` run by ``bash -c`` under coreutils ``timeout``: after ``seconds`` the host
    itself ends it (SIGTERM to its process group, SIGKILL :data:`KILL_AFTER` s later), so a
    command blocked on a read (a FIFO, a hung NFS mount) does not outlive the step. Exit status
    124 (or 137 after the SIGKILL) says it was ended. A server started inside with ``setsid`` is
    in its own process group and is not touched."""
    return f"timeout -k {KILL_AFTER} {seconds:g} bash -c {quote(command)}"


def without_timeout(command: str) -> str:
    """The command :func:`with_timeout` wrapped (unchanged if it is not wrapped)."""
    if not command.startswith("timeout -k "):
        return command
    parts = shlex.split(command)
    return parts[6] if len(parts) == 7 and parts[4:6] == ["bash", "-c"] else command
