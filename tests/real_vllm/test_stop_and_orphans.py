"""Stop is not a crash, and orphans are found and ended, on the real engine.

- SIGTERM to the API server only (an operator's `kill PID`): the log reads healthy, then
  stopped; never `engine_dead_other`.
- kill -9 of the API server: VLLM::EngineCore, VLLM::Worker and the resource_tracker live on,
  re-parented. `fab status` reports them and exits non-zero; `fab kill-stale` ends all of them,
  and leaves alone a decoy tree with the same process titles that this deployment does not own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tasks.engine import Engine

from .server import RealDeployment, ServerTree, proc_title, record_tree, shm_names, wait_until

pytestmark = pytest.mark.real_vllm


def test_sigterm_to_the_api_server_only_is_a_stop(
    deployment: Callable[..., RealDeployment],
) -> None:
    dep = deployment("tiny-llama")
    tree = dep.serve()
    owned = set(dep.shm_owned)

    os.kill(tree.api, signal.SIGTERM)  # what an operator's `kill PID` does
    assert wait_until(lambda: not tree.alive(), 60), "alive after SIGTERM:\n" + tree.describe()
    assert wait_until(lambda: not (owned & shm_names()), 10), sorted(owned & shm_names())

    diag = dep.diagnose_json()
    shown = json.dumps(diag, indent=2)
    assert diag["label"] == "healthy", shown
    assert diag.get("lifecycle", diag["facts"].get("lifecycle")) == "stopped", shown

    status = dep.fab("status")
    assert status.returncode != 0, "status of a stopped server exited 0\n" + status.describe()
    assert "stopped" in status.output, status.describe()
    assert "engine_dead_other" not in status.output, status.describe()

    verify = dep.fab("verify")
    assert verify.returncode != 0, verify.describe()
    assert "stopped" in verify.output, verify.describe()
    assert "engine_dead_other" not in verify.output, verify.describe()


#: A decoy with the real orphans' titles: a re-parented `VLLM::EngineCore` with a child
#: `VLLM::Worker`, and a re-parented `multiprocessing.resource_tracker` (vLLM's command line).
#: It is not this deployment's (no KIMI_OPS_* in its environment, its own session).
#: EngineCore and Worker block SIGTERM/SIGINT/SIGHUP and log each one they get, with the
#: sender's process chain (so a test can tell whose kill it was), then keep running: on a shared
#: machine another kimi-ops checkout's kill-stale may end orphans by title (it did: a
#: `fab demo` of an older checkout). Only SIGKILL ends them.
DECOY = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    import setproctitle

    LOG = sys.argv[1]
    SIGS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}

    def chain(pid):
        out = []
        while pid > 1 and len(out) < 30:
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ")
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                break
            out.append([pid, cmd.decode(errors="replace")[:200]])
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        return out

    def log_signals(title):
        while True:
            info = signal.sigwaitinfo(SIGS)
            entry = {"at": time.time(), "title": title, "pid": os.getpid(),
                     "signal": info.si_signo, "sender": info.si_pid,
                     "chain": chain(info.si_pid)}
            with open(LOG, "a") as fh:
                fh.write(json.dumps(entry) + "\\n")

    if os.fork():  # the "API server" leaves at once: its children are re-parented
        os._exit(0)
    r, w = os.pipe()  # the tracker reads this pipe until EOF, like vLLM's
    subprocess.Popen(
        [sys.executable, "-B", "-c",
         f"from multiprocessing.resource_tracker import main;main({r})"],
        pass_fds=(r,),
    )
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGS)
    if os.fork() == 0:
        setproctitle.setproctitle("VLLM::Worker")
        log_signals("VLLM::Worker")
    setproctitle.setproctitle("VLLM::EngineCore")
    print(os.getpid(), flush=True)
    log_signals("VLLM::EngineCore")
    """
)


@dataclass
class Decoys:
    tree: ServerTree
    log: Path

    def signals(self) -> list[dict[str, object]]:
        try:
            lines = self.log.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture
def decoy_tree(engine: Engine, tmp_path: Path) -> Iterator[Callable[[], Decoys]]:
    """Start (on demand) a decoy orphan tree; ended by PID (SIGKILL) afterwards."""
    started: list[Decoys] = []

    def start() -> Decoys:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_OPS_")}
        script = tmp_path / "decoy.py"
        script.write_text(DECOY)
        log = tmp_path / "decoy-signals.jsonl"
        proc = subprocess.Popen(
            [str(engine.python), str(script), str(log)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        core = int(proc.stdout.readline())
        proc.wait(10)
        titles = ("VLLM::EngineCore", "VLLM::Worker", "multiprocessing.resource_tracker")

        def complete() -> bool:  # the forked Worker sets its title a moment after the fork
            tree = record_tree(core)
            return all(tree.by_title(t) for t in titles)

        assert wait_until(complete, 20), record_tree(core).describe()
        decoys = Decoys(record_tree(core), log)
        started.append(decoys)
        return decoys

    try:
        yield start
    finally:
        for decoys in started:
            for pid in decoys.tree.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def our_session(entry: dict[str, object], sshd_pid: int) -> bool:
    """Did this signal come from a process under our sshd (or from one gone before we looked)?"""
    chain = entry.get("chain") or []
    assert isinstance(chain, list)
    return not chain or any(pid == sshd_pid for pid, _ in chain)


def test_kill9_of_the_api_server_leaves_orphans_that_kill_stale_ends(
    deployment: Callable[..., RealDeployment], decoy_tree: Callable[[], Decoys]
) -> None:
    dep = deployment("tiny-llama")
    tree = dep.serve()
    decoy = decoy_tree()
    decoys = decoy.tree
    assert decoys.by_title("VLLM::EngineCore") and decoys.by_title("VLLM::Worker")
    assert decoys.by_title("multiprocessing.resource_tracker"), decoys.describe()

    os.kill(tree.api, signal.SIGKILL)
    assert wait_until(lambda: tree.api not in tree.alive(), 10)
    orphans = [pid for pid in tree.pids() if pid != tree.api]
    assert wait_until(lambda: all(p in tree.alive() for p in orphans), 5)
    titles = {pid: proc_title(pid) for pid in orphans}
    assert any("VLLM::EngineCore" in t for t in titles.values()), titles
    assert any("VLLM::Worker" in t for t in titles.values()), titles
    assert any("resource_tracker" in t for t in titles.values()), titles
    for pid in orphans:  # and whatever they started since
        tree.members.update(record_tree(pid).members)
    print("orphans after kill -9 of the API server:\n" + tree.describe())

    status = dep.fab("status")
    assert status.returncode != 0, "status with orphans exited 0\n" + status.describe()
    assert "orphan" in status.output.lower(), status.describe()
    (core,) = tree.by_title("VLLM::EngineCore")
    assert str(core) in status.output, status.describe()

    ended = dep.fab("kill-stale")
    assert ended.returncode == 0, ended.describe()
    assert wait_until(lambda: not tree.alive(), 30), "left alive:\n" + tree.describe()

    # The decoys: no signal from this kill-stale (its remote shell runs under our sshd), and
    # alive unless another program on this shared machine ended them (its signal is logged).
    ours = [s for s in decoy.signals() if our_session(s, dep.sshd.pid)]
    foreign = [s for s in decoy.signals() if not our_session(s, dep.sshd.pid)]
    shown = f"{decoys.describe()}\nsignals: {json.dumps(decoy.signals(), indent=1)}\n"
    assert not ours, "kill-stale signalled processes it does not own:\n" + shown + ended.describe()
    if foreign:
        print("note: another program signalled the decoys:\n" + shown, file=sys.stderr)
    else:
        assert sorted(decoys.alive()) == sorted(decoys.pids()), (
            "decoys ended without a logged signal:\n" + shown + ended.describe()
        )
    print(f"kill-stale: {ended.seconds:.1f} s\n{ended.stdout}", file=sys.stderr)

    after = dep.fab("status")
    assert "orphan" not in after.output.lower() or "0 orphan" in after.output.lower(), (
        after.describe()
    )
