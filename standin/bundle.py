"""Build the one stdlib-only file a host runs (RUN_DIR/kimi_standin.py) from the standin modules.

The modules are concatenated in dependency order (MODULES) with their ``from standin.X import``
lines and ``from __future__`` lines removed, under one ``from __future__ import annotations``:
the file then runs in one namespace, as the stand-in always has (forked processes and Ray's
by-value pickling of ``__main__`` classes see what they saw before the split). The build refuses
what would change meaning in one namespace: a module importing a later one, a top-level name
defined twice, an aliased or non-``from`` import of the package. Same sources, same bytes.

``python -m standin.bundle OUT`` writes the file (``-`` for stdout). ``join_modules``,
``package_sources`` and ``write_main`` know no package: tasks/bundle.py builds the host-side
diagnosis module (kimi_ops.diagnose) with them.
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
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
    "procs",
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


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _section(
    package: str,
    modules: Sequence[str],
    name: str,
    text: str,
    defined: dict[str, str],
    imported: dict[str, str],
) -> tuple[str, str]:
    """(first docstring line, body without docstring and package/__future__ imports); records
    the module's top-level names in ``defined`` and its stdlib import names in ``imported``."""
    tree = ast.parse(text, filename=f"{package.replace('.', '/')}/{name}.py")
    drop: set[int] = set()
    body = list(tree.body)
    doc = ast.get_docstring(tree) or ""
    if doc:
        first = body.pop(0)
        drop.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))

    def ours(node: ast.ImportFrom) -> bool:
        return node.level > 0 or _in_package(node.module or "", package)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_in_package(a.name, package) for a in node.names):
            raise BundleError(f"{name}.py:{node.lineno}: use `from {package}.MODULE import NAME`")
        if isinstance(node, ast.ImportFrom) and ours(node) and node not in body:
            raise BundleError(f"{name}.py:{node.lineno}: package imports must be at top level")
    own: set[str] = set()
    for node in body:
        if isinstance(node, ast.ImportFrom) and (node.module == "__future__" or ours(node)):
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
            if node.module == "__future__":
                continue
            source = (node.module or "").removeprefix(package + ".")
            if node.level or source not in modules:
                raise BundleError(f"{name}.py:{node.lineno}: import from a {package} module")
            if modules.index(source) >= modules.index(name):
                raise BundleError(f"{name}.py imports {source}, which is not earlier in MODULES")
            for alias in node.names:
                if alias.asname or defined.get(alias.name) != source:
                    raise BundleError(
                        f"{name}.py imports {alias.name!r} from {source}, which does not define "
                        "it (or renames it)"
                    )
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            top = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            outside = [m for m in top if (m or "").split(".")[0] not in sys.stdlib_module_names]
            if isinstance(node, ast.ImportFrom) and node.level or outside:
                raise BundleError(f"{name}.py:{node.lineno}: imports {outside or top}, not stdlib")
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


def join_modules(
    package: str,
    modules: Sequence[str],
    sources: Mapping[str, str],
    init_text: str,
    header: str,
    filename: str,
) -> str:
    """One stdlib-only file from a package's modules (name -> text, all of ``modules``, in
    dependency order) and its ``__init__.py`` (whose docstring becomes the file's), under
    ``header``. Knows nothing of any one package: standin and tasks/bundle.py both use it."""
    missing = [m for m in modules if m not in sources]
    if missing:
        raise BundleError(f"missing modules: {', '.join(missing)}")
    init = ast.parse(init_text).body
    if not (init and isinstance(init[0], ast.Expr) and isinstance(init[0].value, ast.Constant)):
        raise BundleError("__init__.py must start with the package docstring")
    doc_lines = init_text.splitlines()[init[0].lineno - 1 : init[0].end_lineno]
    parts = [header + "\n".join(doc_lines) + "\n\nfrom __future__ import annotations\n"]
    defined: dict[str, str] = {}
    imported: dict[str, str] = {}
    path = package.replace(".", "/")
    for name in modules:
        doc, body = _section(package, modules, name, sources[name], defined, imported)
        parts.append(f"\n{RULE}\n# {path}/{name}.py\n# {doc}\n{RULE}\n\n{body}\n")
    text = "\n".join(parts)
    compile(text, filename, "exec")  # a SyntaxError here is a bundler bug
    return text


def bundle_text(sources: Mapping[str, str], init_text: str) -> str:
    """The one-file stand-in from the module sources (name -> text, all of MODULES) and the
    package's ``__init__.py`` (its docstring becomes the file's)."""
    return join_modules(PACKAGE, MODULES, sources, init_text, HEADER, "kimi_standin.py")


def package_sources(
    package: str, modules: Sequence[str], not_bundled: Sequence[str]
) -> tuple[dict[str, str], str]:
    """The installed package's module sources (name -> text, all of ``modules``) and its
    ``__init__.py``; refuses a module that is neither bundled nor named as not bundled."""
    root = resources.files(package)
    names = sorted(p.name[:-3] for p in root.iterdir() if p.name.endswith(".py"))
    stray = [n for n in names if n not in modules and n not in not_bundled]
    if stray:
        raise BundleError(f"modules neither bundled nor excluded: {', '.join(stray)}")
    sources = {m: root.joinpath(f"{m}.py").read_text(encoding="utf-8") for m in modules}
    return sources, root.joinpath("__init__.py").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def build() -> bytes:
    """The stand-in as one file (UTF-8), built from the installed package; cached."""
    sources, init_text = package_sources(PACKAGE, MODULES, NOT_BUNDLED)
    return bundle_text(sources, init_text).encode("utf-8")


def write_main(
    argv: list[str] | None, prog: str, description: str, example: str, data: Callable[[], bytes]
) -> int:
    """``prog OUT``: write the built file to OUT (``-`` for stdout)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("out", help=f"output file, e.g. {example}; - for stdout")
    args = parser.parse_args(argv)
    built = data()
    if args.out == "-":
        sys.stdout.buffer.write(built)
    else:
        with open(args.out, "wb") as fh:
            fh.write(built)
        print(f"wrote {args.out} ({len(built)} bytes)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_main(
        argv,
        "python -m standin.bundle",
        "Write the one-file stand-in engine (emulates vLLM, loads no model).",
        "kimi_standin.py",
        build,
    )


if __name__ == "__main__":
    sys.exit(main())
