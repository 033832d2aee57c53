"""The scanner's state: everything the diagnosis depends on, small so it can be cloned (a
streamed log is diagnosed from a clone of the state so far)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

from kimi_ops.diagnose.model import _MAX_EVIDENCE, TAIL_LINES


class _Hit(NamedTuple):
    pos: int
    text: str
    groups: Mapping[str, str]


class _Line(NamedTuple):
    pos: int
    text: str


class _State:
    """Everything the diagnosis depends on; small, so it can be cloned cheaply."""

    __slots__ = (
        "offset",
        "last_line",
        "healthy_pos",
        "healthy_text",
        "shutdown_pos",
        "stop_request_pos",
        "hits",
        "facts",
        "stage",
        "progress",
        "stage_text",
        "last_progress_pos",
        "last_crash_pos",
        "last_signal_pos",
        "last_exc",
        "first_exc_since_progress",
        "first_exc_since_healthy",
        "last_header",
        "last_exit",
        "last_frame",
        "last_vllm_frame_pos",
        "last_attn_frame_pos",
        "last_quant_frame_pos",
        "last_quant_code_pos",
        "last_arg_check_pos",
        "last_worker_crash_pos",
        "last_engine_log_frame_pos",
        "last_survived_frame_pos",
        "thread_died",
        "request_failed_pos",
        "last_module_frame_pos",
        "last_engine_loop_frame_pos",
        "last_generating_frame_pos",
        "last_device_query_frame_pos",
        "inproc_driver_pos",
        "api_server_pos",
        "engine_start_pos",
        "pre_http",
        "unraisable",
        "tail",
        "tail_provisional",
        "line_prefix",
        "line_numbers",
        "wrap_width",
        "line_lead",
    )

    def __init__(self) -> None:
        self.offset = 0  # offset of the next block in the (\r\n-normalised) stream
        self.last_line: str | None = None
        self.healthy_pos = -1
        self.healthy_text: str | None = None
        self.shutdown_pos = -1
        self.stop_request_pos = -1  # an operator's stop: SIGTERM / SIGINT / Ctrl-C
        self.hits: dict[str, _Hit] = {}  # rule name -> first hit since the healthy marker
        self.facts: dict[str, str] = {}
        self.stage = -1
        self.progress: str | None = None
        self.stage_text: str | None = None
        self.last_progress_pos = -1
        self.last_crash_pos = -1
        self.last_signal_pos = -1
        self.last_exc: _Line | None = None
        self.first_exc_since_progress: _Line | None = None
        self.first_exc_since_healthy: _Line | None = None
        self.last_header: _Line | None = None
        self.last_exit: _Line | None = None
        self.last_frame: _Line | None = None
        self.last_vllm_frame_pos = -1  # a frame in vLLM's code, or an exception vLLM printed
        self.last_attn_frame_pos = -1  # ... in attention / KV-cache code
        self.last_quant_frame_pos = -1  # ... in weight-quantization / GEMM / MoE code
        self.last_quant_code_pos = -1  # ... in vLLM's quantization code proper
        self.last_arg_check_pos = -1  # ... in the serve command's argument check
        self.last_worker_crash_pos = -1  # an exception under a worker process's prefix
        self.last_engine_log_frame_pos = -1  # a traceback line the engine's error logger printed
        self.last_survived_frame_pos = -1  # ... in a call whose failure the engine survives
        self.thread_died: _Line | None = None  # "Exception in thread X:" (its traceback follows)
        self.request_failed_pos = -1  # "Exception in ASGI application" on a server that is up
        self.last_module_frame_pos = -1  # a traceback's top frame: a program's (uncaught)
        self.last_engine_loop_frame_pos = -1  # ... in the engine's busy loop (this run's)
        self.last_generating_frame_pos = -1  # a frame of the LLM class's generation loop
        self.last_device_query_frame_pos = -1  # torch's first questions to the device
        self.inproc_driver_pos = -1  # a library driving an in-process engine spoke (Unsloth)
        self.api_server_pos = -1  # vLLM's API server spoke: a server, not an in-process engine
        self.engine_start_pos = -1  # the engine's own first line ("Initializing ... LLM engine")
        self.pre_http: tuple[int, str | None, str | None] = (-1, None, None)  # stage before it
        self.unraisable = False  # in a traceback Python printed as "Exception ignored in: ..."
        self.tail: deque[str] = deque(maxlen=TAIL_LINES + 1)
        self.tail_provisional = False
        self.line_prefix: str | None = None  # a tool's constant label on every line (learned)
        self.line_numbers: re.Pattern[str] | None = None  # grep -n's, cat -n's (learned)
        self.wrap_width: int | None = None  # a terminal's hard wrap (learned)
        self.line_lead: re.Pattern[str] | None = None  # a decorated line's start (learned)

    def clone(self) -> _State:
        new = _State.__new__(_State)
        for name in _State.__slots__:
            setattr(new, name, getattr(self, name))
        new.hits = dict(self.hits)
        new.facts = dict(self.facts)
        new.tail = deque(self.tail, maxlen=TAIL_LINES + 1)
        return new


def _truncate(text: str, limit: int = _MAX_EVIDENCE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
