"""Structured JSON log records (vLLM 0.32's ``--logging-config.formatter json``, or a
python-json-logger config through VLLM_LOGGING_CONFIG_PATH) read as the text lines vLLM's own
formatter would print for them; the real engine's JSON logs are fixtures in
``tests/fixtures/logs/*cpu032_json_records*``."""

from __future__ import annotations

import json
from pathlib import Path

from kimi_ops.diagnose import clean_line, diagnose
from kimi_ops.diagnose.clean import unwrap_json_records

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"

#: One record as the real CPU engine (vLLM 0.32) wrote it, traceback in exc_info.
ENGINE_RECORD = {
    "asctime": "2026-12-04 23:13:55,311",
    "levelname": "ERROR",
    "name": "vllm.v1.engine.core",
    "processName": "EngineCore",
    "process": 1843,
    "message": "EngineCore failed to start.",
    "exc_info": 'Traceback (most recent call last):\n  File "core.py", line 1, in f\n'
    "NotImplementedError: FP8 KV cache requires head_size divisible by 32 on CPU.",
    "vllm_process_name": "EngineCore",
}


def test_a_record_is_the_lines_vllm_s_text_formatter_prints() -> None:
    head = "(EngineCore pid=1843) ERROR 12-04 23:13:55 [core.py] "
    assert unwrap_json_records(json.dumps(ENGINE_RECORD)).split("\n") == [
        head + "EngineCore failed to start.",
        head + "Traceback (most recent call last):",
        head + '  File "core.py", line 1, in f',
        head + "NotImplementedError: FP8 KV cache requires head_size divisible by 32 on CPU.",
    ]


def test_the_lines_of_a_record_clean_to_its_message() -> None:
    lines = unwrap_json_records(json.dumps(ENGINE_RECORD)).split("\n")
    assert [clean_line(ln) for ln in lines][2:] == [
        '  File "core.py", line 1, in f',
        "NotImplementedError: FP8 KV cache requires head_size divisible by 32 on CPU.",
    ]


def test_other_spellings_of_a_record() -> None:
    record = {"time": "2026-01-02T03:04:05Z", "level": "warn", "logger": "vllm.config", "msg": "m"}
    assert unwrap_json_records(json.dumps(record)) == "WARNING 01-02 03:04:05 [config.py] m"
    record = {"levelname": "INFO", "filename": "api_server.py", "lineno": 12, "message": "up"}
    assert unwrap_json_records(json.dumps(record)) == "INFO [api_server.py:12] up"
    assert unwrap_json_records('{"logger": "uvicorn", "message": "plain"}') == "plain"


def test_a_decoration_before_a_record_stays_on_each_of_its_lines() -> None:
    record = json.dumps({"levelname": "ERROR", "message": "a\nb"})
    assert unwrap_json_records("vllm-1  | " + record) == "vllm-1  | ERROR a\nvllm-1  | ERROR b"


def test_json_that_is_no_log_record_stays_as_it_is() -> None:
    for line in (
        '{"id": "cmpl-1", "object": "text_completion", "choices": []}',  # a response body
        '{"message": {"role": "user"}}',  # a chat message, not a record's text
        # an API's error body: a message, but no level nor logger
        '{"object": "error", "message": "maximum context length is 4096", "code": 400}',
        '{"message": "cut mid-rec',  # a record cut short
        'Request body: {"message": "hi"}',  # JSON inside a sentence
        '[{"message": "a list"}]',
    ):
        assert unwrap_json_records(line) == line


def test_the_real_engine_s_json_log_shows_its_evidence_as_text() -> None:
    path = (
        FIXTURES
        / "kv_cache_dtype_unsupported__kv_dtype_refused__cpu032_json_records_fp8_head_size_80.log"
    )
    d = diagnose(path.read_text(encoding="utf-8"))
    assert d.label == "kv_cache_dtype_unsupported"
    assert "FP8 KV cache requires head_size divisible by 32 on CPU" in d.hint
    assert not any(ev.lstrip().startswith("{") for ev in d.evidence), d.evidence
