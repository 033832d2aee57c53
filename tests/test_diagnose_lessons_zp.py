"""What blind set ZP's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose


def test_the_structured_output_backend_failing_one_requests_grammar_is_a_serving_engine() -> None:
    # V1's structured-output backend (xgrammar) logs at ERROR, per request, that a token did
    # not fit the grammar; only an engine generating for requests prints it, and it goes on
    text = "".join(
        f"(EngineCore_DP0 pid=812) ERROR 02-11 09:14:{s:02d} [backend_xgrammar.py:161] Failed to "
        f"advance FSM for request chatcmpl-3c1d9a77e0 for tokens {tok}. Please file an issue.\n"
        for s, tok in ((5, 318), (5, 9011), (6, 42))
    )
    d = diagnose(text)
    assert d.label == "healthy", d.summary
    # guard: the engine dying after it is still the engine dying
    dead = diagnose(
        text + "(EngineCore_DP0 pid=812) ERROR 02-11 09:14:07 [core.py:710] EngineCore "
        "encountered a fatal error.\n"
        "(EngineCore_DP0 pid=812) RuntimeError: CUDA error: an illegal memory access was "
        "encountered\n"
    )
    assert dead.label not in ("healthy", "starting"), dead.summary


def test_v0s_stats_line_in_its_oldest_wording_is_a_serving_engine() -> None:
    # vLLM 0.1's scheduler logged "Throughput: .., Running: N reqs, Swapped: N reqs, ..." where
    # later V0 says "Avg prompt throughput: .., Running: N reqs, Swapped: N reqs, ..."
    text = "".join(
        f"INFO 09-03 11:20:{s:02d} scheduler.py:271] Throughput: {t} tokens/s, Running: {r} "
        f"reqs, Swapped: 0 reqs, Pending: {p} reqs, GPU KV cache usage: 41.0%, CPU KV cache "
        "usage: 0.0%\n"
        for s, t, r, p in ((1, "0.0", 1, 0), (6, "212.4", 1, 0), (11, "0.0", 0, 1))
    )
    d = diagnose(text)
    assert d.label == "healthy", d.summary
    # guard: an OOM during those requests stands
    oom = diagnose(
        text + "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert oom.label == "cuda_oom", oom.summary


def test_an_exception_line_a_paste_set_in_markdown_bold_is_the_exception() -> None:
    # a forum post emphasised the traceback's last line: **KeyError: '...'**
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/env/lib/python3.11/site-packages/vllm/entrypoints/llm.py", line 177, '
        "in __init__\n"
        "[rank0]:     self.llm_engine = LLMEngine.from_engine_args(\n"
        '[rank0]:   File "/env/lib/python3.11/site-packages/vllm/engine/llm_engine.py", line 573, '
        "in from_engine_args\n"
        "[rank0]:     engine = cls(\n"
        "[rank0]: **KeyError: 'model.layers.3.self_attn.o_proj.weight'**\n"
    )
    d = diagnose(text)
    assert d.label == "engine_dead_other", d.summary
    assert "KeyError" in d.summary
    # guard: absl's "*** SIGBUS received ... ***" banner is no bold text and keeps its reading
    bus = diagnose("(RayWorker pid=4856) *** SIGBUS received at time=1695209888 on cpu 3 ***\n")
    assert bus.label == "engine_killed", bus.summary


def test_a_benchmarks_request_throughput_result_is_a_server_that_served() -> None:
    # a benchmark client's result against the server ("Request throughput: N requests/s", as
    # benchmark_guided_serving.py prints it): its requests completed
    head = "Starting benchmark with 50 requests...\nRequest rate: 4.0 requests/second\n"
    result = (
        "Completed requests: 50/50 (100.00%)\n"
        "Request throughput: 3.41 requests/s\n"
        "Output Token throughput: 1811.20 tokens/s\n"
    )
    d = diagnose(head + result)
    assert d.label == "healthy", d.summary
    # guard: the client's own settings before any request are no result
    assert diagnose(head).label != "healthy"


def test_a_tool_parsers_json_record_is_a_request_being_handled_as_its_text_line_is() -> None:
    # vLLM's JSON formatter has no line number: the record reads "[hermes_tool_parser.py] ..."
    # where the text formatter prints "[hermes_tool_parser.py:128] ..." (found by the JSON
    # decoration test on one of ZP's excerpts)
    record = (
        '{"asctime": "2026-05-28 02:39:59,000", "levelname": "DEBUG", "name": '
        '"vllm.entrypoints.openai.tool_parsers.hermes_tool_parser", "process": 1, '
        '"message": "No tool call tokens found!"}\n'
    )
    assert diagnose(record * 3).label == "healthy"
    text = "DEBUG 05-28 02:39:59 [hermes_tool_parser.py:131] No tool call tokens found!\n"
    assert diagnose(text * 3).label == "healthy"
