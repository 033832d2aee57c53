"""The real-sshd harness works, host keys are checked strictly, and the seed's pkill one-liner
kills its own remote shell (the seed's silent failure)."""

from __future__ import annotations

import os
import pwd
import time
import uuid
from pathlib import Path

import paramiko
import pytest
from fabric import Connection

from .harness import (
    REPO_ROOT,
    SshdHost,
    base_config,
    deep_merge,
    generate_key,
    kill_pid_tree_started_by_test,
    pid_alive,
    pids_with_marker,
    public_key_text,
    run_fab,
    ssh_run,
)

pytestmark = pytest.mark.e2e


def _connection(host: SshdHost, known_hosts: Path) -> Connection:
    c = Connection(
        host.host,
        user=host.user,
        port=host.port,
        connect_timeout=10,
        connect_kwargs={
            "key_filename": str(host.key_path),
            "look_for_keys": False,
            "allow_agent": False,
        },
    )
    c.client.load_host_keys(str(known_hosts))
    c.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return c


def _marker() -> str:
    return "kimie2e" + uuid.uuid4().hex[:12]


def _wait_no_marker(marker: str, timeout: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = pids_with_marker(marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def test_fixture_shape(sshd: SshdHost) -> None:
    assert sshd.host == "127.0.0.1"
    assert sshd.target == f"{sshd.user}@127.0.0.1:{sshd.port}"
    assert sshd.host_key_line.startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAA")
    assert sshd.known_hosts_path.read_text() == sshd.host_key_line + "\n"
    assert pid_alive(sshd.pid)
    assert "Server listening on 127.0.0.1" in sshd.log_text()


def test_ssh_run_strict_host_key(sshd: SshdHost) -> None:
    r = ssh_run(sshd, "echo hello-$((6*7))")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hello-42\n"


def test_sessions_get_the_sshd_s_own_home_unless_asked_not_to(sshd: SshdHost, make_sshd) -> None:
    """The shell over SSH sees HOME=<tmpdir>/home (so this machine's ~/.bashrc is not run for
    each command); own_home=False gives the user's own home from the password database."""
    assert ssh_run(sshd, 'printf %s "$HOME"').stdout == str(sshd.tmpdir / "home")
    other = make_sshd("127.0.0.1", own_home=False)
    assert ssh_run(other, 'printf %s "$HOME"').stdout == pwd.getpwnam(other.user).pw_dir


def test_nice_is_inherited_by_the_sessions_commands(sshd: SshdHost, make_sshd) -> None:
    """start_sshd(nice=N): what runs through that sshd (the real engine, in its tier) has
    niceness N more than this test; the plain fixture's commands keep this test's."""
    mine = os.nice(0)
    assert ssh_run(sshd, "nice").stdout.strip() == str(mine)
    niced = make_sshd("127.0.0.1", nice=7)
    assert ssh_run(niced, "nice").stdout.strip() == str(min(mine + 7, 19))
    assert ssh_run(niced, "echo up").stdout == "up\n"


def test_fabric_connection_run_and_put(sshd: SshdHost, tmp_path: Path) -> None:
    local = tmp_path / "payload.txt"
    local.write_text("payload\n")
    remote = sshd.tmpdir / f"uploaded-{uuid.uuid4().hex}.txt"
    with _connection(sshd, sshd.known_hosts_path) as c:
        r = c.run("echo $((1+1))", hide=True, pty=False, in_stream=False)
        assert r.stdout == "2\n"
        c.put(str(local), str(remote))
        assert c.run(f"cat {remote}", hide=True, in_stream=False).stdout == "payload\n"
    remote.unlink()


@pytest.mark.parametrize("known_hosts_content", ["empty", "other-key"])
def test_fabric_connection_rejects_unknown_host_key(
    sshd: SshdHost, tmp_path: Path, known_hosts_content: str
) -> None:
    known_hosts = tmp_path / "known_hosts"
    if known_hosts_content == "empty":
        known_hosts.write_text("")
        expected: type[Exception] = paramiko.SSHException
    else:
        other = generate_key(tmp_path / "other_host_key")
        kind, b64 = public_key_text(other).split()[:2]
        known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {kind} {b64}\n")
        expected = paramiko.BadHostKeyException
    c = _connection(sshd, known_hosts)
    try:
        with pytest.raises(expected):
            c.run("echo should-not-run", hide=True, in_stream=False)
    finally:
        c.close()


def test_second_sshd_on_other_loopback_and_fab_multi_host(
    sshd: SshdHost, make_sshd, tmp_path: Path
) -> None:
    other = make_sshd("127.0.0.2")
    assert other.host_key_line.startswith(f"[127.0.0.2]:{other.port} ")
    assert ssh_run(other, "echo two").stdout == "two\n"

    # run_fab end to end: real `fab`, -H/-i, -f <json config> merged onto base_config.
    (tmp_path / "fabfile.py").write_text(
        "from fabric import task\n"
        "@task\n"
        "def probe(c):\n"
        "    print('known_hosts=' + c.config.kimi.known_hosts)\n"
        "    print('extra=' + c.config.kimi.extra)\n"
        "    c.run('echo remote-$((40+2))')\n"
    )
    cfg = deep_merge(base_config([sshd, other]), {"kimi": {"extra": "x"}})
    run = run_fab([sshd, other], "probe", config=cfg, cwd=tmp_path, timeout=60)
    assert run.returncode == 0, run.describe()
    assert run.stdout.count("remote-42") == 2, run.describe()
    kh = Path(cfg["kimi"]["known_hosts"]).read_text()
    assert sshd.host_key_line in kh and other.host_key_line in kh
    assert "extra=x" in run.stdout
    assert run.seconds > 0


def test_seed_pkill_kills_its_own_remote_shell(sshd: SshdHost) -> None:
    """The seed's `pkill -9 -f "<pattern>"; ...; nohup <server> &` sent over ssh.

    The pattern is text of the remote `bash -c '<line>'` command line, so pkill SIGKILLs the
    shell that runs it: nothing after it runs, no output, sshd reports exit-signal KILL and the
    OpenSSH client exits 255 (paramiko/fabric: exited == -1). The server is never started.
    """
    marker = _marker()
    log = sshd.tmpdir / f"seed-{marker}.log"
    line = (
        f'pkill -9 -f "{marker}.*vllm"; sleep 0.2; '
        f"nohup python3 -c 'import time; time.sleep(30)' {marker}-vllm > {log} 2>&1 &"
    )
    # hide_command: keep the line out of the *local* ssh client's argv (see next test).
    r = ssh_run(sshd, line, hide_command=True)
    try:
        assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
        assert r.stdout == "" and r.stderr == ""
        time.sleep(0.3)
        assert not log.exists()
        assert _wait_no_marker(marker) == []
    finally:
        for pid in pids_with_marker(marker):
            kill_pid_tree_started_by_test(pid)

    # What the tool sees through paramiko: no exit-status, only exit-signal -> exited == -1.
    with _connection(sshd, sshd.known_hosts_path) as c:
        res = c.run(line, hide=True, warn=True, pty=False, in_stream=False)
    assert res.exited == -1, res
    assert res.stdout == "" and res.stderr == ""
    time.sleep(0.3)
    assert not log.exists()
    assert _wait_no_marker(marker) == []


def test_seed_launch_without_pkill_does_start(sshd: SshdHost) -> None:
    """Control: the same launch line minus the pkill works, so the pkill is what breaks it."""
    marker = _marker()
    log = sshd.tmpdir / f"seed-ok-{marker}.log"
    line = (
        f"sleep 0.2; setsid nohup python3 -c 'import time; time.sleep(30)' {marker}-vllm "
        f"> {log} 2>&1 < /dev/null & echo $!"
    )
    r = ssh_run(sshd, line, hide_command=True)
    pid = int(r.stdout.strip()) if r.stdout.strip().isdigit() else None
    try:
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert pid is not None and pid_alive(pid)
        assert log.exists()
        assert pid in pids_with_marker(marker)
    finally:
        if pid is not None:
            assert kill_pid_tree_started_by_test(pid)
        for left in pids_with_marker(marker):
            kill_pid_tree_started_by_test(left)
    assert _wait_no_marker(marker) == []


def test_seed_pkill_also_matches_local_ssh_client_argv(sshd: SshdHost) -> None:
    """Harness caveat: with the line in the local ssh argv and the "remote" host being this
    machine, the remote pkill SIGKILLs the local ssh client too (returncode -9)."""
    marker = _marker()
    r = ssh_run(sshd, f'pkill -9 -f "{marker}.*vllm"; echo not-reached')
    assert r.returncode == -9, (r.returncode, r.stdout, r.stderr)
    assert "not-reached" not in r.stdout
    assert _wait_no_marker(marker) == []


def test_seed_ps_fixture_shape() -> None:
    """tests/fixtures/ps/seed_oneliner.txt (scripts/capture_seed_ps.py) keeps its contract."""
    lines = (REPO_ROOT / "tests/fixtures/ps/seed_oneliner.txt").read_text().splitlines()
    self_pid = int(lines[0].removeprefix("# self_pid="))
    server_pid = int(lines[1].removeprefix("# pidfile_pid="))
    assert lines[2].startswith("# marker=")
    rows = {}
    for row in lines[3:]:
        pid, ppid, pgid, args = row.split(None, 3)
        rows[int(pid)] = (int(ppid), int(pgid), args)
    assert 'pkill -9 -f "python3.*vllm"' in rows[self_pid][2]
    assert rows[self_pid][2].startswith("bash -c ")
    server_args = rows[server_pid][2]
    assert server_args.startswith("python3 -m vllm.entrypoints.openai.api_server --model ")
    assert rows[server_pid][1] == server_pid  # setsid leader
    assert [p for p, r in rows.items() if r[0] == server_pid and r[2] == server_args]
    assert any(r[2] == "python3 -m vllm_tools --watch" for r in rows.values())
