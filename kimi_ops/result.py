"""Step results, reported the way Ansible does: ok / changed / skipped / failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .printable import one_line, printable


def clip(text: str, limit: int = 300) -> str:
    """``text`` cut to about ``limit`` characters for a one-line report, keeping its head and its
    tail: a tool's message names what it did first and why it failed last ("mv: cannot move
    '<long path>' to '<long path>': Operation not permitted"), so the middle goes."""
    if len(text) <= limit:
        return text
    tail = limit * 2 // 3
    return f"{text[: limit - tail - 5]} ... {text[-tail:]}"


class Status(str, Enum):
    OK = "ok"  # checked, nothing needed doing
    CHANGED = "changed"  # the host was changed
    SKIPPED = "skipped"  # not run, with the reason
    FAILED = "failed"  # with the step, the command, its stderr and a hint

    def __str__(self) -> str:  # "ok", not "Status.OK"
        return self.value


@dataclass(frozen=True)
class StepResult:
    """What one step did. ``message`` is one line; ``lines`` are extra detail lines."""

    step: str
    status: Status
    message: str
    lines: tuple[str, ...] = ()
    command: str = ""
    stderr: str = ""
    hint: str = ""
    diff: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step": self.step,
            "status": self.status.value,
            "message": self.message,
        }
        for key in ("command", "stderr", "hint", "diff"):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.lines:
            out["lines"] = list(self.lines)
        if self.data:
            out["data"] = self.data
        return out


def ok(step: str, message: str, **kw: Any) -> StepResult:
    return StepResult(step, Status.OK, message, **kw)


def changed(step: str, message: str, **kw: Any) -> StepResult:
    return StepResult(step, Status.CHANGED, message, **kw)


def skipped(step: str, reason: str, **kw: Any) -> StepResult:
    return StepResult(step, Status.SKIPPED, reason, **kw)


def failed(step: str, message: str, **kw: Any) -> StepResult:
    return StepResult(step, Status.FAILED, message, **kw)


def format_result(result: StepResult, *, host: str | None = None) -> str:
    """One Ansible-like block: ``changed: [host] kill-stale: ended 3 processes`` + detail lines.

    Every field is shown through :mod:`kimi_ops.printable` (a log line, an argv, a config.json
    string may hold terminal control sequences): the message and each detail line stay one line
    each, so none can start a forged line of its own."""
    where = f" [{one_line(host)}]" if host else ""
    head = f"{result.status.value}:{where} {one_line(result.step)}: {one_line(result.message)}"
    out = [head]
    out.extend(f"    {one_line(line)}" for line in result.lines)
    if result.failed:
        if result.command:
            out.append(f"    command: {one_line(result.command)}")
        if result.stderr.strip():
            out.append("    stderr:")
            stderr = printable(result.stderr).rstrip().split("\n")[-20:]
            out.extend(f"      {line}" for line in stderr)
        if result.hint:
            out.append(f"    hint: {printable(result.hint)}")
    if result.diff:
        out.extend(f"    {line}" for line in printable(result.diff).rstrip("\n").split("\n"))
    return "\n".join(out)
