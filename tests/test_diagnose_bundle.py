"""kimi_ops.diagnose as a package, and its build: the ONE stdlib-only file `fab diagnose` uploads.

tasks/bundle.py joins the package's modules into kimi_diagnose.py; on the host
tasks/remote/kimi_diagnose_run.py imports it. These tests run that pair in an isolated
interpreter that cannot see the package and compare its diagnosis with the package's.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_ops.diagnose import diagnose
from standin.bundle import BundleError
from tasks import bundle

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kimi_ops" / "diagnose"
RUNNER = REPO / "tasks" / "remote" / "kimi_diagnose_run.py"
FIXTURES = REPO / "tests" / "fixtures" / "logs"
MAX_LINES = 600
CONTEXT = {"port": 8000, "vllm_version": "0.17.1", "extra_args": ["--max-num-seqs", "64"]}


def _one_log_per_label() -> list[Path]:
    first: dict[str, Path] = {}
    for path in sorted(FIXTURES.glob("*.log")):
        first.setdefault(path.name.split("__")[0], path)
    return sorted(first.values())


def test_the_build_is_deterministic_and_says_it_is_generated() -> None:
    bundle.build.cache_clear()
    first = bundle.build()
    bundle.build.cache_clear()
    assert bundle.build() == first
    assert first.decode().startswith("# GENERATED FILE - do not edit")


def test_the_bundle_is_one_file_that_imports_only_the_standard_library() -> None:
    tree = ast.parse(bundle.build().decode())
    assert ast.get_docstring(tree, clean=False).startswith("Diagnose a vLLM server log")
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            modules.append(node.module or "")
    assert modules and all(m.split(".")[0] in sys.stdlib_module_names for m in modules), modules
    for name in ("LogDiagnoser", "Diagnosis", "diagnose", "RULES"):  # what the runner needs
        assert any(getattr(n, "name", None) == name or _assigns(n, name) for n in tree.body), name


def _assigns(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else []
    targets += [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


@pytest.mark.parametrize("log", _one_log_per_label(), ids=lambda p: p.name)
def test_the_runner_on_the_bundle_diagnoses_as_the_package_does(log: Path, tmp_path: Path) -> None:
    """-I -S: no cwd, no PYTHON* variables, no site-packages: the package is out of reach."""
    (tmp_path / "kimi_diagnose.py").write_bytes(bundle.build())
    shutil.copy(RUNNER, tmp_path / RUNNER.name)
    res = subprocess.run(
        [sys.executable, "-I", "-S", str(tmp_path / RUNNER.name), str(log), json.dumps(CONTEXT)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    want = diagnose(log.read_bytes().decode("utf-8"), dict(CONTEXT)).to_dict()
    assert out == {"diagnosis": json.loads(json.dumps(want)), "bytes": log.stat().st_size}
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import kimi_ops"], capture_output=True, cwd=tmp_path
    )
    assert probe.returncode != 0  # the run above really had no package to lean on


def test_the_bundle_command_writes_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "built.py"
    res = subprocess.run(
        [sys.executable, "-m", "tasks.bundle", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == bundle.build()


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_each_module_is_small_documented_and_stdlib_only(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: over {MAX_LINES} lines"
    doc = ast.get_docstring(ast.parse(text))
    assert doc and doc.splitlines()[0].strip(), f"{path.name} has no docstring saying its job"


def test_every_module_is_bundled_or_named_as_not_bundled() -> None:
    names = {p.stem for p in PACKAGE.glob("*.py")}
    assert names == set(bundle.MODULES) | set(bundle.NOT_BUNDLED)


@pytest.mark.parametrize(
    ("module", "edit", "message"),
    [
        ("hints", lambda s: "from kimi_ops.defaults import PORT\n" + s, "not stdlib"),
        ("model", lambda s: "from kimi_ops.diagnose.rules import RULES\n" + s, "not earlier"),
        ("clean", lambda s: s + "\nLABELS = ()\n", "defines 'LABELS', already bound by model"),
    ],
)
def test_the_bundler_refuses_what_one_namespace_would_change(
    module: str, edit: Callable[[str], str], message: str
) -> None:
    sources, init_text = bundle.package_sources()
    sources[module] = edit(sources[module])
    with pytest.raises(BundleError, match=message):
        bundle.bundle_text(sources, init_text)
