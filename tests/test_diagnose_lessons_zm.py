"""What blind set ZM's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

V0_LOADED = (
    "INFO 10-14 21:32:44 llm_engine.py:72] Initializing an LLM engine with config: "
    "model='org/model-7b', tokenizer='org/model-7b', dtype=torch.float16, max_seq_len=4096\n"
    "INFO 10-14 21:40:10 model_runner.py:1072] Loading model weights took 12.55 GB\n"
)


def test_v0_reporting_zero_gpu_blocks_as_its_last_word_is_the_kv_cache_shortfall() -> None:
    # V0 raises "No available memory for the cache blocks" right after it prints a block count
    # of 0 (or a negative one): a log that ends there ends in that failure
    for count in ("0", "-12"):
        d = diagnose(
            V0_LOADED + f"INFO 10-14 21:40:24 llm_engine.py:205] # GPU blocks: {count}, "
            "# CPU blocks: 512\n"
        )
        assert d.label == "kv_cache_insufficient", (count, d.summary)
    # guard: an engine that went on past it (a CPU prototype running prompts) was not failing
    went_on = V0_LOADED + (
        "INFO 10-14 21:40:24 llm_engine.py:205] # GPU blocks: 0, # CPU blocks: 2048\n"
        "Processed prompts:  40%|####      | 400/1000 [00:10<00:15, 40.00it/s]\n"
    )
    assert not diagnose(went_on).failed, diagnose(went_on).summary
    # guard: a positive count is a start that goes on
    ok = (
        V0_LOADED + "INFO 10-14 21:40:24 llm_engine.py:205] # GPU blocks: 2765, # CPU blocks: 512\n"
    )
    assert diagnose(ok).label == "starting"


def test_a_model_repo_missing_its_remote_code_module_is_model_not_found() -> None:
    # transformers names any file the repository lacks: a configuration_*.py / modeling_*.py
    # its config.json points at is as missing as a weight file
    line = (
        "OSError: acme/Widget-3B-FP8 does not appear to have a file named configuration_widget.py."
        " Checkout 'https://huggingface.co/acme/Widget-3B-FP8/tree/main' for available files.\n"
    )
    assert diagnose(line).label == "model_not_found"
    # guard: config.json, as before
    assert diagnose(line.replace("configuration_widget.py", "config.json")).label == (
        "model_not_found"
    )


def test_a_gguf_file_of_an_architecture_vllm_does_not_map_is_an_unsupported_model() -> None:
    # vLLM's GGUF loader refusing the file's architecture refuses the model, not the GGUF
    # quantization (which it runs for the architectures it maps)
    d = diagnose("ValueError: GGUF model with architecture mamba2 is not supported yet.\n")
    assert d.label == "unknown" and "mamba2" in d.summary, d.summary
    # guard: a quantization refusal naming GGUF is still one
    refused = "NotImplementedError: GGUF quantization is not supported on this device (XPU)\n"
    assert diagnose(refused).label == "quantization_unsupported"


MQ_CLIENT_LOOP = (
    "Task exception was never retrieved\n"
    "future: <Task finished name='Task-7' coro=<MQLLMEngineClient.run_output_handler_loop() "
    "done, defined at /opt/py/vllm/engine/multiprocessing/client.py:178> "
    "exception=ZMQError('Operation not supported')>\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/py/vllm/engine/multiprocessing/client.py", line 184, in '
    "run_output_handler_loop\n"
    "    while await self.output_socket.poll(timeout=VLLM_RPC_TIMEOUT\n"
    '  File "/opt/py/zmq/_future.py", line 400, in poll\n'
    "    raise _zmq.ZMQError(_zmq.ENOTSUP)\n"
    "zmq.error.ZMQError: Operation not supported\n"
)


def test_the_v0_api_servers_client_loop_failing_is_not_the_engine_dying() -> None:
    # V0's MQ client polls the engine's sockets inside the API server's process: its loop
    # failing is the link to the engine breaking (often after the engine process went away),
    # which vLLM reports itself when it is a death; alone it names no cause
    d = diagnose(MQ_CLIENT_LOOP)
    assert d.label == "unknown" and d.failed, d.summary
    # guard: with vLLM's own death line after it, the engine's death it is
    dead = MQ_CLIENT_LOOP + (
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.\n"
    )
    assert diagnose(dead).label == "engine_dead_other"


def test_one_requests_error_logged_by_the_serving_layer_is_a_server_that_is_up() -> None:
    # the OpenAI serving layer logs why it refused one request (too many tokens, a bad chat
    # template) at ERROR and answers it with a 4xx: the server is up and handling requests
    line = (
        "(APIServer pid=1) ERROR 04-28 14:17:50 [serving_chat.py:257] ValueError: 'max_tokens' "
        "or 'max_completion_tokens' is too large: 4096. This model's maximum context length is "
        "4096 tokens and your request has 900 input tokens (4096 > 4096 - 900).\n"
    )
    d = diagnose(line)
    assert d.label == "healthy" and not d.failed, d.summary
    old = "ERROR 05-05 17:41:46 serving_completion.py:112] ValueError: This model's maximum...\n"
    assert diagnose(old).label == "healthy"
    # guards: a cause a rule names there, and vLLM's engine death, stay what they are
    oom = (
        "ERROR 04-28 14:17:50 [serving_chat.py:1024] torch.OutOfMemoryError: CUDA out of memory.\n"
    )
    assert diagnose(oom).label == "cuda_oom"
    dead = (
        "(APIServer pid=1) ERROR 04-28 14:17:50 [serving_chat.py:1024] vllm.v1.engine.exceptions."
        "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
        "cause.\n"
    )
    assert diagnose(dead).label == "engine_dead_other"
    # ... and the same exception from another vLLM module is what it was
    other = "ERROR 04-28 14:17:50 [core.py:600] ValueError: 'max_tokens' is too large\n"
    assert diagnose(other).failed
