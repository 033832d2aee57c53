"""`fab demo --engine vllm`: the demo on the real CPU engine (local, no SSH)."""

from __future__ import annotations

import pytest
from e2e.harness import run_fab

from tasks.engine import Engine

pytestmark = pytest.mark.real_vllm


def test_fab_demo_engine_vllm_fails_diagnoses_fixes_and_answers(engine: Engine) -> None:
    run = run_fab(None, "demo", "--engine", "vllm", timeout=900)
    assert run.returncode == 0, run.describe()
    out = run.output
    assert f"vLLM {engine.version} (CPU build)" in out, out
    # The first deploy (--max-model-len 4096 on a 512-position model) is refused or diagnosed.
    first = out[out.index("=== 1.") : out.index("=== 2.")]
    assert "failed:" in first and "4096" in first, first
    # The fixed one becomes ready through a real chat completion; then it is stopped.
    assert "verify: ready" in out, out
    assert "POST http://127.0.0.1:" in out, out
    assert "stop:" in out and "demo ok in" in out, out
    print(out)
