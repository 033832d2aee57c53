"""Emulated vLLM tracebacks: compact frame specs and the text CPython would print."""

from __future__ import annotations

import os
import sys

PYV = f"python{sys.version_info[0]}.{sys.version_info[1]}"
STDLIB = os.path.join(sys.base_prefix, "lib", PYV)
SITE = os.path.join(sys.prefix, "lib", PYV, "site-packages")
PATHS = {"V/": SITE + "/vllm/", "S/": SITE + "/", "L/": STDLIB + "/"}

Frame = tuple  # (path, line, function, code | None, caret: bool)


def tb(spec: str) -> list[Frame]:
    """Frames from a compact spec, one frame per 'PATH:LINE in FUNC' line, each optionally
    followed by an indented code line; a code line starting with '^' gets Python 3.11-style
    carets. PATH prefixes: V/ = vllm package, S/ = site-packages, L/ = stdlib."""
    frames: list[Frame] = []
    for raw in spec.strip("\n").splitlines():
        if not raw.strip():
            continue
        if raw.startswith(" "):
            code = raw.strip()
            path, line, func, _, _ = frames[-1]
            frames[-1] = (path, line, func, code.lstrip("^"), code.startswith("^"))
            continue
        loc, func = raw.rsplit(" in ", 1)
        path, line = loc.rsplit(":", 1)
        for short, full in PATHS.items():
            if path.startswith(short):
                path = full + path[len(short) :]
        frames.append((path, int(line), func, None, False))
    return frames


def _carets(code: str) -> str | None:
    """Underline the called expression like CPython >= 3.11 does (approximately)."""
    start = 0
    for marker in (" = ", "return ", "async with ", "with "):
        idx = code.find(marker)
        if idx != -1 and (marker != " = " or "(" not in code or idx < code.find("(")):
            start = idx + len(marker)
            break
    body = code[start:]
    if body.endswith(" as ("):
        body = body[: body.rfind(")") + 1]
    if not body or start == 0 and body == code:
        return None
    return " " * (4 + start) + "^" * len(body)


def traceback_text(
    frames: list[Frame], exc: str, cause: tuple[list[Frame], str] | None = None
) -> list[str]:
    lines: list[str] = []
    chain = ([cause] if cause else []) + [(frames, exc)]
    for i, (fr, text) in enumerate(chain):
        if i:
            lines += [
                "",
                "The above exception was the direct cause of the following exception:",
                "",
            ]
        lines.append("Traceback (most recent call last):")
        for path, line, func, code, caret in fr:
            lines.append(f'  File "{path}", line {line}, in {func}')
            if code:
                lines.append(f"    {code}")
                under = _carets(code) if caret and sys.version_info >= (3, 11) else None
                if under:
                    lines.append(under)
        lines += text.split("\n")
    return lines


def runpy_frames(entrypoint: str) -> list[Frame]:
    if entrypoint == "serve":
        return tb("""
/usr/local/bin/vllm:10 in <module>
    sys.exit(main())
V/entrypoints/cli/main.py:73 in main
    args.dispatch_function(args)
V/entrypoints/cli/serve.py:60 in cmd
    uvloop.run(run_server(args))
""")
    if sys.version_info >= (3, 11):
        head = tb("<frozen runpy>:198 in _run_module_as_main\n<frozen runpy>:88 in _run_code")
    else:
        head = tb("""
L/runpy.py:196 in _run_module_as_main
    return _run_code(code, main_globals, None,
L/runpy.py:86 in _run_code
    exec(code, run_globals)
""")
    return head + tb("""
V/entrypoints/openai/api_server.py:1041 in <module>
    uvloop.run(run_server(args))
""")


def api_prelude(entrypoint: str) -> list[Frame]:
    """Frames from process start down into api_server.run_server (0.1x layout)."""
    return runpy_frames(entrypoint) + tb("""
S/uvloop/__init__.py:96 in run
    ^return __asyncio.run(
L/asyncio/runners.py:195 in run
    ^return runner.run(main)
L/asyncio/runners.py:118 in run
    ^return self._loop.run_until_complete(task)
uvloop/loop.pyx:1518 in uvloop.loop.Loop.run_until_complete
S/uvloop/__init__.py:48 in wrapper
    ^return await main
""")


def engine_client_prelude(entrypoint: str) -> list[Frame]:
    return api_prelude(entrypoint) + tb("""
V/entrypoints/openai/api_server.py:1002 in run_server
    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)
V/entrypoints/openai/api_server.py:1021 in run_server_worker
    ^async with build_async_engine_client(
L/contextlib.py:210 in __aenter__
    ^return await anext(self.gen)
V/entrypoints/openai/api_server.py:171 in build_async_engine_client
    ^async with build_async_engine_client_from_engine_args(
L/contextlib.py:210 in __aenter__
    ^return await anext(self.gen)
""")


MODEL_CONFIG_FRAMES = """
V/entrypoints/openai/api_server.py:198 in build_async_engine_client_from_engine_args
    ^vllm_config = engine_args.create_engine_config(usage_context=usage_context)
V/engine/arg_utils.py:1374 in create_engine_config
    ^model_config = self.create_model_config()
V/engine/arg_utils.py:1228 in create_model_config
    ^return ModelConfig(
S/pydantic/_internal/_dataclasses.py:121 in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
V/config/model.py:458 in __post_init__
    ^hf_config = get_config(
"""

ENGINE_STARTUP_FRAMES = """
V/entrypoints/openai/api_server.py:212 in build_async_engine_client_from_engine_args
    ^async_llm = AsyncLLM.from_vllm_config(
V/v1/engine/async_llm.py:207 in from_vllm_config
    ^return cls(
V/v1/engine/async_llm.py:134 in __init__
    ^self.engine_core = EngineCoreClient.make_async_mp_client(
V/v1/engine/core_client.py:102 in make_async_mp_client
    ^return AsyncMPClient(*client_args)
V/v1/engine/core_client.py:769 in __init__
    super().__init__(
V/v1/engine/core_client.py:448 in __init__
    ^with launch_core_engines(vllm_config, executor_class, log_stats) as (
L/contextlib.py:144 in __exit__
    next(self.gen)
V/v1/engine/utils.py:732 in launch_core_engines
    wait_for_engine_startup(
V/v1/engine/utils.py:785 in wait_for_engine_startup
    raise RuntimeError(
"""


# Engine core and TP workers (engine.py): where vLLM raises during start-up.
ENGINE_INIT = """
V/v1/engine/core.py:937 in run_engine_core
    ^engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)
V/v1/engine/core.py:691 in __init__
    super().__init__(
"""
EXECUTOR_INIT = """
V/v1/engine/core.py:105 in __init__
    ^self.model_executor = executor_class(vllm_config)
V/v1/executor/abstract.py:101 in __init__
    self._init_executor()
"""
WAIT_FOR_WORKERS = """
V/v1/executor/multiproc_executor.py:172 in _init_executor
    ^self.workers = WorkerProc.wait_for_ready(unready_workers)
V/v1/executor/multiproc_executor.py:658 in wait_for_ready
    raise e from None
"""
KV_INIT = """
V/v1/engine/core.py:114 in __init__
    ^num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(
"""
PROFILE_RPC = """
V/v1/engine/core.py:231 in _initialize_kv_caches
    ^available_gpu_memory = self.model_executor.determine_available_memory()
V/v1/executor/abstract.py:137 in determine_available_memory
    ^return self.collective_rpc("determine_available_memory")
"""
KV_CHECK = """
V/v1/engine/core.py:250 in _initialize_kv_caches
    ^kv_cache_configs = get_kv_cache_configs(
V/v1/core/kv_cache_utils.py:1290 in get_kv_cache_configs
    check_enough_kv_cache_memory(
V/v1/core/kv_cache_utils.py:{line} in check_enough_kv_cache_memory
    raise ValueError(
"""
LOAD_MODEL = """
V/v1/worker/gpu_worker.py:284 in load_model
    self.model_runner.load_model(eep_scale_up=eep_scale_up)
V/v1/worker/gpu_model_runner.py:4510 in load_model
    ^self.model = model_loader.load_model(
"""
LOAD_WEIGHTS = """
V/model_executor/model_loader/base_loader.py:56 in load_model
    self.load_weights(model, model_config)
V/model_executor/model_loader/default_loader.py:305 in load_weights
    ^loaded_weights = model.load_weights(
V/model_executor/model_loader/weight_utils.py:742 in safetensors_weights_iterator
    ^param = f.get_tensor(name)
"""
INIT_MODEL = """
V/model_executor/model_loader/base_loader.py:49 in load_model
    ^model = initialize_model(
V/model_executor/model_loader/utils.py:55 in initialize_model
    ^return model_class(vllm_config=vllm_config, prefix=prefix)
"""
TRITON_MLA_RAISE = """
V/v1/attention/backends/mla/triton_mla.py:96 in __init__
    raise NotImplementedError(
"""
KIMI_INIT = """
V/model_executor/models/kimi_k25.py:412 in __init__
    ^self.language_model = init_vllm_registered_model(
"""
MLA_INIT = """
V/model_executor/models/deepseek_v2.py:1325 in __init__
    ^self.model = DeepseekV2Model(
V/model_executor/models/deepseek_v2.py:1003 in __init__
    ^self.self_attn = attn_cls(
V/model_executor/models/deepseek_v2.py:905 in __init__
    ^self.mla_attn = MultiHeadLatentAttentionWrapper(
V/model_executor/layers/mla.py:141 in __init__
    ^self.mla_attn = MLAAttention(
V/attention/layer.py:691 in __init__
    ^self.impl = impl_cls(
"""
