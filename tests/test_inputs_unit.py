"""Issue 12 (config and input), the parts testable without SSH."""

from __future__ import annotations

import pytest

from kimi_ops.errors import ProfileError
from kimi_ops.profile import host_keys, load_profile, split_host
from tasks import ns


def test_flags_are_long_only_so_no_letter_means_two_things() -> None:
    """`-r` was --restart on deploy and --run-dir elsewhere (Invoke's automatic short flags)."""
    for name, task in ns.tasks.items():
        for arg in task.get_arguments():
            assert all(len(n) > 1 for n in arg.names), (name, arg.names)


def test_host_keys_and_split_host() -> None:
    assert split_host("root@gpu1:2222") == ("root", "gpu1", 2222)
    assert split_host("gpu1") == (None, "gpu1", None)
    keys = host_keys("root", "gpu1", 2222, "10.0.0.5")
    assert keys[:2] == ["10.0.0.5", "gpu1"] and keys[-1] == "root@gpu1:2222"
    assert {"gpu1:2222", "root@gpu1", "root@10.0.0.5:2222"} <= set(keys)


def test_for_host_applies_the_more_specific_key_last() -> None:
    p = load_profile({"host_overrides": {"gpu1": {"port": 8001}, "root@gpu1:2222": {"port": 8002}}})
    assert p.for_host(host_keys("root", "gpu1", 2222)).port == 8002
    assert p.for_host(host_keys("admin", "gpu1", 22)).port == 8001


def test_an_override_key_for_no_host_of_the_run_is_refused() -> None:
    p = load_profile({"host_overrides": {"gpu9": {"port": 8001}}, "hosts": ["gpu1"]})
    with pytest.raises(ProfileError, match="host_overrides.gpu9.*matches no host"):
        p.check_override_keys([host_keys("root", "gpu1", 22)])
    listed = load_profile({"host_overrides": {"gpu9": {"port": 8001}}, "hosts": ["root@gpu9"]})
    listed.check_override_keys([host_keys("root", "gpu1", 22)])  # named by kimi.hosts: fine
