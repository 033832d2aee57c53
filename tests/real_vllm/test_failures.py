"""The real engine failing, each failure diagnosed through `fab` with its label and a hint.

Where deploy's preflight refuses before launch (a taken port, a missing model directory), the
test also starts the engine past preflight (`fab upload-script`, `launch`, `verify`), so the
label is proven on the real engine's own log too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

import pytest

from .server import RealDeployment, wait_until

pytestmark = pytest.mark.real_vllm


def label_and_hint(output: str) -> tuple[list[str], str]:
    """The `label:` values and the `hint:` lines of a fab failure report."""
    labels = [ln.split("label:", 1)[1].strip() for ln in output.splitlines() if "label:" in ln]
    hints = "\n".join(ln for ln in output.splitlines() if "hint:" in ln)
    return labels, hints


def assert_engine_diagnoses(dep: RealDeployment, label: str, needle: str, **kimi: Any) -> None:
    """Started past preflight, the real engine fails and fab names `label`, hint with `needle`."""
    runs = dep.launch_past_preflight(**kimi)
    out = "\n".join(r.describe() for r in runs)
    assert runs[-1].returncode != 0, out
    labels, hints = label_and_hint(runs[-1].output)
    assert label in labels, out
    assert needle in hints, out


def test_port_in_use(deployment: Callable[..., RealDeployment]) -> None:
    dep = deployment("tiny-llama")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", dep.port))
        holder.listen()
        refused = dep.deploy()
        assert refused.returncode != 0, refused.describe()
        assert str(dep.port) in refused.output, refused.describe()
        assert dep.pidfile_pid() is None, "deploy launched a server onto a taken port"
        assert_engine_diagnoses(dep, "port_in_use", str(dep.port))


def test_missing_model(deployment: Callable[..., RealDeployment]) -> None:
    dep = deployment("no-such-model")
    refused = dep.deploy()
    assert refused.returncode != 0, refused.describe()
    assert str(dep.model) in refused.output, refused.describe()
    assert dep.pidfile_pid() is None, "deploy launched a server without a model"
    assert_engine_diagnoses(dep, "model_not_found", str(dep.model))


def test_bad_flag(deployment: Callable[..., RealDeployment]) -> None:
    dep = deployment("tiny-llama")
    run = dep.deploy(extra_args=["--dtype", "bfloat16", "--max-model-len", "512", "--no-such-flag"])
    assert run.returncode != 0, run.describe()
    labels, hints = label_and_hint(run.output)
    assert "bad_argument" in labels, run.describe()
    assert "--no-such-flag" in hints, run.describe()


def test_a_setting_vllm_s_config_check_refuses(deployment: Callable[..., RealDeployment]) -> None:
    """vLLM's own config validation (pydantic, ModelConfig) refuses sleep mode on CPU: the
    message names no option, the refusal is still the setting's (bad_argument), with the
    engine's words in the hint."""
    dep = deployment("tiny-llama")
    run = dep.deploy(
        extra_args=["--dtype", "bfloat16", "--max-model-len", "512", "--enable-sleep-mode"]
    )
    assert run.returncode != 0, run.describe()
    labels, hints = label_and_hint(run.output)
    assert "bad_argument" in labels, run.describe()
    assert "Sleep mode is not supported on current platform" in hints, run.describe()


def test_fp8_kv_cache_refused_for_the_head_size(deployment: Callable[..., RealDeployment]) -> None:
    """A non-MLA model whose head size (80) the CPU build's FP8 KV cache cannot take: the
    engine's NotImplementedError is the KV-cache dtype's (not an engine bug), and the hint
    quotes the engine's reason."""
    dep = deployment("tiny-llama-hd80")
    fp8 = ["--dtype", "bfloat16", "--max-model-len", "512", "--kv-cache-dtype", "fp8"]
    run = dep.deploy(extra_args=fp8)
    assert run.returncode != 0, run.describe()
    labels, hints = label_and_hint(run.output)
    log = "\n--- server log ---\n" + dep.log_text()[-3000:]
    assert "kv_cache_dtype_unsupported" in labels, run.describe() + log
    assert "head_size divisible by 32" in hints, run.describe() + log


def test_custom_code_without_trust_remote_code(
    deployment: Callable[..., RealDeployment],
) -> None:
    """A checkpoint whose config.json names custom modeling code (auto_map): vLLM warns that
    the code needs trust_remote_code, then fails on the unknown architecture. The cause is
    the missing flag (trust_remote_code), not the architecture."""
    dep = deployment("tiny-llama-custom")
    run = dep.deploy(extra_args=["--dtype", "bfloat16", "--max-model-len", "512"])
    assert run.returncode != 0, run.describe()
    # preflight warned before launch, naming the code files
    assert "model_code" in run.output and "modeling_tiny.py" in run.output, run.describe()
    labels, hints = label_and_hint(run.output)
    log = "\n--- server log ---\n" + dep.log_text()[-3000:]
    assert "trust_remote_code" in labels, run.describe() + log
    assert "--trust-remote-code" in hints, run.describe() + log


def test_max_model_len_over_the_models(deployment: Callable[..., RealDeployment]) -> None:
    dep = deployment("tiny-llama")
    too_long = ["--dtype", "bfloat16", "--max-model-len", "4096"]
    refused = dep.deploy(extra_args=too_long)
    # preflight's sizing knows the model's length and refuses before launch, naming both
    assert refused.returncode != 0, refused.describe()
    assert "kv_cache_fit" in refused.output and "4,096" in refused.output, refused.describe()
    assert "max_position_embeddings (512)" in refused.output, refused.describe()
    assert dep.pidfile_pid() is None, "deploy launched a server preflight should refuse"
    # and the real engine, started anyway, is diagnosed bad_argument naming the length
    assert_engine_diagnoses(dep, "bad_argument", "4096", extra_args=too_long)


def test_fp8_kv_cache_on_mla(deployment: Callable[..., RealDeployment]) -> None:
    """Tiny DeepSeek-V3 (MLA) with --kv-cache-dtype fp8: the CPU build's MLA backends serve
    only a 16-bit KV cache. The preflight must refuse or patch it before launch; a server that
    got the flag anyway must be diagnosed kv_cache_dtype_unsupported with the CPU fix."""
    dep = deployment("tiny-dsv3")
    fp8 = ["--dtype", "bfloat16", "--max-model-len", "512", "--kv-cache-dtype", "fp8"]
    run = dep.deploy(extra_args=fp8)
    if run.returncode == 0:
        # Patched by the plan: it must say so, and the engine must really serve.
        assert "fp8" in run.output.lower() and "kv" in run.output.lower(), run.describe()
        answer = dep.chat("hello world", max_tokens=4)
        assert answer["usage"]["completion_tokens"] >= 1, answer
        assert "--kv-cache-dtype fp8" not in " ".join(dep.tree().members.values())
        assert dep.fab("stop").returncode == 0
        return

    if dep.pidfile_pid() is not None:
        # Launched: the real engine failed on its first request, and fab must say why.
        labels, hints = label_and_hint(run.output)
        log = "\n--- server log ---\n" + dep.log_text()[-3000:]
        assert "kv_cache_dtype_unsupported" in labels, run.describe() + log
        assert "cpu" in hints.lower(), run.describe() + log
        return

    # Refused before launch: the refusal names the flag and the CPU fix.
    assert "--kv-cache-dtype fp8" in run.output, run.describe()
    assert "cpu" in run.output.lower(), run.describe()
    # The engine itself, given the flag anyway, must get the label from its own failure.
    runs = dep.launch_past_preflight(extra_args=fp8)
    out = "\n".join(r.describe() for r in runs) + "\n--- server log ---\n" + dep.log_text()[-3000:]
    if runs[-1].returncode == 0:
        pytest.fail(
            "the engine served with an FP8 KV cache on MLA: the flag was not refused\n" + out
        )
    labels, hints = label_and_hint(runs[-1].output)
    assert "kv_cache_dtype_unsupported" in labels, out
    assert "cpu" in hints.lower(), out


def test_kill9_engine_core_while_serving(deployment: Callable[..., RealDeployment]) -> None:
    dep = deployment("tiny-llama")
    tree = dep.serve()
    (core,) = tree.by_title("VLLM::EngineCore")

    os.kill(core, signal.SIGKILL)
    # vLLM 0.32's API server notices the dead engine and exits by itself, with status 0.
    assert wait_until(lambda: not tree.alive(), 90), "still alive:\n" + tree.describe()

    status = dep.fab("status")
    # (the server's log on failure: vLLM's shutdown after the kill varies from run to run)
    log_tail = "\n--- server log (tail) ---\n" + "\n".join(dep.log_text().splitlines()[-60:])
    assert status.returncode != 0, "status of a dead engine exited 0\n" + status.describe()
    assert "engine_killed" in status.output, status.describe() + log_tail
    assert "SIGKILL" in status.output, status.describe() + log_tail

    diag = dep.diagnose_json()
    assert diag["label"] == "engine_killed", json.dumps(diag, indent=2)
    assert diag["facts"].get("signal") == "SIGKILL", json.dumps(diag, indent=2)
    assert diag["failed"] is True and diag["hint"], json.dumps(diag, indent=2)

    verify = dep.fab("verify")
    assert verify.returncode != 0, verify.describe()
    assert "engine_killed" in verify.output, verify.describe()
