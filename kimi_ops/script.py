"""The launch script and the commands that start it, rendered from a Profile (pure).

The script is bash with ``set -euo pipefail``; every value is quoted with :func:`shlex.quote`; it
exports the environment, loads the secrets file if present, exports ``KIMI_OPS_RUN_DIR`` and
``KIMI_OPS_LAUNCH_ID`` (which every process of the server's tree inherits: that is how kill-stale
knows what is this deployment's), records the launch id, writes its own PID to the pidfile and then
``exec``\\ s the server, so the pidfile names the server itself. It
is uploaded, never sent inline: no multi-line command goes over SSH.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence

from . import __version__
from .defaults import (
    CURRENT_LOG,
    ENV_FILE,
    LAUNCH_ID_FILE,
    LAUNCH_SCRIPT,
    LOG_DIR,
    PIDFILE,
    STANDIN_CONFIG,
    STANDIN_SCRIPT,
)
from .procs import LAUNCH_ID_VAR, LAUNCH_PID_VAR, RUN_DIR_VAR, pidfile_process_command
from .profile import Profile
from .shell import quote

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
_LAUNCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def q(value: object) -> str:
    """Shell-quote one value for the script file (newlines stay inside the quotes)."""
    return shlex.quote(str(value))


sq = quote  # for one-line commands: never contains a newline


def join(argv: Sequence[str]) -> str:
    return " ".join(q(a) for a in argv)


def server_argv(profile: Profile, extra_args: Sequence[str] | None = None) -> list[str]:
    """The server's arguments (without the interpreter and entry point).

    ``extra_args`` replaces ``profile.extra_args`` (the plan may adjust them for the version).
    ``--enable-auto-tool-choice`` is added when a tool-call parser is set (vLLM requires it).
    """
    extra = list(profile.extra_args if extra_args is None else extra_args)
    argv = [
        "--model",
        profile.model,
        "--served-model-name",
        profile.served_model_name,
        "--host",
        profile.host,
        "--port",
        str(profile.port),
        "--tensor-parallel-size",
        str(profile.tensor_parallel_size),
    ]
    if profile.trust_remote_code and "--trust-remote-code" not in extra:
        argv.append("--trust-remote-code")
    if profile.tool_call_parser:
        argv += ["--tool-call-parser", profile.tool_call_parser]
        if "--enable-auto-tool-choice" not in extra:
            argv.append("--enable-auto-tool-choice")
    if profile.reasoning_parser:
        argv += ["--reasoning-parser", profile.reasoning_parser]
    return argv + extra


def engine_command(profile: Profile, extra_args: Sequence[str] | None = None) -> list[str]:
    """The full argv the script ``exec``\\ s: the real vLLM server, or the stand-in."""
    run_dir = profile.run_dir.rstrip("/") or "/"
    if profile.is_standin:
        entry = [profile.python, f"{run_dir}/{STANDIN_SCRIPT}"]
    else:
        entry = [profile.python, "-m", VLLM_MODULE]
    return entry + server_argv(profile, extra_args)


def render_launch_script(
    profile: Profile,
    *,
    extra_args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The launch script's text. Deterministic: the same profile renders the same bytes.

    ``run_dir`` must be absolute (resolve ``~`` on the host first). The launch id is the
    script's first argument, so it does not change the script.
    """
    run_dir = profile.run_dir.rstrip("/") or "/"
    if not run_dir.startswith("/"):
        raise ValueError(f"run_dir must be absolute here, got {profile.run_dir!r}")
    # Secret values (by name, ``secret_patterns``, or by shape) are not written here: the env
    # file sourced below (mode 0600) carries them.
    source = profile.env if env is None else env
    environment = {k: v for k, v in source.items() if not profile.is_secret(k, v)}
    if profile.is_standin:
        environment.setdefault("KIMI_STANDIN_CONFIG", f"{run_dir}/{STANDIN_CONFIG}")
    argv = engine_command(profile, extra_args)
    lines = [
        "#!/usr/bin/env bash",
        f"# Launch script rendered by kimi-ops {__version__}; do not edit: "
        "`fab upload-script` rewrites it.",
        f"# Serves {profile.served_model_name!r} on port {profile.port} "
        f"({'stand-in engine: emulates vLLM, loads no model' if profile.is_standin else 'vLLM'}).",
        "set -euo pipefail",
        'kimi_ops_launch_id="${1:-manual-$(date +%Y%m%dT%H%M%S)}"',
        f"kimi_ops_run_dir={q(run_dir)}",
        'cd "$kimi_ops_run_dir"',
    ]
    lines += [f"export {name}={q(value)}" for name, value in sorted(environment.items())]
    lines += [
        f'if [ -f "$kimi_ops_run_dir"/{ENV_FILE} ]; then',
        f'  set -a; . "$kimi_ops_run_dir"/{ENV_FILE}; set +a',
        "fi",
        f"kimi_ops_server={q(argv[0])}",
        'if [ ! -x "$kimi_ops_server" ]; then',
        '  echo "kimi-ops: the profile\'s python is not an executable file: $kimi_ops_server" >&2',
        "  exit 127",
        "fi",
        # Ownership: every process of the tree inherits these (kimi_ops.procs.owned_processes).
        # KIMI_OPS_LAUNCH_PID: this script's PID, which the server keeps (exec); equal to the
        # session only under setsid, so a session is taken for the launch's only then.
        f'export {RUN_DIR_VAR}="$kimi_ops_run_dir" {LAUNCH_ID_VAR}="$kimi_ops_launch_id" '
        f'{LAUNCH_PID_VAR}="$$"',
        f"printf '%s\\n' \"$kimi_ops_launch_id\" > {LAUNCH_ID_FILE}.tmp",
        f"mv -f {LAUNCH_ID_FILE}.tmp {LAUNCH_ID_FILE}",
        f"printf '%s\\n' \"$$\" > {PIDFILE}.tmp && mv -f {PIDFILE}.tmp {PIDFILE}",
        'echo "kimi-ops: launch $kimi_ops_launch_id: pid $$: exec $kimi_ops_server"',
        "exec " + join(argv),
        "",
    ]
    return "\n".join(lines)


#: The files whose bytes identify a deployment, in the order they are hashed.
DIGEST_FILES = (LAUNCH_SCRIPT, ENV_FILE, STANDIN_CONFIG)


def deployment_digest(files: Mapping[str, bytes]) -> str:
    """sha256 of the deployment's files concatenated in :data:`DIGEST_FILES` order.

    The launcher records the same digest on the host (``cat ... | sha256sum``) at each launch,
    so deploy can tell whether the running server was started from exactly these files.
    """
    h = hashlib.sha256()
    for name in DIGEST_FILES:
        if name in files:
            h.update(files[name])
    return h.hexdigest()


def new_launch_id(timestamp: str, suffix: str) -> str:
    """A launch id from a timestamp (``20261202T130501``) and a short random suffix."""
    lid = f"{timestamp}-{suffix}"
    if not _LAUNCH_ID.match(lid):
        raise ValueError(f"bad launch id {lid!r}")
    return lid


def rotate_logs_command(launch_id: str, keep: int) -> str:
    """Delete the logs (and digests) of all but the newest ``keep`` launches in ``logs/``, run
    in run_dir before ``current.log`` is re-linked: this launch and the one ``current.log``
    still names are never deleted. Launch ids start with a UTC timestamp, so their names sort
    by age; files kimi-ops did not name that way are left alone."""
    if not _LAUNCH_ID.match(launch_id):
        raise ValueError(f"bad launch id {launch_id!r}")
    older = max(0, int(keep) - 1)  # this launch is one of the ``keep``
    return (
        f'{{ prev=$(basename "$(readlink {CURRENT_LOG} 2>/dev/null)" .log); '
        f"ls -1 {LOG_DIR} 2>/dev/null "
        "| sed -n 's/^\\([0-9]\\{8\\}T[0-9]\\{6\\}-[A-Za-z0-9]*\\)\\.log$/\\1/p' "
        f"| grep -vxF -e {sq(launch_id)} | sort -r | tail -n +{older + 1} "
        '| while read -r old; do [ "$old" = "$prev" ] || '
        f'rm -f -- "{LOG_DIR}/$old.log" "{LOG_DIR}/$old.sha256"; done; '
        "true; }"
    )


def launch_command(run_dir: str, launch_id: str, keep_logs: int | None = None) -> str:
    """One line that starts the script detached and prints ``pid=N``.

    ``setsid`` puts the server in its own session (so it outlives SSH; its PID is also its
    process group), ``nohup`` ignores SIGHUP, stdin is /dev/null, stdout and stderr go to the
    per-launch log, which ``current.log`` links to. With ``keep_logs``, older launches' logs
    beyond that many are deleted first (:func:`rotate_logs_command`).
    """
    if not _LAUNCH_ID.match(launch_id):
        raise ValueError(f"bad launch id {launch_id!r}")
    r = sq(run_dir.rstrip("/") or "/")
    log = f"{LOG_DIR}/{launch_id}.log"
    rotate = f"{rotate_logs_command(launch_id, keep_logs)} && " if keep_logs else ""
    return (
        f"cd {r} && {{ test -x {LAUNCH_SCRIPT} || {{ echo @@no-script; exit 3; }}; }} && "
        f"mkdir -p {LOG_DIR} && {rotate}: > {log} && ln -sfn {log} {CURRENT_LOG} && "
        f"{{ cat {' '.join(DIGEST_FILES)} 2>/dev/null; true; }} | sha256sum > "
        f"{LOG_DIR}/{launch_id}.sha256 && "
        f"{{ setsid nohup bash {r}/{LAUNCH_SCRIPT} {launch_id} >> {log} 2>&1 < /dev/null & "
        'echo "pid=$!"; }'
    )


def parse_launch_output(text: str) -> int | None:
    m = re.search(r"^pid=(\d+)\s*$", text, re.M)
    return int(m.group(1)) if m else None


def running_state_command(run_dir: str) -> str:
    """The current launch id, the digest recorded when it launched, and the pidfile's process."""
    r = sq(run_dir.rstrip("/") or "/")
    return (
        f'id=$(cat {r}/{LAUNCH_ID_FILE} 2>/dev/null || true); echo "launch_id=$id"; '
        f'if [ -n "$id" ]; then echo "digest=$(cut -d" " -f1 {r}/{LOG_DIR}/"$id".sha256 '
        '2>/dev/null)"; fi; '
        f'pid=$(cat {r}/{PIDFILE} 2>/dev/null || true); echo "pid=$pid"; '
        + pidfile_process_command(f"{r}/{PIDFILE}")
        + "; true"
    )


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (the first ``=`` splits)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def confirm_command(run_dir: str, pid: int, launch_id: str) -> str:
    """After launch: is the PID alive, does the log exist, what does the pidfile say."""
    r = sq(run_dir.rstrip("/") or "/")
    log = f"{r}/{LOG_DIR}/{launch_id}.log"
    return (
        # A process that already exited can linger as a zombie: that is not alive.
        f'st=$(ps -o stat= -p {int(pid)} 2>/dev/null | tr -d " "); '
        'case "$st" in ""|Z*) echo alive=0;; *) echo alive=1;; esac; '
        f"if [ -f {log} ]; then echo logfile=1; else echo logfile=0; fi; "
        f'echo "pidfile=$(cat {r}/{PIDFILE} 2>/dev/null)"; '
        # Enough of the log for the diagnosis: the root cause is printed well above the end.
        f"echo @@log; tail -c 262144 {log} 2>/dev/null; true"
    )


def parse_confirm_output(text: str) -> dict[str, str]:
    head, _, log = text.partition("@@log\n")
    out = parse_key_values(head)
    out["log"] = log
    return out
