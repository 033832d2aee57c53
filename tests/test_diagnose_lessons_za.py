"""What blind set ZA's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them), and one fact read in vLLM's source beside them.
Each test failed before."""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose

LOADING = (
    "(APIServer pid=7) INFO 03-02 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"
    "(EngineCore_DP0 pid=9) INFO 03-02 10:00:30 [gpu_model_runner.py:2] Starting to load "
    "model org/m...\n"
)


def test_a_platform_plugin_s_kv_block_shortfall_is_the_kv_cache() -> None:
    # a plugin (vllm-rbln) says it in its own words, then the API server waits on
    d = diagnose(
        LOADING + "Not enough memory for 31 blocks of KV cache.\n"
        "Try reducing the number of blocks by setting --num-gpu-blocks-override.\n"
        "(APIServer pid=7) INFO 03-02 10:01:00 [utils.py:3] Waiting for 1 local, 0 remote core "
        "engine proc(s) to start.\n"
    )
    assert (d.label, d.facts.get("signature")) == ("kv_cache_insufficient", "kv_cache_no_memory")


def test_vllm_s_own_words_for_an_oom_while_loading_weights() -> None:
    # gpu_model_runner.load_model logs this before re-raising torch's OutOfMemoryError
    d = diagnose(
        LOADING + "(EngineCore_DP0 pid=9) ERROR 03-02 10:00:41 [gpu_model_runner.py:5147] Failed "
        "to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
        "memory for weights, increasing --tensor-parallel-size, or using --quantization.\n"
    )
    assert d.label == "cuda_oom", d.summary


@pytest.mark.parametrize(
    "line",
    [
        "Stdout stream ended before readiness message detected.",
        "RuntimeError: vLLM server process exited before it was ready (code 1)",
        "server process terminated before becoming ready",
    ],
)
def test_a_wrapper_seeing_the_server_end_before_ready_is_a_failure(line: str) -> None:
    d = diagnose(
        "vLLM STDOUT: INFO 06-03 03:57:27 [__init__.py:36] All plugins in this group will be "
        "loaded.\n" + line + "\n"
    )
    assert d.label == "unknown", (line, d.summary)


def test_waiting_for_readiness_is_no_failure() -> None:
    d = diagnose(LOADING + "Waiting before readiness probe: the server is not ready yet\n")
    assert d.label == "starting", d.summary


@pytest.mark.parametrize(
    "line",
    [
        # V1's stats logger, printed only once KV blocks moved between instances
        "(APIServer pid=5) INFO 05-15 02:58:00 [metrics.py:103] KV Transfer metrics: Num "
        "successful transfers=3, Avg xfer time (ms)=61.2",
        "(APIServer pid=5) INFO 05-15 02:58:00 [metrics.py:99] EC Transfer metrics: Num "
        "successful transfers=1",
        # 0.1's benchmark_serving.py results against the running server
        "Average latency: 12.31 s",
    ],
)
def test_lines_only_a_serving_engine_prints_show_it_up(line: str) -> None:
    d = diagnose(line + "\n")
    assert d.label == "healthy", (line, d.summary)


# ------------------------------------------------- vLLM 0.32's own logger lines before an exit

HEAD = "INFO 03-02 10:00:00 [__init__.py:1] Automatically detected platform cuda.\n"


@pytest.mark.parametrize(
    ("line", "label", "signature"),
    [
        # argparse_utils reading --config's YAML, then re-raising the file's error
        (
            "ERROR 03-02 10:00:01 [argparse_utils.py:610] Unable to read the config file at "
            "/cfg/serve.yaml. Check path correctness\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '/cfg/serve.yaml'",
            "bad_argument",
            "argparse_error",
        ),
        # the CLI, then sys.exit(1)
        (
            "ERROR 03-02 10:00:01 [main.py:26] --omni flag requires a valid instance of "
            "vllm-omni to be installed.",
            "unknown",
            "package_not_installed",
        ),
        # the weight-cache preload daemons, then the server shuts down
        (
            "ERROR 03-02 10:00:01 [preload.py:305] Weight cache daemon rank(s) exited during "
            "startup (exitcodes=[1]); shutting down.",
            "engine_dead_other",
            "engine_wrapper",
        ),
    ],
)
def test_vllm_s_last_words_before_it_exits(line: str, label: str, signature: str) -> None:
    d = diagnose(HEAD + line + "\n")
    assert (d.label, d.facts.get("signature")) == (label, signature), d.summary


def _engine_raised(path: str, line: str) -> str:
    return (
        "(EngineCore_DP0 pid=9) ERROR 03-02 10:00:41 [core.py:1] EngineCore failed to start.\n"
        "Traceback (most recent call last):\n"
        f'  File "/usr/lib/python3/site-packages/vllm/{path}", line 1, in create_weights\n'
        f"{line}\n"
    )


@pytest.mark.parametrize(
    ("path", "line", "label"),
    [
        # kernels and backends limited to some architectures, in vLLM 0.32's words
        (
            "v1/attention/backends/mla/flashmla.py",
            "RuntimeError: FlashMLA is only supported on SM90 and SM100",
            "unsupported_gpu",
        ),
        (
            "models/deepseek_v41/attention.py",
            "ValueError: nvfp4_ds_mla needs the V4.1 KV records, which FlashMLA decodes only on "
            "SM100.",
            "unsupported_gpu",
        ),
        # ... raised by a quantized kernel's own check: the checkpoint's quantization
        (
            "model_executor/layers/quantization/modelopt_block_quant.py",
            "ValueError: Block-quantized dense weights require b12x on SM12x",
            "quantization_unsupported",
        ),
        (
            "model_executor/layers/quantization/fp8.py",
            "RuntimeError: CUTLASS FP8 kernels are only supported on SM89+",
            "quantization_unsupported",
        ),
    ],
)
def test_a_kernel_limited_to_some_architectures(path: str, line: str, label: str) -> None:
    d = diagnose(LOADING + _engine_raised(path, line))
    assert (d.label, d.facts.get("signature")) == (label, "gpu_capability"), d.summary


def test_a_library_s_arch_check_on_the_way_through_quantization_code_is_the_gpu() -> None:
    # the quantization module imported a kernel library whose own GPU check failed
    d = diagnose(
        LOADING + "(EngineCore_DP0 pid=9) ERROR 03-02 10:00:41 [core.py:1] EngineCore failed to "
        "start.\nTraceback (most recent call last):\n"
        '  File "/x/vllm/model_executor/layers/quantization/fp8.py", line 9, in <module>\n'
        "    import aiter\n"
        '  File "/x/aiter/jit/utils/chip_info.py", line 71, in get_gfx\n'
        "RuntimeError: Unknown GPU architecture: gfx1101. Supported architectures: ['gfx942']\n"
    )
    assert d.label == "unsupported_gpu", d.summary


@pytest.mark.parametrize(
    ("path", "line", "dtype"),
    [
        (
            "v1/attention/backends/b12x.py",
            "NotImplementedError: b12x currently supports only auto, bfloat16, fp8, and "
            "fp8_e4m3 KV cache dtypes; got nvfp4.",
            "nvfp4",
        ),
        (
            "v1/attention/backends/triton_attn_diffkv.py",
            "NotImplementedError: TritonAttentionDiffKVBackend supports only fp8/fp8_e4m3 "
            "quantized KV cache (got kv_cache_dtype=nvfp4).",
            "nvfp4",
        ),
        (
            "models/qwen4_exp/amd/qsa.py",
            "NotImplementedError: Qwen4Exp QSA does not support KV quantization",
            None,
        ),
    ],
)
def test_a_backend_naming_the_kv_dtypes_it_takes(path: str, line: str, dtype: str | None) -> None:
    d = diagnose(LOADING + _engine_raised(path, line))
    assert d.label == "kv_cache_dtype_unsupported", d.summary
    assert d.facts.get("kv_cache_dtype") == dtype


@pytest.mark.parametrize(
    ("line", "option"),
    [
        # flags and variables newer than options.py's list, as the subject of a ValueError
        ("ValueError: --grpc-port must be between 0 and 65535", "--grpc-port"),
        (
            "ValueError: --weight-cache-master-port is required when the daemons span nodes",
            "--weight-cache-master-port",
        ),
        (
            "ValueError: Error: --data-parallel-supervisor-port 9000 overlaps with child rank "
            "ports 9000-9007",
            "--data-parallel-supervisor-port",
        ),
        ("ValueError: VLLM_PORT 'abc' must be a valid integer", "VLLM_PORT"),
        (
            "ValueError: VLLM_PORT 'tcp://10.0.0.1:8000' appears to be a URI. This may be caused "
            "by a Kubernetes service discovery issue",
            "VLLM_PORT",
        ),
    ],
)
def test_a_value_error_about_a_flag_or_variable_names_what_to_change(
    line: str, option: str
) -> None:
    d = diagnose(LOADING + _engine_raised("entrypoints/launchers/cli_args.py", line))
    assert (d.label, d.facts.get("bad_args")) == ("bad_argument", option), d.summary


def test_a_flag_suggested_after_another_failure_is_no_refused_flag() -> None:
    line = "RuntimeError: CUDA graph capture failed; retry with --enforce-eager"
    d = diagnose(LOADING + _engine_raised("v1/worker/gpu_model_runner.py", line))
    assert d.label != "bad_argument", d.summary
