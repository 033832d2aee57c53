"""What blind set ZQ's misses taught (2026-12-06), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose
from kimi_ops.diagnose.clean import clean_line, learn_wrap_width

_UP = (
    "(APIServer pid=4410) INFO 05-02 10:01:12 [api_server.py:1880] vLLM API server version "
    "0.14.0\n"
    "(APIServer pid=4410) INFO:     Application startup complete.\n"
    '(APIServer pid=4410) INFO:     127.0.0.1:40112 - "POST /v1/chat/completions HTTP/1.1" 200 '
    "OK\n"
)


def test_a_request_validation_error_on_a_server_that_is_up_is_that_request_refused() -> None:
    # vllm.exceptions.VLLMValidationError is "for request validation failures" (the API answers
    # 400): one in an ASGI traceback on a running server refused that request, not a setting
    refused = (
        '(APIServer pid=4410) INFO:     127.0.0.1:40120 - "POST /v1/chat/completions HTTP/1.1" '
        "400 Bad Request\n"
        "(APIServer pid=4410) ERROR:    Exception in ASGI application\n"
        "(APIServer pid=4410) Traceback (most recent call last):\n"
        '(APIServer pid=4410)   File "/venv/lib/python3.12/site-packages/vllm/sampling_params.py",'
        " line 402, in _verify_args\n"
        "(APIServer pid=4410) vllm.exceptions.VLLMValidationError: max_tokens=16384 cannot be "
        "greater than max_model_len=8192. Please request fewer output tokens. "
        "(parameter=max_tokens, value=16384)\n"
    )
    d = diagnose(_UP + refused)
    assert (d.label, d.lifecycle) == ("healthy", "serving"), d.summary
    # guard: the same error under the serve command's argument check, before the server is up,
    # is a setting vLLM refused
    setup = diagnose(
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/vllm/entrypoints/openai/cli_args.py", line '
        "290, in validate_parsed_serve_args\n"
        '  File "/venv/lib/python3.12/site-packages/vllm/entrypoints/chat_utils.py", line 512, '
        "in validate_chat_template\n"
        "vllm.exceptions.VLLMValidationError: The supplied chat template string (tool_use) "
        "appears path-like, but doesn't exist!\n"
    )
    assert setup.label == "bad_argument", setup.summary


def test_a_launchers_label_on_an_empty_line_is_no_output() -> None:
    # srun --label / journalctl print their label on an empty line too; the line holds nothing
    for label in ("0: ", "12: ", "2026-01-01T00:00:00+0000 gpu-node-01 python3[4821]: "):
        assert clean_line(label) == "", label
    init = (
        "INFO 03-16 12:39:15 model_runner.py:1563] Graph capturing finished in 7 secs, took "
        "0.10 GiB\n"
        "INFO 03-16 12:39:15 llm_engine.py:429] init engine (profile, create kv cache, warmup "
        "model) took 29.89 seconds\n"
        "\n"
    )
    bare = diagnose(init)
    for label in ("0: ", "2026-01-01T00:00:00+0000 gpu-node-01 python3[4821]: "):
        dressed = "".join(label + line for line in init.splitlines(keepends=True))
        assert diagnose(dressed).label == bare.label, label
    # guard: a label before a record is still taken off it
    assert clean_line("0: INFO 03-16 12:39:15 llm_engine.py:429] x") == "x"


def test_a_hard_wrap_of_lines_padded_with_spaces_is_learned() -> None:
    # a paste whose lines carry trailing spaces (a web page's), then hard-wrapped by a terminal:
    # the pieces of spaces begin no record, so they are pieces of the line cut
    line = "(Worker_TP3 pid=12941) ERROR 11-13 01:16:19 [multiproc_executor.py:706]   File "
    text = "".join(
        f'{line}"/venv/lib/python3.12/site-packages/vllm/v1/worker/{m}.py", line {n}, in f'
        + " " * 170
        + "\n"
        for m, n in (("gpu_worker", 311), ("gpu_model_runner", 2860), ("lora_mixin", 165))
    )
    width = 100
    wrapped = "".join(
        "\n".join(ln[i : i + width] for i in range(0, len(ln), width)) + "\n"
        for ln in text.splitlines()
    )
    assert learn_wrap_width(wrapped) == width
    # guard: lines that are only padded, not wrapped, show no width
    assert learn_wrap_width(text) is None


def test_a_benchmarks_token_throughput_is_a_server_that_served() -> None:
    # any client's result in tokens per second (a table of "... tok/s"): tokens were generated
    kv = (
        "(EngineCore pid=114) INFO 08-19 20:19:53 [kv_cache_utils.py:1091] GPU KV cache size: "
        "344,579 tokens\n"
    )
    table = (
        "Category | Concurrency | Wall Time | Server Tok/s\n"
        "Prose    | 1           |    6.39s  |    160.34 tok/s\n"
        "Code     | 4           |    8.54s  |    479.73 tok/s\n"
    )
    d = diagnose(kv + table)
    assert d.label == "healthy", d.summary
    # guard: the KV cache's size alone is a server still starting
    assert diagnose(kv).label == "starting"


def test_a_thread_that_died_after_the_server_was_up_is_a_failure() -> None:
    # Python's "Exception in thread X:" heads the traceback of a thread that is gone; the log
    # ending in it (cut before the exception) after serving shows what it ran stopped
    died = (
        "Exception in thread Thread-1:\n"
        "Traceback (most recent call last):\n"
        '  File "/env/lib/python3.9/threading.py", line 980, in _bootstrap_inner\n'
        "    self.run()\n"
        '  File "/env/lib/python3.9/threading.py", line 917, in run\n'
        "    self._target(*self._args, **self._kwargs)\n"
    )
    d = diagnose(_UP + died)
    assert d.label == "unknown", d.summary
    assert "Exception in thread Thread-1" in d.summary and "threading.py" in d.summary
    # guards: served after it (the thread was not the server's), or stopped after it
    again = '(APIServer pid=4410) INFO:     127.0.0.1:40130 - "GET /health HTTP/1.1" 200 OK\n'
    assert diagnose(_UP + died + again).label == "healthy"
    stop = "(APIServer pid=4410) INFO:     Shutting down\n"
    stop += "(APIServer pid=4410) INFO:     Application shutdown complete.\n"
    assert diagnose(_UP + died + stop).label == "healthy"


def test_the_api_servers_warning_of_a_requests_ignored_fields_is_a_request_handled() -> None:
    # protocol.py warns, per request, of fields the API ignores (a client's extra "strict")
    text = "".join(
        f"(APIServer pid=198) WARNING 03-20 02:03:{s:02d} [protocol.py:117] The following fields "
        "were present in the request but ignored: {'strict'}\n"
        for s in (20, 21, 24)
    )
    d = diagnose(text)
    assert d.label == "healthy", d.summary
    # guard: an engine death after those requests stands
    dead = diagnose(
        text + "(APIServer pid=198) ERROR 03-20 02:03:30 [async_llm.py:480] "
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.\n"
    )
    assert dead.label == "engine_dead_other", dead.summary


def test_a_read_from_the_hub_that_timed_out_is_the_model_not_had() -> None:
    # requests gives up a read that timed out at once (no "Max retries exceeded"): the model's
    # files could not be fetched
    text = (
        "ERROR 02-03 03:13:32 multiproc_worker_utils.py:229] Exception in worker "
        "VllmWorkerProcess while processing method load_model.\n"
        "ERROR 02-03 03:13:32 multiproc_worker_utils.py:229] requests.exceptions.ReadTimeout: "
        "(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed "
        "out. (read timeout=10)\"), '(Request ID: 0d1e)')\n"
        "ERROR 02-03 03:13:32 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 3383 "
        "died, exit code: -15\n"
    )
    d = diagnose(text)
    assert d.label == "model_not_found", d.summary
    # guard: a read that timed out from another host is no Hub failure
    other = text.replace("huggingface.co", "metrics.internal.example")
    assert diagnose(other).label != "model_not_found"
