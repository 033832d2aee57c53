"""What blind set ZH's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

V1_INPROC_CAPTURED = (
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.80it/s]\n"
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 5/5 "
    "[00:00<00:00, 41.38it/s]\n"
    "Capturing CUDA graphs (decode, FULL): 100%|██████████| 4/4 [00:00<00:00, 54.59it/s]\n"
)


def test_an_in_process_engine_whose_program_goes_on_after_its_last_capture_is_up() -> None:
    # TRL / an RL trainer building vLLM in its process with vLLM's INFO lines off: the last
    # CUDA-graph capture done, then the trainer's own output
    log = V1_INPROC_CAPTURED + (
        "2026-04-04 18:14:28,663 [INFO] train: Starting training (rho=0.10)...\n"
        "***** Running training *****\n"
    )
    d = diagnose(log)
    assert d.label == "healthy", d.summary
    assert d.facts.get("in_process") == "true"
    # guard: the capture done and nothing after it is still starting (the engine's last
    # init lines, or a server's HTTP start, may follow)
    assert diagnose(V1_INPROC_CAPTURED).label == "starting"
    # guard: a capture not yet done is starting, whatever follows
    half = V1_INPROC_CAPTURED.replace("4/4 [00:00<00:00", "2/4 [00:00<00:00")
    assert diagnose(half).label == "starting"


IN_PROCESS_SERVED = (
    "INFO 02-28 15:40:00 llm_engine.py:436] init engine (profile, create kv cache, warmup "
    "model) took 30.10 seconds\n"
    "Processed prompts: 100%|██████████| 8/8 [00:03<00:00,  2.51it/s]\n"
)
PROGRAM_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/tmp/ipykernel_59272/2747053641.py", line 14, in <module>\n'
    "    trainer.train()\n"
    '  File "/opt/conda/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 934, '
    "in _prepare_inputs\n"
    "    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]\n"
    "IndexError: argmax(): Expected reduction dim 1 to have non-zero size.\n"
)


def test_the_program_holding_an_engine_stopping_on_an_uncaught_exception_is_a_failure() -> None:
    d = diagnose(IN_PROCESS_SERVED + PROGRAM_TRACEBACK)
    assert d.label == "unknown", d.summary
    assert "IndexError" in " ".join(d.evidence)
    # guard: a server's log with a client's traceback pasted after it is still a server up
    server = (
        "INFO 02-28 15:39:00 api_server.py:712] vLLM API server version 0.7.3\n"
        "INFO:     Application startup complete.\n"
        'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    )
    assert diagnose(server + PROGRAM_TRACEBACK).label == "healthy"
    # guard: a traceback the program survived (its progress goes on after it) is no stop
    survived = (
        IN_PROCESS_SERVED
        + PROGRAM_TRACEBACK
        + ("Processed prompts: 100%|██████████| 8/8 [00:03<00:00,  2.60it/s]\n")
    )
    assert diagnose(survived).label == "healthy"


ENGINE_UP = (
    "(EngineCore_DP0 pid=151) INFO 12-15 18:57:09 [core.py:250] init engine (profile, create "
    "kv cache, warmup model) took 69.12 seconds\n"
    "(APIServer pid=150) INFO 12-15 18:57:10 [api_server.py:1725] Supported tasks: ['generate']\n"
)


def _engine_logged(*lines: str) -> str:
    return "".join(
        f"(EngineCore_DP0 pid=151) ERROR 12-15 18:57:10 [core.py:918] {ln}\n" for ln in lines
    )


def test_a_utility_call_the_engine_reports_failed_is_survived() -> None:
    frames = (
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/lora/worker_manager.py", line 102,'
        " in _load_adapter",
        "    peft_helper = PEFTHelper.from_local_dir(",
    )
    log = ENGINE_UP + _engine_logged("Invocation of add_lora method failed", *frames)
    d = diagnose(log)
    assert d.label == "unknown", d.summary  # cut before its exception: no cause shown
    # guard: the same cut traceback from the engine's error logger without that header is
    # the engine's fatal error
    assert diagnose(ENGINE_UP + _engine_logged(*frames)).label == "engine_dead_other"


def test_a_torchserve_workers_relayed_output_is_read_through() -> None:
    lead = "2024-11-18T16:43:45,497 [INFO ] W-9000-model_1.0-stdout MODEL_LOG - "
    lines = (  # cut above: the header line is not in the excerpt
        '  File "/home/venv/lib/python3.9/site-packages/vllm/engine/llm_engine.py", line 301, '
        "in __init__",
        "    self.model_executor = executor_class(",
        '  File "/home/venv/lib/python3.9/site-packages/huggingface_hub/file_download.py", '
        "line 301, in _request_wrapper",
        "    hf_raise_for_status(response)",
    )
    log = "2024-11-18T16:43:40,101 [INFO ] W-9000-model_1.0 TS_METRICS - starting\n" + "".join(
        f"{lead}{ln}\n" for ln in lines
    )
    assert diagnose(log).label == "unknown"  # a traceback cut before its exception


def test_a_value_refused_with_the_list_of_valid_ones_is_a_bad_argument() -> None:
    for line in (
        "(APIServer pid=74)   Value error, Unknown attention backend: 'B12X'. Valid options "
        "are: FLASH_ATTN, TRITON_ATTN, FLASHINFER\n",
        "ValueError: Unknown reasoning parser: 'deepseek_r2'. Valid choices are: deepseek_r1\n",
    ):
        d = diagnose(line)
        assert (d.label, d.facts.get("signature")) == ("bad_argument", "value_not_among_choices")
        assert "Unknown " in d.summary


def test_waking_the_engine_from_sleep_mode_failing_is_a_failure() -> None:
    up = (
        "(APIServer pid=68) INFO:     Application startup complete.\n"
        '(APIServer pid=68) INFO:     127.0.0.1:44700 - "POST /sleep?level=1 HTTP/1.1" 200 OK\n'
    )
    d = diagnose(up + '(APIServer pid=68) INFO:     127.0.0.1:1 - "POST /wake_up HTTP/1.1" 500\n')
    assert (d.label, d.facts.get("signature")) == ("unknown", "wake_up_failed"), d.summary
    # guard: a wake-up that succeeded is a server up
    ok = up + '(APIServer pid=68) INFO:     127.0.0.1:1 - "POST /wake_up HTTP/1.1" 200 OK\n'
    assert diagnose(ok).label == "healthy"


def test_a_download_whose_integrity_check_failed_is_the_models_files_out_of_reach() -> None:
    for line in (
        "modelscope.hub.errors.FileIntegrityError: File /root/.cache/modelscope/hub/._____temp/"
        "org/m/model.safetensors integrity check failed, expected sha256 signature is ab12, "
        "actual is cd34, the download may be incomplete, please try again\n",
        "OSError: Consistency check failed: file should be of size 4976698672 but has size "
        "1048576 (model-00001-of-00004.safetensors).\n",
    ):
        d = diagnose(line)
        assert (d.label, d.facts.get("signature")) == ("model_not_found", "weights_file_corrupt")


def test_vllm_omnis_stage_tag_is_read_through() -> None:
    # vLLM-Omni puts "[Stage-N] " between a process's prefix and the record
    log = "".join(
        f"(EngineCore_DP0 pid=1825) [Stage-2] ERROR 02-02 18:25:19 [core.py:936] {ln}\n"
        for ln in (
            '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line '
            "1786, in _call_impl",
            "    return forward_call(*args, **kwargs)",
        )
    )
    assert diagnose(log).label == "engine_dead_other"  # the engine's error logger's traceback
