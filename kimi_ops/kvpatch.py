"""The KV-cache config patch: remove the checkpoint's FP8 KV-cache settings, minimally.

On vLLM <= 0.17.1 the only MLA backend for compute capability 12.x (TRITON_MLA) cannot use an FP8
KV cache, and vLLM takes the KV-cache dtype from the checkpoint. The reliable workaround is to
remove ``quantization_config.kv_cache_scheme`` from config.json and
``quantization.kv_cache_quant_algo`` from hf_quant_config.json.

The edit is textual: only the removed member's lines change, so the diff shows exactly what went
and the rest of the file stays byte for byte. The result is checked by re-parsing it.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .defaults import BACKUP_SUFFIX
from .errors import ConfigPatchError
from .shell import quote

#: file name -> path of keys to remove (nested objects).
KV_KEYS: dict[str, tuple[str, ...]] = {
    "config.json": ("quantization_config", "kv_cache_scheme"),
    "hf_quant_config.json": ("quantization", "kv_cache_quant_algo"),
}
#: Files that must exist for the patch; the others are patched when present.
REQUIRED_FILES = ("config.json",)


@dataclass(frozen=True)
class FilePatch:
    """The outcome of patching one file's text."""

    name: str
    old: str
    new: str
    removed: tuple[str, ...]  # dotted keys removed

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def diff(self, directory: str = "") -> str:
        return unified_diff(self.old, self.new, f"{directory.rstrip('/')}/{self.name}")


def backup_name(name: str) -> str:
    return name + BACKUP_SUFFIX


def backup_command(directory: str, names: Sequence[str], token: str) -> str:
    """The shell command that keeps each file's original as its backup, never over one that
    exists: hosts that share the model directory (NFS) may patch it at the same moment.

    Each file is copied to a name of this run's own (``token``), then linked to the backup's
    name, which fails if another run made it first (else, on a file system without hard links,
    moved there without overwriting); the copy is then removed. A run that lost the race may
    have copied an already patched file: its copy is discarded. The command fails unless every
    backup exists at its end (``cp`` says why)."""
    parts = []
    for name in names:
        path, backup = f"{directory}/{name}", f"{directory}/{backup_name(name)}"
        tmp = f"{backup}.{token}.tmp"
        f, b, t = quote(path), quote(backup), quote(tmp)
        parts.append(
            f"{{ test -e {b} || {{ cp -p -- {f} {t} && {{ ln -- {t} {b} 2>/dev/null || "
            f"mv -n -- {t} {b} 2>/dev/null; }}; rm -f -- {t}; test -e {b}; }}; }}"
        )
    return " && ".join(parts)


#: restore_command prints this and the file's name when the file changed since it was read.
CHANGED_MARK = "@@kimi-ops-changed:"


def _holds(path: str, digest: str | None) -> str:
    """A test: the file at (quoted) ``path`` has sha256 ``digest`` (None: it does not exist)."""
    if digest is None:
        return f"[ ! -e {path} ]"
    return f'[ "$(sha256sum < {path} 2>/dev/null)" = "{digest}  -" ]'


def restore_command(
    directory: str,
    names: Sequence[str],
    read: Mapping[str, tuple[str | None, str | None]] | None = None,
) -> str:
    """The shell command that moves each backup back over its file (atomic rename, backup
    gone); a backup another run restored first is no failure.

    ``read``: name -> sha256 of (the file, its backup) as read. Then first, for every file,
    either both still hold that, or the restore is already done (no backup, the file holds
    the backup's bytes); else nothing is moved, :data:`CHANGED_MARK` names the file, exit 1."""
    parts = []
    for name in names:
        f, b = quote(f"{directory}/{name}"), quote(f"{directory}/{backup_name(name)}")
        if read is not None:
            file_digest, backup_digest = read[name]
            same = f"{_holds(f, file_digest)} && {_holds(b, backup_digest)}"
            done = f"[ ! -e {b} ] && {_holds(f, backup_digest)}"
            mark = quote(CHANGED_MARK + name)
            parts.insert(0, f"{{ {{ {same}; }} || {{ {done}; }} || {{ echo {mark}; false; }}; }}")
        parts.append(f"{{ mv -f -- {b} {f} || [ ! -e {b} ]; }}")
    return " && ".join(parts)


def unified_diff(old: str, new: str, path: str) -> str:
    """A ``diff -u`` style text (empty when equal)."""
    path = path.lstrip("/")
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


# --- a JSON scanner that records where each object member sits --------------------------------


class _Member:
    __slots__ = ("key", "key_start", "value_start", "value_end", "value")

    def __init__(self, key: str, key_start: int, value_start: int, value_end: int, value: Any):
        self.key = key
        self.key_start = key_start
        self.value_start = value_start
        self.value_end = value_end
        self.value = value


class _Obj:
    __slots__ = ("members",)

    def __init__(self) -> None:
        self.members: list[_Member] = []


_WS = " \t\n\r"
_DECODER = json.JSONDecoder()


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _scan(text: str, i: int) -> tuple[Any, int]:
    """Scan one JSON value at ``i``: (value or _Obj for objects, end index)."""
    i = _skip_ws(text, i)
    if i < len(text) and text[i] == "{":
        obj = _Obj()
        i = _skip_ws(text, i + 1)
        if i < len(text) and text[i] == "}":
            return obj, i + 1
        while True:
            i = _skip_ws(text, i)
            key_start = i
            key, i = _DECODER.raw_decode(text, i)
            if not isinstance(key, str):
                raise ValueError(f"expected a string key at {key_start}")
            i = _skip_ws(text, i)
            if i >= len(text) or text[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            value_start = _skip_ws(text, i + 1)
            value, i = _scan(text, value_start)
            obj.members.append(_Member(key, key_start, value_start, i, value))
            i = _skip_ws(text, i)
            if i < len(text) and text[i] == ",":
                i += 1
                continue
            if i < len(text) and text[i] == "}":
                return obj, i + 1
            raise ValueError(f"expected ',' or '}}' at {i}")
    value, end = _DECODER.raw_decode(text, i)
    return value, end


def parse_object(text: str, name: str) -> dict[str, Any]:
    """Parse a config file's text, which must be a JSON object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigPatchError(
            name,
            f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            hint="nothing was changed; fix or restore the file first",
        ) from None
    if not isinstance(data, dict):
        raise ConfigPatchError(
            name,
            f"is not a JSON object (top level is {type(data).__name__})",
            hint="nothing was changed",
        )
    return data


def _remove_member(text: str, obj: _Obj, index: int) -> str:
    members = obj.members
    m = members[index]
    if index + 1 < len(members):
        return text[: m.key_start] + text[members[index + 1].key_start :]
    if index > 0:
        return text[: members[index - 1].value_end] + text[m.value_end :]
    return text[: m.key_start] + text[m.value_end :]


def remove_key(text: str, path: tuple[str, ...], name: str = "file") -> tuple[str, bool]:
    """Remove the member at ``path`` (every duplicate of it) from the JSON object ``text``.

    Returns (new text, whether anything was removed). The rest of the text is untouched.
    """
    expected = parse_object(text, name)
    removed = False
    while True:
        root, _ = _scan(text, 0)
        obj: Any = root
        for key in path[:-1]:
            found = [m for m in obj.members if m.key == key] if isinstance(obj, _Obj) else []
            if not found:
                obj = None
                break
            obj = found[-1].value  # like json.loads, the last duplicate wins
        if not isinstance(obj, _Obj):
            break
        idx = next((i for i, m in enumerate(obj.members) if m.key == path[-1]), None)
        if idx is None:
            break
        text = _remove_member(text, obj, idx)
        removed = True
    if removed:
        target: Any = expected
        for key in path[:-1]:
            target = target[key]
        target.pop(path[-1], None)
        if json.loads(text) != expected:  # the textual edit must equal the semantic one
            raise ConfigPatchError(name, "internal error: patch result does not re-parse as meant")
    return text, removed


def patch_text(name: str, text: str) -> FilePatch:
    """Patch one known config file's text (see :data:`KV_KEYS`)."""
    path = KV_KEYS[name]
    new, removed = remove_key(text, path, name)
    return FilePatch(name, text, new, (".".join(path),) if removed else ())


def kv_settings(name: str, text: str) -> Any:
    """The KV-cache setting a config file holds (None when absent)."""
    obj: Any = parse_object(text, name)
    for key in KV_KEYS[name]:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def plan_patch(files: dict[str, str | None]) -> list[FilePatch]:
    """Patch every known file. ``files`` maps name -> text, or None when the file is missing.

    A missing required file or malformed JSON raises ConfigPatchError before anything is changed.
    Optional files that are missing are left out.
    """
    for name in REQUIRED_FILES:
        if files.get(name) is None:
            raise ConfigPatchError(
                name, "is missing", hint="check kimi.model: it must be the model directory"
            )
    patches = []
    for name in KV_KEYS:
        text = files.get(name)
        if text is not None:
            patches.append(patch_text(name, text))
    return patches
