"""What blind set Z's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

from kimi_ops.diagnose import Diagnosis, diagnose

LOADING = (
    "(Worker_TP1 pid=90) INFO 02-01 10:00:00 [gpu_model_runner.py:2700] Starting to load model x\n"
)


def test_a_rust_program_s_panic_is_a_failure_not_a_startup() -> None:
    # a Rust front end (Dynamo's) that panics: no Python exception, no traceback, no vLLM line
    panic = (
        "thread 'tokio-runtime-worker' panicked at lib/llm/src/engines/python.rs:120:9:\n"
        "Could not load the engine's Python module: AttributeError: no attribute 'x'\n"
        "stack backtrace:\n"
        "   0: rust_begin_unwind\n"
        "   1: core::panicking::panic_fmt\n"
    )
    d = diagnose(panic)
    assert d.label == "unknown", d.summary
    assert "panicked at" in d.summary
    # the older form quotes the message, and a thread may carry its id
    d = diagnose("thread 'main' (4411) panicked at 'no engine', src/main.rs:2:5\n")
    assert d.label == "unknown", d.summary
    # a line that only talks of a panic is none
    assert diagnose(LOADING + "INFO: the worker thread panicked at startup before\n").label == (
        "starting"
    )


def test_the_distributed_store_losing_its_master_mid_startup_is_a_communication_failure() -> None:
    lost = (
        "[rank1]:[W201 10:30:00.1 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=9, "
        "addr=[::]:500, remote=[::ffff:10.0.0.2]:29500): Failed to recv, got 0 bytes. Connection "
        "was likely closed. Did the remote server shutdown or crash?\n"
        "[rank1]:[W201 10:30:09.1 ProcessGroupNCCL.cpp:1800] [PG ID 0 PG GUID 0 Rank 1] Failed to "
        'check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too '
        "early), with error: Broken pipe\n"
    )
    d = diagnose(LOADING + lost)
    assert (d.label, d.facts.get("signature")) == ("nccl_error", "store_peer_lost"), d.summary
    # the same warnings after an offline run finished and its engine shut down are teardown
    done = (
        "Processed prompts: 100%|##########| 8/8 [00:09<00:00,  1.1it/s]\n"
        "(EngineCore pid=7) INFO 02-01 10:29:58 [core.py:700] Shutdown initiated (timeout=0)\n"
    )
    assert diagnose(LOADING + done + lost).label == "healthy"


CORE = "(EngineCore_DP0 pid=4) ERROR 02-01 10:01:00 [core.py:700] "


def _engine_dies_of(frame: str, exc: str) -> Diagnosis:
    """The diagnosis of an engine that failed to start with ``exc`` raised at ``frame``."""
    lines = ["EngineCore failed to start.", "Traceback (most recent call last):", frame, exc]
    return diagnose("".join(CORE + line + "\n" for line in lines))


def test_the_hub_s_own_http_error_and_a_missing_tokenizer_file_are_the_model_s_files() -> None:
    for exc in (
        "huggingface_hub.errors.HfHubHTTPError: 416 Client Error: Requested Range Not "
        "Satisfiable for url: https://cdn-lfs.hf.co/repos/x",
        "huggingface_hub.utils._errors.HfHubHTTPError: 502 Server Error: Bad Gateway for url: x",
        "ValueError: No tokenizer file found in directory: /models/omni-7b",
    ):
        d = diagnose(LOADING + "[rank0]: " + exc + "\n")
        assert d.label == "model_not_found", (exc, d.summary)


def test_xla_running_out_of_a_memory_space_is_the_accelerator_s_memory() -> None:
    exc = (
        "ValueError: Ran out of memory in memory space vmem while allocating on stack for "
        "%name.7 = bf16[8,16,128]"
    )
    frame = '  File "/venv/vllm/v1/worker/tpu_model_runner.py", line 1200, in capture_model'
    d = _engine_dies_of(frame, exc)
    assert d.label == "cuda_oom", d.summary


def test_a_moe_kernel_refusing_another_setting_is_not_the_checkpoint_s_quantization() -> None:
    refusal = (
        "ValueError: Mxfp4 MoE backend 'SOME_BACKEND' does not support the deployment "
        "configuration since kernel does not support {}."
    )
    frame = '  File "/venv/vllm/model_executor/layers/fused_moe/oracle/mxfp4.py", line 9, in pick'
    for reason, label in (
        ("current device", "quantization_unsupported"),
        ("quantization scheme", "quantization_unsupported"),
        ("batch invariance", "engine_dead_other"),
        ("parallel config FusedMoEParallelConfig(tp_size=1, ep_size=2)", "engine_dead_other"),
    ):
        d = _engine_dies_of(frame, refusal.format(reason))
        assert d.label == label, (reason, d.summary)


def test_only_some_scales_being_supported_is_a_refused_quantization_scheme() -> None:
    frame = (
        '  File "/venv/vllm/model_executor/layers/quantization/compressed_tensors/'
        'compressed_tensors_moe.py", line 80, in __init__'
    )
    exc = (
        "ValueError: For FP8 Fused MoE layers, only per-tensor scales for weights and "
        "activations are supported. Found strategy='channel'"
    )
    d = _engine_dies_of(frame, exc)
    assert d.label == "quantization_unsupported", d.summary


def test_a_vllm_fork_s_own_frames_count_as_the_engine_s() -> None:
    # Aphrodite is vLLM's code under another package name: a bug's message raised in it is
    # the engine failing, as it would be in vllm/
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/env/lib/python3.12/site-packages/aphrodite/modeling/layers/linear.py", '
        "line 184, in __init__\n"
        "    self.quant_method = quant_config.get_quant_method(self, prefix)\n"
        "ValueError: Cannot find the entry for (a, b)\n"
    )
    assert diagnose(trace).label == "engine_dead_other"
    assert diagnose(trace.replace("/aphrodite/", "/myapp/")).label == "unknown"
