"""Issue 4's scenarios: the whole tool through the real `fab` command line and a real sshd, with
the stand-in engine (which EMULATES vLLM 0.17.1 on 8x RTX PRO 6000 Blackwell; no model)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .deployment import Deployment, make_deployment
from .harness import SshdHost, pid_alive, pids_with_marker, ssh_run

pytestmark = pytest.mark.e2e


@pytest.fixture
def dep(sshd: SshdHost, tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(sshd, tmp_path)
    try:
        yield d
    finally:
        d.cleanup()


def test_a_seed_fp8_failure_then_patch_then_ready_then_restore(dep: Deployment) -> None:
    originals = {n: (dep.model / n).read_bytes() for n in ("config.json", "hf_quant_config.json")}
    first = dep.fab("deploy", patch_kv_config=False)
    assert first.returncode != 0, first.describe()
    assert first.seconds < 15, first.describe()
    assert "kv_cache_dtype_unsupported" in first.output, first.describe()
    assert "fab patch-kv-config" in first.output and "0.18" in first.output

    patch = dep.fab("patch-kv-config")
    assert patch.ok, patch.describe()
    assert "-  \"kv_cache_scheme\"" in patch.output or "kv_cache_scheme" in patch.output
    again = dep.fab("patch-kv-config")
    assert again.ok and "nothing to patch" in again.output, again.describe()

    second = dep.fab("deploy", patch_kv_config=False)
    assert second.ok, second.describe()
    assert "ok: [" in second.output and "verify: ready" in second.output
    answer = dep.chat()
    assert "stand-in" in answer["choices"][0]["message"]["content"]

    restore = dep.fab("patch-kv-config", "--restore")
    assert restore.ok, restore.describe()
    for name, data in originals.items():
        assert (dep.model / name).read_bytes() == data
        assert not (dep.model / f"{name}.kimi-ops.orig").exists()
