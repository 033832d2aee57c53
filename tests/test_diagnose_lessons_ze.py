"""What blind set ZE's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

#: An app of its own (FastAPI + uvicorn) that builds vLLM's engine in its startup hook:
#: uvicorn's first two lines come before the engine's.
APP_BUILDS_ENGINE = (
    "INFO:     Started server process [4121]\n"
    "INFO:     Waiting for application startup.\n"
    "loading model /models/llama via vllm\n"
    "INFO 05-02 10:11:12 [config.py:712] Using max model len 4096\n"
    "INFO 05-02 10:11:12 [config.py:1830] Chunked prefill is enabled with "
    "max_num_batched_tokens=8192.\n"
)


def test_an_app_that_builds_the_engine_after_uvicorn_started_is_starting() -> None:
    d = diagnose(APP_BUILDS_ENGINE)
    assert d.label == "starting", d.summary
    # guard: the same app once its startup hook returned is up
    up = APP_BUILDS_ENGINE + "INFO:     Application startup complete.\n"
    assert diagnose(up).label == "healthy"


#: An offline run: an informational KV line (no blocks left, as a CPU fork printed it), then
#: the LLM class generating, then a traceback through its loop cut before the exception.
GENERATING_AFTER_KV_LINE = (
    "INFO 01-10 09:00:00 llm_engine.py:222] # GPU blocks: 0, # CPU blocks: 4096\n"
    "Traceback (most recent call last):\n"
    '  File "/work/bench.py", line 88, in run\n'
    "    llm._run_engine(use_tqdm=True)\n"
    '  File "/opt/venv/lib/python3.10/site-packages/vllm/entrypoints/llm.py", line 201, in '
    "_run_engine\n"
    "    step_outputs = self.llm_engine.step()\n"
)


def test_a_kv_line_the_engine_generated_after_is_not_the_cause() -> None:
    d = diagnose(GENERATING_AFTER_KV_LINE)
    assert d.label != "kv_cache_insufficient", d.summary
    # guard: the same line, then the engine dying while starting, is the KV shortfall
    dying = (
        "INFO 01-10 09:00:00 llm_engine.py:222] # GPU blocks: 0, # CPU blocks: 4096\n"
        "RuntimeError: Engine process failed to start\n"
    )
    assert diagnose(dying).label == "kv_cache_insufficient"


HARMONY = (
    "openai_harmony.HarmonyError: error downloading or loading vocab file: failed to download "
    "or load vocab file\n"
)


def test_gpt_oss_tokenizer_without_its_vocab_file_is_model_not_found() -> None:
    starting = (
        "(APIServer pid=1) INFO 09-02 11:20:04 [api_server.py:1] vLLM API server version 0.10.2\n"
    )
    d = diagnose(starting + "(APIServer pid=1) " + HARMONY)
    assert d.label == "model_not_found", d.summary
    assert "TIKTOKEN_ENCODINGS_BASE" in d.hint
    # guard: after the server is up, one request fails of it; the server still serves
    up = starting + "(APIServer pid=1) INFO:     Application startup complete.\n"
    assert (
        diagnose(up + "(APIServer pid=1) ERROR 09-02 11:30:00 [serving_chat.py:1] " + HARMONY).label
        == "healthy"
    )


def _device_query(error: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/opt/vllm/vllm/worker/worker.py", line 150, in init_device\n'
        "    self.init_gpu_memory = torch.cuda.mem_get_info()[0]\n"
        '  File "/opt/venv/lib/python3.10/site-packages/torch/cuda/memory.py", line 712, in '
        "mem_get_info\n"
        "    return torch.cuda.cudart().cudaMemGetInfo(device)\n"
        f"RuntimeError: {error}\n"
    )


def test_a_cuda_error_at_the_first_device_query_is_the_device_not_a_kernel() -> None:
    d = diagnose(_device_query("HIP error: invalid argument"))
    assert d.label == "unknown", d.summary
    assert "not usable" in d.summary and "/dev/kfd" in d.hint
    # guards: a kernel's fault reported there (asynchronously) stays the engine's; the
    # device's own out of memory stays cuda_oom
    assert diagnose(
        _device_query("CUDA error: an illegal memory access was encountered")
    ).label == ("engine_dead_other")
    assert diagnose(_device_query("CUDA error: out of memory")).label == "cuda_oom"


#: torch's FP8 GEMM refusing the GPU, printed by V1's engine-core error logger.
SCALED_MM = (
    "(EngineCore_DP0 pid=90) ERROR 03-01 10:00:00 [core.py:700] RuntimeError: torch._scaled_mm "
    "is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+\n"
)


def test_torch_s_fp8_gemm_refusing_the_gpu_is_quantization_unsupported() -> None:
    d = diagnose(SCALED_MM)
    assert (d.label, d.facts.get("min_capability")) == ("quantization_unsupported", "9.0")
    assert "minimum compute capability 9.0" in d.hint
