"""The fast streaming scanner: which lines to analyse (their events: events.py), the state they
update."""

from __future__ import annotations

import re
from typing import Any

from kimi_ops.diagnose.candidates import _CONT, _OPEN_FRAME, _candidate_lines, _freq_keywords
from kimi_ops.diagnose.clean import (
    DOCKER_JSON_START,
    clean_line,
    has_json_records,
    join_wrapped,
    straight_quotes,
    strip_line_numbers,
    strip_line_prefix,
    unwrap_docker_json,
    unwrap_json_records,
)
from kimi_ops.diagnose.events import (
    _ENGINE_INITIALIZED,
    _EV_EXC,
    _EV_EXIT,
    _EV_FACT,
    _EV_FRAME,
    _EV_HEADER,
    _EV_HEALTHY,
    _EV_INPROC_READY,
    _EV_RULE,
    _EV_SHUTDOWN,
    _EV_STAGE,
    _EV_UNRAISABLE,
    _INITIALIZING_ENGINE,
    _UTILITY_FAILED_RE,
    _analyze,
    _analyze_join,
    _mark_raw_facts,
    _mq_client,
)
from kimi_ops.diagnose.markers import (
    _ARG_CHECK_FRAME_RE,
    _ATTN_FRAME_RE,
    _BARE_DEATH_RE,
    _BARE_HTTP_START_RE,
    _CONFIG_FRAME_RE,
    _CONFIG_REFUSAL_RE,
    _DEVICE_QUERY_FRAME_RE,
    _ENGINE_LOOP_FRAME_RE,
    _GENERATING_FRAME_RE,
    _HTTP_SHUTDOWN_RE,
    _IGNORED_PREFIXES,
    _NEWLINE,
    _OFFLINE_DONE,
    _PROGRESS_RE,
    _QUANT_CODE_RE,
    _QUANT_FRAME_RE,
    _STOP_REQUEST_RE,
    _SURVIVED_FIRST_FRAME_RE,
    _SURVIVED_FRAME_RE,
    _UP_SHUTDOWN_RE,
    _VLLM_CODE_RE,
    _VLLM_KIN_FRAME_RE,
    _is_child_death,
)
from kimi_ops.diagnose.model import (
    _HEALTHY_STAGE,
    _MAX_TAIL_LINE,
    _STAGE_INDEX,
    TAIL_LINES,
)
from kimi_ops.diagnose.rules import _RULE_BY_NAME, _RULE_LABEL
from kimi_ops.diagnose.rules_engine import FAILED_HEALTH_CHECK, FAILED_WAKE_UP
from kimi_ops.diagnose.state import _Hit, _Line, _State
from kimi_ops.diagnose.words import _SERVING_WHILE_STOPPING, ASGI_REQUEST_FAILED, THREAD_DIED

# Why the scanner is shaped so. A log may be gigabytes (diagnosed on the host, 1 MiB at a
# time) and almost all of it is serving noise (metrics, access log) that decides nothing.
# Python-level work on every one of tens of millions of lines would dominate, so the scanner
# never loops over lines: ``_candidate_lines`` (candidates.py) finds the few lines worth
# analysing with C-speed scans (one ``re`` trie over a ``bytes.translate``d copy whose only
# literal prefix is one byte, plus a few ``str.find`` needles), and ``_FULL_SCAN`` analyses
# every line of a small excerpt's head, where a pasted log's one telling line may hold no
# trigger word. ``_line_events`` is memoised (the same lines repeat), frequent markers are
# found per chunk with ``rfind``. The streaming ``_State`` is small and cloneable, and events
# apply in log order, so feeding a log in any split gives exactly the whole-log diagnosis.
# bench/bench_diagnose.py measures the throughput; tests check the fast path against
# analysing every line. The word tables (``_TRIGGER_WORDS``, ``_FIND_WORDS`` ...) are
# vocabulary and live in words.py; the other patterns in markers.py.

#: Every line that starts in the first this many characters of a log is analysed, not only
#: the trigger lines: an excerpt pasted into an issue is small, and its one telling line
#: may hold none of the trigger words. Past it, the trigger scan keeps big logs fast.
_FULL_SCAN = 64 * 1024


def _exit_noise_after_offline_run(st: _State, name: str, text: str) -> bool:
    """Is this the client's "Engine core proc .. died unexpectedly" after an offline run that
    completed ("Processed prompts: 100%"), with no exception or signal since?"""
    return (
        name == "engine_wrapper"
        and st.healthy_text is not None
        and _OFFLINE_DONE in st.healthy_text
        and _BARE_DEATH_RE.search(text) is not None
        and st.first_exc_since_healthy is None
        and (st.last_exit is None or st.last_exit.pos < st.healthy_pos)
    )


def _traffic_after_exit(st: _State) -> bool:
    """Would request traffic (a frequent serving marker) here follow a process exit, with no
    sign the server was ever up? Then the excerpt's order cannot be trusted (a platform's log
    view, newest first) and the exit is the one state it shows: the traffic is not "up"."""
    return st.healthy_pos < 0 and st.last_exit is not None


def _request_refused(st: _State, text: str) -> bool:
    """vLLM's error for a request's parameters (vllm.exceptions.VLLMValidationError, "for request
    validation failures": the API answers 400) on a server that is up: that request was refused,
    not a setting, so no rule takes it (at startup, under the serve command's argument check, it
    is a setting's refusal: :func:`_note_config_refusal`)."""
    return st.healthy_pos >= 0 and _REQUEST_REFUSED in text


def _in_failed_request(st: _State, name: str) -> bool:
    """Is a rule's line a generic cause (label ``unknown``: an import, a missing package) in the
    traceback uvicorn printed for one request ("Exception in ASGI application" after the server
    was up, no serving line since)? The app answered that request 500 and went on serving; an
    engine that died (``engine_dead_other``) or a cause with a label of its own (an OOM, NCCL)
    is still the server's failure."""
    return st.request_failed_pos > st.healthy_pos >= 0 and _RULE_BY_NAME[name].label == "unknown"


def _note_config_refusal(st: _State, exc: _Line) -> None:
    """Record a ValueError / NotImplementedError whose traceback (since the previous
    exception) ends in vLLM's config / argument code, or one of those or a TypeError /
    VLLMValidationError raised under the serve command's argument check: vLLM refused a
    setting, whatever the message says. It is a hit of rule ``config_refused``, whose own
    pattern reads the other form of the same refusal (pydantic's validation error for a vLLM
    config class)."""
    frame = st.last_frame
    since = max(st.last_exc.pos if st.last_exc is not None else -1, st.healthy_pos)
    if frame is None or frame.pos <= since or "config_refused" in st.hits:
        return
    m = _CONFIG_REFUSAL_RE.match(exc.text)
    if m is None or _request_refused(st, exc.text):
        return
    # a TypeError in config code may be a bug; under the argument check it is a refusal
    in_config = m.group("kind") != "Type" and _CONFIG_FRAME_RE.search(frame.text) is not None
    if in_config or st.last_arg_check_pos > since:
        st.hits["config_refused"] = _Hit(exc.pos, exc.text, {"refusal": m.group("refusal")})
        st.last_signal_pos = max(st.last_signal_pos, exc.pos)


def _bar_at_zero_after_crash(st: _State, progress: str | None) -> bool:
    return bool(progress) and progress.startswith("0/") and st.last_crash_pos > st.last_progress_pos


def _engine_after_bare_http_start(st: _State, stage: int) -> bool:
    """Does the engine start loading after an HTTP server that only started (no routes, no
    "startup complete")? vLLM's own server starts uvicorn after its engine is up."""
    return (
        _INITIALIZING_ENGINE <= stage < _ENGINE_INITIALIZED
        and st.stage == _HEALTHY_STAGE
        and st.healthy_text is not None
        and _BARE_HTTP_START_RE.search(st.healthy_text) is not None
    )


#: The ASGI app's startup failed: a frame of its lifespan (starlette's; uvicorn prints the
#: traceback as "ERROR:    Traceback ...") or uvicorn's own words after it. (A lifespan frame
#: after "startup complete" is the shutdown's: that server was up.)
_APP_START_FAILED_RE = re.compile(r'", line \d+, in lifespan\b|\bApplication startup failed\b')


def _http_start_failed(st: _State, pos: int, text: str) -> None:
    """uvicorn had only started (no route list, no "startup complete") when the app's startup
    failed: an app that builds its engine at startup (index-tts, a gradio Space) gets there
    before its engine. The server never came up: back to the stage before it."""
    healthy = st.healthy_text
    if healthy is None or st.healthy_pos < 0 or st.shutdown_pos >= 0 or pos < st.healthy_pos:
        return
    failed = _APP_START_FAILED_RE.search(text)
    bare = _BARE_HTTP_START_RE.search(healthy)
    if failed is None or bare is None:
        return
    if pos == st.healthy_pos:  # (one line, newlines collapsed: the failure after the start)
        if healthy != text or failed.start() < bare.end():
            return
        st.last_progress_pos = pos - 1  # (what progressed came before the failure)
    st.healthy_pos, st.healthy_text = -1, None
    st.stage, st.progress, st.stage_text = st.pre_http


def _apply(st: _State, ev: tuple[Any, ...]) -> None:
    """Fold one event into the state (events arrive in log order)."""
    pos, kind = ev[0], ev[1]
    if kind == _EV_UNRAISABLE:
        st.unraisable = True
        return
    if st.unraisable:
        # the traceback of an exception a finalizer raised (vLLM's ShmRingBuffer.__del__
        # unlinking a segment the resource tracker already removed, after its engine was
        # killed): its header, frames and exception end nothing, and name no cause
        if kind in (_EV_HEADER, _EV_FRAME):
            return
        st.unraisable = False  # (its exception, or the traceback was cut: a record follows)
        if kind == _EV_EXC:
            return
    if kind == _EV_FACT:
        st.facts.update(ev[2])
    elif kind == _EV_STAGE:
        stage, progress, text, run_start = ev[2], ev[3], ev[4], ev[5]
        if ev[6] and _traffic_after_exit(st):
            return
        if _bar_at_zero_after_crash(st, progress):
            return  # a progress bar at 0 flushed after the crash: nothing progressed
        if not run_start and st.last_worker_crash_pos > st.last_progress_pos:
            # a worker process failed (vLLM never recovers a worker): the driver's own progress
            # after it (its share of the weights still loading) is the same run going down
            return
        if run_start or _engine_after_bare_http_start(st, stage):
            # a new server run: the previous run's "up" / shutdown are history; or uvicorn
            # started before an app that builds the engine (TRL's vllm-serve): not up
            st.stage, st.progress = stage, None
            st.healthy_pos, st.healthy_text, st.shutdown_pos = -1, None, -1
            st.stop_request_pos = st.last_engine_loop_frame_pos = -1
        elif stage > st.stage:
            if stage == _HEALTHY_STAGE:
                st.pre_http = (st.stage, st.progress, st.stage_text)
            st.stage, st.progress = stage, progress
        elif stage == st.stage and progress:
            st.progress = progress
        st.stage_text = text
        st.last_progress_pos = pos
        if "API server" in text or ev[7]:  # "vLLM API server version", "Starting vLLM API
            st.api_server_pos = pos  # server on", or a line by the API server's own logger
        elif stage == _INITIALIZING_ENGINE:
            st.engine_start_pos = pos
        st.first_exc_since_progress = None
        if stage == _ENGINE_INITIALIZED and st.inproc_driver_pos >= 0:
            _apply(st, (pos, _EV_INPROC_READY, text, "engine", False))  # its driver spoke
    elif kind == _EV_HEALTHY:
        frequent = ev[3]
        if frequent and any(
            _RULE_LABEL.get(name, "unknown") != "unknown" and name not in _SURVIVABLE_RULES
            for name in st.hits
        ):
            # An access-log line (any status) or a throughput line after a specific failure
            # (the engine died, but the API server still answers /v1/models until it shuts
            # down) is not a recovery: the failure stands.
            return
        if frequent and _traffic_after_exit(st):
            return
        if _bar_at_zero_after_crash(st, ev[4]):
            return  # (as for its stage above)
        if pos > st.healthy_pos:
            st.healthy_pos = pos
            st.healthy_text = ev[2]
            st.hits = {}
            if not (frequent and any(k in ev[2] for k in _SERVING_WHILE_STOPPING)):
                st.shutdown_pos = -1  # (a new run after the stop, or no stop at all)
            st.first_exc_since_healthy = None
            st.first_exc_since_progress = None
            st.last_progress_pos = max(st.last_progress_pos, pos)
    elif kind == _EV_RULE:
        name, text, groups = ev[2], ev[3], ev[4]
        if pos <= st.healthy_pos:
            return
        if _request_refused(st, text) or _in_failed_request(st, name):
            return
        if _exit_noise_after_offline_run(st, name, text):
            # the offline LLM finished its prompts; its client then reports the engine gone as
            # the interpreter exits: a stop, not a crash
            if st.shutdown_pos < 0:
                st.shutdown_pos = pos
            return
        old = st.hits.get(name)
        if old is None:
            st.hits[name] = _Hit(pos, text, dict(groups))
        else:
            missing = {k: v for k, v in groups.items() if k not in old.groups}
            if missing:
                st.hits[name] = _Hit(old.pos, old.text, {**old.groups, **missing})
        if not _RULE_BY_NAME[name].weak:
            st.last_signal_pos = max(st.last_signal_pos, pos)
    elif kind == _EV_EXC:
        line = _Line(pos, ev[2])
        _note_config_refusal(st, line)
        st.last_exc = line
        st.last_crash_pos = st.last_signal_pos = pos
        if ev[4]:  # printed by vLLM's logger or under one of its processes' prefixes
            st.last_vllm_frame_pos = pos
        if ev[5]:  # ... under a worker process's prefix (Ray's or vLLM's own workers)
            st.last_worker_crash_pos = pos
        if ev[6]:  # ... by the engine process's own error logger (its fatal errors)
            st.last_engine_log_frame_pos = pos
        if not ev[3]:
            if st.first_exc_since_progress is None:
                st.first_exc_since_progress = line
            if st.first_exc_since_healthy is None:
                st.first_exc_since_healthy = line
    elif kind == _EV_HEADER:
        st.last_header = _Line(pos, ev[2])
        st.last_crash_pos = st.last_signal_pos = pos
        if ev[2].startswith(THREAD_DIED):
            st.thread_died = _Line(pos, ev[2])
        elif ASGI_REQUEST_FAILED in ev[2] and st.healthy_pos >= 0:
            st.request_failed_pos = pos
        if "lifespan" in ev[2]:  # (a one-line paste: the traceback's frames on its line)
            _http_start_failed(st, pos, ev[2])
        if ev[3]:
            st.last_engine_log_frame_pos = pos
            if _UTILITY_FAILED_RE.match(ev[2]):  # a utility call's: the engine goes on
                st.last_survived_frame_pos = pos
    elif kind == _EV_EXIT:
        child = _is_child_death(ev[2])
        # a child's "Process X:" heads the traceback that follows: an exit line since the
        # last progress (Ray's account of a dead worker) says more, and stays
        if not child or st.last_exit is None or st.last_exit.pos < st.last_progress_pos:
            st.last_exit = _Line(pos, ev[2])
        if "startup failed" in ev[2]:  # uvicorn: "Application startup failed. Exiting."
            _http_start_failed(st, pos, ev[2])
        if child and ev[2].strip().startswith("Process EngineCore"):
            st.last_engine_log_frame_pos = pos  # V1's engine process died of that traceback
        st.last_crash_pos = st.last_signal_pos = pos
    elif kind == _EV_SHUTDOWN:
        if _STOP_REQUEST_RE.search(ev[2]):
            st.stop_request_pos = pos
        header = st.last_header.pos if st.last_header is not None else -1
        if (
            st.healthy_pos < 0
            and not st.hits
            and "KeyboardInterrupt" in ev[2]
            and st.last_generating_frame_pos > header >= 0
        ):
            # Ctrl-C raised inside the in-process engine's generation loop (its traceback runs
            # through LLM._run_engine): the engine was running requests, then was stopped
            st.healthy_pos = st.last_generating_frame_pos
            st.healthy_text = ev[2]
            st.last_progress_pos = max(st.last_progress_pos, pos)
            st.facts["in_process"] = "true"
        elif st.healthy_pos < 0 and not st.hits and st.last_crash_pos < 0:
            http_stop = _HTTP_SHUTDOWN_RE.search(ev[2]) is not None
            if _UP_SHUTDOWN_RE.search(ev[2]) or (st.stop_request_pos >= 0 and http_stop):
                # an excerpt that begins after startup: the stop shows the server was up
                st.healthy_pos = pos
                st.healthy_text = ev[2]
                st.last_progress_pos = max(st.last_progress_pos, pos)
            elif http_stop:
                # The HTTP server ended, but neither a stop request nor vLLM's own stop
                # sequence shows why (vLLM also shuts it down when the engine dies): the
                # server is gone for a reason the excerpt does not hold.
                st.last_exit = _Line(pos, ev[2])
                st.last_crash_pos = st.last_signal_pos = pos
        if st.healthy_pos >= 0 and st.shutdown_pos < 0:
            st.shutdown_pos = pos
    elif kind == _EV_INPROC_READY:
        # an in-process engine past "init engine ... took", with no failure since: it is up
        # (flagged: the API server's own "Supported tasks", see _mark_raw_facts)
        if ev[4] or st.api_server_pos >= 0:  # the API server's, or a server's log
            return
        if st.stage < _ENGINE_INITIALIZED and ev[3] == "driver":
            st.inproc_driver_pos = pos  # Unsloth talks while vLLM loads: ready at "init engine"
        recovered = st.last_crash_pos < 0 or st.last_crash_pos < st.last_progress_pos
        built = st.stage >= _ENGINE_INITIALIZED or ev[3] == "built"  # (verl: rollout built)
        if built and st.healthy_pos < 0 and not st.hits and recovered:
            _apply(st, (pos, _EV_STAGE, _HEALTHY_STAGE, None, ev[2], False, False, False))
            _apply(st, (pos, _EV_HEALTHY, ev[2], False, None))
            st.facts["in_process"] = "true"
    elif kind == _EV_FRAME:
        # a traceback is printed because an exception propagated: even cut before its
        # exception line, the process failed (the cause is what the excerpt lacks)
        if ev[3]:
            st.last_engine_log_frame_pos = pos
            first = st.last_header is not None and (
                st.last_frame is None or st.last_frame.pos < st.last_header.pos
            )
            if _SURVIVED_FRAME_RE.search(ev[2]) or (
                first and _SURVIVED_FIRST_FRAME_RE.search(ev[2])
            ):
                st.last_survived_frame_pos = pos
            elif _ENGINE_LOOP_FRAME_RE.search(ev[2]):
                st.last_engine_loop_frame_pos = pos
        st.last_frame = _Line(pos, ev[2])
        st.last_crash_pos = pos
        if "lifespan" in ev[2]:
            _http_start_failed(st, pos, ev[2])
        if ev[2].endswith(", in <module>"):
            st.last_module_frame_pos = pos
        if "_run_engine" in ev[2] and _GENERATING_FRAME_RE.search(ev[2]):
            st.last_generating_frame_pos = pos
        elif "/torch/cuda/" in ev[2] and _DEVICE_QUERY_FRAME_RE.search(ev[2]):
            st.last_device_query_frame_pos = pos
        if ("/vllm/" in ev[2] and _VLLM_CODE_RE.search(ev[2]) and not _mq_client(ev[2])) or (
            ("load_vllm" in ev[2] or "/aphrodite/" in ev[2]) and _VLLM_KIN_FRAME_RE.search(ev[2])
        ):
            st.last_vllm_frame_pos = pos
            if _ARG_CHECK_FRAME_RE.search(ev[2]):
                st.last_arg_check_pos = pos
        if _ATTN_FRAME_RE.search(ev[2]):
            st.last_attn_frame_pos = pos
        elif _QUANT_FRAME_RE.search(ev[2]):
            st.last_quant_frame_pos = pos
            if _QUANT_CODE_RE.search(ev[2]):
                st.last_quant_code_pos = pos
        st.last_crash_pos = max(st.last_crash_pos, pos)


def _update_tail(st: _State, block: str, scan: str) -> None:
    """Append the block's last lines to the tail; a ``\\r``-ended line is provisional.

    ``scan`` is ``block`` with every ``\\r`` turned into ``\\n`` (same offsets).
    """
    n = len(block)
    end = n - 1  # index of the terminator of the last segment
    count = 0
    start = n
    while end >= 0 and count <= TAIL_LINES:
        s = scan.rfind("\n", 0, end) + 1
        if block[end] == "\n" or end == n - 1:
            count += 1
        start = s
        end = s - 1
    i = start
    while i < n:
        j = scan.find("\n", i)
        if st.tail_provisional and st.tail:
            st.tail.pop()
        st.tail.append(block[i:j][:_MAX_TAIL_LINE])
        st.tail_provisional = block[j] == "\r"
        i = j + 1


#: Serving-marker lines that are no traffic: the health check or the wake-up failing (the engine
#: is dead or asleep; rules engine_wrapper and wake_up_failed read them), a benchmark client's
#: request-rate setting.
_NOT_SERVING_RE = re.compile(f"{FAILED_HEALTH_CHECK}|{FAILED_WAKE_UP}|requests/second")
#: See :func:`_request_refused`.
_REQUEST_REFUSED = "VLLMValidationError: "
#: Rules whose line a process can survive: traffic after it is a recovery, not an API server
#: still answering for a dead engine (torch's allocator warning of an OOM a caller caught, the
#: Hub client retrying a request).
_SURVIVABLE_RULES = frozenset({"allocator_oom", "hub_request_failed"})


def _process(st: _State, block: str) -> None:
    """Consume a block of complete lines (ends with a terminator; ``\\r\\n`` normalised)."""
    if st.wrap_width is not None:  # a terminal's hard wrap: the lines it cut, joined
        block = join_wrapped(block, st.wrap_width, st.line_lead)
    if st.line_numbers is not None:  # a paste's grep -n / cat -n numbers
        block = strip_line_numbers(block, st.line_numbers)
    if DOCKER_JSON_START in block:  # docker's json-file records: read the lines they hold
        block = unwrap_docker_json(block)
    if st.line_prefix is not None:
        block = strip_line_prefix(block, st.line_prefix)
    json_records = has_json_records(block)
    if json_records:  # structured records: read the lines vLLM's text would be
        block = unwrap_json_records(block)
    block = straight_quotes(block)  # a page's typographic quotes: the log's own
    base = st.offset
    st.offset += len(block)
    scan = block.replace("\r", "\n") if "\r" in block else block
    events: list[tuple[Any, ...]] = []
    for kw in _freq_keywords(scan, json_records):  # frequent serving markers: the last counts
        p = scan.rfind(kw)
        if p >= 0:
            ls = scan.rfind("\n", 0, p) + 1
            text = clean_line(scan[ls : scan.find("\n", p)])
            if _NOT_SERVING_RE.search(text):
                continue
            ready, bar = _STAGE_INDEX["ready"], _PROGRESS_RE.search(text)
            progress = f"{bar.group(1)}/{bar.group(2)}" if bar else None  # (an offline run's)
            events.append((base + ls, _EV_STAGE, ready, progress, text, False, True, False))
            events.append((base + ls, _EV_HEALTHY, text, True, progress))
    starts = _candidate_lines(scan)
    if base < _FULL_SCAN:
        head = _FULL_SCAN - base
        every = [0] + [m.end() for m in _NEWLINE.finditer(scan, 0, min(head, len(scan) - 1))]
        starts = sorted(set(starts).union(every))
    for ls in starts:
        text = clean_line(scan[ls : scan.find("\n", ls)])
        if text and not text.startswith(_IGNORED_PREFIXES):
            n_before = len(events)
            _analyze(text, base + ls, events, joined=False)
            _mark_raw_facts(scan, ls, events, n_before)
    # hard-wrapped continuations; the first line continues the previous block's last line
    first_end = scan.find("\n")
    if st.last_line is not None and _CONT.match("\n" + scan[: min(first_end, 200)] + "\n"):
        _analyze_join(st.last_line, scan[:first_end], base, events)
    cut_paths = {m.end() - 1 for m in _OPEN_FRAME.finditer(scan)}  # each newline joined once
    for nl in sorted(cut_paths.union(m.start() for m in _CONT.finditer(scan))):
        ls = nl + 1
        if ls >= len(scan):
            break
        prev_start = scan.rfind("\n", 0, nl) + 1
        _analyze_join(scan[prev_start:nl], scan[ls : scan.find("\n", ls)], base + ls, events)
    st.last_line = scan[scan.rfind("\n", 0, len(scan) - 1) + 1 : -1]
    if events:
        events.sort(key=lambda e: (e[0], e[1]))
        for ev in events:
            _apply(st, ev)
    _update_tail(st, block, scan)
