"""Shell words for host paths in fact commands: a leading ``~`` becomes ``$HOME``."""

from __future__ import annotations

from ..shell import quote as shell_quote

#: Shell variable holding a newline; gather_command defines it so quoted words stay one line.


def sh_quote(value: str) -> str:
    """:func:`kimi_ops.shell.quote`: newlines become ``"$kimi_ops_nl"`` (one-line words).

    Valid inside :func:`gather_command`'s output, which defines that variable.
    """
    return shell_quote(value)


def _sh_path(path: str) -> str:
    """A shell word for ``path``; a leading ``~``/``~/`` becomes ``"$HOME"``, the rest quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"/' + sh_quote(rest) if rest else '"$HOME"/'
    return sh_quote(path)


def _join(*parts: str) -> str:
    """Join path parts (already shell words or plain names) for the shell: ``a/'b'``."""
    return "/".join(parts)
