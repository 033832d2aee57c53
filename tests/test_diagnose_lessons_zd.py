"""What blind set ZD's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards (a
stop before anything ran, the API server's own "Supported tasks", a heading), which passed
before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import clean_line, diagnose

RUN_ENGINE = (
    "Traceback (most recent call last):\n"
    '  File "/content/train.py", line 40, in <module>\n'
    "    outputs = llm.generate(prompts, params)\n"
    '  File "/usr/local/lib/python3.11/dist-packages/vllm/entrypoints/llm.py", line 1397, in '
    "_run_engine\n"
    "    step_outputs = self.llm_engine.step()\n"
    '  File "/usr/local/lib/python3.11/dist-packages/vllm/model_executor/layers/sampler.py", '
    "line 485, in _random_sample\n"
    "    random_samples = random_samples.cpu()\n"
    "KeyboardInterrupt: \n"
)


def test_ctrl_c_inside_the_in_process_engine_s_generation_loop_is_a_stop() -> None:
    d = diagnose(RUN_ENGINE)
    assert (d.label, d.lifecycle) == ("healthy", "stopped"), d.summary
    assert "in-process engine" in d.summary and "server" not in d.summary
    assert "stopped" in d.hint and "nothing failed" in d.hint
    # the same key pressed while the weights load: nothing ran, no stop of a running engine
    loading = RUN_ENGINE.replace(
        'entrypoints/llm.py", line 1397, in _run_engine',
        'model_executor/model_loader/loader.py", line 9, in load_model',
    )
    assert diagnose(loading).label != "healthy"


SERVING = (
    "(Llumlet(iid=1) pid=22) INFO 07-16 12:30:38 metrics.py:349] Avg prompt throughput: 2.0 "
    "tokens/s, Avg generation throughput: 9.2 tokens/s, Running: 1 reqs, Swapped: 0 reqs\n"
)
ABSEIL_SIGTERM = (
    "*** SIGTERM received at time=1752669041 on cpu 12 ***\n"
    "PC: @     0x7fe3bf1a082d  (unknown)  select\n"
)


def test_abseil_s_report_of_a_sigterm_after_serving_is_a_stop() -> None:
    d = diagnose(SERVING + ABSEIL_SIGTERM)
    assert (d.label, d.lifecycle) == ("healthy", "stopped"), d.summary
    loading = "INFO 07-16 12:29:00 loader.py:1] Loading model weights took 3.2 GB\n"
    d = diagnose(loading + ABSEIL_SIGTERM)  # before anything ran: killed by the signal
    assert (d.label, d.facts.get("signal")) == ("engine_killed", "SIGTERM")


def test_the_llm_class_saying_its_supported_tasks_is_an_in_process_engine_up() -> None:
    # a notebook: the engine process's own lines go to the terminal, not the cell
    text = (
        "INFO 11-06 14:00:01 [utils.py:233] non-default args: {'model': 'facebook/opt-125m'}\n"
        "INFO 11-06 14:01:11 [llm.py:306] Supported_tasks: ['generate']\n"
    )
    assert diagnose(text).label == "healthy"
    # the API server says it too, before its HTTP server starts
    server = text.replace("[llm.py:306]", "[api_server.py:1650]")
    assert diagnose(server).label == "starting"


def test_verl_s_words_for_its_rollout_built_and_generating() -> None:
    for line in (
        "(WorkerDict pid=2) rollout and sharding manager init done sharding_manager: <verl."
        "workers.sharding_manager.megatron_vllm.MegatronVLLMShardingManager object at 0x7f3e>",
        "(TaskRunner pid=1) validation generation end",
    ):
        assert diagnose("(TaskRunner pid=1) Training from scratch\n" + line + "\n").label == (
            "healthy"
        ), line


def test_a_traceback_commented_out_in_a_config_file_is_still_a_traceback() -> None:
    text = (
        "    # Traceback (most recent call last):\n"
        '    #   File "/workspace/vllm/vllm/entrypoints/openai/rpc/server.py", line 236, in '
        "run_rpc_server\n"
        "    #     server = AsyncEngineRPCServer(async_engine_args, usage_context, rpc_path)\n"
        "    # AssertionError\n"
    )
    # 0.5's RPC server process is the engine process: it died of the assertion
    assert diagnose(text).label == "engine_dead_other"
    assert clean_line("# Deploying Llama on TPU") == "# Deploying Llama on TPU"  # a heading


def test_cutlass_s_dsl_refusing_the_gpu_s_arch_is_an_unsupported_gpu() -> None:
    line = (
        "(EngineCore pid=87) cutlass.cute.nvgpu.common.OpError: OpError: expects arch to be one "
        "of ['sm_120a'], but got Arch.sm_121a\n"
    )
    assert diagnose(line).label == "unsupported_gpu"
