"""Text from outside shown as text: control characters cannot act on the user's terminal.

A server log, another process's argv, a checkpoint's ``config.json``, a hostname or a tool's
stderr may hold terminal control sequences (``ESC c`` resets and clears the screen, ``ESC[1A``
``ESC[2K`` erase the line above, OSC sets the window title or the clipboard, backspaces and a
lone ``\\r`` overwrite what is shown, bidi overrides reorder it). Everything fab prints passes
:func:`printable`: SGR colours are dropped (they show nothing), ``\\r\\n`` becomes ``\\n``, and
every other control character is shown escaped (``\\x1b``, ``\\r``, ``\\x08``, ``\\u202e``), the
way ``less`` and ``ps`` show them, so it is visible and does nothing. :func:`one_line` also
escapes ``\\n`` and ``\\t``, for a field that must stay on its line (an argv, a message).
"""

from __future__ import annotations

import re

# C0 controls but TAB and LF, DEL, C1 controls, and the bidi embeddings/overrides/isolates.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_BAD = re.compile(f"[{_CONTROLS}]")
_BAD_OR_BREAK = re.compile(f"[{_CONTROLS}\t\n]")
# Select Graphic Rendition (colours, bold): ESC [ params m. Dropped: it has nothing to show.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: newlines and tabs kept, colours dropped, every
    other control character shown escaped. Idempotent; text without control characters is
    returned as it is (one scan)."""
    if not _BAD.search(text):
        return text
    text = _SGR.sub("", text).replace("\r\n", "\n")
    return _BAD.sub(_escape, text)


def one_line(text: str) -> str:
    """:func:`printable`, with ``\\n`` and ``\\t`` escaped too: the text stays one line, so a
    newline in an argv or a message cannot start a line of its own."""
    if not _BAD_OR_BREAK.search(text):
        return text
    return _BAD_OR_BREAK.sub(_escape, printable(text))
