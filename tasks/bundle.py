"""Build kimi_diagnose.py, the one stdlib-only file `fab diagnose` runs on a host.

The kimi_ops.diagnose modules are joined in dependency order (MODULES) by the stand-in's
bundler (``standin.bundle.join_modules``): package imports and ``from __future__`` lines are
dropped, one namespace results, and the build refuses what would change meaning there (a module
importing a later one, a name defined twice, an import that is not the standard library's).
Same sources, same bytes. kimi_ops does no I/O, so reading the package's files happens here.

``python -m tasks.bundle OUT`` writes the file (``-`` for stdout).
"""

from __future__ import annotations

import functools
import sys

from standin import bundle as sb

PACKAGE = "kimi_ops.diagnose"
#: Dependency order: every module imports only from modules before it.
MODULES = (
    "model",
    "clean",
    "hints",
    "options",
    "rules_kv",
    "rules_setup",
    "rules_device",
    "rules_runtime",
    "rules_process",
    "rules_engine",
    "rules_host",
    "rules",
    "words",
    "markers",
    "candidates",
    "events",
    "state",
    "scanner",
    "inprocess",
    "decide",
    "diagnoser",
)
#: Package files that are not part of the uploaded module (``__init__`` gives its docstring).
NOT_BUNDLED = ("__init__",)
FILENAME = "kimi_diagnose.py"
HEADER = """\
# GENERATED FILE - do not edit. Built by `python -m tasks.bundle` from the modules of the
# kimi-ops `kimi_ops.diagnose` package, for `fab diagnose` to run on the host beside
# kimi_diagnose_run.py. Python standard library only.
"""


def package_sources() -> tuple[dict[str, str], str]:
    """The module sources (name -> text) and ``__init__.py`` of the installed package."""
    return sb.package_sources(PACKAGE, MODULES, NOT_BUNDLED)


def bundle_text(sources: dict[str, str], init_text: str) -> str:
    """The one-file diagnosis module from the package's sources."""
    return sb.join_modules(PACKAGE, MODULES, sources, init_text, HEADER, FILENAME)


@functools.lru_cache(maxsize=1)
def build() -> bytes:
    """kimi_diagnose.py (UTF-8), built from the installed package; cached."""
    return bundle_text(*package_sources()).encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    return sb.write_main(
        argv,
        "python -m tasks.bundle",
        "Write kimi_diagnose.py, the one-file log diagnosis `fab diagnose` uploads.",
        FILENAME,
        build,
    )


if __name__ == "__main__":
    sys.exit(main())
