"""One real-engine deployment for the ``real_vllm`` tier: profile, fab runs, process tree, shm.

Every process this module signals was started by the test: the server tree is read from /proc
starting at the PID the deployment's own pidfile names (a setsid leader: pid == pgid), and it
is recorded while the API server is alive, so re-parented orphans are still known by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.harness import (
    FabRun,
    SshdHost,
    base_config,
    deep_merge,
    descendants,
    free_port,
    pid_alive,
    read_pidfile,
    run_fab,
)

from tasks.demo import chat_completion
from tasks.engine import Engine, cpu_profile

SHM_DIR = Path("/dev/shm")
SHM_PREFIXES = ("psm_", "sem.mp-")
#: Seconds a fab deploy of a tiny model may take (cold start ~100 s on 2 cores, plus slack for
#: a machine shared with other work).
DEPLOY_TIMEOUT = 600


def shm_names() -> set[str]:
    """Names of vLLM's shared-memory files in /dev/shm now (any owner)."""
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(SHM_PREFIXES)}
    except OSError:
        return set()


def mapped_shm(pids: Iterable[int]) -> set[str]:
    """psm_* / sem.mp-* files in /dev/shm that these processes have mapped (/proc/PID/maps)."""
    out: set[str] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
            path = path.removesuffix(" (deleted)")
            if path.startswith(str(SHM_DIR) + "/"):
                name = path[len(str(SHM_DIR)) + 1 :]
                if name.startswith(SHM_PREFIXES):
                    out.add(name)
    return out


def proc_title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


@dataclass
class ServerTree:
    """The process tree of one API server, as recorded while it ran."""

    api: int
    members: dict[int, str]  # pid -> command line / title (the API server included)

    def pids(self) -> list[int]:
        return list(self.members)

    def by_title(self, fragment: str) -> list[int]:
        return [pid for pid, title in self.members.items() if fragment in title]

    def alive(self) -> list[int]:
        return [pid for pid in self.members if pid_alive(pid)]

    def describe(self) -> str:
        return "\n".join(f"  {pid} {title[:120]}" for pid, title in self.members.items())


def record_tree(api: int) -> ServerTree:
    """The API server and its current descendants (EngineCore, Worker, resource_tracker)."""
    members = {api: proc_title(api)}
    for pid in descendants(api):
        members[pid] = proc_title(pid)
    return ServerTree(api, members)


def wait_until(predicate: Any, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@dataclass
class RealDeployment:
    """A tiny model served by the real engine through ``fab`` on the session's sshd."""

    sshd: SshdHost
    engine: Engine
    model: Path
    root: Path
    port: int = field(default_factory=free_port)
    extra: dict[str, Any] = field(default_factory=dict)
    trees: list[ServerTree] = field(default_factory=list)
    shm_before: set[str] = field(default_factory=set)
    shm_owned: set[str] = field(default_factory=set)

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    def config(self, **kimi: Any) -> dict[str, Any]:
        ours = cpu_profile(self.engine, self.model, port=self.port, run_dir=self.run_dir)
        return deep_merge(
            base_config(self.sshd), {"kimi": ours}, {"kimi": self.extra}, {"kimi": kimi}
        )

    def fab(self, *args: str, timeout: float = 180, **kimi: Any) -> FabRun:
        return run_fab(self.sshd, *args, config=self.config(**kimi), timeout=timeout)

    def deploy(self, *args: str, **kimi: Any) -> FabRun:
        """`fab deploy`; records the shm files and the process tree of the server it started."""
        if not self.shm_before:
            self.shm_before = shm_names()
        run = self.fab("deploy", *args, timeout=DEPLOY_TIMEOUT, **kimi)
        self.remember()
        return run

    def launch_past_preflight(self, **kimi: Any) -> list[FabRun]:
        """`fab upload-script`, `fab launch`, `fab verify`: start the engine even where deploy's
        preflight would refuse, so the real engine's own failure is diagnosed. Stops at the
        first run that fails; returns the runs made."""
        if not self.shm_before:
            self.shm_before = shm_names()
        runs = []
        for step in ("upload-script", "launch", "verify"):
            runs.append(self.fab(step, timeout=DEPLOY_TIMEOUT, **kimi))
            self.remember()
            if runs[-1].returncode != 0:
                break
        return runs

    def pidfile_pid(self) -> int | None:
        return read_pidfile(self.run_dir / "server.pid")

    def serve(self) -> ServerTree:
        """`fab deploy` to ready, then one real chat completion; the server's recorded tree."""
        run = self.deploy()
        assert run.returncode == 0, f"{run.describe()}\n--- server log ---\n{self.log_text()}"
        assert "ready" in run.output, run.describe()
        answer = self.chat("hello world", max_tokens=8)
        assert answer["model"] == "tiny", answer
        assert answer["usage"]["completion_tokens"] >= 1, answer
        assert isinstance(answer["choices"][0]["message"]["content"], str), answer
        print(f"deploy to ready: {run.seconds:.1f} s", file=sys.stderr)
        return self.tree()

    def remember(self) -> ServerTree | None:
        """Record (or refresh) the tree of the server the pidfile names, while it is alive."""
        pid = self.pidfile_pid()
        if pid is None or not pid_alive(pid):
            return None
        tree = record_tree(pid)
        for old in self.trees:
            if old.api == pid:
                old.members.update(tree.members)
                tree = old
                break
        else:
            self.trees.append(tree)
        new = shm_names() - self.shm_before
        self.shm_owned |= new & mapped_shm(tree.alive())
        return tree

    def tree(self) -> ServerTree:
        tree = self.remember()
        assert tree is not None, f"no live server: pidfile {self.pidfile_pid()}\n{self.log_text()}"
        return tree

    def chat(self, content: str = "hello world", max_tokens: int = 8) -> dict[str, Any]:
        return chat_completion(self.port, "tiny", content, max_tokens=max_tokens, timeout=120)

    def log_text(self) -> str:
        try:
            return (self.run_dir / "current.log").read_text(errors="replace")
        except OSError:
            return ""

    def diagnose_json(self) -> dict[str, Any]:
        run = self.fab("diagnose", "--json")
        assert run.returncode == 0, run.describe()
        return json.loads(run.stdout[run.stdout.index("{") :])

    def cleanup(self) -> None:
        """End every recorded process still alive (by PID), then remove the shm files this
        deployment's server created (only those, and only once its tree is gone)."""
        self.remember()
        for tree in self.trees:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                alive = tree.alive()
                for pid in alive:
                    signal_pid(pid, sig)
                if not alive or wait_until(lambda t=tree: not t.alive(), 15):
                    break
        if all(not t.alive() for t in self.trees):
            for name in self.shm_owned:
                with contextlib.suppress(FileNotFoundError):
                    (SHM_DIR / name).unlink()
