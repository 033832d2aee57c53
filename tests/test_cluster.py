"""kimi_ops.cluster: the profile section, the commands and the parsers, with plain data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kimi_ops import cluster as cl
from kimi_ops.errors import ProfileError
from kimi_ops.procs import parse_ps
from kimi_ops.profile import load_profile

SECTION: dict[str, Any] = {
    "ray_port": 6379,
    "tensor_parallel_size": 8,
    "head": {"host": "root@gpu-a", "node_ip": "10.0.0.11", "socket_ifname": "eth0"},
    "workers": [{"host": "root@gpu-b", "node_ip": "10.0.0.12", "socket_ifname": "eth0"}],
}


def make(**changes: Any) -> cl.Cluster:
    section = json.loads(json.dumps(SECTION))
    section.update(changes)
    c = cl.load_cluster(section, load_profile({"cluster": section}))
    assert c is not None
    return c


def test_section_gives_tp_per_node_and_pp_equal_to_nodes() -> None:
    c = make()
    assert (c.tensor_parallel_size, c.pipeline_parallel_size, c.world_size) == (8, 2, 16)
    assert c.address == "10.0.0.11:6379"
    assert [n.role for n in c.nodes] == ["head", "worker"]
    assert cl.load_cluster({}, load_profile()) is None


def test_server_profile_runs_the_ray_executor_with_the_node_environment() -> None:
    p = load_profile({"extra_args": ["--max-model-len", "131072"]})
    sp = cl.server_profile(make(), p)
    assert sp.tensor_parallel_size == 8
    assert sp.extra_args == (
        "--max-model-len",
        "131072",
        "--pipeline-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
    )
    assert sp.env["VLLM_HOST_IP"] == "10.0.0.11" and sp.env["RAY_ADDRESS"] == "10.0.0.11:6379"
    assert sp.env["NCCL_SOCKET_IFNAME"] == sp.env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert sp.env["NCCL_PROTO"] == "LL"  # the profile's own env stays
    with pytest.raises(ProfileError) as exc:
        cl.server_profile(make(), load_profile({"extra_args": ["--pipeline-parallel-size", "4"]}))
    assert exc.value.key == "extra_args"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"head": None}, "cluster.head"),
        ({"workers": []}, "cluster.workers"),
        ({"workers": [{"host": "b"}]}, "cluster.workers[0].node_ip"),
        ({"workers": [{"host": "b", "node_ip": "10.0.0.300"}]}, "cluster.workers[0].node_ip"),
        ({"workers": [{"host": "b", "node_ip": "10.0.0.2", "gpus": 8}]}, "cluster.workers[0].gpus"),
        ({"workers": [{"host": "b", "node_ip": "10.0.0.11"}]}, "cluster.workers[0].node_ip"),
        ({"workers": [{"host": "root@gpu-a", "node_ip": "10.0.0.2"}]}, "cluster.workers[0].host"),
        (
            {"head": {"host": "a", "node_ip": "10.0.0.1", "socket_ifname": "eth0; rm"}},
            "cluster.head.socket_ifname",
        ),
        ({"ray_port": 70000}, "cluster.ray_port"),
        ({"tensor_parallel_size": 0}, "cluster.tensor_parallel_size"),
        ({"nodes": 2}, "cluster.nodes"),
        ({"ready_timeout": -1}, "cluster.ready_timeout"),
    ],
)
def test_bad_sections_name_the_key(change: dict[str, Any], key: str) -> None:
    section = {**SECTION, **change}
    with pytest.raises(ProfileError) as exc:
        cl.load_cluster(section, load_profile())
    assert exc.value.key == key


def test_the_profile_rejects_a_cluster_that_is_not_a_mapping() -> None:
    with pytest.raises(ProfileError) as exc:
        load_profile({"cluster": "gpu-a,gpu-b"})
    assert exc.value.key == "cluster"


def test_ray_start_is_detached_marked_and_recorded() -> None:
    c = make()
    head = cl.ray_launch_command(c, c.head, "/env/bin/ray", 8, "/root/kimi-ops/ray", "L1")
    assert "setsid nohup env" in head and "KIMI_OPS_RUN_DIR=/root/kimi-ops/ray" in head
    assert "KIMI_OPS_LAUNCH_ID=L1" in head and "VLLM_HOST_IP=10.0.0.11" in head
    assert "--head --port 6379" in head and "--block" in head and "--num-gpus 8" in head
    assert "echo $! > ray.pid" in head and "\n" not in head
    worker = cl.ray_launch_command(c, c.workers[0], "/env/bin/ray", 8, "/r/ray", "L1")
    assert "--address 10.0.0.11:6379" in worker and "--head" not in worker
    assert "NCCL_SOCKET_IFNAME=eth0" in worker and "--node-ip-address 10.0.0.12" in worker


def facts(**over: Any) -> cl.NodeFacts:
    base = dict(
        vllm="0.17.1",
        ray="2.58.0",
        config_sha="a" * 64,
        index_sha="b" * 64,
        gpus=8,
        python_ok=True,
    )
    base.update(over)
    return cl.NodeFacts(**base)


def test_gather_output_is_parsed() -> None:
    text = (
        "vllm=0.17.1\nray=ray, version 2.58.0\nconfig="
        + "a" * 64
        + "\nindex="
        + "b" * 64
        + "\ngpus=8\npython=ok\nray_running=\n"
    )
    assert cl.parse_gather(text) == facts()


def test_nodes_that_disagree_are_named() -> None:
    c = make()
    head, worker = c.nodes
    assert cl.compare_nodes(c, {head: facts(), worker: facts()}) == []
    problems = cl.compare_nodes(
        c, {head: facts(), worker: facts(vllm="0.18.0", ray="2.57.0", config_sha="c" * 64)}
    )
    text = "\n".join(problems)
    assert "worker root@gpu-b (10.0.0.12): vLLM '0.18.0', the head has '0.17.1'" in text
    assert "Ray 2.57.0, the head has Ray 2.58.0" in text
    assert "config.json differs from the head's" in text
    few = cl.compare_nodes(c, {head: facts(gpus=4), worker: facts()})
    assert few == [
        "head root@gpu-a (10.0.0.11): 4 GPU(s), fewer than tensor_parallel_size 8 per node"
    ]
    missing = cl.compare_nodes(c, {head: facts(), worker: facts(index_sha="sha256sum: x: No such")})
    assert "cannot read the model's safetensors index" in missing[0]


def test_gcs_nodes_and_who_is_missing() -> None:
    rows = [
        {
            "NodeID": "n1",
            "Alive": True,
            "NodeManagerAddress": "10.0.0.11",
            "Resources": {"GPU": 8.0},
            "DeathReasonMessage": "",
        },
        {
            "NodeID": "n2",
            "Alive": False,
            "NodeManagerAddress": "10.0.0.12",
            "Resources": {"GPU": 8.0},
            "DeathReasonMessage": "health check failed",
        },
    ]
    seen = cl.parse_nodes("noise\n@@nodes " + json.dumps(rows) + "\n")
    assert seen is not None and seen[1].death == "health check failed"
    assert cl.missing_nodes(make(), seen) == ["worker root@gpu-b (10.0.0.12): not in the cluster"]
    rows[1]["Alive"] = True
    rows[1]["Resources"] = {"GPU": 4.0}
    seen = cl.parse_nodes("@@nodes " + json.dumps(rows))
    assert seen is not None
    assert cl.missing_nodes(make(), seen) == ["worker root@gpu-b (10.0.0.12): 4 GPU(s) < 8"]
    assert cl.parse_nodes("ConnectionError: could not connect") is None


PS = """\
self_pid=900
  1     0     1 /sbin/init
 800     1   800 sshd: root@notty
 890   800   890 bash -c ray start stuff
 900   890   890 bash -c probe
 901   900   890 ps -eww -o pid=,ppid=,pgid=,args=
 100     1   100 /env/bin/python /env/bin/ray start --block --node-ip-address 10.0.0.12
 101   100   100 /env/lib/ray/core/src/ray/raylet/raylet --raylet_socket_name=x
 102   101   100 ray::RankActor
 103     1   103 ray::IDLE
 200     1   200 /env/bin/python /env/bin/ray start --block --node-ip-address 10.0.0.99
 201   200   200 /env/lib/ray/core/src/ray/raylet/raylet --other-cluster
"""


def test_only_this_nodes_ray_processes_are_selected() -> None:
    """The recorded ray start, its group and children, and marked processes (103, reparented
    away); never another cluster's Ray (200, 201) nor the SSH shell."""
    sel = cl.select_ray_processes(parse_ps(PS), 100, frozenset({101, 103, 900}))
    assert sorted(sel.pids) == [100, 101, 102, 103]
    assert sel.reasons[100] == "recorded ray start"
    assert "KIMI_OPS_RUN_DIR" in sel.reasons[103]


def test_a_reused_pid_is_not_ray() -> None:
    ps = "self_pid=900\n 100 1 100 /usr/bin/python3 my_app.py\n 101 100 100 worker\n"
    assert cl.select_ray_processes(parse_ps(ps), 100, frozenset()).pids == []


def test_node_probe_and_the_cause_of_death() -> None:
    """The log is the real Ray 2.58 ``ray start --block`` report after ``kill -9`` of raylet."""
    log = (
        "2026-12-02 22:30:35,568\tERR scripts.py:127 -- \x1b[31m----- END raylet.out tail "
        "(exit code(s)=-9 (signal 9)) -----\x1b[39m\n"
        "2026-12-02 22:30:35,568\tERR scripts.py:1312 -- \x1b[31mRemaining processes will be "
        "killed.\x1b[39m\n"
    )
    probe = cl.parse_probe(
        "ray_pid=100\nlaunch_id=L1\nmarked=103\n@@ps\nself_pid=900\n 103 1 103 ray::IDLE\n"
        "@@log\n" + log
    )
    assert probe.ray_pid == 100 and probe.launch_id == "L1"
    assert not probe.leader_alive and not probe.raylet_alive
    assert probe.selection.pids == [103]
    assert probe.cause() == "raylet exited (-9 (signal 9))"
    assert cl.ray_death_cause("") == ""


def test_marker_and_reach_commands_are_one_line() -> None:
    # -x: the whole variable, so /r/ray never matches another deployment's /r/ray2
    assert "grep -lzxF 'KIMI_OPS_RUN_DIR=/r x/ray'" in cl.marker_command("/r x/ray")
    reach = cl.reach_command("10.0.0.11", 6379)
    assert "/dev/tcp/10.0.0.11/6379" in reach and "\n" not in reach
    # red team round 3: a fixed /tmp name let another user plant a symlink root's write
    # followed (or a directory that failed the check): the error text stays in a variable
    assert "/tmp" not in reach and "2>/" not in reach and "< /" not in reach


def test_reach_command_says_whether_the_port_answers() -> None:
    """Run the one-line reachability check with bash against a listening and a closed port."""
    import socket
    import subprocess

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        out = subprocess.run(
            ["bash", "-c", cl.reach_command("127.0.0.1", port)], capture_output=True, text=True
        )
        assert cl.parse_kv(out.stdout)["reach"] == "ok"
    out = subprocess.run(
        ["bash", "-c", cl.reach_command("127.0.0.1", port)], capture_output=True, text=True
    )
    reach = cl.parse_kv(out.stdout)["reach"]
    assert reach.startswith("fail:") and "Connection refused" in reach, reach


def test_ray_start_refuses_a_temp_dir_another_user_can_write(tmp_path: Path) -> None:
    # red team round 3: Ray (root) keeps its sockets and session files in temp_dir, which was
    # created with mkdir -p and never checked: a world-writable one was used as it was
    import dataclasses
    import subprocess

    c = make()
    rdir = tmp_path / "run" / "ray"
    for mode, ok in ((0o777, False), (0o700, True)):
        temp = tmp_path / f"temp{mode:o}"
        temp.mkdir()
        temp.chmod(mode)
        node = dataclasses.replace(c.head, temp_dir=str(temp))
        fake_ray = tmp_path / "ray"  # the command runs it detached; a no-op stands in
        fake_ray.write_text("#!/bin/sh\nexit 0\n")
        fake_ray.chmod(0o755)
        cmd = cl.ray_launch_command(c, node, str(fake_ray), 0, str(rdir), "L1")
        done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30)
        assert (done.returncode == 0) is ok, done.stderr
        assert ("temp_dir " in done.stderr) is not ok, done.stderr
