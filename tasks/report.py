"""Printing step results and live progress, Ansible style."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from kimi_ops.result import StepResult, format_result


class Reporter:
    """Prints each step's result as it finishes; on a terminal, progress is one live line."""

    def __init__(
        self, host: str | None = None, *, stream: TextIO | None = None, quiet: bool = False
    ) -> None:
        self.host = host
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.results: list[StepResult] = []
        self._live = False
        self._last_progress = ""

    @property
    def tty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def _end_live(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[K")
            self._live = False

    def result(self, res: StepResult) -> StepResult:
        self.results.append(res)
        if not self.quiet:
            self._end_live()
            print(format_result(res, host=self.host), file=self.stream, flush=True)
        return res

    def info(self, text: str) -> None:
        if not self.quiet:
            self._end_live()
            where = f"[{self.host}] " if self.host else ""
            print(f"{where}{text}", file=self.stream, flush=True)

    def progress(self, step: str, text: str) -> None:
        """A progress line: rewritten in place on a terminal, printed when it changes otherwise."""
        if self.quiet or text == self._last_progress:
            return
        self._last_progress = text
        where = f"[{self.host}] " if self.host else ""
        line = f"{where}{step}: {text}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:200])
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
        if self.quiet:
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
