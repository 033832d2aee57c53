"""Configuration files that fail loudly: a missing ``-f`` file, a misspelled section, a YAML or
JSON syntax error each end fab with one line naming the file (and line and column).

Invoke loads the runtime file (``fab -f FILE``) and the project's ``fabric.yaml`` after it has
imported this package (``Program.update_config`` and ``load_collection``). On its own it skips a
missing ``-f`` file silently (an ``ENOENT`` is "no such config", so every default applies),
keeps unknown top-level sections (``kim:`` instead of ``kimi:``), and lets a parser error escape
as a traceback. :func:`install` wraps those loaders on ``fabric.Config`` so each of these raises
``invoke.Exit`` with one line. (``~/.fabric.yaml`` and ``/etc/fabric.yaml`` are read before any
fabfile is imported: their syntax errors stay Invoke's.)
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from typing import Any

from fabric import Config
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


def install() -> None:
    """Wrap fabric.Config's file loaders (once)."""
    if getattr(Config, "_kimi_ops_checked", False):
        return
    Config._load_yaml = _checked_loader(Config._load_yaml)  # type: ignore[method-assign]
    Config._load_yml = Config._load_yaml  # type: ignore[method-assign]
    Config._load_json = _checked_loader(Config._load_json)  # type: ignore[method-assign]
    Config.load_runtime = _load_runtime(Config.load_runtime)  # type: ignore[method-assign]
    Config.load_project = _load_project(Config.load_project)  # type: ignore[method-assign]
    Config._kimi_ops_checked = True  # type: ignore[attr-defined]
