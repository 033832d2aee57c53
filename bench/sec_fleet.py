"""Benchmark 3: fleet scaling, wall time for 1, 2, 4, 8 hosts as a ratio to 1 host.

Eight sshd on 127.0.0.2 .. 127.0.0.9 (one client key, one combined known_hosts). Every host gets
its own model dir, run dir, shm dir, bind address and port through ``kimi.host_overrides``
(all "hosts" are this machine). Each size starts cold (fresh dirs, no server); the servers of
one size are stopped before the next.

* If deploy is fleet-capable (``fab deploy --help`` offers ``--rolling``: tasks/fleet.py's
  executor runs the hosts of ``fab -H a,b,..`` concurrently, ``kimi.parallel`` at a time):
  ``fab -H <N hosts> deploy --json`` for N = 1, 2, 4, 8, and the 8 hosts once more with
  ``kimi.parallel: 1`` (one after another, same fab process) for reference.
* Otherwise (older tree): one ``fab -H hostN deploy`` after another, labelled SERIAL; the wall
  time for N hosts is the elapsed time after the N-th deploy.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import lib

SIZES = (1, 2, 4, 8)
#: The stand-in's emulated load per host (issue 7 measures the fleet with load_seconds 5).
FLEET_LOAD_SECONDS = 5.0
#: All "hosts" share this 2-core machine, so each emulated server runs one engine process
#: (TP 1) instead of nine (TP 8): the measurement is the tool's orchestration, not the
#: emulator's processes competing for two cores.
FLEET_TP = 1


def fleet_capable() -> tuple[bool, str]:
    out = subprocess.run(
        [str(lib.fab_executable()), "deploy", "--help"],
        cwd=lib.REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "--rolling" in out.stdout:
        return True, "fab -H a,b,.. deploy runs the hosts concurrently (tasks/fleet.py)"
    return False, "no fleet mode: fab -H a,b,.. deploy runs the hosts one after another"


def fleet_config(targets: list[lib.Target], **kimi: Any) -> dict[str, Any]:
    hosts = [t.host for t in targets]
    cfg = lib.kimi_config(targets[0], hosts, **kimi)
    cfg["kimi"]["standin"]["load_seconds"] = FLEET_LOAD_SECONDS
    cfg["kimi"]["tensor_parallel_size"] = FLEET_TP
    cfg["kimi"]["host_overrides"] = {
        t.host.host: {
            "host": t.host.host,
            "port": t.port,
            "model": str(t.model),
            "run_dir": str(t.run_dir),
            "shm_dir": str(t.shm_dir),
        }
        for t in targets
    }
    return cfg


def recap(stdout: str) -> list[dict[str, Any]]:
    try:
        return json.loads(stdout[stdout.index("{") :])["hosts"]
    except (ValueError, KeyError):
        return []


def fleet_deploy(run: lib.Run, hosts: list[lib.SshdHost], parallel: int | None) -> dict[str, Any]:
    targets = [
        lib.make_target(h, run.newdir(f"fleet{len(hosts)}-{h.host}"), port=lib.free_port(h.host))
        for h in hosts
    ]
    extra = {} if parallel is None else {"parallel": parallel}
    try:
        args = ["deploy", "--json"] if len(hosts) > 1 else ["deploy"]
        r = lib.run_fab(hosts, *args, config=fleet_config(targets, **extra), timeout=600)
        for t in targets:
            t.remember()
        rows = recap(r.stdout)
        if len(hosts) == 1:
            ok = r.ok and "verify: ready" in r.output
            host_seconds = [r.seconds]
        else:
            ok = r.ok and len(rows) == len(hosts) and all(x["result"] == "ready" for x in rows)
            host_seconds = [x["seconds"] for x in rows]
        out = {"hosts": len(hosts), "seconds": r.seconds, "ok": ok, "host_seconds": host_seconds}
        if not ok:
            out["failure"] = r.describe()[-4000:]
        return out
    finally:
        for t in targets:
            t.stop()


def serial_deploys(run: lib.Run, hosts: list[lib.SshdHost], sizes: tuple[int, ...]) -> dict:
    targets = [lib.make_target(h, run.newdir(f"serial-{h.host}")) for h in hosts]
    start = time.monotonic()
    cumulative: dict[str, float] = {}
    failures = []
    try:
        for i, t in enumerate(targets, 1):
            lib.log(f"fleet: serial deploy {i}/{len(targets)} ({t.host.host})")
            r = lib.fab(t, "deploy")
            if not (r.ok and "verify: ready" in r.output):
                failures.append(r.describe()[-3000:])
            if i in sizes:
                cumulative[str(i)] = time.monotonic() - start
    finally:
        for t in targets:
            t.stop()
    return {"wall_seconds": cumulative, "failures": failures}


def run_section(run: lib.Run, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    capable, how = fleet_capable()
    n = max(sizes)
    hosts = [run.sshd(f"127.0.0.{i + 2}", plain_login=True) for i in range(n)]
    out: dict[str, Any] = {"fleet_capable": capable, "mode": how}
    if capable:
        runs = {}
        for k in sizes:
            lib.log(f"fleet: fab -H <{k} hosts> deploy (concurrent)")
            runs[str(k)] = fleet_deploy(run, hosts[:k], None)
        lib.log(f"fleet: fab -H <{n} hosts> deploy with kimi.parallel=1 (one at a time)")
        one_at_a_time = fleet_deploy(run, hosts, 1)
        wall = {k: v["seconds"] for k, v in runs.items()}
        out["runs"] = runs
        out["serial_reference"] = one_at_a_time
    else:
        serial = serial_deploys(run, hosts, sizes)
        wall = serial["wall_seconds"]
        out["serial"] = serial
    base = wall[str(min(sizes))]
    out["wall_seconds"] = wall
    out["ratio_to_1"] = {k: round(v / base, 2) for k, v in wall.items()}
    return out
