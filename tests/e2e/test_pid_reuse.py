"""A PID reused during kill-stale's grace period is never SIGKILLed (red team round 4, #12).

In a private PID namespace (``unshare --pid --fork --mount-proc``, so ``ns_last_pid`` can place
a PID without touching the rest of the machine): a local stand-in deployment whose API server
hangs (SIGSTOP: it survives SIGTERM, so kill-stale has to send SIGKILL); as soon as one TP
worker exits on SIGTERM, an unrelated process is started at its PID, in a session of its own,
with an empty environment and exactly the worker's argv (as vLLM's ``VLLM::Worker_TP0`` titles
are the same in every deployment). kill-stale used to take it for the worker still running
(same PID, same argv) and SIGKILL it; the PID's start time says it is another process.

Local mode (no SSH): the same code paths run over SSH. Everything runs inside the namespace,
whose init ends every process in it when the test is done.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.demo import demo_profile, make_model_dir

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FAB = Path(sys.executable).parent / "fab"

#: The namespace's init: runs the scenario, reaps every orphan, exits with the scenario's code.
INIT = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        sys.exit(1)
    if pid == child.pid:
        sys.exit(os.waitstatus_to_exitcode(status))
"""

PAUSE_C = "#include <unistd.h>\nint main(void){for(;;)pause();}\n"

#: exec the pause binary (argv[2]) with exactly the argv read from the file argv[1], in its own
#: session, with an empty environment.
FOREIGN = """
import os, sys
argv = open(sys.argv[1], 'rb').read().split(b'\\0')[:-1]
os.setsid()
os.execve(sys.argv[2], argv, {})
"""

SCENARIO = """
set -u
cd {repo}
F="-f {profile}"
{fab} $F deploy > {tmp}/deploy.out 2>&1 || {{ echo "deploy_rc=$?"; exit 3; }}
S=$(head -n 1 {run}/server.pid)
E=$(ps -o pid= --ppid "$S" | head -1 | tr -d ' ')
W=$(ps -o pid= --ppid "$E" | head -1 | tr -d ' ')
echo "server=$S engine=$E worker=$W"
cp /proc/"$W"/cmdline {tmp}/w.cmdline
kill -STOP "$S"                     # a hung API server: survives SIGTERM, needs SIGKILL
{fab} $F kill-stale > {tmp}/ks.out 2>&1 &
KS=$!
while [ -e /proc/"$W" ]; do sleep 0.005; done
echo $((W - 1)) > /proc/sys/kernel/ns_last_pid
{python} {tmp}/foreign.py {tmp}/w.cmdline {tmp}/pause &
FP=$!
echo "foreign=$FP"
for _ in $(seq 200); do                  # until it has exec'd the pause binary
  # (not cmp -s: it trusts st_size, which is 0 for /proc/PID/cmdline)
  cmp /proc/"$FP"/cmdline {tmp}/w.cmdline >/dev/null 2>&1 && {{ echo "same_argv=1"; break; }}
  sleep 0.01
done
wait "$KS"; echo "kill_stale_rc=$?"
sleep 0.5
if kill -0 "$FP" 2>/dev/null; then echo "foreign_alive=1"; kill -KILL "$FP"; fi
wait "$FP" 2>/dev/null
exit 0
"""


def _namespace_available() -> str | None:
    """Why the scenario cannot run here (None: it can)."""
    if sys.platform != "linux":
        return "needs Linux PID namespaces"
    for tool in ("unshare", "cc", "ps"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    try:
        probe = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo 1 > /dev/null"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare --pid --fork --mount-proc failed: {exc}"
    if probe.returncode != 0:
        return (
            "unshare --pid --fork --mount-proc is not allowed here (needs root or user "
            f"namespaces): {probe.stderr.strip()[:200]}"
        )
    return None


def test_a_pid_reused_by_a_same_argv_process_in_the_grace_period_is_not_sigkilled(
    tmp_path: Path,
) -> None:
    why = _namespace_available()
    if why:
        pytest.skip(why)
    tmp_path.chmod(0o700)
    make_model_dir(tmp_path / "Kimi-K2.5-NVFP4")
    (tmp_path / "shm").mkdir()
    profile = demo_profile(tmp_path, 18467, 1.0)
    (tmp_path / "profile.json").write_text(json.dumps({"kimi": profile}))
    (tmp_path / "pause.c").write_text(PAUSE_C)
    subprocess.run(["cc", "-o", str(tmp_path / "pause"), str(tmp_path / "pause.c")], check=True)
    (tmp_path / "init.py").write_text(INIT)
    (tmp_path / "foreign.py").write_text(FOREIGN)
    (tmp_path / "scenario.sh").write_text(
        SCENARIO.format(
            repo=REPO,
            fab=FAB,
            python=sys.executable,
            profile=tmp_path / "profile.json",
            run=profile["run_dir"],
            tmp=tmp_path,
        )
    )
    run = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(tmp_path / "init.py")]
        + ["bash", str(tmp_path / "scenario.sh")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    kill_stale = (tmp_path / "ks.out").read_text() if (tmp_path / "ks.out").exists() else ""
    report = f"{run.stdout}\n{run.stderr}\nkill-stale said:\n{kill_stale}"
    assert run.returncode == 0, report
    facts = dict(w.split("=", 1) for w in run.stdout.split() if "=" in w)
    assert facts.get("foreign") == facts.get("worker"), f"the PID was not reused\n{report}"
    assert facts.get("same_argv") == "1", report
    assert facts.get("kill_stale_rc") == "0", report
    assert facts.get("foreign_alive") == "1", f"the foreign process was killed\n{report}"
    # Only the hung API server needed SIGKILL; the reused PID is not counted as ended by it.
    assert "SIGKILL to 1 after" in kill_stale, report
