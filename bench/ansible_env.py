"""The bench's own venv with ansible-core (bench/.venv-ansible), and one playbook run.

The venv is created on first use (``python -m venv`` + ``pip install ansible-core`` from PyPI)
and reused afterwards. The playbook does the manual baseline's steps against the same sshd.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import lib

VENV = lib.BENCH / ".venv-ansible"
PLAYBOOK = """\
# The manual procedure as a playbook (kimi-ops benchmark baseline).
- hosts: gpu
  gather_facts: false
  tasks:
    - name: kill the old server (seed-style pattern, made unique by the run's marker)
      command: pkill -9 -f "{{ marker }}.*vllm"
      register: killed
      failed_when: killed.rc not in [0, 1]
      changed_when: killed.rc == 0
    - name: remove leaked shared memory
      shell: rm -f {{ shm_dir }}/psm_* {{ shm_dir }}/sem.mp-*
    - name: patch the KV-cache settings out of the checkpoint config
      command: "{{ patch_command }}"
    - name: launch detached
      shell: "{{ launch_command }} > {{ run_dir }}/manual.pid; cat {{ run_dir }}/manual.pid"
      register: launched
    - name: wait until the server answers (poll every 5 s)
      uri:
        url: "http://127.0.0.1:{{ port }}/v1/models"
        status_code: 200
      register: models
      until: models.status == 200
      retries: 60
      delay: 5
"""


def ensure_venv() -> tuple[Path | None, str]:
    """(path of ansible-playbook, note). None when it cannot be installed (e.g. offline)."""
    exe = VENV / "bin" / "ansible-playbook"
    if exe.exists():
        return exe, "reused " + str(VENV.relative_to(lib.REPO))
    lib.log(f"creating {VENV} and installing ansible-core from PyPI ...")
    start = time.monotonic()
    try:
        subprocess.run(
            [lib.PY, "-m", "venv", str(VENV)],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        subprocess.run(
            [
                str(VENV / "bin" / "pip"),
                "install",
                "-q",
                "--disable-pip-version-check",
                "ansible-core",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return None, f"could not install ansible-core: {detail.strip()[-300:]}"
    return (
        exe,
        f"installed ansible-core into {VENV.relative_to(lib.REPO)} in "
        f"{time.monotonic() - start:.0f} s",
    )


def version(exe: Path) -> str:
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout
    return (out.splitlines() or [""])[0].strip()


class AnsibleRunner:
    """Config, inventory and playbook in a scratch dir; one ControlMaster per playbook run."""

    def __init__(self, exe: Path, host: lib.SshdHost) -> None:
        self.exe = exe
        self.host = host
        # Not under the run root: the control socket paths must not contain the marker.
        self.dir = Path(tempfile.mkdtemp(prefix="kimi-bench-ansible-"))
        self.cp = self.dir / "cp"
        self.cp.mkdir()
        ssh_args = (
            "-F /dev/null -o ControlMaster=auto -o ControlPersist=60s "
            f"-o UserKnownHostsFile={host.known_hosts_path} -o GlobalKnownHostsFile=/dev/null "
            "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o BatchMode=yes"
        )
        (self.dir / "ansible.cfg").write_text(
            "[defaults]\n"
            "inventory = inventory.ini\n"
            "host_key_checking = True\n"
            f"interpreter_python = {lib.PY}\n"
            "retry_files_enabled = False\n"
            f"remote_tmp = {self.dir}/remote-tmp\n"
            f"local_tmp = {self.dir}/local-tmp\n"
            "[ssh_connection]\n"
            "pipelining = True\n"
            f"control_path_dir = {self.cp}\n"
            f"ssh_args = {ssh_args}\n"
        )
        (self.dir / "inventory.ini").write_text(
            "[gpu]\n"
            f"gpuhost ansible_host={host.host} ansible_port={host.port} "
            f"ansible_user={host.user} ansible_ssh_private_key_file={host.key_path}\n"
        )
        (self.dir / "deploy.yml").write_text(PLAYBOOK)

    def deploy(self, t: lib.Target) -> tuple[subprocess.CompletedProcess[str], float, int | None]:
        extra = {
            "marker": lib.MARKER,
            "shm_dir": str(t.shm_dir),
            "run_dir": str(t.run_dir),
            "port": t.port,
            "patch_command": lib.manual_patch_command(t),
            "launch_command": lib.manual_launch_command(t),
        }
        vars_file = self.dir / "vars.json"
        vars_file.write_text(json.dumps(extra))
        env = dict(os.environ)
        env.update(
            ANSIBLE_CONFIG=str(self.dir / "ansible.cfg"),
            ANSIBLE_HOME=str(self.dir / "home"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_DEPRECATION_WARNINGS="False",
        )
        start = time.monotonic()
        proc = subprocess.run(
            [str(self.exe), "deploy.yml", "-e", f"@{vars_file}"],
            cwd=self.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        seconds = time.monotonic() - start
        pid_text = ""
        with contextlib.suppress(OSError):
            pid_text = (t.run_dir / "manual.pid").read_text().strip()
        return proc, seconds, int(pid_text) if pid_text.isdigit() else None

    def close_masters(self) -> None:
        """Stop this runner's ControlMaster(s) politely, by their sockets (`ssh -O exit`)."""
        for sock in glob.glob(str(self.cp / "*")):
            subprocess.run(
                ["ssh", "-F", "/dev/null", "-o", f"ControlPath={sock}", "-O", "exit", "x"],
                capture_output=True,
                text=True,
                timeout=15,
            )

    def cleanup(self) -> None:
        self.close_masters()
        shutil.rmtree(self.dir, ignore_errors=True)
