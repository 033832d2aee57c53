"""What blind set ZG's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import LogDiagnoser, diagnose

V0_UP = (
    "INFO 05-02 09:00:00 api_server.py:600] vLLM API server version 0.6.3\n"
    "INFO 05-02 09:01:40 launcher.py:28] Route: /v1/completions, Methods: POST\n"
    "INFO:     Application startup complete.\n"
)
V1_STARTING = (
    "(APIServer pid=7) INFO 05-02 09:00:00 [api_server.py:1800] vLLM API server version 0.11.0\n"
    "(EngineCore_DP0 pid=90) INFO 05-02 09:00:20 [gpu_model_runner.py:2600] Starting to load "
    "model /models/qwen3-8b...\n"
)


def test_a_failing_health_check_is_the_engine_dead() -> None:
    # vLLM's /health asks the engine: 500 (V0's check raised) or 503 (V1's EngineDeadError)
    for status in ("500 Internal Server Error", "503 Service Unavailable"):
        log = V0_UP + (
            'INFO:     10.0.0.9:50312 - "POST /v1/completions HTTP/1.1" 200 OK\n'
            "INFO 05-02 09:05:00 multiproc_worker_utils.py:124] Killing local vLLM worker "
            "processes\n"
            f'INFO:     10.0.0.9:50318 - "GET /health HTTP/1.1" {status}\n'
        )
        d = diagnose(log)
        assert d.label == "engine_dead_other", (status, d.summary)
        assert "/health" in " ".join(d.evidence)
    # guard: a request that failed (a 500 on a completion) is a server up and answering
    failed_request = V0_UP + 'INFO:     10.0.0.9:50312 - "POST /v1/completions HTTP/1.1" 500\n'
    assert diagnose(failed_request).label == "healthy"
    # guard: a health check that passes is up; after an operator's stop, a 503 is the teardown
    assert diagnose(V0_UP + 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n').label == (
        "healthy"
    )


def test_a_traceback_ending_in_a_failed_import_is_a_broken_install() -> None:
    log = V1_STARTING + (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/model_executor/models/whisper.py", '
        "line 675, in get_feature_extractor\n"
        "    hf_processor = self.get_hf_processor(**kwargs)\n"
        '  File "/opt/venv/lib/python3.12/site-packages/transformers/tokenization_x.py", line '
        "42, in <module>\n"
        "    from some_dep.protocol import NewName\n"
        "ImportError: cannot import name 'NewName' from 'some_dep.protocol'\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts.get("signature")) == ("unknown", "import_failed"), d.summary
    # guard: an import that failed and was survived (the engine went on loading) is no failure
    survived = (
        V1_STARTING.splitlines(keepends=True)[0]
        + "ImportError: cannot import name 'NewName' from 'some_dep.protocol'\n"
        + V1_STARTING.splitlines(keepends=True)[1]
    )
    assert diagnose(survived).label == "starting"


def test_a_wrapper_giving_up_on_a_starting_server_is_no_server_still_starting() -> None:
    base = (
        "2026-07-01 10:00:00.360 [Info] (vLLM) Starting vllm-server on port 8001...\n"
        "2026-07-01 10:00:00.362 [Info] (ProcessManager) Process started, PID: 4242\n"
    )
    for line in (
        "2026-07-01 10:00:30.001 [Error] (WrappedServer) vllm-server failed to start within "
        "timeout\n",
        "ERROR: the vLLM server did not become ready within 600 seconds.\n",
    ):
        d = diagnose(base + line)
        assert (d.label, d.facts.get("signature")) == ("unknown", "platform_startup_timeout"), (
            line,
            d.summary,
        )


def test_a_missing_mistral_tokenizer_file_is_the_model_files_missing() -> None:
    log = V1_STARTING + (
        "OSError: Found 0 files matching the pattern: re.compile('^tekken\\\\.json$'). Make sure "
        "that a Mistral tokenizer is present in ['config.json', 'tokenizer.json', "
        "'model-00001-of-00002.safetensors'].\n"
    )
    assert diagnose(log).label == "model_not_found"


def test_the_hub_refusing_a_download_in_another_clients_words_is_model_not_found() -> None:
    # a Rust front end's HTTP client (reqwest), fetching a gated repo's files without a token
    for status in ("401 Unauthorized", "403 Forbidden"):
        log = (
            "Error: Failed to download file 'config.json' from model 'org/gated-7b': request "
            f"error: HTTP status client error ({status}) for url "
            "(https://huggingface.co/org/gated-7b/resolve/main/config.json)\n"
        )
        assert diagnose(log).label == "model_not_found", status
    # guard: the same status from another host is not the Hub's
    other = (
        "Error: request error: HTTP status client error (401 Unauthorized) for url "
        "(https://registry.example/v2/token)\n"
    )
    assert diagnose(other).label != "model_not_found"


def test_a_tool_parser_or_a_refused_long_prompt_shows_requests_being_served() -> None:
    engine_up = (
        "INFO 12-25 13:14:00 llm_engine.py:436] init engine (profile, create kv cache, warmup "
        "model) took 7.87 seconds\n"
    )
    assert diagnose(V1_STARTING).label == "starting"  # guard
    for lines in (
        "DEBUG 12-25 13:14:26 hermes_tool_parser.py:124] delta_text: <tool_call>\n"
        "DEBUG 12-25 13:14:26 hermes_tool_parser.py:125] delta_token_ids: [151657]\n",
        "WARNING 07-12 15:03:35 scheduler.py:194] Input prompt (3622 tokens) is too long and "
        "exceeds limit of 2560\n",
    ):
        d = diagnose(engine_up + lines)
        assert d.label == "healthy", (lines, d.summary)


def test_a_transformers_style_logger_prefix_is_read_through() -> None:
    # "[LEVEL|file.py:line:pid] <timestamp> >> message": transformers' logging format, which
    # training frameworks use and relay a server's output through; here a terminal also cut
    # the long lines at its width (the pieces go on without the prefix)
    lead = "[ERROR|vllm_server.py:211:4242] 2024-10-23 01:48:56,680 >> "
    lines = [
        '  File "/opt/conda/envs/main/lib/python3.10/site-packages/vllm/worker/worker.py", '
        "line 98, in load_model",
        "    self.model_runner.load_model()",
        '  File "/opt/conda/envs/main/lib/python3.10/site-packages/vllm/worker/model_runner.py"'
        ", line 89, in load_model",
        "    self.model = get_model(self.model_config,",
        '  File "/opt/conda/envs/main/lib/python3.10/site-packages/vllm/model_executor/'
        'model_loader.py", line 86, in get_model',
    ]
    width = 141
    log = ""
    for ln in lines:
        full = lead + ln
        log += "".join(full[i : i + width] + "\n" for i in range(0, len(full), width))
    d = diagnose(log)
    assert d.label == "unknown", d.summary  # a traceback cut before its exception
    plain = "[INFO|configuration_utils.py:733] 2024-10-23 01:48:50,001 >> loading file\n"
    assert diagnose(plain).label == "starting"  # guard: informational lines only


def test_a_kv_connector_failing_to_move_a_request_is_a_failure_not_a_start() -> None:
    # disaggregated prefill / decode: the connector's transport cannot reach the other side
    for line in (
        "(Worker_DP0_TP5 pid=25432) ERROR 12-10 03:24:54 [mooncake_connector.py:410] Mooncake "
        "transfer failed for request cmpl-09be-0\n",
        "W0613 08:28:11.555796    7053 ucx_utils.cpp:43] Unexpected UCX error: Endpoint timeout\n",
        "(Worker_TP0 pid=865) ERROR 05-01 15:00:23 [nixl_connector.py:1263] NIXL transfer "
        "failure: handshake_setup_failed\n",
    ):
        d = diagnose(line)
        assert (d.label, d.facts.get("signature")) == ("unknown", "kv_transfer_failed"), (
            line,
            d.summary,
        )
        # the same, streamed after the server was up storing requests' KV
        s = LogDiagnoser()
        s.feed("[2025-06-13 08:28:11,553] LMCache INFO: Storing KV cache for 5 out of 5 tokens\n")
        s.feed(line)
        assert s.diagnosis().label == "unknown"


def test_frames_behind_a_prefix_of_unknown_shape_still_show_a_traceback() -> None:
    # a console's own marks before each line (a serverless worker's web console, pasted):
    # the frames are still a traceback, cut before its exception
    lines = (
        '  File "/src/engine.py", line 103, in _initialize_llm',
        "    raise e",
        '  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/arg_utils.py", line 520, in '
        "create_engine_config",
        "    model_config = ModelConfig(",
    )
    log = "".join(f"[sh1003a97ylbp1] [info] 6{ln}\n" for ln in lines)
    assert diagnose(log).label == "unknown"
    # guard: a message that names a file and line in passing is no frame
    note = '[sh1003a97ylbp1] [info] see File "/src/engine.py", line 103 for the defaults\n'
    assert diagnose(note).label == "starting"
