"""Words from outside the corpus: the libraries under vLLM say a cause the same way in every
vLLM version, so each is read from their own text, not from a collected log.

Sources: the CUDA runtime's error strings, transformers' loading errors, torch's C++ strings
(``strings libtorch_cpu.so``: TCPStore, Gloo), torch's ``distributed_c10d.py``, ROCm's HIP
runtime, huggingface_hub's error classes, Windows' socket error 10048, the dynamic loader, the C
library's errno texts (28, 24, 30), and vLLM 0.32's raise sites. Each message is read twice: as
the exception that ends a V1 engine's traceback through vLLM's code, and as a bare line after
startup began.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_ops.diagnose import diagnose

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"

P = "(EngineCore_DP0 pid=123) ERROR 10-01 12:00:00 [core.py:708] "
HEAD = (
    "(APIServer pid=1) INFO 10-01 11:59:00 [api_server.py:1] vLLM API server version 0.11.0\n"
    "(EngineCore_DP0 pid=123) INFO 10-01 11:59:30 [default_loader.py:1] Loading weights took "
    "3.1 seconds\n"
)
FRAMES = (
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in '
    "run_engine_core\n",
    "    engine_core = EngineCoreProc(*args, **kwargs)\n",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 200, '
    "in determine_available_memory\n",
    "    self.model_runner.profile_run()\n",
)


def in_engine_traceback(message: str) -> str:
    body = [
        "EngineCore failed to start.\n",
        "Traceback (most recent call last):\n",
        *FRAMES,
        *(line + "\n" for line in message.splitlines()),
    ]
    return (
        HEAD
        + "".join(P + line for line in body)
        + "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}\n"
    )


CASES = [
    # torch.distributed: Gloo's TCP transport and the rendezvous store (libtorch's strings)
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [10.0.0.2]:29500",
        "nccl_error",
        "nccl_error",
    ),
    (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error "
        "[10.0.0.2]:4567: Connection reset by peer",
        "nccl_error",
        "nccl_error",
    ),
    (
        "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. "
        "1/2 clients joined.",
        "nccl_error",
        "nccl_error",
    ),
    (
        "torch.distributed.DistNetworkError: The client socket has timed out after 600s while "
        "trying to connect to (10.0.0.1, 29500).",
        "nccl_error",
        "nccl_error",
    ),
    (
        "RuntimeError: Timed out initializing process group in store based barrier on rank 0, "
        "for key: store_based_barrier_key:1 (world_size=2, num_workers_joined=1, "
        "timeout=0:30:00)",
        "nccl_error",
        "nccl_error",
    ),
    # the port: Windows' words for errno 98
    (
        "OSError: [WinError 10048] Only one usage of each socket address (protocol/network "
        "address/port) is normally permitted",
        "port_in_use",
        "port_in_use",
    ),
    # ROCm: no code object for this GPU's gfx target in the build
    (
        "RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all "
        "current devices!",
        "unsupported_gpu",
        "no_kernel_image",
    ),
    # huggingface_hub: a branch / tag / commit the repo does not have
    (
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. (Request ID: Root=1-a)"
        "\nRevision Not Found for url: https://huggingface.co/api/models/org/m/revision/v2.",
        "model_not_found",
        "model_not_found",
    ),
    # transformers' words for model files that are not there, and the Hub's rate limit
    (
        "OSError: Can't load tokenizer for 'org/m'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the "
        "same name.",
        "model_not_found",
        "model_not_found",
    ),
    (
        "OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, "
        "model.ckpt.index or flax_model.msgpack found in directory /models/x.",
        "model_not_found",
        "model_not_found",
    ),
    (
        "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
        "https://huggingface.co/api/models/org/m",
        "model_not_found",
        "model_not_found",
    ),
    (
        "RuntimeError: Failed to import transformers.models.qwen2.modeling_qwen2 because of the "
        "following error (look up to see its traceback):\nNo module named 'flash_attn'",
        "unknown",
        "package_not_installed",
    ),
    # no usable GPU: torch's and NVML's words
    ("RuntimeError: No HIP GPUs are available", "unknown", "gpu_driver_problem"),
    (
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? "
        "Error 802: system not yet initialized",
        "unknown",
        "gpu_driver_problem",
    ),
    (
        "pynvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found",
        "unknown",
        "gpu_driver_problem",
    ),
    # the CUDA runtime's own strings (cudaGetErrorString) for a GPU that cannot be used
    (
        "RuntimeError: CUDA error: no CUDA-capable device is detected",
        "unknown",
        "gpu_driver_problem",
    ),
    (
        "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination",
        "unknown",
        "gpu_driver_problem",
    ),
    ("RuntimeError: CUDA error: system not yet initialized", "unknown", "gpu_driver_problem"),
    (
        "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
        "unknown",
        "device_busy",
    ),
    # vLLM 0.32's own refusals (read from its source in the CPU venv): the GPU generation a
    # kernel needs, and an optional package the environment lacks
    (
        "ValueError: SparseMQAIndexer requires an SM100-class GPU and DeepGEMM >= 2.8.",
        "unsupported_gpu",
        "gpu_capability",
    ),
    (
        "RuntimeError: FlashInfer KDA prefill requires CUDA SM100 or SM103, bfloat16 "
        "activations and recurrent state, head_dim=128",
        "unsupported_gpu",
        "gpu_capability",
    ),
    (
        "ImportError: tilelang is required for mhc but is not installed. Install it with `pip "
        "install tilelang`.",
        "unknown",
        "package_not_installed",
    ),
    # the host: the dynamic loader and the C library's errno texts
    (
        "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
        "unknown",
        "shared_library_missing",
    ),
    (
        "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory",
        "unknown",
        "shared_library_missing",
    ),
    (
        "OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/x'",
        "unknown",
        "disk_full",
    ),
    (
        "OSError: [Errno 30] Read-only file system: '/root/.cache/vllm'",
        "unknown",
        "read_only_filesystem",
    ),
    ("OSError: [Errno 24] Too many open files", "unknown", "open_files_limit"),
]


@pytest.mark.parametrize(("message", "label", "rule"), CASES, ids=[c[2] for c in CASES])
def test_a_library_s_own_words_name_the_cause(message: str, label: str, rule: str) -> None:
    for text in (in_engine_traceback(message), HEAD + message + "\n"):
        d = diagnose(text)
        assert (d.label, d.facts.get("signature")) == (label, rule), (d.summary, d.evidence)


@pytest.mark.parametrize(
    "line",
    [
        # the same words where they are no failure: a warning, platform detection's debug line
        "WARNING 10-01 12:00:00 [_custom_ops.py:20] Failed to import from vllm._C with "
        "ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')",
        "DEBUG 06-13 18:12:02 [__init__.py:93] CUDA platform is not available because: NVML "
        "Shared Library Not Found",
        "WARNING 10-01 12:00:00 [utils.py:1] Found ulimit of 1024 and failed to automatically "
        "increase with error current limit exceeds maximum limit. This can cause fd limit errors "
        "like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
    ],
)
def test_the_same_words_outside_an_exception_are_no_failure(line: str) -> None:
    d = diagnose(HEAD + line + "\n")
    assert d.label == "starting", (d.summary, d.evidence)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # the real CPU engine (vLLM 0.32) under `ulimit -n 90`, with its compile cache on a
        # 64 KiB tmpfs, and on a read-only bind mount: each says what to change on the host
        ("unknown__open_files_limit__cpu032_ulimit_n_90.log", ("ulimit -n",)),
        ("unknown__disk_full__cpu032_inductor_cache_on_full_tmpfs.log", ("df -h",)),
        (
            "unknown__read_only_filesystem__cpu032_inductor_cache_read_only_mount.log",
            ("/tmp/kt/ro/ind", "writable"),
        ),
    ],
)
def test_the_real_engine_s_host_failures_say_what_to_change(
    name: str, words: tuple[str, ...]
) -> None:
    d = diagnose((FIXTURES / name).read_text())
    assert d.label == "unknown" and d.failed, d.summary
    for word in words:
        assert word in d.hint, d.hint


START = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 10% 1/10\n"
UP = (
    "(APIServer pid=7) INFO:     Application startup complete.\n"
    '(APIServer pid=7) INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK\n'
)
J = "Dec 04 10:00:05 gpu-host systemd[1]: "  # journalctl's prefix of systemd's own lines
STOP_UNIT = f"{J}Stopping vllm.service - vLLM server...\n{J}Stopped vllm.service - vLLM server.\n"
BASH_TERM = "[1]+  Terminated              vllm serve org/m\n"


@pytest.mark.parametrize(
    ("text", "label", "lifecycle", "signal"),
    [
        # systemd (the journal) and bash report a stop in their own words: after startup it is
        # an operator's stop, before it a SIGTERM that ended the start
        (UP + STOP_UNIT, "healthy", "stopped", None),
        (STOP_UNIT, "engine_killed", "failed", "SIGTERM"),
        (UP + BASH_TERM, "healthy", "stopped", None),
        (BASH_TERM, "engine_killed", "failed", "SIGTERM"),
        # systemd's account of the unit's main process: a signal, the OOM killer, a failure
        (
            f"{J}vllm.service: Main process exited, code=killed, status=9/KILL\n",
            "engine_killed",
            "failed",
            "SIGKILL",
        ),
        (
            f"{J}vllm.service: A process of this unit has been killed by the OOM killer.\n"
            f"{J}vllm.service: Failed with result 'oom-kill'.\n",
            "engine_killed",
            "failed",
            "SIGKILL",
        ),
        (
            f"{J}vllm.service: Main process exited, code=exited, status=1/FAILURE\n"
            f"{J}vllm.service: Failed with result 'exit-code'.\n",
            "unknown",
            "failed",
            None,
        ),
    ],
)
def test_systemd_and_the_shell_say_how_the_server_ended(
    text: str, label: str, lifecycle: str, signal: str | None
) -> None:
    d = diagnose(START + text)
    assert (d.label, d.lifecycle, d.facts.get("signal")) == (label, lifecycle, signal), d.summary
