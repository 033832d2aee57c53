"""Printing step results and live progress, Ansible style."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from kimi_ops.printable import one_line, printable
from kimi_ops.result import StepResult, format_result


def write_terminal(stream: TextIO, text: str) -> None:
    """Write fab's own terminal sequences (``\\r ESC[K``, cursor moves): not escaped by a
    :class:`tasks.masking.MaskingStream` (still masked); the text they draw is escaped by the
    caller (:func:`kimi_ops.printable.one_line`). A plain stream takes them as they are."""
    getattr(stream, "write_terminal", stream.write)(text)


class PipeSafeStream:
    """A stream that outlives its reader (``fab status | head -1``): at the first
    BrokenPipeError its file descriptor is pointed at /dev/null (what was not read is dropped,
    as the reader wanted) and the task goes on, so the exit code the shell sees is the task's
    (status: the state's), not 1 with a BrokenPipeError traceback."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def _gone(self) -> None:
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())  # later writes and the final flush succeed
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def pipe_safe_stdout() -> None:
    """Make the process's own stdout a :class:`PipeSafeStream` (once; a stdout replaced by
    someone else, such as pytest's capture, is left alone)."""
    if sys.stdout is sys.__stdout__ and sys.stdout is not None:
        sys.stdout = PipeSafeStream(sys.stdout)  # type: ignore[assignment]


class FleetBoard:
    """On a terminal, one live status line per host, redrawn in place (thread-safe)."""

    def __init__(self, hosts: Sequence[str], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.hosts = list(hosts)
        self.lines = {h: "waiting" for h in self.hosts}
        self._lock = threading.Lock()
        self._drawn = 0

    def update(self, host: str, text: str) -> None:
        with self._lock:
            self.lines[host] = one_line(printable(text).split("\n", 1)[0])
            self._draw()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((120, 24)).columns - 1
        names = {h: one_line(h) for h in self.hosts}
        name_width = max(len(n) for n in names.values())
        out = [f"\x1b[{self._drawn}F"] if self._drawn else []
        for h in self.hosts:
            out.append("\x1b[2K" + f"{names[h]:<{name_width}}  {self.lines[h]}"[:width] + "\n")
        write_terminal(self.stream, "".join(out))
        self.stream.flush()
        self._drawn = len(self.hosts)


class Reporter:
    """Prints each step's result as it finishes; on a terminal, progress is one live line.

    With a :class:`FleetBoard`, results and progress update this host's line on the board
    instead (the full text of a failure is printed after the board, by the fleet runner).
    """

    def __init__(
        self,
        host: str | None = None,
        *,
        stream: TextIO | None = None,
        quiet: bool = False,
        board: FleetBoard | None = None,
    ) -> None:
        self.host = host
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.board = board
        self.results: list[StepResult] = []
        self._live = False
        self._last_progress = ""

    @property
    def tty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def _end_live(self) -> None:
        if self._live:
            write_terminal(self.stream, "\r\x1b[K")
            self._live = False

    def result(self, res: StepResult) -> StepResult:
        self.results.append(res)
        if self.board is not None and self.host:
            self.board.update(self.host, f"{res.status.value}: {res.step}: {res.message}")
        elif not self.quiet:
            self._end_live()
            print(format_result(res, host=self.host), file=self.stream, flush=True)
        return res

    def info(self, text: str) -> None:
        if self.board is not None and self.host:
            self.board.update(self.host, text)
        elif not self.quiet:
            self._end_live()
            where = f"[{self.host}] " if self.host else ""
            print(f"{where}{text}", file=self.stream, flush=True)

    def progress(self, step: str, text: str) -> None:
        """A progress line: rewritten in place on a terminal, printed when it changes otherwise."""
        if self.quiet or text == self._last_progress:
            return
        if self.board is not None and self.host:
            self._last_progress = text
            self.board.update(self.host, f"{step}: {text}")
            return
        self._last_progress = text
        where = f"[{self.host}] " if self.host else ""
        line = one_line(f"{where}{step}: {text}")
        if self.tty:
            write_terminal(self.stream, "\r\x1b[K" + line[:200])
            self.stream.flush()
            self._live = True
        else:
            print(line, file=self.stream, flush=True)

    def summary(self) -> dict[str, int]:
        counts = {"ok": 0, "changed": 0, "skipped": 0, "failed": 0}
        for r in self.results:
            counts[r.status.value] += 1
        return counts

    def recap(self) -> None:
        if self.quiet or self.board is not None:  # a fleet prints one recap for all hosts
            return
        self._end_live()
        counts = self.summary()
        where = self.host or "local"
        parts = " ".join(f"{k}={v}" for k, v in counts.items())
        print(f"RECAP {where}: {parts}", file=self.stream, flush=True)

    def as_json(self, extra: dict[str, Any] | None = None) -> str:
        data: dict[str, Any] = {"host": self.host, "results": [r.to_dict() for r in self.results]}
        data.update(extra or {})
        return json.dumps(data, indent=2)
