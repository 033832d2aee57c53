"""Build the one stdlib-only file a host runs (RUN_DIR/kimi_standin.py) from the standin modules.

The modules are concatenated in dependency order (MODULES) with their ``from standin.X import``
lines and ``from __future__`` lines removed, under one ``from __future__ import annotations``:
the file then runs in one namespace, as the stand-in always has (forked processes and Ray's
by-value pickling of ``__main__`` classes see what they saw before the split). The build refuses
what would change meaning in one namespace: a module importing a later one, a top-level name
defined twice, an aliased or non-``from`` import of the package. Same sources, same bytes.

``python -m standin.bundle OUT`` writes the file (``-`` for stdout).
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from collections.abc import Mapping
from importlib import resources

PACKAGE = "standin"
#: Dependency order: every module imports only from modules before it.
MODULES = (
    "config",
    "logfmt",
    "frames",
    "args",
    "model",
    "gpustate",
    "shm",
    "startup",
    "ray_join",
    "engine",
    "httpapi",
    "apiserver",
    "smi",
    "cli",
)
#: Package files that are not part of the uploaded stand-in.
NOT_BUNDLED = ("__init__", "__main__", "bundle")
HEADER = """\
#!/usr/bin/env python3
# GENERATED FILE - do not edit. Built by `python -m standin.bundle` from the modules of the
# kimi-ops `standin` package. This is the kimi-ops stand-in engine: it EMULATES vLLM (its log
# lines, processes, failures and OpenAI API) and loads no model. Python standard library only.
"""
RULE = "# " + "-" * 90


class BundleError(Exception):
    """The modules cannot be joined into one namespace without changing what they mean."""


def _bound(node: ast.stmt) -> list[str]:
    """Names a top-level statement defines (def, class, assignment)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _is_ours(node: ast.ImportFrom) -> bool:
    module = node.module or ""
    return node.level > 0 or module == PACKAGE or module.startswith(PACKAGE + ".")


def _section(
    name: str, text: str, defined: dict[str, str], imported: dict[str, str]
) -> tuple[str, str]:
    """(first docstring line, body without docstring and package/__future__ imports); records
    the module's top-level names in ``defined`` and its stdlib import names in ``imported``."""
    tree = ast.parse(text, filename=f"{PACKAGE}/{name}.py")
    drop: set[int] = set()
    body = list(tree.body)
    doc = ast.get_docstring(tree) or ""
    if doc:
        first = body.pop(0)
        drop.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == PACKAGE for a in node.names
        ):
            raise BundleError(f"{name}.py:{node.lineno}: use `from {PACKAGE}.MODULE import NAME`")
        if isinstance(node, ast.ImportFrom) and _is_ours(node) and node not in body:
            raise BundleError(f"{name}.py:{node.lineno}: package imports must be at top level")
    own: set[str] = set()
    for node in body:
        if isinstance(node, ast.ImportFrom) and (node.module == "__future__" or _is_ours(node)):
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
            if node.module == "__future__":
                continue
            parts = (node.module or "").split(".")
            if node.level or len(parts) != 2 or parts[1] not in MODULES:
                raise BundleError(f"{name}.py:{node.lineno}: import from a {PACKAGE} module")
            source = parts[1]
            if MODULES.index(source) >= MODULES.index(name):
                raise BundleError(f"{name}.py imports {source}, which is not earlier in MODULES")
            for alias in node.names:
                if alias.asname or defined.get(alias.name) != source:
                    raise BundleError(
                        f"{name}.py imports {alias.name!r} from {source}, which does not define "
                        "it (or renames it)"
                    )
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if defined.get(bound, name) != name:
                    raise BundleError(f"{name}.py imports {bound!r}, defined in {defined[bound]}")
                imported.setdefault(bound, name)
        else:
            own.update(_bound(node))
    for bound in sorted(own):
        if bound in defined or bound in imported:
            where = defined.get(bound) or imported[bound]
            raise BundleError(f"{name}.py defines {bound!r}, already bound by {where}.py")
        defined[bound] = name
    lines = text.splitlines()
    kept = "\n".join(line for i, line in enumerate(lines, 1) if i not in drop).strip("\n")
    return doc.splitlines()[0] if doc else "", kept


def bundle_text(sources: Mapping[str, str], init_text: str) -> str:
    """The one-file stand-in from the module sources (name -> text, all of MODULES) and the
    package's ``__init__.py`` (its docstring becomes the file's)."""
    missing = [m for m in MODULES if m not in sources]
    if missing:
        raise BundleError(f"missing modules: {', '.join(missing)}")
    init = ast.parse(init_text).body
    if not (init and isinstance(init[0], ast.Expr) and isinstance(init[0].value, ast.Constant)):
        raise BundleError("__init__.py must start with the package docstring")
    doc_lines = init_text.splitlines()[init[0].lineno - 1 : init[0].end_lineno]
    parts = [HEADER + "\n".join(doc_lines) + "\n\nfrom __future__ import annotations\n"]
    defined: dict[str, str] = {}
    imported: dict[str, str] = {}
    for name in MODULES:
        doc, body = _section(name, sources[name], defined, imported)
        parts.append(f"\n{RULE}\n# {PACKAGE}/{name}.py\n# {doc}\n{RULE}\n\n{body}\n")
    text = "\n".join(parts)
    compile(text, "kimi_standin.py", "exec")  # a SyntaxError here is a bundler bug
    return text


def _package_sources() -> tuple[dict[str, str], str]:
    root = resources.files(PACKAGE)
    names = sorted(p.name[:-3] for p in root.iterdir() if p.name.endswith(".py"))
    stray = [n for n in names if n not in MODULES and n not in NOT_BUNDLED]
    if stray:
        raise BundleError(f"modules neither bundled nor excluded: {', '.join(stray)}")
    sources = {m: root.joinpath(f"{m}.py").read_text(encoding="utf-8") for m in MODULES}
    return sources, root.joinpath("__init__.py").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def build() -> bytes:
    """The stand-in as one file (UTF-8), built from the installed package; cached."""
    sources, init_text = _package_sources()
    return bundle_text(sources, init_text).encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m standin.bundle",
        description="Write the one-file stand-in engine (emulates vLLM, loads no model).",
    )
    parser.add_argument("out", help="output file, e.g. kimi_standin.py; - for stdout")
    args = parser.parse_args(argv)
    data = build()
    if args.out == "-":
        sys.stdout.buffer.write(data)
    else:
        with open(args.out, "wb") as fh:
            fh.write(data)
        print(f"wrote {args.out} ({len(data)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
