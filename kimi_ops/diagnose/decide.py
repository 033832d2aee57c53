"""Turn the scanner's state into a Diagnosis: pick the deciding rule, fill facts and the hint."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kimi_ops.diagnose.hints import (
    _KV_FIX_CPU,
    _KV_FIX_NEW,
    _KV_FIX_OLD,
    _SHELL_SIGNALS,
    _backend_name,
    _render,
    _signal_facts,
    _signal_hint,
    _version_at_least,
)
from kimi_ops.diagnose.inprocess import _caller_went_on
from kimi_ops.diagnose.markers import (
    _ATTN_KERNEL_RE,
    _QUANT_KERNEL_RE,
    _is_child_death,
)
from kimi_ops.diagnose.model import (
    _HEALTHY_STAGE,
    _STAGE_DESC,
    FAILURE_LABELS,
    STAGES,
    Diagnosis,
    Rule,
)
from kimi_ops.diagnose.rules import (
    _DEVICE_QUERY_FAILED_RULE,
    _FP8_ARCH_KV_RULE,
    _GPU_CAPABILITY_QUANT_RULE,
    _NO_KERNEL_IMAGE_QUANT_RULE,
    _QUANT_DTYPE_CPU_RULE,
    RULES,
)
from kimi_ops.diagnose.state import _Hit, _Line, _State, _truncate


def _context_values(context: Mapping[str, object]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in context.items():
        if v is None or v == "" or v == [] or v == ():
            continue
        if isinstance(v, (list, tuple)):
            out[k] = " ".join(str(x) for x in v)
        else:
            out[k] = str(v)
    return out


def _stage_name(st: _State) -> str | None:
    return STAGES[st.stage][0] if st.stage >= 0 else None


def _progress(st: _State) -> str | None:
    return st.progress if st.stage >= 0 else None


def _fp8_in_kv_cache(st: _State, facts: Mapping[str, str], *, triton_type: bool = False) -> bool:
    """Is the FP8 that a kernel failed on the KV cache's (not the weights')?

    In order: the failing Triton kernel's name (``reshape_and_cache`` vs ``..._scaled_mm``);
    the deepest traceback frame in attention / KV-cache code vs in quantization / GEMM code;
    else whether the KV cache was asked to be FP8 (``--kv-cache-dtype fp8``, the engine
    config's ``kv_cache_dtype=fp8``). With none of these, not the KV cache's, except for
    ``triton_type`` (Triton's "fp8e4nv not supported" on a GPU without native FP8): there it
    is the KV cache's unless the weights are FP8 (``quantization=fp8``), because on such a
    GPU vLLM runs FP8 weights through weight-only Marlin kernels or refuses them up front
    ("not supported for the current GPU"); what still reaches a Triton FP8 type is, unless a
    GEMM or MoE kernel or frame says otherwise, attention over an FP8 KV cache.
    """
    kernel = facts.get("triton_kernel", "")
    if kernel and _ATTN_KERNEL_RE.search(kernel):
        return True
    if kernel and _QUANT_KERNEL_RE.search(kernel):
        return False
    attn = st.last_attn_frame_pos if st.last_attn_frame_pos > st.healthy_pos else -1
    quant = st.last_quant_frame_pos if st.last_quant_frame_pos > st.healthy_pos else -1
    if attn != quant:
        return attn > quant
    kv_dtype = facts.get("kv_cache_dtype", "")
    if kv_dtype or not triton_type:
        return kv_dtype.startswith("fp8")
    return not facts.get("quantization", "").lower().startswith("fp8")


#: CUDA errors that are a kernel's fault, not a collective's (NCCL only reports them).
_KERNEL_FAULT_RE = re.compile(
    r"illegal memory access|device-side assert|misaligned address|illegal instruction|"
    r"unspecified launch failure"
)
#: An NCCL / collective failure in NCCL's own words (its error codes, a timeout, HCCL, Gloo).
_NCCL_OWN_ERROR_RE = re.compile(
    r"(?i:nccl error|nccl(?:System|UnhandledCuda|Internal|InvalidUsage|Remote|InvalidArgument)"
    r"|NCCL timeout|collective operation timeout|hccl|gloo|custom_all_reduce|NCCL INFO)"
)


#: How far (characters) a CUDA error line may follow the frame that raised it: the frame's
#: line, its source line and carets.
_RAISED_WITHIN = 600


def _raised_by_device_query(st: _State, hit: _Hit) -> bool:
    """Was this CUDA / HIP error raised by torch's first questions to the device (the frame
    just before it is mem_get_info / set_device / CUDA init), and no kernel's fault (which a
    later call may report asynchronously)?"""
    since = hit.pos - st.last_device_query_frame_pos
    return (
        st.last_device_query_frame_pos >= 0
        and 0 < since <= _RAISED_WITHIN
        and not _KERNEL_FAULT_RE.search(hit.groups.get("cuda_error", ""))
    )


def _in_quant_code(st: _State) -> bool:
    """Did the failing traceback run last through vLLM's quantization code (not attention)?"""
    quant = st.last_quant_code_pos
    return quant > st.healthy_pos and quant > st.last_attn_frame_pos


def _raised_in_quant_code(st: _State) -> bool:
    """Was the failing traceback's deepest frame in vLLM's quantization code (the check that
    raised is a quantized kernel's, not a library's it imported on the way)?"""
    last = st.last_frame
    return last is not None and last.pos == st.last_quant_code_pos and _in_quant_code(st)


#: A winning rule that the failing traceback's context makes more specific: (rule name, the
#: context test, the rule it becomes), e.g. a GPU-capability check raised in vLLM's
#: quantization code is a quantized kernel the GPU lacks, not the model's dtype.
_REFINED: tuple[tuple[str, Callable[[_State, Mapping[str, str], _Hit], bool], Rule], ...] = (
    (
        "fp8_type_unsupported_arch",
        lambda st, facts, _hit: _fp8_in_kv_cache(st, facts, triton_type=True),
        _FP8_ARCH_KV_RULE,
    ),
    ("no_kernel_image", lambda st, _facts, _hit: _in_quant_code(st), _NO_KERNEL_IMAGE_QUANT_RULE),
    (
        "cuda_runtime_error",
        lambda st, _f, hit: _raised_by_device_query(st, hit),
        _DEVICE_QUERY_FAILED_RULE,
    ),
    ("gpu_capability", lambda st, _f, _h: _raised_in_quant_code(st), _GPU_CAPABILITY_QUANT_RULE),
    (
        "quant_dtype_mismatch",
        lambda _st, facts, _h: facts.get("device") == "cpu",
        _QUANT_DTYPE_CPU_RULE,
    ),
)


#: Rules whose line names a dtype, not whose: they count only in the KV cache's context.
_KV_DTYPE_BY_CONTEXT = frozenset(
    {"float8_kv_dtype_mismatch", "kv_dtype_missing_in_torch", "kv_write_op_failed"}
)


def _signal_names(groups: Mapping[str, str]) -> set[str]:
    """The signal names a kill line's groups spell out: ``SIG...``, or a shell's word for one
    (``Aborted``; vLLM's ``KeyboardInterrupt: terminated`` is its SIGTERM handler)."""
    return {groups.get("signame") or "", _SHELL_SIGNALS.get(groups.get("shell_signal") or "", "")}


def _stop_signal(groups: Mapping[str, str]) -> bool:
    """Do a kill line's groups name SIGTERM / SIGINT / SIGHUP (what a shutdown sends)?"""
    num = groups.get("signum") or ""
    return bool(_signal_names(groups) & {"SIGTERM", "SIGINT", "SIGHUP"}) or num in ("15", "2", "1")


def _abort_signal(groups: Mapping[str, str]) -> bool:
    """Do a kill line's groups name SIGABRT (an abort: ``Aborted``, 6, exit code 134)?"""
    return (
        "SIGABRT" in _signal_names(groups)
        or groups.get("signum") == "6"
        or groups.get("exitcode") == "134"
    )


_SELF_KILL = "fatal signal from worker processes, shutting down"


def _without_consequences(
    st: _State, active: list[tuple[Rule, _Hit]], root: _Line | None
) -> list[tuple[Rule, _Hit]]:
    """Drop the hits that are another failure's consequence, not a cause of their own."""
    if root is not None:  # an exception explains the engine's death: not a silent kill
        active = [(r, h) for r, h in active if r.name != "engine_vanished"]
    if st.last_exc is not None and st.last_exc.pos > st.last_progress_pos:
        # a worker's failure whose exception shows (after it, or another worker's before it):
        # the exception decides
        active = [(r, h) for r, h in active if r.name != "worker_method_failed"]
    first_exc = min((x.pos for x in (root, st.last_exc) if x is not None), default=-1)
    # SIGABRT is how a process ends on an uncaught C++ exception or a failed assert: after an
    # error line (a CUDA error, an exception) it is that error's consequence
    errors = [h.pos for r, h in active if r.label != "engine_killed"]
    floor = min([*errors, first_exc] if first_exc >= 0 else errors, default=-1)

    # vLLM's V1 client kills its own process tree after "Got fatal signal from worker
    # processes, shutting down" (the shell then prints "Killed")
    self_kill = any(_SELF_KILL in line.lower() for line in st.tail)

    def consequence(r: Rule, h: _Hit) -> bool:
        if r.label != "engine_killed":
            return False
        # a worker ended by SIGTERM / SIGINT after an exception is the executor's teardown
        # ("died unexpectedly (exit code: -15)"); any kill after an exception and that line is
        # the client's own
        if first_exc >= 0 and h.pos > first_exc and (_stop_signal(h.groups) or self_kill):
            return True
        return floor >= 0 and h.pos > floor and _abort_signal(h.groups)

    active = [(r, h) for r, h in active if not consequence(r, h)]
    fault = st.hits.get("cuda_runtime_error")
    if fault is not None and _KERNEL_FAULT_RE.search(fault.groups.get("cuda_error", "")):
        # a kernel fault (illegal memory access, device-side assert) is noticed and reported
        # by the NCCL watchdog / torch.distributed too: it is the engine's error, not NCCL's
        active = [
            (r, h)
            for r, h in active
            if not (r.name == "nccl_error" and not _NCCL_OWN_ERROR_RE.search(h.text))
        ]
    return active


def _ends_traceback(st: _State, hit: _Hit) -> bool:
    """Is the hit the exception that ends the log's last traceback, nothing after it?"""
    frame, exc = st.last_frame, st.last_exc
    return (
        exc is not None
        and exc.pos == hit.pos > st.last_progress_pos
        and frame is not None
        and frame.pos < hit.pos
    )


def _fatal_at_end(st: _State, rule: Rule, hit: _Hit) -> bool:
    """Does a weak rule's hit end what the log shows (see ``Rule.fatal_at_end``)?"""
    if rule.fatal_at_end == "traceback":
        return _ends_traceback(st, hit)
    if rule.fatal_at_end == "log":
        return hit.pos >= st.last_progress_pos and st.healthy_pos < hit.pos
    return False


def _decide(st: _State, context: Mapping[str, object]) -> Diagnosis:
    """Turn the state into a diagnosis (see the module docstring for the order rules)."""
    ctx = _context_values(context)
    facts = dict(st.facts)
    if "backend" in facts:
        facts["backend"] = _backend_name(facts["backend"])
    if "device" in facts:
        facts["device"] = facts["device"].lower()  # "cpu" whether from a config or a notice
    stage = _stage_name(st)
    progress = _progress(st)
    shutdown = st.shutdown_pos if st.shutdown_pos >= 0 else None
    # an in-process engine whose caller went on, then stopped by a SIGTERM at its teardown (V0's
    # workers "died, exit code: -15" when the program ends): up, then stopped
    stopped_in_process = None
    stop = st.stop_request_pos
    if shutdown is None and st.healthy_pos < 0 and stop >= 0 and st.last_crash_pos in (-1, stop):
        stopped_in_process = _caller_went_on(st, until_stop=True)
        if stopped_in_process is not None:
            shutdown = stop

    active: list[tuple[Rule, _Hit]] = []
    for rule in RULES:
        hit = st.hits.get(rule.name)
        if hit is None or (shutdown is not None and hit.pos >= shutdown):
            continue
        if (
            rule.weak
            and st.last_signal_pos <= hit.pos
            and hit.pos != st.last_engine_log_frame_pos
            and not _fatal_at_end(st, rule, hit)
        ):
            continue  # (unless the engine's own error logger printed it: it died of it)
        if rule.weak and hit.pos < max(st.healthy_pos, st.last_generating_frame_pos):
            # an informational line the engine came up after (served, or was generating in
            # the LLM class's loop when the traceback came): it was not fatal
            continue
        if rule.name in _BEFORE_UP_ONLY and 0 <= st.healthy_pos < hit.pos:
            continue
        active.append((rule, hit))

    root = st.first_exc_since_progress or st.first_exc_since_healthy
    active = _without_consequences(st, active, root)
    if facts.get("kv_cache_dtype", "auto") == "auto":  # the selector failed for another reason
        active = [(r, h) for r, h in active if r.name != "kv_dtype_backend_selection"]
    if any(r.label == "unknown" for r, _ in active):
        # a named environment cause (an unsupported architecture, no device) is what the
        # config check that raised it found: it outranks "a config check refused something"
        active = [
            (r, h) for r, h in active if r.name not in ("config_refused", "error_names_option")
        ]
    fp8_kv = _fp8_in_kv_cache(st, facts)
    if not fp8_kv:  # a dtype failure outside the KV cache: not a KV-dtype problem
        active = [(r, h) for r, h in active if r.name not in _KV_DTYPE_BY_CONTEXT]

    def best(label_filter: frozenset[str]) -> tuple[Rule, _Hit] | None:
        cands = [(r, h) for r, h in active if r.label in label_filter]
        if not cands:
            return None
        return max(cands, key=lambda rh: (rh[0].priority, -rh[1].pos))

    specific = FAILURE_LABELS - {"engine_dead_other", "unknown"}
    # A known cause without a label of its own (a driver, a busy device, a broken install)
    # explains the engine's death, so it outranks the engine-death wrapper it leads to.
    winner = (
        best(frozenset(specific))
        or best(frozenset({"unknown"}))
        or best(frozenset({"engine_dead_other"}))
    )
    if winner is not None:
        rule, hit = winner
        same = sorted((h for r, h in active if r.label == rule.label), key=lambda h: h.pos)
        for name, holds, refined in _REFINED:
            if rule.name == name and holds(st, facts, hit):
                rule = refined
                break
        groups: dict[str, str] = {}
        for h in same:
            for k, v in h.groups.items():
                groups.setdefault(k, v)
        facts.update(groups)
        facts["signature"] = rule.name
        if "backend" in facts:
            facts["backend"] = _backend_name(facts["backend"])
        if rule.label == "engine_killed":
            _signal_facts(facts)
        values = {**ctx, **facts}
        if rule.label == "quantization_unsupported" and not values.get("platform"):
            platform = values.get("platform2") or values.get("device")
            if platform:
                values["platform"] = facts["platform"] = platform.upper()
        if rule.label == "engine_killed":
            values["signal_hint"] = _render(_signal_hint(facts["signal"]), values)
            stop = facts["signal"] in ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")
            values["signal_verb"] = "was killed by" if stop else "died of"
        evidence = [h.text for h in same[:3]]
        if rule.label in ("engine_dead_other", "unknown") and root is not None:
            values["root_cause"] = _truncate(root.text, 300)
            if root.text not in evidence:
                evidence.append(root.text)
        if rule.label == "kv_cache_dtype_unsupported":
            new = _version_at_least(values.get("vllm_version", ""), (0, 18))
            cpu = values.get("device") == "cpu" or values.get("backend", "").startswith(
                ("AMX", "CPU")
            )
            fix = _KV_FIX_CPU if cpu else _KV_FIX_NEW if new else _KV_FIX_OLD
            values["kv_fix"] = _render(fix, values)
        if rule.name == "argparse_error" and values.get("bad_args", "").startswith("serve "):
            values["serve_note"] = (
                "The image's entrypoint already runs `vllm serve`: do not repeat "
                "`vllm serve MODEL` in the arguments."
            )
        return Diagnosis(
            label=rule.label,
            stage=stage,
            progress=progress,
            evidence=tuple(_truncate(e) for e in evidence),
            hint=_render(rule.hint, values),
            summary="crashed: " + _render(rule.summary, values),
            facts=facts,
        )

    healthy = st.healthy_pos >= 0 or stopped_in_process is not None
    crashed_before_up = not healthy and st.last_crash_pos > st.last_progress_pos
    died_after_up = (
        healthy
        and st.last_exit is not None
        and st.last_exit.pos > st.healthy_pos
        and (shutdown is None or st.last_exit.pos < shutdown)
    )
    # the engine's own error logger (it prints the engine's fatal errors only) printed a
    # traceback after the server was up, and not one the engine survives: the engine died
    engine_died_after_up = (
        healthy
        and _engine_logger_death_since(st, st.healthy_pos)
        and (shutdown is None or st.last_engine_log_frame_pos < shutdown)
    )
    # an in-process engine's program (no API server) that went on, then stopped on an
    # uncaught exception: a traceback from its top frame ends the log (not the traceback of a
    # request an ASGI app failed, whose frames of imported modules are "<module>" too)
    exc = st.last_exc
    program_died = (
        healthy
        and shutdown is None
        and st.api_server_pos < 0
        and st.request_failed_pos <= st.healthy_pos
        and exc is not None
        and st.healthy_pos < st.last_module_frame_pos < exc.pos
        and exc.pos >= st.last_progress_pos
    )
    # a thread died after the server was up (its traceback follows "Exception in thread X:")
    # and nothing was served after it, nor did the server stop: what it ran stopped with it
    died = st.thread_died
    thread_died = healthy and shutdown is None and died is not None and died.pos > st.healthy_pos
    if crashed_before_up or died_after_up or engine_died_after_up or program_died or thread_died:
        engine = engine_died_after_up or (
            crashed_before_up
            and st.last_vllm_frame_pos > st.last_progress_pos
            and st.last_survived_frame_pos <= st.last_progress_pos  # (no utility call's)
        )
        return _generic_unknown(st, facts, ctx, stage, progress, root, engine=engine)
    values = {**ctx, **facts}
    healthy_text = st.healthy_text
    if stopped_in_process is not None:
        healthy_text, facts["in_process"] = stopped_in_process, "true"
        stage = STAGES[_HEALTHY_STAGE][0]
    if not healthy and not active:
        went_on = _caller_went_on(st)
        if went_on is not None:  # an in-process engine, initialised, and its caller went on
            healthy, healthy_text, facts["in_process"] = True, went_on, "true"
            stage = STAGES[_HEALTHY_STAGE][0]
    if healthy:
        if shutdown is not None:
            facts["shutdown"] = "true"
        where = f" on {facts['url']}" if "url" in facts else ""
        in_process = facts.get("in_process") == "true"
        summary = "healthy: in-process engine up" if in_process else f"healthy: server up{where}"
        if shutdown is not None:
            summary += " (then shut down)"
        if shutdown is not None:  # up, then stopped: nothing failed, and nothing serves now
            text = (
                "The in-process engine (vLLM's LLM class, or a library driving it) was up, then "
                "its program was stopped (Ctrl-C / SIGTERM); nothing failed."
                if in_process
                else "The server came up[[ on {url}]], then was stopped (Ctrl-C / SIGTERM, or "
                "its process tree shut down); nothing failed. It serves nothing now: `fab "
                "deploy` starts it again."
            )
        elif in_process:
            text = (
                "The in-process engine (vLLM's LLM class, or a library driving it) finished "
                "initialising; it serves no HTTP, its caller sends the prompts."
            )
        else:
            text = (
                "The server came up[[ on {url}]]; confirm it answers with a completion request "
                "(GET /health and /v1/models can succeed before the model answers)."
            )
        hint = _render(text, values)
        evidence = (_truncate(healthy_text),) if healthy_text else ()
        return Diagnosis("healthy", stage, progress, evidence, hint, summary, facts)
    desc = _STAGE_DESC.get(stage, "no startup stage seen yet") if stage else "no output yet"
    summary = f"starting: {desc}" + (f" ({progress})" if progress else "")
    hint = (
        f"No terminal state yet; last stage: {desc}"
        + (f" ({progress})" if progress else "")
        + ". Loading a large checkpoint or compiling kernels can print nothing for minutes."
    )
    evidence = (_truncate(st.stage_text),) if st.stage_text else ()
    return Diagnosis("starting", stage, progress, evidence, hint, summary, facts)


#: Rules whose line says nothing of the server once it is up: a program missing from the PATH
#: after the server came up is a side script's (a watcher, a health probe), not the server's;
#: torch's allocator warning of an OOM is a failure only while starting (a server's caller may
#: catch the OOM; torch's OutOfMemoryError is the cuda_oom rule's); gpt-oss's tokenizer
#: failing to fetch its vocab after the server is up fails a request, not the server.
_BEFORE_UP_ONLY = frozenset({"command_not_found", "allocator_oom", "harmony_vocab_unavailable"})


def _engine_logger_death_since(st: _State, pos: int) -> bool:
    """Did the engine's own error logger (it prints the engine's fatal errors only) print a
    traceback line after ``pos``, in none the engine survives (a utility call, one request)?
    Or, at any point of this run, one through the engine's busy loop (the loop stopped,
    whatever access lines of in-flight requests or other API server processes follow it)?"""
    if st.last_engine_loop_frame_pos > st.last_survived_frame_pos:
        return True
    return st.last_engine_log_frame_pos > pos and st.last_survived_frame_pos <= pos


def _generic_unknown(
    st: _State,
    facts: dict[str, str],
    ctx: Mapping[str, str],
    stage: str | None,
    progress: str | None,
    root: _Line | None,
    *,
    engine: bool = False,
) -> Diagnosis:
    """An unrecognised crash: point at the most telling error line.

    ``engine``: the traceback runs through vLLM's own code (or vLLM's logger / a vLLM process
    printed the exception), so vLLM itself died of an exception no rule knows:
    ``engine_dead_other`` rather than ``unknown``.
    """
    # (a child's "Process X:" is the header of the traceback that follows, not a cause)
    exit_line = st.last_exit
    if exit_line is not None and _is_child_death(exit_line.text):
        exit_line = None
    candidates = [x for x in (st.last_exc, exit_line) if x is not None]
    main = max(candidates, key=lambda x: x.pos) if candidates else None
    thread = st.thread_died if main is None else None  # (a thread's traceback, cut)
    if main is None:
        main = st.last_frame or st.last_header
    evidence: list[str] = []
    if main is not None:
        evidence.append(main.text)
    if root is not None and root.text not in evidence:
        evidence.append(root.text)
    what = main.text.strip() if main is not None else "the process stopped"
    if thread is not None and thread.pos > st.healthy_pos:
        evidence.insert(0, thread.text)  # which thread died, then its last frame
        what = thread.text.strip().rstrip(":") + (f", last frame: {what}" if main else "")
    values = {**ctx, **facts, "what": _truncate(what, 300)}
    if engine and st.last_exc is not None and st.last_exc.pos > st.last_progress_pos:
        # vLLM's exception, then a process exit ("Parent process exited", a container's
        # exit code): the exit is the exception's consequence
        main = st.last_exc
        if main.text not in evidence:
            evidence.insert(0, main.text)
        values["what"] = _truncate(main.text.strip(), 300)
    dead: tuple[str, str, str] | None = None  # (signature, hint, summary)
    if (
        not candidates  # a traceback without its exception (nor an exit after it)
        and main is not None
        and _engine_logger_death_since(st, st.last_progress_pos)
    ):
        # the engine's own error logger printed a traceback (it prints the engine's fatal
        # errors only; the API server's own traceback may follow it): the engine died, though
        # the excerpt ends before the exception
        dead = (
            "engine_logger_traceback",
            "The engine's own error logger printed a traceback (it logs the engine's fatal "
            "errors) and the log ends before its exception; the last frame: {what}. Read the "
            "lines after it in the full log for the exception, then search vLLM's issues for "
            "it with the model and version[[ ({vllm_version})]].",
            "crashed: engine died (traceback cut before its exception)",
        )
    elif engine and main is not None and main is st.last_exc:
        first = root.text if root is not None else main.text
        values["first"] = _truncate(first, 300)
        dead = (
            "vllm_traceback",
            "vLLM died of an exception no known cause matches: {first}. Read the traceback (it "
            "runs through vLLM's code) and the last log lines; search vLLM's issues for the "
            "exception with the model and version[[ ({vllm_version})]].",
            "crashed: engine died: " + _truncate(first, 200),
        )
    if dead is not None:
        facts["signature"] = dead[0]
        return Diagnosis(
            label="engine_dead_other",
            stage=stage,
            progress=progress,
            evidence=tuple(_truncate(e) for e in evidence),
            hint=_render(dead[1], values),
            summary=dead[2],
            facts=facts,
        )
    if main is not None and main is st.last_exit and "Killed" in main.text:
        hint = _render(
            "The process was killed ({what}): often the host's OOM killer (check `dmesg`, host "
            "RAM and swap while loading weights) or a manual kill. Read the last log lines.",
            values,
        )
    else:
        hint = _render(
            "Unrecognised failure: {what}. Read the traceback and the last log lines; none of "
            "the known causes (memory, port, NCCL, arguments, model path, GPU support) was "
            "found.",
            values,
        )
    return Diagnosis(
        label="unknown",
        stage=stage,
        progress=progress,
        evidence=tuple(_truncate(e) for e in evidence),
        hint=hint,
        summary="crashed: " + _truncate(what, 200),
        facts=facts,
    )
