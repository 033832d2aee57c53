"""Serve mode: the API-server process that forks the engine core, supervises it, serves."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

from standin.args import parse_serve_args
from standin.config import parse_version, visible_gpus
from standin.engine import Engine
from standin.frames import (
    ENGINE_STARTUP_FRAMES,
    MODEL_CONFIG_FRAMES,
    engine_client_prelude,
    tb,
    traceback_text,
)
from standin.gpustate import update_state
from standin.httpapi import StandinApp, StandinHTTPServer
from standin.logfmt import Role, plain
from standin.procs import fork_child, reap_child
from standin.ray_join import RayExecutor
from standin.shm import create_shm_files, remove_files
from standin.startup import (
    Plan,
    check_max_len,
    check_model,
    emit_banner,
    emit_config_lines,
    fail_api,
    prebind,
)

ROUTES = [
    ("/openapi.json", "GET, HEAD"),
    ("/docs", "GET, HEAD"),
    ("/docs/oauth2-redirect", "GET, HEAD"),
    ("/redoc", "GET, HEAD"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/load", "GET"),
    ("/version", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/ping", "POST"),
    ("/invocations", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/v1/responses", "POST"),
    ("/v1/completions", "POST"),
]


class Server:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.ver = parse_version(cfg["vllm_version"])
        self.api = Role("APIServer", os.getpid(), prefixed=self.ver >= (0, 10, 0))
        self.stop_signal: int | None = None
        self.engine_pid: int | None = None
        self.engine_status: int | None = None
        self.shm: list[str] = []
        self.state_written = False
        self.pipe_buf = b""
        self.ray: RayExecutor | None = None

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_signal = signum

    # -- state file -------------------------------------------------------------------------
    def write_state(self, plan: Plan, pids: dict[str, Any], mem_mib: int) -> None:
        entry = {
            "pid": os.getpid(),
            "engine_pid": pids.get("engine"),
            "worker_pids": pids.get("workers", []),
            "gpu_pids": {str(g): p for g, p in pids.get("gpu_pids", {}).items()},
            "gpu_process_names": pids.get("gpu_names", {}),
            "memory_mib_per_gpu": int(mem_mib),
            "host": plan.args.host,
            "port": plan.args.port,
            "model": plan.args.model,
            "served_model_name": plan.served,
            "python": sys.executable,
            "standin": os.path.abspath(__file__),
            "shm_files": self.shm,
            "vllm_version": plan.cfg["vllm_version"],
            "started": time.time(),
        }
        me = os.getpid()
        try:
            update_state(
                self.cfg["state_file"], lambda ss: [s for s in ss if s.get("pid") != me] + [entry]
            )
            self.state_written = True
        except OSError as exc:
            self.api.warning("standin.py:0", f"kimi-standin: cannot write state file: {exc}")

    def drop_state(self) -> None:
        if self.state_written:
            me = os.getpid()
            with contextlib.suppress(OSError):
                update_state(
                    self.cfg["state_file"], lambda ss: [s for s in ss if s.get("pid") != me]
                )
            self.state_written = False

    # -- engine child -----------------------------------------------------------------------
    def stop_engine(self) -> None:
        pid = self.engine_pid
        if pid is None or self.engine_status is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        self.engine_status = reap_child(pid, time.monotonic() + 3.0)

    def reap_engine(self) -> None:
        if self.engine_pid is not None and self.engine_status is None:
            self.engine_status = os.waitpid(self.engine_pid, 0)[1]

    def read_pipe(self, rfd: int, timeout: float) -> list[str] | None:
        """Complete lines from the engine; None at EOF (the engine exited)."""
        if not select.select([rfd], [], [], timeout)[0]:
            return []
        chunk = os.read(rfd, 65536)
        if not chunk:
            return None
        *lines, self.pipe_buf = (self.pipe_buf + chunk).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def clean_exit(self, serving: bool) -> int:
        """SIGTERM/SIGINT: stop the engine, remove shm + state, print shutdown lines, 0."""
        self.stop_engine()
        if self.ray is not None:
            self.ray.shutdown()
        self.drop_state()
        remove_files(self.shm)
        self.shutdown_lines(serving)
        return 0

    def shutdown_lines(self, serving: bool) -> None:
        api = self.api
        if serving:
            api.info("launcher.py:110", "Shutting down FastAPI HTTP server.")
            api.uvicorn("Shutting down")
            api.uvicorn("Waiting for application shutdown.")
            api.uvicorn("Application shutdown complete.")
            api.uvicorn(f"Finished server process [{api.pid}]")
        else:
            api.info("launcher.py:110", "Shutting down: signal received during engine startup.")

    # -- main flow --------------------------------------------------------------------------
    def run(self, argv: list[str]) -> int:
        cfg = self.cfg
        if cfg["echo_argv"]:
            plain("kimi-standin argv: " + json.dumps(argv))
        args, parser = parse_serve_args(argv, self.ver, cfg["entrypoint"])
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        emit_banner(cfg, self.api, args, parser)
        sock = prebind(args, cfg["entrypoint"], self.api)
        if isinstance(sock, int):
            return sock
        try:
            return self._after_bind(args, sock)
        finally:
            sock.close()
            if self.engine_pid is not None and self.engine_status is None:
                self.stop_engine()

    def _after_bind(self, args: Any, sock: socket.socket) -> int:
        cfg, api = self.cfg, self.api
        model = check_model(cfg, args, api)
        if isinstance(model, int):
            return model
        api.info("model.py:533", f"Resolved architecture: {model.arch}")
        failed = check_max_len(cfg, args, model, api)
        if failed is not None:
            return failed
        plan = Plan(cfg, args, model)
        emit_config_lines(plan, api)
        have = len(visible_gpus(cfg))
        if getattr(args, "distributed_executor_backend", None) == "ray":
            self.ray = RayExecutor(plan, api)
            code = self.ray.start()
            if code is not None:
                return code
            # The ranks are Ray actors spread over the nodes; the local engine emulates the
            # driver (rank 0's stages) only, so no local TP worker processes are forked.
            plan.world, plan.gpus = 1, plan.gpus[:1]
        elif plan.world > have:
            frames = engine_client_prelude(cfg["entrypoint"]) + tb(MODEL_CONFIG_FRAMES)[:2]
            frames += tb("V/config/parallel.py:612 in __post_init__\n    raise ValueError(")
            return fail_api(
                api,
                traceback_text(
                    frames,
                    f"ValueError: World size ({plan.world}) is larger than the number of available "
                    f"GPUs ({have}) in this node. please set tensor_parallel_size ({plan.tp}) to "
                    f"less than max local gpu count ({have})",
                ),
            )
        if self.stop_signal is not None:
            self.shutdown_lines(False)
            return 0
        self.shm = create_shm_files(cfg["shm_dir"], 2 if plan.world > 1 else 1, api)
        rfd, wfd = os.pipe()

        def engine_core() -> int:  # the child: never returns into the parent's code
            os.close(rfd)
            sock.close()
            try:
                return Engine(plan, wfd, self.shm, api.pid).run()
            except BaseException:
                import traceback

                traceback.print_exc()
                return 1

        self.engine_pid = fork_child(engine_core)
        os.close(wfd)
        try:
            return self._supervise(plan, rfd, sock)
        finally:
            os.close(rfd)

    def _supervise(self, plan: Plan, rfd: int, sock: socket.socket) -> int:
        pids: dict[str, Any] = {}
        while True:  # engine start-up
            if self.stop_signal is not None:
                return self.clean_exit(serving=False)
            lines = self.read_pipe(rfd, 0.1)
            if lines is None:  # engine exited before "ready"
                self.reap_engine()
                time.sleep(0.1)  # a process-group SIGTERM may reach us just after the child
                if self.stop_signal is not None:
                    return self.clean_exit(serving=False)
                self.drop_state()
                remove_files(self.shm)
                frames = engine_client_prelude(plan.cfg["entrypoint"]) + tb(ENGINE_STARTUP_FRAMES)
                return fail_api(
                    self.api,
                    traceback_text(
                        frames,
                        "RuntimeError: Engine core initialization failed. See root cause above. "
                        "Failed core proc(s): {}",
                    ),
                )
            for line in lines:
                kind, _, payload = line.partition(" ")
                if kind == "P":
                    pids = json.loads(payload)
                    self.write_state(plan, pids, 600)
                elif kind == "M":
                    self.write_state(plan, pids, int(payload))
                elif kind == "R":
                    return self._serve(plan, rfd, sock)

    def _serve(self, plan: Plan, rfd: int, sock: socket.socket) -> int:
        api, args = self.api, plan.args
        keys = list(args.api_key or [])
        if not keys and os.environ.get("VLLM_API_KEY"):
            keys = [os.environ["VLLM_API_KEY"]]
        api.info("api_server.py:569", "Supported tasks: ['generate']")
        if args.enable_auto_tool_choice:
            api.info("parser_manager.py:202", '"auto" tool choice has been enabled.')
        api.info(
            "hf.py:318",
            "Detected the chat template content format to be 'string'. You can set "
            "`--chat-template-content-format` to override this.",
        )
        host = args.host or "0.0.0.0"
        url = f"http://[{host}]:{args.port}" if ":" in host else f"http://{host}:{args.port}"
        if plan.ver >= (0, 13, 0):
            api.info("api_server.py:573", f"Starting vLLM server on {url}")
        elif plan.ver >= (0, 10, 0):
            api.info("api_server.py:1971", f"Starting vLLM API server 0 on {url}")
        else:
            api.info("api_server.py:1081", f"Starting vLLM API server on {url}")
        api.info("launcher.py:36", "Available routes are:")
        for route, methods in ROUTES:
            api.info("launcher.py:45", f"Route: {route}, Methods: {methods}")
        api.uvicorn(f"Started server process [{api.pid}]")
        api.uvicorn("Waiting for application startup.")
        app = StandinApp(plan, api, keys)
        httpd = StandinHTTPServer(sock, app)
        try:
            httpd.server_activate()  # listen(): the port answers from here on
        except OSError as exc:
            api.uvicorn("Application startup complete.")
            where = (args.host or "0.0.0.0", args.port)
            api.raw(
                f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"{where!r}: {str(exc.strerror).lower()}"
            )
            self.stop_engine()
            self.drop_state()
            remove_files(self.shm)
            return 1
        api.uvicorn("Application startup complete.")
        if plan.ver < (0, 10, 0):
            api.uvicorn(f"Uvicorn running on {url} (Press CTRL+C to quit)")
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1})
        thread.daemon = True
        thread.start()
        if self.ray is not None:
            self.ray.watch(self.engine_pid)
        while self.read_pipe(rfd, 0.1) is not None:
            if self.stop_signal is not None:
                httpd.shutdown()
                return self.clean_exit(serving=True)
        # The engine core died while we were serving.
        self.reap_engine()
        time.sleep(0.1)
        if self.stop_signal is not None:
            httpd.shutdown()
            return self.clean_exit(serving=True)
        app.engine_dead.set()
        frames = tb("""
V/v1/engine/async_llm.py:484 in output_handler
    ^outputs = await engine_core.get_output_async()
V/v1/engine/core_client.py:888 in get_output_async
    raise self._format_exception(outputs) from None
""")
        exc = (
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
            "stack trace (above) for the root cause."
        )
        api.error(
            "async_llm.py:525",
            "\n".join(["AsyncLLM output_handler failed."] + traceback_text(frames, exc)),
        )
        time.sleep(1.0)  # /health answers 503 meanwhile
        httpd.shutdown()
        self.shutdown_lines(serving=True)
        self.drop_state()  # like a real crash, the /dev/shm files are left behind
        return 1
