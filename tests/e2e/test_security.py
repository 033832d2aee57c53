"""Issue 6, through the real `fab` command line and a real sshd: host keys are checked, secrets
never reach a command line, a log or fab's output, one deployment at a time per host, and a
redeploy of an unchanged profile changes nothing."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .deployment import Deployment, make_deployment
from .harness import (
    REPO_ROOT,
    FabRun,
    SshdHost,
    cause_line,
    fab_executable,
    fab_host_args,
    generate_key,
    pid_alive,
    public_key_text,
    run_fab,
)

pytestmark = pytest.mark.e2e


# --- host keys --------------------------------------------------------------------------------


def test_an_unknown_host_key_is_rejected_by_default(dep: Deployment, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    run = dep.fab("kill-stale", known_hosts=str(empty))
    assert run.returncode == 1, run.describe()
    assert "Traceback" not in run.output, run.describe()
    cause = cause_line(run.output)
    assert f"unknown host key for [127.0.0.1]:{dep.sshd.port}" in cause, run.describe()
    assert "ssh-keyscan" in run.output and "host_key_policy: accept-new" in run.output
    assert empty.read_text() == ""  # nothing was recorded


def test_a_missing_known_hosts_file_is_an_unknown_host_key(dep: Deployment, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "known_hosts"
    run = dep.fab("status", known_hosts=str(missing))
    assert run.returncode == 1 and "Traceback" not in run.output, run.describe()
    assert "unknown host key" in cause_line(run.output)
    assert not missing.exists()


def test_accept_new_records_the_key_and_connects(dep: Deployment, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    run = dep.fab("kill-stale", known_hosts=str(known), host_key_policy="accept-new")
    assert run.ok, run.describe()
    assert known.read_text().splitlines() == [dep.sshd.host_key_line]


def test_a_changed_host_key_is_rejected_even_with_accept_new(
    dep: Deployment, tmp_path: Path
) -> None:
    impostor = generate_key(tmp_path / "impostor_host_key", comment="impostor")
    key_type, key_b64 = public_key_text(impostor).split()[:2]
    known = tmp_path / "known_hosts"
    before = f"[127.0.0.1]:{dep.sshd.port} {key_type} {key_b64}\n"
    known.write_text(before)
    run = dep.fab("kill-stale", known_hosts=str(known), host_key_policy="accept-new")
    assert run.returncode == 1, run.describe()
    assert "Traceback" not in run.output, run.describe()
    cause = cause_line(run.output)
    assert "host key has CHANGED" in cause and "refusing to connect" in cause, cause
    assert "ssh-keygen -R" in run.output
    assert known.read_text() == before  # the recorded key is not replaced


# --- one deployment, shared: the lock, secrets, idempotence -----------------------------------
#
# Deploys are the expensive part (2 cores), so one module-scoped deployment serves three tests:
# it is created by two CONCURRENT `fab deploy` runs carrying secrets, with every process's
# command line watched throughout. The idempotence test mutates it and so comes last.


class CommandLineWatcher:
    """Scans every process's command line on this machine while a run goes on."""

    def __init__(self, *needles: str) -> None:
        self.needles = needles
        self.hits: list[str] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(0.1)

    def scan(self) -> None:
        out = subprocess.run(
            ["ps", "-eww", "-o", "args="], capture_output=True, text=True, timeout=30
        ).stdout
        self.scans += 1
        self.hits += [ln for ln in out.splitlines() if any(n in ln for n in self.needles)]

    def __enter__(self) -> CommandLineWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.scan()


@dataclass
class FabProc:
    pid: int
    returncode: int
    output: str
    ended: float  # seconds after both were started


def _run_concurrently(
    dep: Deployment, tmp: Path, args: tuple[str, ...], env: dict[str, str], count: int, **kimi: Any
) -> list[FabProc]:
    """Start ``count`` identical fab runs at once; wait for all of them."""
    cfg = tmp / "concurrent-fab.json"
    cfg.write_text(json.dumps(dep.config(**kimi), default=str))
    argv = [str(fab_executable()), *fab_host_args(dep.sshd), "-f", str(cfg), *args]
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(count)
    ]
    done: list[FabProc] = []

    def collect(p: subprocess.Popen[str]) -> None:
        try:
            out = p.communicate(timeout=150)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0] + "\n(killed by the test: timeout)"
        done.append(FabProc(p.pid, p.returncode, out, time.monotonic() - start))

    threads = [threading.Thread(target=collect, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(done, key=lambda r: r.returncode)


@dataclass
class Served:
    dep: Deployment
    hf_token: str
    api_key: str
    env: dict[str, str]
    profile: dict[str, Any]
    deploys: list[FabProc]  # sorted by exit status: the winner first
    verify: FabRun
    status: FabRun
    watcher: CommandLineWatcher


@pytest.fixture(scope="module")
def served(sshd: SshdHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("served")
    dep = make_deployment(sshd, root)
    hf_token = "hf_" + secrets.token_hex(16)
    api_key = "sk-" + secrets.token_hex(16)
    env = {"HF_TOKEN": hf_token, "KIMI_TEST_API_KEY": api_key}
    profile = {
        "secret_env": ["HF_TOKEN"],
        "api_key_env": "KIMI_TEST_API_KEY",
        "standin": {"load_seconds": 1},
    }
    try:
        with CommandLineWatcher(hf_token, api_key) as watcher:
            deploys = _run_concurrently(dep, root, ("deploy",), env, 2, **profile)
            dep.remember_server()
            # Neither the API key nor HF_TOKEN is in fab's environment now: verify and status
            # take the key from the host's env file (only deploy and upload-script need it
            # locally; they refuse to run without it, see test_bad_input.py).
            verify = dep.fab("verify", **profile)
            status = dep.fab("status", **profile)
        yield Served(dep, hf_token, api_key, env, profile, deploys, verify, status, watcher)
    finally:
        dep.cleanup()


def test_two_concurrent_deploys_one_wins_the_other_fails_at_once(served: Served) -> None:
    winner, loser = served.deploys
    assert (winner.returncode, loser.returncode) == (0, 1), served.deploys
    assert "verify: ready" in winner.output, winner.output
    assert "Traceback" not in loser.output, loser.output
    cause = cause_line(loser.output)
    assert "holds the deployment lock" in cause, loser.output
    assert f"pid={winner.pid} " in cause, (winner.pid, cause)  # the holder: the winning fab
    assert "step=deploy" in cause and re.search(r"started=\d{4}-\d\d-\d\dT[\d:]+Z", cause), cause
    assert "preflight" not in loser.output  # refused before doing anything
    assert loser.ended < 8, served.deploys
    assert loser.ended < winner.ended - 2, served.deploys  # well before the winner finished
    pid = served.dep.pidfile_pid()
    assert pid is not None and pid_alive(pid)


def _chat_status(port: int, api_key: str | None) -> int:
    body = json.dumps(
        {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_secrets_stay_off_command_lines_logs_and_output(served: Served) -> None:
    dep, hf_token, api_key = served.dep, served.hf_token, served.api_key
    assert served.watcher.scans >= 10, served.watcher.scans
    assert served.watcher.hits == [], "a secret appeared on a process's command line"
    runs = [d.output for d in served.deploys] + [served.verify.output, served.status.output]
    for output in runs:
        assert hf_token not in output and api_key not in output, output

    env_file = dep.run_dir / "server.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    text = env_file.read_text()
    assert hf_token in text and api_key in text
    for path in dep.run_dir.rglob("*"):  # launch.sh, standin.json, logs, pidfile, lock, ...
        if path.is_file() and path != env_file:
            data = path.read_text(errors="replace")
            assert hf_token not in data and api_key not in data, path
    assert hf_token not in dep.sshd.log_text() and api_key not in dep.sshd.log_text()

    # The server enforces the key; verify and status (which read it from the env file) pass.
    assert _chat_status(dep.port, None) == 401
    assert _chat_status(dep.port, "sk-wrong") == 401
    assert _chat_status(dep.port, api_key) == 200
    assert served.verify.ok and "verify: ready" in served.verify.output, served.verify.describe()
    assert served.status.ok and "chat 200" in served.status.output, served.status.describe()


def test_redeploy_changes_nothing_unless_the_profile_changes_or_restart(served: Served) -> None:
    dep, env, profile = served.dep, served.env, served.profile
    pid1 = dep.pidfile_pid()
    assert pid1 is not None and pid_alive(pid1)

    same = dep.fab("deploy", env=env, **profile)
    assert same.ok, same.describe()
    assert dep.pidfile_pid() == pid1 and pid_alive(pid1)
    assert "nothing changed" in same.output, same.describe()
    assert "kill-stale" not in same.output and "launch:" not in same.output, same.describe()
    assert "changed=0" in same.output

    renamed = dep.fab("deploy", env=env, **{**profile, "served_model_name": "kimi-renamed"})
    assert renamed.ok, renamed.describe()
    pid2 = dep.pidfile_pid()
    assert pid2 is not None and pid2 != pid1 and pid_alive(pid2)
    assert not pid_alive(pid1), "the replaced server must be gone"
    assert "kill-stale: ended" in renamed.output, renamed.describe()

    restart = dep.fab(
        "deploy", "--restart", env=env, **{**profile, "served_model_name": "kimi-renamed"}
    )
    assert restart.ok, restart.describe()
    pid3 = dep.pidfile_pid()
    assert pid3 is not None and pid3 not in (pid1, pid2) and pid_alive(pid3)
    assert not pid_alive(pid2)

    # stop needs no secret locally (api_key_env's variable is unset here): an emergency stop
    # from any shell works.
    stop = dep.fab("stop", **profile)
    assert stop.ok and "stop: ended" in stop.output, stop.describe()
    assert not pid_alive(pid3)
    again = dep.fab("stop", **profile)
    assert again.returncode == 0, again.describe()
    assert "no process of this deployment" in again.output, again.describe()


def test_an_hf_token_in_extra_args_is_refused_and_never_shown(dep: Deployment) -> None:
    # red-team F5: the token went onto the exec line, into launch.sh and into the printed diff
    token = "hf_" + secrets.token_hex(12)
    run = dep.fab("deploy", extra_args=["--max-model-len", "4096", f"--hf-token={token}"])
    assert run.returncode == 1, run.describe()
    assert token not in run.output, run.describe()
    assert "kimi.env.HF_TOKEN" in run.output and "0600 env file" in run.output, run.describe()
    assert not (dep.run_dir / "launch.sh").exists()
    assert token not in dep.sshd.log_text()


def test_logs_never_shows_part_of_a_secret_cut_at_the_line_limit(dep: Deployment) -> None:
    # red-team F7: the line was cut at log_line_limit before masking: half the secret was shown
    password = "pw-" + secrets.token_hex(10)
    dep.run_dir.mkdir()
    (dep.run_dir / "current.log").write_text("X" * 1990 + password + " end\nlast line\n")
    config = dep.config(env={"MY_PASSWORD": password}, log_line_limit=2000)
    run = run_fab(dep.sshd, "logs", "--lines", "5", config=config)
    assert run.ok, run.describe()
    assert password[:6] not in run.output, run.describe()
    assert "X" * 1990 + "*** end" in run.stdout and "last line" in run.stdout, run.describe()


def test_diagnose_json_masks_a_secret_with_quotes_backslashes_and_non_ascii(
    dep: Deployment, tmp_path: Path
) -> None:
    # red-team F4: json.dumps escaped the secret in the evidence and the masker missed it
    password = 'pw"Q\\' + secrets.token_hex(6) + "ünï€"
    log = tmp_path / "local.log"
    log.write_text(
        "INFO starting\nERROR 12-05 15:30:01 [core.py:1] EngineCore failed to start: "
        f"RuntimeError: could not connect with password {password}\n"
    )
    config = dep.config(env={"DB_PASSWORD": password})
    run = run_fab(None, "diagnose", "--log", str(log), "--json", config=config)
    assert run.ok, run.describe()
    doc = json.loads(run.stdout)
    evidence = json.dumps(doc["evidence"], ensure_ascii=False)
    assert "password ***" in evidence, run.describe()
    for form in (password, json.dumps(password)[1:-1], password[6:12]):
        assert form not in run.output, run.describe()


def test_a_custom_secret_pattern_keeps_the_default_ones(dep: Deployment) -> None:
    # red-team F6: secret_patterns: ["MYCORP"] replaced the defaults: HF_TOKEN went into
    # launch.sh and the printed diff
    token = "hf_" + secrets.token_hex(12)
    config = dep.config(env={"HF_TOKEN": token}, secret_patterns=["MYCORP"])
    run = run_fab(dep.sshd, "deploy", config=config)
    dep.remember_server()
    assert run.ok, run.describe()
    assert token not in run.output, run.describe()
    assert token not in (dep.run_dir / "launch.sh").read_text()
    assert f"HF_TOKEN={token}" in (dep.run_dir / "server.env").read_text()


def test_logs_follow_masks_a_secret_the_server_wrote_in_two_pieces(
    dep: Deployment, tmp_path: Path
) -> None:
    # red-team F3: masking was per write, so a secret split across two polls was printed whole
    token = "hf_" + secrets.token_hex(12)
    dep.run_dir.mkdir()
    log = dep.run_dir / "current.log"
    log.write_text("INFO old line\n")
    config_path = tmp_path / "cfg.json"
    config_path.write_text(json.dumps(dep.config(env={"HF_TOKEN": token}, poll_interval=0.2)))
    cmd = [str(fab_executable()), *fab_host_args(dep.sshd), "-f", str(config_path)]
    proc = subprocess.Popen(
        [*cmd, "logs", "--follow", "--lines", "1"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        time.sleep(2.0)  # fab connected and follows
        pieces = (f"INFO split token {token[:9]}", f"{token[9:]} end\n", f"INFO whole {token}\n")
        for piece in pieces:
            with log.open("a") as fh:
                fh.write(piece)
            time.sleep(1.0)
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends the follow
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert "INFO split token *** end" in out and "INFO whole ***" in out, (out, err)
    assert token[:9] not in out + err and token[9:] not in out + err, (out, err)


def test_fab_debug_logging_masks_the_config_s_secrets(dep: Deployment) -> None:
    # red-team F2: `fab -d` printed every config file's data, each secret in it, unmasked
    token, key, password = (f"{p}{secrets.token_hex(8)}" for p in ("hf_", "sk-", "pw'\\"))
    config = dep.config(env={"HF_TOKEN": token, "MY_DB_PASSWORD": password}, api_key=key)
    run = run_fab(dep.sshd, "-d", "status", config=config)
    assert "Runtime config file (" in run.output, run.describe()  # the debug log is there
    assert "'HF_TOKEN': '***'" in run.output and "'api_key': '***'" in run.output, run.describe()
    for secret in (token, key, password, repr(password)[1:-1], token[3:12], key[3:12]):
        assert secret not in run.output, run.describe()


def test_a_secret_with_a_newline_reaches_the_server_intact(dep: Deployment) -> None:
    # red-team F10: server.env held pw"$kimi_ops_nl"..., an unbound variable: never started
    password = f"pw-{secrets.token_hex(6)}\nSECOND-LINE 'q' \\ end"
    run = run_fab(dep.sshd, "deploy", config=dep.config(env={"MY_PASSWORD": password}))
    dep.remember_server()
    assert run.ok, run.describe()
    assert password.split("\n")[0] not in run.output, run.describe()
    env_file = dep.run_dir / "server.env"
    sourced = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; set -a; . {env_file}; printf %s "$MY_PASSWORD"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert sourced.stdout == password
