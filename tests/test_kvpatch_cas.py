"""patch-kv-config never rewrites what it did not read (red team round 4, findings 4 and 5).

4: a config file that is not valid UTF-8 is refused, nothing changed (the textual edit turned
such bytes into U+FFFD elsewhere in the file, unseen in the diff).
5: compare and swap: another host's `--restore` or an edit that lands between the read and the
rename (the window of /tmp/rt4/race.py and race2.py, played here by a hook around the upload)
makes the step fail with nothing replaced, instead of overwriting it and reporting "originals
kept" when no backup exists. The same for `--restore`.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from invoke import Context
from test_kvpatch_shared_dir import FIXTURE, NAMES, _model, _profile

from kimi_ops import kvpatch
from kimi_ops.errors import StepFailed
from kimi_ops.result import Status
from tasks import steps
from tasks.host import Host


def _snapshot(model: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(model.iterdir())}


def _between_read_and_put(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> None:
    """Run ``act`` once, when patch-kv-config is about to upload (after its read and backup)."""
    real = Host.put_files

    def put_files(self: Host, items: Any, **kw: Any) -> None:
        if kw.get("step") == "patch-kv-config" and not getattr(put_files, "done", False):
            put_files.done = True  # type: ignore[attr-defined]
            act()
        real(self, items, **kw)

    monkeypatch.setattr(Host, "put_files", put_files)


def test_a_config_that_is_not_utf8_is_refused_and_left_byte_for_byte(tmp_path: Path) -> None:
    model = _model(tmp_path)
    config = model / "config.json"
    config.write_bytes(config.read_bytes().replace(b"{", b'{\n  "author": "Ren\xe9 caf\xe9",', 1))
    before = _snapshot(model)
    profile = _profile(model)
    with pytest.raises(StepFailed) as info:
        steps.patch_kv_config(Host(Context(), profile), profile)
    assert "config.json is not valid UTF-8" in info.value.reason, info.value.reason
    assert "0xe9" in info.value.reason and "nothing was changed" in info.value.reason
    assert _snapshot(model) == before  # no backup made, not a byte changed


def test_valid_utf8_outside_ascii_is_kept_byte_for_byte(tmp_path: Path) -> None:
    """guard: the refusal is for bytes that are not UTF-8, not for any non-ASCII text."""
    model = _model(tmp_path)
    config = model / "config.json"
    original = config.read_bytes().replace(b"{", '{\n  "author": "René café",'.encode(), 1)
    config.write_bytes(original)
    profile = _profile(model)
    res = steps.patch_kv_config(Host(Context(), profile), profile)
    assert res.status is Status.CHANGED, res
    assert "René café".encode() in config.read_bytes()
    assert (model / kvpatch.backup_name("config.json")).read_bytes() == original


def test_a_restore_by_another_host_in_the_window_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """race2.py: host B restores the shared directory while A is between backup and upload."""
    model = _model(tmp_path)
    profile = _profile(model)
    originals = {n: (FIXTURE / n).read_bytes() for n in NAMES}

    def host_b_restores() -> None:
        res = steps.patch_kv_config(Host(Context(), profile), profile, restore=True)
        assert res.status is Status.CHANGED, res

    _between_read_and_put(monkeypatch, host_b_restores)
    with pytest.raises(StepFailed) as info:
        steps.patch_kv_config(Host(Context(), profile), profile)
    reason = info.value.reason
    assert "changed while patching" in reason and "nothing was replaced" in reason, reason
    assert "is gone" in reason, reason
    # The checkpoint's KV settings are still there (B's restore stands), nothing left behind.
    assert _snapshot(model) == originals


def test_an_edit_in_the_window_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """race.py: another operator edits config.json while the patch is between read and upload."""
    model = _model(tmp_path)
    profile = _profile(model)
    config = model / "config.json"

    def edit() -> None:
        text = config.read_text()
        config.write_text(text.replace("{", '{\n  "edited_meanwhile": "by another operator",', 1))

    _between_read_and_put(monkeypatch, edit)
    with pytest.raises(StepFailed) as info:
        steps.patch_kv_config(Host(Context(), profile), profile)
    reason = info.value.reason
    assert reason.startswith("config.json changed while patching"), reason
    assert "nothing was replaced" in reason
    assert "edited_meanwhile" in config.read_text()
    after = _snapshot(model)
    assert after["hf_quant_config.json"] == (FIXTURE / "hf_quant_config.json").read_bytes()
    assert not [n for n in after if n.startswith(".") or n.endswith(".tmp")], sorted(after)


def test_a_restore_does_not_overwrite_an_edit_made_after_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(tmp_path)
    profile = _profile(model)
    assert steps.patch_kv_config(Host(Context(), profile), profile).status is Status.CHANGED
    config = model / "config.json"
    host = Host(Context(), profile)
    real_run = host.run

    def run(command: str, **kw: Any) -> Any:
        if kvpatch.CHANGED_MARK in command:  # the restore's move: an edit lands just before
            config.write_text(config.read_text().replace("{", '{\n  "late_edit": 1,', 1))
        return real_run(command, **kw)

    monkeypatch.setattr(host, "run", run)
    with pytest.raises(StepFailed) as info:
        steps.patch_kv_config(host, profile, restore=True)
    assert "config.json changed while restoring; nothing was restored" in info.value.reason
    assert "late_edit" in config.read_text()
    for name in NAMES:  # both backups still there: nothing was moved
        assert (model / kvpatch.backup_name(name)).read_bytes() == (FIXTURE / name).read_bytes()


def test_a_restore_already_done_by_another_run_still_succeeds(tmp_path: Path) -> None:
    """guard: the check lets through the restore another host finished first."""
    model = _model(tmp_path)
    profile = _profile(model)
    steps.patch_kv_config(Host(Context(), profile), profile)
    files = {
        n: (
            kvpatch_digest(model / n),
            kvpatch_digest(model / kvpatch.backup_name(n)),
        )
        for n in NAMES
    }
    for name in NAMES:  # the other run's restore
        (model / kvpatch.backup_name(name)).replace(model / name)
    run = subprocess.run(
        ["bash", "-c", kvpatch.restore_command(str(model), NAMES, files)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run
    assert _snapshot(model) == {n: (FIXTURE / n).read_bytes() for n in NAMES}


def kvpatch_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
