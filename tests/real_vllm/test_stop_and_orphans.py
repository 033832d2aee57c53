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
#: `VLLM::Worker`, and a re-parented `multiprocessing.resource_tracker` (the same command line as
#: vLLM's). It is not this deployment's (no KIMI_OPS_* in its environment, its own session).
DECOY = textwrap.dedent(
    """
    import os, subprocess, sys, time
    import setproctitle

    if os.fork():  # the "API server" leaves at once: its children are re-parented
        os._exit(0)
    r, w = os.pipe()  # the tracker reads this pipe until EOF, like vLLM's
    subprocess.Popen(
        [sys.executable, "-B", "-c",
         f"from multiprocessing.resource_tracker import main;main({r})"],
        pass_fds=(r,),
    )
    setproctitle.setproctitle("VLLM::EngineCore")
    if os.fork() == 0:
        setproctitle.setproctitle("VLLM::Worker")
        time.sleep(900)
        os._exit(0)
    print(os.getpid(), flush=True)
    time.sleep(900)
    """
)


@pytest.fixture
def decoy_tree(engine: Engine, tmp_path: Path) -> Iterator[Callable[[], ServerTree]]:
    """Start (on demand) a decoy orphan tree; ended by PID afterwards."""
    started: list[ServerTree] = []

    def start() -> ServerTree:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_OPS_")}
        script = tmp_path / "decoy.py"
        script.write_text(DECOY)
        proc = subprocess.Popen(
            [str(engine.python), str(script)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        core = int(proc.stdout.readline())
        proc.wait(10)
        assert wait_until(lambda: len(record_tree(core).members) >= 3, 20)
        tree = record_tree(core)
        started.append(tree)
        return tree

    try:
        yield start
    finally:
        for tree in started:
            for pid in tree.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_kill9_of_the_api_server_leaves_orphans_that_kill_stale_ends(
    deployment: Callable[..., RealDeployment], decoy_tree: Callable[[], ServerTree]
) -> None:
    dep = deployment("tiny-llama")
    tree = dep.serve()
    decoys = decoy_tree()
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
    assert sorted(decoys.alive()) == sorted(decoys.pids()), (
        "kill-stale ended processes this deployment does not own:\n"
        + decoys.describe()
        + "\n"
        + ended.describe()
    )
    print(f"kill-stale: {ended.seconds:.1f} s\n{ended.stdout}", file=sys.stderr)

    after = dep.fab("status")
    assert "orphan" not in after.output.lower() or "0 orphan" in after.output.lower(), (
        after.describe()
    )
