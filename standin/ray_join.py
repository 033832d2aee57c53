"""--distributed-executor-backend ray: join a real Ray cluster, place placeholder ranks."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any

from standin.frames import ENGINE_STARTUP_FRAMES, engine_client_prelude, tb, traceback_text
from standin.logfmt import Role
from standin.startup import Plan, fail_api


class RankActor:
    """The placeholder of one vLLM worker rank (vLLM: RayWorkerWrapper); loads nothing."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "node_ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "vllm_host_ip": os.environ.get("VLLM_HOST_IP", ""),
        }

    def ping(self) -> int:
        return self.rank


class RayExecutor:
    """What vLLM's Ray executor does before loading: join the running cluster (``RAY_ADDRESS``
    or "auto"), check its GPUs, reserve one GPU bundle per rank in a placement group (the first
    on this node) and start one actor per rank across the nodes. Real Ray; emulated ranks."""

    def __init__(self, plan: Plan, api: Role) -> None:
        self.plan = plan
        self.api = api
        self.actors: list[Any] = []
        self.ray: Any = None
        self.stopping = False

    def fail(self, exc: str, frames: str) -> int:
        head = engine_client_prelude(self.plan.cfg["entrypoint"]) + tb(ENGINE_STARTUP_FRAMES)
        return fail_api(self.api, traceback_text(head + tb(frames), exc))

    def start(self) -> int | None:
        api, plan = self.api, self.plan
        try:
            import ray
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        except ImportError:
            return self.fail(
                "ValueError: Failed to import Ray, please install Ray with `pip install ray`.",
                "V/executor/ray_utils.py:271 in assert_ray_available\n    raise ValueError(",
            )
        self.ray = ray
        address = os.environ.get("RAY_ADDRESS") or "auto"
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # ConnectionError: no cluster at that address
            return self.fail(
                f"{type(exc).__name__}: {exc}",
                "V/executor/ray_utils.py:310 in initialize_ray_cluster\n    ray.init(",
            )
        world = plan.world
        total = ray.cluster_resources().get("GPU", 0)
        api.info("ray_utils.py:313", f"Connected to the Ray cluster at {address}: {total:g} GPU(s)")
        if world > total:
            api.warning(
                "ray_utils.py:351",
                "The number of required GPUs exceeds the total number of available GPUs in the "
                "placement group.",
            )
        ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
        specs: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(world)]
        specs[0][f"node:{ip}"] = 0.001
        pg = placement_group(specs, strategy="PACK")
        timeout = float(plan.cfg["ray_pg_timeout"])
        started = time.monotonic()
        ready = False
        while time.monotonic() - started < timeout:
            done, _ = ray.wait([pg.ready()], timeout=min(5.0, timeout))
            if done:
                ready = True
                break
            api.info(
                "ray_utils.py:296",
                f"Waiting for creating a placement group of specs for "
                f"{int(time.monotonic() - started)} seconds. specs={specs}. Check `ray status` and "
                "`ray list nodes` to see if you have enough resources, and make sure the IP "
                "addresses used by ray cluster are the same as VLLM_HOST_IP environment variable "
                "specified in each node if you are running on a multi-node.",
            )
        if not ready:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(pg)
            return self.fail(
                f"ValueError: Cannot provide a placement group of placement_group_specs={specs} "
                f"within {timeout:g} seconds. See `ray status` and `ray list nodes` to make sure "
                "the cluster has enough resources.",
                "V/executor/ray_utils.py:306 in _wait_until_pg_ready\n    raise ValueError(",
            )
        remote = ray.remote(RankActor)
        self.actors = [
            remote.options(
                num_cpus=0,
                num_gpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg,
                    placement_group_capture_child_tasks=True,
                    placement_group_bundle_index=rank,
                ),
            ).remote(rank)
            for rank in range(world)
        ]
        infos = ray.get([a.where.remote() for a in self.actors], timeout=120)
        nodes = sorted({i["node_ip"] for i in infos})
        for i in infos:
            api.info(
                "ray_executor.py:190",
                f"rank {i['rank']} (pp {i['rank'] // plan.tp}, tp {i['rank'] % plan.tp}): "
                f"actor pid {i['pid']} on node {i['node_ip']} ({i['node_id'][:12]})",
            )
        api.info(
            "ray_executor.py:205",
            f"Ray executor: {world} worker(s) on {len(nodes)} node(s): {', '.join(nodes)} "
            "(stand-in: the ranks are placeholder actors, no model is loaded)",
        )
        return None

    def watch(self, engine_pid: int | None) -> None:
        """A rank's actor died (its node went away): the engine dies, like vLLM's."""

        def loop() -> None:
            while True:
                time.sleep(2.0)
                try:
                    self.ray.get([a.ping.remote() for a in self.actors], timeout=30)
                except Exception as exc:
                    if self.stopping:
                        return
                    self.api.error(
                        "ray_executor.py:512",
                        f"A Ray worker died: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                    )
                    if engine_pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(engine_pid, signal.SIGKILL)
                    return

        threading.Thread(target=loop, daemon=True).start()

    def shutdown(self) -> None:
        self.stopping = True
        with contextlib.suppress(Exception):
            self.ray.shutdown()
