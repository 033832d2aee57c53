"""The stand-in package and its build: the ONE stdlib-only file a host runs (kimi_standin.py).

The stand-in EMULATES vLLM and loads no model. tests/test_standin.py runs the built file; these
tests check the build itself: deterministic, marked as generated, one file that imports only the
standard library and runs in an isolated interpreter that cannot see the package.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from standin import bundle

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "standin"
MAX_LINES = 600


def test_the_build_is_deterministic_and_says_it_is_generated() -> None:
    bundle.build.cache_clear()
    first = bundle.build()
    bundle.build.cache_clear()
    assert bundle.build() == first
    head = first.decode().splitlines()[:5]
    assert head[0] == "#!/usr/bin/env python3"
    assert head[1].startswith("# GENERATED FILE - do not edit")
    text = " ".join(head)
    assert "EMULATES vLLM" in text and "loads no model" in text


def test_the_bundle_is_one_file_that_imports_only_the_standard_library() -> None:
    tree = ast.parse(bundle.build().decode())
    assert ast.get_docstring(tree, clean=False).startswith("kimi-ops stand-in engine: it EMULATES")
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    nested: list[tuple[str, str]] = []  # (enclosing def, imported module)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    nested += [(node.name, a.name) for a in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    nested.append((node.name, inner.module or ""))
    modules = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert modules and all(m.split(".")[0] in sys.stdlib_module_names for m in modules), modules
    assert all(n.level == 0 for n in top if isinstance(n, ast.ImportFrom))
    # Ray is imported only by the Ray join (--distributed-executor-backend ray), as vLLM does.
    third_party = {(d, m) for d, m in nested if m.split(".")[0] not in sys.stdlib_module_names}
    assert {m.split(".")[0] for _, m in third_party} == {"ray"}
    assert {d for d, _ in third_party} <= {"RankActor", "RayExecutor"}
    assert "from __future__ import annotations" in bundle.build().decode()


def test_the_bundle_runs_alone_in_an_isolated_interpreter(tmp_path: Path) -> None:
    """-I -S: no cwd, no PYTHON* variables, no site-packages: the package is out of reach."""
    script = tmp_path / "kimi_standin.py"
    script.write_bytes(bundle.build())
    env = {k: v for k, v in os.environ.items() if k != "KIMI_STANDIN_CONFIG"}
    cmd = [sys.executable, "-I", "-S", str(script)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cmd, *args], capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env
        )

    helped = run("--help")
    assert helped.returncode == 0, helped.stderr
    assert "usage: api_server.py" in helped.stdout and "--tensor-parallel-size" in helped.stdout
    assert run("vllm-version").stdout == "0.17.1\n"
    gpus = run("nvidia-smi", "-L").stdout.splitlines()
    assert len(gpus) == 8 and gpus[0].startswith("GPU 0: NVIDIA RTX PRO 6000 Blackwell")
    probe = subprocess.run(
        [*cmd[:3], "-c", "import standin"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert probe.returncode != 0  # the run above really had no package to lean on


def test_the_bundle_command_writes_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "built.py"
    res = subprocess.run(
        [sys.executable, "-m", "standin.bundle", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == bundle.build()
    assert f"wrote {out}" in res.stderr


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_each_standin_module_is_small_documented_and_self_contained(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: over {MAX_LINES} lines"
    tree = ast.parse(text)
    doc = ast.get_docstring(tree)
    assert doc and doc.splitlines()[0].strip(), f"{path.name} has no docstring saying its job"
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names = [node.module or ""]
        for name in names:
            root = name.split(".")[0]
            assert root in sys.stdlib_module_names or root in ("standin", "ray"), (
                f"{path.name} imports {name}"
            )


def test_every_module_is_bundled_or_named_as_not_bundled() -> None:
    names = {p.stem for p in PACKAGE.glob("*.py")}
    assert names == set(bundle.MODULES) | set(bundle.NOT_BUNDLED)


def _sources() -> tuple[dict[str, str], str]:
    sources = {m: (PACKAGE / f"{m}.py").read_text() for m in bundle.MODULES}
    return sources, (PACKAGE / "__init__.py").read_text()


@pytest.mark.parametrize(
    ("module", "edit", "message"),
    [
        ("cli", lambda s: s + "\nGIB = 1\n", "defines 'GIB', already bound by logfmt.py"),
        ("smi", lambda s: s + "\ndef json() -> None:\n    pass\n", "defines 'json'"),
        ("config", lambda s: "from standin.cli import main\n" + s, "not earlier in MODULES"),
        (
            "cli",
            lambda s: s.replace("import nvidia_smi_main", "import nvidia_smi_main as nsm"),
            "does not define it (or renames it)",
        ),
        ("cli", lambda s: s + "\nimport standin.config\n", "use `from standin.MODULE import"),
        ("cli", lambda s: s.replace("from standin.smi", "from .smi"), "import from a standin"),
        (
            "cli",
            lambda s: s + "\ndef f() -> None:\n    from standin.smi import smi_fail\n",
            "package imports must be at top level",
        ),
    ],
)
def test_the_bundler_refuses_what_one_namespace_would_change(
    module: str, edit: Callable[[str], str], message: str
) -> None:
    sources, init = _sources()
    assert bundle.bundle_text(sources, init)  # unedited, it builds
    sources[module] = edit(sources[module])
    with pytest.raises(bundle.BundleError, match=re.escape(message)):
        bundle.bundle_text(sources, init)
