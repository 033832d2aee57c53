"""Configuration files that fail loudly: a missing ``-f`` file, a misspelled section, a YAML or
JSON syntax error each end fab with one line naming the file (and line and column).

Invoke loads the runtime file (``fab -f FILE``) and the project's ``fabric.yaml`` after it has
imported this package (``Program.update_config`` and ``load_collection``). On its own it skips a
missing ``-f`` file silently (an ``ENOENT`` is "no such config", so every default applies),
keeps unknown top-level sections (``kim:`` instead of ``kimi:``), and lets a parser error escape
as a traceback. Nor does it catch a file whose key holds a list or a scalar where a lower level
holds a mapping (``kimi: {env: []}`` over ``~/.fabric.yaml``'s ``env``): its merge raises
``AmbiguousMergeError``, whose message is the repr of both values (the lower level's secrets).
:func:`install` wraps those loaders and the merge on ``fabric.Config`` so each of these raises
``invoke.Exit`` with one line, naming the file and the key, never a value. (``~/.fabric.yaml``
and ``/etc/fabric.yaml`` are read before any fabfile is imported: their errors stay Invoke's.)
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from typing import Any

from fabric import Config
from invoke.config import AmbiguousMergeError
from invoke.exceptions import Exit
from invoke.util import yaml  # type: ignore[attr-defined]  # Invoke vendors PyYAML

SECTION = "kimi"


def _parse_error(path: str, exc: Exception) -> Exit:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:  # yaml.MarkedYAMLError: 0-based line and column
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        return Exit(f"error: config file {where}: invalid YAML: {problem}", code=1)
    if isinstance(exc, json.JSONDecodeError):
        where = f"{path}:{exc.lineno}:{exc.colno}"
        return Exit(f"error: config file {where}: invalid JSON: {exc.msg}", code=1)
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return Exit(f"error: config file {path}: {first}", code=1)


def _checked_loader(load: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def loader(self: Any, path: Any) -> Any:
        try:
            data = load(self, path)
        except FileNotFoundError:
            raise  # Invoke's "no such file" path: the runtime check below names it
        except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
            raise _parse_error(str(path), exc) from None
        if data is not None and not isinstance(data, Mapping):
            raise Exit(
                f"error: config file {path}: the top level must be a mapping of sections "
                f"(e.g. `{SECTION}:`), got {type(data).__name__}",
                code=1,
            )
        return data

    return loader


def unknown_sections(data: Mapping[str, Any], known: set[str]) -> list[str]:
    return sorted(str(k) for k in data if k not in known)


def _check_sections(config: Any, level: str) -> None:
    data = getattr(config, f"_{level}", None) or {}
    path = getattr(config, f"_{level}_path", None)
    known = set(config._defaults) | set(config._collection) | {SECTION}
    bad = unknown_sections(data, known)
    if bad:
        close = difflib.get_close_matches(bad[0], sorted(known), n=1)
        hint = f" (did you mean `{close[0]}:`?)" if close else ""
        raise Exit(
            f"error: config file {path}: unknown section `{bad[0]}:`{hint}; "
            f"kimi-ops reads its profile from `{SECTION}:`",
            code=1,
        )


def _load_runtime(original: Callable[..., None]) -> Callable[..., None]:
    def load_runtime(self: Any, merge: bool = True) -> None:
        original(self, merge=merge)
        path = getattr(self, "_runtime_path", None)
        if path is None:
            return
        if not getattr(self, "_runtime_found", None):
            raise Exit(f"error: config file not found: {path} (given with -f)", code=1)
        _check_sections(self, "runtime")

    return load_runtime


def _load_project(original: Callable[..., None]) -> Callable[..., None]:
    def load_project(self: Any, merge: bool = True) -> None:
        original(self, merge=merge)
        if getattr(self, "_project_found", None):
            _check_sections(self, "project")

    return load_project


#: Config levels in the order :meth:`invoke.config.Config.merge` merges them: attribute, and
#: what to call a level that is no file.
_LEVELS: tuple[tuple[str, str], ...] = (
    ("defaults", "the defaults"),
    ("collection", "the task collection's configuration"),
    ("system", ""),
    ("user", ""),
    ("project", ""),
    ("env", "the environment variables (INVOKE_*)"),
    ("runtime", ""),
    ("overrides", "the command line"),
    ("modifications", "the values set at run time"),
)


def _kind(value: Any) -> str:
    """What a value is, in a profile's words (never the value itself)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "boolean"
    for kinds, name in (
        (Mapping, "mapping"),
        ((list, tuple), "list"),
        (str, "string"),
        ((int, float), "number"),
    ):
        if isinstance(value, kinds):
            return name
    return type(value).__name__


def _key(path: tuple[Any, ...]) -> str:
    return ".".join(k if isinstance(k, str) and k.isprintable() else repr(k) for k in path)


def _source(config: Any, level: str, desc: str) -> str:
    if desc:
        return desc
    return f"config file {getattr(config, f'_{level}_path', None) or level}"


def _first_conflict(
    base: dict[Any, Any], data: Mapping[Any, Any], path: tuple[Any, ...]
) -> tuple[tuple[Any, ...], Any, Any] | None:
    """Merge ``data`` into ``base`` as Invoke's ``merge_dicts`` does; the first key where one
    side is a mapping and the other is not: (its path, the base's value, ``data``'s)."""
    for key, value in data.items():
        here = (*path, key)
        if key in base and isinstance(base[key], dict) != isinstance(value, dict):
            return here, base[key], value
        if isinstance(value, dict):
            found = _first_conflict(base.setdefault(key, {}), value, here)
            if found is not None:
                return found
        else:
            base[key] = value
    return None


def merge_error(config: Any) -> Exit:
    """The one line that says which file gives which key the wrong kind of value (a list or a
    scalar where a lower level has a mapping, or the other way round), never a value."""
    merged: dict[Any, Any] = {}
    seen: dict[tuple[Any, ...], str] = {}  # key path -> the level that gave it last
    for level, desc in _LEVELS:
        data = getattr(config, f"_{level}", None)
        if not isinstance(data, Mapping):
            continue
        found = _first_conflict(merged, data, ())
        here = _source(config, level, desc)
        if found is not None:
            path, lower, value = found
            where = f"error: {here}"
            if isinstance(lower, dict):
                return Exit(f"{where}: {_key(path)} must be a mapping, got {_kind(value)}", code=1)
            below = seen.get(path, "a lower level")
            return Exit(
                f"{where}: {_key(path)} is a mapping, but {below} gives it as {_kind(lower)}: "
                "one of them is wrong",
                code=1,
            )
        _mark(seen, data, (), here)
    return Exit(
        "error: the configuration files cannot be merged (a key is a mapping in one "
        "and not in another)",
        code=1,
    )


def _mark(
    seen: dict[tuple[Any, ...], str], data: Mapping[Any, Any], path: tuple[Any, ...], src: str
) -> None:
    for key, value in data.items():
        seen[(*path, key)] = src
        if isinstance(value, Mapping):
            _mark(seen, value, (*path, key), src)


def _checked_merge(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def merge(self: Any) -> None:
        try:
            original(self)
        except AmbiguousMergeError:  # its message shows both values: never print it
            raise merge_error(self) from None

    return merge


def install() -> None:
    """Wrap fabric.Config's file loaders (once)."""
    if getattr(Config, "_kimi_ops_checked", False):
        return
    Config._load_yaml = _checked_loader(Config._load_yaml)  # type: ignore[method-assign]
    Config._load_yml = Config._load_yaml  # type: ignore[method-assign]
    Config._load_json = _checked_loader(Config._load_json)  # type: ignore[method-assign]
    Config.load_runtime = _load_runtime(Config.load_runtime)  # type: ignore[method-assign]
    Config.load_project = _load_project(Config.load_project)  # type: ignore[method-assign]
    Config.merge = _checked_merge(Config.merge)  # type: ignore[method-assign]
    Config._kimi_ops_checked = True  # type: ignore[attr-defined]
