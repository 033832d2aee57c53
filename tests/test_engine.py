"""tasks/engine.py: where the real engine and the tiny models are, and the CPU profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_ops.profile import load_profile
from tasks import engine


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "venv"
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("#!/bin/sh\n")
    monkeypatch.setenv("KIMI_OPS_VLLM_VENV", str(path))
    return path


def test_no_marker_means_not_installed_and_the_message_says_how(venv: Path) -> None:
    assert engine.installed_engine() is None
    message = engine.missing_message()
    assert str(venv) in message
    assert f"KIMI_OPS_VLLM_VENV={venv} bash scripts/install_vllm_cpu.sh" in message


def test_the_marker_names_the_validated_versions(venv: Path) -> None:
    (venv / engine.MARKER).write_text(json.dumps({"vllm": "0.32.0", "torch": "2.13.0+cpu"}))
    found = engine.installed_engine()
    assert found is not None
    assert found.python == venv / "bin" / "python"
    assert found.version == "0.32.0"


def test_a_broken_marker_is_not_an_install(venv: Path) -> None:
    (venv / engine.MARKER).write_text("{not json")
    assert engine.installed_engine() is None


def test_default_paths_follow_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KIMI_OPS_VLLM_VENV", "KIMI_OPS_TINY_MODELS", "KIMI_OPS_VLLM_COMPILE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert engine.venv_dir() == tmp_path / "kimi-ops" / "vllm-cpu-venv"
    assert engine.tiny_models_dir() == tmp_path / "kimi-ops" / "tiny-models"
    assert engine.compile_cache_dir() == tmp_path / "kimi-ops" / "vllm-compile-cache"


def test_the_cpu_profile_is_a_valid_profile_for_one_cpu_server(venv: Path) -> None:
    (venv / engine.MARKER).write_text(json.dumps({"vllm": "0.32.0"}))
    found = engine.installed_engine()
    assert found is not None
    data = engine.cpu_profile(found, Path("/m/tiny-llama"), port=18000, run_dir=Path("/r"))
    profile = load_profile(data)
    assert profile.engine == "vllm" and profile.tensor_parallel_size == 1
    assert profile.tool_call_parser is None and profile.reasoning_parser is None
    assert list(profile.extra_args) == ["--dtype", "bfloat16", "--max-model-len", "512"]
    assert "--enforce-eager" not in profile.extra_args  # SIGILL on the first request
    assert profile.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and profile.env["HF_HUB_OFFLINE"] == "1"
    assert profile.env["VLLM_CACHE_ROOT"] == str(engine.compile_cache_dir())
    # the cache that loads back on vLLM 0.32's CPU build (its AOT artifact does not)
    assert profile.env["VLLM_USE_AOT_COMPILE"] == "0"
