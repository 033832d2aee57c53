"""Issue 12, config and input (items 9, 13-20), through the real `fab` command line and a real
sshd, with the stand-in engine (it EMULATES vLLM; no model is loaded)."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import stat
import time
from pathlib import Path

import pytest

from tasks import bundle as diagnose_bundle

from .deployment import Deployment
from .harness import FabRun, cause_line, free_port, pid_alive, pids_with_marker, ps_listing, run_fab

pytestmark = pytest.mark.e2e


# --- 9: secret-named kimi.env values ----------------------------------------------------------

#: Names a user would give secrets, one per default pattern, plus one for a custom pattern.
SECRET_NAMES = (
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "DB_PASSWORD",
    "smtp_passwd",
    "GITHUB_CREDENTIALS",
    "Proxy_Auth",
    "SSH_PRIVATE",
    "UPSTREAM_BEARER",  # secret only through kimi.secret_patterns
)


def _files_text(directory: Path, skip: Path) -> dict[str, str]:
    return {
        str(p): p.read_text(errors="replace")
        for p in directory.rglob("*")
        if p.is_file() and p != skip
    }


def test_secret_named_env_values_reach_only_the_0600_env_file(dep: Deployment) -> None:
    values = {name: f"s3cr3t-{name.lower()}-{secrets.token_hex(8)}" for name in SECRET_NAMES}
    env = {**values, "NCCL_DEBUG": "WARN"}
    patterns = ["TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE"]
    # (dep.fab's own ``env`` is fab's process environment: kimi.env goes in as an override)
    dep.overrides.update(env=env, secret_patterns=[*patterns, "BEARER"])
    kimi: dict[str, object] = {}
    # A launch script from before (a deploy that still wrote the secrets into it): the diff
    # upload-script prints shows its removed lines, which must not show the values either.
    dep.run_dir.mkdir()
    old = "#!/usr/bin/env bash\n" + "".join(f"export {k}={v}\n" for k, v in values.items())
    # ... and secrets the profile no longer holds (a rotated token, a credential URL, an API
    # key on the exec line), which no masker knows by value (red team 2026-12-05)
    rotated = {
        "OLD_HF_TOKEN": "hf_" + secrets.token_hex(16),
        "DATABASE_URL": f"postgres://app:{secrets.token_hex(6)}@db.internal/app",
        "api-key": "sk-" + secrets.token_hex(14),
    }
    old += f"export OLD_HF_TOKEN={rotated['OLD_HF_TOKEN']}\n"
    old += f"export DATABASE_URL='{rotated['DATABASE_URL']}'\n"
    old += f"exec python3 -m vllm.entrypoints.openai.api_server --api-key {rotated['api-key']}\n"
    (dep.run_dir / "launch.sh").write_text(old)
    (dep.run_dir / "launch.sh").chmod(0o700)

    def fab(*args: str, **kimi: object) -> FabRun:
        return run_fab(dep.sshd, *args, config=dep.config(**kimi))

    runs = {
        "preflight --json": dep.fab("preflight", "--json", **kimi),
        "deploy": dep.fab("deploy", **kimi),
        "status": dep.fab("status", **kimi),
        "status --json": dep.fab("status", "--json", **kimi),
        "logs": dep.fab("logs", **kimi),
        "diagnose": dep.fab("diagnose", **kimi),
        "deploy --dry": dep.fab("deploy", "--dry", "--restart", **kimi),
        "bad profile": dep.fab("status", **{**kimi, "port": "not-a-port"}),
        "bad env": fab("status", env={**env, "HF_TOKEN": [values["HF_TOKEN"]]}),
    }
    assert runs["deploy"].ok, runs["deploy"].describe()
    assert "launch.sh" in runs["deploy"].output, runs["deploy"].output
    assert "***" in runs["deploy"].output, runs["deploy"].output
    assert runs["bad profile"].returncode == 1 and runs["bad env"].returncode == 1
    report = json.loads(runs["preflight --json"].stdout)
    assert report["plan"]["env"]["HF_TOKEN"] == "***", report["plan"]["env"]
    assert report["plan"]["env"]["NCCL_DEBUG"] == "WARN"

    env_file = dep.run_dir / "server.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    held = env_file.read_text()
    shown = {name: run.output for name, run in runs.items()}
    shown.update(_files_text(dep.run_dir, skip=env_file))
    shown["sshd log"] = dep.sshd.log_text()
    for name, value in values.items():
        assert value in held, name
        for where, text in shown.items():
            assert value not in text, f"{name}'s value shown in {where}:\n{text[-3000:]}"
    for name, value in rotated.items():
        secret = value.split(":")[-1].split("@")[0] if name == "DATABASE_URL" else value
        for where, text in shown.items():
            assert secret not in text, f"old {name} shown in {where}:\n{text[-3000:]}"
    assert "-export OLD_HF_TOKEN=***" in runs["deploy"].output, runs["deploy"].output
    script = (dep.run_dir / "launch.sh").read_text()
    assert "export NCCL_DEBUG=WARN" in script
    assert not any(f"export {n}=" in script for n in SECRET_NAMES), script

    # The server really has them (from the env file), though no file but that one holds them.
    pid = dep.pidfile_pid()
    assert pid is not None and pid_alive(pid)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for name, value in values.items():
        assert f"{name}={value}".encode() in environ, name
    assert cause_line(runs["bad profile"].output)


# --- 13, 14: the -f file ----------------------------------------------------------------------


def _one_error_line(run: FabRun) -> str:
    assert run.returncode == 1 and not run.timed_out, run.describe()
    assert "Traceback" not in run.output, run.describe()
    lines = [ln for ln in run.output.splitlines() if ln.strip()]
    assert len(lines) == 1, run.describe()
    return lines[0]


def test_a_missing_config_file_fails_naming_it(dep: Deployment, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-profile.yaml"
    line = _one_error_line(run_fab(dep.sshd, "-f", str(missing), "status"))
    assert line == f"error: config file not found: {missing} (given with -f)", line


@pytest.mark.parametrize("section", ["kim", "Kimi", "kimi_ops"])
def test_a_misspelled_section_fails_naming_it(
    dep: Deployment, tmp_path: Path, section: str
) -> None:
    cfg = tmp_path / "profile.yaml"
    cfg.write_text(f"{section}:\n  port: 8001\n")
    line = _one_error_line(run_fab(dep.sshd, "-f", str(cfg), "status"))
    assert line.startswith(f"error: config file {cfg}: unknown section `{section}:`"), line


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("kimi:\n  port: 8001\n   model: /m\n", ":3:9:"),  # bad indentation
        ("kimi:\n  env: {HF_TOKEN: x\n", ":3:1:"),  # unclosed flow mapping
        ("kimi:\n\tport: 8001\n", ":2:1:"),  # a tab
    ],
    ids=["indent", "unclosed", "tab"],
)
def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(
    dep: Deployment, tmp_path: Path, text: str, where: str
) -> None:
    cfg = tmp_path / "profile.yaml"
    cfg.write_text(text)
    line = _one_error_line(run_fab(dep.sshd, "-f", str(cfg), "status"))
    assert line.startswith(f"error: config file {cfg}{where} invalid YAML: "), line


# --- 15: host_overrides keys, 19: --json, 20: the typed name everywhere -----------------------


def _alias_config(dep: Deployment, tmp_path: Path, alias: str = "gpualias") -> Path:
    """An ssh_config naming the test sshd ``alias`` (as a user's ~/.ssh/config would)."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host {alias}\n  HostName {dep.sshd.host}\n  Port {dep.sshd.port}\n"
        f"  User {dep.sshd.user}\n  IdentityFile {dep.sshd.key_path}\n"
    )
    return cfg


def _fab_hosts(
    dep: Deployment, hosts: str, *args: str, ssh_config: Path, kimi: dict | None = None
) -> FabRun:
    ssh = ["--ssh-config", str(ssh_config), "-H", hosts, "-i", str(dep.sshd.key_path)]
    return run_fab(None, *ssh, *args, config=dep.config(**(kimi or {})))


@pytest.mark.parametrize(
    "key",
    ["gpualias", "{host}", "{host}:{port}", "{user}@{host}", "{user}@{host}:{port}"],
)
def test_host_overrides_keys_match_the_name_typed(
    dep: Deployment, tmp_path: Path, key: str
) -> None:
    ssh_config = _alias_config(dep, tmp_path)
    s = dep.sshd
    typed = "gpualias" if key == "gpualias" else f"{s.user}@{s.host}:{s.port}"
    key = key.format(host=s.host, port=s.port, user=s.user)
    run = _fab_hosts(
        dep,
        typed,
        "kill-stale",
        kimi={"host_overrides": {key: {"port": 1234}}},
        ssh_config=ssh_config,
    )
    assert run.ok, run.describe()
    assert "port 1234)" in run.output, run.describe()


def test_a_host_overrides_key_that_matches_no_host_fails_naming_it(
    dep: Deployment, tmp_path: Path
) -> None:
    run = _fab_hosts(
        dep,
        "gpualias",
        "kill-stale",
        kimi={"host_overrides": {"gpu-typo": {"port": 1234}}},
        ssh_config=_alias_config(dep, tmp_path),
    )
    assert run.returncode == 1 and "Traceback" not in run.output, run.describe()
    cause = cause_line(run.output)
    assert "host_overrides.gpu-typo" in cause and "matches no host" in cause, cause


def test_fleet_lines_and_recap_use_the_typed_name(dep: Deployment, tmp_path: Path) -> None:
    s = dep.sshd
    other = f"{s.host}:{s.port}"
    run = _fab_hosts(dep, f"gpualias,{other}", "status", ssh_config=_alias_config(dep, tmp_path))
    lines = [ln for ln in run.output.splitlines() if "] status: " in ln]
    assert any("[gpualias] status" in ln for ln in lines), run.describe()
    assert any(f"[{other}] status" in ln for ln in lines), run.describe()
    assert f"@{s.host}:{s.port}]" not in run.output, run.describe()  # never the resolved name
    recap = run.output[run.output.index("RECAP") :]
    assert "gpualias" in recap and other in recap, recap


@pytest.mark.parametrize("task", ["deploy", "status", "stop", "verify"])
def test_json_with_one_host_is_one_json_document(dep: Deployment, task: str) -> None:
    run = dep.fab(task, "--json")
    doc = json.loads(run.stdout)  # the whole of stdout, nothing else
    assert doc["task"] == task and len(doc["hosts"]) == 1, doc
    assert doc["hosts"][0]["host"] == dep.sshd.target, doc
    assert (run.returncode == 0) == (doc["hosts"][0]["result"] in ("ok", "ready")), run.describe()


# --- 16: every remote command has a time limit, enforced on the host --------------------------


def test_a_blocking_read_on_the_host_times_out_naming_the_command(dep: Deployment) -> None:
    """config.json is a FIFO nobody writes: reading it blocks forever (as a hung NFS mount
    would). Preflight must fail after command_timeout, name the command, and leave no process
    behind on the host still blocked on it."""
    fifo = dep.model / "config.json"
    fifo.unlink()
    os.mkfifo(fifo)
    run = dep.fab("preflight", command_timeout=3, timeout=60)
    assert run.returncode == 1 and not run.timed_out, run.describe()
    assert "Traceback" not in run.output, run.describe()
    cause = cause_line(run.output)
    assert "did not finish within 3 s" in cause and "ended on the host" in cause, cause
    assert "it was in its part 'config_json'" in cause, cause  # the part that blocked
    assert "command: " in run.output and str(fifo) in run.output, run.describe()
    assert run.seconds < 3 + 12, run.describe()
    deadline = time.monotonic() + 10
    while (left := pids_with_marker(str(fifo))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], [e for e in ps_listing() if e.pid in left]


# --- 17, 18, 20: reading the host's log; status with the stand-in ----------------------------


def test_logs_status_and_diagnose_on_a_long_multibyte_log(dep: Deployment) -> None:
    run = dep.fab("deploy")
    assert run.ok, run.describe()
    status = dep.fab("status")
    assert "GPU memory used/total MiB: " in status.output, status.describe()
    # The stand-in's emulated GPUs: 8 of 97887 MiB, and the server holds memory on them.
    gpu_line = next(ln for ln in status.output.splitlines() if "GPU memory" in ln)
    assert gpu_line.count("97887") == 8, gpu_line

    diag = dep.fab("diagnose", "--json", timeout=60)
    assert diag.ok, diag.describe()
    assert json.loads(diag.stdout)["label"] == "healthy", diag.stdout
    assert (dep.run_dir / "kimi_diagnose.py").read_bytes() == diagnose_bundle.build()

    log = dep.run_dir / "current.log"
    text = "".join(f"INFO ünïcødé ✓ 日本語 line {i} {'é' * (i % 50)}\n" for i in range(3000))
    huge = "E" * (30 * 2**20)  # one 30 MB line: a tensor repr, say
    with log.open("a", encoding="utf-8") as fh:
        fh.write(text + huge + "\n" + "after the huge line ✓\n")
    logs = dep.fab("logs", "--lines", "3005", log_line_limit=100, timeout=60)
    assert logs.ok, logs.describe()
    assert "\ufffd" not in logs.stdout  # no character split between two reads
    shown = logs.stdout.splitlines()
    assert "INFO ünïcødé ✓ 日本語 line 2999 " + "é" * 49 in shown
    assert shown[-1] == "after the huge line ✓"
    cut = [ln for ln in shown if ln.startswith("EEEE")]
    assert cut == ["E" * 100 + " …[line cut at 100 chars]"], [c[:120] for c in cut]
    assert all(len(ln) <= 100 + 30 for ln in shown), max(len(ln) for ln in shown)
    assert logs.seconds < 30, logs.describe()


@pytest.mark.parametrize("task", ["deploy", "status", "preflight", "diagnose"])
def test_json_is_one_json_document_even_when_the_host_cannot_be_reached(
    dep: Deployment, task: str
) -> None:
    closed = dataclasses.replace(dep.sshd, port=free_port())
    run = run_fab(closed, task, "--json", config=dep.config(connect_timeout=3))
    assert run.returncode == 1 and "Traceback" not in run.output, run.describe()
    doc = json.loads(run.stdout)
    text = json.dumps(doc)
    assert "connection refused" in text, doc
