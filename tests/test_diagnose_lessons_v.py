"""What blind set V's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose

START = "INFO 01-01 00:00:00 [loader.py:1] Loading safetensors checkpoint shards: 10% 1/10\n"


@pytest.mark.parametrize(
    ("text", "label"),
    [
        # a subprocess (a compiler, a helper) killed by a signal, in Python's words
        (
            "subprocess.CalledProcessError: Command '' died with <Signals.SIGHUP: 1>.\n"
            "RuntimeError: Engine core initialization failed. See root cause above.",
            "engine_killed",
        ),
        # NCCL's bootstrap socket failing to reach a peer (no "NCCL" on the line)
        (
            "(LLMRayActor pid=3, ip=10.0.0.3) ERROR 03-21 14:01:57 worker_base.py:581] "
            "socketStartConnect: Connect to 10.0.0.2<44801> failed : Software caused connection "
            "abort",
            "nccl_error",
        ),
        # a kernel library that does not know this GPU (ROCm's aiter)
        (
            'RuntimeError: Get GPU arch from rocminfo failed "Unknown GPU architecture: gfx1101. '
            "Supported architectures: ['native', 'gfx90a', 'gfx942']\"",
            "unsupported_gpu",
        ),
        # the host's environment: no Python headers for a JIT build; packages that do not fit
        (
            "/tmp/t/cuda_utils.c:5:10: fatal error: Python.h: No such file or directory",
            "unknown/python_headers_missing",
        ),
        (  # (an import that failed counts when the engine then dies of it)
            "ImportError: Numba needs NumPy 2.2 or less. Got NumPy 2.4.\n"
            "RuntimeError: Engine core initialization failed. See root cause above.",
            "unknown/import_failed",
        ),
    ],
)
def test_one_fact_each(text: str, label: str) -> None:
    d = diagnose(START + text + "\n")
    got = d.label if "/" not in label else f"{d.label}/{d.facts.get('signature')}"
    assert got == label, (d.summary, d.evidence)


def test_python_s_own_import_noise_at_exit_is_no_failure() -> None:
    up = "(APIServer pid=7) INFO:     Application startup complete.\n"
    d = diagnose(
        START + up + "ImportError: sys.meta_path is None, Python is likely shutting down\n"
    )
    assert d.label == "healthy", d.summary


OLD_V0_INIT = (
    "INFO 04-07 18:08:07 llm_engine.py:87] Initializing an LLM engine with config: model='m'\n"
    "INFO 04-07 18:08:31 llm_engine.py:357] # GPU blocks: 5485, # CPU blocks: 682\n"
    "INFO 04-07 18:08:32 model_runner.py:684] Capturing the model for CUDA graphs.\n"
    "INFO 04-07 18:08:38 model_runner.py:756] Graph capturing finished in 6 secs.\n"
)


def test_an_old_v0_engine_is_initialised_once_its_graphs_are_captured() -> None:
    # vLLM before 0.6.4 printed no "init engine ... took": graph capture was its last step
    d = diagnose(OLD_V0_INIT + "Warning: the run has no checkpoint to resume from.\n")
    assert (d.label, d.facts.get("in_process")) == ("healthy", "true"), d.summary
    # in an excerpt cut after the engine's first line, a Python warning after it is no sign of
    # the caller: it may be the engine's own
    cut = OLD_V0_INIT.split("\n", 1)[1]
    d = diagnose(cut + "/x/y.py:9: UserWarning: something\n  warnings.warn(\n")
    assert d.label == "starting", d.summary
    assert diagnose(cut + "Warning: the run has no checkpoint.\n").label == "healthy"


def test_a_worker_sigtermed_at_an_offline_run_s_end_is_a_stop() -> None:
    died = (
        "ERROR 12-28 14:30:53 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 7 "
        "died, exit code: -15\n"
        "INFO 12-28 14:30:53 multiproc_worker_utils.py:120] Killing local vLLM worker processes\n"
    )
    results = "model              win_rate  n_total\nrun_a                 56.02      805\n"
    d = diagnose(OLD_V0_INIT + results + died)
    assert (d.label, d.lifecycle, d.facts.get("in_process")) == ("healthy", "stopped", "true")
    # with no output of the caller before it, the SIGTERM ended a starting engine
    assert diagnose(OLD_V0_INIT + died).label == "engine_killed"
    # and a traceback before the stop is a failure, whatever ended the workers after it
    crash = "Traceback (most recent call last):\n  File \"run.py\", line 3\nKeyError: 'x'\n"
    assert diagnose(OLD_V0_INIT + results + crash + died).label != "healthy"


def test_an_engine_s_whole_life_with_no_api_server_is_an_in_process_engine_up() -> None:
    # from the engine's own first line to its last init step, nothing failed and no API server
    # spoke: an in-process engine (it has no HTTP server to wait for)
    d = diagnose(OLD_V0_INIT)
    assert (d.label, d.facts.get("in_process")) == ("healthy", "true"), d.summary
    # a server at the same point is still starting: its API server spoke first ...
    api = "INFO 04-07 18:08:01 api_server.py:149] vLLM API server version 0.4.0\n"
    assert diagnose(api + OLD_V0_INIT).label == "starting"
    # ... or only its process prefix says whose line it was
    own = "(APIServer pid=1) INFO 04-07 18:08:01 [utils.py:326] non-default args: {'x': 1}\n"
    assert diagnose(own + OLD_V0_INIT).label == "starting"
    # and an excerpt cut after the engine's first line shows no whole life
    assert diagnose(OLD_V0_INIT.split("\n", 1)[1]).label == "starting"
