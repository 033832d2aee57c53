"""patch-kv-config: the checkpoint's KV-cache config patched (or restored) on the host."""

from __future__ import annotations

import hashlib
import secrets

from kimi_ops import kvpatch
from kimi_ops.errors import StepFailed
from kimi_ops.profile import Profile
from kimi_ops.result import StepResult, changed, ok, skipped

from ..host import FileInfo, FilesChanged, Host


def _model_files(h: Host, p: Profile, step: str) -> dict[str, FileInfo]:
    """config files and their backups, by name, in one round trip."""
    names = [*kvpatch.KV_KEYS, *(kvpatch.backup_name(n) for n in kvpatch.KV_KEYS)]
    paths = [f"{p.model}/{n}" for n in names]
    found = h.read_files(paths, step=step, require_dir=p.model)
    return {n: found[path] for n, path in zip(names, paths, strict=True)}


def patch_kv_config(
    h: Host, p: Profile, *, restore: bool = False, step: str = "patch-kv-config"
) -> StepResult:
    """Remove (or, with ``restore``, bring back) the checkpoint's FP8 KV-cache settings.

    Three round trips: read the files, write any missing backups (never over an existing
    backup, safe against another host patching the same shared directory at once), upload the
    patched texts and swap them in together.
    """
    files = _model_files(h, p, step)
    if restore:
        return _restore(h, p, files, step)
    try:
        patches = kvpatch.plan_patch({n: _utf8(files[n], step) for n in kvpatch.KV_KEYS})
    except kvpatch.ConfigPatchError as exc:
        raise StepFailed(
            step, f"{p.model}/{exc.message}", hint=exc.hint or "nothing was changed"
        ) from exc
    todo = [fp for fp in patches if fp.changed]
    if not todo:
        return ok(
            step, "no FP8 KV-cache settings in the checkpoint: nothing to patch (already patched?)"
        )
    diff = "".join(fp.diff(p.model) for fp in todo)
    removed = ", ".join(k for fp in todo for k in fp.removed)
    if h.dry:
        return skipped(step, f"dry run: would remove {removed}", diff=diff)
    h.run(
        kvpatch.backup_command(p.model, [fp.name for fp in todo], secrets.token_hex(4)),
        step=step,
        hint="cannot write a backup in the model directory: is it writable (and not full)?",
    )
    uploads = [
        (fp.new.encode(), f"{p.model}/{fp.name}", files[fp.name].mode or 0o644) for fp in todo
    ]
    # Compare and swap: each file must still be what was read (or already the patched text,
    # another host's same patch) and its backup must still exist: a `--restore` or an edit
    # from another host of a shared model directory in between is never overwritten.
    expect = {
        f"{p.model}/{fp.name}": [str(files[fp.name].digest), _sha256(fp.new.encode())]
        for fp in todo
    }
    backups = [f"{p.model}/{kvpatch.backup_name(fp.name)}" for fp in todo]
    try:
        h.put_files(uploads, step=step, expect=expect, require=backups)
    except FilesChanged as exc:
        changed_ = [n.rsplit("/", 1)[-1] for n in exc.changed]
        gone = [n.rsplit("/", 1)[-1] for n in exc.missing]
        names = [*changed_, *(n.removesuffix(kvpatch.backup_name("")) for n in gone)]
        raise StepFailed(
            step,
            f"{', '.join(dict.fromkeys(names))} changed while patching ("
            + "; ".join(
                [f"{n} is not what was read" for n in changed_]
                + [f"its backup {n} is gone: another run restored it?" for n in gone]
            )
            + "); nothing was replaced",
            command=exc.command,
            hint="another host sharing the model directory, or an edit, changed it meanwhile: "
            "run `fab patch-kv-config` again once it is done",
        ) from exc
    except StepFailed as exc:
        raise StepFailed(
            step,
            f"{exc.reason}. Changed: nothing (the config files are as they were; backups "
            f"*{kvpatch.backup_name('')} hold the originals)",
            command=exc.command,
            exited=exc.exited,
            stderr=exc.stderr,
            hint=exc.hint,
        ) from exc
    return changed(
        step,
        f"removed {removed}; originals kept as *{kvpatch.backup_name('')}",
        diff=diff,
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _utf8(info: FileInfo, step: str) -> str | None:
    """The file's text; a file that is not UTF-8 is refused: the edit is textual, and a byte
    that does not decode would be rewritten elsewhere in the file, unseen in the diff."""
    if info.data is None:
        return None
    try:
        return info.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StepFailed(
            step,
            f"{info.path} is not valid UTF-8 (byte 0x{info.data[exc.start]:02x} at offset "
            f"{exc.start}); nothing was changed",
            hint="the patch edits the file as UTF-8 text and would rewrite that byte; convert "
            "the file to UTF-8 (or remove the KV-cache setting by hand)",
        ) from None


def _restore(h: Host, p: Profile, files: dict[str, FileInfo], step: str) -> StepResult:
    """Move each backup back over its file: byte for byte, atomic (rename), backup gone."""
    restored: list[str] = []
    diffs: list[str] = []
    for name in kvpatch.KV_KEYS:
        original = files[kvpatch.backup_name(name)].text
        if original is None:
            continue
        path = f"{p.model}/{name}"
        diffs.append(kvpatch.unified_diff(files[name].text or "", original, path))
        restored.append(name)
    if not restored:
        return ok(step, "no backups to restore: the checkpoint was not patched by kimi-ops")
    if h.dry:
        return skipped(step, "dry run: would restore " + ", ".join(restored), diff="".join(diffs))
    # Compare and swap: each file and its backup must still be what was read (or the restore
    # already done by another run), else nothing is moved: an edit in between is not lost.
    read = {n: (files[n].digest, files[kvpatch.backup_name(n)].digest) for n in restored}
    out = h.run(kvpatch.restore_command(p.model, restored, read), step=step, check=False)
    if not out.ok:
        moved = [n for n in restored if f"{kvpatch.CHANGED_MARK}{n}" in out.stdout.splitlines()]
        if moved:
            raise StepFailed(
                step,
                f"{', '.join(moved)} changed while restoring; nothing was restored",
                command=out.command,
                hint="another host sharing the model directory, or an edit, changed it "
                "meanwhile: run `fab patch-kv-config --restore` again once it is done",
            )
        said = out.stderr.strip().splitlines()
        raise StepFailed(
            step,
            f"command failed with exit status {out.exited}" + (f": {said[-1]}" if said else ""),
            command=out.command,
            exited=out.exited,
            stderr=out.stderr,
        )
    return changed(step, "restored the originals of " + ", ".join(restored), diff="".join(diffs))
