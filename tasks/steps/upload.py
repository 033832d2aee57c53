"""upload-script: the launch script, env file, probe and stand-in put in run_dir."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from kimi_ops import kvpatch, liveserver, procs
from kimi_ops import script as launch_script
from kimi_ops import verify as vfy
from kimi_ops.defaults import (
    ENV_FILE,
    LAUNCH_SCRIPT,
    LOG_DIR,
    PROBE_SCRIPT,
    STANDIN_CONFIG,
    STANDIN_SCRIPT,
)
from kimi_ops.errors import StepFailed
from kimi_ops.preflight import (
    Plan,
)
from kimi_ops.profile import Profile, unset_secret_env
from kimi_ops.redact import mask_unknown_secrets
from kimi_ops.result import StepResult, changed, ok, skipped
from kimi_ops.rundir import private_dir_test
from kimi_ops.shell import file_quote
from kimi_ops.shell import quote as q

from ..host import Host
from .common import _probe_command, _resource, _run_dir
from .processes import adopt_server


def env_file_text(values: dict[str, str]) -> str:
    """The 0600 env file bash sources: one ``export NAME=value`` line per value (a value with
    a newline in ANSI-C quoting: :func:`kimi_ops.shell.file_quote`)."""
    return "".join(f"export {k}={file_quote(v)}\n" for k, v in sorted(values.items()))


def upload_files(
    p: Profile,
    *,
    plan: Plan | None = None,
    secrets_env: dict[str, str] | None = None,
) -> dict[str, tuple[bytes, int]]:
    """Every file upload-script puts in run_dir: name -> (content, mode)."""
    script = launch_script.render_launch_script(
        p,
        extra_args=plan.launch_args if plan else None,
        env=plan.env if plan else None,
    )
    files: dict[str, tuple[bytes, int]] = {
        LAUNCH_SCRIPT: (script.encode(), 0o700),
        PROBE_SCRIPT: (_resource(PROBE_SCRIPT), 0o600),
    }
    if p.is_standin:
        files[STANDIN_SCRIPT] = (_resource(STANDIN_SCRIPT), 0o700)
        settings = {**p.standin.to_dict(), "shm_dir": p.shm_dir}
        config = json.dumps(settings, indent=2, sort_keys=True) + "\n"
        files[STANDIN_CONFIG] = (config.encode(), 0o600)
    if secrets_env:
        files[ENV_FILE] = (env_file_text(secrets_env).encode(), 0o600)
    return files


class Synced(NamedTuple):
    """What :func:`sync_files` did: the names it uploaded (or, dry, would upload) and removed,
    the launch script's diff, and the names that were not on the host before."""

    changed: list[str]
    diff: str
    absent: list[str]


def sync_files(
    h: Host,
    p: Profile,
    files: dict[str, tuple[bytes, int]],
    *,
    step: str,
    remove: Sequence[str] = (),
) -> Synced:
    """Make run_dir hold ``files`` (and not ``remove``): the changed names, the launch-script
    diff, and which of ``files`` were not on the host at all.

    Two round trips when something changed: create run_dir, delete ``remove``, read the
    checksums and the old launch script; then upload and swap everything in at once.
    """
    r = _run_dir(p)
    names = " ".join(q(f"{r}/{n}") for n in files)
    script = q(f"{r}/{LAUNCH_SCRIPT}")
    prepare = f"mkdir -p -m 700 {q(r)} {q(r + '/' + LOG_DIR)} && {{ {private_dir_test(r)}; }}"
    for name in remove:
        path = q(f"{r}/{name}")
        prepare += f" && {{ if [ -e {path} ]; then rm -f -- {path} && echo @@removed:{name}; fi; }}"
    read = f"sha256sum {names} 2>/dev/null; echo @@script; cat {script} 2>/dev/null; true"
    out = h.run(
        read if h.dry else f"{prepare} && {{ {read}; }}", step=step, check=False, mutating=False
    )
    if not out.ok:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.exited}"])[-1]
        raise StepFailed(
            step,
            f"cannot create run_dir {r}: {why}",
            command=out.command,
            exited=out.exited,
            stderr=out.stderr,
            hint="set kimi.run_dir to a directory the SSH user can create and write",
        )
    sums, _, old_script = out.stdout.partition("@@script\n")
    current = {}
    changed_names = [
        f"(removed {ln.split(':', 1)[1]})"
        for ln in sums.splitlines()
        if ln.startswith("@@removed:")
    ]
    for line in sums.splitlines():
        digest, _, path = line.partition("  ")
        current[path.rsplit("/", 1)[-1]] = digest
    todo = [
        name
        for name, (data, _) in files.items()
        if current.get(name) != hashlib.sha256(data).hexdigest()
    ]
    diff = ""
    if LAUNCH_SCRIPT in todo:
        new_script = files[LAUNCH_SCRIPT][0].decode()
        # The old script may hold a secret the profile no longer has (a rotated token, a value
        # an older kimi-ops wrote in): hidden by name and shape, not only by known values.
        old_script = mask_unknown_secrets(old_script, p.secret_patterns)
        diff = kvpatch.unified_diff(old_script, new_script, f"{r}/{LAUNCH_SCRIPT}")
    h.put_files([(files[n][0], f"{r}/{n}", files[n][1]) for n in todo], step=step)
    return Synced(todo + changed_names, diff, [n for n in files if n not in current])


def check_secret_env(
    h: Host, p: Profile, environ: Mapping[str, str], *, step: str = "upload-script"
) -> str | None:
    """Before anything changes: a ``secret_env`` name that is not set here must not silently
    drop the secret the host's server got. StepFailed when the host's env file exports it (the
    new env file would lose it); else a line that says the server gets none (the default
    ``secret_env: [HF_TOKEN]`` is optional: a public model needs no token), or None when every
    name is set. Reads the names in the env file, never its values."""
    missing = unset_secret_env(p, environ)
    if not missing:
        return None
    path = f"{_run_dir(p)}/{ENV_FILE}"
    out = h.run(
        rf"sed -n 's/^export \([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' {q(path)} 2>/dev/null; true",
        step=step,
        check=False,
        mutating=False,
    )
    held = set(out.stdout.split())
    dropped = [n for n in missing if n in held]
    if dropped:
        names = ", ".join(dropped)
        raise StepFailed(
            step,
            f"secret_env {names} is not set in this shell, but the host's {path} holds it: "
            "this deploy would drop it from the server; nothing was changed",
            command=out.command,
            hint=" ; ".join(f"export {n}=... before running fab" for n in dropped)
            + f", or remove {names} from kimi.secret_env to deploy without it",
        )
    names = ", ".join(missing)
    return (
        f"note: secret_env {names} is not set in this shell: the server gets no {names} "
        f"(export it before running fab if the model needs it)"
    )


def ensure_standin(h: Host, p: Profile, *, step: str) -> None:
    """With ``engine: standin``, the emulator must be on the host before facts are gathered."""
    if not p.is_standin:
        return
    files = upload_files(p)
    synced = sync_files(h, p, {n: files[n] for n in (STANDIN_SCRIPT, STANDIN_CONFIG)}, step=step)
    if h.dry and STANDIN_SCRIPT in synced.absent:
        # A dry run uploads nothing; without the emulator on the host there are no GPU or vLLM
        # facts to check, and "can't open file kimi_standin.py" would be all preflight said.
        path = f"{_run_dir(p)}/{STANDIN_SCRIPT}"
        raise StepFailed(
            step,
            f"dry run: the stand-in engine is not on the host yet ({path}), and a dry run "
            "uploads nothing, so the emulated GPUs and vLLM cannot be asked for facts; "
            "nothing was changed",
            hint="run `fab upload-script` once (it uploads the stand-in and the launch "
            "script, nothing else), then `--dry` shows the whole deploy",
        )


def upload_script(
    h: Host,
    p: Profile,
    *,
    plan: Plan | None = None,
    secrets_env: dict[str, str] | None = None,
    step: str = "upload-script",
) -> StepResult:
    """Render the launch script (with the plan's launch arguments) and upload what changed."""
    r = _run_dir(p)
    files = upload_files(p, plan=plan, secrets_env=secrets_env)
    # Files that are not part of this deployment (secrets removed from the profile, engine no
    # longer the stand-in) must not stay behind.
    stale = [n for n in (ENV_FILE, STANDIN_CONFIG) if n not in files]
    uploaded, diff, _ = sync_files(h, p, files, step=step, remove=stale)
    if not uploaded:
        return ok(step, f"{r}/{LAUNCH_SCRIPT} is up to date", data={"uploaded": []})
    verb = "would upload" if h.dry else "uploaded"
    res = changed if not h.dry else skipped
    return res(step, f"{verb} {', '.join(uploaded)} to {r}", diff=diff, data={"uploaded": uploaded})


def running_unchanged(
    h: Host, p: Profile, files: dict[str, tuple[bytes, int]], *, step: str = "deploy"
) -> StepResult | None:
    """If the server that runs now was launched from exactly ``files`` and answers a chat
    completion, an ok result saying nothing needs to change; otherwise None. A pidfile that
    names no PID does not hide the server: it is found by its launch id (and the pidfile put
    back when safe: :func:`adopt_server`)."""
    r = _run_dir(p)
    state = launch_script.parse_key_values(
        h.run(launch_script.running_state_command(r), step=step, mutating=False).stdout
    )
    server = procs.parse_pidfile_process(state)
    notes: tuple[str, ...] = ()
    adopted = adopt_server(h, p, step) if server.pid is None else None
    if adopted is not None and adopted.launch_id == state.get("launch_id", "").strip():
        server, notes = liveserver.as_pidfile_process(adopted.proc), (adopted.note(r),)
    if not server.server_alive(r):
        return None
    expected = launch_script.deployment_digest({n: d for n, (d, _) in files.items()})
    if state.get("digest") != expected:
        return None
    probe = h.run(_probe_command(p), step=step, check=False, mutating=False, timeout=90)
    result, port = vfy.read_probe(probe.stdout, probe.stderr, server.pid, p.port, p.host)
    if not result.ready_for(p.served_model_name) or port.verdict == "foreign":
        return None  # another process answering on the port is not this server serving
    return ok(
        step,
        f"server PID {server.pid} (launch {state.get('launch_id')}) already runs this exact "
        "profile and answers: nothing changed (--restart forces a new launch)",
        lines=(*notes, port.message),
        data={"pid": server.pid, "unchanged": True, "port": port.message},
    )
