"""How the whole suite is spread over pytest-xdist's workers (the README's test command and CI
run ``-n 2 --dist loadgroup``; without ``-n`` it all runs in one process, in file order).

The real engine's tests run one after another on one worker: each starts vLLM's CPU build, which
takes every core while it loads (at niceness 10, see tests/real_vllm/conftest.py), and they share
one warm torch.compile cache. The Ray cluster
tests likewise (each starts a Ray head). Every other test runs beside them: none may depend on
being alone on the machine (other servers, other tests' servers and files may be there).
"""

from __future__ import annotations

import pytest

#: The tests that run on one worker, in order, by the marker or module they have.
_SERIAL_MARKERS = ("real_vllm",)
#: (test_eval_diagnosis.py: its two whole-corpus tests share one evaluation run, per process)
_SERIAL_MODULES = {"test_cluster.py": "ray_cluster", "test_eval_diagnosis.py": "corpus_report"}


def _serial_group(item: pytest.Item) -> str | None:
    group = next((m for m in _SERIAL_MARKERS if item.get_closest_marker(m)), None)
    return group or _SERIAL_MODULES.get(item.path.name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _serial_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "dist", "no") != "no":
        # the long serial runs first, so the other workers share the rest beside them
        items.sort(key=lambda item: _serial_group(item) is None)
