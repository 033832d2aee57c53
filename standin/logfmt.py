"""Log output in vLLM's formats: process-prefixed logger lines, raw stderr, tqdm bars."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

_OUT_LOCK = threading.Lock()


def write_out(stream: Any, text: str) -> None:
    with _OUT_LOCK:
        try:
            if stream is sys.stderr:
                sys.stdout.flush()
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass


def plain(text: str, stream: Any = None, end: str = "\n") -> None:
    write_out(sys.stdout if stream is None else stream, text + end)


class Role:
    """One emulated vLLM process; its lines start with '(NAME pid=N) '."""

    def __init__(self, name: str, pid: int, prefixed: bool = True) -> None:
        self.name = name
        self.pid = pid
        self.prefix = f"({name} pid={pid}) " if prefixed else ""

    def log(self, level: str, src: str, msg: str) -> None:
        """A vLLM logger line; every line of a multi-line message repeats the header."""
        head = f"{self.prefix}{level} {time.strftime('%m-%d %H:%M:%S')} [{src}] "
        write_out(sys.stdout, "".join(head + part + "\n" for part in msg.split("\n")))

    def info(self, src: str, msg: str) -> None:
        self.log("INFO", src, msg)

    def warning(self, src: str, msg: str) -> None:
        self.log("WARNING", src, msg)

    def error(self, src: str, msg: str) -> None:
        self.log("ERROR", src, msg)

    def uvicorn(self, msg: str) -> None:
        write_out(sys.stdout, f"{self.prefix}INFO:     {msg}\n")

    def raw(self, text: str) -> None:
        """Unformatted stderr text (a traceback); vLLM still prefixes every line."""
        write_out(sys.stderr, "".join(f"{self.prefix}{line}\n" for line in text.split("\n")))


GIB = 1024**3


def _hms(seconds: float) -> str:
    m, s = divmod(max(0, int(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_text(desc: str, n: int, total: int, elapsed: float, bar: bool = False) -> str:
    pct = int(100 * n / total) if total else 100
    if n == 0 or elapsed <= 0:
        rate, remaining = "?it/s", "?"
    else:
        per_s = n / elapsed
        rate = f"{per_s:.2f}it/s" if per_s >= 1 else f"{1 / per_s:.2f}s/it"
        remaining = _hms((total - n) / per_s)
    stats = f"{n}/{total} [{_hms(elapsed)}<{remaining}, {rate}]"
    if bar:
        filled = int(10 * n / total) if total else 10
        return f"{desc}: {pct:3d}%|{'█' * filled}{' ' * (10 - filled)}| {stats}"
    return f"{desc}: {pct:3d}% Completed | {stats}"
