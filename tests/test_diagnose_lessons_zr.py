"""What blind set ZR's misses taught (2026-12-06), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose
from kimi_ops.diagnose.clean import _starts_record, join_wrapped

_SERVED = (
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
    'INFO:     10.0.3.7:51220 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)


def _asgi_traceback(exc: str, frame: str = "vllm/entrypoints/openai/serving_chat.py") -> str:
    return (
        'INFO:     10.0.3.7:51224 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server '
        "Error\n"
        "ERROR:    Exception in ASGI application\n"
        "Traceback (most recent call last):\n"
        f'  File "/usr/lib/python3/dist-packages/{frame}", line 88, in create_chat_completion\n'
        '  File "/usr/lib/python3/dist-packages/outlines_core/integrations.py", line 4, in '
        "<module>\n"
        f"{exc}\n"
    )


def test_a_generic_cause_in_an_asgi_request_traceback_fails_that_request_only() -> None:
    # uvicorn prints "Exception in ASGI application" over the traceback of one request the app
    # failed: it answered 500 and went on serving. An import that failed inside the handler (a
    # guided-decoding backend importing a name transformers moved) is that request's failure
    d = diagnose(
        _SERVED + _asgi_traceback("ImportError: cannot import name 'LogitsWarper' from 'x.y'")
    )
    assert (d.label, d.lifecycle) == ("healthy", "serving"), d.summary
    # guard: the engine dead under the same header is still the server's failure
    dead = diagnose(
        _SERVED
        + _asgi_traceback(
            "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop "
            "has errored already."
        )
    )
    assert dead.label == "engine_dead_other", dead.summary
    # guard: the same import failing at startup, no request served, is a failure
    assert diagnose("ImportError: cannot import name 'LogitsWarper' from 'x.y'\n").label == (
        "unknown"
    )


def test_transformers_autoconfig_lookup_of_an_unknown_model_type_is_named() -> None:
    # AutoConfig looks config.json's model_type up in CONFIG_MAPPING; an unknown type raises
    # KeyError there (before its "does not recognize this architecture" ValueError): a
    # traceback cut between the two is the installed transformers not knowing the model
    log = (
        "INFO 09-24 13:01:18 api_server.py:177] Started engine process with PID 76\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/transformers/models/auto/configuration_auto.py"'
        ", line 1021, in from_pretrained\n"
        '    config_class = CONFIG_MAPPING[config_dict["model_type"]]\n'
        '  File "/usr/lib/python3/dist-packages/transformers/models/auto/configuration_auto.py"'
        ", line 723, in __getitem__\n"
        "    raise KeyError(key)\n"
        "KeyError: 'glm4v_moe'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/vllm/entrypoints/openai/api_server.py", line '
        "571, in <module>\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts.get("signature")) == ("unknown", "model_type_unknown"), d.summary


def test_a_relayed_engine_logger_traceback_cut_before_its_exception_is_the_engine_dying() -> None:
    # V0's engine process logs its fatal errors ("[engine.py:N]"); a launcher that relays each
    # line at its own level drops vLLM's level and time and keeps the location
    frames = (
        '[engine.py:280]   File "/venv/lib/python3.12/site-packages/vllm/worker/model_runner.py'
        '", line 1839, in execute_model\n'
        "[engine.py:280]     output: SamplerOutput = self.model.sample(\n"
        '[engine.py:280]   File "/venv/lib/python3.12/site-packages/vllm/model_executor/layers/'
        'sampler.py", line 288, in forward\n'
    )
    relayed = "".join(
        f"2025-05-07T23:03:01.158Z DEBUG launcher::subprocess: {line}\n"
        for line in frames.splitlines()
    )
    # (the bare form after another logger's line, as a paste of the relay's output shows it)
    bare = "[llm_engine.py:431] init engine (profile, create kv cache) took 9.76 seconds\n" + frames
    for log in (bare, relayed):
        d = diagnose(log)
        assert d.label == "engine_dead_other", (log, d.summary)
    # guard: another logger's location on the same frames is no engine death (cut: unknown)
    other = bare.replace("[engine.py:280]", "[serving_chat.py:280]")
    assert diagnose(other).label == "unknown"


def test_an_engine_core_subclass_reporting_a_fatal_error_is_the_engine_dying() -> None:
    # projects built on vLLM run the engine core under their own class name and log its fatal
    # error the same way ("<Name>EngineCoreProc encountered a fatal error."), cut before the
    # exception
    log = (
        "StageEngineCoreProc encountered a fatal error.\n"
        "Traceback (most recent call last):\n"
        '  File ".../vllm/v1/engine/core.py", line 1364, in run_busy_loop\n'
    )
    d = diagnose(log)
    assert d.label == "engine_dead_other", d.summary


def test_torchs_oom_message_head_alone_is_an_oom() -> None:
    # a quote that kept torch's account without "CUDA out of memory." before it, any torch
    for text in (
        "    Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of\n"
        "    which 120.88 MiB is free. Including non-PyTorch memory, this process has\n",
        "Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.52 GiB already "
        "allocated; 4.75 MiB free; 14.63 GiB reserved in total by PyTorch)\n",
    ):
        d = diagnose(text)
        assert d.label == "cuda_oom", (text, d.summary)
        assert d.facts.get("alloc"), d.facts


def test_an_engine_core_started_by_another_program_is_an_in_process_engine() -> None:
    # Ray Data's vLLM stage runs the engine in its map workers; V1's engine core is a child
    # process, its lines under both prefixes: once initialised, the program drives it
    prefix = "(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=41262, ip=10.0.70.78) "
    log = (
        f"{prefix}(EngineCore_DP0 pid=41340) INFO 11-13 00:47:08 [kv_cache_utils.py:1087] GPU KV "
        "cache size: 269,568 tokens\n"
        f"{prefix}(Worker pid=41360) INFO 11-13 00:47:12 [gpu_model_runner.py:3480] Graph "
        "capturing finished in 4 secs, took 0.44 GiB\n"
        f"{prefix}(EngineCore_DP0 pid=41340) INFO 11-13 00:47:12 [core.py:210] init engine "
        "(profile, create kv cache, warmup model) took 21.28 seconds\n"
    )
    d = diagnose(log)
    assert (d.label, d.facts.get("in_process")) == ("healthy", "true"), d.summary
    # guard: the same engine core in a server (no other program around it) is still starting
    bare = diagnose(log.replace(prefix, ""))
    assert bare.label == "starting", bare.summary


def test_offline_prompts_being_added_or_the_engine_loop_waking_is_serving() -> None:
    # the LLM class's "Adding requests" bar (its engine is built, the caller sent prompts) and
    # V1's engine core waking from idle for requests ("EngineCore loop active.", DEBUG)
    adding = (
        "INFO 01-16 05:15:09 [llm.py:343] Supported tasks: ['generate']\n"
        "Adding requests:   0%|          | 0/4 [00:00<?, ?it/s]\n"
    )
    woke = (
        "(EngineCore_DP0 pid=3075745) DEBUG 02-25 03:00:14 [v1/engine/core.py:1049] EngineCore "
        "loop active.\n"
    )
    for log in (adding, woke):
        d = diagnose(log)
        assert d.label == "healthy", (log, d.summary)


def test_a_vllm_commands_own_parser_error_is_a_rejected_argument() -> None:
    # parser.error(MSG) of a vLLM command's own check prints argparse's "PROG: error: MSG"
    for line in (
        "vllm bench <bench_type> [options] serve: error: Cannot use 'random' dataset with "
        "--dataset-path.",
        "api_server.py: error: --enable-auto-tool-choice requires --tool-call-parser",
    ):
        d = diagnose(line + "\n")
        assert d.label == "bad_argument", (line, d.summary)
    # guard: a compiler's "PROG: error:" is no vLLM argument
    assert diagnose("gcc: error: unrecognized command-line option '-mavx512'\n").label != (
        "bad_argument"
    )


def test_a_ray_placement_group_that_never_came_is_not_a_size_vllm_refused() -> None:
    # later releases warn that the group asks for more GPUs than the cluster has now, wait for
    # it (an autoscaler may add nodes) and give up after a timeout: the cluster never offered
    # the GPUs (the engine dies of it, or the program stops), not a parallel size vLLM refused
    log = (
        "WARNING 04-16 02:35:59 [ray_utils.py:342] The number of required GPUs exceeds the "
        "total number of available GPUs in the placement group.\n"
        "INFO 04-16 03:18:29 [ray_utils.py:233] Waiting for creating a placement group of specs "
        "for 2550 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]\n"
        "Error: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}, "
        "{'GPU': 1.0}] within 1800 seconds. See `ray status` to make sure the cluster has "
        "enough resources.\n"
    )
    d = diagnose(log)
    assert d.label != "bad_argument" and d.lifecycle == "failed", d.summary
    # guard: vLLM <= 0.8 refusing the size outright is a rejected setting
    refused = diagnose(
        "ValueError: The number of required GPUs exceeds the total number of available GPUs in "
        "the placement group.\n"
    )
    assert refused.label == "bad_argument", refused.summary


def test_a_programs_own_error_line_after_a_wrapped_piece_begins_a_record() -> None:
    # a hard wrap joins a piece of exactly the width with the next line when that line begins
    # no record; a program's own "Error: ..." line (no exception type before it) begins one
    assert _starts_record("Error: Cannot provide a placement group within 1800 seconds.")
    width = 80
    line = "INFO 04-16 02:35:59 [ray_utils.py:335] " + "x" * (2 * width - 40)  # two pieces
    text = (
        "\n".join(line[k : k + width] for k in range(0, len(line), width))
        + "\nError: Cannot provide a placement group within 1800 seconds.\n"
    )
    joined = join_wrapped(text, width)
    assert "\nError: Cannot provide" in joined and line in joined, joined
    # guard: a piece that begins no record is still joined to the line it was cut from
    assert not _starts_record("ed placement group.")
