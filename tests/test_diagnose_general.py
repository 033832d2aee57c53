"""kimi_ops.diagnose: the general facts added for issue 13 (rules from the corpus's dev side).

Each test states one fact of vLLM / PyTorch / the shell and checks the diagnosis follows it,
including the cases where it must NOT fire (an FP8 failure in a weight GEMM is not a KV-cache
problem; "Aborted request" is not a signal; Ray's intended exit is not a crash).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kimi_ops.diagnose import clean_line, diagnose

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
    # no FP8 KV cache asked for: not the KV cache's. A vLLM worker logged it (its prefix and
    # logger format), so vLLM died of an exception no rule knows; a bare line is unknown.
    assert diagnose(MISMATCH).label == "engine_dead_other"
    assert diagnose(MISMATCH.removeprefix(W)).label == "unknown"
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
    # nothing says whose FP8: on a GPU without native FP8, vLLM's FP8 weights take Marlin or
    # are refused up front, so a Triton FP8 type error is the KV cache's attention kernel
    assert diagnose(bare).label == "kv_cache_dtype_unsupported"
    cfg = (
        "INFO 01-01 00:00:00 [llm_engine.py:1] Initializing an LLM engine (v0.6.3) with config: "
        "model='m', kv_cache_dtype=fp8, quantization=None\n"
    )
    assert diagnose(cfg + bare).label == "kv_cache_dtype_unsupported"
    fp8_weights = cfg.replace("kv_cache_dtype=fp8, quantization=None", "quantization=fp8")
    assert diagnose(fp8_weights + bare).label == "quantization_unsupported"
    auto_kv = cfg.replace("kv_cache_dtype=fp8", "kv_cache_dtype=auto")
    assert diagnose(auto_kv + bare).label == "quantization_unsupported"
    attn = TB + frame("attention/ops/prefix_prefill.py", "context_attention_fwd")
    assert diagnose(attn + bare).label == "kv_cache_dtype_unsupported"
    quant = TB + frame("model_executor/layers/quantization/utils/fp8_utils.py", "w8a8_matmul")
    assert diagnose(cfg + quant + bare).label == "quantization_unsupported"


def test_an_exception_refusing_the_fp8_kv_cache_in_other_words() -> None:
    d = diagnose("[rank0]: ValueError: Only support per-tensor scaling factor for fp8 KV cache\n")
    assert d.label == "kv_cache_dtype_unsupported"


@pytest.mark.parametrize(
    ("message", "label"),
    [
        # vLLM 0.10.2's FlashAttention-MLA and 0.9.2's Cutlass MLA refusing an fp8 KV cache:
        # the attention named, not the KV cache
        (
            "NotImplementedError: FP8 FlashAttention MLA not yet supported",
            "kv_cache_dtype_unsupported",
        ),
        ("NotImplementedError: FP8 Cutlass MLA not yet supported", "kv_cache_dtype_unsupported"),
        # vLLM 0.12's ROCm platform: naming the option is this refusal's own words
        (
            "ValueError: ROCMAiterMLASparseBackend doesn't support fp8 kv_cache_dtype.",
            "kv_cache_dtype_unsupported",
        ),
        # vLLM 0.7.3's MLA refusing the WEIGHTS' fp8 strategy: the checkpoint's quantization
        (
            "NotImplementedError: QuantizationStrategy.GROUP is not supported for fp8 MLA, please "
            "run with VLLM_MLA_DISABLE=1",
            "quantization_unsupported",
        ),
    ],
)
def test_an_attention_backend_refusing_fp8_is_the_kv_cache_s_dtype(
    message: str, label: str
) -> None:
    log = TB + frame("v1/attention/backends/mla/flashattn_mla.py", "forward") + f"{W}{message}\n"
    assert diagnose(log).label == label


@pytest.mark.parametrize(
    "message",
    [
        # vLLM 0.11 re-raising torch's OOM in its own words; its TPU runner's HBM
        "RuntimeError: Failed to create unquantized linear weights. This may be caused by "
        "insufficient memory to allocate the weight.",
        "RuntimeError: Failed to initialize q/k/v range constants. This may be caused by "
        "insufficient memory to allocate kv cache.",
        "RuntimeError: Unable to load model, a likely reason is the model is too large for the "
        "current device's HBM memory. Consider switching to a smaller model or sharding the "
        "weights on more chips.",
    ],
)
def test_vllm_s_own_words_for_an_allocation_that_failed_are_out_of_memory(message: str) -> None:
    assert diagnose(
        f"{TB}{frame('v1/worker/gpu_worker.py', 'load_model')}{W}{message}\n"
    ).label == ("cuda_oom")


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


# ------------------------------------ general facts added after split 0's held-out side was read


@pytest.mark.parametrize(
    "raw",
    [
        "ESC[1;36m(VllmWorkerProcess pid=62)ESC[0;0m ERROR 12-26 16:20:28 a.py:236] boom",
        " [36m(RayWorker pid=3) [0m ERROR 12-26 16:20:28 a.py:236] boom",  # the ESC byte lost
        "\\x1b[0;36m(APIServer pid=1)\\x1b[0m ERROR 12-26 16:20:28 [a.py:236] boom",
    ],
)
def test_colour_codes_spelled_out_in_a_paste_are_decoration(raw: str) -> None:
    assert clean_line(raw) == "boom"
    assert clean_line("timeout [5m] reached") == "timeout [5m] reached"  # not a colour code


def test_an_exception_behind_spelled_out_colour_codes_is_a_crash_not_starting() -> None:
    log = (
        "ESC[1;36m(VllmWorkerProcess pid=62)ESC[0;0m INFO 12-26 16:20:20 loader.py:1] Loading "
        "model weights took 2.1 GB\n"
        "ESC[1;36m(VllmWorkerProcess pid=62)ESC[0;0m ERROR 12-26 16:20:28 a.py:236] "
        "RuntimeError: something no rule knows\n"
    )
    # vLLM's worker logged the exception (process prefix, logger format): vLLM died of it
    assert diagnose(log).label == "engine_dead_other"


def test_torch_compile_refusing_an_old_gpu_is_unsupported_gpu() -> None:
    line = (
        "RuntimeError: Found Tesla P100-PCIE-16GB which is too old to be supported by the triton "
        "GPU compiler, which is used as the backend. Triton only supports devices of CUDA "
        "Capability >= 7.0, but your device is of CUDA capability 6.0\n"
    )
    assert diagnose(line).label == "unsupported_gpu"


def test_a_backend_reasons_line_naming_the_capability_among_others_is_unsupported_gpu() -> None:
    log = (
        "ValueError: No valid attention backend found for cuda with\n"
        "AttentionSelectorConfig(head_size=512, dtype=torch.bfloat16, kv_cache_dtype=auto).\n"
        "Reasons: {\n"
        "  FLASHMLA: [sparse not supported, compute capability not supported],\n"
        "}\n"
    )
    assert diagnose(log).label == "unsupported_gpu"
    # a backend that refuses only the KV dtype asked for makes it the KV dtype's problem
    kv = log.replace("kv_cache_dtype=auto", "kv_cache_dtype=fp8").replace(
        "}\n", "  TRITON_MLA: ['kv_cache_dtype not supported']\n}\n"
    )
    assert diagnose(kv).label == "kv_cache_dtype_unsupported"


def test_a_quantized_moe_backend_refusing_the_device_is_quantization_unsupported() -> None:
    line = (
        "ValueError: NvFp4 MoE backend 'FLASHINFER_CUTLASS' does not support the deployment "
        "configuration since kernel does not support current device.\n"
    )
    d = diagnose(line)
    assert d.label == "quantization_unsupported" and d.facts["quantization"] == "NvFp4"


UVICORN_STOP = (
    "(APIServer pid=1) INFO:     Waiting for application shutdown.\n"
    "(APIServer pid=1) INFO:     Application shutdown complete.\n"
    "(APIServer pid=1) INFO:     Finished server process [1]\n"
)


def test_the_http_server_ending_without_a_stop_request_is_not_healthy() -> None:
    """vLLM also shuts uvicorn down when its engine dies: the shutdown alone shows no stop."""
    d = diagnose(UVICORN_STOP)
    assert d.label == "unknown" and d.lifecycle == "failed", d.summary


def test_the_http_server_ending_after_a_stop_request_is_healthy_then_stopped() -> None:
    sup = "DEBUG 2024-08-18 03:43:40,351 backends:317: Sending SIGINT to vLLM server PID 15\n"
    term = "(APIServer pid=1) INFO 01-01 00:00:00 [a.py:1] Received SIGTERM\n"
    for before in (sup, "^C\n", term):
        d = diagnose(before + UVICORN_STOP)
        assert (d.label, d.lifecycle) == ("healthy", "stopped"), (before, d.summary)


@pytest.mark.parametrize(
    "line",
    [
        "16:53:24 - ❌ Crashed container in pod: vllm-standalone-llama-3-1b-845945945-dljsw",
        "vllm-0   0/1   CrashLoopBackOff   5 (2m ago)   9m",
        "Warning  BackOff  2m  kubelet  Back-off restarting failed container vllm in pod vllm-0",
        "abc123   vllm/vllm-openai:latest   Exited (1) 3 seconds ago   vllm",
    ],
)
def test_an_orchestrator_reporting_the_container_dead_is_a_failure_not_starting(line: str) -> None:
    loading = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 10% 1/10\n"
    assert diagnose(loading + line + "\n").label == "unknown"


def test_a_traceback_cut_before_its_exception_is_unknown_unless_the_engine_logged_it() -> None:
    """Without its exception line a traceback shows a failure but not its cause (unknown);
    printed by the engine's own error logger (``[core.py:N]``), which logs only the engine's
    fatal errors, it is the engine dying (engine_dead_other), cause still unknown."""
    name = "engine_dead_other__engine_traceback__exception_no_rule_knows.log"
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    cut = "".join(ln for ln in lines if "ValueError" not in ln)
    d = diagnose(cut)
    assert (d.label, d.lifecycle) == ("engine_dead_other", "failed"), d.summary
    assert d.facts["signature"] == "engine_logger_traceback"
    plain = re.sub(r"^\(EngineCore_0 pid=99\) ERROR \S+ \S+ \[core\.py:708\] ", "", cut, flags=re.M)
    assert "core.py:708]" not in plain
    d = diagnose(plain)
    assert (d.label, d.lifecycle) == ("unknown", "failed"), d.summary
    assert diagnose("".join(lines)).label == "engine_dead_other"


def test_a_worker_sigterm_after_an_exception_is_teardown_not_the_cause() -> None:
    err = (
        "(EngineCore pid=1) ERROR 07-15 21:01:01 [core.py:1240] RuntimeError: Worker failed "
        "with error 'CUDA error: an illegal memory access was encountered'\n"
    )
    died = (
        "(EngineCore pid=1) ERROR 07-15 21:01:01 [multiproc_executor.py:284] Worker proc "
        "VllmWorker-0 died unexpectedly (exit code: {code}), shutting down executor.\n"
    )
    assert diagnose(err + died.format(code=-15)).label == "engine_dead_other"
    # a SIGKILL / SIGSEGV is no teardown: it stays the named signal
    d = diagnose(err + died.format(code=-9))
    assert d.label == "engine_killed" and d.facts["signal"] == "SIGKILL"
    # without an exception before it, a -15 is an outside stop: the signal is named
    assert diagnose(died.format(code=-15)).facts.get("signal") == "SIGTERM"


@pytest.mark.parametrize(
    ("line", "label"),
    [
        (
            "[host:934 :0:934] Caught signal 11 (Segmentation fault: address not mapped)",
            "engine_killed",
        ),
        ("Signal (11) received.", "engine_killed"),
        (
            "ValueError: fp8_e5m2 kv-cache is not supported with fp8 checkpoints.",
            "kv_cache_dtype_unsupported",
        ),
        ("ValueError: MLA kv_data_type torch.uint8 is not supported", "kv_cache_dtype_unsupported"),
        ("RuntimeError: pe_dim must be 64 for fp8_ds_mla", "kv_cache_dtype_unsupported"),
        ("ValueError: Unknown TurboQuant cache dtype: 'auto'.", "kv_cache_dtype_unsupported"),
        (
            "AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'",
            "quantization_unsupported",
        ),
        ("AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'", "unknown"),
        ("NotImplementedError: Unsupported tpu_version=4", "unsupported_gpu"),
        ("RuntimeError: Required aspect fp64 is not supported on the device", "unsupported_gpu"),
        (
            "ValueError: With `vllm serve`, you should provide the model as a positional "
            "argument or in a config file instead of via the `--model` option.",
            "bad_argument",
        ),
        (
            "ERROR 01-10 21:49:05 engine.py:366] Error in model execution: CUDA error: "
            "device-side assert triggered",
            "engine_dead_other",
        ),
        (
            "INFO 11-21 03:40:18 [multiproc_executor.py:558] Parent process exited, "
            "terminating worker",
            "unknown",
        ),
        (
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: "
            "Attempting to allocate 1.01G. That was not possible. There are 999.27M free.",
            "cuda_oom",
        ),
        (
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU "
            "compile permanent error. Ran out of memory in memory space hbm.",
            "cuda_oom",
        ),
        (
            "ValueError: total_hbm_used_gb=731.21GiB exceeds total_hbm_limit_cap_gb=718.55GiB "
            "by 12.66GiB.",
            "kv_cache_insufficient",
        ),
        (
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (939).",
            "kv_cache_insufficient",
        ),
        (
            "ValueError: The output_size of gate's and up's weight = 192 is not divisible by "
            "weight quantization block_n = 128.",
            "bad_argument",
        ),
        (
            "ValueError: The number of required GPUs exceeds the total number of available "
            "GPUs in the placement group.",
            "bad_argument",
        ),
        (
            "TypeError:\xa0EngineArgs.__init__() got an unexpected keyword argument\xa0'x'",
            "bad_argument",
        ),
        (
            "[rank1]:[E528 08:52:46.164 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed "
            "with [gloo/transport/tcp/pair.cc:144] no error",
            "nccl_error",
        ),
        (
            "NotImplementedError: TurboQuant KV cache is not supported for hybrid",
            "kv_cache_dtype_unsupported",
        ),
        # blind set P: Ascend's collective library failing in torch_npu's words; Ray's memory
        # monitor counting the workers it killed; BentoML's model store without the model
        (
            "[rank1]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 "
            "OPS function error: HcclAllreduce, error code is 6",
            "nccl_error",
        ),
        (
            "ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low "
            "on memory.",
            "engine_killed",
        ),
        (
            "bentoml.exceptions.NotFound: no Models with name 'vllm-mistral--garrulus' found",
            "model_not_found",
        ),
        # blind set Q: a module missing from the environment; huggingface_hub's cache dir
        # absent; a device the process cannot open; a dtype the quantized kernels refuse
        (
            "ModuleNotFoundError: No module named 'compressed_tensors.compressors.pack_quantized'",
            "unknown",
        ),
        (
            "ERROR 06-24 15:31:46 engine.py:389] Cache directory not found: /data/.cache/"
            "huggingface. Please use `cache_dir` argument or set `HF_HUB_CACHE` environment "
            "variable.",
            "model_not_found",
        ),
        (
            "(RayWorkerWrapper pid=1) ERROR 02-26 09:45:37 worker_base.py:572]         The "
            "argument is invalid.Reason: Set visible device failed, invalid device=1, input "
            "visible devices:1",
            "unknown",
        ),
        ("RuntimeError: CUDA error: invalid device ordinal", "unknown"),
        (
            "ValueError: torch.bfloat16 is not supported for quantization method awq. Supported "
            "dtypes: [torch.float16]",
            "bad_argument",
        ),
    ],
)
def test_one_line_facts_from_the_blind_sets(line: str, label: str) -> None:
    start = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 10% 1/10\n"
    d = diagnose(start + line + "\n")
    assert d.label == label, d.summary


def test_an_ascend_worker_with_no_memory_left_is_a_kv_shortfall_only_when_it_dies() -> None:
    zero = (
        "(Worker_TP0 pid=5) INFO 10-28 21:14:49 [worker_v1.py:259] Available memory: 0, total "
        "memory: 65452113920\n"
    )
    assert diagnose(zero).label == "starting"  # an INFO line alone
    died = "(EngineCore_DP0 pid=4) ERROR 10-28 21:14:49 [core.py:708] EngineCore failed to start.\n"
    assert diagnose(zero + died).label == "kv_cache_insufficient"


def test_nccl_s_own_warning_names_the_failure_when_the_worker_dies() -> None:
    warn = "host:1:1 [0] init.cc:416 NCCL WARN Cuda failure 'operation not supported'\n"
    died = (
        "(VllmWorker rank=1 pid=2) ERROR 08-11 10:45:36 [multiproc_executor.py:511] WorkerProc "
        "failed to start.\n"
    )
    assert diagnose(warn).label != "nccl_error"
    assert diagnose(warn + died).label == "nccl_error"


def test_an_exception_group_traceback_is_read_through_its_pipes() -> None:
    log = (
        "model_server-1  |   + Exception Group Traceback (most recent call last):\n"
        'model_server-1  |     |   File "/usr/local/lib/python3.10/dist-packages/vllm/engine/'
        'async_llm_engine.py", line 89, in __anext__\n'
        "model_server-1  |     |     raise result\n"
        "model_server-1  |     | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "2.00 GiB\n"
    )
    assert diagnose(log).label == "cuda_oom"
    assert diagnose(log.rsplit("model_server-1", 1)[0]).label == "unknown"  # cut: no cause


# ------------------------------------------------------ general facts after blind set F


def test_a_traceback_s_source_line_is_not_a_log_message() -> None:
    """A frame's quoted ``logger.info("Starting to load model ...")`` is code, not progress."""
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/worker/model_runner.py", line 682, in load_model\n'
        '    logger.info("Starting to load model %s...", self.model_config.model)\n'
    )
    assert diagnose(tb).label == "unknown"  # cut before its exception: a failure, not starting
    ipython = (
        "File ~/venv/vllm/worker/model_runner.py:682, in GPUModelRunnerBase.load_model(self)\n"
        '    680 logger.info("Starting to load model %s...", self.model_config.model)\n'
    )
    assert diagnose(ipython).label == "unknown"


@pytest.mark.parametrize(
    "line",
    [
        "No heartbeat received from MQLLMEngine",
        "ERROR 08-15 03:15:55 async_llm_engine.py:56] Engine background task failed",
        "CRITICAL 12-19 01:10:59 launcher.py:72] AsyncLLMEngine has failed, terminating server",
        # from vLLM's own source (0.4.3 - 0.8.5): its logger.error / critical / exception calls
        "CRITICAL 08-01 10:00:00 launcher.py:98] AsyncLLMEngine is already dead, terminating "
        "server process",
        "ERROR 08-01 10:00:00 api_server.py:171] RPCServer process died before responding to "
        "readiness probe",
        "ERROR 06-01 10:00:00 async_llm_engine.py:499] Engine iteration timed out. This should "
        "never happen!",
        "ERROR 05-01 10:00:00 [multiproc_executor.py:435] WorkerProc failed.",
        # the API server's side of the engine dying (no stop request before it)
        "(APIServer pid=1) ERROR 06-23 15:08:34 [async_llm.py:704] AsyncLLM output_handler failed.",
    ],
)
def test_the_engine_s_death_lines_are_engine_dead_other(line: str) -> None:
    up = 'INFO:     127.0.0.1:4 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    assert diagnose(up + line + "\n").label == "engine_dead_other"


def test_a_running_engine_s_own_lines_show_it_serving() -> None:
    preempt = (
        "WARNING 01-01 00:00:00 scheduler.py:1 Sequence group 221 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.\n"
    )
    assert diagnose(preempt).label == "healthy"
    offline = "Processed prompts:  50%|#####     | 1/2 [00:03<00:03,  3.38s/it]\n"
    assert diagnose(offline).label == "healthy"


def test_loguru_and_minute_timestamps_do_not_hide_a_traceback() -> None:
    loguru = (
        "2026-03-10 15:19:07.104 | Traceback (most recent call last):\n"
        '2026-03-10 15:19:07.104 |   File "/x/vllm/v1/engine/async_llm.py", line 120, in '
        "__init__\n"
    )
    assert diagnose(loguru).label == "unknown"
    minute = (
        "(APIServer pid=2) ERROR 11-03 23:14 [serving_chat.py:1145]   File "
        '"/x/vllm/v1/engine/async_llm.py", line 387, in generate\n'
    )
    assert diagnose(minute).label == "unknown"


def test_a_broken_extension_build_is_an_environment_problem() -> None:
    d = diagnose(
        "ImportError: /venv/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined "
        "symbol: _ZN3c104cuda9SetDeviceEi\n"
    )
    assert d.label == "unknown" and d.facts["signature"] == "broken_install"
    assert "_ZN3c104cuda9SetDeviceEi" in d.summary


def test_a_stop_request_belongs_to_its_own_server_run() -> None:
    """The previous run's Ctrl-C does not explain the next run's HTTP shutdown."""
    first = "^C\n" + UVICORN_STOP
    assert diagnose(first).label == "healthy"
    again = "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.10.0\n"
    assert diagnose(first + again + UVICORN_STOP).label == "unknown"


# ------------------------------------------------------ general facts after blind set G


def test_a_known_cause_without_a_label_outranks_the_engine_death_it_led_to() -> None:
    log = (
        "(EngineCore_DP0 pid=7) RuntimeError: Unable to initialize backend 'tpu': UNKNOWN: TPU "
        "initialization failed: open(/dev/vfio/2): Device or resource busy\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
    )
    d = diagnose(log)
    assert d.label == "unknown" and d.facts["signature"] == "device_busy", d.summary
    assert "held by another process" in d.summary


def test_a_process_prefix_in_markdown_bold_is_decoration() -> None:
    line = "  **(VllmWorker TP0 pid=1)** ERROR 08-05 07:31:10 [multiproc_executor.py:559] boom"
    assert clean_line(line) == "boom"
    assert clean_line("  ERROR 08-05 07:31:10 [multiproc_executor.py:559] boom") == "boom"


# ------------------------------------------------------- pasted tracebacks: pytest, documents


def test_a_traceback_in_pytest_failure_output_is_read_through_its_e_prefix() -> None:
    log = (
        "E       Traceback (most recent call last):\n"
        'E         File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core_client.py", '
        "line 1091, in _ensure_stats_update_task\n"
        "E           assert self.stats_update_address is not None\n"
        "E       AssertionError\n"
    )
    assert clean_line(log.splitlines()[3]) == "AssertionError"
    d = diagnose(log)
    assert (d.label, d.facts.get("signature")) == ("engine_dead_other", "vllm_traceback")


def test_an_indented_exception_line_is_still_an_exception() -> None:
    """Pasted in a document or a chained traceback, the exception line is indented: the
    process failed; a log that holds only that line is not "starting"."""
    d = diagnose("    RuntimeError: Assertion error (csrc/layout.hpp:60): Unknown transform\n")
    assert d.label == "unknown" and d.lifecycle == "failed"


def test_abseil_signal_handler_by_pid_names_the_signal() -> None:
    """JAX / XLA (TPU) processes print abseil's handler with the sender's PID, not a time."""
    log = (
        "(EngineCore pid=41) INFO 11-02 19:41:08 [core.py:97] Initializing a V1 LLM engine\n"
        "*** SIGTERM received by PID 41 (TID 41) on cpu 3, si_code=0, from PID 77; stack "
        "trace: ***\n"
        "PC: @     0x766f55b6e8ec  (unknown)  absl::synchronization_internal::FutexWaiter::Wait()\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts.get("signal")) == ("engine_killed", "SIGTERM")


def test_a_log_record_prefix_with_a_mangled_bracket_is_stripped() -> None:
    line = (
        "(APIServer pid=1) ERROR 10-20 03:20:50 [serving_chat.py:1136[]   File "
        '"/x/vllm/v1/engine/async_llm.py", line 392, in generate'
    )
    assert clean_line(line) == '  File "/x/vllm/v1/engine/async_llm.py", line 392, in generate'


def test_a_crash_before_a_restart_stands_until_the_new_run_gets_further() -> None:
    """A restart loop: vLLM's own exception, then a new run that has only just begun."""
    log = (
        "ValueError: Invalid repository ID or local directory specified: '/models'.\n"
        "INFO 04-29 07:18:01 [__init__.py:239] Automatically detected platform cuda.\n"
        "INFO 04-29 07:18:08 [api_server.py:1043] vLLM API server version 0.8.5\n"
    )
    assert diagnose(log).label == "model_not_found"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        # a log viewer's "timestamp | " column (docker desktop, many shippers)
        ("2025-04-29 22:14:28.456 | ValueError: bad", "ValueError: bad"),
        # syslog / journald escape ESC as #033
        (
            "#033[2m#033[33m(raylet)#033[0m node_manager.cc:3007: 2 Workers",
            "(raylet) node_manager.cc:3007: 2 Workers",
        ),
        # a bold process prefix behind another prefix
        (
            "vllm-1  | **(VllmWorker TP0 pid=7)** ERROR 08-05 07:31:10 [a.py:5] KeyError: 'x'",
            "KeyError: 'x'",
        ),
        # Ray's C++ log prefix (time, level letter, pid, tid)
        (
            "[2024-06-13 16:11:51,588 E 13261 13261] core_worker.cc:228: Failed to register",
            "core_worker.cc:228: Failed to register",
        ),
        # Rust's tracing format (a launcher such as dynamo-run relaying the engine's lines),
        # indented by the page; the traceback's own indentation stays
        (
            '    2025-06-06T19:02:34.252Z DEBUG dynamo_run::subprocess:   File "/v/engine.py", '
            "line 586, in run_mp_engine",
            '  File "/v/engine.py", line 586, in run_mp_engine',
        ),
        # a carriage return pasted in caret notation (cat -v)
        (
            "ERROR 01-04 04:31:09 [async_llm.py:525] AsyncLLM output_handler failed.^M",
            "AsyncLLM output_handler failed.",
        ),
    ],
)
def test_more_decorations_are_stripped(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


def test_no_kernel_image_is_the_quantization_s_only_inside_quantization_code() -> None:
    tail = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    unquantized = (
        '  File "/venv/lib/python3.10/site-packages/vllm/model_executor/layers/linear.py", '
        "line 191, in apply\n    return F.linear(x, layer.weight, bias)\n"
    )
    assert diagnose(unquantized + tail).label == "unsupported_gpu"
    gptq = unquantized.replace("layers/linear.py", "layers/quantization/gptq.py")
    assert diagnose(gptq + tail).label == "quantization_unsupported"


def test_the_offline_example_s_quoted_text_is_never_analysed() -> None:
    log = (
        "Prompt: 'why do I get CUDA out of memory?', Generated text: ' Because the model "
        "does not fit: torch.OutOfMemoryError: CUDA out of memory.'\n"
    )
    assert diagnose(log).label == "healthy"


# --------------------------------------------------- vLLM's config checks refusing a setting

PYDANTIC = "pydantic_core._pydantic_core.ValidationError: 1 validation error for {cls}\n"


@pytest.mark.parametrize(
    ("path", "fn", "label"),
    [
        ("config/parallel.py", "__post_init__", "bad_argument"),  # V1 config package
        ("config.py", "_verify_args", "bad_argument"),  # V0 single config module
        ("engine/arg_utils.py", "create_engine_config", "bad_argument"),
        # the same exception raised from model code is an engine bug, not a refused setting
        ("model_executor/models/llama.py", "load_weights", "engine_dead_other"),
    ],
)
def test_a_valueerror_raised_in_config_code_is_a_refused_setting(
    path: str, fn: str, label: str
) -> None:
    """vLLM validates its options in its config classes and arg_utils; a ValueError whose
    deepest frame is there is a setting refused, even when the message names no option."""
    log = (
        TB
        + frame("engine/llm_engine.py", "from_engine_args")
        + frame(path, fn)
        + f"{W}ValueError: Unsupported ec_role: decoder. Supported roles are ['ec_producer']\n"
    )
    d = diagnose(log)
    assert d.label == label, d.summary
    if label == "bad_argument":
        assert d.facts["signature"] == "config_refused"
        assert "Unsupported ec_role: decoder" in d.hint


def test_a_frame_of_an_earlier_traceback_does_not_make_a_refusal() -> None:
    log = (
        TB
        + frame("config/model.py", "__post_init__")
        + f"{W}KeyError: 'rope_type'\n"
        + f"{W}ValueError: Unsupported ec_role: decoder\n"
    )
    assert diagnose(log).label != "bad_argument"


def test_pydantic_validation_of_a_config_class_is_a_refused_setting() -> None:
    """The real CPU engine's words (vLLM 0.32, --enable-sleep-mode on CPU): the message names
    no option, the pydantic error names the config class that refused it."""
    name = "bad_argument__config_refused__cpu032_sleep_mode_on_cpu.log"
    d = diagnose((FIXTURES / name).read_text())
    assert (d.label, d.facts["signature"]) == ("bad_argument", "config_refused")
    assert "Sleep mode is not supported on current platform" in d.hint


def test_an_environment_cause_found_by_a_config_check_outranks_the_refusal() -> None:
    """An unsupported architecture is raised through ModelConfig's validation too: the named
    cause (an environment problem, ``unknown``) wins over "a config check refused"."""
    log = PYDANTIC.format(cls="ModelConfig") + (
        "  Value error, Model architectures ['DeepSeekV3'] are not supported for now. "
        "Supported architectures: dict_keys(['LlamaForCausalLM']) [type=value_error]\n"
    )
    assert diagnose(log).label == "unknown"


@pytest.mark.parametrize(
    "message",
    [
        "max_num_batched_tokens (16) must be greater than or equal to max_num_seqs (64).",
        "Invalid data-parallel launch options: `--nnodes 2` requires `--data-parallel-backend "
        "mp`; got `--data-parallel-backend ray`.",
        "numa_bind_nodes and numa_bind_cpus require numa_bind=True.",
    ],
)
def test_an_exception_naming_an_engine_option_is_a_refused_setting(message: str) -> None:
    """No frames at all (a one-line paste): the option the message names says what to fix."""
    d = diagnose(f"ValueError: {message}\n")
    assert (d.label, d.facts["signature"]) == ("bad_argument", "error_names_option"), d.summary


def test_an_exception_saying_which_flag_to_pass_is_a_refused_setting() -> None:
    """vLLM's NUMA binding (numa_utils): the message ends telling which flag to pass."""
    d = diagnose(
        "RuntimeError: NUMA binding was requested, but vLLM could not detect the GPU-to-NUMA "
        "topology automatically. Pass --numa-bind-nodes explicitly or disable --numa-bind.\n"
    )
    assert (d.label, d.facts["bad_args"]) == ("bad_argument", "--numa-bind-nodes"), d.summary
    # a flag merely mentioned as the way things were set up is no advice
    d = diagnose("RuntimeError: Worker failed while --enforce-eager was set\n")
    assert d.label != "bad_argument"


def test_an_option_name_inside_a_longer_identifier_is_not_an_option() -> None:
    d = diagnose("ValueError: my_max_num_seqs_table is empty\n")
    assert d.label != "bad_argument", d.summary


# ------------------------------------------- vLLM's quantization code refusing a scheme


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: MXFP4 weight + INT8 activation is not supported.",
        "ValueError: AutoAWQMoEMethod only supports 4bit now.",
        "ValueError: GPTQ group activation ordering (desc_act=True) is no longer supported. Use "
        "a checkpoint with static activation ordering or desc_act=False.",
        "ValueError: nvfp4_per_token online quantization requires a Blackwell (SM100) GPU.",
        # vLLM 0.7.3 and 0.12.0, in other words ("supported only on", "no .. backend found")
        "ValueError: ptpc_fp8 quantization is supported only on AMD Instinct MI300 GPUs and newer.",
        "ValueError: No valid NVFP4 GEMM backend found. Please check your platform capability.",
    ],
)
def test_an_exception_refusing_a_quantization_format_is_quantization_unsupported(
    message: str,
) -> None:
    d = diagnose(f"{TB}{frame('model_executor/layers/linear.py', 'create_weights')}{W}{message}\n")
    assert (d.label, d.facts["signature"]) == ("quantization_unsupported", "quant_scheme_refused")


@pytest.mark.parametrize(
    ("message", "bits"),
    [
        # vLLM 0.4.3 / 0.9.2: the checkpoint's bit width, listed among the supported ones
        (
            "Currently, only 2/3/4/8-bit weight quantization is supported for GPTQ, but got 5 "
            "bits.",
            "8",
        ),
        (
            "Currently, only 6-bit or 8-bit weight quantization are supported for DeepSpeed FP "
            "quantizaiton, but got 4 bits.",
            "8",
        ),
    ],
)
def test_a_bit_width_outside_the_supported_ones_is_quantization_unsupported(
    message: str, bits: str
) -> None:
    d = diagnose(f"ValueError: {message}\n")
    assert (d.label, d.facts["signature"]) == ("quantization_unsupported", "quantization_no_kernel")
    assert d.facts["bits"] == bits


@pytest.mark.parametrize(
    "message",
    [
        # the KV cache's dtype, attention's, a package to install, a TP split: not the scheme's
        "ValueError: Currently supported kv cache quantization is dtype=fp8_e4m3, however "
        "received int8",
        "RuntimeError: DeepGEMM backend is not available or outdated. Please install or update "
        "the `deep_gemm` to a newer version to enable FP8 kernels.",
        "ValueError: MXFP8 requires input_size_per_partition (1408) to be divisible by 32.",
        "AssertionError: FP8 attention requires head_size 128",
    ],
)
def test_a_quantization_word_in_another_failure_is_not_a_refused_scheme(message: str) -> None:
    d = diagnose(f"{TB}{frame('model_executor/layers/linear.py', 'create_weights')}{W}{message}\n")
    assert d.facts.get("signature") != "quant_scheme_refused", d.summary


def test_the_cpu_build_s_ram_short_at_startup_reads_as_the_gpu_s_memory_in_use() -> None:
    """The real CPU engine (vLLM 0.32, --gpu-memory-utilization 0.99 with other processes on
    the machine): the same situation as a GPU held by another process, in the CPU's words."""
    name = "cuda_oom__gpu_memory_in_use__cpu032_node_ram_below_utilization.log"
    d = diagnose((FIXTURES / name).read_text())
    assert (d.label, d.facts["signature"]) == ("cuda_oom", "gpu_memory_in_use")
    assert d.summary == "crashed: CPU memory already in use at startup (13.68/15.09 GiB free)"
    assert "share of RAM" in d.hint


def test_the_cpu_build_s_kv_cache_larger_than_free_ram_is_out_of_memory() -> None:
    """The real CPU engine with --kv-cache-memory-bytes 200G: the KV cache asked for does not
    fit in the node's free RAM; the fix is the KV size, so the hint names its options."""
    name = "cuda_oom__kv_space_exceeds_memory__cpu032_kv_cache_memory_bytes_200g.log"
    d = diagnose((FIXTURES / name).read_text())
    assert (d.label, d.facts["signature"]) == ("cuda_oom", "kv_space_exceeds_memory")
    assert "200.0 GiB asked" in d.summary
    assert "--kv-cache-memory-bytes" in d.hint and "VLLM_CPU_KVCACHE_SPACE" in d.hint


def test_an_exception_under_the_serve_argument_check_is_a_refused_setting() -> None:
    """vLLM's serve command checks its arguments in validate_parsed_serve_args; what it calls
    (the chat template's path: the real CPU engine, vLLM 0.32, --chat-template tool_use) raises
    a VLLMValidationError from chat_utils: still the argument's refusal."""
    name = "bad_argument__config_refused__cpu032_chat_template_path_missing.log"
    d = diagnose((FIXTURES / name).read_text())
    assert (d.label, d.facts["signature"]) == ("bad_argument", "config_refused")
    assert "chat template string (tool_use) appears path-like" in d.hint


def test_a_typeerror_while_the_cli_imports_a_plugin_is_no_refused_setting() -> None:
    """cli_args.py also builds the parser, which imports platform plugins: a plugin's own bug
    there (a dataclass TypeError) is not an argument refused."""
    log = (
        TB
        + frame("entrypoints/openai/cli_args.py", "make_arg_parser")
        + f'{W}  File "/usr/lib/python3.11/dataclasses.py", line 545, in _init_fn\n'
        + f"{W}TypeError: non-default argument 'send_mode' follows default argument\n"
    )
    assert diagnose(log).label != "bad_argument"


def test_an_in_process_engine_s_ready_line_may_be_indented_by_a_page() -> None:
    log = (
        "    INFO 07-02 17:09:11 [llm_engine.py:447] init engine (profile, create kv cache, "
        "warmup model) took 70.01 seconds\n"
        "    Unsloth 2025.6.12 patched 40 layers with 0 QKV layers, 0 O layers and 40 MLP "
        "layers.\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts.get("in_process")) == ("healthy", "true"), d.summary


def test_an_explicit_kv_cache_size_too_small_is_named_in_the_hint() -> None:
    """The real CPU engine with --kv-cache-memory-bytes 1000: vLLM says to raise
    gpu_memory_utilization, but the size given explicitly is what to raise first."""
    name = "kv_cache_insufficient__kv_cache_no_memory__cpu032_kv_cache_memory_bytes_1000.log"
    d = diagnose((FIXTURES / name).read_text())
    assert d.label == "kv_cache_insufficient"
    assert "--kv-cache-memory-bytes 1000): raise it first" in d.hint


def test_an_explicit_kv_cache_below_one_request_names_its_size_and_the_longest_length() -> None:
    """The real CPU engine with --max-model-len 512 and --kv-cache-memory-bytes 786432 (room
    for 256 tokens): vLLM's "To serve at least one request with the model's max seq len" with
    its estimate; the hint gives that estimate and the size set explicitly."""
    name = "kv_cache_insufficient__kv_cache_too_small__cpu032_kv_bytes_below_max_model_len.log"
    d = diagnose((FIXTURES / name).read_text())
    assert (d.label, d.facts["signature"]) == ("kv_cache_insufficient", "kv_cache_too_small")
    assert "Lower --max-model-len to at most 256" in d.hint
    assert "--kv-cache-memory-bytes (now 786432" in d.hint


@pytest.mark.parametrize(
    ("line", "label"),
    [
        # vLLM 0.32's model loaders, in their own words
        ("ValueError: Load format `gguf2` is not supported", "bad_argument"),
        (
            "ValueError: Cannot find any safetensors model weights with `s3://b/m`",
            "model_not_found",
        ),
        (
            "ValueError: Could not find checkpoint files 'model-rank-*-part-*.safetensors', only "
            "pre-sharded checkpoints are currently supported!",
            "model_not_found",
        ),
        # transformers 4.x / 5.x and huggingface_hub 1.x / 2.x (their source, in the CPU venv)
        ("OSError: You are trying to access a gated repo.", "model_not_found"),
        (
            "OSError: meta-llama/Llama-3.1-8B is a gated repository. Make sure to request "
            "access at https://huggingface.co/meta-llama/Llama-3.1-8B",
            "model_not_found",
        ),
        (
            "OSError: org/m is not a local folder or a valid repository name on 'https://hf.co'.",
            "model_not_found",
        ),
        (
            "OSError: org/m is not a valid git identifier (branch name, tag name or commit id) "
            "that exists for this model name.",
            "model_not_found",
        ),
        (
            "OSError: It looks like the config file at '/models/m/config.json' is not a valid "
            "JSON file.",
            "model_not_found",
        ),
        (
            "OSError: There was a specific connection error when trying to load org/m: 503",
            "model_not_found",
        ),
        (
            "huggingface_hub.errors.IncompleteSnapshotError: The cached snapshot for 'org/m' "
            "(revision 'main', commit 0a1b) is incomplete: 2 file(s) are missing",
            "model_not_found",
        ),
    ],
)
def test_the_model_loader_s_refusals(line: str, label: str) -> None:
    assert diagnose(line + "\n").label == label


def test_the_real_engine_s_tp_that_does_not_divide_the_heads_reads_cleanly() -> None:
    """vLLM 0.32 on CPU, TP 3 for a 4-head model: pydantic's "Value error, Total number of
    attention heads (4) must be divisible by tensor parallel size (3)"; the summary quotes it
    without the "Value error, " punctuation."""
    name = "bad_argument__parallel_size_mismatch__cpu032_tp3_four_heads.log"
    d = diagnose((FIXTURES / name).read_text())
    assert d.summary == (
        "crashed: tensor_parallel_size 3 does not divide the model "
        "(Total number of attention heads 4)"
    )


def test_a_worker_s_failure_is_not_undone_by_the_driver_still_loading() -> None:
    """Ray workers fail loading their weights while the driver's own progress bar goes on:
    vLLM never recovers a failed worker, so the run is going down, not starting. A new run
    after it (a restart) is what counts as starting again."""
    worker = "(RayWorkerWrapper pid=1949) ERROR 05-28 03:53:36 [worker_base.py:620] "
    crash = (
        f"{worker}Traceback (most recent call last):\n"
        f'{worker}  File "/w/vllm/model_executor/models/deepseek_v2.py", line 788, in '
        "load_weights\n"
        f"{worker}    param = params_dict[name]\n"
        f"{worker}KeyError: 'model.layers.23.mlp.experts.w2_weight_offset'\n"
    )
    driver = "Loading safetensors checkpoint shards:   1% Completed | 2/157 [00:04<05:31]\n"
    assert diagnose(crash + driver).label == "engine_dead_other"
    restart = "INFO 05-28 03:55:00 [api_server.py:1] vLLM API server version 0.8.5\n"
    assert diagnose(crash + restart + driver).label == "starting"
    # the same exception in the driver itself, then progress: a later stage of the same run
    assert diagnose(crash.replace(worker, "") + driver).label == "starting"


@pytest.mark.parametrize(
    "line",
    [
        "I0919 01:04:27.387670 2752 model_lifecycle.cc:838] \"successfully loaded 'vllm_model'\"",
        'I0919 01:04:27.401000 2752 grpc_server.cc:2466] "Started GRPCInferenceService at '
        '0.0.0.0:8001"',
        'I0919 01:04:27.402000 2752 http_server.cc:4692] "Started HTTPService at 0.0.0.0:8000"',
    ],
)
def test_triton_serving_the_vllm_backend_s_model_is_up(line: str) -> None:
    """Triton Inference Server's vLLM backend builds the engine in the model's initialize:
    Triton loading the model, and its HTTP / gRPC services starting, show it up."""
    start = "INFO 09-19 01:04:27 model_runner.py:1300] Graph capturing finished in 23 secs.\n"
    assert diagnose(start + line + "\n").label == "healthy"


def test_the_quantized_kernels_refusing_bfloat16_on_the_cpu_build_is_no_dtype_to_change() -> None:
    """On a GPU `--dtype half` fixes it (bad_argument); the CPU build casts float16 to
    bfloat16 itself, so there the quantization has no path at all."""
    refusal = (
        "ValueError: torch.bfloat16 is not supported for quantization method gptq. Supported "
        "dtypes: [torch.float16]\n"
    )
    cpu = (
        "WARNING 05-06 21:24:10 config.py:1 float16 is not supported on CPU, casting to bfloat16.\n"
    )
    d = diagnose(cpu + refusal)
    assert (d.label, d.facts["signature"]) == ("quantization_unsupported", "quant_dtype_mismatch")
    assert "no path on this CPU build" in d.hint
    assert "--dtype half" in diagnose(refusal).hint


@pytest.mark.parametrize(
    ("log", "label"),
    [
        # A traceback pasted as an indented block and wrapped mid-path: the path's rest starts
        # with the block's indentation; joined, the frame is V0's run_mp_engine (the engine).
        pytest.param(
            "    Traceback (most recent call last):\n"
            '      File "/home/u/venvs/llm/lib/python3.10/site-packages/vllm/engine/multi\n'
            '    processing/engine.py", line 388, in run_mp_engine\n'
            "        engine = MQLLMEngine.from_engine_args(engine_args=engine_args,\n",
            "engine_dead_other",
            id="frame-path-wrapped-at-the-page-width",
        ),
        # Python's resource tracker relaunching itself at exit is no engine death
        pytest.param(
            'INFO:     127.0.0.1:35812 - "POST /v1/completions HTTP/1.1" 200 OK\n'
            "(EngineCore_DP0 pid=1) /usr/lib/python3.12/multiprocessing/resource_tracker.py:123: "
            "UserWarning: resource_tracker: process died unexpectedly, relaunching.  Some "
            "resources might leak.\n",
            "healthy",
            id="resource-tracker-relaunching",
        ),
        # RL colocation puts the in-process engine to sleep between rollouts: only a running
        # engine sleeps, so it was up even when its own ready line was cut
        pytest.param(
            "INFO 11-17 17:06:50 [worker_v1.py:171] Sleep mode freed 0.00 GiB memory, 23.66 GiB "
            "memory is still in use.\n"
            "INFO 11-17 17:06:50 [executor_base.py:189] It took 0.000855 seconds to fall asleep.\n",
            "healthy",
            id="engine-put-to-sleep",
        ),
    ],
)
def test_what_blind_set_q_taught_in_several_lines(log: str, label: str) -> None:
    assert diagnose(log).label == label


def test_an_exception_a_finalizer_raised_names_no_cause() -> None:
    # Python prints an exception raised in __del__ or a finalizer as "Exception ignored in:
    # ..." and goes on. vLLM's CPU build, its EngineCore SIGKILLed, once printed one while
    # shutting down (ShmRingBuffer.__del__ unlinking a segment the resource tracker had
    # already removed; fresh-clone CI, 2026-12-05): the kill is the cause, not that error
    killed = (  # (vLLM 0.32's CPU build, its EngineCore killed with SIGKILL while serving)
        "(APIServer pid=10) INFO 12-05 16:16:10 [api_server.py:1] vLLM API server version 0.32\n"
        "INFO:     Application startup complete.\n"
        'INFO:     127.0.0.1:41298 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        "(Worker pid=12) INFO 12-05 16:16:16 [multiproc_executor.py:843] Parent process exited, "
        "terminating worker queues\n"
        "(APIServer pid=10) INFO 12-05 16:16:16 [utils.py:628] [shutdown] Process manager: send "
        "sigterm to process EngineCore\n"
        "(APIServer pid=10) WARNING 12-05 16:16:16 [core_client.py:817] [shutdown] MPClient: "
        "engine core exited unexpectedly; starting cleanup\n"
    )
    ignored = (
        "Exception ignored in: <function ShmRingBuffer.__del__ at 0x7f3a2c1d5e40>\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/vllm/distributed/device_communicators/'
        'shm_broadcast.py", line 386, in __del__\n'
        "    self.shared_memory.unlink()\n"
        "FileNotFoundError: [Errno 2] No such file or directory: '/psm_2d1f3c0a'\n"
    )
    assert diagnose(killed).label == "engine_killed"  # guard
    d = diagnose(killed + ignored + "INFO:     Shutting down\n")
    assert d.label == "engine_killed", d.summary
    assert "FileNotFoundError" not in d.summary
    # guard: the same exception raised for real (no "Exception ignored in") is an error
    assert diagnose(killed + ignored.split("\n", 1)[1]).label != "healthy"
