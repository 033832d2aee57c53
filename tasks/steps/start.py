"""launch: start the server with a new launch id, detached from the SSH session."""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone

from kimi_ops import liveserver
from kimi_ops import script as launch_script
from kimi_ops.defaults import (
    LAUNCH_SCRIPT,
    LOG_DIR,
)
from kimi_ops.diagnose import diagnose
from kimi_ops.profile import Profile
from kimi_ops.result import StepResult, changed, failed, skipped

from ..host import Host
from .common import Sleep, _run_dir
from .processes import owned

#: What to do instead of launching a second server beside a live one.
LIVE_SERVER_HINT = (
    "`fab stop` ends it (then `fab launch` starts a new one); `fab deploy` replaces it, or keeps "
    "it when it already runs this exact profile (`fab deploy --restart` replaces it anyway)"
)


def new_launch_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return launch_script.new_launch_id(stamp, secrets.token_hex(3))


def launch(
    h: Host,
    p: Profile,
    *,
    step: str = "launch",
    settle: float = 1.0,
    sleep: Sleep = time.sleep,
) -> StepResult:
    """Start the uploaded script detached; confirm the PID is alive and the log exists.

    Refused, before anything is written, while a server of this deployment lives (found as
    kill-stale finds its processes: :func:`kimi_ops.liveserver.live_servers`): a second one would
    overwrite the live one's launch id, pidfile and log link, then die on its port."""
    r = _run_dir(p)
    selection = owned(h, p, step)
    servers = liveserver.live_servers(selection)
    if servers:
        return failed(
            step,
            liveserver.launch_refusal(servers, r, p.port),
            hint=LIVE_SERVER_HINT,
            data={"pids": [x.pid for x in servers]},
        )
    launch_id = new_launch_id()
    log = f"{r}/{LOG_DIR}/{launch_id}.log"
    if h.dry:
        return skipped(
            step,
            "dry run: would start the server detached",
            lines=(launch_script.launch_command(r, launch_id, p.keep_logs),),
        )
    started = time.monotonic()
    out = h.run(launch_script.launch_command(r, launch_id, p.keep_logs), step=step, check=False)
    if "@@no-script" in out.stdout:
        return failed(
            step,
            f"no launch script at {r}/{LAUNCH_SCRIPT}",
            hint="run `fab upload-script` first (deploy does it for you)",
        )
    if not out.ok:
        return failed(
            step,
            f"the launcher failed with exit status {out.exited}",
            command=out.command,
            stderr=out.stderr,
        )
    pid = launch_script.parse_launch_output(out.stdout)
    if pid is None:
        return failed(
            step, "the launcher printed no PID", command=out.command, stderr=out.stderr + out.stdout
        )
    sleep(settle)
    confirm = launch_script.parse_confirm_output(
        h.run(launch_script.confirm_command(r, pid, launch_id), step=step, mutating=False).stdout
    )
    alive, has_log = confirm.get("alive") == "1", confirm.get("logfile") == "1"
    if not (alive and has_log):
        took = time.monotonic() - started
        printed = confirm.get("log", "")
        diag = diagnose(printed, {"port": p.port}) if printed.strip() else None
        data = {"pid": pid, "log": log, "launch_id": launch_id}
        if diag is not None:
            data["diagnosis"] = diag.to_dict()
        if has_log and diag is not None and (diag.failed or diag.stage is not None):
            # The server ran and died: that is a crash, with its cause.
            message = f"the server exited {took:.1f} s after launch: {diag.summary}"
        else:
            missing = " and ".join(
                x
                for x, bad in (("the log file", not has_log), (f"process {pid}", not alive))
                if bad
            )
            message = f"never started: {missing} missing {took:.1f} s after launch"
        tail = printed.strip().splitlines()[-30:]
        if diag is not None and diag.failed:
            tail = [f"label: {diag.label}", *(f"evidence: {e}" for e in diag.evidence[:3]), *tail]
        if diag is not None and diag.failed:
            hint = diag.hint
        elif tail or out.stderr.strip():
            hint = "the launcher's output above says why"
        else:
            where = f"{log} exists but is empty" if has_log else f"{log} was not created"
            tail = [f"the launcher printed nothing: {where}"]
            hint = (
                f"nothing could write to {r}: check its free space and permissions "
                f"(`df -h {r}`, `ls -ld {r}`)"
            )
        return failed(step, message, lines=tuple(tail), stderr=out.stderr, hint=hint, data=data)
    return changed(
        step,
        f"started PID {pid}; log {log}",
        data={"pid": pid, "log": log, "launch_id": launch_id},
    )
