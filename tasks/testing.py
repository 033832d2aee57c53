"""Test helpers (public API, as in Fabric): a scripted host that answers commands by pattern.

``ScriptedConnection`` looks like a ``fabric.Connection`` to :class:`tasks.host.Host`: each
``run`` is answered by the first rule whose regular expression matches the command (rules may
be queued so one pattern answers differently over time), every command is recorded, and SFTP
writes land in an in-memory file system. Use it to assert the commands a step issues and how
it handles each failure, without SSH::

    conn = ScriptedConnection()
    conn.on(r"^cat .*server.pid", stdout="self_pid=10\\n 1 0 1 init\\n")
    result = steps.kill_stale(Host(conn, profile), profile)
    assert not any("pkill" in c for c in conn.commands)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from invoke import Config, Result

from kimi_ops.shell import without_timeout

Responder = Callable[[str], "Reply"]


@dataclass
class Reply:
    stdout: str = ""
    stderr: str = ""
    exited: int = 0


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    replies: list[Reply | Responder]
    sticky: bool


class _FakeFile:
    def __init__(self, fs: dict[str, bytes], path: str, fail: BaseException | None) -> None:
        self.fs, self.path, self.fail = fs, path, fail
        fs[path] = b""

    def write(self, data: bytes) -> None:
        if self.fail is not None:
            raise self.fail
        self.fs[self.path] += data

    def __enter__(self) -> _FakeFile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class FakeSFTP:
    """In-memory SFTP: ``files`` maps path -> bytes, ``modes`` path -> mode."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}
        self.fail_write: BaseException | None = None

    def open(self, path: str, mode: str = "r") -> _FakeFile:
        return _FakeFile(self.files, path, self.fail_write)

    def chmod(self, path: str, mode: int) -> None:
        self.modes[path] = mode


class FakeClient:
    """Records what Host does to paramiko's SSHClient (host keys, policy)."""

    def __init__(self) -> None:
        self.policy: Any = None
        self.loaded: list[str] = []

    def set_missing_host_key_policy(self, policy: Any) -> None:
        self.policy = policy

    def load_host_keys(self, path: str) -> None:
        self.loaded.append(path)


@dataclass
class ScriptedConnection:
    """A stand-in for ``fabric.Connection`` driven by rules (see module docstring)."""

    host: str = "gpu-host"
    user: str = "root"
    port: int = 22
    connect_timeout: int | None = None
    default: Reply = field(default_factory=Reply)
    commands: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.config = Config()
        self.client = FakeClient()
        self._sftp = FakeSFTP()
        self._rules: list[_Rule] = []

    def on(
        self,
        pattern: str,
        *replies: Reply | Responder,
        stdout: str = "",
        stderr: str = "",
        exited: int = 0,
        sticky: bool = True,
    ) -> ScriptedConnection:
        """Answer commands matching ``pattern`` (re.search). With several ``replies`` they are
        used in turn; the last one repeats when ``sticky``."""
        queue: list[Reply | Responder] = list(replies) or [Reply(stdout, stderr, exited)]
        self._rules.append(_Rule(re.compile(pattern), queue, sticky))
        return self

    def run(self, command: str, **kwargs: Any) -> Result:
        command = without_timeout(command)  # rules match the command a step issued
        self.commands.append(command)
        for rule in self._rules:
            if rule.pattern.search(command) and rule.replies:
                item = rule.replies[0]
                if len(rule.replies) > 1 or not rule.sticky:
                    rule.replies.pop(0)
                reply = item(command) if callable(item) else item
                break
        else:
            reply = self.default
        return Result(
            stdout=reply.stdout, stderr=reply.stderr, exited=reply.exited, command=command
        )

    def sftp(self) -> FakeSFTP:
        return self._sftp

    def ran(self, pattern: str) -> list[str]:
        """Commands that matched ``pattern``."""
        return [c for c in self.commands if re.search(pattern, c)]
