"""What blind set ZI's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

V1_INPROC_INIT = (
    "INFO 05-02 09:10:11 [__init__.py:239] Platform plugin cpu is activated\n"
    "(EngineCore pid=4242) INFO 05-02 09:11:40 [core.py:283] init engine (profile, create kv "
    "cache, warmup model) took 41.20 seconds\n"
    "(EngineCore pid=4242) INFO 05-02 09:11:41 [vllm.py:750] Asynchronous scheduling is "
    "disabled.\n"
)


def test_the_llm_class_logging_after_its_engine_is_built_is_an_in_process_engine_up() -> None:
    # the LLM class's constructor goes on in the caller's process once its engine is built:
    # any line of its own logger (vllm/entrypoints/llm.py) then, even one a paste cut short
    for tail in ("Supported tasks: ['generate']", "Suppo", "Sampling params are ignored"):
        d = diagnose(V1_INPROC_INIT + f"INFO 05-02 09:11:41 [llm.py:391] {tail}\n")
        assert d.label == "healthy", (tail, d.summary)
        assert d.facts.get("in_process") == "true"
    # guard: the engine's own lines after its init are no caller going on
    assert diagnose(V1_INPROC_INIT).label == "starting"
    # guard: another vLLM module's line in the caller's process is not the LLM class's
    other = V1_INPROC_INIT + "INFO 05-02 09:11:41 [utils.py:12] something else\n"
    assert diagnose(other).label == "starting"


OMNI_STARTED = (
    "(APIServer pid=1568) INFO 01-04 14:27:50 [api_server.py:1272] vLLM API server version "
    "0.14.0\n"
    "(Worker pid=1802) [Stage-0] INFO 01-04 14:28:10 [gpu_model_runner.py:3000] Model loading "
    "took 20.1 GiB\n"
)


def test_vllm_omni_finishing_a_request_is_a_server_serving() -> None:
    # vLLM-Omni (multi-stage / diffusion models on vLLM's engine) prints its own request
    # lines, not vLLM's throughput or access lines: a request generated, its metrics record
    for served in (
        "(Worker pid=1802) [Stage-0] INFO 01-04 14:28:29 [diffusion_engine.py:80] Generation "
        "completed successfully.\n",
        "(APIServer pid=1568) INFO 01-04 14:28:29 [log_utils.py:529] {'type': "
        "'request_level_metrics',\n"
        "(APIServer pid=1568) INFO 01-04 14:28:29 [log_utils.py:529]  'request_id': "
        "'chatcmpl-0123456789abcdef',\n",
    ):
        d = diagnose(OMNI_STARTED + served)
        assert d.label == "healthy", d.summary
    # guard: the stages loaded and nothing served yet is starting
    assert diagnose(OMNI_STARTED).label == "starting"
    # guard: a request served, then the engine dead, is a failure
    dead = (
        OMNI_STARTED
        + "(Worker pid=1802) [Stage-0] INFO 01-04 14:28:29 [diffusion_engine.py:80] Generation "
        "completed successfully.\n"
        "(APIServer pid=1568) ERROR 01-04 14:30:00 [async_llm.py:500] EngineCore encountered "
        "an issue. See stack trace (above) for the root cause.\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
    )
    assert diagnose(dead).label != "healthy"


def test_a_custom_op_package_built_for_another_soc_is_an_unsupported_device() -> None:
    # Ascend's custom-op package (vllm-ascend's kernels) built for one SoC on a device of
    # another: the kernels do not run here, whatever the weights did before
    log = (
        "INFO 09-03 08:14:32 [default_loader.py:262] Loading weights took 3.10 seconds\n"
        "[ERROR] the socversion Ascend910B4 of bin package does not match the current device "
        "socversion Ascend310P1. Please modify default socversion in run.sh.\n"
    )
    d = diagnose(log)
    assert d.label == "unsupported_gpu", d.summary
    assert "Ascend310P1" in d.hint
    # guard: the weights loaded and nothing else is starting
    assert diagnose(log.splitlines(keepends=True)[0]).label == "starting"


def test_a_hub_cache_blob_that_never_finished_downloading_is_the_model_not_obtained() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/shutil.py", line 260, in copyfile\n'
        "    with open(src, 'rb') as fsrc:\n"
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/hf/models--org--m-7b/"
        "blobs/0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9.incomplete'\n"
        "EngineCore failed to start.\n"
    )
    d = diagnose(log)
    assert d.label == "model_not_found", d.summary
    # guard: another missing file in the same place is no download's
    other = log.replace(".incomplete'", ".lock'")
    assert diagnose(other).label != "model_not_found"


def test_the_kv_shortfall_line_cut_where_a_console_wrapped_it_still_names_it() -> None:
    head = (
        "INFO:     # GPU blocks: 2214, # CPU blocks: 2048\n"
        "INFO:     Maximum sequence length allowed in the cache: 35424\n"
    )
    d = diagnose(
        head + "ERROR:    The model's max seq len (131072) is larger than the maximum number of\n"
    )
    assert d.label == "kv_cache_insufficient", d.summary
    assert "131072" in d.summary
    # guard: the same words going on to something else are not the KV cache's
    other = "ERROR:    The model's max seq len (131072) is larger than the maximum number of GPUs\n"
    assert diagnose(head + other).label != "kv_cache_insufficient"
