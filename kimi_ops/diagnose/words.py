"""The words that pick the lines worth analysing (the fast path's needles) and the keywords
the tests hold them to: trigger words, ``str.find`` words, and keywords exempt from them."""

from __future__ import annotations

#: Words that find the lines worth analysing. Coverage relies on context: every exception
#: line holds ``Error`` / ``Exception``, so ``ValueError: No available memory ...`` needs no
#: word of its own; the rest cover stage, fact and non-exception failure lines. The tests
#: check this fast path against analysing every line. For speed, all first characters of
#: these words are mapped to one byte (see ``candidates._candidate_lines``), so keep them few
#: and rare, and keep at least three other characters in each (a word made only of first
#: characters would match any run of them).
_TRIGGER_WORDS: tuple[str, ...] = (
    # exceptions, tracebacks, exits; every ERROR / CRITICAL record
    "Error",
    "ERROR",
    "CRITICAL",
    "Exception",
    "KeyboardInterrupt",
    "Killed",
    '", line ',
    "xited with code",
    "xit code",  # died unexpectedly (exit code: -9); exited with exit code 1
    "xitcode",
    "Exit Code",
    "xpectedly",  # died unexpectedly
    # failure messages that are not (always) exception lines
    "Errno",
    "EADDRINUSE",
    "CUDA error",
    "CUDA out of memory",
    "CUDA driver",
    "CUDA capability",
    "CUDA graphs",
    "CUDA kernel",
    "Cuda failure",
    "CUBLAS_STATUS",
    "CONFIG_MAPPING[",  # transformers' AutoConfig looking a model_type up (its source line)
    "EngineCore loop active",  # V1's engine core waking from idle for requests (DEBUG)
    "Value error",
    "Value 'sm_",
    "Watchdog caught",
    "ProcessGroupNCCL",  # torch's NCCL process group: its watchdog and heartbeat monitor
    "Worker proc",
    "WorkerProc ",
    "Worker failed",
    "Engine core",
    "EngineCore failed",
    "EngineCore encountered",
    "Engine process",
    "Engine loop",
    "Engine is already dead",
    "Executor failed",
    "KV cache is needed",
    "KV Cache is",
    "UnspecifiedPlatform",
    "Unsupported",
    "User-specified",
    # stages and facts
    "LLM API server",
    "LLM server on",
    "LLM engine",
    "Defaulting to '",  # V0's model config: "This model supports multiple tasks: ..."
    "Loading ",
    "Model loading took",
    "Maximum concurrency",
    "Memory profiling",
    "Using ",
    "Server Ready",  # a wrapper's own line once it saw vLLM up (Unsloth's SyntheticDataKit)
    "Dynamo bytecode",
    "Directly load the compiled",
    "Compiling a graph",
    "KV cache memory",
    "KV cache size",
    "# GPU blocks",
    "# cuda blocks",
    "Capturing",
    "warmup model) took",
    "Uvicorn running",
    "Waiting for application",
    "wn triggered",  # [shutdown] API server: shutdown triggered
    "Shutdown initiated",  # the V1 engine core's orderly shutdown
    "Shutting down FastAPI",  # the HTTP launcher's stop (SIGINT / SIGTERM)
    "Started server",
    "Started HTTPService at",  # Triton Inference Server
    "Sleep mode freed",  # an engine that was up, put to sleep
    "Started GRPCInferenceService at",
    "\"successfully loaded '",  # ... Triton loaded a model (the vLLM backend's engine is up)
    "Supported_tasks",  # llm.py: the in-process engine is ready (and "Supported tasks")
    "Supported tasks",
    "Unsloth",  # Unsloth patching the model vLLM loaded in-process
    # signals: stops (SIGTERM / SIGINT) and kills; "Segfault encountered" (torch's handler)
    "SIGTERM",
    "SIGINT",
    "SIGHUP",
    "SIGKILL",
    "SIGSEGV",
    "SIGBUS",
    "SIGABRT",
    "SIGILL",
    "SIGFPE",
    "Segfault",
    "Segmentation fault",  # the shell's word for SIGSEGV (a line of its own)
    "Speicher",  # ... in German (Speicherzugriffsfehler), and its core dump (Speicherabzug)
    "Morto",  # the shell's word for SIGKILL in Portuguese (a line of its own)
    "Process ",  # multiprocessing: "Process Process-1:" (a child died of an exception)
    "with OOM on device",  # torch's caching allocator warning of an OOM (a [W...] line)
    # a wrapper's deadline ("vllm-server failed to start within timeout"); a 503 of the health
    # or wake-up route (a 500 holds "Error"): first characters already anchors, so no new pass
    "within",
    "Unavailable",
    "Leave wait_for_load",  # Xinference: the model it drives is loaded (or failed to)
    "Leave launch_builtin_model",
    "Memory access fault",  # the ROCm runtime's, before it aborts the process
    "Caught signal",  # UCX's handler
    "Signal (",  # tritonserver's handler
    "CCL WARN",  # NCCL_DEBUG's account of a failure
    "CCL_ERROR",  # Intel oneCCL's error records
    "CCL INFO",  # ... and its trace of an error code ("init.cc:2257 -> 1")
    "Cuda error",  # vLLM's custom all-reduce: "Failed: Cuda error .../custom_all_reduce.cuh"
    "Exception raised from",  # a C++ (c10) exception's source (the NCCL watchdog's)
    # (were str.find needles, one pass over each block apiece; their first or an inner
    # character is an anchor already, so here they cost no pass of their own)
    "Starting to load",
    "Python.h: No such",  # gcc, building a JIT helper without Python's headers
    "Deployed app '",  # Ray Serve: the app's deployments are healthy
    "CPStore",  # torch.distributed's TCPStore losing its master (a warning, no error word)
    "Unhandled exception",  # Ray's terminate handler
    "what(): ",  # std::terminate's account of the uncaught C++ exception
    "Check failed",  # glog / Ray CHECK
    "MARKED_DEAD",  # Ray's event log: a node declared dead
    "Please report this issue",  # Ray's "An unexpected system state has occurred" (CHECK)
    "Workers (tasks",  # Ray's memory monitor: "2 Workers (tasks / actors) killed due to ..."
    "Memory on the node",  # ... "Memory on the node (IP: ..) .. Ray killed this worker"
    "Parent process exited",
    # a container runtime / orchestrator reporting the server's container dead
    "Crashed container",
    "CrashLoopBackOff",
    "Exited (",
    "ModeIsEnabled",  # OfflineModeIsEnabled
)
#: Needles whose characters are all common; searched with ``str.find`` (few, on purpose).
#: Keywords whose lines need no trigger word: they only occur in exception messages (which
#: hold ``Error``) or in hard-wrapped continuations (analysed regardless of triggers).
_KEYWORDS_ON_ERROR_LINES: frozenset[str] = frozenset(
    # "def kernel(": Triton's CompilationError, an ERROR; the structured-output backend's
    # "Failed to advance FSM for request ..": an ERROR record
    {"maximum model length is", "def ", "Failed to advance FSM for request "}
)
_FIND_WORDS: tuple[str, ...] = (
    ": error: ",
    "Illegal instruction",  # the shell's word for SIGILL (a line of its own: no trigger word)
    "startup complete",
    "non-default args",
    "core dumped",
    "^C",
    # the route list; vllm-ascend's "Available memory: 0," (nothing left for the KV cache)
    "Available ",
    "systemd[",  # the journal's lines about the unit (stopped, killed, failed)
    "  Terminated ",  # bash's job report of a SIGTERM
    "vllm rollout",  # verl's rollout worker built its in-process engine
    "generation end",  # ... verl's trainer validated with it ("validation generation end")
    "sharding manager init done",  # ... verl's Megatron workers built it
    "' is ready at http",  # ... and serve.run's "Application 'default' is ready at http://.."
    "Graph capturing",  # V0 before 0.6.4's last init step (it printed no "init engine ... took")
    " panicked at ",  # a Rust thread's panic (a Rust front end, a tokenizer)
    "unrecognized arguments: ",  # argparse's message, when a page kept only that line
    # no such program: bash / zsh "command not found", sh (dash) "sh: 1: vllm: not found", the
    # container runtime "executable file not found"
    " not found",
    "initializing for too long",  # Modal's runner giving up on a server still starting
    "ping health check",  # ... and SageMaker's endpoint
)
#: Needles searched in the ASCII view of a block that holds other characters
#: (``candidates._candidate_lines``' ``marked``, one "?" per other character): the shapes of
#: the shell's report of a killed process in a non-English locale (model.
#: SHELL_SIGNAL_WORDS_L10N), its words no trigger words: a line that starts with a non-ASCII
#: word ("已杀死", "Убито", "段错误（核心已转储）"), the Latin-script words for SIGKILL alone on a
#: line, "(core dumped)" in German, Spanish and Portuguese, bash's job table ("[1]+  Getötet
#: ..") and a script's "bash: Zeile 1:  4242 Abgebrochen  ..". A needle that starts with a
#: newline finds the line after it. A block of ASCII only (most of a serving log) skips them:
#: its Latin-script words are the head scan's, but for the trigger words "Morto" and
#: "Speicher" (German's SIGSEGV and core dump).
_MARKED_FIND_WORDS: tuple[str, ...] = (
    "\n?",
    "\nGet?tet",
    "\nProcessus arr?t?",
    "\nTerminado (killed)",
    "core' generado)",
    "(imagem do n?cleo",
    "]+  ",
    "]-  ",
    "bash: ",
)
#: Keywords found only by the head scan (``scanner._FULL_SCAN``): they mark lines that, in a whole
#: log, come with a trigger word nearby or early (a route line, after "Starting vLLM API
#: server"); only a pasted excerpt shows them alone, and an excerpt is small.
_HEAD_ONLY_KEYWORDS: frozenset[str] = frozenset(
    {
        "Route: /",
        # the KV-cache dtype asked for: a command line or argparse Namespace comes first; the
        # engine's config dump (kv_cache_dtype=fp8) is on an "LLM engine" (trigger) line
        "--kv-cache-dtype",
        "kv_cache_dtype=",
        "no longer supports this GPU",  # PyTorch's warning at import, before vLLM starts
        "casting to bfloat16",  # the CPU build's dtype notice, at startup
    }
)

#: Python's threading excepthook heading a thread's traceback: that thread is gone (the process
#: goes on; what the thread did, a server's model loop, stops with it).
THREAD_DIED = "Exception in thread "
#: uvicorn's header over the traceback of a request the app failed: it answered 500 and went on.
ASGI_REQUEST_FAILED = "Exception in ASGI application"

#: Frequent "serving" markers (metrics, access log), found per chunk with rfind: each (a
#: preemption, the offline progress bar, the request log, speculative decoding's metrics) is
#: printed only by an engine that is running requests.
_FREQ_HEALTHY: tuple[str, ...] = (
    "Avg prompt throughput",
    "tok/s",  # a benchmark's token throughput ("Output token throughput (tok/s):", "160 tok/s")
    " reqs, ",  # the stats line, any version (0.1: "Throughput: 0.0 tokens/s, Running: 1 reqs, ..")
    "Prefix cache hit rate: ",  # V0 prints it on its own line
    "Speculative metrics: ",  # V0's speculative decoding
    # uvicorn's access log, any status (a 500 too; after a failure it stands: scanner._apply)
    'HTTP/1.1" ',
    "is preempted by PreemptionMode",
    "Processed prompts:",
    # the LLM class adding a generate() call's prompts to its engine (offline): it was built
    "Adding requests: ",
    "Added request ",
    # the API server warning of a request's fields it ignores (a client's extra "strict", ..)
    "in the request but ignored",
    "Aborted request ",
    "Finished request ",
    "SpecDecoding metrics",
    # vLLM's tools: benchmark_throughput's "Throughput: 2.1 requests/s, ..", a benchmark's
    # "Request throughput: 7.2 requests/s" (not its "requests/second"), "Avg latency: ", ..
    "requests/s",
    "Avg latency: ",
    "Average latency: ",  # (0.1's benchmark_serving.py)
    "Generated text: ",
    # V1's stats beside its throughput once requests ran: KV / cache transfers, diffusion, ..
    "KV Transfer metrics: ",
    "EC Transfer metrics: ",
    "DiffusionDecoding metrics: ",
    " context requests, ",
    # vLLM's serving benchmark's result table (its throughput lines are "tok/s") and its
    # speculative section (requests ran)
    "Serving Benchmark Result",
    "Acceptance rate (%):",
    "Acceptance length:",
    # LMCache (a KV connector) storing / retrieving a request's KV cache: requests are running
    "Storing KV cache for ",
    "LMCache INFO: Stored ",
    "LMCache INFO: Retrieved ",
    # a request being handled: a tool parser's lines, V0's scheduler refusing a long prompt
    "_tool_parser.py:",
    "tokens) is too long and exceeds",
    # vLLM-Omni (multi-stage, diffusion models): a request generated, its metrics record
    "Generation completed successfully",
    "'request_level_metrics'",
)
#: Of those, a running server's own traffic lines (V1's API-server stats, uvicorn's access log):
#: printed on while it stops, so one after a stop keeps the stop (the requests it then fails
#: are the teardown). An offline tool's result line ends its run: a new one may follow.
_SERVING_WHILE_STOPPING = ("Avg prompt throughput", " reqs, ", 'HTTP/1.1" ')
#: Searched as those are in a block of JSON records (a tool parser's record has no line number)
_FREQ_HEALTHY_JSON = ("_tool_parser.py] ",)
