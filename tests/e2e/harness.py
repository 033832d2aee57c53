"""Real-SSH test harness: a throwaway OpenSSH sshd on a loopback address, plus helpers.

Everything here is stdlib + fabric/paramiko-free (paramiko is only used by the tests), so it can
also be imported by scripts (see scripts/capture_seed_ps.py).

Main entry points:

* ``start_sshd(tmpdir=None, *, address="127.0.0.1", ...) -> SshdServer`` starts an sshd
  (``/usr/sbin/sshd -D -e -f <tmp>/sshd_config``) with a throwaway ed25519 host key; the
  returned handle has ``.host`` (a frozen :class:`SshdHost`) and ``.stop()``.
* ``run_fab(host, *args, config=None, ...) -> FabRun`` runs the real ``fab`` console script.
* ``ssh_run(host, command) -> CompletedProcess[str]`` runs a command with the real ssh client and
  strict host key checking.
* ``base_config(host)`` / ``deep_merge(...)`` build fab runtime config dicts.
* ``pid_alive(pid)`` / ``kill_pid_tree_started_by_test(pid)`` / ``ps_listing()`` for processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SSHD_BIN = Path("/usr/sbin/sshd")
SSH_BIN = Path(shutil.which("ssh") or "/usr/bin/ssh")
SSH_KEYGEN_BIN = Path(shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen")
PRIVSEP_DIR = Path("/run/sshd")
DEFAULT_STARTUP_TIMEOUT = 10.0


# --------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class SshdHost:
    """A running test sshd, as seen by a client."""

    host: str  # "127.0.0.1" (or another loopback address)
    port: int
    user: str  # current user (root here)
    key_path: Path  # client private key accepted by this sshd
    known_hosts_path: Path  # file with exactly `host_key_line`
    host_key_line: str  # "[127.0.0.1]:PORT ssh-ed25519 AAAA..."
    tmpdir: Path  # everything of this sshd lives here
    sshd_log: Path  # sshd's stderr (-e, LogLevel VERBOSE)
    pid: int  # pid of the sshd listener we started

    @property
    def target(self) -> str:
        """`user@host:port`, the form `fab -H` takes."""
        return f"{self.user}@{self.host}:{self.port}"

    def log_text(self) -> str:
        try:
            return self.sshd_log.read_text(errors="replace")
        except OSError:
            return ""


@dataclass(frozen=True)
class FabRun:
    """Result of one `fab` invocation (never raised on failure)."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    config: Mapping[str, Any] | None = None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """Multi-line summary for assertion messages."""
        return (
            f"$ {' '.join(self.args)}\n"
            f"exit={self.returncode} timed_out={self.timed_out} seconds={self.seconds:.2f}\n"
            f"config={json.dumps(self.config, default=str) if self.config else None}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


class SshdStartError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------
# keys / ports


def current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def generate_key(path: Path, comment: str = "kimi-ops-e2e") -> Path:
    """ssh-keygen an unencrypted ed25519 key at `path` (+ `path.pub`)."""
    path = Path(path)
    for p in (path, path.with_name(path.name + ".pub")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    subprocess.run(
        [str(SSH_KEYGEN_BIN), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    path.chmod(0o600)
    return path


def public_key_text(private_key: Path) -> str:
    """`ssh-ed25519 AAAA... comment` for a key made by generate_key."""
    return Path(str(private_key) + ".pub").read_text().strip()


def known_hosts_name(address: str, port: int) -> str:
    """Host name as OpenSSH/paramiko look it up in known_hosts."""
    return address if port == 22 else f"[{address}]:{port}"


_HANDED_OUT: set[int] = set()


def free_port(address: str = "127.0.0.1") -> int:
    """A currently unused TCP port on `address`, never one this process handed out before.

    Racy by nature (start_sshd retries). Ports are unique across addresses: the kernel would
    give 127.0.0.2 the port an sshd on 127.0.0.3 holds (a CI run's preflight, then going by port
    number alone, called it taken; it now tells addresses apart, tests/test_preflight.py), and
    an e2e test should meet one situation at a time.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no fresh TCP port on {address} after 100 tries")


def sshd_version() -> tuple[int, int]:
    """(major, minor) of /usr/sbin/sshd, (0, 0) if unknown."""
    try:
        out = subprocess.run(
            [str(SSHD_BIN), "-V"], capture_output=True, text=True, timeout=10
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# --------------------------------------------------------------------------------------------
# sshd


def sshd_config_text(
    *,
    address: str,
    port: int,
    host_key: Path,
    authorized_keys: Path,
    pid_file: Path,
    extra: Iterable[str] = (),
) -> str:
    lines = [
        f"ListenAddress {address}",
        f"Port {port}",
        f"HostKey {host_key}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "AcceptEnv none",
        "Subsystem sftp internal-sftp",
        "MaxStartups 100",
        "MaxSessions 100",
        "LogLevel VERBOSE",
        "LoginGraceTime 15",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
    ]
    if sshd_version() >= (9, 8):
        # Banner probes and rejected clients would otherwise get penalised/blocked.
        lines.append("PerSourcePenalties no")
    lines.extend(extra)
    return "\n".join(lines) + "\n"


def _wait_for_banner(address: str, port: int, proc: subprocess.Popen, deadline: float) -> str:
    last_err = "no attempt"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SshdStartError(f"sshd exited with {proc.returncode} before accepting")
        try:
            with socket.create_connection((address, port), timeout=1.0) as s:
                s.settimeout(max(0.2, min(2.0, deadline - time.monotonic())))
                data = b""
                while b"\n" not in data:
                    chunk = s.recv(256)
                    if not chunk:
                        break
                    data += chunk
                banner = data.decode(errors="replace").strip()
                if banner.startswith("SSH-"):
                    return banner
                last_err = f"unexpected banner {banner!r}"
        except OSError as exc:
            last_err = repr(exc)
        time.sleep(0.05)
    raise SshdStartError(f"sshd did not show an SSH banner on {address}:{port}: {last_err}")


class SshdServer:
    """Handle of an sshd started by start_sshd; `.host` is what tests use."""

    def __init__(self, host: SshdHost, proc: subprocess.Popen, owns_tmpdir: bool) -> None:
        self.host = host
        self.proc = proc
        self._owns_tmpdir = owns_tmpdir
        self._stopped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, *, remove_tmpdir: bool | None = None, timeout: float = 5.0) -> None:
        """Terminate the sshd we started (by PID), its leftover session children, remove tmpdir."""
        if self._stopped:
            return
        self._stopped = True
        # Session processes forked by *this* sshd (and whatever runs under them) are ours too.
        children = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        for pid in children:
            _signal_pid(pid, signal.SIGTERM)
        _wait_gone(children, 2.0)
        for pid in children:
            _signal_pid(pid, signal.SIGKILL)
        if remove_tmpdir is None:
            remove_tmpdir = self._owns_tmpdir and os.environ.get("KIMI_E2E_KEEP_TMP") != "1"
        if remove_tmpdir:
            shutil.rmtree(self.host.tmpdir, ignore_errors=True)

    def __enter__(self) -> SshdServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_sshd(
    tmpdir: Path | str | None = None,
    *,
    address: str = "127.0.0.1",
    port: int | None = None,
    client_key: Path | None = None,
    user: str | None = None,
    extra_config: Iterable[str] = (),
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    own_home: bool = True,
    nice: int = 0,
) -> SshdServer:
    """Start `/usr/sbin/sshd -D -e -f <tmp>/sshd_config` on `address`.

    `tmpdir`: directory for config/keys/logs (created if missing); a fresh mkdtemp (removed on
    stop) when None. `client_key`: an existing private key (with `.pub`) to authorize, e.g. to
    share one key between several hosts; a fresh one is generated otherwise. `address` may be any
    127.x.y.z on Linux. Raises SshdStartError (with sshd's stderr) if it doesn't come up within
    `startup_timeout` seconds.

    `own_home`: the sessions' HOME is `<tmpdir>/home` (sshd's SetEnv), an empty directory, so
    the shell sshd starts for each command does not run this machine's ~/.bashrc: bash sources
    it for every command over SSH, and here it runs `pyenv init`, ~90 ms of the ~130 ms a
    command took (~45 ms without it); a deploy runs a dozen commands. kimi-ops learns the
    remote home from the shell's $HOME, so it sees the same thing. False keeps the user's own.

    `nice`: run sshd under `nice -n NICE`; every process started through it inherits the
    niceness. The real-engine tier uses it so vLLM loading on every core does not starve the
    tests running beside it under pytest-xdist (their deadlines are for the tool, not the CPU).
    """
    if not SSHD_BIN.exists():
        raise SshdStartError(f"{SSHD_BIN} not found (apt-get install openssh-server)")
    owns = tmpdir is None
    tdir = Path(tempfile.mkdtemp(prefix="kimi-e2e-sshd-")) if owns else Path(tmpdir)
    tdir.mkdir(parents=True, exist_ok=True)
    user = user or current_user()

    if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)

    host_key = generate_key(tdir / "ssh_host_ed25519_key", comment="kimi-e2e-hostkey")
    if client_key is None:
        client_key = generate_key(tdir / "client_ed25519", comment="kimi-e2e-client")
    client_key = Path(client_key)
    extra_config = list(extra_config)
    if own_home:
        home = tdir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        extra_config.insert(0, f"SetEnv HOME={home}")
    authorized_keys = tdir / "authorized_keys"
    authorized_keys.write_text(public_key_text(client_key) + "\n")
    authorized_keys.chmod(0o600)
    host_pub = public_key_text(host_key).split()
    key_type, key_b64 = host_pub[0], host_pub[1]

    attempts = 1 if port is not None else 3
    errors: list[str] = []
    for attempt in range(attempts):
        p = port if port is not None else free_port(address)
        suffix = "" if attempt == 0 else f".{attempt}"
        config = tdir / f"sshd_config{suffix}"
        log = tdir / f"sshd{suffix}.log"
        pid_file = tdir / f"sshd{suffix}.pid"
        config.write_text(
            sshd_config_text(
                address=address,
                port=p,
                host_key=host_key,
                authorized_keys=authorized_keys,
                pid_file=pid_file,
                extra=extra_config,
            )
        )
        with open(log, "wb") as log_fh:
            niced = ["nice", "-n", str(nice)] if nice else []
            proc = subprocess.Popen(
                [*niced, str(SSHD_BIN), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                cwd=tdir,
                close_fds=True,
            )
        try:
            _wait_for_banner(address, p, proc, time.monotonic() + startup_timeout)
        except SshdStartError as exc:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            errors.append(f"{exc}\n--- {log} ---\n{log.read_text(errors='replace')}")
            continue

        host_key_line = f"{known_hosts_name(address, p)} {key_type} {key_b64}"
        known_hosts = tdir / "known_hosts"
        known_hosts.write_text(host_key_line + "\n")
        host = SshdHost(
            host=address,
            port=p,
            user=user,
            key_path=client_key,
            known_hosts_path=known_hosts,
            host_key_line=host_key_line,
            tmpdir=tdir,
            sshd_log=log,
            pid=proc.pid,
        )
        return SshdServer(host, proc, owns_tmpdir=owns)

    if owns:
        shutil.rmtree(tdir, ignore_errors=True)
    raise SshdStartError("sshd failed to start:\n" + "\n".join(errors))


def write_known_hosts(hosts: Iterable[SshdHost], path: Path | str) -> Path:
    """Write one known_hosts file trusting all `hosts`."""
    path = Path(path)
    path.write_text("".join(h.host_key_line + "\n" for h in hosts))
    return path


# --------------------------------------------------------------------------------------------
# config


def deep_merge(base: Mapping[str, Any], *overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Return a new dict: `base` recursively updated by each override (mappings merge, other
    values replace). Inputs are not mutated."""
    out: dict[str, Any] = {
        k: deep_merge(v) if isinstance(v, Mapping) else v for k, v in base.items()
    }
    for ov in overrides:
        for k, v in ov.items():
            if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
                out[k] = deep_merge(out[k], v)
            elif isinstance(v, Mapping):
                out[k] = deep_merge(v)
            else:
                out[k] = v
    return out


def _as_hosts(host: SshdHost | Sequence[SshdHost] | None) -> list[SshdHost]:
    if host is None:
        return []
    if isinstance(host, SshdHost):
        return [host]
    return list(host)


def base_config(host: SshdHost | Sequence[SshdHost]) -> dict[str, Any]:
    """`{"kimi": {"known_hosts": <path>}}` trusting `host` (or all of several hosts: a combined
    file is written into the first host's tmpdir)."""
    hosts = _as_hosts(host)
    if not hosts:
        raise ValueError("base_config needs at least one host")
    if len(hosts) == 1:
        path = hosts[0].known_hosts_path
    else:
        name = "known_hosts_" + "_".join(f"{h.host}-{h.port}" for h in hosts)
        path = write_known_hosts(hosts, hosts[0].tmpdir / name)
    return {"kimi": {"known_hosts": str(path)}}


# --------------------------------------------------------------------------------------------
# fab / ssh


def fab_executable() -> Path:
    """The `fab` console script of the venv the tests run in."""
    return Path(sys.executable).parent / "fab"


def fab_host_args(host: SshdHost | Sequence[SshdHost] | None) -> list[str]:
    hosts = _as_hosts(host)
    if not hosts:
        return []
    args = ["-H", ",".join(h.target for h in hosts)]
    seen: list[str] = []
    for h in hosts:
        if str(h.key_path) not in seen:
            seen.append(str(h.key_path))
            args += ["-i", str(h.key_path)]
    return args


def run_fab(
    host: SshdHost | Sequence[SshdHost] | None,
    *args: str,
    config: Mapping[str, Any] | None = None,
    cwd: Path | str = REPO_ROOT,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
) -> FabRun:
    """Run `fab [-H user@host:port[,..] -i KEY..] [-f CONFIG.json] *args`; never raises on a
    non-zero exit. `config` is written as JSON (invoke loads .json runtime config files). `env`
    is layered over os.environ. On timeout the fab process group is killed and the FabRun has
    timed_out=True (returncode is then the kill status)."""
    cmd = [str(fab_executable()), *fab_host_args(host)]
    run_env = dict(os.environ)
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        run_env.update(env)
    with tempfile.TemporaryDirectory(prefix="kimi-e2e-fab-") as tdir:
        if config is not None:
            cfg_path = Path(tdir) / "fab-config.json"
            cfg_path.write_text(json.dumps(config, indent=2, default=str))
            cmd += ["-f", str(cfg_path)]
        cmd += list(args)
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own group, so a timeout can kill fab and its children
        )
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        seconds = time.monotonic() - start
    return FabRun(
        args=tuple(cmd),
        returncode=proc.returncode,
        stdout=stdout or "",
        stderr=stderr or "",
        seconds=seconds,
        timed_out=timed_out,
        config=config,
    )


def ssh_base_args(host: SshdHost) -> list[str]:
    """Real OpenSSH client args (ignoring ~/.ssh/config) with strict host key checking."""
    return [
        str(SSH_BIN),
        "-F",
        "/dev/null",
        "-i",
        str(host.key_path),
        "-p",
        str(host.port),
        "-o",
        f"UserKnownHostsFile={host.known_hosts_path}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "ConnectTimeout=10",
        "-l",
        host.user,
    ]


def ssh_run(
    host: SshdHost,
    command: str,
    timeout: float = 30,
    *,
    hide_command: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`ssh ... user@host COMMAND` with the real OpenSSH client and strict host key checking.

    Never raises on a non-zero exit (255 = ssh error *or* remote shell killed by a signal);
    raises subprocess.TimeoutExpired on timeout.

    The command is normally in the local ssh client's argv, so when the "remote" host is this
    machine a `pkill -f PATTERN` inside it also matches (and kills) the local ssh client.
    `hide_command=True` passes it as `RemoteCommand` in a temporary ssh_config instead, so only
    the remote `bash -c` carries it -- as when the operator's laptop is another machine.
    """
    args = ssh_base_args(host)
    with tempfile.TemporaryDirectory(prefix="kimi-e2e-ssh-") as tdir:
        if hide_command:
            if "\n" in command or "\r" in command:
                raise ValueError("hide_command needs a single-line command")
            cfg = Path(tdir) / "ssh_config"
            cfg.write_text(f"RemoteCommand {command.replace('%', '%%')}\n")
            args[args.index("-F") + 1] = str(cfg)
            argv = [*args, host.host]
        else:
            argv = [*args, host.host, command]
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


# --------------------------------------------------------------------------------------------
# processes


@dataclass(frozen=True)
class PsEntry:
    pid: int
    ppid: int
    pgid: int
    args: str


def ps_listing() -> list[PsEntry]:
    """Parse `ps -eww -o pid=,ppid=,pgid=,args=`."""
    out = subprocess.run(
        ["ps", "-eww", "-o", "pid=,ppid=,pgid=,args="],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    entries = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 3:
            continue
        entries.append(
            PsEntry(int(parts[0]), int(parts[1]), int(parts[2]), parts[3] if len(parts) > 3 else "")
        )
    return entries


def pids_with_marker(marker: str, exclude: Iterable[int] = ()) -> list[int]:
    """PIDs whose command line contains `marker` (via ps, not pgrep), minus `exclude`."""
    skip = set(exclude) | {os.getpid()}
    return [e.pid for e in ps_listing() if marker in e.args and e.pid not in skip]


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return "?"
    # "pid (comm) S ..." — comm may contain spaces/parens; take text after the last ')'.
    return stat.rsplit(")", 1)[-1].split()[0]


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Current descendants of `pid` (from /proc ppid links), children first."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(int(d.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        cur = todo.pop(0)
        for c in children.get(cur, []):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(pids: Iterable[int], timeout: float) -> bool:
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def kill_pid_tree_started_by_test(pid: int, timeout: float = 5.0, *, crash: bool = False) -> bool:
    """Stop a process the test itself started (e.g. a server launched through the tool).

    SIGTERM, wait up to `timeout`, then SIGKILL (``crash=True``: SIGKILL only, so the server
    cannot log a graceful shutdown: what a crash or the OOM killer leaves) — by PID: `pid` and
    its current descendants. The process group is signalled as well only when pgid == pid (a
    setsid leader created by the test's deploy), never otherwise. Returns True when all of
    them are gone."""
    if pid <= 1 or pid == os.getpid():
        raise ValueError(f"refusing to kill pid {pid}")
    if not pid_alive(pid):
        return True
    try:
        group = os.getpgid(pid) == pid and pid != os.getpgrp()
    except ProcessLookupError:
        group = False
    targets = [pid, *descendants(pid)]
    for sig in (signal.SIGKILL,) if crash else (signal.SIGTERM, signal.SIGKILL):
        if group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        for p in targets:
            _signal_pid(p, sig)
        if _wait_gone(targets, timeout if sig == signal.SIGTERM else 2.0):
            return True
    return not any(pid_alive(p) for p in targets)


def read_pidfile(path: Path) -> int | None:
    """The PID a deployment's pidfile names, or None (missing, empty or not a number)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cause_line(output: str) -> str:
    """The one line that says why a fab run failed ("error: ..." or "failed: [host] ...")."""
    lines = [ln for ln in output.splitlines() if ln.startswith(("error: ", "failed: "))]
    assert len(lines) == 1, output
    return lines[0]
