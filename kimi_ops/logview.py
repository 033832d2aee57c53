"""Showing log text to a person: every line capped at a number of characters (pure).

A vLLM log can hold a line of megabytes (a traceback with a tensor repr, a tqdm bar that never
printed a newline). :class:`LineCapper` passes text through in pieces, as it arrives, and keeps
at most ``limit`` characters of each line, marking the cut; its cost is linear in the input.
"""

from __future__ import annotations

MARK = " …[line cut at {limit} chars]"


class LineCapper:
    """Streaming: ``feed`` pieces of text, get back what to show (line ends kept)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self._column = 0  # characters of the current line seen so far
        self._cut = False  # the current line was already cut (its mark shown)

    def feed(self, text: str) -> str:
        out: list[str] = []
        start = 0
        while start <= len(text):
            end = text.find("\n", start)
            piece = text[start:] if end < 0 else text[start:end]
            room = self.limit - self._column
            if len(piece) <= room:
                out.append(piece)
            else:
                if room > 0:
                    out.append(piece[:room])
                if not self._cut:
                    out.append(MARK.format(limit=self.limit))
                    self._cut = True
            self._column += len(piece)
            if end < 0:
                break
            out.append("\n")
            self._column, self._cut = 0, False
            start = end + 1
        return "".join(out)


def cap_lines(text: str, limit: int) -> str:
    """``text`` with every line cut to ``limit`` characters (see :class:`LineCapper`)."""
    return LineCapper(limit).feed(text)


def host_byte_limit(limit: int) -> int:
    """Bytes per line worth sending from the host for a ``limit``-character cap: a UTF-8
    character is at most 4 bytes, and one more character shows that the line goes on."""
    return 4 * (limit + 1)
