"""What blind set Z2's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose


def test_argparse_s_message_alone_is_still_a_rejected_argument() -> None:
    d = diagnose("unrecognized arguments: --max-lora-extra 12\n")
    assert (d.label, d.facts.get("signature")) == ("bad_argument", "argparse_error"), d.summary
    assert "--max-lora-extra" in d.hint


@pytest.mark.parametrize(
    "line",
    [
        "./run.sh: line 7: vllm: command not found",
        "bash: python3.12: command not found",
        "sh: 1: vllm: not found",
        "zsh: command not found: vllm",
        'docker: Error response from daemon: failed to create task: exec: "vllm": executable '
        "file not found in $PATH: unknown.",
    ],
)
def test_a_shell_that_finds_no_such_program_is_the_environment(line: str) -> None:
    d = diagnose("+ vllm serve org/m --port 8000\n" + line + "\n")
    assert d.label == "unknown", (line, d.summary)
    assert d.facts.get("signature") == "command_not_found", (line, d.summary)


def test_words_about_a_missing_thing_are_no_missing_program() -> None:
    up = "INFO:     Application startup complete.\n"
    for line in ("INFO: route /v2 not found: using /v1", "WARNING: tokenizer.json: not found yet"):
        assert diagnose(up + line + "\n").label == "healthy", line


def test_an_old_ipython_traceback_through_unsloth_s_loader_is_the_engine_s() -> None:
    # IPython before 8 prints a frame as "path in function(args)", in colour
    trace = (
        "\x1b[0;31mRuntimeError\x1b[0m                              Traceback (most recent "
        "call last)\n"
        "\x1b[0;32m/env/lib/python3.12/site-packages/unsloth_zoo/vllm_utils.py\x1b[0m in "
        "\x1b[0;36mload_vllm\x1b[0;34m(model_name, config)\x1b[0m\n"
        "\x1b[0;31mRuntimeError\x1b[0m: Tried to drop a graph node that still has users\n"
    )
    d = diagnose(trace)
    assert d.label == "engine_dead_other", d.summary
    assert diagnose(trace.replace("unsloth_zoo/vllm_utils.py", "mylib/x.py")).label == "unknown"


def test_a_path_that_takes_only_online_quantization_refusing_a_prequantized_checkpoint() -> None:
    d = diagnose("AssertionError: assert not quant_config.is_checkpoint_fp8_serialized\n")
    assert d.label == "quantization_unsupported", d.summary


def test_a_program_missing_after_the_server_came_up_is_a_side_script_s() -> None:
    up = (
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.1\n"
        "INFO:     Application startup complete.\n"
    )
    for line in ("./watch.sh: line 9: jq: command not found", "sh: 1: curl: not found"):
        d = diagnose(up + line + "\n")
        assert d.label == "healthy", (line, d.summary)


def test_the_engine_s_busy_loop_traceback_is_its_death_whatever_access_lines_follow() -> None:
    # found re-reading a dev miss: several API server processes print their in-flight requests'
    # access lines between and after the engine core's traceback lines
    core = "(EngineCore_DP0 pid=70) ERROR 10-28 20:10:56 [v1/engine/core.py:710] "
    ok = '(ApiServer_{} pid=7{}) INFO:     127.0.0.1:455{} - "POST /v1/completions HTTP/1.1" 200\n'
    frames = [
        '  File "/venv/vllm/v1/engine/core.py", line 754, in _process_engine_step',
        "    outputs, model_executed = self.step_fn()",
        '  File "/venv/vllm/v1/engine/core.py", line 325, in step_with_batch_queue',
        "    scheduler_output = self.scheduler.schedule()",
    ]
    log = "".join(core + f + "\n" + ok.format(i, i, i) for i, f in enumerate(frames))
    d = diagnose(log)
    assert d.label == "engine_dead_other", d.summary
    # a new run of the server after it, up: the old traceback is history
    restart = (
        "INFO 10-28 20:12:00 [api_server.py:1] vLLM API server version 0.11.0\n"
        "INFO:     Application startup complete.\n"
    )
    assert diagnose(log + restart).label == "healthy"
