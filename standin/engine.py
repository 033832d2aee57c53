"""Engine-core emulation: TP worker processes, load stages, KV cache, failures, crashes."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import secrets
import signal
import sys
import time
import uuid

from standin.args import MLA_BACKENDS
from standin.frames import (
    ENGINE_INIT,
    EXECUTOR_INIT,
    INIT_MODEL,
    KIMI_INIT,
    KV_CHECK,
    KV_INIT,
    LOAD_MODEL,
    LOAD_WEIGHTS,
    MLA_INIT,
    PROFILE_RPC,
    TRITON_MLA_RAISE,
    WAIT_FOR_WORKERS,
    Frame,
    tb,
    traceback_text,
)
from standin.gpustate import pid_alive, read_state
from standin.logfmt import GIB, Role, plain, tqdm_text
from standin.procs import fork_child, reap_child, set_comm, worker_main
from standin.startup import Plan


class Engine:
    """Engine-core emulation: forks the TP workers, prints the loading stages, reports to the
    API server over a pipe ("P <pids json>", "M <MiB per GPU>", "R" = ready)."""

    def __init__(self, plan: Plan, wfd: int, shm: list[str], api_pid: int) -> None:
        self.plan = plan
        self.wfd = wfd
        self.shm = shm
        self.api_pid = api_pid
        self.role = Role(plan.engine_name(), os.getpid())
        self.workers: list[int] = []
        self.stop = False

    # -- plumbing ---------------------------------------------------------------------------
    def send(self, msg: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wfd, (msg + "\n").encode())

    def sleep(self, seconds: float) -> None:
        """Sleep, but leave promptly on SIGTERM or when the API server has gone."""
        end = time.monotonic() + seconds
        while True:
            if self.stop or os.getppid() != self.api_pid:
                self.exit(0)
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def exit(self, code: int) -> None:
        for pid in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0  # then SIGKILL: a worker that ignored SIGTERM
        for pid in self.workers:
            with contextlib.suppress(ChildProcessError):
                reap_child(pid, deadline)
        self.workers = []
        raise SystemExit(code)

    def loader(self) -> Role:
        """The rank-0 process, which prints the model-loading lines."""
        if self.plan.world > 1:
            return Role(self.plan.worker_name(0), self.workers[0])
        return self.role

    def ranks(self) -> list[Role]:
        if self.plan.world == 1:
            return [self.role]
        return [Role(self.plan.worker_name(r), pid) for r, pid in enumerate(self.workers)]

    # -- failures ---------------------------------------------------------------------------
    def fail_engine(self, frames: list[Frame], exc: str) -> None:
        """'EngineCore failed to start.' (logger) + the multiprocessing Process traceback."""
        role = self.role
        role.error(
            "core.py:946", "\n".join(["EngineCore failed to start."] + traceback_text(frames, exc))
        )
        role.raw(f"Process {self.plan.engine_name()}:")
        process = tb("""
L/multiprocessing/process.py:314 in _bootstrap
    self.run()
L/multiprocessing/process.py:108 in run
    self._target(*self._args, **self._kwargs)
V/v1/engine/core.py:950 in run_engine_core
    raise e
""")
        role.raw("\n".join(traceback_text(process + frames, exc)))
        self.exit(1)

    def fail_in_worker(self, inner: list[Frame], exc: str, during: str = "init") -> None:
        """Root cause raised in the worker(s); the engine core then fails to start.

        during="init": in WorkerProc construction (init_device / load_model);
        during="profile": in the memory-profiling RPC after the model was loaded.
        """
        plan = self.plan
        engine = tb(ENGINE_INIT)
        if plan.world == 1:  # UniProcExecutor: one traceback straight through the engine core
            if during == "init":
                frames = engine + tb(EXECUTOR_INIT) + inner
            else:
                frames = (
                    engine
                    + tb(KV_INIT + PROFILE_RPC)
                    + tb("""
V/v1/executor/uniproc_executor.py:83 in collective_rpc
    ^result = run_method(self.driver_worker, method, args, kwargs)
V/v1/serial_utils.py:479 in run_method
    ^return func(*args, **kwargs)
""")
                    + inner
                )
            self.fail_engine(frames, exc)
        if during == "init":
            head = tb("""
V/v1/executor/multiproc_executor.py:743 in worker_main
    ^worker = WorkerProc(*args, **kwargs)
""")
            for role in self.ranks():
                role.error(
                    "multiproc_executor.py:772",
                    "\n".join(["WorkerProc failed to start."] + traceback_text(head + inner, exc)),
                )
            self.fail_engine(
                engine + tb(EXECUTOR_INIT + WAIT_FOR_WORKERS),
                "Exception: WorkerProc initialization failed due to an exception in a background "
                "process. See stack trace for root cause.",
            )
        head = tb("""
V/v1/executor/multiproc_executor.py:810 in worker_busy_loop
    ^output = func(*args, **kwargs)
""")
        for role in self.ranks():
            role.error(
                "multiproc_executor.py:815",
                "\n".join(["WorkerProc hit an exception."] + traceback_text(head + inner, exc)),
            )
        frames = (
            engine
            + tb(KV_INIT + PROFILE_RPC)
            + tb(
                "V/v1/executor/multiproc_executor.py:360 in collective_rpc\n    raise RuntimeError("
            )
        )
        self.fail_engine(
            frames,
            f"RuntimeError: Worker failed with error '{exc.split(': ', 1)[-1]}', please check the "
            "stack trace above for the root cause",
        )

    def worker_entry(self, method: str, line: int) -> list[Frame]:
        if self.plan.world > 1:
            where, call = f"multiproc_executor.py:{line} in __init__", f"self.worker.{method}()"
        else:
            where, call = (
                "uniproc_executor.py:48 in _init_executor",
                f"self.driver_worker.{method}()",
            )
        return tb(f"V/v1/executor/{where}\n    {call}")

    def model_init_frames(self, weights: bool = False) -> list[Frame]:
        frames = self.worker_entry("load_model", 580) + tb(LOAD_MODEL)
        if weights:
            return frames + tb(LOAD_WEIGHTS)
        frames += tb(INIT_MODEL)
        if "Kimi" in self.plan.model.arch:
            frames += tb(KIMI_INIT)
        if self.plan.model.is_mla:
            frames += tb(MLA_INIT)
        return frames

    def crash(self, exc: str) -> None:
        frames = tb("""
V/v1/engine/core.py:857 in run_engine_core
    engine_core.run_busy_loop()
V/v1/engine/core.py:884 in run_busy_loop
    self._process_engine_step()
V/v1/engine/core.py:913 in _process_engine_step
    ^outputs, model_executed = self.step_fn()
V/v1/engine/core.py:340 in step
    ^model_output = self.model_executor.execute_model(scheduler_output)
V/v1/executor/multiproc_executor.py:360 in collective_rpc
    raise RuntimeError(
""")
        self.role.error(
            "core.py:866",
            "\n".join(["EngineCore encountered a fatal error."] + traceback_text(frames, exc)),
        )
        self.exit(1)

    # -- the emulation ----------------------------------------------------------------------
    def run(self) -> int:
        plan = self.plan
        set_comm("VLLM::EngineCore")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API server stops us with SIGTERM
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop", True))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by fork_child
        gpu_pids: dict[int, int] = {}
        gpu_names: dict[str, str] = {}
        try:
            if plan.world > 1:
                me = os.getpid()
                for rank in range(plan.world):
                    self.workers.append(
                        fork_child(functools.partial(worker_main, me, rank), (self.wfd,))
                    )
                for rank, gpu in enumerate(plan.gpus):
                    gpu_pids[gpu] = self.workers[rank]
                    gpu_names[str(gpu)] = f"VLLM::Worker_TP{rank}"
            elif plan.gpus:
                gpu_pids[plan.gpus[0]] = os.getpid()
                gpu_names[str(plan.gpus[0])] = "VLLM::EngineCore"
            info = {"engine": os.getpid(), "workers": self.workers}
            self.send("P " + json.dumps(dict(info, gpu_pids=gpu_pids, gpu_names=gpu_names)))
            self.emulate()
            return self.serve_loop()
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1

    def emulate(self) -> None:
        plan, cfg, role, args, model = (
            self.plan,
            self.plan.cfg,
            self.role,
            self.plan.args,
            self.plan.model,
        )
        role.info(
            "core.py:101",
            f"Initializing a V1 LLM engine (v{cfg['vllm_version']}) with config: "
            f"model={args.model!r}, speculative_config=None, "
            f"tokenizer={(args.tokenizer or args.model)!r}, skip_tokenizer_init=False, "
            f"tokenizer_mode={args.tokenizer_mode}, revision=None, tokenizer_revision=None, "
            f"trust_remote_code={bool(args.trust_remote_code)}, dtype=torch.bfloat16, "
            f"max_seq_len={plan.max_len}, download_dir={args.download_dir!r}, "
            f"load_format={args.load_format}, tensor_parallel_size={plan.tp}, "
            f"pipeline_parallel_size={args.pipeline_parallel_size}, "
            f"data_parallel_size={args.data_parallel_size}, "
            f"disable_custom_all_reduce={args.disable_custom_all_reduce}, "
            f"quantization={model.quantization}, enforce_eager={plan.eager}, "
            f"kv_cache_dtype={args.kv_cache_dtype}, device_config=cuda, seed={args.seed}, "
            f"served_model_name={','.join(plan.served)}, "
            f"enable_prefix_caching={args.enable_prefix_caching is not False}, "
            f"enable_chunked_prefill={args.enable_chunked_prefill is not False}",
        )
        self.sleep(0.03)
        self.check_free_memory()  # init_device(): before the distributed-environment lines
        port = random.randint(30000, 60000)
        ranks = self.ranks()
        for rank, r in enumerate(ranks):
            r.info(
                "parallel_state.py:1395",
                f"world_size={plan.world} rank={rank} local_rank={rank} "
                f"distributed_init_method=tcp://127.0.0.1:{port} backend=nccl",
            )
        if plan.world > 1:
            ranks[0].info("pynccl.py:111", "vLLM is using nccl==2.27.5")
            psm = [os.path.basename(p) for p in self.shm if "psm_" in p]
            if psm:  # real vLLM names its shm_broadcast segment in this line
                ranks[0].info(
                    "shm_broadcast.py:289",
                    "vLLM message queue communication handle: Handle(local_reader_ranks="
                    f"{list(range(1, plan.world))}, buffer_handle=({plan.world - 1}, 4194304, 6, "
                    f"'{psm[0]}'), local_subscribe_addr='ipc:///tmp/{uuid.uuid4()}', "
                    "remote_subscribe_addr=None, remote_addr_ipv6=False)",
                )
        ep = "{rank}" if args.enable_expert_parallel else "N/A"
        for rank, r in enumerate(ranks):
            r.info(
                "parallel_state.py:1717",
                f"rank {rank} in world size {plan.world} is assigned as DP rank 0, PP rank 0, "
                f"PCP rank 0, TP rank {rank}, EP rank {ep.format(rank=rank)}, EPLB rank N/A",
            )
        load = self.loader()
        t_load = time.monotonic()
        load.info("gpu_model_runner.py:4501", f"Starting to load model {args.model}...")
        backend = self.select_backend(load)
        if plan.kv_fp8 and backend == "TRITON_MLA" and plan.ver < (0, 18, 0):
            # The SM120 failure: TRITON_MLA refused a quantized KV cache up to 0.17.x.
            self.sleep(0.05)
            self.fail_in_worker(
                self.model_init_frames() + tb(TRITON_MLA_RAISE),
                "NotImplementedError: TritonMLA V1 with FP8 KV cache not yet supported",
            )
        if model.quantization == "modelopt_fp4":
            load.info(
                "nvfp4.py:209",
                "Using 'VLLM_CUTLASS' NvFp4 MoE backend out of potential backends: "
                "['FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN'].",
            )
        self.load_shards()
        load.info(
            "gpu_model_runner.py:4584" if plan.ver >= (0, 11, 0) else "gpu_model_runner.py:1892",
            f"Model loading took {plan.weights_gib:.1f} GiB "
            + ("memory " if plan.ver >= (0, 11, 0) else "")
            + f"and {time.monotonic() - t_load:.6f} seconds",
        )
        self.send(f"M {int(plan.weights_gib * 1024 + 600)}")
        t_init = time.monotonic()
        self.init_kv_cache(load)
        self.capture_graphs(load)
        took = time.monotonic() - t_init
        role.info(
            "core.py:279",
            f"init engine (profile, create kv cache, warmup model) took {took:.2f} seconds",
        )
        self.send(f"M {int(round(cfg['memory_mib'] * plan.util))}")
        self.send("R")

    def load_shards(self) -> None:
        plan, cfg = self.plan, self.plan.cfg
        total, desc = plan.model.shards, "Loading safetensors checkpoint shards"
        plain(tqdm_text(desc, 0, total, 0.0), sys.stderr)
        if cfg["hang"]:
            while True:  # silent until SIGTERM or the API server goes away
                self.sleep(3600)
        oom = plan.weights_gib + 0.5 > plan.total_gib
        steps = max(1, min(total, 16))
        t0 = time.monotonic()
        for i in range(1, steps + 1):
            self.sleep(cfg["load_seconds"] * 0.7 / steps)
            n = total if i == steps else i * total // steps
            if oom and 2 * n >= total:
                self.fail_in_worker(self.model_init_frames(weights=True), self.oom_text())
            # tqdm updates with carriage returns; in a log file some updates share a line.
            end = "\r" if i % 4 == 2 and i != steps else "\n"
            plain(tqdm_text(desc, n, total, time.monotonic() - t0), sys.stderr, end=end)
        plain(tqdm_text(desc, total, total, time.monotonic() - t0), sys.stderr)
        load = self.loader()
        plain(load.prefix.rstrip())
        load.info(
            "default_loader.py:293", f"Loading weights took {time.monotonic() - t0:.2f} seconds"
        )

    def init_kv_cache(self, load: Role) -> None:
        plan, cfg, model = self.plan, self.plan.cfg, self.plan.model
        rest = cfg["load_seconds"] * 0.3
        if not plan.eager:
            load.info(
                "backends.py:548",
                "Using cache directory: /root/.cache/vllm/torch_compile_cache/"
                f"{secrets.token_hex(5)}/rank_0_0/backbone for vLLM's torch.compile",
            )
            self.sleep(rest * 0.3)
            load.info("backends.py:559", f"Dynamo bytecode transform time: {rest * 0.3:.2f} s")
            load.info("monitor.py:34", f"torch.compile takes {rest * 0.3:.2f} s in total")
        if plan.kv_dtype == "bfloat16" and model.is_mla and plan.ver < (0, 20, 0):
            # facts.md: an explicit --kv-cache-dtype bfloat16 failed until a fix after 0.19
            # (release unconfirmed; emulated for < 0.20).
            self.fail_in_worker(
                tb("""
V/v1/worker/gpu_worker.py:318 in determine_available_memory
    self.model_runner.profile_run()
V/v1/worker/gpu_model_runner.py:4880 in profile_run
    ^hidden_states, last_hidden_states = self._dummy_run(
V/_custom_ops.py:2113 in concat_and_cache_mla
    torch.ops._C_cache_ops.concat_and_cache_mla(
S/torch/_ops.py:1243 in __call__
    ^return self._op(*args, **kwargs)
"""),
                "RuntimeError: Unsupported data type of kv cache: bfloat16",
                during="profile",
            )
        avail = plan.total_gib * plan.util - plan.weights_gib - 1.6
        load.info("gpu_worker.py:452", f"Available KV cache memory: {avail:.2f} GiB")
        engine = tb(ENGINE_INIT + KV_INIT)
        if avail <= 0:
            self.fail_engine(
                engine + tb(KV_CHECK.format(line=716)),
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine.",
            )
        per_token = self.kv_bytes_per_token()
        tokens = int(avail * GIB // per_token) // 16 * 16
        if plan.auto_len and 0 < tokens < plan.max_len:
            plan.max_len = tokens
            self.role.info(
                "kv_cache_utils.py:1290",
                f"Auto-fit max_model_len: reduced to {tokens} to fit in available memory",
            )
        if tokens < plan.max_len:
            self.fail_engine(
                engine + tb(KV_CHECK.format(line=734)),
                "ValueError: To serve at least one request with the models's max seq len "
                f"({plan.max_len}), ({plan.max_len * per_token / GIB:.2f} GiB KV cache is needed, "
                f"which is larger than the available KV cache memory ({avail:.2f} GiB). Based on "
                f"the available memory, the estimated maximum model length is {tokens}. Try "
                "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine.",
            )
        self.role.info("kv_cache_utils.py:1316", f"GPU KV cache size: {tokens:,} tokens")
        ratio = tokens / plan.max_len
        self.role.info(
            "kv_cache_utils.py:1321",
            f"Maximum concurrency for {plan.max_len:,} tokens per request: {ratio:.2f}x",
        )

    def capture_graphs(self, load: Role) -> None:
        rest = self.plan.cfg["load_seconds"] * 0.3
        if self.plan.eager:
            self.sleep(rest * 0.5)
            return
        load.info(
            "gpu_model_runner.py:5599",
            "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)",
        )
        t0 = time.monotonic()
        for desc, n in (
            ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", 51),
            ("Capturing CUDA graphs (decode, FULL)", 35),
        ):
            self.sleep(rest * 0.25)
            plain(tqdm_text(desc, n, n, max(0.01, time.monotonic() - t0), bar=True), sys.stderr)
        secs = max(1, round(time.monotonic() - t0))
        load.info(
            "gpu_model_runner.py:4677", f"Graph capturing finished in {secs} secs, took 0.84 GiB"
        )

    def serve_loop(self) -> int:
        after = self.plan.cfg["crash_after_seconds"]
        deadline = None if after is None else time.monotonic() + after
        while True:
            if self.stop or os.getppid() != self.api_pid:
                self.exit(0)
            for rank, pid in enumerate(self.workers):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.workers.remove(pid)
                    self.role.error(
                        "multiproc_executor.py:231",
                        f"Worker proc VllmWorker-{rank} died unexpectedly, shutting down executor.",
                    )
                    self.crash(
                        f"RuntimeError: Worker failed with error 'Worker proc VllmWorker-{rank} "
                        "died unexpectedly', please check the stack trace above for the root cause"
                    )
            if deadline is not None and time.monotonic() >= deadline:
                self.crash(
                    "RuntimeError: Worker failed with error 'kimi-standin: emulated engine failure "
                    f"(crash_after_seconds={after})', please check the stack trace above for the "
                    "root cause"
                )
            time.sleep(0.1)

    # -- helpers ----------------------------------------------------------------------------
    def oom_text(self) -> str:
        total = self.plan.total_gib
        free = max(0.1, total * 0.015)
        return (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
            f"total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. Including "
            f"non-PyTorch memory, this process has {total - free:.2f} GiB memory in use. Of the "
            f"allocated memory {total - free - 0.5:.2f} GiB is allocated by PyTorch, and 310.00 "
            "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
            "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def check_free_memory(self) -> None:
        """Live stand-ins holding our GPUs -> vLLM's 'Free memory on device' error."""
        plan = self.plan
        others: dict[int, int] = {}
        for entry in read_state(plan.cfg["state_file"]):
            if entry.get("pid") == self.api_pid:
                continue
            for gpu, pid in entry.get("gpu_pids", {}).items():
                if pid_alive(pid) and str(gpu).isdigit():
                    others[int(gpu)] = others.get(int(gpu), 0) + int(
                        entry.get("memory_mib_per_gpu", 0)
                    )
        want = plan.total_gib * plan.util
        for rank, gpu in enumerate(plan.gpus):
            free = max(0.0, (plan.cfg["memory_mib"] - others.get(gpu, 0)) / 1024.0)
            if free < want:
                msg = (
                    f"ValueError: Free memory on device cuda:{rank} "
                    f"({free:.2f}/{plan.total_gib:.2f} GiB) on startup is less than desired "
                    f"GPU memory utilization ({plan.util}, {want:.2f} GiB). Decrease GPU memory "
                    "utilization or reduce GPU memory used by other processes."
                )
                self.fail_in_worker(
                    self.worker_entry("init_device", 571)
                    + tb("""
V/v1/worker/worker_base.py:326 in init_device
    self.worker.init_device()
V/v1/worker/gpu_worker.py:240 in init_device
    raise ValueError(
"""),
                    msg,
                )

    def select_backend(self, load: Role) -> str:
        plan = self.plan
        major = int(plan.cfg["compute_capability"].split(".")[0])
        if plan.model.is_mla:  # facts.md section 1
            valid = {
                12: ["TRITON_MLA"],
                10: ["CUTLASS_MLA", "FLASHINFER_MLA", "FLASHMLA", "TRITON_MLA"],
                9: ["FLASHMLA", "FLASH_ATTN_MLA", "TRITON_MLA"],
            }.get(major, ["TRITON_MLA"])
        elif major >= 8:
            valid = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
        else:
            valid = ["TRITON_ATTN", "FLEX_ATTENTION"]
        chosen = plan.backend_arg
        if chosen and chosen not in valid:
            if plan.model.is_mla and chosen not in MLA_BACKENDS:
                reason = "['MLA not supported']"
            elif not plan.model.is_mla and chosen in MLA_BACKENDS:
                reason = "['non-MLA not supported']"
            else:
                reason = "['compute capability not supported']"
            self.fail_in_worker(
                self.model_init_frames()
                + tb("""
V/attention/selector.py:140 in get_attn_backend
    ^return _cached_get_attn_backend(
V/platforms/cuda.py:330 in get_attn_backend_cls
    raise ValueError(
"""),
                f"ValueError: Selected backend AttentionBackendEnum.{chosen} is not valid for this "
                f"configuration. Reason: {reason}",
            )
        backend = chosen or valid[0]
        if plan.ver >= (0, 13, 0):
            load.info(
                "cuda.py:317",
                f"Using {backend} attention backend out of potential backends: {valid!r}.",
            )
        else:
            load.info("cuda.py:244", f"Using {backend} backend.")
        return backend

    def kv_bytes_per_token(self) -> int:
        plan, model = self.plan, self.plan.model
        elem = 1 if plan.kv_fp8 else 2
        if model.is_mla:  # the latent cache is replicated on every TP rank
            return model.num_layers * (model.kv_lora_rank + model.rope_dim) * elem
        heads = max(1, math.ceil(model.num_kv_heads / plan.tp))
        return 2 * model.num_layers * heads * model.head_dim * elem
