"""What blind set ZN's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose


def test_tritons_own_cuda_out_of_memory_is_the_accelerator_running_out() -> None:
    # a Triton kernel (autotuning on the first request, a launch) reports the CUDA runtime's
    # out-of-memory in its own words
    d = diagnose("RuntimeError: Triton Error [CUDA]: out of memory\n")
    assert d.label == "cuda_oom", d.summary
    # guard: Triton's other CUDA errors are not OOM
    other = diagnose(
        "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered\n"
    )
    assert other.label != "cuda_oom"


def test_nim_failing_to_set_up_its_model_store_from_ngc_is_model_not_found() -> None:
    # NVIDIA NIM (vLLM inside) fetches the profile's files from NGC first; any failure there
    # (a credential, the network, no such model) means the model's files could not be had
    text = (
        "INFO 03-01 10:00:00.000 ngc_injector.py:141] Selected profile: 0123abcd (vllm-bf16-tp1)\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/nim/vllm_nvext/hub/ngc_injector.py", line 143, in inject_ngc_hub\n'
        "    repo = optimal_config.workspace()\n"
        "Exception: Error {\n"
        '    context: "initializing ngc repo from repo_id: ngc://nim/acme/widget-8b:hf",\n'
        "    source: CommonError(\n"
        '            context: "fetching file_map",\n'
    )
    d = diagnose(text)
    assert d.label == "model_not_found", d.summary


RPC_ENGINE = (
    "INFO 08-26 14:33:37 model_runner.py:890] Loading model weights took 1.9634 GB\n"
    "Process SpawnProcess-1:\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.10/multiprocessing/process.py", line 108, in run\n'
    "    self._target(*self._args, **self._kwargs)\n"
    '  File "/opt/py/vllm/entrypoints/openai/rpc/server.py", line 230, in run_rpc_server\n'
    "    server = AsyncEngineRPCServer(async_engine_args, usage_context, rpc_path)\n"
    '  File "/opt/py/vllm/entrypoints/openai/rpc/server.py", line 31, in __init__\n'
    "    self.engine = AsyncLLMEngine.from_engine_args(\n"
)


def test_a_traceback_through_vllm_05s_rpc_engine_process_is_the_engine_failing() -> None:
    # vLLM 0.5's OpenAI server ran its engine in a process whose entry point is run_rpc_server
    # (run_mp_engine's predecessor): its traceback, even cut before the exception, is that
    # process failing, as run_mp_engine's is
    d = diagnose(RPC_ENGINE)
    assert d.label == "engine_dead_other", d.summary
    # guard: a cut traceback through no engine entry point still names no death
    other = RPC_ENGINE.replace("run_rpc_server", "build_server").replace("rpc/server.py", "x.py")
    assert diagnose(other).label == "unknown"
