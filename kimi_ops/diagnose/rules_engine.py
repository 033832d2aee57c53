"""Rules, part 4: the engine died of a cause no other rule names (its own death lines)."""

from __future__ import annotations

from kimi_ops.diagnose.model import Rule, _rule

#: The API server's health route failing: it asks the engine, and answers 503 (V1:
#: EngineDeadError) or 500 (V0: its check raised) only when the engine is dead.
FAILED_HEALTH_CHECK = r'"GET /health HTTP/[\d.]+" 50[03]\b'
#: The sleep-mode route that wakes the engine failing: it stays asleep, and serves nothing.
FAILED_WAKE_UP = r'"POST /wake_up(?:\?\S*)? HTTP/[\d.]+" 5\d\d\b'
#: vLLM's own engine and workers as Ray actors (0.1 .. 0.x; a fork's RayWorkerAphrodite), as
#: Ray names them after "ray::": another framework's actor is not vLLM's engine.
_VLLM_RAY_ACTOR = r"(?P<killed_proc>(?:LLMEngine|_?AsyncLLMEngine|RayWorker\w*|EngineCore\w*)\b)"

ENGINE_RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------- engine_dead_other
    _rule(
        "cuda_runtime_error",
        "engine_dead_other",
        6,
        ("CUDA error: ", "HIP error: ", "Search for `cudaError"),
        # a GPU kernel fault while running (out of memory is cuda_oom's; "no kernel image" and
        # "invalid device function" are unsupported_gpu's, which rank higher)
        [
            r"\b(?:CUDA|HIP) error: (?P<cuda_error>(?!out of memory)[a-z][^'\\\n]*?)\.?(?:'|\\n|$)",
            # PyTorch's footer of a CUDA error report names the error code even when the
            # excerpt cuts the "CUDA error:" line ("Search for `cudaErrorAssert' in https://
            # docs.nvidia.com/cuda/..."); codes of other labels' causes are theirs
            r"^Search for `(?P<cuda_error>cudaError(?!MemoryAllocation|NoKernelImageForDevice|"
            r"UnsupportedPtxVersion|InsufficientDriver|NoDevice|DevicesUnavailable)\w+)' in https",
        ],
        "A GPU kernel failed while the engine ran (CUDA error: {cuda_error}): a kernel, driver or "
        "vLLM bug rather than a setting. Retry with --enforce-eager in extra_args (rules out "
        "CUDA graphs and torch.compile), run once with CUDA_LAUNCH_BLOCKING=1 in the profile's "
        "env to find the kernel, check the driver and vLLM versions, and search vLLM's issues "
        "for the error with this model[[ (vLLM {vllm_version})]].",
        "engine died: CUDA error: {cuda_error}",
    ),
    _rule(
        "engine_wrapper",
        "engine_dead_other",
        5,
        (
            "Engine core initialization failed",
            "EngineCore failed to start",
            "died unexpectedly",
            "Engine process failed to start",
            "WorkerProc",
            "Worker failed with error",
            "EngineDeadError",
            "EngineCore encountered",
            "EngineCoreProc encountered",
            "EngineCore hit an exception",
            "Background loop has errored",
            "Engine loop has died",
            "is already dead",
            "Exception in worker",
            "Executor failed",
            "fatal signal from worker",
            "Error in model execution",
            "No heartbeat received",
            "background task failed",
            "AsyncLLMEngine has failed",
            "Exception in thread",
            "in run_mp_engine",
            "in run_rpc_server",
            "died before responding",
            "output_handler failed",
            "Engine iteration timed out",
            "Task finished unexpectedly",
            "Weight cache daemon",
            "GET /health HTTP/",
        ),
        [
            r"Engine core initialization failed",
            r"EngineCore failed to start",
            r"died unexpectedly",
            r"Engine process failed to start",
            r"WorkerProc (?:failed(?: to start)?\b|initialization failed|hit an exception)",
            r"Worker failed with error",
            r"EngineDeadError",
            r"EngineCore (?:encountered (?:a fatal error|an issue)|hit an exception)",
            # an engine core process of a project built on vLLM, under its own class name
            # (vLLM-Omni's run_stage_core logs "StageEngineCoreProc encountered a fatal error.")
            r"\w*EngineCoreProc encountered a fatal error",
            r"Background loop has errored already",
            r"Engine loop has died",
            r"(?:MQLLMEngine|AsyncLLMEngine) is already dead|AsyncLLM output_handler failed",
            r"RPCServer process died before responding|Engine iteration timed out",  # V0 0.4/0.5
            # V0's AsyncLLMEngine when its engine loop ended ("... This should never happen!")
            r"Task finished unexpectedly\. This should never happen",
            r"Exception in worker \S+ while processing method",
            r"Executor failed",
            # 0.32's weight-cache preload daemon (one per rank) died before it was ready
            r"Weight cache daemon rank\(s\) exited during startup",
            r"(?i:got fatal signal from worker processes)",
            r"Error in model execution",  # V0's MQLLMEngine, then it dies
            r"No heartbeat received from MQLLMEngine",  # V0's API server: the engine is gone
            r"Engine background task failed",  # V0's AsyncLLMEngine loop
            r"AsyncLLMEngine has failed",
            FAILED_HEALTH_CHECK,
            # the V1 engine core's socket threads: one dying stops the engine's requests
            r"^Exception in thread [^(]*\((?:process_input_sockets?|process_output_sockets?)\)",
            # V0's engine process (MQLLMEngine): a traceback through its entry point is the engine
            # failing (the excerpt may cut the exception and "Engine process failed to start")
            # (or a fork's: ipex-llm's ipex_llm/vllm/xpu/engine/engine.py)
            r"^\s*File \S*/engine/(?:multiprocessing/)?engine\.py\S*, line \d+, in run_mp_engine$",
            # ... and 0.5's (the OpenAI server's RPC engine process, before run_mp_engine)
            r"^\s*File \S*/entrypoints/openai/rpc/server\.py\S*, line \d+, in run_rpc_server$",
        ],
        "The engine died and none of the known causes was recognised. Read the traceback "
        "above the wrapper error[[ - first error: {root_cause}]]; the last log lines show the "
        "context.",
        "engine died[[: {root_cause}]]",
        # a Ray actor of another framework, not vLLM's engine; Python's resource tracker
        # relaunching itself (a warning at exit)
        exclude=[r"[Aa]ctor died|resource_tracker: process died"],
    ),
    _rule(
        "worker_method_failed",
        "unknown",
        3,
        ("Error executing method",),
        # V0's worker logs this, then its traceback, then the exception: that exception is the
        # cause (the rule is dropped once an exception shows, see _without_consequences); a log
        # cut before it shows a worker failing and nothing of why
        [r"Error executing method '?(?P<method>\w+)'?"],
        "A worker's {method} failed, and the log ends before the exception that says why: read "
        "the lines after the worker's traceback in the full log (a worker's failure stops V0's "
        "engine).",
        "a worker's {method} failed (its exception is not in the log)",
    ),
    _rule(
        "engine_actor_died",
        "engine_dead_other",
        5,
        ("raised in its creation task",),
        # vLLM's own engine / workers as Ray actors (0.1 .. 0.x) dying while being created
        [r"actor died because of an error raised in its creation task, ray::" + _VLLM_RAY_ACTOR],
        "vLLM's {killed_proc} (a Ray actor) died while starting[[ - first error: {root_cause}]]:"
        " read the exception Ray prints after this line (or the actor's log on its node).",
        "{killed_proc} actor died while starting[[: {root_cause}]]",
    ),
    _rule(
        "engine_actor_bug",
        "engine_dead_other",
        5,
        ("RayTaskError(",),
        # a method of vLLM's engine or worker as a Ray actor (V0 with Ray, --engine-use-ray;
        # a fork's RayWorkerAphrodite) raised an exception of a programming error's type, which
        # Ray re-raises in the driver: the engine's step fails and it dies. Its message may be
        # cut: the type says it is none of the causes (a RuntimeError / ValueError / OSError
        # may be one, and a cut one shows no cause)
        [
            r"RayTaskError\((?P<what>(?:Assertion|Key|Index|Attribute|Type|ZeroDivision|Name|"
            r"UnboundLocal|Recursion)Error)\): ray::" + _VLLM_RAY_ACTOR + r"\.(?P<method>\w+)\(\)"
        ],
        "vLLM's {killed_proc} (a Ray actor) raised {what} in {method} and the engine died of it "
        "(a bug, none of the known causes): read the remote traceback Ray prints after this "
        "line (or the actor's log on its node), then search vLLM's issues for the {what} with "
        "the model and version[[ ({vllm_version})]].",
        "engine died: {what} in {killed_proc}.{method}",
    ),
    _rule(
        "engine_traceback",
        "engine_dead_other",
        4,
        ("run_engine_core", "run_mp_engine", "run_rpc_server", "worker_main", "worker_busy_loop"),
        # (run_rpc_server: 0.5's engine process, the OpenAI server's RPC server)
        [r", in (?:run_engine_core|run_mp_engine|run_rpc_server|worker_main|worker_busy_loop)\b"],
        "The engine process crashed with a traceback and none of the known causes was "
        "recognised[[ - first error: {root_cause}]]. Read the traceback; the last log lines "
        "show the context.",
        "engine process crashed[[: {root_cause}]]",
        # a frame only: it counts when the exception (or an exit) follows; a traceback cut
        # before its exception shows no cause (unknown)
        weak=True,
    ),
    _rule(
        "engine_loop_exception",
        "engine_dead_other",
        4,
        ("Error('", 'Error("', "Exception('", 'Exception("'),
        # V0's engine process (MQLLMEngine.start, 0.6-0.10) logs the exception that ended its
        # loop as its repr, alone on a line: `logger.exception(repr(e))`; the API server may
        # have answered requests before it
        [r"^(?:[A-Za-z_]\w*\.)*(?P<what>\w*(?:Error|Exception)\((['\"]).*\2\))$"],
        "The engine's loop ended on an exception ({what}) and the engine process died; the "
        "server cannot answer any more. Read the traceback around it in the full log, then "
        "search vLLM's issues for the exception[[ (vLLM {vllm_version})]].",
        "engine loop died: {what}",
    ),
    _rule(
        "wake_up_failed",
        "unknown",
        3,
        ("POST /wake_up",),
        # sleep mode (--enable-sleep-mode; RL frameworks put the engine to sleep between
        # rollouts): the API server's /wake_up answered an error, the engine did not wake
        [FAILED_WAKE_UP],
        "The engine was put to sleep (sleep mode) and waking it failed (POST /wake_up answered "
        "an error): it holds no weights or KV cache and serves nothing until a wake-up succeeds. "
        "Read the traceback after the access line (often GPU memory taken by another process "
        "while it slept), free that memory, then wake it again or redeploy.",
        "waking the engine from sleep mode failed",
    ),
)
