"""kimi_ops.diagnose: the general facts added for issue 13 (rules from the corpus's dev side).

Each test states one fact of vLLM / PyTorch / the shell and checks the diagnosis follows it,
including the cases where it must NOT fire (an FP8 failure in a weight GEMM is not a KV-cache
problem; "Aborted request" is not a signal; Ray's intended exit is not a crash).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_ops.diagnose import diagnose

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
W = "(Worker pid=7) ERROR 12-02 22:23:11 [multiproc_executor.py:1063] "


def frame(path: str, fn: str) -> str:
    return f'{W}  File "/venv/lib/python3.11/site-packages/vllm/{path}", line 10, in {fn}\n'


# --------------------------------------------------------------- FP8: the KV cache's or not

MISMATCH = f"{W}RuntimeError: expected scalar type BFloat16 but found Float8_e4m3fn\n"
TB = f"{W}Traceback (most recent call last):\n"


def test_cpu_mla_fp8_decode_error_is_a_kv_cache_dtype_problem() -> None:
    """The real engine tier's miss: CPU_MLA decode with --kv-cache-dtype fp8 (vLLM 0.32)."""
    name = "kv_cache_dtype_unsupported__float8_kv_dtype_mismatch__cpu032_mla_no_amx_decode.log"
    d = diagnose((FIXTURES / name).read_text(), {"vllm_version": "0.32.0"})
    assert (d.label, d.lifecycle) == ("kv_cache_dtype_unsupported", "failed"), d.summary
    assert d.facts["signature"] == "float8_kv_dtype_mismatch"
    assert d.facts["backend"] == "CPU_MLA" and d.facts["kv_cache_dtype"] == "fp8"
    assert "drop --kv-cache-dtype fp8" in d.hint
    assert d.evidence[0] == "RuntimeError: expected scalar type BFloat16 but found Float8_e4m3fn"


def test_float8_mismatch_inside_attention_code_is_kv_even_without_the_flag() -> None:
    log = TB + frame("v1/attention/backends/mla/cpu_mla.py", "forward_mqa") + MISMATCH
    assert diagnose(log).label == "kv_cache_dtype_unsupported"


def test_float8_mismatch_in_a_weight_gemm_is_not_a_kv_problem() -> None:
    gemm = TB + frame("model_executor/layers/quantization/fp8.py", "apply") + MISMATCH
    assert diagnose(gemm).label == "engine_dead_other"
    # the deepest frame decides: attention code calling a quantized GEMM is the weights' FP8
    both = (
        TB
        + frame("model_executor/layers/attention/attention.py", "forward")
        + frame("model_executor/layers/quantization/utils/fp8_utils.py", "apply_fp8_linear")
        + MISMATCH
    )
    assert diagnose(both).label == "engine_dead_other"


def test_float8_mismatch_without_frames_follows_the_kv_dtype_asked_for() -> None:
    assert diagnose(MISMATCH).label == "unknown"  # a bare exception: no vLLM frame, no flag
    args = "INFO 01-01 00:00:00 [api_server.py:1] non-default args: {'kv_cache_dtype': 'fp8'}\n"
    assert diagnose(args + MISMATCH).label == "kv_cache_dtype_unsupported"
    cli = "$ vllm serve Qwen/Qwen3-8B --kv-cache-dtype=fp8_e4m3\n"
    assert diagnose(cli + MISMATCH).label == "kv_cache_dtype_unsupported"


TRITON_FP8 = (
    "triton.compiler.errors.CompilationError: at 1:0:\n"
    "def {kernel}(\n"
    "^\n"
    'ValueError("type fp8e4nv not supported in this architecture. The supported fp8 dtypes '
    "are ('fp8e4b15', 'fp8e5')\")\n"
)


@pytest.mark.parametrize(
    ("kernel", "label"),
    [
        ("_fwd_kernel", "kv_cache_dtype_unsupported"),  # prefix_prefill attention
        ("_fwd_grouped_kernel_stage1", "kv_cache_dtype_unsupported"),  # decode attention
        ("kernel_unified_attention_2d", "kv_cache_dtype_unsupported"),
        ("reshape_and_cache_kernel_flash", "kv_cache_dtype_unsupported"),
        ("_w8a8_triton_block_scaled_mm", "quantization_unsupported"),  # FP8 weights
        ("fused_moe_kernel", "quantization_unsupported"),
    ],
)
def test_triton_fp8_type_error_names_whose_fp8_by_the_kernel(kernel: str, label: str) -> None:
    d = diagnose(TRITON_FP8.format(kernel=kernel))
    assert d.label == label and d.facts["triton_kernel"] == kernel


def test_triton_fp8_type_error_without_a_kernel_name_uses_frames_then_the_flag() -> None:
    bare = "AssertionError: fp8e4nv data type is not supported on CUDA arch < 89\n"  # Triton 2.x
    assert diagnose(bare).label == "quantization_unsupported"
    cfg = (
        "INFO 01-01 00:00:00 [llm_engine.py:1] Initializing an LLM engine (v0.6.3) with config: "
        "model='m', kv_cache_dtype=fp8, quantization=None\n"
    )
    assert diagnose(cfg + bare).label == "kv_cache_dtype_unsupported"
    attn = TB + frame("attention/ops/prefix_prefill.py", "context_attention_fwd")
    assert diagnose(attn + bare).label == "kv_cache_dtype_unsupported"
    quant = TB + frame("model_executor/layers/quantization/utils/fp8_utils.py", "w8a8_matmul")
    assert diagnose(cfg + quant + bare).label == "quantization_unsupported"


def test_an_exception_refusing_the_fp8_kv_cache_in_other_words() -> None:
    d = diagnose("[rank0]: ValueError: Only support per-tensor scaling factor for fp8 KV cache\n")
    assert d.label == "kv_cache_dtype_unsupported"


def test_flashinfer_fp8_kv_kernel_build_failure_only_counts_before_a_crash() -> None:
    name = "kv_cache_dtype_unsupported__fp8_kv_kernel_build_failed__flashinfer_jit_synthetic.log"
    text = (FIXTURES / name).read_text()
    lines = text.splitlines(keepends=True)
    assert diagnose(text).label == "kv_cache_dtype_unsupported"
    # the kernel's name alone (e.g. a build in progress) is not a failure
    only_name = [ln for ln in lines if "error:" not in ln and "EngineCore failed" not in ln]
    assert diagnose("".join(only_name)).facts.get("signature") != "fp8_kv_kernel_build_failed"
    # a specific cause after it wins: the kernel's name is context, not the cause
    oom = "".join(only_name) + "torch.OutOfMemoryError: CUDA out of memory.\n"
    assert diagnose(oom).label == "cuda_oom"


# --------------------------------------------------------------- signals, crashes, prefixes


@pytest.mark.parametrize(
    ("line", "signal"),
    [
        ("Illegal instruction\n", "SIGILL"),
        ("Segmentation fault\n", "SIGSEGV"),
        ("entrypoint.sh: line 12:    57 Illegal instruction     python3 -m vllm ...\n", "SIGILL"),
        ("bash: line 1:  4242 Bus error               vllm serve m\n", "SIGBUS"),
    ],
)
def test_the_shells_signal_words_are_a_killed_process(line: str, signal: str) -> None:
    head = "INFO 01-01 00:00:00 [loader.py:1] Loading weights took 3.1 seconds\n"
    d = diagnose(head + line)
    assert (d.label, d.facts["signal"]) == ("engine_killed", signal)


def test_aborted_requests_are_not_a_signal() -> None:
    log = (
        "INFO:     Application startup complete.\n"
        "INFO 01-01 00:00:01 [async_llm.py:1] Aborted request chatcmpl-1.\n"
        "Aborted request chatcmpl-2\n"
    )
    assert diagnose(log).label == "healthy"


def test_rocm_memory_access_fault_is_an_abort() -> None:
    log = (
        "Capturing CUDA graphs (decode, FULL):  88%|████  | 45/51\n"
        "Memory access fault by GPU node-5 (Agent handle: 0x460e3a50) on address "
        "0x7ec4dfe0e000. Reason: Write access to a read-only page.\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts["signal"]) == ("engine_killed", "SIGABRT")


def test_torch_distributed_backend_error_is_nccl() -> None:
    log = "terminate called after throwing an instance of 'c10::DistBackendError'\n"
    assert diagnose(log).label == "nccl_error"


def test_a_native_backtrace_is_a_crash_not_startup() -> None:
    log = "".join(
        f"(RayWorkerWrapper pid=3, ip=10.0.0.1) {i} 0x00000000000{i}a3e9 ???()  /usr/lib/x.so:0\n"
        for i in range(3)
    )
    d = diagnose("INFO 01-01 00:00:00 [loader.py:1] Loading weights took 3 s\n" + log)
    assert d.label == "unknown" and d.lifecycle == "failed"


def test_a_launcher_saying_the_server_terminated_unexpectedly_is_a_crash() -> None:
    d = diagnose("│ ✗ Server process terminated unexpectedly   │\n")
    assert d.label == "unknown" and d.failed


def test_ray_worker_exit_types() -> None:
    died = (
        "(raylet) The actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error "
        "code 2. End of file. There are some potential root causes. (1) The process is killed "
        "by SIGKILL by OOM killer due to high memory usage.\n"
    )
    assert diagnose(died).label == "unknown"  # Ray lists guesses: no signal is confirmed
    intended = "(raylet) Worker exit type: INTENDED_USER_EXIT Worker exit detail: ray.kill\n"
    assert diagnose(intended).label == "starting"


def test_fastchat_stderr_prefix_is_stripped() -> None:
    prefix = "svc  | 2024-02-20 21:46:23 | ERROR | stderr | "
    log = (
        f"{prefix}Traceback (most recent call last):\n"
        f'{prefix}  File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 71, '
        "in init_model\n"
        f"{prefix}    _check_if_gpu_supports_dtype(self.model_config.dtype)\n"
    )
    d = diagnose(log)
    assert d.label == "unsupported_gpu" and d.facts["signature"] == "bfloat16_unsupported"


def test_capability_check_frames_name_the_cause_when_the_message_is_cut() -> None:
    log = (
        TB
        + frame(
            "model_executor/layers/quantization/compressed_tensors/compressed_tensors.py",
            "get_scheme",
        )
        + f"{W}    self._check_scheme_supported(scheme.get_min_capability())\n"
    )
    assert diagnose(log).label == "quantization_unsupported"


def test_backend_selector_reasons_one_per_line() -> None:
    head = "ValueError: No valid attention backend found for cuda with \nReasons: {\n"
    cc = head + "  FLASHMLA: [\n    sparse not supported, \n    compute capability not supported\n"
    assert diagnose(cc).label == "unsupported_gpu"
    kv = head + "  FLASH_ATTN: [\n    kv_cache_dtype not supported, \n  ], \n"
    assert diagnose(kv).label == "kv_cache_dtype_unsupported"


def test_pytorch_too_old_gpu_warning_is_fatal() -> None:
    log = (
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:262: UserWarning: \n"
        "    Found GPU1 Tesla V100-PCIE-16GB which is of cuda capability 7.0.\n"
        "    PyTorch no longer supports this GPU because it is too old.\n"
        "    The minimum cuda capability supported by this library is 7.5.\n"
    )
    assert diagnose(log).label == "unsupported_gpu"


@pytest.mark.parametrize(
    "fact",
    [
        "INFO 05-01 10:00:00 config.py:628] Using fp8 data type to store kv cache. It reduces the "
        "GPU memory footprint and boosts the performance.\n",
        "INFO 05-01 10:00:00 api_server.py:1] args: Namespace(model='m', kv_cache_dtype='fp8')\n",
        "INFO 05-01 10:00:00 llm_engine.py:1] Initializing an LLM engine with config: model='m', "
        "kv_cache_dtype=fp8_e5m2, device_config=cuda\n",
    ],
)
def test_every_wording_of_an_fp8_kv_cache_request_is_a_fact(fact: str) -> None:
    bare = "AssertionError: fp8e4nv data type is not supported on CUDA arch < 89\n"
    d = diagnose(fact + bare)
    assert d.label == "kv_cache_dtype_unsupported" and d.facts["kv_cache_dtype"].startswith("fp8")
