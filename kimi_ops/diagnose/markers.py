"""Stage markers, fact patterns and the exit / shutdown / frame patterns lines are checked for."""

from __future__ import annotations

import re
from typing import NamedTuple

from kimi_ops.diagnose.model import (
    _STAGE_INDEX,
    BASH_JOB_REPORT,
    L10N_STOP_WORDS,
    SHELL_SIGNAL_WORDS_L10N,
    ZSH_JOB_REPORT,
)
from kimi_ops.diagnose.rules import RULES


class _Marker(NamedTuple):
    stage: int
    keywords: frozenset[str]
    pattern: re.Pattern[str] | None


def _marker(stage: str, keywords: tuple[str, ...], pattern: str | None = None) -> _Marker:
    return _Marker(
        _STAGE_INDEX[stage], frozenset(keywords), re.compile(pattern) if pattern else None
    )


_STAGE_MARKERS: tuple[_Marker, ...] = (
    _marker("api_server_starting", ("vLLM API server version", "non-default args")),
    _marker(
        "initializing_engine",
        ("LLM engine", "Using max model len ", "Defaulting to '"),
        # ... and the engine's config being resolved just before (V1's, V0's model config)
        r"Initializing an? (?:V\d )?LLM engine|^Using max model len \d|"
        r"^This model supports multiple tasks: ",
    ),
    _marker(
        "loading_model",
        ("Starting to load model", "Loading model from scratch", "Using model weights format"),
    ),
    _marker(
        "loading_shards",
        ("Loading safetensors", "Loading pt checkpoint", "Loading checkpoint shards"),
    ),
    _marker(
        "weights_loaded",
        ("Loading weights took", "Model loading took", "Loading model weights took"),
    ),
    _marker(
        "compiling",
        ("Dynamo bytecode transform", "Compiling a graph for", "Directly load the compiled graph"),
    ),
    _marker(
        "kv_cache_allocated",
        (
            "Available KV cache memory",
            "GPU KV cache size",
            "# GPU blocks",
            "# cuda blocks",
            "Maximum concurrency for",
            "Memory profiling takes",
            "KV Cache is",
        ),
    ),
    _marker(
        "cuda_graphs",
        (
            "Capturing CUDA graph",
            "Capturing cudagraphs",
            "Capturing the model for CUDA graphs",
            "CUDA graphs can take additional",
        ),
    ),
    # the API server announcing its HTTP server comes before its routes: the engine is up,
    # the server not yet
    _marker(
        "engine_initialized",
        ("warmup model) took", "LLM API server", "LLM server on", "Graph capturing finished"),
        r"warmup model\) took|Starting vLLM (?:API )?server|Graph capturing finished",
    ),
    _marker(
        "server_starting",
        (
            "Waiting for application startup",
            "Available routes",
            "Started server process",
            "Route: /",
        ),
        r"Waiting for application startup|Available routes are|Started server process|"
        r"^Route: /\S*, Methods:",
    ),
    _marker(
        "ready",
        (
            # an engine put to sleep (RL colocation) was up first: only a running one sleeps
            "Sleep mode freed",
            "Application startup complete",
            "Uvicorn running on",
            # Triton Inference Server's vLLM backend: the model's engine is up (glog quotes the
            # message), and so is Triton
            "\"successfully loaded '",
            "Started HTTPService at",
            "Started GRPCInferenceService at",
            # Unsloth's SyntheticDataKit, which runs `vllm serve` and waits for it; Ray Serve
            # (ray.llm), once every deployment of the app is healthy
            "vLLM Server Ready",
            "Deployed app '",
            "' is ready at http",  # serve.run: "Application 'default' is ready at http://.."
            # Xinference, once the model it drives in process is loaded (on a failure it
            # says "Leave wait_for_load, error: ..." at ERROR)
            "Leave wait_for_load, elapsed time",
            "Leave launch_builtin_model, elapsed time",
            # V1's engine core waking from idle for requests that arrived (DEBUG)
            "EngineCore loop active",
            # the API server handling a request (its failure is that request's, see below);
            # the structured-output backend failing one request's grammar (V1, at ERROR)
            "Error in preprocessing prompt inputs",
            "Failed to advance FSM for request ",
        ),
    ),
)
_RUN_START = "vLLM API server version"
_PROGRESS_RE = re.compile(r"\|\s*(\d+)/(\d+)\s*(?:\[|$)")

_FACT_PATTERNS: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple(
    (frozenset(kw), re.compile(p))
    for kw, p in (
        (("vLLM API server version",), r"vLLM API server version (?P<vllm_version>v?\d[\w.+\-]*)"),
        (("LLM engine (v",), r"LLM engine \(v(?P<vllm_version>\d[\w.+\-]*)\)"),
        (
            ("LLM API server", "LLM server on", "Uvicorn running on"),
            r"(?:Starting vLLM (?:API )?server(?: \d+)? on|Uvicorn running on) "
            r"(?P<url>https?://[^\s/]*?:(?P<port>\d+))",
        ),
        (("non-default args",), r"'port': (?P<port>\d+)"),
        (("non-default args",), r"'model(?:_tag)?': '(?P<model>[^']+)'"),
        (("LLM engine (v",), r"\bmodel='(?P<model>[^']+)'"),
        (("LLM engine (v",), r"\bdevice_config=(?P<device>\w+)"),
        # the CPU build at startup: "float16 is not supported on CPU, casting to bfloat16."
        (("casting to bfloat16",), r"not supported on (?P<device>CPU), casting to bfloat16"),
        (("def ",), r"^def (?P<triton_kernel>\w+)\("),  # Triton CompilationError echo
        # pydantic's message under "N validation error(s) for XConfig"
        (("Value error, ",), r"^\s*Value error, (?P<config_error>.+?)\.?(?: \[type=\w+|$)"),
        (("LLM engine (v",), r"\bquantization=(?P<quantization>(?!None\b)\w+)"),
        (("non-default args",), r"'max_model_len': (?P<max_model_len>\d+)"),
        (("non-default args",), r"'kv_cache_memory_bytes': (?P<kv_cache_memory_bytes>\d+)"),
        (("non-default args",), r"'gpu_memory_utilization': (?P<gpu_memory_utilization>[\d.]+)"),
        (("non-default args",), r"'kv_cache_dtype': '(?P<kv_cache_dtype>\w+)'"),
        # the engine's config dump, V0's "args: Namespace(...)", the attention selector's config
        (("kv_cache_dtype=",), r"\bkv_cache_dtype=['\"]?(?P<kv_cache_dtype>\w+)"),
        # vLLM's own notice (config.py / cache.py, 0.4 .. 0.3x) when the KV cache is FP8
        (
            ("Using fp8 data type",),
            r"Using (?P<kv_cache_dtype>fp8\w*) data type to store kv cache",
        ),
        (("--kv-cache-dtype",), r"--kv-cache-dtype[= ]+['\"]?(?P<kv_cache_dtype>fp8\w*)"),
        (("non-default args",), r"'tensor_parallel_size': (?P<tensor_parallel_size>\d+)"),
        (
            ("Available KV cache memory",),
            r"Available KV cache memory: (?P<kv_cache_gib>-?[\d.]+) ?GiB",
        ),
        (("GPU KV cache size",), r"GPU KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens"),
        (
            ("maximum model length is",),
            r"estimated maximum model length is (?P<est_max_len>\d+)",
        ),
        (
            ("Maximum concurrency for",),
            r"Maximum concurrency for (?P<max_model_len>[\d,]+) tokens per request: "
            r"(?P<max_concurrency>[\d.]+)x",
        ),
        (("# GPU blocks", "# cuda blocks"), r"# (?:GPU|cuda) blocks: (?P<gpu_blocks>\d+)"),
        (("KV Cache is",), r"reserved for KV Cache is (?P<kv_cache_gib>-?[\d.]+) ?GiB"),
        (
            ("Model loading took", "Loading model weights took"),
            r"(?:Model loading|Loading model weights) took (?P<model_mem_gib>[\d.]+) ?(?:GiB|GB)",
        ),
        (
            (
                "Using Flash",
                "Using FLASH",
                "Using Triton",
                "Using TRITON",
                "Using XFormers",
                "Using Torch SDPA",
                "Using CUTLASS",
                "Using Cutlass",
                "Using ROCm",
                "Using AITER",
                "Using FlexAttention",
                "Using AMX",
                "Using CPU_",
                "Using FLEX",
                "Using AttentionBackendEnum",
                "Using _Backend",
            ),
            r"Using (?:AttentionBackendEnum\.|_Backend\.)?(?P<backend>[A-Za-z][\w\-]*(?: [A-Z]"
            r"[\w\-]*)*?) (?:attention )?backend\b",
        ),
    )
)

_EXC_RE = re.compile(  # indented when pasted in a document or a chained traceback
    r"^\s*(?:[A-Za-z_]\w*\.)*(?:\w*(?:Error|Exception|Interrupt|Exit)|Error)(?:\([\w.]+\))?"
    r"(?::(?:\s.*)?)?$"
)
#: A Rust program's panic (a Rust front end such as Dynamo's, a tokenizer's thread): the
#: thread's name, maybe its id, then where; the message follows (Rust >= 1.73) or is quoted.
_PANIC_RE = re.compile(r"^\s*thread '[^']*'(?: \(\d+\))? panicked at ")
#: Ray's wrapper of a remote task's exception, "RayTaskError(RuntimeError): ray::Actor.method()
#: (pid=..)": the remote traceback and then the exception itself follow it, so it is a header.
_RAY_TASK_ERROR_RE = re.compile(r"RayTaskError\([\w.]+\): ray::")
#: multiprocessing's report of a child process whose target raised ("Process Process-1:",
#: "Process EngineCore_DP0:"): the child exits; the traceback that follows says of what.
_MP_CHILD_DIED = r"^Process [\w.\-]+:$"
_MP_CHILD_DIED_RE = re.compile(_MP_CHILD_DIED)


def _is_child_death(line: str) -> bool:
    """Is ``line`` (an exit line's text) multiprocessing's "Process X:"?"""
    return _MP_CHILD_DIED_RE.match(line.strip()) is not None


_EXIT_RE = re.compile(
    r"(?:^|\s)Killed(?:\s|$)|core dumped|exited with (?:exit )?code [1-9]|^Fatal Python error:|"
    r"Failed to start (?:the )?(?:model )?server|\bvLLM (?:server )?failed to start\b|"
    r"(?:^|: )The actor (?:is dead|died)\b|"
    r"\bprocess terminated unexpectedly\b|"  # a launcher's word for a vanished server
    r"\bWorker exit type: (?!INTENDED)[A-Z_]+|"  # Ray: a worker process died
    # a container runtime / orchestrator: the server's container died (cause not shown)
    r"\bCrashed container\b|\bCrashLoopBackOff\b|Back-off restarting failed container|"
    r"^Error response from daemon: |"  # the docker CLI: the container is gone or failed
    r"\bExited \([1-9]\d*\)|"
    r"Parent process exited, terminating worker|"  # the engine / API process is gone
    r"\bMain process exited, code=exited, status=[1-9]|"  # systemd: the unit's server failed
    r"\.(?:cuh?|hh?|hpp|cpp|cc)\(\d+\): error: |"  # nvcc: a JIT kernel build failed
    # C++ ends the process on an uncaught exception (std::terminate; Ray's handler logs it
    # as "Unhandled exception: T. what(): ..."), and on a failed glog / Ray CHECK
    r"^terminate called after throwing an instance of|\bUnhandled exception: \S+\. what\(\):|"
    r"\bCheck failed: |An unexpected system state has occurred|"
    # uvicorn could not bind its socket (any errno; 98 is port_in_use's), or the app's
    # startup (its lifespan) raised: the server exits
    r"\berror while attempting to bind on address\b|^Application startup failed\b|"
    # Ray: a node (and the vLLM workers on it) declared dead by the cluster
    r"\b(?:has been|was|mistakenly been) marked (?:as )?dead\b|\bRAYLET_MARKED_DEAD\b|"
    # Ray: a worker (the driver itself at ray.init) could not join its raylet; it exits
    r"\bFailed to register worker \S+ to Raylet\b|"
    # a wrapper watching the server's output saw it end before the server said it was ready
    # (Unsloth: "Stdout stream ended before readiness message detected.")
    r"\b(?:stream ended|exited|died|terminated) before (?:the )?(?:readiness\b|(?:server "
    r"|it )?(?:was |became |becoming |being )?ready\b)|" + _MP_CHILD_DIED
)
_EXIT_KEYWORDS: frozenset[str] = frozenset(
    {
        "Process ",
        "Killed",
        "core dumped",
        "exited with ",
        "Fatal Python error",
        "ailed to start",  # Failed to start, vLLM (server) failed to start
        "Application startup failed",
        "The actor",
        "terminated unexpectedly",
        "Worker exit type: ",
        "Main process exited, code=exited",
        "): error: ",
        "Crashed container",
        "CrashLoopBackOff",
        "Error response from daemon",
        "Back-off restarting",
        "Exited (",
        "Parent process exited",
        "terminate called",
        "Unhandled exception",
        "Check failed",
        "unexpected system state",
        "attempting to bind",
        "marked dead",
        "marked as dead",
        "MARKED_DEAD",
        "Failed to register worker",
        "before readiness",
        "before ready",
        "before becoming ready",
        "before being ready",
        "before it was ready",
        "before it became ready",
        "before the server was ready",
        "before the server became ready",
    }
)
#: A frame of a native backtrace: a crash handler's (UCX, glog, c10: `` 3 0x00007f.. fn() lib``),
#: or glibc's backtrace_symbols() (``/lib/libc.so.6(+0x29d90) [0x7f..]``, behind `` --- `` in
#: Tenstorrent's TT_THROW).
_NATIVE_FRAME_RE = re.compile(
    r"^\s*(?:#?\d{1,3}\s+0x[0-9a-fA-F]{8,}\s+\S"
    r"|(?:---\s+)?\S+\([\w.]*\+0x[0-9a-fA-F]+\)\s+\[0x[0-9a-fA-F]+\])"
)
#: An operator's stop (SIGTERM / Ctrl-C) of a server that was up; what follows it is the
#: teardown (EngineDeadError, "force killing" the engine...), not a crash.
_SHUTDOWN_KEYWORDS: frozenset[str] = frozenset(
    {
        "KeyboardInterrupt",
        "Waiting for application shutdown",
        "^C",  # a terminal's echo of Ctrl-C
        "shutdown triggered",  # vLLM >= 0.2x: "[shutdown] API server: shutdown triggered"
        "signal=SIGTERM",  # "[shutdown] EngineCore: trigger received signal=SIGTERM"
        "signal=SIGINT",
        "Received SIGTERM",
        "received SIGTERM",
        "Application shutdown complete",
        "gracefully shutting down",
        "API server: ",  # vLLM >= 0.2x's "[shutdown] API server: ..." stop sequence
        "Received SIGINT",
        "received SIGINT",
        "Sending SIGTERM",
        "Sending SIGINT",
        "Sent SIGTERM",
        "Sent SIGINT",
        "Shutdown initiated (timeout",  # V1 EngineCore's own orderly shutdown (0.1x)
        "Shutting down FastAPI",  # the HTTP launcher's stop on SIGINT / SIGTERM (0.4 .. 0.1x)
    }
)
#: Words that count only on a stop-request line (``_STOP_REQUEST_RE``): Slurm's, systemd's, shells'.
_STOP_ONLY_KEYWORDS = frozenset(
    {"CANCELLED AT", ".service", "  Terminated ", "terminated  ", "exit code: -15"}
    | {"SIGTERM received"}
    | {"  " + w for w, sig in SHELL_SIGNAL_WORDS_L10N.items() if sig == "SIGTERM"}
)
#: vLLM's HTTP launcher (0.4 .. 0.1x) when SIGINT / SIGTERM cancelled the server task (an
#: engine death ends uvicorn without it): a stop request, by a server that was up.
_FASTAPI_STOP = r"^Shutting down FastAPI HTTP server"
#: vLLM's own stop sequence, printed only by a server that was up and was asked to stop:
#: an excerpt that starts after startup and shows it was healthy, then stopped.
_UP_SHUTDOWN_RE = re.compile(
    r"API server: (?:shutdown triggered|engine client stopped|signalling HTTP server shutdown"
    r"|shutting down FastAPI)"
    r"|Engine is gracefully shutting down"
    # the V1 engine core's orderly shutdown: only an engine core that finished starting has
    # one (a failed start logs "EngineCore failed to start" instead)
    r"|^Shutdown initiated \(timeout="
    rf"|{_FASTAPI_STOP}"
)
#: The HTTP server's (uvicorn's) lifespan shutdown: up, then stopped only when a stop request
#: (``_STOP_REQUEST_RE``) came before it; vLLM also ends it when the engine dies.
_HTTP_SHUTDOWN_RE = re.compile(r"Waiting for application shutdown|Application shutdown complete")
_STOP_REQUEST_RE = re.compile(
    r"KeyboardInterrupt|^\^C|signal=SIG(?:TERM|INT)|(?:[Rr]eceived|Sen(?:t|ding)) SIG(?:TERM|INT)"
    rf"|{_FASTAPI_STOP}"
    # Slurm cancelling the job or step (scancel, its time limit, preemption): it sends SIGTERM
    # to the tasks; a node failure is no stop request
    r"|\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?! DUE TO NODE FAILURE)"
    # systemd stopping the unit (SIGTERM to its processes); bash's report of a SIGTERMed job
    r"|^(?:Stopping|Stopped) \S+\.service\b"  # (the journal's "host systemd[1]: " is stripped)
    rf"|{BASH_JOB_REPORT}Terminated +\S|\bdied, exit code: -15\b"  # (V0: a worker SIGTERMed)
    rf"|{ZSH_JOB_REPORT}terminated +\S"  # zsh's words for a SIGTERMed job
    rf"|{BASH_JOB_REPORT}(?:{L10N_STOP_WORDS}) +(?!\(killed\))\S"  # bash's, in other languages
    # abseil's failure handler (Ray's processes, JAX) reporting the SIGTERM it was sent
    r"|\*\*\* SIGTERM received (?:at time=|by PID )"
)
_TRACEBACK = "Traceback (most recent call last)"
#: An offline LLM's progress bar at its end, and an engine-death line that names no cause.
_OFFLINE_DONE = "Processed prompts: 100%"
#: uvicorn starting, before any route or "startup complete": vLLM's own server gets here after
#: its engine is up; an app that builds the engine at startup (TRL's vllm-serve) before it.
_BARE_HTTP_START_RE = re.compile(r"Started server process|Waiting for application startup")
_BARE_DEATH_RE = re.compile(r"^Engine core proc \S+ died unexpectedly, shutting down client\.?$")
#: An in-process engine (vLLM's ``LLM`` class, or a library driving it) has no HTTP server to
#: wait for: it is ready once initialised. Its words: ``llm.py``'s "Supported tasks" (V1); a
#: driver's (Unsloth patching the model, which also talks while vLLM loads: counted after "init
#: engine ... took"); a builder's (verl's "After building vllm rollout": LLM(...) returned).
_INPROC_READY_RE = re.compile(
    r"^\s*(?:Supported[_ ]tasks: |(?P<driver>Unsloth\b)|(?P<built>After building vllm rollout"
    # ... verl's other words for it: its Megatron workers' rollout built, its trainer's
    # validation generated with the rollout
    r"|rollout and sharding manager init done\b|validation generation end$))"
)
_INPROC_KEYWORDS = frozenset(
    {
        "Supported_tasks",
        "Supported tasks",
        "Unsloth",
        "vllm rollout",
        "sharding manager init done",
        "validation generation end",
    }
)
#: The LLM class's logger (vllm/entrypoints/llm.py), in the caller's process ("Supported_tasks").
_LLM_CLASS_LOGGER_RE = re.compile(
    r"\b(?:INFO|DEBUG) (?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
    r"\[(?:entrypoints/)?llm\.py(?::\d+)?\]"
)
#: ... or the engine initialised inside another program's process, whose name its log prefix
#: shows: a Ray actor of an RL trainer ("(LLMRayActor pid=..)" OpenRLHF, "(VllmGenerationWorker
#: pid=..)" NeMo-RL), vLLM's own engine with VLLM_ENABLE_V1_MULTIPROCESSING=0 in a program's
#: main process; not vLLM's own processes, nor Ray Serve's replicas (a server).
_HOST_PROCESS_RE = re.compile(
    r"\((?P<host>[A-Za-z_][^\s()]*(?:\([^\s()]*(?:\([^\s()]*\))?\))?)(?: [^()]*?)? ?pid=\d+[^()]*\)"
)
_VLLM_PROCESS_NAME_RE = re.compile(  # (V0's --engine-use-ray put a server's engine in an
    r"(?:_?Async|LLMEngine|EngineCore|APIServer|VllmWorker|Worker|RayWorker|DP|CoreEngine"
    r"|raylet|pid=)"  # "(_AsyncLLMEngine pid=..)" actor; DP: DPEngineCoreActor)
    # ... and any server's process: Ray Serve's replicas, an RL framework's HTTP rollout
    # server ("(vLLMHttpServer pid=..)"): its HTTP server is still to start
    r"|.*(?:Serve|Proxy|Http)"
)
#: Request-log lines (and the offline example's "Prompt: ..") quote user text: never analysed.
_IGNORED_PREFIXES = ("Received request ", "Added request ", "Generated response ", "Prompt: ")
#: Every keyword some line check looks for; ``_analyze`` tests each once per line.
_ALL_KEYWORDS: tuple[str, ...] = tuple(
    sorted(
        {k for r in RULES for k in r.keywords}
        | {k for mk in _STAGE_MARKERS for k in mk.keywords}
        | {k for keys, _ in _FACT_PATTERNS for k in keys}
        | _EXIT_KEYWORDS
        | _SHUTDOWN_KEYWORDS
        | _STOP_ONLY_KEYWORDS
        | _INPROC_KEYWORDS
    )
)
_SIG_STAGE, _SIG_FACT, _SIG_RULE = range(3)


def _build_dispatch() -> dict[str, tuple[tuple[int, int], ...]]:
    """keyword -> the (kind, index) of every stage marker / fact / rule that uses it."""
    table: dict[str, list[tuple[int, int]]] = {}
    for i, mk in enumerate(_STAGE_MARKERS):
        for k in mk.keywords:
            table.setdefault(k, []).append((_SIG_STAGE, i))
    for i, (keys, _) in enumerate(_FACT_PATTERNS):
        for k in keys:
            table.setdefault(k, []).append((_SIG_FACT, i))
    for i, rule in enumerate(RULES):
        for k in rule.keywords:
            table.setdefault(k, []).append((_SIG_RULE, i))
    return {k: tuple(v) for k, v in table.items()}


_DISPATCH = _build_dispatch()
#: A traceback's source line quoting a log call (``    logger.info("Starting to load model
#: %s...", ...)``, IPython's ``--> 682 ...``): the message in it was not logged.
_SOURCE_LINE_RE = re.compile(r"""^\s+(?:-*>\s*)?(?:\d+\s+)?[\w.]*\w\(\s*f?["']""")
#: A line printed by vLLM itself: its logger's format (``ERROR 08-05 07:31:10 [core.py:12]``,
#: before 0.8 without ``[``) or its processes' prefixes: an exception raised or logged by vLLM.
_VLLM_ORIGIN_RE = re.compile(  # (a custom date format may add the year)
    r"(?:^|[\s|)\]>*:])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[?[\w.\-/]+\.py:\d+|\[[\w.\-/]+\.py)\]"
    r"|\((?:EngineCore|VllmWorker|Worker_|APIServer|RayWorkerWrapper)[^()]*pid=\d+"
)
#: The engine process's own error logger (V1's EngineCore ``[core.py:N]`` / ``[v1/engine/
#: core.py:N]``; V0's multiprocessing engine ``engine.py:N]``) prints the engine's fatal errors
#: ("EngineCore failed to start" / "encountered a fatal error", V0's run_mp_engine): a traceback
#: it printed is the engine dying, even cut before the exception. Survived: a failed utility
#: call, one request's pre-processing (``_SURVIVED_FRAME_RE``), and a traceback whose first
#: frame is the request handler (logged inside it: only its utility branch does that).
_ENGINE_LOGGER_FILES = (
    r"(?:(?:v1/engine/)?core|(?:engine/multiprocessing/)?engine"
    # vllm-ascend replaces run_engine_core (vllm_ascend/patch/platform/patch_core.py) and logs
    # the engine's fatal errors from there
    r"|patch_core"
    # a V1 worker's own error logger: "WorkerProc hit an exception" (worker_busy_loop; the
    # executor raises it in the engine core, which dies of it), "WorkerProc failed to start"
    r"|(?:v1/executor/)?multiproc_executor"
    r")\.py"
)
_ENGINE_LOGGER_RE = re.compile(
    r"\bERROR (?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?"
    + _ENGINE_LOGGER_FILES
    + r"(?::\d+)?\]"  # no line: a JSON record's logger (clean._record_lines)
)
#: ... that logger's location alone on a traceback line, its level and time dropped by what
#: relayed the engine's output (a launcher re-logging each line at its own level: dynamo's
#: "DEBUG dynamo_run::subprocess: [engine.py:280]   File ..."); a line that keeps a vLLM level
#: and time is read by :data:`_ENGINE_LOGGER_RE` alone.
_ENGINE_LOCATION_RE = re.compile(r"(?:^|[\s:|>])\[" + _ENGINE_LOGGER_FILES + r":\d+\] ")
_VLLM_LEVEL_TIME_RE = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d"
)
_SURVIVED_FRAME_RE = re.compile(
    r", in (?:_invoke_utility_method|preprocess_add_request"
    # a worker's RPC for a utility call ("WorkerProc hit an exception" in add_lora): the
    # engine core answers the caller with the error and goes on
    r"|add_lora|remove_lora|pin_lora|sleep|wake_up|reset_prefix_cache)\b"
)
_SURVIVED_FIRST_FRAME_RE = re.compile(r", in _handle_client_request\b")
#: A frame of the engine's busy loop (V1's run_busy_loop / _process_engine_step /
#: step_with_batch_queue, V0's run_engine_loop): an exception that reached the engine's error
#: logger through it stopped the loop, whatever access lines other processes print after it
#: (requests that were in flight, several API servers' interleaved output).
_ENGINE_LOOP_FRAME_RE = re.compile(
    r", in (?:run_busy_loop|_process_engine_step|step_with_batch_queue|run_engine_loop)\b"
)
#: torch asking the device its first questions (free memory, set it, initialise CUDA): an
#: error raised right there is the device's, not a kernel's.
_DEVICE_QUERY_FRAME_RE = re.compile(
    r"/torch/cuda/(?:memory|__init__)\.py\S*(?:, line \d+,)? in (?:mem_get_info|set_device|"
    r"_lazy_init|current_device|get_device_properties|get_device_capability|device_count)\b"
)
#: A frame of the LLM class's generation loop (offline / in-process): an exception raised
#: through it came while the engine was running requests (a Ctrl-C there is a stop).
_GENERATING_FRAME_RE = re.compile(r"/vllm/entrypoints/llm\.py\S*(?:, line \d+,)? in _run_engine\b")
#: A worker process's prefix (Ray's actor, vLLM's multiprocessing workers): an exception there
#: is a worker failing, which vLLM does not recover from.
_WORKER_ORIGIN_RE = re.compile(r"\((?:RayWorker\w*|VllmWorker\w*|Worker(?:_\w+)?)[ ][^()]*pid=\d+")
#: A traceback frame: Python's, or IPython's (``File ~/x/vllm/worker.py:682, in load_model``;
#: before IPython 8, ``/x/vllm/worker.py in load_model(self)``).
_FRAME_RE = re.compile(
    r'\s*(?:File (?:"[^"]*", line \d+|[~/][^,]*\.py:\d+, in )|[~/]\S*\.py in <?\w+>?\()'
)
#: A frame in vLLM's own package: ``/vllm/`` then one of its top-level packages or modules
#: (0.4 .. 0.3x); not a venv named vllm (``/opt/vllm/lib/...``) nor another project's vllm
#: adapter (``nemo_rl/models/generation/vllm/vllm_generation.py``).
_VLLM_CODE_RE = re.compile(
    r"/vllm/(?:(?:v1|engine|entrypoints|model_executor|worker|executor|distributed|attention|"
    r"compilation|core|device_allocator|inputs|lora|multimodal|platforms|plugins|"
    r"transformers_utils|tokenizers|utils|spec_decode|prompt_adapter|adapter_commons|renderers|"
    r"triton_utils|usage|profiler|logging_utils|reasoning|tool_parsers|parser|vllm_flash_attn|"
    r"third_party|kernels|ray|tracing|assets|benchmarks|ir|snapshot|config|model_loader)/|"
    r"(?:_custom_ops|_ipex_ops|_xpu_ops|_aiter_ops|envs|env_override|sequence|outputs|"
    r"sampling_params|pooling_params|logger|forward_context|scalar_type|logits_process|"
    r"logprobs|connections|tasks|exceptions|block|beam_search|scripts|version|config|utils|"
    r"tracing|model_inspection|collect_env|test_utils)\.py\b)"
)
#: Frames that are vLLM's engine under another name: a library's vLLM loader that catches the
#: engine's exception and re-raises its text (Unsloth's ``load_vllm``: ``raise
#: RuntimeError(error)``), and a fork's own package (Aphrodite, vLLM's code renamed).
_VLLM_KIN_FRAME_RE = re.compile(
    r"/unsloth_zoo/vllm_utils\.py\S*(?:, line \d+,)? in load_vllm\b"
    r"|/aphrodite/(?:modeling|quantization|endpoints|engine|executor|task_handler|common|"
    r"distributed|attention|processing|transformers_utils|platforms|v1|spec_decode|lora)/"
)
#: Traceback frames in attention / KV-cache code, and in weight-quantization / GEMM code:
#: where an FP8 dtype failure happened tells whose FP8 it is (the KV cache's or the weights').
_ATTN_FRAME_RE = re.compile(
    r"(?i:/attention/|attn|/mla/|_mla\b|\bmla_|kv_?cache|paged_attention|prefix_prefill)"
)
_QUANT_FRAME_RE = re.compile(r"(?i:/quantization/|fused_moe|scaled_mm|gemm|matmul|/linear\.py)")
#: A frame in vLLM's configuration / argument checks: an exception raised there is vLLM
#: refusing a setting (``_CONFIG_REFUSAL_RE`` says which exceptions count). SamplingParams'
#: own check (``_verify_args``: "max_tokens must be at least 1, got -239") refuses a
#: generation setting, which an in-process caller (an RL trainer) dies of.
_CONFIG_FRAME_RE = re.compile(
    r"/vllm/(?:config(?:/|\.py\b)|engine/arg_utils\.py|entrypoints/openai/cli_args\.py"
    r"|sampling_params\.py)"
)
#: ... and the serve command's own argument check (cli_args' validate_parsed_serve_args, not
#: the parser's construction, which imports plugins): whatever it calls (a chat template's
#: path, a tool parser's name) is checking an argument
_ARG_CHECK_FRAME_RE = re.compile(r"\bin validate_parsed_serve_args\b")
_CONFIG_REFUSAL_RE = re.compile(
    r"^\s*(?:[\w.]+\.)?(?P<kind>Value|NotImplemented|VLLMValidation|Type)Error: "
    r"(?P<refusal>.+?)\.?$"
)
#: ... of which frames in quantization code proper (not an unquantized linear layer's GEMM)
_QUANT_CODE_RE = re.compile(r"(?i:/quantization/|scaled_mm|gptq|awq|marlin|gguf|bitsandbytes)")
#: Triton kernel names (the ``def kernel(`` a CompilationError echoes) of either kind.
#: vLLM's Triton attention kernels: ``_fwd_kernel`` (prefix_prefill), ``_fwd_kernel_stage1`` /
#: ``_fwd_grouped_kernel_stage1`` (decode), ``kernel_unified_attention_2d``,
#: ``kernel_paged_attention_2d``, ``attn_fwd`` (ROCm), ``reshape_and_cache``...
_ATTN_KERNEL_RE = re.compile(r"(?i:cache|attn|attention|prefill|decode|paged|_fwd_\w*kernel)")
_QUANT_KERNEL_RE = re.compile(r"(?i:mm\b|_mm_|gemm|matmul|moe|quant|scaled|linear)")
_NEWLINE = re.compile("\n")
