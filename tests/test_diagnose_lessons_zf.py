"""What blind set ZF's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

V0_STARTING = (
    "INFO 03-04 10:00:00 llm_engine.py:87] Initializing an LLM engine with config: "
    "model='/models/mixtral', tensor_parallel_size=2\n"
    "INFO 03-04 10:01:10 llm_engine.py:337] # GPU blocks: 5120, # CPU blocks: 4096\n"
)


def test_a_library_that_cannot_find_libcuda_is_the_host_not_the_engine() -> None:
    # Triton's own search for the driver library, raised while the engine profiles
    log = V0_STARTING + (
        "ERROR 03-04 10:01:12 worker_base.py:145] AssertionError: libcuda.so cannot found!\n"
        "ERROR 03-04 10:01:12 worker_base.py:145] Possible files are located at "
        "['/usr/lib64/libcuda.so.1'].Please create a symlink of libcuda.so to any of the file.\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts.get("signature")) == ("unknown", "shared_library_missing"), d.summary
    assert "libcuda.so" in d.summary
    # guard: an assertion about something else in the same place is still the engine's
    other = V0_STARTING + "ERROR 03-04 10:01:12 worker_base.py:145] AssertionError: bad shape\n"
    assert diagnose(other).label == "engine_dead_other"


RAY_HEAD = (
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 29, '
    "in _raise_exception_on_finish\n"
    "    task.result()\n"
)


def test_a_vllm_ray_actor_raising_a_programming_error_is_the_engine_dying() -> None:
    for actor, method in (("RayWorkerWrapper", "execute_method"), ("_AsyncLLMEngine", "step")):
        log = RAY_HEAD + (
            f"ray.exceptions.RayTaskError(KeyError): ray::{actor}.{method}() (pid=4242, "
            f"ip=10.0.0.2, repr=<vllm.engine.x.{actor} object at 0x7f00>)\n"
        )
        d = diagnose(log)
        assert d.label == "engine_dead_other", (actor, d.summary)
        assert d.facts.get("signature") == "engine_actor_bug"
    # guard: a RuntimeError may be any cause: cut before its message, it shows none
    cut = RAY_HEAD + (
        "ray.exceptions.RayTaskError(RuntimeError): ray::RayWorkerWrapper.execute_method() "
        "(pid=4242, ip=10.0.0.2)\n"
    )
    assert diagnose(cut).label == "unknown"
    # guard: another framework's actor is not vLLM's engine
    other = "ray.exceptions.RayTaskError(KeyError): ray::RolloutWorker.generate() (pid=1)\n"
    assert diagnose(other).facts.get("signature") != "engine_actor_bug"


def test_the_platform_giving_up_on_a_starting_server_is_no_server_still_starting() -> None:
    base = V0_STARTING + (
        "INFO 03-04 10:02:00 backends.py:460] Dynamo bytecode transform time: 40.10 s\n"
    )
    assert diagnose(base).label == "starting"  # guard
    for line in (
        "Runner failed with exception: Runner has been initializing for too long: 600 seconds\n",
        "The primary container for production variant AllTraffic did not pass the ping health "
        "check. Please check CloudWatch logs for this endpoint.\n",
    ):
        d = diagnose(base + line)
        assert (d.label, d.facts.get("signature")) == ("unknown", "platform_startup_timeout"), (
            d.summary
        )
        assert "deadline" in d.hint


def test_ray_serve_application_ready_is_up() -> None:
    log = (
        "(ServeReplica:default:LLMServer pid=5150) INFO 08-01 10:00:00 [loader.py:40] Loading "
        "weights took 3.10 seconds\n"
        "INFO 2025-08-01 10:00:30,117 serve 5001 -- Application 'default' is ready at "
        "http://127.0.0.1:8000/.\n"
    )
    assert diagnose(log).label == "healthy"


def test_a_serving_benchmark_result_header_is_a_server_that_answered() -> None:
    log = (
        "Starting main benchmark run...\n"
        "Traffic request rate: 2.0\n"
        "============ Serving Benchmark Result ============\n"
        "Successful requests:                     64\n"
    )
    assert diagnose(log).label == "healthy"
    # guard: the run not yet finished is no proof
    assert diagnose("Starting main benchmark run...\nTraffic request rate: 2.0\n").label != (
        "healthy"
    )


def test_an_unknown_quantization_method_is_a_setting_refused_by_name() -> None:
    log = (
        '  File "/opt/vllm/vllm/config.py", line 140, in _verify_quantization\n'
        "    raise ValueError(\n"
        "ValueError: Unknown quantization method: marlin. Must be one of ['awq', 'gptq', "
        "'squeezellm'].\n"
    )
    d = diagnose(log)
    assert d.label == "bad_argument", d.summary
    assert "marlin" in d.summary and "'awq'" in d.hint
    # guard: a method it knows with no kernel on this GPU is the quantization's
    gpu = (
        "ValueError: The quantization method awq is not supported for the current GPU. Minimum "
        "capability: 75. Current capability: 70.\n"
    )
    assert diagnose(gpu).label == "quantization_unsupported"


def test_an_unretrieved_future_names_the_exception_its_cut_traceback_lacks() -> None:
    log = (
        "INFO 02-01 08:00:00 async_llm_engine.py:371] Received request cmpl-1\n"
        "Future exception was never retrieved\n"
        "future: <Future finished exception=IndexError('index 5 is out of bounds')>\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", '
        "line 359, in run_engine_loop\n"
        "    has_requests_in_progress = await self.engine_step()\n"
    )
    d = diagnose(log)
    assert d.label == "engine_dead_other", d.summary
    assert "IndexError: index 5 is out of bounds" in d.evidence
    # guard: without the future's line the cut traceback shows no exception
    cut = log.replace(
        "future: <Future finished exception=IndexError('index 5 is out of bounds')>\n", ""
    )
    assert diagnose(cut).label == "unknown"
