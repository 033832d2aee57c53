"""Red-team B through the real fab command line and a real sshd: a credential in extra_args is
refused and never printed (not even by ``fab -d``); a token planted in the server's log is
masked by ``fab logs`` and ``fab diagnose`` whether or not fab's shell holds it; an unset
secret_env name never silently drops the secret the running server got."""

from __future__ import annotations

import secrets

import pytest

from .deployment import Deployment
from .harness import pid_alive

pytestmark = pytest.mark.e2e


def test_a_credential_in_extra_args_is_refused_and_never_printed(dep: Deployment) -> None:
    password = "RTURLPW" + secrets.token_hex(6)
    token = "sk-RTSK" + secrets.token_hex(12)
    extra = ["--lora-modules", f"x=https://u:{password}@127.0.0.1/x", "--api-token-x", token]
    for args in (("deploy",), ("preflight", "--json"), ("-d", "preflight")):
        run = dep.fab(*args, extra_args=extra)
        assert run.returncode == 1, run.describe()
        assert password not in run.output and token not in run.output, run.describe()
        assert "extra_args[1]" in run.output and "secret_env" in run.output, run.describe()
    assert not (dep.run_dir / "launch.sh").exists()
    assert password not in dep.sshd.log_text() and token not in dep.sshd.log_text()


def test_an_abbreviated_port_flag_is_refused(dep: Deployment) -> None:
    run = dep.fab("deploy", extra_args=["--por", "9999"])
    assert run.returncode == 1, run.describe()
    assert "--por (vLLM reads it as --port)" in run.output and "kimi.port" in run.output
    assert not (dep.run_dir / "launch.sh").exists()


def test_logs_and_diagnose_mask_a_planted_token_fab_does_not_know(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    planted = "plantedHF" + secrets.token_hex(8)
    key = "sk-" + secrets.token_hex(16)
    url_pw = "URLPW" + secrets.token_hex(6)
    dep.run_dir.mkdir()
    (dep.run_dir / "current.log").write_text(
        f"HF_TOKEN={planted}\n"
        f"INFO non-default args: {{'api_key': ['{key}'], "
        f"'lora_modules': ['x=https://u:{url_pw}@127.0.0.1/x']}}\n"
        "ERROR Engine core initialization failed\n"
    )
    for args in (("logs", "--lines", "10"), ("diagnose",), ("diagnose", "--json")):
        run = dep.fab(*args)
        for value in (planted, key, url_pw):
            assert value not in run.output, run.describe()
    logs = dep.fab("logs", "--lines", "10")
    assert logs.ok and "HF_TOKEN=***" in logs.output, logs.describe()


def test_an_unset_secret_env_name_fails_the_deploy_before_anything_changes(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    token = "hf_" + secrets.token_hex(16)
    first = dep.fab("deploy", env={"HF_TOKEN": token}, secret_env=["HF_TOKEN"])
    assert first.ok, first.describe()
    pid = dep.pidfile_pid()
    env_file = (dep.run_dir / "server.env").read_text()
    assert token in env_file

    again = dep.fab("deploy", secret_env=["HF_TOKEN"])  # a shell without HF_TOKEN
    assert again.returncode == 1, again.describe()
    assert "HF_TOKEN is not set" in again.output and "export HF_TOKEN" in again.output
    assert "remove HF_TOKEN from kimi.secret_env" in again.output, again.describe()
    assert "kill-stale" not in again.output and "upload-script" not in again.output
    assert dep.pidfile_pid() == pid and pid is not None and pid_alive(pid)
    assert (dep.run_dir / "server.env").read_text() == env_file

    # Said explicitly: without HF_TOKEN in secret_env the deploy goes ahead, and the server.env
    # that held it is removed (no secret left).
    dropped = dep.fab("deploy", secret_env=[])
    assert dropped.ok, dropped.describe()
    assert not (dep.run_dir / "server.env").exists()


def test_an_unset_secret_env_name_on_a_fresh_host_is_said(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    run = dep.fab("deploy", secret_env=["HF_TOKEN"])
    assert run.ok, run.describe()
    assert "secret_env HF_TOKEN is not set in this shell" in run.output, run.describe()
