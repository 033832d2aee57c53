"""What blind set U's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose

START = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 10% 1/10\n"
UP = (
    "(APIServer pid=7) INFO:     Started server process [7]\n"
    "(APIServer pid=7) INFO:     Waiting for application startup.\n"
    "(APIServer pid=7) INFO:     Application startup complete.\n"
)


@pytest.mark.parametrize(
    ("text", "label"),
    [
        # a Hub connection error whose host is quoted inside a repr, in a paste that joined the
        # traceback into one line
        (
            'File "/env/lib/python3.10/site-packages/requests/adapters.py", line 519, in send '
            "raise ConnectionError(e, request=request) requests.exceptions.ConnectionError: "
            "(MaxRetryError('HTTPSConnectionPool(host=\\'huggingface.co\\', port=443): Max "
            "retries exceeded with url: /api/models/org/m/revision/main (Caused by "
            'NameResolutionError("<urllib3.connection.HTTPSConnection object>: Failed to '
            "resolve 'huggingface.co'\"))'), '(Request ID: 1)')",
            "model_not_found",
        ),
        # Ascend: HCCL / HCCP logging a failed call in its own format; CANN's HCCL error code;
        # CANN's runtime failing to allocate device memory
        (
            "[ERROR] HCCL(4242,python3):2026-05-01-10:00:00.000.001 [adapter_hccp.cc:1238] "
            "[4242][BatchClose][RaSocket]errNo[0x000000000500000b] ra socket batch close fail.",
            "nccl_error",
        ),
        (
            "[PID: 4242] 2026-05-01-10:00:00.000.001 Communication_Error_Get_Socket(EI0006): "
            "Getting socket times out. Reason: 1. The remote does not initiate a connect request.",
            "nccl_error",
        ),
        (
            "RuntimeError: ACL stream synchronize failed, error code:207018\n"
            "EL0004: [PID: 4242] 2026-05-01-10:00:00.000.001 Failed to allocate memory.\n"
            "        Possible Cause: Available memory is insufficient.",
            "cuda_oom",
        ),
        # no kernel for this accelerator: an Ascend SoC without the op, a CUDA kernel image
        # built for another GPU (Triton's loader)
        (
            "RuntimeError: call aclnnMoeGatingTopKSoftmax failed, detail:EZ1001: [PID: 1] "
            "2025-08-04-12:34:15.167.986 Get regInfo failed, The binary_info_config.json of "
            "socVersion [ascend310p] does not support opType [MoeGatingTopKSoftmax].",
            "unsupported_gpu",
        ),
        ("RuntimeError: Triton Error [CUDA]: device kernel image is invalid", "unsupported_gpu"),
        # IPython's header names the exception by its class name only (the message is cut)
        (
            "---------------------------------------------------------------------------\n"
            "OutOfMemoryError                          Traceback (most recent call last)\n"
            "File ~/env/lib/python3.10/site-packages/vllm/v1/worker/gpu_model_runner.py:2874, "
            "in GPUModelRunner._dummy_sampler_run(self, hidden_states)",
            "cuda_oom",
        ),
    ],
)
def test_one_fact_each(text: str, label: str) -> None:
    d = diagnose(START + text + "\n")
    assert d.label == label, (d.summary, d.evidence)


SLURM = (
    "slurmstepd: error: *** STEP 956247.1 ON node-27 CANCELLED AT 2026-07-17T00:57:13{why} ***\n"
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    "srun: error: node-27: task 0: Killed\n"
)


def test_slurm_cancelling_a_server_that_was_up_is_a_stop() -> None:
    d = diagnose(START + UP + SLURM.format(why=""))
    assert (d.label, d.lifecycle) == ("healthy", "stopped"), d.summary


def test_slurm_cancelling_a_server_still_starting_names_the_stop() -> None:
    d = diagnose(START + SLURM.format(why=" DUE TO TIME LIMIT"))
    assert d.label == "engine_killed" and d.facts["signal"] == "SIGTERM", d.summary
    assert "Slurm: CANCELLED AT 2026-07-17T00:57:13 DUE TO TIME LIMIT" in d.hint


RAY_WRAPPED = (
    "Traceback (most recent call last):\n"
    '  File "/env/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 191, in '
    "step_async\n"
    "    output = await self._run_workers_async(\n"
    "ray.exceptions.RayTaskError(RuntimeError): ray::RayWorkerVllm.execute_method() (pid=9, "
    "ip=10.0.0.2, repr=<vllm.engine.ray_utils.RayWorkerVllm object at 0x7f>)\n"
    '  File "/env/lib/python3.10/site-packages/vllm/engine/ray_utils.py", line 31, in '
    "execute_method\n"
    "    return executor(*args, **kwargs)\n"
)


def test_ray_s_wrapper_line_is_a_header_the_exception_follows() -> None:
    cut = diagnose(START + RAY_WRAPPED)
    assert cut.label == "unknown", cut.summary  # cut before the remote exception
    whole = diagnose(START + RAY_WRAPPED + "RuntimeError: something in the worker went wrong\n")
    assert whole.label == "engine_dead_other", whole.summary
