"""Issue 6: bad input through the real `fab` command line and a real sshd. Each case must end
with a non-zero exit, ONE line naming the cause, and no Python traceback (KIMI_OPS_DEBUG=1 or
`fab -d` would show one). The unknown host key case lives in test_security.py."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from kimi_ops.errors import StepFailed
from kimi_ops.profile import load_profile
from tasks import steps
from tasks.host import Host
from tasks.testing import Reply, ScriptedConnection

from .deployment import Deployment
from .harness import (
    REPO_ROOT,
    FabRun,
    SshdHost,
    cause_line,
    descendants,
    fab_executable,
    fab_host_args,
    free_port,
    generate_key,
    kill_pid_tree_started_by_test,
    pid_alive,
    run_fab,
)

pytestmark = pytest.mark.e2e


def cause_of(run: FabRun) -> str:
    """Assert a clean failure and return its one cause line ("error: ..." / "failed: ...")."""
    assert run.returncode != 0 and not run.timed_out, run.describe()
    assert "Traceback" not in run.output, run.describe()
    return cause_line(run.output)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def new_sshd_lines(sshd: SshdHost, offset: int) -> str:
    return sshd.log_text()[offset:]


# --- the host cannot be reached ---------------------------------------------------------------


def test_a_closed_port_fails_fast_naming_the_port(dep: Deployment) -> None:
    port = free_port()  # bound, then closed: nothing listens there
    run = run_fab(
        dataclasses.replace(dep.sshd, port=port), "kill-stale", config=dep.config(connect_timeout=3)
    )
    cause = cause_of(run)
    assert f"connection refused on port {port}" in cause, cause
    assert run.seconds < 3 + 5, run.describe()


def test_a_port_that_never_speaks_ssh_fails_within_the_connect_timeout(dep: Deployment) -> None:
    with socket.socket() as silent:  # accepts TCP connections (backlog), never sends a banner
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        run = run_fab(
            dataclasses.replace(dep.sshd, port=port),
            "kill-stale",
            config=dep.config(connect_timeout=3),
        )
    cause = cause_of(run)
    assert f"port {port}" in cause and "SSH" in cause and "3 s" in cause, cause
    assert "No existing session" not in cause, cause
    assert run.seconds < 3 + 5, run.describe()


def test_a_key_the_host_does_not_know_is_an_authentication_failure(
    dep: Deployment, tmp_path: Path
) -> None:
    stranger = generate_key(tmp_path / "stranger_ed25519", comment="not-authorized")
    run = run_fab(
        dataclasses.replace(dep.sshd, key_path=stranger), "kill-stale", config=dep.config()
    )
    cause = cause_of(run)
    assert "SSH authentication failed" in cause, cause
    assert "fab -i KEY" in run.output
    assert run.seconds < 15, run.describe()


# --- the profile is wrong: refused before any remote command ----------------------------------


@pytest.mark.parametrize(
    ("task_args", "kimi", "key"),
    [
        (("kill-stale",), {"port": "abc"}, "kimi.port"),
        (("kill-stale", "--port", "abc"), {}, "kimi.port"),
        (("deploy",), {"tensor_parallel_size": 0}, "kimi.tensor_parallel_size"),
        (("status",), {"gpu_count": 8}, "kimi.gpu_count"),
        (("deploy",), {"api_key_env": "KIMI_TEST_NOT_SET"}, "kimi.api_key_env"),
    ],
    ids=["port-abc", "port-flag-abc", "tp-0", "unknown-key", "unset-env"],
)
def test_a_bad_profile_is_refused_before_connecting(
    dep: Deployment, task_args: tuple[str, ...], kimi: dict, key: str
) -> None:
    log_offset = len(dep.sshd.log_text())
    run = dep.fab(*task_args, env={"KIMI_TEST_NOT_SET": ""}, **kimi)
    cause = cause_of(run)
    assert f"profile key {key}:" in cause, cause
    assert "connect" not in cause and "refused" not in cause, cause
    time.sleep(0.2)
    assert "Connection from" not in new_sshd_lines(dep.sshd, log_offset), "it connected"


# --- the model directory ----------------------------------------------------------------------


def test_patch_kv_config_with_a_missing_model_directory_names_it(dep: Deployment) -> None:
    missing = dep.root / "no-such-model"
    run = dep.fab("patch-kv-config", model=str(missing))
    cause = cause_of(run)
    assert str(missing) in cause and "does not exist" in cause, cause
    assert not missing.exists()


def test_deploy_with_a_missing_model_directory_names_it_and_starts_nothing(
    dep: Deployment,
) -> None:
    missing = dep.root / "no-such-model"
    run = dep.fab("deploy", model=str(missing))
    cause = cause_of(run)
    assert "preflight" in cause and str(missing) in cause, cause
    assert "launch" not in run.output and dep.pidfile_pid() is None, run.describe()


@pytest.mark.parametrize(
    "config_text",
    ['{"architectures": ["KimiK25ForConditionalGeneration"],', "[1, 2, 3]\n"],
    ids=["malformed", "not-an-object"],
)
def test_patch_kv_config_with_bad_json_changes_nothing(dep: Deployment, config_text: str) -> None:
    (dep.model / "config.json").write_text(config_text)
    before = snapshot(dep.model)
    run = dep.fab("patch-kv-config")
    cause = cause_of(run)
    assert f"{dep.model}/config.json" in cause, cause
    assert ("not valid JSON" in cause) or ("not a JSON object" in cause), cause
    assert "nothing was changed" in run.output
    assert snapshot(dep.model) == before  # byte for byte, and no backup written


# --- run_dir ----------------------------------------------------------------------------------


@pytest.fixture
def blocked_run_dir(dep: Deployment) -> Path:
    """A run_dir that cannot be created, even by root: its parent is a regular file."""
    blocker = dep.root / "file.txt"
    blocker.write_text("a regular file, not a directory\n")
    return blocker / "run"


def test_deploy_into_a_run_dir_that_cannot_be_created_names_it(
    dep: Deployment, blocked_run_dir: Path
) -> None:
    run = dep.fab("deploy", run_dir=str(blocked_run_dir))
    cause = cause_of(run)
    assert f"run_dir {blocked_run_dir}" in cause and "Not a directory" in cause, cause


def test_upload_script_into_a_run_dir_that_cannot_be_created_says_why(
    dep: Deployment, blocked_run_dir: Path
) -> None:
    run = dep.fab("upload-script", run_dir=str(blocked_run_dir))
    cause = cause_of(run)
    assert "Not a directory" in cause, cause
    assert f"cannot create run_dir {blocked_run_dir}" in run.output, run.describe()


def test_upload_script_cause_line_names_the_run_dir(dep: Deployment, blocked_run_dir: Path) -> None:
    run = dep.fab("upload-script", run_dir=str(blocked_run_dir))
    assert str(blocked_run_dir) in cause_of(run)


# --- the server dies while verify waits -------------------------------------------------------


def test_a_server_killed_while_verify_polls_fails_deploy_with_the_last_log_lines(
    dep: Deployment, tmp_path: Path
) -> None:
    cfg = tmp_path / "slow.json"
    cfg.write_text(json.dumps(dep.config(standin={"load_seconds": 8})))
    proc = subprocess.Popen(
        [str(fab_executable()), *fab_host_args(dep.sshd), "-f", str(cfg), "deploy"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    tree: list[int] = []
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            if re.match(r"changed: .* launch: started PID \d+", line):
                break
        else:
            pytest.fail("deploy never launched:\n" + "".join(lines))
        pid = dep.pidfile_pid()
        assert pid is not None and pid_alive(pid)
        dep.remember_server()
        deadline = time.monotonic() + 15
        while "Loading" not in dep.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)  # verify polls while the stand-in loads its "checkpoint"
        tree = descendants(pid)
        os.kill(pid, signal.SIGKILL)  # the server this test's deploy started, by its PID
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for child in tree:
            if pid_alive(child):
                kill_pid_tree_started_by_test(child)
    output = "".join(lines) + rest
    run = FabRun(tuple(proc.args), proc.returncode, output, "", 0.0)
    cause = cause_of(run)
    assert "verify:" in cause and re.search(r"crashed|exited|died", cause), cause
    assert "last log lines:" in output, output
    tail = output.split("last log lines:", 1)[1]
    assert "Loading" in tail or "kimi-ops: launch" in tail, output


def test_a_silent_death_during_verify_is_not_told_to_wait() -> None:
    """Unit level (no sshd): the same sequence verify saw in the e2e test above."""
    from kimi_ops import verify as vfy

    state = vfy.VerifyState("kimi-k2.5", startup_timeout=600, stall_timeout=300)
    log = "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\n"
    loading = vfy.PollFacts(pid=7, alive=True, log_size=len(log), read=len(log), chunk=log)
    assert state.feed_poll(loading, 1.0).state == "waiting"
    gone = vfy.PollFacts(pid=7, alive=False, log_size=len(log), read=0, chunk="")
    verdict = state.feed_poll(gone, 2.0)
    assert verdict.state == "crashed"
    assert "minutes" not in verdict.diagnosis.hint, verdict.diagnosis.hint


# --- a write failure in patch-kv-config -------------------------------------------------------


def _chattr(flag: str, path: Path) -> bool:
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    done = subprocess.run([chattr, flag, str(path)], capture_output=True, timeout=10)
    return done.returncode == 0


def test_patch_kv_config_write_failure_keeps_both_originals(dep: Deployment) -> None:
    second = dep.model / "hf_quant_config.json"  # written after config.json
    before = snapshot(dep.model)
    if not _chattr("+i", second):
        pytest.skip("chattr +i is not available on this filesystem (root ignores modes)")
    try:
        run = dep.fab("patch-kv-config")
    finally:
        assert _chattr("-i", second)
    cause = cause_of(run)
    assert "hf_quant_config.json" in cause and "Operation not permitted" in cause, cause
    assert "Changed: nothing" in cause, cause
    after = snapshot(dep.model)
    for name in ("config.json", "hf_quant_config.json"):
        assert after[name] == before[name], f"{name} was changed"
        assert after[f"{name}.kimi-ops.orig"] == before[name]  # as the message says
    leftovers = [n for n in after if n.startswith(".") or ".tmp" in n or "prev" in n]
    assert leftovers == [], leftovers


def test_patch_kv_config_failed_upload_of_the_second_file_replaces_nothing() -> None:
    """Unit level (no sshd): the SFTP write of the second file fails."""
    from kimi_ops.checkpoint import checkpoint_files

    profile = load_profile({"model": "/m", "run_dir": "/srv/kimi"})
    originals = {f"/m/{n}": t for n, t in checkpoint_files().items()}

    def read_files(command: str) -> Reply:
        mark = re.search(r"(@@kimi-ops-[0-9a-f]+):", command)
        assert mark is not None, command
        out = ""
        for i, path in enumerate(re.findall(r"if \[ -f (\S+) \]", command)):
            text = originals.get(path)
            out += (
                f"{mark.group(1)}:{i}:missing\n"
                if text is None
                else (f"{mark.group(1)}:{i}:644\n{base64.b64encode(text.encode()).decode()}\n")
            )
        return Reply(out)

    conn = ScriptedConnection().on(r"@@kimi-ops-[0-9a-f]+:nodir", read_files)
    sftp = conn.sftp()
    real_open = sftp.open

    def open_second_fails(path: str, mode: str = "r"):  # noqa: ANN202
        if "hf_quant_config.json" in path:
            sftp.fail_write = OSError(28, "No space left on device")
        return real_open(path, mode)

    sftp.open = open_second_fails  # type: ignore[method-assign]
    with pytest.raises(StepFailed) as info:
        steps.patch_kv_config(Host(conn, profile), profile)  # type: ignore[arg-type]
    reason = info.value.reason
    assert "hf_quant_config.json" in reason and "No space left on device" in reason, reason
    assert "Changed: nothing" in reason, reason
    assert not any(re.search(r"\bmv -f\b", c) for c in conn.commands), conn.commands
    (cleanup,) = conn.ran(r"^rm -f -- ")
    assert cleanup.count(".tmp") == 2  # both staged files removed, neither swapped in
    # the backup was made first (a copy of this run's own, linked to the backup's name)
    assert conn.ran(r"cp -p -- /m/config.json /m/config\.json\.kimi-ops\.orig\.\w+\.tmp && ")


@pytest.mark.parametrize("how", ["KIMI_OPS_DEBUG=1", "fab -d"])
def test_debugging_shows_the_traceback(dep: Deployment, how: str) -> None:
    if how == "fab -d":
        run = dep.fab("-d", "kill-stale", port="abc")
    else:
        run = dep.fab("kill-stale", env={"KIMI_OPS_DEBUG": "1"}, port="abc")
    assert run.returncode != 0, run.describe()
    assert "Traceback" in run.output and "kimi.port" in run.output, run.describe()
