"""What blind set ZC's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them), with the wording of vLLM's, torch's and the
libraries' own sources. Each test failed before, but for its guards (a server that goes on,
a survived utility call, Ray's account of a dead worker, a failure Xinference reports), which
passed before and must go on passing."""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose

LOADING = (
    "(APIServer pid=1) INFO 09-22 05:14:50 [api_server.py:1839] vLLM API server version 0.11.0\n"
    "(EngineCore_DP0 pid=274) INFO 09-22 05:15:21 [default_loader.py:267] Loading weights took "
    "18.62 seconds\n"
)
UP = LOADING + "(APIServer pid=1) INFO:     Application startup complete.\n"
SERVING = (
    "(APIServer pid=1) INFO 09-22 05:21:10 [loggers.py:123] Engine 000: Avg prompt throughput: "
    "510.2 tokens/s, Avg generation throughput: 41.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs\n"
)


def label(text: str) -> str:
    return diagnose(text).label


# ----------------------------------------------------------------- the engine's own loggers


def test_a_native_backtrace_the_engine_s_error_logger_printed_is_the_engine_dying() -> None:
    # Tenstorrent's TT_THROW: glibc's backtrace_symbols() frames behind " --- "
    frames = "".join(
        f"(EngineCore_DP0 pid=280) ERROR 07-15 10:48:46 core.py:1033]  --- "
        f"VLLM::EngineCore({fn}+0x7c) [0x55fb937cf53c]\n"
        for fn in ("_PyFunction_Vectorcall", "_PyEval_EvalFrameDefault", "PyEval_EvalCode")
    )
    assert label(LOADING + frames) == "engine_dead_other"
    # a crash handler's backtrace printed by no logger of vLLM's: a crash, cause unknown
    bare = "/usr/lib/x86_64-linux-gnu/libc.so.6(+0x29d90) [0x7f3a1c429d90]\n"
    assert label(LOADING + bare * 3) == "unknown"


WORKER_TRACE = (
    "(VllmWorker rank=0 pid=71) ERROR 07-31 08:44:05 [multiproc_executor.py:594] Traceback "
    "(most recent call last):\n"
    '(VllmWorker rank=0 pid=71) ERROR 07-31 08:44:05 [multiproc_executor.py:594]   File "/usr/'
    'lib/python3/site-packages/vllm/v1/executor/multiproc_executor.py", line 589, in '
    "worker_busy_loop\n"
    '(VllmWorker rank=0 pid=71) ERROR 07-31 08:44:05 [multiproc_executor.py:594]   File "/usr/'
    'lib/python3/site-packages/vllm/v1/worker/gpu_worker.py", line 301, in {method}\n'
)


def test_a_worker_s_error_logger_traceback_cut_before_its_header_is_the_engine_dying() -> None:
    """vLLM's v1/executor/multiproc_executor.py logs a worker's traceback only for "WorkerProc
    failed to start", "WorkerProc failed", "Error getting async model runner output" and
    "WorkerProc hit an exception": the engine dies of each but a utility call's."""
    assert label(LOADING + WORKER_TRACE.format(method="determine_available_memory")) == (
        "engine_dead_other"
    )
    # a utility call (a LoRA adapter loaded at run time) fails, the engine answers and goes on
    assert label(UP + WORKER_TRACE.format(method="add_lora") + SERVING) == "healthy"


def test_a_fork_s_v0_engine_process_entry_point_is_the_engine() -> None:
    # ipex-llm's copy of run_mp_engine (V0's engine process), a traceback cut before its end
    text = (
        "INFO 03-07 18:32:40 api_server.py:912] vLLM API server version 0.6.6+ipexllm\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.11/dist-packages/ipex_llm/vllm/xpu/engine/engine.py", '
        "line 242, in run_mp_engine\n"
        "    raise e  # noqa\n"
        '  File "/usr/local/lib/python3.11/dist-packages/vllm/engine/multiprocessing/engine.py", '
        "line 114, in from_engine_args\n"
    )
    assert label(text) == "engine_dead_other"


# ------------------------------------------------------- multiprocessing's "Process X:" line

CUT = (
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
    "    self.run()\n"
    '  File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run\n'
    "    self._target(*self._args, **self._kwargs)\n"
)


def test_a_child_process_dying_after_an_app_s_http_server_started_is_a_crash() -> None:
    # TRL's vllm-serve starts uvicorn, then builds LLM(...) in a child process that dies
    text = (
        "INFO:     Started server process [544]\n"
        "INFO:     Waiting for application startup.\n"
        "Process Process-1:\n" + CUT
    )
    assert label(text) == "unknown"


def test_v1_s_engine_process_dying_of_a_traceback_is_the_engine_dying() -> None:
    text = LOADING + "(EngineCore_0 pid=381) Process EngineCore_0:\n" + CUT
    assert label(text) == "engine_dead_other"
    # ... but Ray's account of the worker that died before it says more (its causes vary)
    ray = (
        "(EngineCore pid=9) ERROR 03-29 12:59:53 [core.py:1099] The actor is dead because its "
        "worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
        "unexpectedly exits with a connection error code 2. End of file.\n"
    )
    assert label(LOADING + ray + "(EngineCore pid=9) Process EngineCore:\n") == "unknown"


# --------------------------------------------------------------- in-process engines, ready


def test_an_engine_initialised_inside_another_program_s_process_is_ready() -> None:
    init = (
        "INFO 04-09 01:52:46 [core.py:151] init engine (profile, create kv cache, warmup model) "
        "took 47.83 seconds\n"
    )
    # an RL trainer's Ray actor (OpenRLHF) holding vllm.LLM: no HTTP server to wait for
    assert label("(LLMRayActor pid=1234) " + init) == "healthy"
    # vLLM's own engine process of a server, and Ray Serve's replica (a server): starting
    assert label("(EngineCore_DP0 pid=9) " + init) == "starting"
    assert label("(ServeReplica:default:LLMServer pid=9) " + init) == "starting"
    assert label("(vLLMHttpServer pid=9) " + init) == "starting"  # an RL framework's server


def test_xinference_saying_the_model_it_drives_is_loaded_is_ready() -> None:
    engine = "INFO 08-27 11:25:52 [executor_base.py:113] # npu blocks: 49745, # CPU blocks: 13107\n"
    done = (
        "2025-08-27 11:25:59,352 xinference.core.worker 13 INFO     [request 67c2d58e] Leave "
        "wait_for_load, elapsed time: 86 s\n"
    )
    assert label(engine + done) == "healthy"
    failed = (
        "2025-08-27 11:25:59,352 xinference.core.worker 13 ERROR    [request 67c2d58e] Leave "
        "wait_for_load, error: [address=0.0.0.0:36887, pid=7589] NCCL error: unhandled system "
        "error\n"
    )
    assert label(engine + failed) == "nccl_error"


# ------------------------------------------------------------------------ named causes


def test_torch_s_allocator_warning_of_an_oom_while_starting_is_out_of_memory() -> None:
    warning = (
        "[rank0]:[W830 12:05:56.439466645 CUDACachingAllocator.cpp:3933] memory allocation failed "
        "with OOM on device 0 while trying to allocate 272629760 bytes (free: 125304832, total: "
        "85017624576).\n"
    )
    assert label(LOADING + warning) == "cuda_oom"
    # a caller caught it and went on (an autotuner trying a smaller size): no failure
    assert label(
        LOADING + warning + "(APIServer pid=1) INFO:     Application startup complete.\n"
    ) == ("healthy")
    assert label(UP + SERVING + warning + SERVING) == "healthy"
    assert label(UP + SERVING + warning) == "healthy"  # once up, only torch's exception counts


def test_hip_s_invalid_kernel_file_is_a_gpu_the_build_lacks() -> None:
    line = "torch.AcceleratorError: HIP error: invalid kernel file\n"
    assert label(LOADING + line) == "unsupported_gpu"


def test_an_empty_model_id_is_a_model_not_found() -> None:
    line = (
        "OSError: Incorrect path_or_model_id: ''. Please provide either the path to a local "
        "folder or the repo_id of a model on the Hub.\n"
    )
    assert label(line) == "model_not_found"


HUB_RETRY = (
    "(APIServer pid=1) '[Errno 104] Connection reset by peer' thrown while requesting HEAD "
    "https://huggingface.co/meta-llama/Llama-3.3-70B-Instruct/resolve/main/config.json\n"
    "(APIServer pid=1) Retrying in 1s [Retry 1/5].\n"
)


def test_the_hub_client_retrying_then_a_crash_is_the_model_s_files_out_of_reach() -> None:
    d = diagnose(HUB_RETRY + "(APIServer pid=1) " + CUT.replace("\n  ", "\n(APIServer pid=1)   "))
    assert d.label == "model_not_found" and "meta-llama/Llama-3.3-70B-Instruct" in d.summary
    # a retry that worked: the server goes on
    assert label(HUB_RETRY + UP + SERVING) == "healthy"
    assert (
        label(
            UP + HUB_RETRY + '(APIServer pid=1) INFO:     1.2.3.4:5 - "POST /v1/chat/'
            'completions HTTP/1.1" 200 OK\n'
        )
        == "healthy"
    )


@pytest.mark.parametrize(
    "line",
    [
        # gloo setting up its TCP transport on an interface that has no address
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] "
        "ifa != nullptr. Unable to find address for: eth0",
        # Ascend's HCCL watchdog, as NCCL's
        "[rank7]:[E1212 12:10:10.131512730 compiler_depend.ts:1675] [Rank 7] HCCL watchdog thread "
        "terminated with exception: [ERROR] ERR02005 DIST internal error",
        # Kunlun's XCCL: its own log line, and an exception its utilities raised
        "[XCCL][init.cpp:1227] host 10.0.0.2 addr_window check failed",
        "ValueError: [INVALID PARAMETER]: error code= 1(at .../torch_xmlir/csrc/new_xccl/"
        "XCCLUtils.hpp:53)",
    ],
)
def test_other_collective_libraries_failing_are_collective_errors(line: str) -> None:
    assert label(LOADING + line + "\n") == "nccl_error"
