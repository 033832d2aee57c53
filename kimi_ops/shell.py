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


def one_line(command: str) -> str:
    """``command`` with the newline variable defined if it uses it; raises if multi-line."""
    if "\n" in command:
        raise ValueError("kimi-ops never sends a multi-line command inline")
    if f"${NL_VAR}" in command and not command.startswith(NL_PRELUDE):
        return NL_PRELUDE + command
    return command
