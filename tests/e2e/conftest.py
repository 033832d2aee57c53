"""Fixtures for the real-SSH end-to-end tests (see harness.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .deployment import Deployment, make_deployment
from .harness import (
    SSHD_BIN,
    SshdHost,
    SshdServer,
    SshdStartError,
    generate_key,
    start_sshd,
)


def _require_sshd() -> None:
    """Skip without sshd, unless CI=true (then a missing sshd is a failure)."""
    if SSHD_BIN.exists():
        return
    reason = f"{SSHD_BIN} not found: install openssh-server to run the e2e tests"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def ssh_client_key() -> Iterator[Path]:
    """One throwaway ed25519 client key shared by every test sshd (so `fab -H a,b -i KEY`)."""
    _require_sshd()
    tdir = Path(tempfile.mkdtemp(prefix="kimi-e2e-clientkey-"))
    try:
        yield generate_key(tdir / "id_ed25519", comment="kimi-e2e-client")
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


def started_sshd(**kwargs: Any) -> SshdServer:
    """start_sshd(**kwargs), a failure of the test (with sshd's stderr) when it cannot start."""
    try:
        return start_sshd(**kwargs)
    except SshdStartError as exc:
        pytest.fail(str(exc), pytrace=False)


@contextlib.contextmanager
def running_sshd(**kwargs: Any) -> Iterator[SshdHost]:
    """An sshd (:func:`started_sshd`) for the duration of the ``with``; stopped after."""
    server = started_sshd(**kwargs)
    try:
        yield server.host
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd(ssh_client_key: Path) -> Iterator[SshdHost]:
    """A real OpenSSH sshd on 127.0.0.1:<free port>, for the whole session."""
    with running_sshd(client_key=ssh_client_key) as host:
        yield host


@pytest.fixture
def make_sshd(ssh_client_key: Path) -> Iterator[Callable[..., SshdHost]]:
    """Factory: `make_sshd(address="127.0.0.2", **start_sshd_kwargs) -> SshdHost`.

    Each call starts another sshd (same client key as `sshd` unless client_key= is given);
    all are stopped at the end of the test."""
    servers: list[SshdServer] = []

    def _make(address: str = "127.0.0.1", **kwargs) -> SshdHost:
        kwargs.setdefault("client_key", ssh_client_key)
        server = started_sshd(address=address, **kwargs)
        servers.append(server)
        return server.host

    try:
        yield _make
    finally:
        for server in reversed(servers):
            server.stop()


@pytest.fixture
def dep(sshd: SshdHost, tmp_path: Path) -> Iterator[Deployment]:
    """A stand-in deployment on the session's sshd; its servers are ended (by PID) afterwards."""
    d = make_deployment(sshd, tmp_path)
    try:
        yield d
    finally:
        d.cleanup()
