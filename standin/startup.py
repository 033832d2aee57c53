"""API-server start-up: the plan, the banner, and vLLM's checks of model, length and port."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
from typing import Any

from standin.args import non_default_args
from standin.config import parse_version, visible_gpus
from standin.frames import (
    MODEL_CONFIG_FRAMES,
    api_prelude,
    engine_client_prelude,
    tb,
    traceback_text,
)
from standin.logfmt import Role
from standin.model import ModelInfo


class Plan:
    def __init__(self, cfg: dict[str, Any], args: Any, model: ModelInfo) -> None:
        self.cfg = cfg
        self.args = args
        self.model = model
        self.ver = parse_version(cfg["vllm_version"])
        self.tp = max(1, int(args.tensor_parallel_size))
        self.world = self.tp * max(1, int(args.pipeline_parallel_size))
        self.gpus = visible_gpus(cfg)[: self.world]
        self.served: list[str] = list(args.served_model_name or [args.model])
        self.auto_len = args.max_model_len == -1
        self.max_len = model.max_pos if self.auto_len else int(args.max_model_len or model.max_pos)
        self.util = float(args.gpu_memory_utilization)
        kv_arg = args.kv_cache_dtype or "auto"
        if kv_arg == "auto":  # "auto" takes the checkpoint's value (FP8 -> fp8_e4m3)
            self.kv_dtype = "fp8_e4m3" if model.kv_fp8 else "auto"
        else:
            self.kv_dtype = kv_arg
        self.kv_fp8 = self.kv_dtype.startswith("fp8")
        self.eager = bool(args.enforce_eager)
        self.batched = int(args.max_num_batched_tokens or 8192)
        env_backend = os.environ.get("VLLM_ATTENTION_BACKEND")
        if self.ver >= (0, 26, 0):
            env_backend = None  # deprecated env var, silently ignored from 0.26 (facts.md)
        self.backend_arg: str | None = getattr(args, "attention_backend", None) or env_backend
        self.total_gib = cfg["memory_mib"] / 1024.0
        self.weights_gib = float(cfg["model_weights_gib"])

    # Version-dependent process names (approximate switch points).
    def engine_name(self) -> str:
        if self.ver >= (0, 18, 0):
            return "EngineCore"
        return "EngineCore_DP0" if self.ver >= (0, 10, 0) else "EngineCore_0"

    def worker_name(self, rank: int) -> str:
        return f"Worker_TP{rank}" if self.ver >= (0, 11, 0) else f"VllmWorker TP{rank}"


def emit_banner(cfg: dict[str, Any], api: Role, args: Any, parser: argparse.ArgumentParser) -> None:
    ver = parse_version(cfg["vllm_version"])
    version = cfg["vllm_version"]
    if ver >= (0, 15, 0):  # the logo replaced "vLLM API server version X" (approximate)
        for line in (
            "",
            "       █     █     █▄   ▄█",
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
            f"  █▄█▀ █     █     █     █  model   {args.model}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
            "",
        ):
            api.info("utils.py:297", line)
    else:
        api.info("api_server.py:1839", f"vLLM API server version {version}")
    api.info("utils.py:233", f"non-default args: {non_default_args(args, parser)!r}")
    if getattr(args, "disable_log_requests", False) and ver >= (0, 10, 0):
        api.warning(
            "arg_utils.py:1902",
            "`--disable-log-requests` is deprecated and has been replaced with "
            "`--no-enable-log-requests`. This will be removed in v0.12.0.",
        )


def check_max_len(cfg: dict[str, Any], args: Any, model: ModelInfo, api: Role) -> int | None:
    """vLLM refuses --max-model-len above max_position_embeddings unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""
    want = args.max_model_len
    if not want or want == -1 or want <= model.max_pos:
        return None
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1":
        api.warning(
            "model.py:2150",
            f"User-specified max_model_len ({want}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model.max_pos} or model_max_length=None in model's "
            "config.json). VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the "
            "model uses relative position encoding (RoPE), positions exceeding "
            "derived_max_model_len lead to nan. If the model uses absolute position encoding, "
            "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds "
            "error.",
        )
        return None
    frames = engine_client_prelude(cfg["entrypoint"]) + tb(MODEL_CONFIG_FRAMES)[:4]
    msg = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        f"  Value error, User-specified max_model_len ({want}) is greater than the derived "
        f"max_model_len (max_position_embeddings={model.max_pos} or model_max_length=None in "
        "model's config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme "
        "caution. If the model uses relative position encoding (RoPE), positions exceeding "
        "derived_max_model_len lead to nan. If the model uses absolute position encoding, "
        "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error. "
        "[type=value_error, input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.11/v/value_error"
    )
    return fail_api(api, traceback_text(frames, msg))


def emit_config_lines(plan: Plan, api: Role) -> None:
    api.info("model.py:1580", f"Using max model len {plan.max_len}")
    if plan.model.quantization == "modelopt_fp4":
        api.info(
            "modelopt.py:925",
            "Detected ModelOpt NVFP4 checkpoint. Please note that the format is experimental "
            "and could change in future.",
        )
    if plan.kv_fp8:
        api.info(
            "cache.py:211",
            f"Using {plan.kv_dtype} data type to store kv cache. It reduces the GPU memory "
            "footprint and boosts the performance. Meanwhile, it may cause accuracy drop without "
            "a proper scaling factor.",
        )
    api.info(
        "scheduler.py:231",
        f"Chunked prefill is enabled with max_num_batched_tokens={plan.batched}.",
    )
    if plan.world > 1:
        api.info("parallel.py:540", "Defaulting to use mp for distributed inference")
    api.info("vllm.py:748", "Asynchronous scheduling is enabled.")
    if plan.eager:
        api.warning(
            "vllm.py:782",
            "Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to "
            "setting -cc.mode=none -cc.cudagraph_mode=none",
        )
    if os.environ.get("VLLM_ATTENTION_BACKEND") and plan.ver >= (0, 11, 0):
        api.warning(
            "envs.py:1528",
            "VLLM_ATTENTION_BACKEND is deprecated; use --attention-backend instead"
            + (" (it is ignored from v0.26)." if plan.ver < (0, 26, 0) else ". It is ignored."),
        )


def fail_api(api: Role, lines: list[str]) -> int:
    api.raw("\n".join(lines))
    return 1


NOT_FOUND = """ValueError: Invalid repository ID or local directory specified: '{path}'.
Please verify the following requirements:
1. Provide a valid Hugging Face repository ID.
2. Specify a local directory that contains a recognized configuration file.
   - For Hugging Face models: ensure the presence of a 'config.json'.
   - For Mistral models: ensure the presence of a 'params.json'.
3. For GGUF: pass the local path of the GGUF checkpoint.
   Loading GGUF from a remote repo directly is not yet supported.
"""


def check_model(cfg: dict[str, Any], args: Any, api: Role) -> ModelInfo | int:
    """ModelInfo, or vLLM's model-not-found / bad config / trust-remote-code error (-> 1)."""
    path = args.model
    outer = engine_client_prelude(cfg["entrypoint"]) + tb(MODEL_CONFIG_FRAMES)
    not_found_frames = outer + tb("""
V/transformers_utils/config.py:620 in get_config
    raise ValueError(error_message) from e
""")
    probe = tb("""
V/transformers_utils/config.py:598 in get_config
    if is_gguf or file_or_path_exists(model, HF_CONFIG_NAME, revision=revision):
V/transformers_utils/config.py:127 in file_or_path_exists
    ^return file_exists(
""")
    if not os.path.isdir(path):
        # Not a local directory: vLLM treats the name as a Hugging Face repo id.
        if re.match(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$", path):
            cause = (
                probe + tb("S/huggingface_hub/hf_api.py:3041 in file_exists"),
                "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: "
                f"Root=1-{secrets.token_hex(4)}-{secrets.token_hex(12)})\n\n"
                f"Repository Not Found for url: https://huggingface.co/{path}/resolve/main/"
                "config.json.\nPlease make sure you specified the correct `repo_id` and "
                "`repo_type`.\nIf you are trying to access a private or gated repo, make sure "
                "you are authenticated.",
            )
        else:
            cause = (
                probe
                + tb("""
S/huggingface_hub/utils/_validators.py:106 in _inner_fn
    validate_repo_id(arg_value)
S/huggingface_hub/utils/_validators.py:154 in validate_repo_id
    raise HFValidationError(
"""),
                "huggingface_hub.errors.HFValidationError: Repo id must be in the form "
                f"'repo_name' or 'namespace/repo_name': '{path}'. Use `repo_type` argument if "
                "needed.",
            )
        return fail_api(api, traceback_text(not_found_frames, NOT_FOUND.format(path=path), cause))
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        cause = (
            tb("V/transformers_utils/config.py:606 in get_config\n    raise ValueError("),
            "ValueError: Could not detect config format for no config file found. With "
            "config_format 'auto', ensure your model has either config.json (HF format) or "
            "params.json (Mistral format). Otherwise please specify your_custom_config_format "
            "in engine args for customized config parser.",
        )
        return fail_api(api, traceback_text(not_found_frames, NOT_FOUND.format(path=path), cause))
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            config = json.load(fh)
        if not isinstance(config, dict):
            raise ValueError("config.json does not hold a JSON object")
    except (OSError, ValueError) as exc:
        frames = outer + tb("""
V/transformers_utils/config.py:668 in get_config
    ^config_dict, config = config_parser.parse(
S/transformers/configuration_utils.py:715 in _get_config_dict
    raise OSError(
""")
        return fail_api(
            api,
            traceback_text(
                frames,
                f"OSError: It looks like the config file at '{cfg_path}' is not a valid JSON "
                f"file. ({exc})",
            ),
        )
    model = ModelInfo(path, config)
    if "AutoConfig" in model.auto_map and not args.trust_remote_code:
        cause = (
            tb("""
V/transformers_utils/config.py:301 in parse
    ^config = AutoConfig.from_pretrained(
S/transformers/models/auto/configuration_auto.py:1318 in from_pretrained
    ^trust_remote_code = resolve_trust_remote_code(
S/transformers/dynamic_module_utils.py:736 in resolve_trust_remote_code
    raise ValueError(
"""),
            f"ValueError: The repository {path} contains custom code which must be executed to "
            f"correctly load the model. You can inspect the repository content at {path} .\n"
            f" You can inspect the repository content at https://hf.co/{path}.\n"
            "Please pass the argument `trust_remote_code=True` to allow custom code to be run.",
        )
        frames = outer + tb("""
V/transformers_utils/config.py:668 in get_config
    ^config_dict, config = config_parser.parse(
V/transformers_utils/config.py:318 in parse
    raise RuntimeError(err_msg) from e
""")
        return fail_api(
            api,
            traceback_text(
                frames,
                "RuntimeError: Failed to load the model config. If the model is a custom model not "
                "yet available in the HuggingFace transformers library, consider setting "
                "`trust_remote_code=True` in LLM or using the `--trust-remote-code` flag in the "
                "CLI.",
                cause,
            ),
        )
    return model


def prebind(args: Any, entrypoint: str, api: Role) -> socket.socket | int:
    """Bind the listening address before loading, like vLLM's setup_server()."""
    family = socket.AF_INET6 if args.host and ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Real vLLM also sets SO_REUSEPORT; the stand-in does not, so that a second stand-in on
        # the same port fails with "Address already in use" like a test expects.
        sock.bind((args.host or "", args.port))
        args.port = sock.getsockname()[1]
        return sock
    except OSError as exc:
        sock.close()
        frames = api_prelude(entrypoint) + tb("""
V/entrypoints/openai/api_server.py:976 in run_server
    ^listen_address, sock = setup_server(args)
V/entrypoints/openai/api_server.py:953 in setup_server
    ^sock = create_server_socket(sock_addr)
V/utils/network_utils.py:231 in create_server_socket
    sock.bind(addr)
""")
        return fail_api(api, traceback_text(frames, f"OSError: [Errno {exc.errno}] {exc.strerror}"))
