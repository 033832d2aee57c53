"""What blind set W's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

UP = (
    "INFO 01-01 00:00:00 api_server.py:1] vLLM API server version 0.8.0\n"
    "INFO:     Application startup complete.\n"
    'INFO:     127.0.0.1:4000 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n'
)


def test_v0_engine_loop_logging_its_fatal_exception_as_a_repr_is_the_engine_dying() -> None:
    # MQLLMEngine.start: `logger.exception(repr(e))` when the engine loop ends
    d = diagnose(UP + "ERROR 01-01 00:00:09 [engine.py:160] RuntimeError('no backend here')\n")
    assert (d.label, d.facts.get("signature")) == ("engine_dead_other", "engine_loop_exception")
    assert "RuntimeError('no backend here')" in d.summary
    # a repr inside a sentence is no such line
    d = diagnose(UP + "INFO 01-01 00:00:09 [x.py:1] retrying after ValueError('busy')\n")
    assert d.label == "healthy", d.summary


INIT = (
    "INFO 2025-01-01 10:00:01.100 core.py:1] "
    "init engine (profile, create kv cache, warmup model) took 5 s\n"
)


def test_vllm_s_own_lines_with_a_dated_timestamp_are_no_caller_going_on() -> None:
    # a custom date format adds the year; the line is still vLLM's logger's, not its caller's
    own = "INFO 2025-01-01 10:00:02.83 metrics.py:5] cache_config_info num_gpu_blocks is: 9\n"
    assert diagnose(INIT + own).label == "starting"
    assert diagnose(INIT + "Training from scratch\n").label == "healthy"


def test_a_kernel_naming_the_oldest_gpu_it_runs_on_is_an_unsupported_gpu() -> None:
    start = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 1/2\n"
    for oldest in ("AMD MI200", "Ampere", "NVIDIA Hopper"):  # ROCm's, flash-attn's, ...
        line = f"RuntimeError: FlashAttention only supports {oldest} GPUs or newer."
        assert diagnose(start + line + "\n").label == "unsupported_gpu", oldest


def test_ray_serve_s_deployed_app_is_a_server_up() -> None:
    d = diagnose(
        "(ServeReplica:app:Deployment pid=7) INFO 05-23 02:26:49 cpu_executor.py:72] "
        "# CPU blocks: 1\n"
        "2024-05-23 02:26:49,364\tINFO api.py:584 -- Deployed app 'llm' successfully.\n"
    )
    assert d.label == "healthy", d.summary


def test_verl_s_built_vllm_rollout_is_an_in_process_engine_up() -> None:
    built = "(WorkerDict pid=9) After building vllm rollout, memory allocated (GB): 25.4\n"
    d = diagnose("(WorkerDict pid=9) before init cache memory allocated: 18.5GB\n" + built)
    assert (d.label, d.facts.get("in_process")) == ("healthy", "true"), d.summary
    crash = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'y'\n"
    assert diagnose(crash + built).label != "healthy"


def test_a_disk_quota_used_up_is_the_host_s_disk_like_a_full_one() -> None:
    start = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 1/2\n"
    d = diagnose(start + "OSError: [Errno 122] Disk quota exceeded: '/scratch/u/.cache/vllm'\n")
    assert (d.label, d.facts.get("signature")) == ("unknown", "disk_full"), d.summary
    assert "quota" in d.hint


E = "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:01 [core.py:900] "
CORE = '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", '


def test_a_traceback_logged_inside_the_request_handler_is_a_utility_call_the_engine_survives() -> (
    None
):
    # V1 before _invoke_utility_method: the handler's utility branch logs "Invocation of X
    # method failed" and its traceback starts at the handler; the engine goes on
    survived = [
        "Invocation of collective_rpc method failed",
        "Traceback (most recent call last):",
        CORE + "line 1091, in _handle_client_request",
        "    result = method(*self._convert_msgspec_args(method, args))",
        CORE + "line 657, in collective_rpc",
    ]
    d = diagnose("".join(E + line + "\n" for line in survived))
    assert d.label == "unknown", d.summary
    # a fatal error passes through the handler too, but its traceback starts further out
    fatal = [
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        CORE + "line 700, in run_engine_core",
        CORE + "line 800, in run_busy_loop",
        CORE + "line 850, in _process_input_queue",
        CORE + "line 1091, in _handle_client_request",
    ]
    d = diagnose("".join(E + line + "\n" for line in fatal))
    assert d.label == "engine_dead_other", d.summary
    # cut before its header line, the fatal traceback is still the engine's death
    d = diagnose("".join(E + line + "\n" for line in fatal[1:]))
    assert d.label == "engine_dead_other", d.summary


def test_a_ray_node_without_the_engine_s_accelerator_is_the_environment() -> None:
    d = diagnose(
        E
        + "EngineCore failed to start.\n"
        + E
        + "ValueError: Current node has no GPU available. current_node_resource={'CPU': "
        "8.0}. vLLM engine cannot start without GPU. Make sure you have at least 1 GPU\n"
    )
    assert (d.label, d.facts.get("signature")) == ("unknown", "ray_node_no_device"), d.summary
    assert "GPU" in d.summary and "ray start" in d.hint
