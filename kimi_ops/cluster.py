"""One model across several hosts on a Ray cluster (pure: settings, commands, parsers).

``kimi.cluster`` names a head and workers. Each node runs ``ray start --block`` detached (its
own session, so its PID is its process group), started by kimi-ops with
``KIMI_OPS_RUN_DIR=<node run_dir>`` and ``KIMI_OPS_LAUNCH_ID`` in its environment; every Ray
process of the node (gcs_server, raylet, dashboard, agents, workers) inherits both. That is how
stop finds exactly this cluster's processes: the recorded PID, its process group and
descendants, and the processes whose environment carries the marker; never ``ray stop``, which
ends every Ray process of the user on the host, whoever started it.

vLLM then runs on the head with ``--tensor-parallel-size TP --pipeline-parallel-size NODES
--distributed-executor-backend ray``; ``RAY_ADDRESS`` and ``VLLM_HOST_IP`` tell it which
cluster and address to use (as vLLM's multi-node docs do).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ProfileError
from .procs import (
    Listing,
    Proc,
    Selection,
    ancestors,
    descendants,
    parse_pidfile_process,
    parse_ps,
    read_pidfile_command,
)
from .profile import Profile
from .rundir import absolute_run_dir, private_dir_test
from .shell import quote as q

RAY_DIR = "ray"  # the node's files live in <run_dir>/ray
RAY_PIDFILE = "ray.pid"
RAY_LOG = "ray.log"
RAY_LAUNCH_ID = "ray.launch.id"
#: The marker every Ray process of a node inherits (same name as the launch script's).
MARKER_ENV = "KIMI_OPS_RUN_DIR"
_IP = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
NODE_KEYS = (
    "host",
    "node_ip",
    "socket_ifname",
    "num_gpus",
    "model",
    "run_dir",
    "temp_dir",
    "ray_args",
)
CLUSTER_KEYS = ("head", "workers", "ray_port", "ray", "tensor_parallel_size", "ready_timeout")


@dataclass(frozen=True)
class Node:
    """One host of the cluster."""

    host: str  # the SSH target: [user@]host[:port]
    node_ip: str  # the address Ray and vLLM use on this node (VLLM_HOST_IP)
    role: str  # "head" or "worker"
    socket_ifname: str | None = None  # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    num_gpus: int | None = None  # None: what nvidia-smi (or the stand-in) reports
    model: str | None = None  # None: kimi.model (the same path on every node)
    run_dir: str | None = None  # None: kimi.run_dir
    temp_dir: str | None = None  # Ray's --temp-dir; None: <run_dir>/ray/tmp (socket paths
    # under it must stay within 107 bytes)
    ray_args: tuple[str, ...] = ()  # extra `ray start` arguments (ports, memory ...)
    key: str = "cluster.head"  # where it is in the profile, for messages

    @property
    def name(self) -> str:
        return f"{self.role} {self.host} ({self.node_ip})"


@dataclass(frozen=True)
class Cluster:
    head: Node
    workers: tuple[Node, ...]
    ray_port: int = 6379
    ray: str | None = None  # the `ray` executable; None: beside kimi.python
    tensor_parallel_size: int = 1  # per node
    ready_timeout: float = 120.0  # seconds to wait for every node to join

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.head, *self.workers)

    @property
    def pipeline_parallel_size(self) -> int:
        return len(self.nodes)

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def address(self) -> str:
        return f"{self.head.node_ip}:{self.ray_port}"

    def ray_exe(self, profile: Profile) -> str:
        return self.ray or f"{profile.python.rsplit('/', 1)[0]}/ray"


# --- the profile section ----------------------------------------------------------------------


def _int(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProfileError(key, f"must be a whole number from {low} to {high}, got {value!r}")
    return value


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or "\x00" in value or "\n" in value:
        raise ProfileError(key, f"must be a non-empty one-line string, got {value!r}")
    return value


def _ip(key: str, value: Any) -> str:
    text = _text(key, value)
    m = _IP.match(text)
    if not m or any(int(x) > 255 for x in m.groups()):
        raise ProfileError(
            key, f"must be the node's IPv4 address, got {value!r}", hint="e.g. 10.0.0.11"
        )
    return text


def _node(key: str, value: Any, role: str) -> Node:
    if not isinstance(value, Mapping):
        raise ProfileError(key, f"must be a mapping with host and node_ip, got {value!r}")
    unknown = sorted(set(value) - set(NODE_KEYS))
    if unknown:
        raise ProfileError(
            f"{key}.{unknown[0]}", "is not a known key", hint="known keys: " + ", ".join(NODE_KEYS)
        )
    for required in ("host", "node_ip"):
        if value.get(required) is None:
            raise ProfileError(f"{key}.{required}", "is required")
    ifname = value.get("socket_ifname")
    if ifname is not None and not _IFNAME.match(str(ifname)):
        raise ProfileError(f"{key}.socket_ifname", f"is not an interface name: {ifname!r}")
    gpus = value.get("num_gpus")
    args = value.get("ray_args", [])
    if isinstance(args, str) or not isinstance(args, (list, tuple)):
        raise ProfileError(f"{key}.ray_args", f"must be a list of strings, got {args!r}")
    model = value.get("model")
    run_dir = value.get("run_dir")
    temp_dir = value.get("temp_dir")
    return Node(
        host=_text(f"{key}.host", value["host"]),
        node_ip=_ip(f"{key}.node_ip", value["node_ip"]),
        role=role,
        socket_ifname=str(ifname) if ifname is not None else None,
        num_gpus=None if gpus is None else _int(f"{key}.num_gpus", gpus, 0, 1024),
        model=None if model is None else _text(f"{key}.model", model),
        run_dir=None
        if run_dir is None
        else absolute_run_dir(f"{key}.run_dir", _text(f"{key}.run_dir", run_dir)),
        temp_dir=None if temp_dir is None else _text(f"{key}.temp_dir", temp_dir),
        ray_args=tuple(_text(f"{key}.ray_args[{i}]", str(a)) for i, a in enumerate(args)),
        key=key,
    )


def load_cluster(section: Any, profile: Profile) -> Cluster | None:
    """Validate ``kimi.cluster`` (None or empty: no cluster). Raises ProfileError naming the key."""
    if section is None or section == {}:
        return None
    if not isinstance(section, Mapping):
        raise ProfileError("cluster", f"must be a mapping, got {section!r}")
    unknown = sorted(set(section) - set(CLUSTER_KEYS))
    if unknown:
        raise ProfileError(
            f"cluster.{unknown[0]}",
            "is not a known key",
            hint="known keys: " + ", ".join(CLUSTER_KEYS),
        )
    if section.get("head") is None:
        raise ProfileError("cluster.head", "is required (the host that runs the Ray head)")
    workers = section.get("workers", [])
    if not isinstance(workers, (list, tuple)) or not workers:
        raise ProfileError(
            "cluster.workers", "must be a non-empty list of nodes (one host needs no cluster)"
        )
    head = _node("cluster.head", section["head"], "head")
    nodes = [_node(f"cluster.workers[{i}]", w, "worker") for i, w in enumerate(workers)]
    seen: dict[tuple[str, str], str] = {}
    for n in (head, *nodes):
        for what in ("host", "node_ip"):
            value = getattr(n, what)
            if (what, value) in seen:
                raise ProfileError(
                    f"{n.key}.{what}", f"{value!r} is also {seen[(what, value)]}.{what}"
                )
            seen[(what, value)] = n.key
    ray = section.get("ray")
    tp = section.get("tensor_parallel_size", profile.tensor_parallel_size)
    timeout = section.get("ready_timeout", 120.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ProfileError("cluster.ready_timeout", f"must be a number > 0, got {timeout!r}")
    return Cluster(
        head=head,
        workers=tuple(nodes),
        ray_port=_int("cluster.ray_port", section.get("ray_port", 6379), 1, 65535),
        ray=None if ray is None else _text("cluster.ray", ray),
        tensor_parallel_size=_int("cluster.tensor_parallel_size", tp, 1, 1024),
        ready_timeout=float(timeout),
    )


def node_env(cluster: Cluster, node: Node) -> dict[str, str]:
    """What vLLM and NCCL/Gloo need on a node: its address and the interface to use."""
    env = {"VLLM_HOST_IP": node.node_ip, "RAY_ADDRESS": cluster.address}
    if node.socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = node.socket_ifname
        env["GLOO_SOCKET_IFNAME"] = node.socket_ifname
    return env


def server_profile(cluster: Cluster, profile: Profile) -> Profile:
    """The head's server: TP per node, PP = nodes, the Ray executor, the node's environment."""
    extra = list(profile.extra_args)
    for flag in ("--pipeline-parallel-size", "--distributed-executor-backend"):
        if flag in extra:
            raise ProfileError("extra_args", f"must not set {flag}: the cluster decides it")
    extra += [
        "--pipeline-parallel-size",
        str(cluster.pipeline_parallel_size),
        "--distributed-executor-backend",
        "ray",
    ]
    return replace(
        profile,
        tensor_parallel_size=cluster.tensor_parallel_size,
        extra_args=tuple(extra),
        env={**profile.env, **node_env(cluster, cluster.head)},
        model=cluster.head.model or profile.model,
    )


# --- commands ---------------------------------------------------------------------------------


def ray_dir(run_dir: str) -> str:
    return f"{run_dir.rstrip('/')}/{RAY_DIR}"


def ray_start_argv(
    cluster: Cluster, node: Node, ray_exe: str, num_gpus: int, rdir: str
) -> list[str]:
    argv = [ray_exe, "start", "--block", "--node-ip-address", node.node_ip]
    if node.role == "head":
        argv += ["--head", "--port", str(cluster.ray_port)]
    else:
        argv += ["--address", cluster.address]
    temp = node.temp_dir or f"{rdir}/tmp"
    argv += ["--num-gpus", str(num_gpus), "--temp-dir", temp, "--disable-usage-stats"]
    return argv + list(node.ray_args)


def ray_launch_command(
    cluster: Cluster, node: Node, ray_exe: str, num_gpus: int, rdir: str, launch_id: str
) -> str:
    """One line: start ``ray start --block`` detached in its own session with the marker in its
    environment, record its PID, print ``pid=N``."""
    env = {**node_env(cluster, node), MARKER_ENV: rdir, "KIMI_OPS_LAUNCH_ID": launch_id}
    argv = ray_start_argv(cluster, node, ray_exe, num_gpus, rdir)
    assigns = " ".join(f"{k}={q(v)}" for k, v in sorted(env.items()))
    r = q(rdir)
    temp = node.temp_dir or rdir + "/tmp"
    # Ray (as root, often) keeps its sockets and session files in temp_dir: one another user
    # can write, or under a parent they can, would let them into the cluster's processes
    return (
        f"mkdir -p -m 700 {r} {q(temp)} && {{ {private_dir_test(temp, 'temp_dir')}; }} && "
        f"cd {r} && : > {RAY_LOG} && "
        f"printf '%s\\n' {q(launch_id)} > {RAY_LAUNCH_ID} && "
        f"{{ setsid nohup env {assigns} {' '.join(q(a) for a in argv)} >> {RAY_LOG} 2>&1 "
        f'< /dev/null & echo $! > {RAY_PIDFILE}; echo "pid=$!"; }}'
    )


def reach_command(host: str, port: int, seconds: int = 5) -> str:
    """From a worker: can it open a TCP connection to the head's Ray port? (bash /dev/tcp)

    The error text is kept in a variable, not a file: a fixed name in /tmp (it was
    /tmp/.kimi-reach.PID) lets another user plant a symlink that root's write follows, or a
    directory that makes the check fail."""
    return (
        f"if kimi_e=$(timeout {int(seconds)} bash -c "
        f"{q(f'exec 3<>/dev/tcp/{host}/{int(port)}')} 2>&1 >/dev/null); then echo reach=ok; "
        'else echo "reach=fail: $(printf %s "$kimi_e" | tr -d "\\n")"; fi'
    )


def marker_command(rdir: str) -> str:
    """PIDs of processes whose environment holds ``KIMI_OPS_RUN_DIR=<rdir>`` (one per line)."""
    pattern = q(f"{MARKER_ENV}={rdir}")
    return (
        f"for f in $(grep -lzxF {pattern} /proc/[0-9]*/environ 2>/dev/null); do "
        'p=${f#/proc/}; echo "marked=${p%/environ}"; done; true'
    )


def probe_command(rdir: str, listing: str) -> str:
    """One round trip on a node: the recorded PID, the marked PIDs, the listing, the log tail."""
    r = q(rdir)
    return (
        read_pidfile_command(f"{r}/{RAY_PIDFILE}", "ray_pid") + "; "
        f'echo "launch_id=$(cat {r}/{RAY_LAUNCH_ID} 2>/dev/null)"; '
        f"{marker_command(rdir)}; echo @@ps; {listing}; echo @@log; "
        f"tail -c 16384 {r}/{RAY_LOG} 2>/dev/null; true"
    )


def gather_command(
    python: str, model: str, vllm_version: str, gpus: str, ray_exe: str, rdir: str
) -> str:
    """Versions, model checksums and GPU count on one node, ``key=value`` lines."""
    cfg, index = q(f"{model}/config.json"), q(f"{model}/model.safetensors.index.json")
    return (
        f'echo "vllm=$({vllm_version} 2>&1 | tail -n 1)"; '
        f'echo "ray=$({q(ray_exe)} --version 2>&1 | tail -n 1)"; '
        f'echo "config=$(sha256sum {cfg} 2>&1 | cut -d" " -f1)"; '
        f'echo "index=$(sha256sum {index} 2>&1 | cut -d" " -f1)"; '
        f'echo "gpus=$({gpus} 2>/dev/null | grep -c "^GPU ")"; '
        f'echo "python=$(test -x {q(python)} && echo ok)"; '
        f'echo "ray_running=$(cat {q(rdir)}/{RAY_PIDFILE} 2>/dev/null)"; true'
    )


#: Run with the head's Python (which has Ray): the nodes as the GCS knows them, as JSON.
NODES_SNIPPET = (
    "import json,sys,ray;"
    "ray.init(address=sys.argv[1],logging_level='ERROR',log_to_driver=False,"
    "configure_logging=False);"
    "print('@@nodes '+json.dumps([{k:n.get(k) for k in ('NodeID','Alive','NodeManagerAddress',"
    "'Resources','DeathReasonMessage')} for n in ray.nodes()]))"
)


def nodes_command(python: str, address: str, seconds: int = 30) -> str:
    return f"timeout {int(seconds)} {q(python)} -c {q(NODES_SNIPPET)} {q(address)} 2>&1; true"


# --- parsers ----------------------------------------------------------------------------------


def parse_kv(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@dataclass(frozen=True)
class NodeFacts:
    """What preflight learnt on one node."""

    vllm: str
    ray: str
    config_sha: str
    index_sha: str
    gpus: int
    python_ok: bool


def parse_gather(text: str) -> NodeFacts:
    kv = parse_kv(text)
    ray = kv.get("ray", "")
    m = re.search(r"version (\S+)", ray)
    gpus = kv.get("gpus", "0").strip()
    return NodeFacts(
        vllm=kv.get("vllm", "").strip(),
        ray=m.group(1) if m else "",
        config_sha=kv.get("config", "").strip(),
        index_sha=kv.get("index", "").strip(),
        gpus=int(gpus) if gpus.isdigit() else 0,
        python_ok=kv.get("python", "") == "ok",
    )


_SHA = re.compile(r"^[0-9a-f]{64}$")


def compare_nodes(cluster: Cluster, facts: Mapping[Node, NodeFacts]) -> list[str]:
    """Problems that stop a cluster deploy, each naming the node (empty: all agree)."""
    problems: list[str] = []
    head = facts[cluster.head]
    for node in cluster.nodes:
        f = facts[node]
        if not f.python_ok:
            problems.append(f"{node.name}: the profile's python is not executable there")
        if not f.ray:
            problems.append(f"{node.name}: no Ray (`ray --version` failed)")
        for what, sha in (("config.json", f.config_sha), ("safetensors index", f.index_sha)):
            if not _SHA.match(sha):
                problems.append(f"{node.name}: cannot read the model's {what}: {sha}")
        gpus = node.num_gpus if node.num_gpus is not None else f.gpus
        if gpus < cluster.tensor_parallel_size:
            problems.append(
                f"{node.name}: {gpus} GPU(s), fewer than tensor_parallel_size "
                f"{cluster.tensor_parallel_size} per node"
            )
        if node is cluster.head:
            continue
        if f.vllm != head.vllm:
            problems.append(f"{node.name}: vLLM {f.vllm!r}, the head has {head.vllm!r}")
        if f.ray and f.ray != head.ray:
            problems.append(f"{node.name}: Ray {f.ray}, the head has Ray {head.ray}")
        for what, mine, theirs in (
            ("config.json", f.config_sha, head.config_sha),
            ("model.safetensors.index.json", f.index_sha, head.index_sha),
        ):
            if _SHA.match(mine) and _SHA.match(theirs) and mine != theirs:
                problems.append(
                    f"{node.name}: {what} differs from the head's (sha256 {mine[:12]} vs "
                    f"{theirs[:12]}): not the same checkpoint"
                )
    return problems


@dataclass(frozen=True)
class RayNode:
    """A node as the GCS sees it (``ray.nodes()``)."""

    node_id: str
    ip: str
    alive: bool
    gpus: float
    death: str = ""


def parse_nodes(text: str) -> list[RayNode] | None:
    """The ``@@nodes`` JSON line of :func:`nodes_command` (None: the GCS did not answer)."""
    for line in text.splitlines():
        if line.startswith("@@nodes "):
            try:
                rows = json.loads(line[len("@@nodes ") :])
            except ValueError:
                return None
            return [
                RayNode(
                    str(r.get("NodeID", "")),
                    str(r.get("NodeManagerAddress", "")),
                    bool(r.get("Alive")),
                    float((r.get("Resources") or {}).get("GPU", 0.0)),
                    str(r.get("DeathReasonMessage") or ""),
                )
                for r in rows
            ]
    return None


def missing_nodes(cluster: Cluster, nodes: Sequence[RayNode]) -> list[str]:
    """Nodes of the profile not alive in the GCS with at least TP GPUs (empty: all joined)."""
    alive = {n.ip: n for n in nodes if n.alive}
    out = []
    for node in cluster.nodes:
        seen = alive.get(node.node_ip)
        if seen is None:
            out.append(f"{node.name}: not in the cluster")
        elif seen.gpus < cluster.tensor_parallel_size:
            out.append(f"{node.name}: {seen.gpus:g} GPU(s) < {cluster.tensor_parallel_size}")
    return out


@dataclass(frozen=True)
class NodeProbe:
    """One node's Ray processes as seen on the node."""

    ray_pid: int | None
    launch_id: str
    marked: frozenset[int]
    listing: Listing
    log: str
    selection: Selection = field(default_factory=lambda: Selection(()))

    @property
    def leader_alive(self) -> bool:
        return any(p.pid == self.ray_pid and is_ray_start(p.args) for p in self.selection.targets)

    @property
    def raylet_alive(self) -> bool:
        return any(_base(p.args) == "raylet" for p in self.selection.targets)

    def cause(self) -> str:
        """Why the node's Ray is down, from ``ray start``'s own log (empty: nothing said)."""
        return ray_death_cause(self.log)


def _base(args: str) -> str:
    first = args.split(None, 1)[0] if args.strip() else ""
    return first.rsplit("/", 1)[-1]


def is_ray_start(args: str) -> bool:
    argv = args.split()
    return any(a.rsplit("/", 1)[-1] == "ray" for a in argv[:2]) and "start" in argv[1:3]


def select_ray_processes(
    listing: Listing, ray_pid: int | None, marked: frozenset[int]
) -> Selection:
    """This node's Ray processes: the recorded ``ray start`` (only if it still is one), its process
    group and descendants, and every process carrying the node's marker. Never the listing shell,
    its ancestors or PID 1."""
    by_pid = listing.by_pid()
    reasons: dict[int, str] = {}
    leader = by_pid.get(ray_pid) if ray_pid is not None else None
    roots: list[int] = []
    if leader is not None and is_ray_start(leader.args):
        reasons[leader.pid] = "recorded ray start"
        roots.append(leader.pid)
    for pid in marked:
        if pid in by_pid:
            reasons.setdefault(pid, f"environment {MARKER_ENV} of this node")
    for pid in descendants(roots, listing.procs):
        reasons.setdefault(pid, "child of ray start")
    for p in listing.procs:
        if p.pgid in roots:
            reasons.setdefault(p.pid, f"in ray start's process group {p.pgid}")
    protected = {0, 1}
    me = listing.self_pid
    if me is not None:
        protected |= ancestors(me, by_pid) | descendants([me], listing.procs)
    targets: tuple[Proc, ...] = tuple(
        p for p in listing.procs if p.pid in reasons and p.pid not in protected
    )
    return Selection(targets, {p.pid: reasons[p.pid] for p in targets})


def parse_probe(text: str, rdir: str = "") -> NodeProbe:
    """What :func:`probe_command` printed. The recorded ``ray start`` PID counts only while it
    is the process ray.pid was written for: one whose environment names another run dir than
    ``rdir``, or that started after ray.pid was written, is a reused PID (never ended)."""
    head, _, rest = text.partition("@@ps\n")
    ps_text, _, log = rest.partition("@@log\n")
    kv = parse_kv(head)
    pid = kv.get("ray_pid", "").strip()
    if parse_pidfile_process(kv, "ray_pid").foreign(rdir):
        pid = ""
    marked = frozenset(
        int(line.split("=", 1)[1])
        for line in head.splitlines()
        if line.startswith("marked=") and line.split("=", 1)[1].isdigit()
    )
    listing = parse_ps(ps_text)
    ray_pid = int(pid) if pid.isdigit() else None
    return NodeProbe(
        ray_pid,
        kv.get("launch_id", "").strip(),
        marked,
        listing,
        log,
        select_ray_processes(listing, ray_pid, marked),
    )


_EXIT = re.compile(r"-+ END (\S+) tail \(exit code\(s\)=([^)]*\)?)\)")
_DIED = re.compile(r"Some Ray subprocesses exited unexpectedly:?\s*(.*)")


def ray_death_cause(log: str) -> str:
    """``ray start --block`` prints which subprocess died and how; name it."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log)
    found = list(_EXIT.finditer(text))
    if found:
        m = found[-1]
        name = re.sub(r"\.(out|err)$", "", m.group(1))
        return f"{name} exited ({m.group(2)})"
    for line in reversed(text.splitlines()):
        if "Unable to connect to GCS" in line or "Failed to connect to GCS" in line:
            return "cannot reach the head's GCS: " + line.strip()[-200:]
        if "ConnectionError" in line or "Error:" in line:
            return line.strip()[-200:]
    return ""
