"""Issue 14: two stand-in replicas (real sshd on 127.0.0.2 and 127.0.0.3) behind a real HAProxy
on 127.0.0.1, deployed and driven by the real fab command line.

The replicas are the stand-in engine (it emulates vLLM and loads no model); the router, the
health checks, the retries and the drain are HAProxy's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kimi_ops import router as rt

from .deployment import make_deployment
from .harness import (
    SshdHost,
    descendants,
    free_port,
    kill_pid_tree_started_by_test,
    pid_alive,
    run_fab,
    write_known_hosts,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _require_haproxy() -> None:
    """Skip without haproxy, unless CI=true (then it is a failure: .ci/run installs it)."""
    if shutil.which("haproxy") is not None:
        return
    reason = "haproxy is not installed (apt-get install haproxy)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


@dataclass
class Setup:
    hosts: list[SshdHost]
    config: dict
    router_dir: Path
    router_port: int
    run_dirs: dict[str, Path]
    started: list[int] = field(default_factory=list)  # every PID our fab runs started

    def fab(self, *args: str, hosts: list[SshdHost] | None = None, timeout: float = 240):
        run = run_fab(hosts or self.hosts, *args, config=self.config, timeout=timeout)
        self.remember()
        return run

    def server_pid(self, host: SshdHost) -> int | None:
        text = (self.run_dirs[host.host] / "server.pid").read_text().strip()
        return int(text) if text.isdigit() else None

    def router_pid(self) -> int | None:
        with contextlib.suppress(OSError):
            text = (self.router_dir / rt.PIDFILE).read_text().strip()
            return int(text) if text.isdigit() else None
        return None

    def remember(self) -> None:
        pids = [self.router_pid()]
        for h in self.hosts:
            with contextlib.suppress(OSError):
                pids.append(self.server_pid(h))
        for pid in pids:
            if pid is not None and pid not in self.started:
                self.started.append(pid)

    def stats(self) -> dict[str, rt.ServerStat]:
        """``show stat`` over the router's admin socket (the test reads it directly)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.router_dir / rt.SOCKET))
            s.sendall(b"show stat\n")
            data = b"".join(iter(lambda: s.recv(65536), b""))
        return {x.name: x for x in rt.parse_show_stat(data.decode())}


@pytest.fixture
def setup(make_sshd: Callable[..., SshdHost], tmp_path: Path) -> Iterator[Setup]:
    hosts = [make_sshd(f"127.0.0.{i}") for i in (2, 3)]
    config = make_deployment(None, tmp_path).config()
    config["kimi"]["known_hosts"] = str(write_known_hosts(hosts, tmp_path / "known_hosts"))
    config["kimi"]["standin"] = {"load_seconds": 0.5, "gpu_count": 1}
    config["kimi"]["tensor_parallel_size"] = 1
    overrides, run_dirs = {}, {}
    for h in hosts:
        run_dirs[h.host] = tmp_path / f"run-{h.host}"
        overrides[h.host] = {
            "port": free_port(h.host),
            "run_dir": str(run_dirs[h.host]),
            "host": h.host,
        }
    config["kimi"]["host_overrides"] = overrides
    router_port = free_port("127.0.0.1")
    router_dir = tmp_path / "router"
    config["kimi"]["router"] = {
        "host": "local",
        "bind": "127.0.0.1",
        "port": router_port,
        "run_dir": str(router_dir),
        "check_interval": 0.5,
        "fall": 2,
        "rise": 2,
        "ready_timeout": 20,
        "drain_timeout": 20,
    }
    state = Setup(hosts, config, router_dir, router_port, run_dirs)
    try:
        yield state
    finally:
        state.remember()
        for pid in reversed(state.started):
            if pid_alive(pid):
                kill_pid_tree_started_by_test(pid)


@dataclass
class ClientLoop:
    """Chat completions through the router, one after another, until stopped (bounded)."""

    port: int
    results: list[tuple[float, bool, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    max_requests: int = 5000

    def _one(self) -> tuple[bool, str]:
        body = json.dumps(
            {
                "model": "kimi-k2.5",
                "messages": [{"role": "user", "content": "Hello!"}],
                "max_tokens": 4,
            }
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=15) as resp:
                answer = json.loads(resp.read())
            return bool(answer.get("choices")), ""
        except urllib.error.HTTPError as exc:
            return False, f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            return False, f"{type(exc).__name__}: {exc}"

    def run(self) -> None:
        while not self.stop.is_set() and len(self.results) < self.max_requests:
            good, why = self._one()
            self.results.append((time.monotonic(), good, why))
            time.sleep(0.02)

    def __enter__(self) -> ClientLoop:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def failures(self, since: float = 0.0, until: float = float("inf")) -> list[str]:
        return [why for t, good, why in self.results if since <= t < until and not good]

    def count(self, since: float = 0.0, until: float = float("inf")) -> int:
        return sum(1 for t, _, _ in self.results if since <= t < until)


def _bring_up(setup: Setup) -> None:
    run = setup.fab("deploy")
    assert run.returncode == 0, run.describe()
    run = setup.fab("router-deploy")
    assert run.returncode == 0, run.describe()
    assert "2/2 replicas UP" in run.stdout, run.stdout
    assert "a chat completion through the router answered" in run.stdout
    pid = setup.router_pid()
    assert pid is not None and pid_alive(pid)


def _kill_server(pid: int) -> None:
    """SIGKILL a server our deploy started (by its PID and its children): a replica that dies."""
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def test_replica_killed_mid_loop_loses_no_request(setup: Setup) -> None:
    _bring_up(setup)
    a, b = setup.hosts
    victim = setup.server_pid(a)
    assert victim is not None
    with ClientLoop(setup.router_port) as loop:
        time.sleep(1.5)
        killed_at = time.monotonic()
        _kill_server(victim)
        down_at = None
        deadline = killed_at + 15
        while time.monotonic() < deadline:
            if setup.stats()[a.host].state == rt.DOWN:
                down_at = time.monotonic()
                break
            time.sleep(0.05)
        assert down_at is not None, "the router never marked the killed replica DOWN"
        time.sleep(3.0)
    window = loop.failures(killed_at, down_at)
    after = loop.failures(down_at)
    print(
        f"requests: {len(loop.results)} in all, {loop.count(killed_at, down_at)} during the "
        f"{down_at - killed_at:.2f} s detection window ({len(window)} failed), "
        f"{loop.count(down_at)} after DOWN ({len(after)} failed)"
    )
    assert loop.count(down_at) > 10
    assert after == [], after
    # retries 3 + option redispatch 1 + retry-on conn-failure empty-response: a request sent to
    # the dead replica during detection is retried on the other one, so none is lost there either.
    assert window == [], window
    assert loop.failures() == []

    status = setup.fab("router-status")
    assert status.returncode == 0, status.describe()
    assert "1/2 replicas UP" in status.stdout
    assert f"{a.host} 127.0.0.2:" in status.stdout and "DOWN" in status.stdout

    # A rolling deploy that would drain the last replica UP refuses, and leaves it serving.
    survivor = setup.server_pid(b)
    roll = setup.fab("deploy", "--rolling", "1", "--restart", hosts=[b, a])
    assert roll.returncode == 1, roll.describe()
    assert "refused to drain 127.0.0.3: it is the last replica UP" in roll.stdout, roll.stdout
    assert setup.server_pid(b) == survivor and pid_alive(survivor)
    assert setup.stats()[b.host].state == rt.UP

    # With no replica UP, router-status says so and exits non-zero.
    _kill_server(survivor)
    deadline = time.monotonic() + 15
    while setup.stats()[b.host].state != rt.DOWN and time.monotonic() < deadline:
        time.sleep(0.1)
    status = setup.fab("router-status")
    assert status.returncode == 1, status.describe()
    assert "0/2 replicas UP" in status.output

    stop = setup.fab("router-stop")
    assert stop.returncode == 0, stop.describe()
    assert not pid_alive(setup.started[0])


def test_rolling_deploy_keeps_the_endpoint_answering(setup: Setup) -> None:
    _bring_up(setup)
    old = {h.host: setup.server_pid(h) for h in setup.hosts}
    # A changed profile: every replica must really be replaced.
    setup.config["kimi"]["env"] = {"KIMI_ROUTER_TEST_GENERATION": "2"}
    with ClientLoop(setup.router_port) as loop:
        time.sleep(1.0)
        roll = setup.fab("deploy", "--rolling", "1")
        time.sleep(1.0)
    print(roll.stdout)
    assert roll.returncode == 0, roll.describe()
    new = {h.host: setup.server_pid(h) for h in setup.hosts}
    for h in setup.hosts:
        assert new[h.host] != old[h.host], (old, new)
        assert pid_alive(new[h.host]) and not pid_alive(old[h.host])
        assert f"router-drain: {h.host} drained" in roll.stdout, roll.stdout
        assert f"router-ready: {h.host} back in the router and UP" in roll.stdout
    # One at a time: the second replica was drained only after the first was back UP.
    out = roll.stdout
    first, second = (h.host for h in setup.hosts)
    assert out.index(f"router-ready: {first}") < out.index(f"router-drain: {second}")
    print(f"requests during the roll: {len(loop.results)}, failed: {len(loop.failures())}")
    assert len(loop.results) > 20
    assert loop.failures() == [], loop.failures()
    assert all(x.state == rt.UP for x in setup.stats().values())


def test_router_redeploy_unchanged_then_seamless_reload(setup: Setup) -> None:
    _bring_up(setup)
    first = setup.router_pid()
    again = setup.fab("router-deploy")
    assert again.returncode == 0 and "unchanged" in again.stdout, again.describe()
    assert setup.router_pid() == first
    setup.config["kimi"]["router"]["balance"] = "roundrobin"
    with ClientLoop(setup.router_port) as loop:
        time.sleep(1.0)
        reload = setup.fab("router-deploy")
        time.sleep(1.0)
    assert reload.returncode == 0, reload.describe()
    assert f"reloaded (-sf {first})" in reload.stdout
    second = setup.router_pid()
    assert second != first and second is not None and pid_alive(second)
    deadline = time.monotonic() + 10  # the old process finishes its sessions, then exits
    while pid_alive(first) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(first)
    assert (setup.router_dir / rt.CONFIG_FILE).read_text().count("balance roundrobin") == 1
    print(f"requests during the reload: {len(loop.results)}, failed: {len(loop.failures())}")
    assert len(loop.results) > 20 and loop.failures() == [], loop.failures()

    # A configuration HAProxy cannot check leaves the running router alone.
    setup.config["kimi"]["router"]["haproxy"] = "/nonexistent/haproxy"
    bad = setup.fab("router-deploy")
    assert bad.returncode == 1, bad.describe()
    assert "rejected the configuration" in bad.stdout and "unchanged" in bad.stdout
    assert setup.router_pid() == second and pid_alive(second)
    # A bad profile key is named before anything connects.
    setup.config["kimi"]["router"]["port"] = 0
    bad = setup.fab("router-status")
    assert bad.returncode == 1
    assert "error: router-status: profile key kimi.router.port: must be an integer" in bad.stderr


def test_failed_replacement_puts_the_old_server_back(setup: Setup) -> None:
    """A host whose deploy fails (here at preflight, before anything is killed) is set ready
    again: its old server, still running, goes back into the router; the roll stops there."""
    _bring_up(setup)
    a, b = setup.hosts
    old_a = setup.server_pid(a)
    setup.config["kimi"]["host_overrides"][a.host]["python"] = "/nonexistent/bin/python3"
    with ClientLoop(setup.router_port) as loop:
        time.sleep(0.5)
        roll = setup.fab("deploy", "--rolling", "1", "--restart")
        time.sleep(0.5)
    assert roll.returncode == 1, roll.describe()
    assert f"router-drain: {a.host} drained" in roll.stdout
    assert (
        f"router-ready: {a.host} set ready in the router; its health checks decide" in roll.stdout
    )
    assert f"router-drain: {b.host}" not in roll.stdout  # the roll stopped at the failed host
    assert setup.server_pid(a) == old_a and pid_alive(old_a)
    stats = setup.stats()
    assert stats[a.host].state == rt.UP and stats[b.host].state == rt.UP
    assert loop.failures() == [] and len(loop.results) > 10


def test_router_on_an_ssh_host(
    setup: Setup, make_sshd: Callable[..., SshdHost], tmp_path: Path
) -> None:
    """kimi.router.host as an SSH target: HAProxy is deployed, checked and stopped over SSH."""
    router_host = make_sshd("127.0.0.1")
    known = write_known_hosts([*setup.hosts, router_host], tmp_path / "known_hosts_all")
    setup.config["kimi"]["known_hosts"] = str(known)
    setup.config["kimi"]["router"]["host"] = router_host.target
    _bring_up(setup)
    status = setup.fab("router-status")
    assert status.returncode == 0 and "2/2 replicas UP" in status.stdout, status.describe()
    assert "Accepted publickey" in router_host.log_text()  # it went over SSH
    pid = setup.router_pid()
    assert pid is not None and pid_alive(pid)
    stop = setup.fab("router-stop")
    assert stop.returncode == 0 and f"stopped HAProxy PID {pid}" in stop.stdout, stop.describe()
    assert not pid_alive(pid)
    status = setup.fab("router-status")
    assert status.returncode == 1 and "no router running" in status.output


def test_dry_router_tasks_change_nothing_and_say_so(setup: Setup) -> None:
    """Red team round 4 #15: `fab --dry router-stop` waited 5 s and reported `changed: ...
    stopped HAProxy PID N (SIGKILL after 5 s)` (exit 0) while HAProxy ran on. A dry run says
    what it would do (skipped), signals nothing, and the router runs on unchanged."""
    _bring_up(setup)
    pid = setup.router_pid()
    assert pid is not None
    pidfile = (setup.router_dir / rt.PIDFILE).read_text()
    config = (setup.router_dir / rt.CONFIG_FILE).read_text()
    started = time.monotonic()
    stop = setup.fab("--dry", "router-stop")
    took = time.monotonic() - started
    assert stop.returncode == 0, stop.describe()
    assert (
        f"skipped: router-stop: dry run: would stop HAProxy PID {pid} "
        "(SIGTERM, SIGKILL after 5 s)" in stop.stdout
    ), stop.stdout
    assert "\nchanged: " not in f"\n{stop.output}", stop.output  # no step says it changed
    assert "stopped HAProxy" not in stop.output, stop.output
    assert took < 5.0, f"a dry router-stop waited {took:.1f} s for a process it did not signal"
    # A changed configuration, deployed dry: nothing uploaded, nothing reloaded.
    setup.config["kimi"]["router"]["balance"] = "roundrobin"
    deploy = setup.fab("--dry", "router-deploy")
    assert deploy.returncode == 0, deploy.describe()
    assert "skipped: router-deploy: dry run: would upload" in deploy.stdout, deploy.stdout
    assert "\nchanged: " not in f"\n{deploy.output}", deploy.output
    status = setup.fab("--dry", "router-status")
    assert status.returncode == 0 and f"ok: router-status: HAProxy PID {pid}" in status.stdout
    assert pid_alive(pid) and setup.router_pid() == pid
    assert (setup.router_dir / rt.PIDFILE).read_text() == pidfile
    assert (setup.router_dir / rt.CONFIG_FILE).read_text() == config
    assert not (setup.router_dir / rt.NEXT_CONFIG).exists()
    assert all(x.state == rt.UP for x in setup.stats().values())
