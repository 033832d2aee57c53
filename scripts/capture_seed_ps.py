#!/usr/bin/env python3
"""Re-capture tests/fixtures/ps/seed_oneliner.txt: a real `ps` listing taken by a seed-shaped
remote shell on this machine.

What it does (everything it starts is killed again by PID at the end):

1. makes a tmp dir whose name carries a random marker, with a fake vLLM package
   (`vllm/entrypoints/openai/api_server.py`, forks one child and sleeps) and a decoy module
   `vllm_tools.py`;
2. starts a throwaway sshd on 127.0.0.1 (tests/e2e/harness.py) and, through it, launches
   detached (`setsid nohup ... &`, so their parent becomes init like a real deploy):
     - the fake server: `python3 -m vllm.entrypoints.openai.api_server --model
       /models/Kimi-K2.5-NVFP4 --served-model-name kimi-k2.5 --port 8000
       --tensor-parallel-size 8 --trust-remote-code` (+ its forked child, same args),
     - decoys: `tail -f <tmp>/vllm_kimi.log`, `python3 -m vllm_tools --watch`,
       `bash -c 'sleep 300; : grep vllm'`;
3. runs ONE seed-shaped line through the sshd (the remote `bash -c '<line>'` is the shell):
     echo "# self_pid=$$"; echo "# pidfile_pid=<server pid>"; echo "# marker=<marker>";
     ps -eww -o pid=,ppid=,pgid=,args=; : pkill -9 -f "python3.*vllm"; sleep 0.2;
     : nohup python3 -m vllm.entrypoints.openai.api_server ... > <tmp>/vllm_kimi.log 2>&1 &
   The seed's pkill and nohup are neutered with `:` (never run the generic pattern!), but their
   text is in the shell's own command line, which is in the listing.
   The line is handed to ssh via a temporary ssh_config RemoteCommand, so the local ssh client's
   argv does not contain it (as when the operator's laptop is another machine).
4. writes the output (unmodified) to the fixture, checks its shape, and cleans up.

All of this runs inside a fresh PID namespace (`unshare --pid --fork --mount-proc`, needs
root), so the listing shows only the capture's own processes: PID 1 is the namespace's bash
init running this script with --inner, then the sshd, the fake server and decoys, the local ssh
client, the sshd session, the seed-shaped shell and its ps. Unrelated processes of the machine
(whose argv may hold secrets) are not in the fixture.

Usage: python3 scripts/capture_seed_ps.py [OUTPUT]   (default tests/fixtures/ps/seed_oneliner.txt)
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.e2e.harness import (  # noqa: E402
    kill_pid_tree_started_by_test,
    ps_listing,
    ssh_run,
    start_sshd,
)

DEFAULT_OUTPUT = REPO_ROOT / "tests" / "fixtures" / "ps" / "seed_oneliner.txt"
SERVER_ARGS = (
    "-m vllm.entrypoints.openai.api_server --model /models/Kimi-K2.5-NVFP4 "
    "--served-model-name kimi-k2.5 --port 8000 --tensor-parallel-size 8 --trust-remote-code"
)
# /usr/bin first so argv[0] is the plain "python3" of a typical host (not a pyenv shim path).
PY_PATH = "PATH=/usr/local/bin:/usr/bin:/bin"

FAKE_SERVER = """\
import os
import time

# Fake vLLM API server for process-listing fixtures: one forked child, both just sleep.
os.fork()
time.sleep(300)
"""

FAKE_TOOLS = """\
import time

# Decoy: a python process whose command line matches "python3.*vllm" but is not the server.
time.sleep(300)
"""


def make_fake_tree(tmp: Path) -> None:
    pkg = tmp / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (tmp / "vllm", tmp / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    (tmp / "vllm_tools.py").write_text(FAKE_TOOLS)
    (tmp / "vllm_kimi.log").write_text("")


def launch(host, tmp: Path, name: str, command: str) -> int:
    line = (
        f"cd {tmp} || exit 1; {PY_PATH} setsid nohup {command} > {tmp}/{name}.out 2>&1 "
        "< /dev/null & echo $!"
    )
    r = ssh_run(host, line, timeout=15, hide_command=True)
    if r.returncode != 0 or not r.stdout.strip().isdigit():
        raise RuntimeError(f"launch {name} failed: {r.returncode} {r.stdout!r} {r.stderr!r}")
    return int(r.stdout.strip())


def wait_for(pred, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def check(text: str, server_pid: int, marker: str) -> int:
    lines = text.splitlines()
    assert lines[0].startswith("# self_pid="), lines[:3]
    assert lines[1] == f"# pidfile_pid={server_pid}", lines[:3]
    assert lines[2] == f"# marker={marker}", lines[:3]
    self_pid = int(lines[0].split("=", 1)[1])
    rows = {}
    for row in lines[3:]:
        pid, ppid, pgid, *rest = row.split(None, 3)
        rows[int(pid)] = (int(ppid), int(pgid), rest[0] if rest else "")
    assert 'pkill -9 -f "python3.*vllm"' in rows[self_pid][2], rows[self_pid]
    assert rows[server_pid][2] == f"python3 {SERVER_ARGS}", rows[server_pid]
    kids = [p for p, (pp, _, a) in rows.items() if pp == server_pid and a == rows[server_pid][2]]
    assert len(kids) == 1, kids
    return len(lines) - 3


def capture(output: Path) -> int:
    marker = "kimiseed" + uuid.uuid4().hex[:12]
    tmp = Path(tempfile.mkdtemp(prefix=f"kimi-seed-{marker}-"))
    started: list[int] = []
    server = None
    try:
        make_fake_tree(tmp)
        server = start_sshd(tmp / "sshd")
        host = server.host
        server_pid = launch(host, tmp, "server", f"python3 {SERVER_ARGS}")
        started.append(server_pid)
        started.append(launch(host, tmp, "tail", f"tail -f {tmp}/vllm_kimi.log"))
        started.append(launch(host, tmp, "tools", "python3 -m vllm_tools --watch"))
        started.append(launch(host, tmp, "shell", "bash -c 'sleep 300; : grep vllm'"))

        def ready() -> bool:
            rows = ps_listing()
            fake = [e for e in rows if e.args == f"python3 {SERVER_ARGS}"]
            return any(e.pid == server_pid for e in fake) and any(
                e.ppid == server_pid for e in fake
            )

        wait_for(ready, "fake server and its forked child")
        wait_for(
            lambda: any(e.args == "python3 -m vllm_tools --watch" for e in ps_listing()),
            "vllm_tools decoy",
        )

        line = (
            f'echo "# self_pid=$$"; echo "# pidfile_pid={server_pid}"; '
            f'echo "# marker={marker}"; ps -eww -o pid=,ppid=,pgid=,args=; '
            ': pkill -9 -f "python3.*vllm"; sleep 0.2; '
            f": nohup python3 {SERVER_ARGS} > {tmp}/vllm_kimi.log 2>&1 &"
        )
        r = ssh_run(host, line, hide_command=True)
        if r.returncode != 0:
            raise RuntimeError(f"capture failed: {r.returncode} {r.stderr!r}")
        count = check(r.stdout, server_pid, marker)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(r.stdout)
        print(f"wrote {output}: {count} processes, marker={marker}, server pid={server_pid}")
        return 0
    finally:
        for pid in reversed(started):
            kill_pid_tree_started_by_test(pid)
        if server is not None:
            server.stop()
        # Anything else carrying this run's unique marker (in its tmp path) is ours too.
        for e in ps_listing():
            if marker in e.args and e.pid != os.getpid():
                kill_pid_tree_started_by_test(e.pid)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    args = argv[1:]
    inner = "--inner" in args
    args = [a for a in args if a != "--inner"]
    output = Path(args[0]).resolve() if args else DEFAULT_OUTPUT
    if inner:
        return capture(output)
    # Run the capture as the only thing in a fresh PID namespace (own /proc): the listing is
    # then a real, unmodified `ps` output that holds only this capture's processes, not the
    # argv of unrelated processes of the machine (which may carry secrets). PID 1 is a bash
    # that reaps orphans like init; when it exits the kernel kills whatever is left inside.
    me = [sys.executable, str(Path(__file__).resolve()), "--inner", str(output)]
    init = shlex.join(me) + "; true"
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "bash", "-c", init]
    return subprocess.run(cmd, timeout=120).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
