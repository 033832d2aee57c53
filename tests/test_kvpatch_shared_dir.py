"""patch-kv-config on a model directory that several hosts share (NFS): two runs patching it at
once must both succeed, and the backup must hold the original, never a patched copy. Found when
a two-host rolling deploy on this machine (both hosts' model in one directory) failed with
"cp: cannot create regular file '...kimi-ops.orig': File exists"."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from invoke import Context

from kimi_ops import kvpatch
from kimi_ops.profile import Profile, load_profile
from kimi_ops.result import Status
from tasks import steps
from tasks.host import Host

FIXTURE = Path(__file__).parent / "fixtures" / "model"
NAMES = ("config.json", "hf_quant_config.json")


def _model(tmp_path: Path, name: str = "model") -> Path:
    """A copy of the fixture checkpoint's config files in ``tmp_path/name``."""
    model = tmp_path / name
    model.mkdir()
    for name in NAMES:
        shutil.copy(FIXTURE / name, model / name)
    return model


def _profile(model: Path) -> Profile:
    return load_profile({"model": str(model)})


def _originals() -> dict[str, str]:
    return {n: (FIXTURE / n).read_text() for n in NAMES}


def test_a_run_that_loses_the_race_never_puts_the_patched_file_in_the_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other host's whole patch lands between this run's look for a backup and its copy
    (a `cp` first on PATH plays the other host once, then copies): this run's copy is of the
    patched file, and must not become the backup."""
    model = _model(tmp_path)
    patched = {fp.name: fp.new for fp in kvpatch.plan_patch(_originals())}
    shim = tmp_path / "bin"
    shim.mkdir()
    script = [
        "#!/bin/bash",
        f"if [ ! -e {tmp_path}/other-ran ]; then",
        f"  touch {tmp_path}/other-ran",
    ]
    for name in NAMES:
        src, orig = model / name, model / kvpatch.backup_name(name)
        new = tmp_path / f"{name}.patched"
        new.write_text(patched[name])
        script += [f"  /bin/cp -p -- {src} {orig}", f"  /bin/cp -- {new} {src}"]
    script += ["fi", 'exec /bin/cp "$@"']
    (shim / "cp").write_text("\n".join(script) + "\n")
    (shim / "cp").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")

    profile = _profile(model)
    res = steps.patch_kv_config(Host(Context(), profile), profile)
    assert res.status in (Status.CHANGED, Status.OK), res
    for name, text in _originals().items():
        assert (model / kvpatch.backup_name(name)).read_text() == text, name
        assert (model / name).read_text() == patched[name]
    assert sorted(p.name for p in model.iterdir()) == sorted(
        [*NAMES, *(kvpatch.backup_name(n) for n in NAMES)]
    )  # no copy of this run's left behind


def test_two_runs_at_once_both_succeed_and_keep_the_original(tmp_path: Path) -> None:
    """The backup command itself, run by two shells started together, 30 times (the form it
    replaced failed about one time in three here: GNU cp creates a missing target with
    O_EXCL, and the other run made it in between)."""
    for i in range(30):
        model = _model(tmp_path, f"m{i}")
        commands = [kvpatch.backup_command(str(model), NAMES, token) for token in ("aa", "bb")]
        procs = [
            subprocess.Popen(["bash", "-c", c], stderr=subprocess.PIPE, text=True) for c in commands
        ]
        for p in procs:
            _, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
        for name, text in _originals().items():
            assert (model / kvpatch.backup_name(name)).read_text() == text
        assert len(list(model.iterdir())) == 2 * len(NAMES)  # no temporary copy left


def test_a_backup_that_cannot_be_written_fails_with_cp_s_reason(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    run = subprocess.run(
        ["bash", "-c", kvpatch.backup_command(str(missing), NAMES, "cc")],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "No such file or directory" in run.stderr


def test_a_restore_that_finds_the_backup_already_restored_by_another_run_succeeds(
    tmp_path: Path,
) -> None:
    """Two hosts restoring a shared directory at once: both read the backups, one moves them
    back first; the other's move finds them gone, which is no failure."""
    model = _model(tmp_path)
    for name in NAMES:
        shutil.copy(model / name, model / kvpatch.backup_name(name))
    command = kvpatch.restore_command(str(model), NAMES)
    for _ in range(2):  # (the second run is the one that lost the race)
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in model.iterdir()) == sorted(NAMES)
    # guard: the whole step, once the backups are gone, says there is nothing to restore
    profile = _profile(model)
    res = steps.patch_kv_config(Host(Context(), profile), profile, restore=True)
    assert res.status is Status.OK and "no backups to restore" in res.message
