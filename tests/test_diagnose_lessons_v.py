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
