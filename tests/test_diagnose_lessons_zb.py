"""What blind set ZB's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them); zsh's words were read off zsh 5.9 here, with a
process killing itself with each signal, and bash 5.2's job reports beside them. Each test
failed before, but for the three guards (words in a sentence, an engine dying while serving, a
new run after an offline result) and bash's core-dump report, which passed before and must go
on passing."""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose

LOADING = (
    "INFO 05-02 10:00:00 api_server.py:1] vLLM API server version 0.4.1\n"
    "INFO 05-02 10:00:30 pynccl.py:58] Loading nccl from library /root/.config/vllm/nccl/cu12/"
    "libnccl.so.2.18.1\n"
)


@pytest.mark.parametrize(
    ("line", "signal"),
    [
        ("[1]    51234 bus error  python3", "SIGBUS"),  # zsh's report of a job it ran
        ("[1]  + 51234 killed     python3 -m vllm.entrypoints.openai.api_server", "SIGKILL"),
        ("[2]  - segmentation fault (core dumped)  vllm serve org/m", "SIGSEGV"),
        ("zsh: killed     vllm serve org/m --port 8000", "SIGKILL"),  # a foreground command
        ("zsh: IOT instruction  python3 serve.py", "SIGABRT"),
        ("zsh: illegal hardware instruction  vllm serve org/m", "SIGILL"),
        # SIGTERM before the server was up: as bash's "[1]+  Terminated  cmd"
        ("[1]  + 4692 terminated  vllm serve org/m", "SIGTERM"),
        # bash 5.2's job reports, read off it here beside zsh's: Killed read unknown, Bus error
        # and Aborted starting (a core dump was already read)
        ("[1]+  Killed                  python3 -m vllm.entrypoints.openai.api_server", "SIGKILL"),
        ("[1]+  Bus error               vllm serve org/m", "SIGBUS"),
        ("[2]-  Segmentation fault      (core dumped) vllm serve org/m", "SIGSEGV"),
        ("[1]+  Aborted                 vllm serve org/m", "SIGABRT"),
    ],
)
def test_a_shell_s_words_for_a_process_killed_by_a_signal(line: str, signal: str) -> None:
    d = diagnose(LOADING + line + "\n")
    assert (d.label, d.facts.get("signal")) == ("engine_killed", signal), d.summary


def test_zsh_s_terminated_after_the_server_was_up_is_a_stop() -> None:
    d = diagnose(
        "(APIServer pid=7) INFO 04-21 15:00:00 [api_server.py:1] Starting vLLM API server 0 on "
        "http://0.0.0.0:8000\n(APIServer pid=7) INFO:     Application startup complete.\n"
        "zsh: terminated  vllm serve org/m\n"
    )
    assert (d.label, d.facts.get("shutdown")) == ("healthy", "true"), d.summary


def test_zsh_words_inside_a_sentence_are_no_signal() -> None:
    d = diagnose(LOADING + "INFO 05-02 10:00:31 x.py:1] the job was not killed  after all\n")
    assert d.label == "starting", d.summary


def test_a_tpu_program_that_cannot_reserve_its_hbm_is_out_of_memory() -> None:
    # XLA's TPU runtime; the "RESOURCE_EXHAUSTED: " before it may be on another line
    d = diagnose(
        "INFO 01-01 00:00:10 [tpu_worker.py:1] Loading weights\n"
        "    _process_weights: RESOURCE_EXHAUSTED\n"
        "Attempting to reserve 1.25G at the bottom of memory. That was not possible. There "
        "are 803.10M free, 0B reserved, and 803.10M reservable.\n"
    )
    assert d.label == "cuda_oom", d.summary


SERVING = (
    "(APIServer pid=7) INFO 04-21 15:00:00 [api_server.py:1] Starting vLLM API server 0 on "
    "http://0.0.0.0:8000\n"
    "(APIServer pid=7) INFO:     Application startup complete.\n"
    "(APIServer pid=7) INFO 04-21 15:07:51 [loggers.py:259] Engine 000: Avg prompt throughput: "
    "0.0 tokens/s, Avg generation throughput: 483.7 tokens/s, Running: 19 reqs, Waiting: 2 "
    "reqs, GPU KV cache usage: 99.9%, Prefix cache hit rate: 0.0%\n"
)
STREAM_DEAD = (
    "(APIServer pid=7) ERROR 04-21 15:11:23 [serving.py:1261] Error in chat completion stream "
    "generator.\n"
    "(APIServer pid=7) ERROR 04-21 15:11:23 [serving.py:1261] Traceback (most recent call "
    "last):\n"
    '(APIServer pid=7) ERROR 04-21 15:11:23 [serving.py:1261]   File "/x/vllm/v1/engine/'
    'async_llm.py", line 308, in add_request\n'
    "(APIServer pid=7) ERROR 04-21 15:11:23 [serving.py:1261]     raise EngineDeadError()\n"
    "(APIServer pid=7) ERROR 04-21 15:11:23 [serving.py:1261] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
    "cause.\n"
)


def test_the_api_server_s_stats_after_a_stop_keep_the_stop() -> None:
    # V1's API server logs its stats while the engine core shuts down; the streams still open
    # then fail with EngineDeadError: teardown of a server that was up, not a crash
    d = diagnose(
        SERVING + "(APIServer pid=7) INFO:     Shutting down\n"
        "(EngineCore pid=9) INFO 04-21 15:10:41 [core.py:1210] Shutdown initiated (timeout=0)\n"
        "(EngineCore pid=9) INFO 04-21 15:10:41 [core.py:1215] Aborting 235 requests\n"
        "(EngineCore pid=9) INFO 04-21 15:10:41 [core.py:1233] Shutdown complete\n"
        + SERVING.splitlines(keepends=True)[2]
        + STREAM_DEAD
        + "(APIServer pid=7) INFO 04-21 15:11:23 [launcher.py:137] Shutting down FastAPI HTTP "
        "server.\n"
    )
    assert d.label == "healthy", d.summary


def test_the_engine_dying_while_serving_is_still_a_crash() -> None:
    d = diagnose(SERVING + STREAM_DEAD)
    assert d.label == "engine_dead_other", d.summary


def test_an_offline_run_s_result_then_a_new_engine_failing_is_a_failure() -> None:
    # a benchmark's result line ends its run; the next LLM(...) failing to start is a new run
    d = diagnose(
        "(EngineCore pid=9) INFO 08-03 16:23:36 [core.py:1243] Shutdown initiated (timeout=0)\n"
        "Throughput: 4.17 requests/s, 2880.05 total tokens/s, 626.07 output tokens/s\n"
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/entrypoints/llm.py", line 381, in __init__\n'
        "    self.llm_engine = LLMEngine.from_engine_args(\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
    )
    assert d.label == "engine_dead_other", d.summary


def test_the_serving_benchmark_s_speculative_decoding_section_shows_a_server_up() -> None:
    # vllm bench serve prints it from the server's own metrics, after the requests ran
    d = diagnose(
        "---------------Speculative Decoding---------------\n"
        "Acceptance rate (%):                     71.20     \n"
        "Acceptance length:                       2.42      \n"
        "Drafts:                                  1000      \n"
        "==================================================\n"
    )
    assert d.label == "healthy", d.summary


def test_sampling_params_refusing_a_value_is_a_refused_setting() -> None:
    # an RL trainer's in-process engine: SamplingParams._verify_args names the parameter
    d = diagnose(
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/x/trainer.py", line 9, in generate\n'
        "[rank3]:     params = SamplingParams(max_tokens=n)\n"
        '[rank3]:   File "/x/site-packages/vllm/sampling_params.py", line 416, in _verify_args\n'
        "[rank3]:     raise ValueError(\n"
        "[rank3]: ValueError: max_tokens must be at least 1, got -12.\n"
    )
    assert d.label == "bad_argument", d.summary


def test_vllm_ascend_s_engine_core_logger_prints_the_engine_s_death() -> None:
    # vllm-ascend replaces run_engine_core in patch_core.py and logs the engine's fatal error
    # there: its traceback is the engine dying even cut before the exception
    pre = "(EngineCore_DP0 pid=6) ERROR 06-16 03:57:27 [patch_core.py:68] "
    d = diagnose(
        "(APIServer pid=5) INFO 06-16 03:57:00 [api_server.py:1] vLLM API server version 0.11.0\n"
        + pre
        + "Traceback (most recent call last):\n"
        + pre
        + '  File "/vllm-ascend/vllm_ascend/patch/platform/patch_core.py", line 59, in '
        "run_engine_core\n"
        + pre
        + "    engine_core = EngineCoreProc(*args, **kwargs)\n"
        + pre
        + '  File "/vllm/vllm/v1/engine/core.py", line 109, in __init__\n'
        + pre
        + "    num_gpu_blocks, num_cpu_blocks, kv_cache_config = "
        "self._initialize_kv_caches(\n"
    )
    assert d.label == "engine_dead_other", d.summary


def test_lmcache_storing_a_request_s_kv_shows_requests_running() -> None:
    # LMCache's cache engine, under a Ray worker inside the engine core, only for real requests
    w = "(EngineCore_DP0 pid=2) (RayWorkerWrapper pid=9) [2025-12-12 07:15:17,031] LMCache INFO: "
    d = diagnose(
        w
        + "Post-initializing LMCacheEngine (cache_engine.py:241:lmcache.v1.cache_engine)\n"
        + w
        + "Storing KV cache for 16 out of 16 tokens (skip_leading_tokens=0) for request "
        "chatcmpl-1\n" + w + "Stored 16 out of total 16 tokens. size: 0.0019 gb, cost 0.8 ms\n"
    )
    assert d.label == "healthy", d.summary
