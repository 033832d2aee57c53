"""kimi-ops stand-in engine: it EMULATES a vLLM OpenAI-compatible server for tests and demos.

THIS IS NOT vLLM. It loads no model, touches no GPU and needs only the Python standard library.
The deploy tool uploads it as ONE file, ``<run_dir>/kimi_standin.py`` (built from this package
by ``standin.bundle``), and starts it in place of ``python -m vllm.entrypoints.openai.api_server``
with the very same flags. It then behaves like vLLM 0.1x as seen from outside: the same startup
stage lines, process prefixes and tracebacks; the same failures (FP8 KV cache with TRITON_MLA on
SM120 before 0.18, busy port, missing model, missing --trust-remote-code, unknown flags, GPUs
held by a stale server, too little KV-cache memory); a process tree (API server -> engine core ->
TP workers); /dev/shm files like vLLM's shared-memory queues; and finally an HTTP server whose
/v1/chat/completions returns a canned sentence.

Modes (first argument):
  (anything else)   serve mode; takes vLLM api_server flags (--model DIR --port 8000 ...)
  nvidia-smi ARGS   emulates nvidia-smi (--query-gpu, --query-compute-apps, -L, bare table)
                    for the emulated GPUs and the live stand-in servers
  vllm-version      prints the emulated vLLM version (as `import vllm; vllm.__version__` would)

Settings come from the JSON file named by $KIMI_STANDIN_CONFIG, else ``standin.json`` next to
the running file, else defaults (see config.DEFAULTS; unknown keys are ignored).

The package must stay self-contained and stdlib-only (Ray is imported only with
``--distributed-executor-backend ray``, as vLLM does): it runs alone on the host and imports
nothing from kimi_ops. Modules import each other only as ``from standin.MODULE import NAME``, so
that the bundler can concatenate them into one file.
"""
