"""``fab deploy`` / ``stop`` / ``kill-stale`` / ``status`` on a Ray cluster (``kimi.cluster``).

The steps: preflight every node (same vLLM and Ray, the same checkpoint by checksum, enough
GPUs) and the head as a server host; end what ran before; ``ray start --head`` on the head and
``ray start --address`` on each worker (each detached, its PID recorded, confirmed alive; a
worker first proves it can reach the head's Ray port); wait until the GCS shows every node with
its GPUs; then the server on the head with TP per node, PP = nodes and the Ray executor,
launched and verified like a single-host deploy. See :mod:`kimi_ops.cluster`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from fabric import Connection
from invoke import Context
from invoke.exceptions import Exit

from kimi_ops import cluster as cl
from kimi_ops import procs
from kimi_ops.profile import Profile, secret_env_values
from kimi_ops.result import StepResult, changed, failed, ok, skipped

from . import state as host_state
from . import steps
from .host import Host
from .lock import HostLock
from .report import Reporter
from .session import kimi_config, load, safe_run_dir, task_errors
from .steps.common import require_complete

#: The tasks that act on the whole cluster when ``kimi.cluster`` is set (and no -H is given).
CLUSTER_STEPS = frozenset({"deploy", "stop", "kill-stale", "status", "verify", "logs"})
Sleep = Callable[[float], None]


def cluster_configured(c: Context) -> bool:
    return bool(kimi_config(c).get("cluster"))


@dataclass
class NodeHost:
    node: cl.Node
    host: Host
    profile: Profile  # run_dir resolved on the node; model = the node's
    rdir: str  # <run_dir>/ray on the node


@dataclass
class ClusterRun:
    cluster: cl.Cluster
    profile: Profile  # the head's server profile (TP, PP, Ray executor, env)
    nodes: list[NodeHost]
    reporter: Reporter
    ray_exe: str
    dry: bool = False

    @property
    def head(self) -> NodeHost:
        return self.nodes[0]

    @property
    def ray_python(self) -> str:
        return f"{self.ray_exe.rsplit('/', 1)[0]}/python"

    def report(self, result: StepResult) -> StepResult:
        self.reporter.result(result)
        if result.failed:
            raise Exit(code=1)
        return result


@contextmanager
def cluster_run(c: Context, ov: dict[str, Any], step: str, dry: bool) -> Iterator[ClusterRun]:
    """Validate the profile and the cluster section, open every node; errors end the task."""
    reporter = Reporter(None)
    opened: list[Connection] = []
    # `fab --dry deploy` as well as `deploy --dry`: every node's Host sees the global flag too.
    dry = dry or bool(getattr(getattr(c.config, "run", None), "dry", False))
    try:
        with task_errors(step, reporter):
            profile = load(c, ov)
            cluster = cl.load_cluster(profile.cluster, profile)
            assert cluster is not None
            server = cl.server_profile(cluster, profile)
            nodes = []
            for node in cluster.nodes:
                conn = Connection(node.host, config=c.config.clone())  # own config: fleet.py
                opened.append(conn)
                p = replace(
                    server if node.role == "head" else profile,
                    model=node.model or server.model,
                    run_dir=node.run_dir or profile.run_dir,
                )
                h = Host(conn, p, dry=dry)
                p = safe_run_dir(h, p, step, reporter)
                nodes.append(NodeHost(node, h, p, cl.ray_dir(p.run_dir)))
            yield ClusterRun(
                cluster, nodes[0].profile, nodes, reporter, cluster.ray_exe(profile), dry
            )
    finally:
        for conn in opened:
            conn.close()


def run_cluster(c: Context, step: str, ov: dict[str, Any], mine: dict[str, Any]) -> None:
    """The task body of deploy / stop / kill-stale / status when ``kimi.cluster`` is set."""
    with cluster_run(c, ov, step, bool(mine.get("dry"))) as run, ExitStack() as locks:
        if step in ("deploy", "stop", "kill-stale"):  # one deployment at a time on each node
            for n in run.nodes:
                locks.enter_context(HostLock(n.host, n.profile.run_dir, step))
        if step == "deploy":
            deploy(run)
        elif step in ("stop", "kill-stale"):
            stop(run, step)
        elif step == "verify":  # the server runs on the head
            run.report(steps.verify(run.head.host, run.profile, run.reporter))
        elif step == "logs":
            _write(steps.read_log(run.head.host, run.profile, int(mine.get("lines", 50))))
            if mine.get("follow"):
                steps.follow_log(run.head.host, run.profile, _write)
        else:
            status(run)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


# --- preflight --------------------------------------------------------------------------------


def preflight(run: ClusterRun, step: str = "cluster-preflight") -> dict[cl.Node, cl.NodeFacts]:
    facts: dict[cl.Node, cl.NodeFacts] = {}
    lines = []
    for n in run.nodes:
        p = n.profile
        steps.ensure_standin(n.host, p, step=step)
        if p.is_standin:
            standin = f"{p.python} {p.run_dir}/kimi_standin.py"
            version, gpus = f"{standin} vllm-version", f"{standin} nvidia-smi -L"
        else:
            version = f"{p.python} -c 'import vllm; print(vllm.__version__)'"
            gpus = "nvidia-smi -L"
        out = n.host.run(
            cl.gather_command(p.python, p.model, version, gpus, run.ray_exe, n.rdir),
            step=step,
            mutating=False,
            timeout=120,
        )
        f = cl.parse_gather(out.stdout)
        facts[n.node] = f
        lines.append(
            f"{n.node.name}: vLLM {f.vllm or '?'}, Ray {f.ray or '?'}, "
            f"{n.node.num_gpus if n.node.num_gpus is not None else f.gpus} GPU(s), "
            f"config {f.config_sha[:12]}, index {f.index_sha[:12]}"
        )
    problems = cl.compare_nodes(run.cluster, facts)
    c = run.cluster
    lines.append(
        f"plan: TP {c.tensor_parallel_size} per node x PP {c.pipeline_parallel_size} nodes = "
        f"{c.world_size} GPUs, Ray at {c.address}"
    )
    if problems:
        run.report(
            failed(
                step,
                f"{len(problems)} problem(s): " + "; ".join(problems),
                lines=tuple(lines),
                hint="every node needs the same vLLM, Ray and checkpoint; nothing was changed",
            )
        )
    run.report(ok(step, f"{len(run.nodes)} nodes agree", lines=tuple(lines)))
    return facts


# --- Ray processes on a node ------------------------------------------------------------------


def probe(n: NodeHost, step: str) -> cl.NodeProbe:
    out = n.host.run(
        cl.probe_command(n.rdir, procs.LISTING_COMMAND), step=step, mutating=False, timeout=60
    )
    found = cl.parse_probe(out.stdout, n.rdir)
    require_complete(found.listing, step=step, command=out.command)
    return found


def end_ray(
    n: NodeHost, step: str, *, grace: float = 10.0, sleep: Sleep = time.sleep
) -> StepResult:
    """End this node's Ray processes of this cluster (only those), then check none is left."""
    found = probe(n, step)
    sel = found.selection
    where = n.node.name
    if not sel.targets:
        if found.ray_pid is not None and not n.host.dry:  # it died on its own: forget it
            n.host.run(f"rm -f {n.rdir}/{cl.RAY_PIDFILE}", step=step)
        return ok(step, f"{where}: no Ray process of this cluster")
    lines = tuple(sel.describe())
    if n.host.dry:
        return skipped(step, f"dry run: would end {len(sel.targets)} Ray process(es)", lines=lines)
    n.host.run(procs.signal_command("TERM", sel.targets), step=step)
    deadline = time.monotonic() + grace
    remaining = list(sel.targets)
    while remaining and time.monotonic() < deadline:
        sleep(0.5)
        remaining = procs.still_running(sel, probe(n, step).listing)
    killed: list[int] = []
    if remaining:
        out = n.host.run(procs.signal_command("KILL", remaining), step=step)
        killed, _ = procs.parse_signal_output(out.stdout)
        for _ in range(20):
            sleep(0.25)
            remaining = procs.still_running(sel, probe(n, step).listing)
            if not remaining:
                break
    left = probe(n, step).selection.targets
    if not remaining and not left:
        n.host.run(f"rm -f {n.rdir}/{cl.RAY_PIDFILE}", step=step)
    if remaining or left:
        return failed(
            step,
            f"{where}: {len(remaining) or len(left)} Ray process(es) survived SIGKILL: "
            + ", ".join(str(p.pid) for p in (remaining or left)),
            lines=lines,
        )
    how = f"SIGTERM to {len(sel.targets)}" + (f", SIGKILL to {len(killed)}" if killed else "")
    return changed(
        step,
        f"{where}: ended {len(sel.targets)} Ray process(es) ({how}); none left",
        lines=lines,
        data={"pids": sel.pids},
    )


def start_ray(
    run: ClusterRun, n: NodeHost, gpus: int, *, step: str, sleep: Sleep = time.sleep
) -> StepResult:
    """``ray start --block`` detached on one node; confirmed: the PID is a live ``ray start``."""
    node = n.node
    launch_id = steps.new_launch_id()
    command = cl.ray_launch_command(run.cluster, node, run.ray_exe, gpus, n.rdir, launch_id)
    if n.host.dry:
        return skipped(step, f"dry run: would start Ray on {node.name}", lines=(command,))
    if node.role == "worker":
        reach = cl.parse_kv(
            n.host.run(
                cl.reach_command(run.cluster.head.node_ip, run.cluster.ray_port),
                step=step,
                mutating=False,
            ).stdout
        ).get("reach", "")
        if reach != "ok":
            return failed(
                step,
                f"{node.name} cannot reach the head's Ray port {run.cluster.address}: "
                f"{reach.removeprefix('fail:').strip() or 'no answer'}",
                hint="open the port between the nodes (firewall, routes) and check "
                "cluster.head.node_ip",
            )
    out = n.host.run(command, step=step, check=False)
    pid = cl.parse_kv(out.stdout).get("pid", "")
    if not out.ok or not pid.isdigit():
        return failed(
            step, f"{node.name}: ray start did not start", command=command, stderr=out.stderr
        )
    sleep(3.0)
    found = probe(n, step)
    if not found.leader_alive:
        cause = found.cause() or "see the log"
        return failed(
            step,
            f"{node.name}: ray start (PID {pid}) exited: {cause}",
            lines=tuple(found.log.strip().splitlines()[-20:]),
            hint=f"the node's Ray log is {n.rdir}/{cl.RAY_LOG}",
        )
    return changed(
        step,
        f"{node.name}: ray start PID {pid} ({len(found.selection.targets)} processes), "
        f"{gpus} GPU(s), log {n.rdir}/{cl.RAY_LOG}",
        data={"pid": int(pid)},
    )


def gcs_nodes(run: ClusterRun, step: str) -> list[cl.RayNode] | None:
    out = run.head.host.run(
        cl.nodes_command(run.ray_python, run.cluster.address),
        step=step,
        mutating=False,
        timeout=60,
    )
    return cl.parse_nodes(out.stdout)


def wait_nodes(
    run: ClusterRun, *, step: str = "ray-nodes", sleep: Sleep = time.sleep
) -> StepResult:
    """Until the GCS shows every node alive with its GPUs, or a node's Ray dies, or timeout."""
    deadline = time.monotonic() + run.cluster.ready_timeout
    missing = ["the GCS did not answer"]
    while True:
        seen = gcs_nodes(run, step)
        if seen is not None:
            missing = cl.missing_nodes(run.cluster, seen)
            if not missing:
                lines = tuple(
                    f"{r.ip}: alive, {r.gpus:g} GPU(s), node {r.node_id[:12]}" for r in seen
                )
                return ok(
                    step,
                    f"all {len(run.nodes)} nodes joined with their GPUs "
                    f"({sum(r.gpus for r in seen if r.alive):g} GPUs in the cluster)",
                    lines=lines,
                )
        for n in run.nodes:  # a node whose Ray died will never join: say which and why
            found = probe(n, step)
            if not found.leader_alive:
                return failed(
                    step,
                    f"{n.node.name}: its Ray exited: {found.cause() or 'see its log'}",
                    lines=tuple(found.log.strip().splitlines()[-20:]),
                )
        if time.monotonic() >= deadline:
            return failed(
                step,
                f"not every node joined within {run.cluster.ready_timeout:g} s: "
                + "; ".join(missing),
                hint=f"check `ray status` on the head and each node's {cl.RAY_DIR}/{cl.RAY_LOG}",
            )
        sleep(2.0)


# --- the tasks --------------------------------------------------------------------------------


def deploy(run: ClusterRun) -> None:
    facts = preflight(run)
    head = run.head
    pre = steps.preflight(head.host, run.profile)
    run.report(pre.result)
    note = steps.check_secret_env(head.host, run.profile, os.environ, step="deploy")
    if note is not None:
        run.reporter.info(note)
    stop(run, "kill-stale")
    for n in run.nodes:
        gpus = n.node.num_gpus if n.node.num_gpus is not None else facts[n.node].gpus
        run.report(start_ray(run, n, gpus, step=f"ray-{n.node.role}"))
    if run.dry:
        run.report(skipped("ray-nodes", "dry run"))
        return
    run.report(wait_nodes(run))
    h, p = head.host, run.profile
    secrets = secret_env_values(p, os.environ)
    run.report(steps.clean_shm(h, p, refuse_fails=False))
    if pre.plan.patch_kv_config:  # every node loads its own copy: patch them all alike, so
        for n in run.nodes:  # the next preflight still finds the same checksums everywhere
            res = steps.patch_kv_config(n.host, n.profile)
            run.report(replace(res, message=f"{n.node.name}: {res.message}"))
    run.report(steps.upload_script(h, p, plan=pre.plan, secrets_env=secrets))
    run.report(steps.launch(h, p))
    run.report(steps.verify(h, p, run.reporter))
    run.reporter.recap()


def stop(run: ClusterRun, step: str) -> None:
    """The server on the head first, then every node's Ray (workers, then the head)."""
    # Only this deployment's processes (the ownership rule); with Ray the ranks are Ray actors,
    # which end with this cluster's Ray below.
    run.report(steps.kill_stale(run.head.host, run.profile, step=step))
    for n in reversed(run.nodes):
        run.report(end_ray(n, f"{step} ray"))


def status(run: ClusterRun, step: str = "status") -> None:
    """Each node: its Ray processes (or why they died) and what the GCS says; then the server."""
    down: list[str] = []
    idle: list[str] = []
    lines: list[str] = []
    probes = [(n, probe(n, step)) for n in run.nodes]
    head_up = probes[0][1].leader_alive
    seen = (gcs_nodes(run, step) or []) if head_up else []  # no head: no GCS to ask
    by_ip = {r.ip: r for r in seen}
    for n, found in probes:
        gcs = by_ip.get(n.node.node_ip)
        view = (
            f"GCS: {'alive' if gcs.alive else 'dead'}, {gcs.gpus:g} GPU(s)"
            if gcs is not None
            else "GCS: not known"
        )
        if found.leader_alive and found.raylet_alive:
            lines.append(
                f"{n.node.name}: up, ray start PID {found.ray_pid}, "
                f"{len(found.selection.targets)} Ray processes; {view}"
            )
        elif found.ray_pid is None and not found.selection.targets:
            idle.append(n.node.name)
            lines.append(f"{n.node.name}: not running (stopped, or never deployed)")
        else:
            cause = found.cause() or ("raylet gone" if found.leader_alive else "ray start exited")
            down.append(f"{n.node.name}: Ray is down: {cause}")
            lines.append(down[-1] + f"; {view}")
    server, _state = host_state.status(run.head.host, run.profile)
    lines += [f"server: {server.message}", *(f"  {ln}" for ln in server.lines)]
    if idle and len(idle) < len(run.nodes):
        down += [f"{name}: not running while other nodes are" for name in idle]
    if down:
        run.report(
            failed(
                step,
                f"{len(down)} of {len(run.nodes)} node(s) down: " + "; ".join(down),
                lines=tuple(lines),
                hint="`fab deploy` starts the cluster again",
            )
        )
    state = "not running" if idle else f"{len(run.nodes)} nodes up"
    run.report(ok(step, f"cluster {state}; {server.message}", lines=tuple(lines)))
