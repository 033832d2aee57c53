"""The one place kimi-ops touches a host: run a command, upload bytes, with every failure named.

A :class:`Host` wraps what a Fabric task receives: a ``fabric.Connection`` (``fab -H``) or a plain
``invoke.Context`` (no ``-H``: the local machine). Every command's exit status is checked; an
error becomes :class:`~kimi_ops.errors.StepFailed` carrying the step, the command, its stderr and
a hint. SSH failures (refused, timed out, authentication, unknown host key) become one-line
errors too. Host keys are checked against known_hosts by default (Fabric's default of accepting
every key is replaced).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import logging
import os
import posixpath
import secrets
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from fabric import runners as fabric_runners
from invoke import Context
from invoke import runners as invoke_runners
from invoke.exceptions import CommandTimedOut, UnexpectedExit

from kimi_ops.errors import KimiOpsError, RemoteKilled, StepFailed
from kimi_ops.facts import unfinished_part
from kimi_ops.profile import Profile, host_keys
from kimi_ops.result import clip
from kimi_ops.shell import KILL_AFTER, one_line, quote, with_timeout

# paramiko logs transport-thread failures (e.g. "Error reading SSH protocol banner") with their
# tracebacks; with no handler configured Python's last-resort handler prints them to stderr.
# Every such failure also reaches us as an exception, reported as one line (connect_error);
# `fab -d` configures logging and still shows them.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

#: KIMI_OPS_TRACE=1 prints every command with its duration and exit status to stderr.
TRACE = os.environ.get("KIMI_OPS_TRACE") == "1"

KILLED_HINT = (
    "the remote shell was killed by a signal: something may have killed its own session "
    "(a `pkill -f` whose pattern matches the shell's command line does exactly that)"
)


@dataclass(frozen=True)
class Output:
    """A finished command."""

    command: str
    stdout: str
    stderr: str
    exited: int

    @property
    def ok(self) -> bool:
        return self.exited == 0


@dataclass(frozen=True)
class FileInfo:
    """A file read from the host: its bytes, exactly (None when missing), and permission bits."""

    path: str
    data: bytes | None
    mode: int | None

    @property
    def text(self) -> str | None:
        """The bytes as UTF-8 text (a byte that is not UTF-8 shows as U+FFFD: for display)."""
        return None if self.data is None else self.data.decode("utf-8", errors="replace")

    @property
    def digest(self) -> str | None:
        """sha256 of the bytes read (None when missing), for :meth:`Host.put_files`'s check."""
        return None if self.data is None else hashlib.sha256(self.data).hexdigest()


class FilesChanged(StepFailed):
    """:meth:`Host.put_files` replaced nothing: a target no longer holds what was read
    (``changed``), or a file that had to exist is gone (``missing``)."""

    def __init__(self, step: str, changed: list[str], missing: list[str], command: str) -> None:
        what = [f"{p} changed since it was read" for p in changed]
        what += [f"{p} is gone" for p in missing]
        super().__init__(step, "; ".join(what) + "; no file was replaced", command=command)
        self.changed = changed
        self.missing = missing


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking=accept-new``: record an unknown key; a changed key is
    still rejected (paramiko raises BadHostKeyException before consulting the policy)."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self.known_hosts.open("a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


class _WholeOutput:
    """Invoke's runners, fixed for what kimi-ops reads (mixed into Local and Remote):

    * each stream is decoded by ONE incremental UTF-8 decoder, so a character split across
      two reads is not turned into two replacement characters (Invoke decodes each read
      on its own);
    * with no watchers (kimi-ops never uses them), the captured output is not joined after
      every read: Invoke does that to feed watchers, which makes a command's output cost
      quadratic time (1 MB of log: about 1000 joins of up to 1 MB);
    * reads are 64 KiB instead of 1000 bytes.
    """

    read_chunk_size = 1 << 16
    encoding: str
    watchers: list[Any]

    def read_proc_output(self, reader: Any) -> Any:
        decoder = codecs.getincrementaldecoder(self.encoding or "utf-8")(errors="replace")
        while True:
            data = reader(self.read_chunk_size)
            if not data:
                break
            text = decoder.decode(data)
            if text:
                yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def respond(self, buffer_: list[str]) -> None:
        if self.watchers:
            super().respond(buffer_)  # type: ignore[misc]

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        self._interrupt = interrupt
        super().send_interrupt(interrupt)  # type: ignore[misc]

    def _finish(self) -> Any:
        # Invoke forwards a Ctrl-C to the command and goes on waiting; when the command then
        # ends well (it ignored the signal, or had just finished) the interrupt was lost, and
        # a deploy the user stopped went on and reported ready. Once the command has ended,
        # the interrupt is ours.
        self._interrupt: KeyboardInterrupt | None = None
        result = super()._finish()  # type: ignore[misc]
        if self._interrupt is not None:
            raise self._interrupt
        return result


class WholeOutputRemote(_WholeOutput, fabric_runners.Remote):
    pass


class WholeOutputLocal(_WholeOutput, invoke_runners.Local):
    pass


def _last_words(stderr: str) -> str:
    """``": <the output's last line>"`` for a one-line failure report (its head and tail kept
    when long: the reason comes last), or ``""`` when the command said nothing."""
    said = stderr.strip().splitlines()
    return f": {clip(said[-1].strip())}" if said else ""


def is_connection(c: Any) -> bool:
    """A fabric.Connection (remote host), as opposed to a local invoke.Context."""
    return hasattr(c, "client") and hasattr(c, "sftp")


def typed_host(c: Any) -> str:
    """The host as the user typed it (an ssh-config alias stays an alias)."""
    return str(getattr(c, "original_host", None) or c.host)


def host_label(c: Any) -> str:
    """``user@host[:port]`` with the host as typed; ``local`` without a connection."""
    if not is_connection(c):
        return "local"
    port = getattr(c, "port", 22)
    return f"{c.user}@{typed_host(c)}" + (f":{port}" if port != 22 else "")


def host_names(c: Any) -> list[str]:
    """Every ``kimi.host_overrides`` key that names this connection's host (see host_keys)."""
    if not is_connection(c):
        return ["local"]
    return host_keys(c.user, typed_host(c), int(getattr(c, "port", 22) or 22), c.host)


class Host:
    """A host the tasks act on, remote (Connection) or local (Context)."""

    def __init__(
        self, c: Context, profile: Profile, *, dry: bool = False, name: str | None = None
    ) -> None:
        self.c = c
        self.profile = profile
        self.remote = is_connection(c)
        self.name = name or host_label(c)  # a fleet passes the name the user typed
        self.dry = dry or bool(getattr(getattr(c.config, "run", None), "dry", False))
        self.commands: list[str] = []  # every command run, in order (for reports and tests)
        self._home: str | None = None
        runners = getattr(getattr(c, "config", None), "runners", None)
        if runners is not None:
            runners.remote = WholeOutputRemote
            runners.local = WholeOutputLocal
        #: While the deployment lock is held: a tasks.lock.LockGuard that wraps every mutating
        #: command with a check that the lock is still ours (and raises when it is not).
        self.guard: Any = None
        if self.remote:
            self._setup_connection()

    # --- connection ---------------------------------------------------------------------------

    def _setup_connection(self) -> None:
        c: Any = self.c
        known = Path(os.path.expanduser(self.profile.known_hosts))
        client = c.client
        if known.exists():
            client.load_host_keys(str(known))
        if self.profile.host_key_policy == "accept-new":
            client.set_missing_host_key_policy(AcceptNewPolicy(known))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        if c.connect_timeout is None:
            c.connect_timeout = int(max(1, self.profile.connect_timeout))
        # A port that accepts TCP but never sends an SSH banner would otherwise be waited on
        # for paramiko's own 15 s, whatever connect_timeout says.
        kwargs = getattr(c, "connect_kwargs", None)
        if kwargs is not None and "banner_timeout" not in kwargs:
            kwargs["banner_timeout"] = c.connect_timeout

    def _port(self) -> int:
        return int(getattr(self.c, "port", 22) or 22)

    def connect_error(self, exc: BaseException) -> KimiOpsError:
        """Turn an SSH-level exception into one line with a hint."""
        where = self.name
        host = getattr(self.c, "host", "?")
        port = self._port()
        key_name = host if port == 22 else f"[{host}]:{port}"
        if isinstance(exc, paramiko.BadHostKeyException):
            return KimiOpsError(
                f"{where}: the host key has CHANGED (expected {exc.expected_key.get_name()}, "
                f"got {exc.key.get_name()}); refusing to connect",
                hint=f"if the host was reinstalled, remove the old key with "
                f"`ssh-keygen -R '{key_name}' -f {self.profile.known_hosts}`, then connect again",
            )
        if isinstance(exc, paramiko.AuthenticationException):
            return KimiOpsError(
                f"{where}: SSH authentication failed ({exc})",
                hint="check the user and the key (`fab -i KEY`), or ssh-agent",
            )
        if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
            return KimiOpsError(
                f"{where}: unknown host key for {key_name} (not in {self.profile.known_hosts})",
                hint=f"verify and add it: `ssh-keyscan -p {port} {host} >> "
                f"{self.profile.known_hosts}`, or set `kimi.host_key_policy: accept-new`",
            )
        if isinstance(exc, paramiko.SSHException) and (
            "banner" in str(exc) or "No existing session" in str(exc)
        ):
            # Connected, but no SSH handshake within the timeout (paramiko says "No existing
            # session" when start_client gives up before its transport thread does).
            return KimiOpsError(
                f"{where}: port {port} accepted the connection but no SSH server answered within "
                f"{self.profile.connect_timeout:g} s",
                hint="is this the SSH port, and is sshd alive (not hung or overloaded)?",
            )
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return KimiOpsError(
                f"{where}: connection timed out after {self.profile.connect_timeout:g} s",
                hint="is the host up and the SSH port reachable?",
            )
        if isinstance(
            exc, (ConnectionRefusedError, paramiko.ssh_exception.NoValidConnectionsError)
        ):
            return KimiOpsError(
                f"{where}: connection refused on port {port}",
                hint="is sshd running there, and is the port right?",
            )
        if isinstance(exc, OSError):
            return KimiOpsError(f"{where}: cannot connect: {exc}", hint="check the host name")
        return KimiOpsError(f"{where}: SSH error: {exc}")

    # --- commands -----------------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        step: str,
        check: bool = True,
        timeout: float | None = None,
        hint: str = "",
        mutating: bool = True,
        show_stderr: bool = False,
    ) -> Output:
        """Run one single-line command. Raises StepFailed on a non-zero exit when ``check``.

        Every command has a time limit: ``timeout`` or the profile's ``command_timeout``. The
        host enforces it (coreutils ``timeout`` ends the command and its process group; see
        :func:`kimi_ops.shell.with_timeout`), and Fabric's own timeout, a little later, closes
        the channel should the host not answer at all. Either way the step fails naming the
        command, whatever ``check`` says.

        In dry mode a ``mutating`` command is only printed and "succeeds" with no output.
        ``show_stderr``: the command's stderr (its progress) is shown as it comes, and kept.
        """
        command = one_line(command)
        if self.dry and mutating:
            # stderr: under --json, stdout is one JSON document
            print(f"[dry] {self.name}: would run: {command}", file=sys.stderr, flush=True)
            return Output(command, "", "", 0)
        self.commands.append(command)
        limit = float(timeout if timeout is not None else self.profile.command_timeout)
        started = time.monotonic()

        def timed_out(how: str, output: str = "") -> StepFailed:
            part = unfinished_part(output)  # (a marked command: the part that blocked)
            return StepFailed(
                step,
                f"the command did not finish within {limit:g} s ({how})"
                + (f"; it was in its part '{part}'" if part else ""),
                command=command,
                hint=hint
                or "something on the host blocks (a FIFO or a hung network mount in a path the "
                "command reads?) or the host is overloaded; raise kimi.command_timeout if it "
                "is only slow",
            )

        try:
            guarded = self.guard is not None and mutating
            result = self.c.run(
                with_timeout(self.guard.wrap(command) if guarded else command, limit),
                hide="stdout" if show_stderr else True,
                warn=True,
                pty=False,
                in_stream=False,
                timeout=limit + KILL_AFTER + 10,
                dry=False,
            )
        except CommandTimedOut as exc:
            raise timed_out("no answer from the host; the channel was closed") from exc
        except UnexpectedExit as exc:  # only with warn=False; kept for safety
            result = exc.result
        except (paramiko.SSHException, OSError) as exc:
            raise self.connect_error(exc) from exc
        out = Output(command, result.stdout, result.stderr, int(result.exited))
        if guarded:
            self.guard.check(out, step)
        if out.exited in (124, 137) and time.monotonic() - started >= limit * 0.95:
            raise timed_out("ended on the host by coreutils timeout", out.stdout)
        if TRACE:
            took = time.monotonic() - started
            print(
                f"[trace] {self.name} {step} {took:.2f}s exit={out.exited}: {command}",
                file=sys.stderr,
                flush=True,
            )
        if out.exited == -1:
            raise RemoteKilled(
                step,
                "the remote shell was killed by a signal (exit status -1)",
                command=command,
                exited=-1,
                stderr=out.stderr,
                hint=KILLED_HINT,
            )
        if check and not out.ok:
            raise StepFailed(
                step,
                f"command failed with exit status {out.exited}"
                + _last_words(out.stderr or out.stdout),
                command=command,
                exited=out.exited,
                stderr=out.stderr or out.stdout[-2000:],
                hint=hint,
            )
        return out

    def home(self) -> str:
        if self._home is None:
            if self.remote:
                self._home = self.run(
                    'printf "%s" "$HOME"', step="connect", mutating=False
                ).stdout.strip()
            else:
                self._home = os.path.expanduser("~")
        return self._home

    def resolve(self, path: str) -> str:
        """Expand a leading ``~`` with the host's home directory."""
        if path == "~" or path.startswith("~/"):
            return self.home().rstrip("/") + path[1:]
        return path

    def read_files(
        self, paths: Sequence[str], *, step: str, require_dir: str | None = None
    ) -> dict[str, FileInfo]:
        """Several files' bytes and mode in one round trip (missing files: ``data`` None). The
        bytes travel base64-encoded, so they arrive exactly (a byte that is not UTF-8 too).

        With ``require_dir``, a missing directory raises StepFailed naming it.
        """
        mark = f"@@kimi-ops-{secrets.token_hex(6)}"
        parts = []
        if require_dir is not None:
            d = quote(require_dir)
            parts.append(f"if [ ! -d {d} ]; then echo {mark}:nodir; exit 3; fi")
        for i, path in enumerate(paths):
            qp = quote(path)
            parts.append(
                f'if [ -f {qp} ]; then echo "{mark}:{i}:$(stat -c %a {qp})"; '
                f"base64 -w0 < {qp} || echo {mark}:{i}:unreadable; echo; "
                f"else echo {mark}:{i}:missing; fi"
            )
        out = self.run("; ".join(parts), step=step, check=False, mutating=False)
        if f"{mark}:nodir" in out.stdout:
            raise StepFailed(
                step,
                f"the directory does not exist: {require_dir}; nothing was changed",
                command=out.command,
                exited=out.exited,
                hint="check the path in the profile (kimi.model is the checkpoint directory)",
            )
        result: dict[str, FileInfo] = {}
        chunks = out.stdout.split(mark + ":")[1:]
        for chunk in chunks:
            head, _, body = chunk.partition("\n")
            index, _, mode = head.partition(":")
            path = paths[int(index)]
            if mode == "missing":
                result[path] = FileInfo(path, None, None)
                continue
            try:
                data = base64.b64decode(body.strip(), validate=True)
            except (binascii.Error, ValueError):
                data = None
            if mode == "unreadable" or data is None:
                raise StepFailed(
                    step,
                    f"cannot read {path}" + _last_words(out.stderr),
                    command=out.command,
                    exited=out.exited,
                    stderr=out.stderr,
                )
            result[path] = FileInfo(path, data, int(mode, 8) if mode.isdigit() else None)
        if not out.ok or len(result) != len(paths):
            raise StepFailed(
                step, "cannot read files", command=out.command, exited=out.exited, stderr=out.stderr
            )
        return result

    def put_files(
        self,
        items: Sequence[tuple[bytes, str, int]],
        *,
        step: str,
        expect: Mapping[str, Sequence[str]] | None = None,
        require: Sequence[str] = (),
    ) -> None:
        """Upload files atomically: each to a temporary name in its directory (mode set before
        the bytes are written), then ONE command checks every checksum and renames them into
        place. A failed upload or checksum leaves every previous file untouched.

        Compare and swap: ``expect`` maps a target to the sha256 digests it may hold now (what
        was read, or already the new bytes), ``require`` names files that must still exist (a
        backup); checked in that same command. If one does not hold, nothing is replaced and
        :class:`FilesChanged` names it."""
        if not items:
            return
        if self.dry:
            for data, path, mode in items:
                print(
                    f"[dry] {self.name}: would upload {len(data)} bytes to {path} (mode {mode:o})",
                    file=sys.stderr,
                    flush=True,
                )
            return
        staged: list[tuple[str, str, str]] = []  # (digest, tmp, path)
        for data, path, mode in items:
            directory = posixpath.dirname(path) or "."
            tmp = posixpath.join(
                directory,
                f".{posixpath.basename(path)}.kimi-ops-{os.getpid()}-{time.time_ns()}.tmp",
            )
            staged.append((hashlib.sha256(data).hexdigest(), tmp, path))
            try:
                self._write(tmp, data, mode)
            except (OSError, paramiko.SSHException) as exc:
                tmps = " ".join(quote(t) for _, t, _ in staged)
                self.run(f"rm -f -- {tmps}", step=step, check=False)
                raise StepFailed(
                    step,
                    f"upload to {path} failed: {exc}; no file was replaced",
                    hint=f"check that {directory} is writable and the disk is not full",
                ) from exc
        # Each checksum is read from stdin, so any file name (even one with a newline) works.
        sums = " && ".join(
            f'[ "$(sha256sum < {quote(tmp)})" = "{digest}  -" ]' for digest, tmp, _ in staged
        )
        # Every file is renamed into place, or none is: before the swap each existing target
        # is kept under a `.prev` name (a hard link, else a copy); if a rename fails (e.g. an
        # immutable file), the files already swapped are put back (or removed if they are new).
        q = quote
        token = secrets.token_hex(4)
        prevs = [f"{tmp}.{token}.prev" for _, tmp, _ in staged]
        keep = " && ".join(
            f"{{ [ ! -e {q(path)} ] || ln -f -- {q(path)} {q(prev)} 2>/dev/null || "
            f"cp -p -- {q(path)} {q(prev)}; }}"
            for (_, _, path), prev in zip(staged, prevs, strict=True)
        )
        moves = " && ".join(
            f"mv -f -- {q(tmp)} {q(path)} && n={i}" for i, (_, tmp, path) in enumerate(staged, 1)
        )
        undo = "; ".join(
            f"if [ $n -ge {i} ]; then if [ -e {q(prev)} ]; then mv -fT {q(prev)} {q(path)}; "
            f"else rm -f {q(path)}; fi || echo @@kimi-ops-not-rolled-back:{q(path)}; fi"
            for i, ((_, _, path), prev) in enumerate(zip(staged, prevs, strict=True), 1)
        )
        tmps = " ".join(q(t) for _, t, _ in staged)
        all_prevs = " ".join(q(p) for p in prevs)
        cas_paths = list((expect or {}).items())
        cas = [
            f'{{ case "$(sha256sum < {q(path)} 2>/dev/null)" in '
            + "|".join(f'"{d}  -"' for d in digests)
            + f") ;; *) echo @@kimi-ops-changed:{i}; false;; esac; }}"
            for i, (path, digests) in enumerate(cas_paths)
        ]
        cas += [
            f"{{ [ -e {q(path)} ] || {{ echo @@kimi-ops-missing:{i}; false; }}; }}"
            for i, path in enumerate(require)
        ]
        check = self.run(
            f"n=0; {' && '.join([*cas, keep])} && {sums} && {moves}"
            f" && {{ rm -f {all_prevs}; true; }}"
            f" || {{ rm -f -- {tmps}; {undo}; rm -f {all_prevs}; exit 1; }}",
            step=step,
            check=False,
        )
        said = check.stdout.splitlines()
        changed = [p for i, (p, _) in enumerate(cas_paths) if f"@@kimi-ops-changed:{i}" in said]
        missing = [p for i, p in enumerate(require) if f"@@kimi-ops-missing:{i}" in said]
        if not check.ok and (changed or missing):
            raise FilesChanged(step, changed, missing, check.command)
        if not check.ok:
            names = ", ".join(path for _, _, path in staged)
            stuck = [
                ln.split(":", 1)[1]
                for ln in check.stdout.splitlines()
                if ln.startswith("@@kimi-ops-not-rolled-back:")
            ]
            raise StepFailed(
                step,
                f"upload of {names} did not verify (checksum mismatch or rename failed"
                + _last_words(check.stderr)
                + "); "
                + (
                    f"ROLL-BACK FAILED: {', '.join(stuck)} may hold the new content"
                    if stuck
                    else "the previous files are unchanged"
                ),
                command=check.command,
                exited=check.exited,
                stderr=check.stderr,
            )

    def _write(self, tmp: str, data: bytes, mode: int) -> None:
        if self.remote:
            sftp = self.c.sftp()  # type: ignore[attr-defined]
            with sftp.open(tmp, "wxb") as fh:  # O_EXCL: never through a planted file or link
                sftp.chmod(tmp, mode)
                fh.write(data)
        else:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
