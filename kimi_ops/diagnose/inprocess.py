"""Readings of an in-process engine (vLLM's LLM class, or a library driving it): it has no
HTTP server, so it is up once it is initialised and its program goes on."""

from __future__ import annotations

import re

from kimi_ops.diagnose.clean import clean_line, uncolored
from kimi_ops.diagnose.events import _ENGINE_INITIALIZED
from kimi_ops.diagnose.markers import (
    _LLM_CLASS_LOGGER_RE,
    _STOP_REQUEST_RE,
    _TRACEBACK,
    _VLLM_ORIGIN_RE,
)
from kimi_ops.diagnose.model import _STAGE_INDEX
from kimi_ops.diagnose.state import _State


def _caller_went_on(st: _State, until_stop: bool = False) -> str | None:
    """The line that shows an in-process engine's caller going on after the engine finished
    initialising ("init engine ... took", or its last CUDA-graph capture done), or None.

    A log where vLLM's API server never spoke, whose engine is initialised with no failure, and
    whose last lines after that hold output that is not the engine's own (no vLLM logger format
    or process prefix but the LLM class's, no Python warning, no progress bar): the program
    that holds the engine (a notebook, an RL trainer, a batch job) got it and went on, as a
    server's log never does before its HTTP server starts. With ``until_stop`` the log's one
    failure line is the stop request that ends it: the caller's output must come before that
    line, and no traceback between."""
    crashed = st.last_crash_pos >= 0 and not until_stop
    a, _, b = (st.progress or "").partition("/")
    captured = st.stage == _STAGE_INDEX["cuda_graphs"] and a == b != ""  # (last init step, done)
    if not (st.stage == _ENGINE_INITIALIZED or captured) or st.api_server_pos >= 0 or crashed:
        return None
    lines = list(st.tail)
    text = st.stage_text or ""
    start = max((i for i, ln in enumerate(lines) if text and text in ln), default=-1)
    if start < 0:  # the init line is not among the last lines (or reads otherwise there)
        return None
    went_on = None
    for line in lines[start + 1 :]:
        bare = clean_line(line)  # (a container's prefix on an empty line is no output)
        ln = bare.strip()
        if until_stop and _TRACEBACK in ln:
            return None
        if until_stop and _STOP_REQUEST_RE.search(ln):
            return went_on
        if went_on is None and (
            ln
            and bare[:1] not in " \t"
            and not _engines_own(uncolored(line))
            and not _NOT_CALLER_RE.search(ln)
        ):
            if not until_stop:
                return ln
            went_on = ln
    if not until_stop and st.engine_start_pos >= 0 and not captured:
        # the whole life of an engine that no API server ran, from its own first line to its
        # last init line, and nothing failed: an in-process engine is up (it has no HTTP
        # server to wait for)
        return text
    return None


def _engines_own(line: str) -> bool:
    """A line vLLM printed (its logger's format, its processes' prefixes), but for the LLM
    class's own logger: that one runs in the caller's process, and once the engine is built its
    constructor goes on ("Supported tasks: ..", whatever a paste cut it to)."""
    return bool(_VLLM_ORIGIN_RE.search(line)) and not _LLM_CLASS_LOGGER_RE.search(line)


#: Lines after engine init that are no sign of the caller going on: Python's warnings
#: (``x.py:1: UserWarning:``, ``warnings.warn(``) and logging's WARNING level (a library's,
#: maybe vLLM's own), progress bars, tracebacks, shell prompts and comments; a program's own
#: "Warning: ..." print is the caller's.
_NOT_CALLER_RE = re.compile(
    r"[a-z]Warning\b|warnings\.warn|\bWARN(?:ING)?\b|(?i:\[warn(?:ing)?\])|^\[W\d"
    r"|it/s\]|s/it\]|%\||Traceback|^File |^\$ |^#|^<frozen |^\[\.\.\. cut"
)
