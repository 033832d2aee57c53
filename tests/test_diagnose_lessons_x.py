"""What blind set X's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

UP = (
    "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.1\n"
    "INFO 01-01 00:00:05 [llm_engine.py:1] init engine (profile, create kv cache, warmup "
    "model) took 20.31 seconds\n"
    "INFO:     Application startup complete.\n"
    'INFO:     127.0.0.1:4000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)
V0_ENGINE = "ERROR 01-01 00:00:09 [engine.py:165] "


def test_a_traceback_the_engine_s_own_logger_prints_after_up_is_the_engine_dying() -> None:
    # V0's engine process logs its fatal errors only; the server then shuts down on its own
    trace = [
        "Traceback (most recent call last):",
        '  File "/venv/vllm/engine/multiprocessing/engine.py", line 160, in start',
        "    self.run_engine_loop()",
        "RuntimeError: the device op failed",
    ]
    down = "INFO:     Shutting down\nINFO:     Application shutdown complete.\n"
    log = UP + "".join(V0_ENGINE + line + "\n" for line in trace) + down
    d = diagnose(log)
    assert d.label == "engine_dead_other", d.summary
    # the same exception printed by the API server's request handler is one request failing
    d = diagnose(UP + "".join(line + "\n" for line in trace))
    assert d.label == "healthy", d.summary
    # ... and a traceback the engine survives (a failed utility call) stays healthy
    core = "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:09 [core.py:900] "
    survived = [
        "Invocation of sleep method failed",
        "Traceback (most recent call last):",
        '  File "/venv/vllm/v1/engine/core.py", line 1091, in _handle_client_request',
        "ValueError: not asleep",
    ]
    d = diagnose(UP + "".join(core + line + "\n" for line in survived))
    assert d.label == "healthy", d.summary


def test_the_kv_cache_write_op_failing_with_an_fp8_kv_cache_is_the_kv_dtype() -> None:
    fp8 = UP.replace(
        "version 0.9.1\n",
        "version 0.9.1\nINFO 01-01 00:00:01 [config.py:1] "
        "non-default args: {'kv_cache_dtype': 'fp8'}\n",
    )
    line = (
        "RuntimeError: The Inner error is reported as above. The process exits for this inner "
        "error, and the current working operator name is ReshapeAndCacheOperation.\n"
    )
    d = diagnose(fp8 + V0_ENGINE + line)
    assert (d.label, d.facts.get("signature")) == (
        "kv_cache_dtype_unsupported",
        "kv_write_op_failed",
    ), d.summary
    assert "fp8" in d.summary
    # with a 16-bit KV cache the same failure is no KV-dtype problem
    d = diagnose(UP + V0_ENGINE + line)
    assert d.label == "engine_dead_other", d.summary


def test_torch_s_nccl_watchdog_stuck_and_its_heartbeat_monitor_are_nccl() -> None:
    for line in (
        "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 2 Rank 1] Heartbeat monitor timed out! "
        "Process will be terminated after dumping debug info.",
        "[rank3]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 3] ProcessGroupNCCL's watchdog got "
        "stuck for 480 seconds without making progress in monitoring enqueued collectives.",
    ):
        # deep in a long log: found by the fast path's words, not only by the head scan
        filler = "INFO 01-01 00:00:01 [metrics.py:1] Avg prompt throughput: 1.0 tokens/s\n"
        for log in (line + "\n", UP + filler * 4000 + line + "\n"):
            assert diagnose(log).label == "nccl_error", line[:40]


def test_torchrun_reporting_a_rank_dead_of_a_signal_names_the_signal() -> None:
    line = (
        "E0101 00:00:09.000000 42 torch/distributed/elastic/multiprocessing/api.py:874] "
        "failed (exitcode: -11) local_rank: 0 (pid: 43) of binary: /usr/bin/python\n"
    )
    d = diagnose(line)
    assert (d.label, d.facts.get("signal")) == ("engine_killed", "SIGSEGV"), d.summary
    # an exit status (not a signal) is no kill
    assert diagnose(line.replace("-11", "1")).label != "engine_killed"


def test_two_packages_that_must_match_and_do_not_are_a_broken_install() -> None:
    d = diagnose(
        "RuntimeError: The detected CUDA version (12.8) mismatches the version that was used "
        "to compile PyTorch (12.1). Please make sure to use the same CUDA versions.\n"
    )
    assert (d.label, d.facts.get("signature")) == ("unknown", "package_version_mismatch")
    assert "CUDA 12.8" in d.summary and "PyTorch 12.1" in d.summary


def test_the_tail_of_torch_s_oom_message_alone_is_an_oom() -> None:
    tail = (
        "Exit code: 1. Reason: ess has 0 bytes memory in use. Of the allocated memory 21.48 GiB "
        "is allocated by PyTorch, and 10.95 MiB is reserved by PyTorch but unallocated.\n"
    )
    assert diagnose(tail).label == "cuda_oom"


def test_a_missing_model_file_whose_name_a_page_wrapped_away_is_still_missing() -> None:
    d = diagnose(
        "OSError: org/some-model-gguf does not appear to have a file named\n\nconfig.json.\n"
    )
    assert d.label == "model_not_found", d.summary
    # an optional file transformers only mentions (no exception) is no failure
    ok = UP + "INFO 01-01 00:00:09 [x.py:1] org/m does not appear to have a file named\n"
    assert diagnose(ok).label == "healthy"


def test_an_http_server_that_starts_before_its_engine_is_not_up_until_the_app_is() -> None:
    # TRL's vllm-serve: uvicorn starts, its app builds the engine during startup
    head = "INFO:     Started server process [7]\nINFO:     Waiting for application startup.\n"
    engine = (
        "INFO 01-01 00:00:07 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: "
        "model='m'\n"
        "INFO 01-01 00:00:09 [gpu_model_runner.py:1] Starting to load model m...\n"
    )
    d = diagnose(head + engine)
    assert (d.label, d.stage) == ("starting", "loading_model"), d.summary
    d = diagnose(head + engine + "INFO:     Application startup complete.\n")
    assert d.label == "healthy", d.summary
    # vLLM's own server: uvicorn after the engine, so its start is the server up
    assert diagnose(engine + head).label == "healthy"


def test_a_kv_write_kernel_named_outside_an_error_is_no_failure() -> None:
    fp8 = "INFO 01-01 00:00:01 [config.py:1] non-default args: {'kv_cache_dtype': 'fp8'}\n"
    listed = "INFO 01-01 00:00:20 [profiler.py:1] kernel reshape_and_cache_flash: 12 us\n"
    assert diagnose(fp8 + UP + listed).label == "healthy"


def test_unsloth_s_loader_re_raising_the_engine_s_error_is_the_engine_s_error() -> None:
    # unsloth_zoo's load_vllm catches the engine's exception and raises its text again, so no
    # frame of vLLM's own is left: the exception is still the engine failing to initialise
    head = "[rank0]: Traceback (most recent call last):\n"
    frames = (
        '[rank0]:   File "/env/lib/python3.11/site-packages/unsloth/models/llama.py", '
        "line 1900, in from_pretrained\n"
        "[rank0]:     llm = load_vllm(**load_vllm_kwargs)\n"
        '[rank0]:   File "/env/lib/python3.11/site-packages/unsloth_zoo/vllm_utils.py", '
        "line 1300, in load_vllm\n"
        "[rank0]:     raise RuntimeError(error)\n"
    )
    exc = "[rank0]: RuntimeError: Layer name clash: model.layers.3.mlp\n"
    d = diagnose(head + frames + exc)
    assert d.label == "engine_dead_other", d.summary
    # the same exception raised by the trainer's own code is not the engine's
    other = frames.replace("unsloth_zoo/vllm_utils.py", "unsloth_zoo/rl_utils.py").replace(
        "load_vllm\n", "prepare\n"
    )
    d = diagnose(head + other + exc)
    assert d.label == "unknown", d.summary
