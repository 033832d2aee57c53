"""kimi_ops.router: the router profile, HAProxy's config, runtime commands, `show stat` parsing.

The `show stat` fixtures in tests/fixtures/router/ are real output of HAProxy 2.6.12 (Debian
bookworm), captured from its admin socket with two replicas behind it: both UP, one killed
(DOWN, "Connection refused"), one drained while the other was down, drained while the
other was UP again, and drained with one slow request in flight (scur 1) and after it ended.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kimi_ops import router as rt
from kimi_ops.errors import ProfileError
from kimi_ops.profile import load_profile

FIXTURES = Path(__file__).parent / "fixtures" / "router"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def settings(**kw: object) -> rt.RouterSettings:
    return rt.parse_router({"port": 9000, **kw})


# --- profile ----------------------------------------------------------------------------------


def test_no_router_unless_a_port_is_set() -> None:
    assert not load_profile({}).router.configured
    profile = load_profile({"router": {"port": 9000}})
    assert profile.router.configured and profile.router.is_local
    assert profile.router.balance == "leastconn" and profile.router.health_path == "/health"
    # per-host profiles (host_overrides) keep the router section
    assert profile.for_host("gpu1").router == profile.router


@pytest.mark.parametrize(
    ("router", "key", "problem"),
    [
        ({"prot": 1}, "router.prot", "is not a known key"),
        ({"port": 0}, "router.port", "from 1 to 65535"),
        ({"port": True}, "router.port", "from 1 to 65535"),
        ({"balance": "fastest"}, "router.balance", "must be one of leastconn"),
        ({"health_path": "health"}, "router.health_path", "URL path"),
        ({"health_path": "/h ealth"}, "router.health_path", "URL path"),
        ({"check_interval": 0}, "router.check_interval", "positive number"),
        ({"fall": 1.5}, "router.fall", "positive integer"),
        ({"addresses": {"gpu1": "10.0.0.1:99999"}}, "router.addresses.gpu1", "port 1-65535"),
        ({"addresses": ["gpu1"]}, "router.addresses", "must map host names"),
        ({"host": ""}, "router.host", "non-empty"),
        ({"bind": "a b"}, "router.bind", "is not an address"),
    ],
)
def test_bad_router_keys_are_named(router: dict, key: str, problem: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile({"router": router})
    assert err.value.key == key
    assert problem in err.value.problem
    assert f"profile key kimi.{key}" in str(err.value)


def test_router_section_must_be_a_mapping() -> None:
    with pytest.raises(ProfileError, match="kimi.router: must be a mapping"):
        load_profile({"router": "haproxy"})


# --- replicas ---------------------------------------------------------------------------------


def test_replica_address_from_bind_host_override() -> None:
    s = settings(addresses={"gpu3": "10.0.0.3", "gpu4": "10.0.0.4:9001"})
    assert rt.replica_for(s, "gpu1", "0.0.0.0", 8000) == rt.Replica("gpu1", "gpu1", "gpu1", 8000)
    assert rt.replica_for(s, "gpu2", "10.1.0.2", 8000).address == "10.1.0.2"
    three = rt.replica_for(s, "gpu3", "0.0.0.0", 8000)
    assert (three.address, three.port) == ("10.0.0.3", 8000)
    four = rt.replica_for(s, "gpu4", "0.0.0.0", 8000)
    assert (four.address, four.port) == ("10.0.0.4", 9001)


def test_server_names_are_haproxy_identifiers_and_unique() -> None:
    assert rt.server_name("gpu host#1") == "gpu_host_1"
    reps = [rt.Replica("a b", "a_b", "h1", 1), rt.Replica("a#b", "a_b", "h2", 1)]
    assert [r.name for r in rt.unique_names(reps)] == ["a_b", "a_b-2"]


# --- configuration ----------------------------------------------------------------------------


def _replicas() -> list[rt.Replica]:
    return [rt.Replica("gpu1", "gpu1", "10.0.0.1", 8000), rt.Replica("gpu2", "gpu2", "gpu2", 8001)]


def test_render_config_checks_retries_and_admin_socket() -> None:
    s = settings(bind="127.0.0.1", check_interval=0.5, fall=3, rise=2, balance="roundrobin")
    text = rt.render_config(s, _replicas(), "/srv/router/")
    lines = [ln.strip() for ln in text.splitlines()]
    assert "bind 127.0.0.1:9000" in lines
    assert "balance roundrobin" in lines
    assert "option httpchk GET /health" in lines
    assert "http-check expect status 200" in lines
    assert "default-server check inter 500ms fall 3 rise 2" in lines
    assert "retries 3" in lines and "option redispatch 1" in lines
    assert "retry-on conn-failure empty-response response-timeout 503" in lines
    assert "stats socket /srv/router/admin.sock mode 600 level admin expose-fd listeners" in lines
    assert "server gpu1 10.0.0.1:8000" in lines and "server gpu2 gpu2:8001" in lines
    assert "timeout server 600000ms" in lines


def test_render_config_needs_a_port_and_replicas() -> None:
    with pytest.raises(ValueError, match="port"):
        rt.render_config(rt.parse_router({}), _replicas(), "/r")
    with pytest.raises(ValueError, match="replicas"):
        rt.render_config(settings(), [], "/r")


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_rendered_config_is_valid_for_real_haproxy(tmp_path: Path) -> None:
    reps = [rt.Replica("a", "a", "127.0.0.1", 1), rt.Replica("b", "b", "127.0.0.1", 2)]
    cfg = tmp_path / rt.CONFIG_FILE
    cfg.write_text(rt.render_config(settings(bind="127.0.0.1"), reps, str(tmp_path)))
    out = subprocess.run(
        ["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Configuration file is valid" in out.stdout + out.stderr
    assert "WARNING" not in out.stdout + out.stderr


# --- commands ---------------------------------------------------------------------------------


def test_start_and_reload_commands() -> None:
    s = settings(haproxy="/usr/sbin/haproxy")
    start = rt.start_command(s, "/srv/r")
    assert "setsid nohup /usr/sbin/haproxy -f haproxy.cfg >> router.log" in start
    assert "-sf" not in start and "< /dev/null &" in start
    reload = rt.start_command(s, "/srv/r", old_pid=4242)
    assert "-f haproxy.cfg -x admin.sock -sf 4242" in reload
    assert rt.set_state_command("gpu 1", "drain") == "set server kimi_replicas/gpu_1 state drain"
    with pytest.raises(ValueError):
        rt.set_state_command("gpu1", "down; shutdown")


def test_is_our_haproxy() -> None:
    s = settings()
    assert rt.is_our_haproxy("/usr/sbin/haproxy -f haproxy.cfg -x admin.sock -sf 1", s)
    assert not rt.is_our_haproxy("haproxy -f /etc/haproxy/haproxy.cfg", s)
    assert not rt.is_our_haproxy("tail -f haproxy.cfg", s)
    assert not rt.is_our_haproxy("", s)


def test_admin_command_talks_to_a_unix_socket(tmp_path: Path) -> None:
    """The python3 fallback client (no socat here) sends one line and prints the answer."""
    sock_path = tmp_path / rt.SOCKET
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(conn.recv(4096))
            conn.sendall(b"# pxname,svname\nanswer with 'quotes' $HOME\n")

    thread = threading.Thread(target=serve)
    thread.start()
    command = rt.admin_command(settings(python=sys.executable), str(tmp_path), "show stat")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no socat: the python client
    out = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=30, env=env
    )
    thread.join(10)
    server.close()
    assert out.returncode == 0, out.stderr
    assert got == [b"show stat\n"]
    assert out.stdout == "# pxname,svname\nanswer with 'quotes' $HOME\n"


# --- show stat --------------------------------------------------------------------------------


def test_show_stat_both_up() -> None:
    stats = rt.parse_show_stat(fixture("show_stat_both_up.csv"))
    assert [(x.name, x.state, x.address) for x in stats] == [
        ("127.0.0.2", rt.UP, "127.0.0.1:18081"),
        ("127.0.0.3", rt.UP, "127.0.0.1:18082"),
    ]
    assert stats[0].check_status == "L7OK" and stats[0].check_code == "200"
    assert stats[0].check_desc == "Layer7 check passed"
    assert "UP, 0 active session(s), check L7OK 200 (Layer7 check passed)" in stats[0].describe()


def test_show_stat_one_down() -> None:
    stats = {x.name: x for x in rt.parse_show_stat(fixture("show_stat_one_down.csv"))}
    down = stats["127.0.0.3"]
    assert down.state == rt.DOWN and down.status == "DOWN"
    assert down.check_status == "L4CON" and down.check_desc == "Connection refused"
    assert down.check_failures >= 1
    assert stats["127.0.0.2"].state == rt.UP


def test_show_stat_drained() -> None:
    stats = {x.name: x for x in rt.parse_show_stat(fixture("show_stat_drain_other_down.csv"))}
    assert stats["127.0.0.2"].state == rt.DRAIN and stats["127.0.0.3"].state == rt.DOWN
    stats = {x.name: x for x in rt.parse_show_stat(fixture("show_stat_drain_other_up.csv"))}
    assert stats["127.0.0.2"].state == rt.DRAIN and stats["127.0.0.3"].state == rt.UP


def test_show_stat_sessions_of_a_draining_replica() -> None:
    """Drained while a slow request was in flight (scur 1), then after it ended (scur 0): the
    rolling deploy waits for the second before it replaces the replica."""
    busy = {x.name: x for x in rt.parse_show_stat(fixture("show_stat_draining_one_session.csv"))}
    assert busy["127.0.0.3"].state == rt.DRAIN and busy["127.0.0.3"].sessions == 1
    assert busy["127.0.0.2"].state == rt.UP and busy["127.0.0.2"].sessions == 0
    idle = {x.name: x for x in rt.parse_show_stat(fixture("show_stat_drained_idle.csv"))}
    assert idle["127.0.0.3"].state == rt.DRAIN and idle["127.0.0.3"].sessions == 0
    assert idle["127.0.0.3"].total >= 1


def test_show_stat_other_backend_and_garbage() -> None:
    assert rt.parse_show_stat(fixture("show_stat_both_up.csv"), backend="other") == []
    with pytest.raises(ValueError, match="pxname"):
        rt.parse_show_stat("Unknown command. Please enter one of the following commands only")


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("UP", rt.UP),
        ("UP 1/2", rt.UP),  # still serving while it fails its first checks
        ("DOWN 1/2", rt.DOWN),  # not serving until it passes `rise` checks
        ("DOWN", rt.DOWN),
        ("no check", rt.UP),
        ("DRAIN", rt.DRAIN),
        ("NOLB", rt.DRAIN),
        ("MAINT", rt.MAINT),
        ("MAINT (via kimi_replicas/x)", rt.MAINT),
    ],
)
def test_classify(status: str, state: str) -> None:
    assert rt.classify(status) == state


def test_refuses_to_drain_the_last_replica_up() -> None:
    both = rt.parse_show_stat(fixture("show_stat_both_up.csv"))
    assert rt.drain_refusal(both, "127.0.0.2") == ""
    # the other one is already being taken out by this roll
    assert "last replica UP" in rt.drain_refusal(both, "127.0.0.2", ["127.0.0.3"])
    one_down = rt.parse_show_stat(fixture("show_stat_one_down.csv"))
    assert "refused to drain 127.0.0.2" in rt.drain_refusal(one_down, "127.0.0.2")
    assert rt.drain_refusal(one_down, "127.0.0.3") == ""  # DOWN already: draining costs nothing
    assert rt.drain_refusal(one_down, "gpu9") == ""  # not behind the router


# --- the steps, against a scripted host -------------------------------------------------------


def _router_host(conn: object, *, dry: bool = False) -> object:
    from tasks.host import Host
    from tasks.router import RouterHost

    profile = load_profile({"router": {"port": 9000, "run_dir": "/srv/router"}})
    return RouterHost(Host(conn, profile, dry=dry), profile.router, "/srv/router", profile)  # type: ignore[arg-type]


def test_router_deploy_dry_run_changes_nothing() -> None:
    from tasks.router import deploy_router
    from tasks.testing import ScriptedConnection

    conn = ScriptedConnection()
    res = deploy_router(_router_host(conn, dry=True), _replicas(), {})  # type: ignore[arg-type]
    assert res.status.value == "skipped" and "dry run" in res.message
    assert "    server gpu1 10.0.0.1:8000" in res.lines
    assert conn.commands == [] and conn.sftp().files == {}


def test_router_stop_never_kills_a_pid_that_is_not_its_haproxy() -> None:
    """The pidfile names a PID that now belongs to something else: nothing is killed."""
    from tasks.router import stop_router
    from tasks.testing import ScriptedConnection

    conn = ScriptedConnection()
    conn.on(r"router.pid", stdout="pid=4242\nstat=S\nargs=/usr/bin/python3 app.py\nsha=\n")
    res = stop_router(_router_host(conn), sleep=lambda _: None)  # type: ignore[arg-type]
    assert res.status.value == "ok" and "no router running" in res.message
    assert not conn.ran(r"\bkill\b")


def test_router_stop_ends_its_own_haproxy_by_pid() -> None:
    from tasks.router import stop_router
    from tasks.testing import Reply, ScriptedConnection

    ours = "pid=4242\nstat=Ss\nargs=haproxy -f haproxy.cfg\nsha=ab\n"
    conn = ScriptedConnection()
    conn.on(r"router.pid", Reply(ours), Reply("pid=4242\nsha=ab\n"))
    res = stop_router(_router_host(conn), sleep=lambda _: None)  # type: ignore[arg-type]
    assert res.status.value == "changed" and "PID 4242 (SIGTERM)" in res.message
    assert conn.ran(r"^kill -TERM 4242$") and not conn.ran(r"pkill|killall|kill -KILL|kill -9")


def test_rolling_gate_only_with_a_router_and_never_in_a_dry_run() -> None:
    from invoke import Config, Context

    from tasks.router import around_rolling

    def one(spec: object, cancel: object) -> object:
        return spec

    def ctx(kimi: dict, dry: bool = False) -> Context:
        return Context(config=Config(overrides={"kimi": kimi, "run": {"dry": dry}}))

    assert around_rolling(ctx({}), {}, one, quiet=True) is one  # no router configured
    assert around_rolling(ctx({"router": {"port": 9000}}, dry=True), {}, one, quiet=True) is one
    gated = around_rolling(ctx({"router": {"port": 9000}}), {}, one, quiet=True)
    assert gated is not one and callable(gated)


def test_port_command_sees_a_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        command = rt.port_command(settings(bind="0.0.0.0", port=port))
        assert "/dev/tcp/127.0.0.1/" in command  # a wildcard bind is tried on loopback
        assert subprocess.run(["bash", "-c", command], timeout=10).returncode == 0
    assert subprocess.run(["bash", "-c", command], timeout=10, stderr=subprocess.DEVNULL).returncode
