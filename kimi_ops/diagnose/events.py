"""One log line to its events: what a cleaned line says (stage, fact, rule, exception, exit,
shutdown, traceback frame, in-process readiness), and the flags only its raw form shows (which
process or logger printed it). The scanner folds the events into its state in log order."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from kimi_ops.diagnose.candidates import _OPEN_FRAME
from kimi_ops.diagnose.clean import clean_line, uncolored
from kimi_ops.diagnose.markers import (
    _ALL_KEYWORDS,
    _DISPATCH,
    _ENGINE_LOCATION_RE,
    _ENGINE_LOGGER_RE,
    _EXC_RE,
    _EXIT_KEYWORDS,
    _EXIT_RE,
    _FACT_PATTERNS,
    _FRAME_RE,
    _HOST_PROCESS_RE,
    _IGNORED_PREFIXES,
    _INPROC_KEYWORDS,
    _INPROC_READY_RE,
    _LLM_CLASS_LOGGER_RE,
    _NATIVE_FRAME_RE,
    _PANIC_RE,
    _PROGRESS_RE,
    _RAY_TASK_ERROR_RE,
    _RUN_START,
    _SHUTDOWN_KEYWORDS,
    _SIG_FACT,
    _SIG_STAGE,
    _SOURCE_LINE_RE,
    _STAGE_MARKERS,
    _STOP_ONLY_KEYWORDS,
    _STOP_REQUEST_RE,
    _TRACEBACK,
    _VLLM_LEVEL_TIME_RE,
    _VLLM_ORIGIN_RE,
    _VLLM_PROCESS_NAME_RE,
    _WORKER_ORIGIN_RE,
)
from kimi_ops.diagnose.model import _HEALTHY_STAGE, _STAGE_INDEX, _WRAP_MIN
from kimi_ops.diagnose.rules import RULES
from kimi_ops.diagnose.words import ASGI_REQUEST_FAILED, THREAD_DIED

#: asyncio's report of a task or future whose exception nobody retrieved ("Future exception
#: was never retrieved" / "Task exception was never retrieved", then this line, then the
#: exception's traceback): the exception comes first, as its repr, so a traceback cut after
#: it still has one (V0's engine loop: "future: <Future finished exception=RuntimeError('..')>")
_UNRETRIEVED_EXC_RE = re.compile(
    r"^\s*future: <(?:Future|Task) finished\b.*?\bexception=(?P<exc>(?:[A-Za-z_]\w*\.)*\w*"
    r"(?:Error|Exception))\((?P<q>['\"])(?P<msg>.*)(?P=q)\)>?\s*$"
)

# Event kinds; on one line they apply in this order. An event is a tuple (pos, kind, ...):
#   _EV_FACT         (groups)
#   _EV_STAGE        (stage, progress, text, run_start, frequent, api_server)
#   _EV_HEALTHY      (text, frequent, progress)
#   _EV_RULE         (rule name, text, groups)
#   _EV_EXC          (text, is_wrapper, vllm_printed, from_worker, engine_logged)
#   _EV_EXIT, _EV_SHUTDOWN  (text)
#   _EV_HEADER, _EV_FRAME  (text, engine_logged)
#   _EV_INPROC_READY (text, who: engine / driver / built, api_server)
#   _EV_UNRAISABLE   (text): Python's "Exception ignored in: ..." (a finalizer's exception)
# The flags after the text of an exception, a traceback header or frame, or an in-process-ready
# event are what only the raw line shows (set by _mark_raw_facts); "frequent" marks a serving
# marker that _FREQ_HEALTHY's scan found.
_EV_FACT, _EV_STAGE, _EV_HEALTHY, _EV_RULE, _EV_EXC, _EV_HEADER, _EV_EXIT = range(7)
_EV_SHUTDOWN, _EV_FRAME, _EV_INPROC_READY, _EV_UNRAISABLE = 7, 8, 9, 10
_UNRAISABLE = "Exception ignored in"
_ENGINE_INITIALIZED = _STAGE_INDEX["engine_initialized"]
_INITIALIZING_ENGINE = _STAGE_INDEX["initializing_engine"]


#: V1's engine core heading the traceback of a utility call that failed (add_lora, sleep,
#: collective_rpc...): it answers the caller with the error and goes on
_UTILITY_FAILED_RE = re.compile(r"Invocation of \w+ method failed")


#: V0's multiprocessing client (in the API server's process) polling the engine's sockets: an
#: exception there is the link to the engine failing (often after the engine process died),
#: not vLLM's engine dying of it (vLLM says that itself: MQEngineDeadError, "Engine process
#: failed to start")
_MQ_CLIENT_LOOP_RE = re.compile(
    r"/engine/multiprocessing/client\.py\", line \d+, in run_(?:output_handler|heartbeat)_loop"
)


def _mq_client(frame: str) -> bool:
    """Is this frame V0's MQ client's loop (its failure is not the engine dying of it)?"""
    return "_loop" in frame and _MQ_CLIENT_LOOP_RE.search(frame) is not None


#: An ERROR record of vLLM's OpenAI serving layer (``[serving_chat.py:257]``,
#: ``serving_completion.py:112]``): the handler of one request logging why it refused it.
_REQUEST_HANDLER_RE = re.compile(r"\bERROR\b[^\]]*?[\[\s](?:[\w.\-]*/)?serving_\w+\.py:\d+\]")


#: A Python frame behind marks of a shape no prefix rule knows (a web console's, pasted): the
#: whole frame, to the end of the line, after a space
_LATE_FRAME_RE = re.compile(r'\sFile "[^"]+", line \d+, in [\w<>.]+\s*$')


def _analyze(text: str, pos: int, events: list[tuple[Any, ...]], *, joined: bool) -> None:
    """Append the events one cleaned line produces (at log position ``pos``)."""
    for tpl in _line_events(text, joined):
        events.append((pos, *tpl))


def _engine_logged(raw: str) -> bool:
    """Did the engine's own error logger print this traceback line (:data:`_ENGINE_LOGGER_RE`,
    or its location alone where a relay dropped vLLM's level and time)?"""
    if "ERROR" in raw and _ENGINE_LOGGER_RE.search(raw) is not None:
        return True
    return (
        ".py:" in raw
        and _ENGINE_LOCATION_RE.search(raw) is not None
        and _VLLM_LEVEL_TIME_RE.search(raw) is None
    )


@lru_cache(maxsize=4096)
def _line_events(text: str, joined: bool) -> tuple[tuple[Any, ...], ...]:
    """The events of one cleaned line, without position (cached: lines repeat a lot).

    A ``joined`` text (a line plus its hard-wrapped continuation) only yields rule and
    fact events: its stage markers and crash lines were already seen line by line.
    """
    events: list[tuple[Any, ...]] = []
    present = [k for k in _ALL_KEYWORDS if k in text]
    stages: set[int] = set()
    facts: set[int] = set()
    rules: set[int] = set()
    for k in present:
        for kind, idx in _DISPATCH.get(k, ()):
            (stages if kind == _SIG_STAGE else facts if kind == _SIG_FACT else rules).add(idx)
    best_stage = -1
    if not joined and not (stages and _SOURCE_LINE_RE.match(text)):
        for idx in stages:
            mk = _STAGE_MARKERS[idx]
            if mk.stage > best_stage and (mk.pattern is None or mk.pattern.search(text)):
                best_stage = mk.stage
    if best_stage >= 0:
        pm = _PROGRESS_RE.search(text)
        progress = f"{pm.group(1)}/{pm.group(2)}" if pm else None
        events.append((_EV_STAGE, best_stage, progress, text, _RUN_START in text, False, False))
        if best_stage >= _HEALTHY_STAGE:
            events.append((_EV_HEALTHY, text, False, progress))
    for idx in sorted(facts):
        m = _FACT_PATTERNS[idx][1].search(text)
        if m is not None:
            groups = {k: v for k, v in m.groupdict().items() if v}
            if groups:
                events.append((_EV_FACT, groups))
    is_wrapper = False
    for idx in sorted(rules):
        rule = RULES[idx]
        groups = rule._search(text)
        if groups is not None:
            events.append((_EV_RULE, rule.name, text, groups))
            if rule.label == "engine_dead_other":
                is_wrapper = True
    if joined:
        return tuple(events)
    if text.startswith(_UNRAISABLE):
        # Python's unraisable-exception hook (an exception in __del__ or a finalizer): the
        # traceback that follows ends nothing; the process goes on
        events.append((_EV_UNRAISABLE, text))
        return tuple(events)
    ray_wrapper = "RayTaskError(" in text and _RAY_TASK_ERROR_RE.search(text) is not None
    if not ray_wrapper and (
        _EXC_RE.match(text) or ("panicked at" in text and _PANIC_RE.match(text))
    ):
        events.append((_EV_EXC, text, is_wrapper, False, False, False))
    elif (
        ray_wrapper
        or _TRACEBACK in text
        or _UTILITY_FAILED_RE.match(text)
        or text.startswith(THREAD_DIED)
        or ASGI_REQUEST_FAILED in text
    ):
        events.append((_EV_HEADER, text, False))  # (the engine's words heading a traceback)
    elif "exception=" in text and (um := _UNRETRIEVED_EXC_RE.match(text)) is not None:
        exc_text = f"{um['exc']}: {um['msg']}"
        events.append((_EV_EXC, exc_text, is_wrapper, False, False, False))
    exit_line = bool(present) and not _EXIT_KEYWORDS.isdisjoint(present) and _EXIT_RE.search(text)
    native = _NATIVE_FRAME_RE.match(text) is not None
    if exit_line or native:  # ... or a crash handler's native backtrace
        events.append((_EV_EXIT, text))
    if present and (
        not _SHUTDOWN_KEYWORDS.isdisjoint(present)
        or (not _STOP_ONLY_KEYWORDS.isdisjoint(present) and _STOP_REQUEST_RE.search(text))
    ):
        events.append((_EV_SHUTDOWN, text))
    if present and not _INPROC_KEYWORDS.isdisjoint(present):
        m = _INPROC_READY_RE.search(text)
        if m is not None:  # who says so: the engine ("Supported tasks"), a driver, a builder
            events.append((_EV_INPROC_READY, text, m.lastgroup or "engine", False))
    if (  # (a native frame: printed by the engine's logger?)
        native or _FRAME_RE.match(text) or ('File "' in text and _LATE_FRAME_RE.search(text))
    ):
        events.append((_EV_FRAME, text, False))
    return tuple(events)


def _is_continuation(prev_raw: str, cur_clean: str) -> bool:
    """Is this line the hard-wrapped rest of the (long) previous one?"""
    if len(prev_raw) < _WRAP_MIN or not cur_clean.strip():
        return False
    return not cur_clean.startswith(
        (_TRACEBACK, "File ", "  ", "\t", "During handling", "The above exception")
    )


def _analyze_join(prev_raw: str, cur_raw: str, pos: int, events: list[tuple[Any, ...]]) -> None:
    cur = clean_line(cur_raw)
    if _OPEN_FRAME.search(prev_raw + "\n"):
        cur = cur.lstrip()  # a frame's path cut mid-way: the rest, whatever the page's indent
    elif not _is_continuation(prev_raw, cur):
        return
    prev = clean_line(prev_raw)
    if prev.startswith(_IGNORED_PREFIXES):
        return
    for sep in ("", " "):
        _analyze(prev + sep + cur, pos, events, joined=True)


def _raw_line(scan: str, ls: int) -> str:
    """The line starting at ``ls`` as printed (its head, colour codes removed), for the checks
    of whose logger or process printed it."""
    return uncolored(scan[ls : scan.find("\n", ls)][:300])[:200]


def _mark_raw_facts(scan: str, ls: int, events: list[tuple[Any, ...]], start: int) -> None:
    """Flag what only the raw line shows (clean_line removed it): an exception line that vLLM
    printed (its logger's format or process prefix), and whether a worker process did; a
    traceback header or frame that the engine's own error logger printed; a "Supported
    tasks" line that is the API server's (logger ``api_server.py`` or an ``(APIServer
    pid=..)`` prefix): that one is no in-process engine being ready (its HTTP server is still
    to start); an engine initialised under another program's process prefix (an in-process
    engine, ready); a native frame the engine's error logger printed (its traceback's)."""
    raw = ""
    engine: bool | None = None  # printed by the engine's own error logger (computed once)
    for i in range(start, len(events)):
        kind = events[i][1]
        if kind == _EV_STAGE and events[i][2] <= _INITIALIZING_ENGINE:
            raw = raw or _raw_line(scan, ls)
            if "APIServer" in raw or "api_server" in raw:  # the API server's "non-default args"
                events[i] = (*events[i][:7], True)
            continue
        if kind == _EV_STAGE and events[i][2] == _ENGINE_INITIALIZED:
            raw = raw or _raw_line(scan, ls)
            # the process that printed it (the last prefix before the record, behind any
            # decoration), or the program that started the engine core that printed it (an
            # outer prefix: a Ray Data map worker whose engine core is a child process; a
            # worker's own line there is not the engine's)
            hosts = _HOST_PROCESS_RE.findall(uncolored(raw))
            if hosts and (
                not _VLLM_PROCESS_NAME_RE.match(hosts[-1])
                or (
                    hosts[-1].startswith("EngineCore")
                    and any(not _VLLM_PROCESS_NAME_RE.match(host) for host in hosts)
                )
            ):
                # initialised inside another program's process: an in-process engine, ready
                events.append((events[i][0], _EV_INPROC_READY, events[i][4], "built", False))
            continue
        if (
            kind != _EV_EXC
            and kind != _EV_INPROC_READY
            and kind != _EV_FRAME
            and kind != _EV_HEADER
            and kind != _EV_EXIT
        ):
            continue
        raw = raw or _raw_line(scan, ls)
        if engine is None:
            engine = _engine_logged(raw)
        if kind == _EV_EXIT:
            # a native frame the engine's error logger printed (a C++ exception's backtrace,
            # Tenstorrent's TT_THROW) is its traceback's, not a crash handler's process exit
            if engine and _NATIVE_FRAME_RE.match(events[i][2]):
                events[i] = (events[i][0], _EV_FRAME, events[i][2], True)
        elif kind in (_EV_FRAME, _EV_HEADER):
            if engine:
                events[i] = (*events[i][:-1], True)
        elif kind == _EV_EXC:
            if (
                "serving_" in raw
                and _REQUEST_HANDLER_RE.search(raw)
                and not any(e[1] == _EV_RULE for e in events[start:])
            ):
                # the OpenAI layer's handler logging one request's error (a prompt too long,
                # a bad chat template) and answering it with a 4xx: the server is up. A
                # cause a rule names on the line (an engine death) stays what it is.
                events[i] = (events[i][0], _EV_HEALTHY, events[i][2], False, None)
                continue
            vllm_exc = _VLLM_ORIGIN_RE.search(raw) is not None
            worker = _WORKER_ORIGIN_RE.search(raw) is not None
            events[i] = (*events[i][:-3], vllm_exc, worker, vllm_exc and engine)
        elif "APIServer" in raw or "api_server" in raw:
            events[i] = (*events[i][:-1], True)
        elif events[i][3] == "engine" and _LLM_CLASS_LOGGER_RE.search(raw):
            # the LLM class's own "Supported_tasks", logged once its engine is built (a
            # notebook shows no engine-process line: its output goes to the terminal)
            events[i] = (events[i][0], _EV_INPROC_READY, events[i][2], "built", False)
