"""A throwaway stand-in deployment for the e2e tests: model dir, profile, cleanup by PID."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_ops.checkpoint import checkpoint_files
from tasks.demo import chat_completion

from .harness import (
    FabRun,
    SshdHost,
    base_config,
    deep_merge,
    free_port,
    kill_pid_tree_started_by_test,
    pid_alive,
    read_pidfile,
    run_fab,
)


@dataclass
class Deployment:
    """One stand-in deployment on a test sshd. ``fab(...)`` runs the real fab command line."""

    sshd: SshdHost | None
    root: Path
    port: int
    overrides: dict[str, Any] = field(default_factory=dict)
    started: list[int] = field(default_factory=list)

    @property
    def model(self) -> Path:
        return self.root / "Kimi-K2.5-NVFP4"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def shm_dir(self) -> Path:
        return self.root / "shm"

    def config(self, **kimi: Any) -> dict[str, Any]:
        base = base_config(self.sshd) if self.sshd else {"kimi": {}}
        ours = {
            "kimi": {
                "engine": "standin",
                "python": sys.executable,
                "model": str(self.model),
                "run_dir": str(self.run_dir),
                "shm_dir": str(self.shm_dir),
                "host": "127.0.0.1",
                "port": self.port,
                "startup_timeout": 60,
                "poll_interval": 0.3,
                "grace_seconds": 3,
                "secret_env": [],
                "standin": {"load_seconds": 0.5},
            }
        }
        return deep_merge(base, ours, {"kimi": self.overrides}, {"kimi": kimi})

    def fab(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None, **kimi: Any
    ) -> FabRun:
        run = run_fab(self.sshd, *args, config=self.config(**kimi), timeout=timeout, env=env)
        self.remember_server()
        return run

    def pidfile_pid(self) -> int | None:
        return read_pidfile(self.run_dir / "server.pid")

    def remember_server(self) -> None:
        pid = self.pidfile_pid()
        if pid is not None and pid not in self.started:
            self.started.append(pid)

    def chat(self, content: str = "Hello!", api_key: str | None = None) -> dict[str, Any]:
        return chat_completion(self.port, "kimi-k2.5", content, max_tokens=16, api_key=api_key)

    def log_text(self) -> str:
        try:
            return (self.run_dir / "current.log").read_text(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        """End the servers this test's deploys started (by PID; each is a setsid leader)."""
        self.remember_server()
        for pid in self.started:
            if pid_alive(pid):
                kill_pid_tree_started_by_test(pid)


def make_deployment(sshd: SshdHost | None, tmp_path: Path, **overrides: Any) -> Deployment:
    dep = Deployment(sshd, tmp_path, free_port(), dict(overrides))
    dep.model.mkdir()
    dep.shm_dir.mkdir()
    for name, text in checkpoint_files().items():
        (dep.model / name).write_text(text)
    return dep
