"""Shared helpers of the benchmarks: the e2e harness, stand-in deployments, sshd log counting.

Everything runs against throwaway OpenSSH sshd processes on 127.0.0.x (tests/e2e/harness.py)
and the stand-in engine (the standin package, uploaded as one file: it EMULATES vLLM and loads
no model). Every process a benchmark starts is ended by PID; the only pattern kill is the seed-style
``pkill -9 -f "<MARKER>.*vllm"`` of the manual baseline, whose marker is unique to the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from e2e.harness import (  # noqa: E402
    SshdHost,
    SshdServer,
    base_config,
    deep_merge,
    fab_executable,
    free_port,
    generate_key,
    kill_pid_tree_started_by_test,
    pid_alive,
    pids_with_marker,
    run_fab,
    ssh_base_args,
    ssh_run,
    start_sshd,
)

from kimi_ops.checkpoint import checkpoint_files  # noqa: E402
from standin import bundle  # noqa: E402

__all__ = [
    "SshdHost",
    "SshdServer",
    "deep_merge",
    "fab_executable",
    "free_port",
    "kill_pid_tree_started_by_test",
    "pid_alive",
    "run_fab",
    "ssh_base_args",
    "ssh_run",
]

#: The python every "remote" command uses (the host is this machine): the interpreter running
#: the benchmark, so no pyenv shim or PATH lookup adds noise.
PY = sys.executable
#: Unique to this run: every stand-in's argv contains it, so the manual baseline's
#: `pkill -9 -f "<MARKER>.*vllm"` and the final sweep can only match processes of this run.
MARKER = "kb" + secrets.token_hex(5)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


# --------------------------------------------------------------------------------------------
# the run's scratch space and its sshd hosts


class Run:
    """Scratch dir, one shared client key, and the sshd servers started for the run."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"kimi-bench-{MARKER}-"))
        self.key = generate_key(self.root / "client_ed25519", comment="kimi-bench-client")
        self.servers: list[SshdServer] = []
        self._n = 0

    def sshd(self, address: str = "127.0.0.1", *, plain_login: bool = False) -> SshdHost:
        """Start an sshd. ``plain_login``: sessions get an empty HOME, so the login shell skips
        this machine's ~/.bashrc (its pyenv init costs ~0.1 s of CPU per command, which eight
        emulated hosts sharing two cores would pay eight times over)."""
        extra: tuple[str, ...] = ()
        if plain_login:
            home = self.root / "plain-home"
            home.mkdir(exist_ok=True)
            extra = (f"SetEnv HOME={home}",)
        server = start_sshd(
            self.root / f"sshd-{address}-{len(self.servers)}",
            address=address,
            client_key=self.key,
            extra_config=extra,
        )
        self.servers.append(server)
        return server.host

    def newdir(self, name: str) -> Path:
        self._n += 1
        path = self.root / f"{self._n:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def close(self) -> None:
        for server in reversed(self.servers):
            server.stop(remove_tmpdir=False)
        sweep_marker()
        if os.environ.get("KIMI_BENCH_KEEP_TMP") != "1":
            shutil.rmtree(self.root, ignore_errors=True)


def is_ours(pid: int) -> bool:
    """The process's command line holds this run's MARKER (guards against PID reuse)."""
    try:
        return MARKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def sweep_marker() -> list[int]:
    """End (by PID) any process of this run still alive: their argv holds MARKER."""
    left = pids_with_marker(MARKER)
    for pid in left:
        with contextlib.suppress(ValueError):
            kill_pid_tree_started_by_test(pid)
    return left


# --------------------------------------------------------------------------------------------
# sshd log: connections and remote commands


@dataclass(frozen=True)
class SshCount:
    connections: int
    commands: int
    sftp: int

    def __add__(self, other: SshCount) -> SshCount:
        return SshCount(
            self.connections + other.connections,
            self.commands + other.commands,
            self.sftp + other.sftp,
        )

    def to_dict(self) -> dict[str, int]:
        return {"connections": self.connections, "commands": self.commands, "sftp": self.sftp}


class LogCounter:
    """Counts what sshd (LogLevel VERBOSE) logged since `mark()`:

    * ``Accepted publickey`` once per authenticated SSH connection;
    * ``Starting session: command`` once per exec'd remote command (a multiplexed session too);
    * ``Starting session: subsystem 'sftp'`` once per SFTP session.
    """

    def __init__(self, host: SshdHost) -> None:
        self.host = host
        self.offset = 0

    def mark(self) -> None:
        self.offset = self._size()

    def _size(self) -> int:
        try:
            return self.host.sshd_log.stat().st_size
        except OSError:
            return 0

    def count(self, settle: float = 0.3) -> SshCount:
        time.sleep(settle)  # session children write their lines asynchronously
        with open(self.host.sshd_log, "rb") as fh:
            fh.seek(self.offset)
            text = fh.read().decode(errors="replace")
        return SshCount(
            connections=text.count("Accepted publickey"),
            commands=text.count("Starting session: command"),
            sftp=text.count("Starting session: subsystem 'sftp'"),
        )


# --------------------------------------------------------------------------------------------
# stand-in deployments


@dataclass
class Target:
    """One stand-in deployment root on a host: model dir, run dir, shm dir, port."""

    host: SshdHost
    root: Path
    port: int
    started: list[int] = field(default_factory=list)

    @property
    def model(self) -> Path:
        return self.root / "Kimi-K2.5-NVFP4"

    @property
    def run_dir(self) -> Path:
        # "vllm" in the path: the seed-style pattern "<MARKER>.*vllm" matches the server's argv.
        return self.root / "vllm-run"

    @property
    def shm_dir(self) -> Path:
        return self.root / "shm"

    def server_pid(self) -> int | None:
        try:
            text = (self.run_dir / "server.pid").read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def remember(self, pid: int | None = None) -> None:
        pid = pid if pid is not None else self.server_pid()
        if pid is not None and pid not in self.started:
            self.started.append(pid)

    def stop(self) -> None:
        """End the servers this target's launches started (by PID; each is a setsid leader).

        pid_max may be small (32768 here) and the machine busy: a PID is only signalled while
        its command line still holds the run's MARKER, i.e. it is still our server."""
        self.remember()
        for pid in self.started:
            if pid_alive(pid) and is_ours(pid):
                kill_pid_tree_started_by_test(pid)
        self.started.clear()


def make_target(host: SshdHost, root: Path, port: int | None = None) -> Target:
    """A fresh model dir (FP8 KV-cache settings, as shipped) and empty run and shm dirs."""
    t = Target(host, root, port or free_port())
    t.model.mkdir(parents=True)
    t.shm_dir.mkdir()
    for name, text in checkpoint_files().items():
        (t.model / name).write_text(text)
    return t


def kimi_config(t: Target, hosts: Sequence[SshdHost] | None = None, **kimi: Any) -> dict:
    """fab runtime config for `t`: only what the stand-in setup needs; everything else
    (poll_interval 2 s, grace_seconds 20, startup_timeout ...) stays at the shipped defaults."""
    ours = {
        "kimi": {
            "engine": "standin",
            "python": PY,
            "model": str(t.model),
            "run_dir": str(t.run_dir),
            "shm_dir": str(t.shm_dir),
            "host": "127.0.0.1",
            "port": t.port,
            "secret_env": [],
            "standin": {"load_seconds": 0},
        }
    }
    return deep_merge(base_config(list(hosts) if hosts else t.host), ours, {"kimi": kimi})


def fab(
    t: Target,
    *args: str,
    hosts: Sequence[SshdHost] | None = None,
    timeout: float = 180,
    **kimi: Any,
):
    run = run_fab(
        list(hosts) if hosts else t.host,
        *args,
        config=kimi_config(t, hosts, **kimi),
        timeout=timeout,
    )
    t.remember()
    return run


STEP_LINE = re.compile(r"^(ok|changed|failed|skipped): \[[^\]]*\] ([a-z-]+):")


@dataclass(frozen=True)
class StreamedFab:
    returncode: int
    output: str
    seconds: float
    steps: list[tuple[str, float]]  # (step, seconds since the previous step line / fab start)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def fab_stream(t: Target, *args: str, timeout: float = 180, **kimi: Any) -> StreamedFab:
    """Like `fab`, but reads fab's output as it comes to time each step's result line."""
    with tempfile.TemporaryDirectory(prefix="kimi-bench-fab-") as tdir:
        cfg = Path(tdir) / "fab-config.json"
        cfg.write_text(json.dumps(kimi_config(t, **kimi)))
        argv = [
            str(fab_executable()),
            "-H",
            t.host.target,
            "-i",
            str(t.host.key_path),
            "-f",
            str(cfg),
            *args,
        ]
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        lines: list[str] = []
        steps: list[tuple[str, float]] = []
        last = start
        for line in proc.stdout:
            lines.append(line)
            m = STEP_LINE.match(line)
            if m:
                now = time.monotonic()
                steps.append((m.group(2), now - last))
                last = now
            if time.monotonic() - start > timeout:
                proc.kill()
                break
        proc.wait(30)
        seconds = time.monotonic() - start
    t.remember()
    return StreamedFab(proc.returncode, "".join(lines), seconds, steps)


def standin_settings(t: Target, **extra: Any) -> dict[str, Any]:
    return {"load_seconds": 0, "shm_dir": str(t.shm_dir), **extra}


def server_argv(t: Target) -> list[str]:
    """The stand-in server command line the manual baseline types (kimi-ops' launch.sh flags)."""
    return [
        PY,
        f"{t.run_dir}/kimi_standin.py",
        "--model",
        str(t.model),
        "--served-model-name",
        "kimi-k2.5",
        "--host",
        "127.0.0.1",
        "--port",
        str(t.port),
        "--tensor-parallel-size",
        "8",
        "--trust-remote-code",
        "--tool-call-parser",
        "kimi_k2",
        "--reasoning-parser",
        "kimi_k2",
        "--enable-auto-tool-choice",
        "--attention-backend",
        "TRITON_MLA",
    ]


def preinstall_standin(t: Target, **extra: Any) -> None:
    """Put the emulator on the "host" for the baselines (what `pip install vllm` is for them;
    kimi-ops uploads it itself as part of its deploy)."""
    t.run_dir.mkdir(parents=True, exist_ok=True)
    (t.run_dir / "kimi_standin.py").write_bytes(bundle.build())
    (t.run_dir / "standin.json").write_text(json.dumps(standin_settings(t, **extra)))


# --------------------------------------------------------------------------------------------
# the manual way: one ssh invocation per step


def _q(s: str) -> str:
    return shlex.quote(s)


def manual_kill_command() -> str:
    """The seed's kill, made safe by the run's marker (a separate ssh call: when it kills its own
    remote shell nothing else is lost)."""
    return f'pkill -9 -f "{MARKER}.*vllm"'


def manual_shm_command(t: Target) -> str:
    return f"rm -f {t.shm_dir}/psm_* {t.shm_dir}/sem.mp-*"


def manual_patch_command(t: Target) -> str:
    code = (
        "import json;d=" + repr(str(t.model)) + ";"
        "p=d+'/config.json';c=json.load(open(p));"
        "c.get('quantization_config',{}).pop('kv_cache_scheme',None);"
        "json.dump(c,open(p,'w'),indent=2);"
        "p=d+'/hf_quant_config.json';c=json.load(open(p));"
        "c.get('quantization',{}).pop('kv_cache_quant_algo',None);"
        "json.dump(c,open(p,'w'),indent=2)"
    )
    return f"{PY} -c {_q(code)}"


def manual_launch_command(t: Target, argv: Sequence[str] | None = None) -> str:
    cmd = " ".join(_q(a) for a in (argv or server_argv(t)))
    return (
        f"cd {t.run_dir} || exit 1; setsid nohup {cmd} > {t.run_dir}/server.log 2>&1 < /dev/null & "
        "echo $!"
    )


def manual_poll_command(t: Target, pid: int, log: str | None = None) -> str:
    """One poll of the careful manual user: curl; if that fails, is the PID still alive; if not,
    the log tail (the user then reads it: no label)."""
    return (
        f"curl -sf -m 5 -o /dev/null http://127.0.0.1:{t.port}/v1/models && echo READY || "
        f"{{ kill -0 {pid} 2>/dev/null && echo WAITING || "
        f"{{ echo DEAD; tail -n 250 {log or t.run_dir / 'server.log'}; }}; }}"
    )


def ssh(host: SshdHost, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """One fresh ssh connection running `command` (kept out of the local ssh argv)."""
    return ssh_run(host, command, timeout=timeout, hide_command=True)


def manual_poll_until(
    t: Target,
    pid: int,
    want: Sequence[str],
    interval: float = 5.0,
    limit: float = 120,
    log: str | None = None,
) -> tuple[str, float, int]:
    """`while sleep 5; do ssh host '<poll>'; done` until a state in `want`.
    Returns (state, seconds, polls)."""
    start = time.monotonic()
    polls = 0
    while time.monotonic() - start < limit:
        time.sleep(interval)
        r = ssh(t.host, manual_poll_command(t, pid, log))
        polls += 1
        first = (r.stdout.splitlines() or [""])[0].strip()
        if first in want:
            return first, time.monotonic() - start, polls
    return "TIMEOUT", time.monotonic() - start, polls


def machine_info() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        nproc = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip())
    except (OSError, ValueError):
        nproc = os.cpu_count() or 0
    mem = ""
    with contextlib.suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    sshd_v = subprocess.run(["/usr/sbin/sshd", "-V"], capture_output=True, text=True).stderr
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "nproc": nproc,
        "cpu_model": cpu,
        "mem_total": mem,
        "python": sys.version.split()[0],
        "platform": sys.platform,
        "kernel": os.uname().release,
        "openssh": sshd_v.strip().splitlines()[0] if sshd_v.strip() else "",
        "git_commit": commit,
        "loadavg_start": list(os.getloadavg()),
    }


@contextlib.contextmanager
def timed(name: str, into: dict[str, float]) -> Iterator[None]:
    start = time.monotonic()
    log(f"{name} ...")
    try:
        yield
    finally:
        into[name] = round(time.monotonic() - start, 1)
        log(f"{name} done in {into[name]:.0f} s")
