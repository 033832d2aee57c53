"""The launch script: rendered in kimi_ops, run here by bash against an argv-dumping stub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimi_ops.profile import load_profile
from kimi_ops.script import (
    confirm_command,
    engine_command,
    launch_command,
    new_launch_id,
    parse_confirm_output,
    parse_launch_output,
    render_launch_script,
    server_argv,
)

STUB = """#!{python}
import json, os, sys
with open(os.environ["ARGV_DUMP"], "w") as fh:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ), "pid": os.getpid()}}, fh)
"""


def _stub(tmp_path: Path) -> Path:
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    return stub


def _run(tmp_path: Path, profile_cfg: dict, extra_env: dict | None = None) -> dict:
    run_dir = tmp_path / "run dir"
    run_dir.mkdir()
    profile = load_profile({**profile_cfg, "python": str(_stub(tmp_path)), "run_dir": str(run_dir)})
    script = run_dir / "launch.sh"
    script.write_text(render_launch_script(profile))
    dump = tmp_path / "dump.json"
    env = {"PATH": os.environ["PATH"], "ARGV_DUMP": str(dump), **(extra_env or {})}
    proc = subprocess.run(
        ["bash", str(script), "test-launch"], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(dump.read_text())
    data["stdout"] = proc.stdout
    data["run_dir"] = run_dir
    data["profile"] = profile
    return data


def test_script_execs_the_server_with_exact_argv_env_and_pidfile(tmp_path: Path) -> None:
    out = _run(tmp_path, {"extra_args": ["--max-model-len", "131072"]})
    profile = out["profile"]
    assert out["argv"] == ["-m", "vllm.entrypoints.openai.api_server", *server_argv(profile)]
    assert out["argv"][-2:] == ["--max-model-len", "131072"]
    assert out["env"]["NCCL_PROTO"] == "LL" and out["env"]["NCCL_P2P_LEVEL"] == "SYS"
    # The pidfile names the exec'd server itself, and the launch id is recorded.
    assert (out["run_dir"] / "server.pid").read_text().strip() == str(out["pid"])
    assert (out["run_dir"] / "launch.id").read_text().strip() == "test-launch"


def test_hostile_strings_reach_the_server_unchanged(tmp_path: Path) -> None:
    nasty = '/models/my model\'s "dir" $(touch pwned); `id` ;\nnext'
    out = _run(
        tmp_path,
        {
            "model": nasty,
            "served_model_name": "a b$c",
            "extra_args": ["--chat-template", "{{ '$HOME' }};\n"],
            "env": {"WEIRD": "x'y\"z $PATH"},
        },
    )
    assert out["argv"][out["argv"].index("--model") + 1] == nasty
    assert out["argv"][out["argv"].index("--served-model-name") + 1] == "a b$c"
    assert out["argv"][-1] == "{{ '$HOME' }};\n"
    assert out["env"]["WEIRD"] == "x'y\"z $PATH"
    assert not (tmp_path / "pwned").exists()


def test_secrets_file_is_sourced_not_rendered(tmp_path: Path) -> None:
    run_dir = tmp_path / "run dir"
    profile_cfg = {"api_key": "sk-secret-123"}
    # The script never contains secrets; they come from server.env at run time.
    text = render_launch_script(
        load_profile({**profile_cfg, "run_dir": str(run_dir), "python": "/x/python3"})
    )
    assert "sk-secret-123" not in text
    run_dir.mkdir()
    (run_dir / "server.env").write_text("export VLLM_API_KEY='sk-secret-123'\n")
    stub = _stub(tmp_path)
    profile = load_profile({"python": str(stub), "run_dir": str(run_dir)})
    (run_dir / "launch.sh").write_text(render_launch_script(profile))
    dump = tmp_path / "dump.json"
    subprocess.run(
        ["bash", str(run_dir / "launch.sh"), "x"],
        env={"PATH": os.environ["PATH"], "ARGV_DUMP": str(dump)},
        check=True,
        timeout=30,
    )
    data = json.loads(dump.read_text())
    assert data["env"]["VLLM_API_KEY"] == "sk-secret-123"
    assert "sk-secret-123" not in " ".join(data["argv"])


def test_missing_python_fails_fast_with_the_shell_error(tmp_path: Path) -> None:
    profile = load_profile({"python": str(tmp_path / "nope" / "python3"), "run_dir": str(tmp_path)})
    (tmp_path / "launch.sh").write_text(render_launch_script(profile))
    proc = subprocess.run(
        ["bash", str(tmp_path / "launch.sh"), "x"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 127
    assert "not an executable file" in proc.stderr and str(tmp_path / "nope") in proc.stderr
    assert not (tmp_path / "server.pid").exists()


def test_rendering_is_deterministic_and_strict() -> None:
    p = load_profile({"run_dir": "/srv/kimi"})
    text = render_launch_script(p)
    assert text == render_launch_script(p)
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert "\nexec /root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server " in text
    with pytest.raises(ValueError):
        render_launch_script(load_profile({"run_dir": "~/kimi"}))


def test_tool_choice_flag_is_added_once() -> None:
    p = load_profile({"extra_args": ["--enable-auto-tool-choice"]})
    assert server_argv(p).count("--enable-auto-tool-choice") == 1
    none = load_profile({"tool_call_parser": None})
    assert "--enable-auto-tool-choice" not in server_argv(none)
    assert "--tool-call-parser" not in server_argv(none)


def test_standin_engine_runs_the_uploaded_standin() -> None:
    p = load_profile({"engine": "standin", "run_dir": "/srv/k"})
    assert engine_command(p)[:2] == [p.python, "/srv/k/kimi_standin.py"]
    assert "KIMI_STANDIN_CONFIG=/srv/k/standin.json" in render_launch_script(p)


def test_launch_and_confirm_commands_are_single_lines() -> None:
    lid = new_launch_id("20261202T120000", "abc123")
    cmd = launch_command("/srv/my dir", lid)
    assert "\n" not in cmd
    assert "setsid nohup bash '/srv/my dir'/launch.sh" in cmd
    assert "< /dev/null" in cmd and "2>&1" in cmd and "ln -sfn" in cmd
    assert parse_launch_output("noise\npid=4242\n") == 4242
    assert parse_launch_output("") is None
    with pytest.raises(ValueError):
        launch_command("/srv", "x; rm -rf /")
    conf = confirm_command("/srv", 12, lid)
    assert "\n" not in conf
    parsed = parse_confirm_output("alive=1\nlogfile=0\npidfile=12\n@@log\nboom\n")
    assert parsed["alive"] == "1" and parsed["log"] == "boom\n"


def test_launch_command_really_detaches(tmp_path: Path) -> None:
    """Run the real launcher locally: it returns at once, the server keeps running, the pidfile
    and current.log are in place."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sleeper = tmp_path / "python3"
    sleeper.write_text(
        f"#!{sys.executable}\nimport time; print('serving', flush=True); time.sleep(30)\n"
    )
    sleeper.chmod(0o755)
    profile = load_profile({"python": str(sleeper), "run_dir": str(run_dir)})
    (run_dir / "launch.sh").write_text(render_launch_script(profile))
    (run_dir / "launch.sh").chmod(0o700)
    lid = new_launch_id("20261202T120000", "beef01")
    proc = subprocess.run(
        ["bash", "-c", launch_command(str(run_dir), lid)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    pid = parse_launch_output(proc.stdout)
    assert pid is not None
    try:
        for _ in range(50):
            if (run_dir / "server.pid").exists() and "serving" in (
                run_dir / "current.log"
            ).read_text():
                break
            time.sleep(0.1)
        assert int((run_dir / "server.pid").read_text()) == pid
        assert os.getpgid(pid) == pid  # its own session and process group
        assert (run_dir / "current.log").resolve() == run_dir / "logs" / f"{lid}.log"
        conf = subprocess.run(
            ["bash", "-c", confirm_command(str(run_dir), pid, lid)],
            capture_output=True,
            text=True,
            timeout=10,
        )
        parsed = parse_confirm_output(conf.stdout)
        assert parsed["alive"] == "1" and parsed["log"].strip().endswith("serving")
    finally:
        os.kill(pid, 9)  # the process this test started, by PID
