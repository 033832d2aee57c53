"""A known secret inside a non-secret ``env`` value is refused, unshown (red-team round 4, #17).

A non-secret env value is exported from launch.sh in clear; the diff masks the secret in it, so
the user would not have been told. extra_args holding a secret are refused the same way.
"""

from __future__ import annotations

import pytest

from kimi_ops.errors import ProfileError
from kimi_ops.profile import load_profile

SECRET = "Pw7xQ2mZ9kLr4TnB8vYc3HdF6sJg1WpA5eRu0KoN2iMq7ZtX9bVl3CyE8hGj4Dfs"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


def _profile(env: dict[str, str], **more: object) -> None:
    load_profile({"run_dir": "/srv/kimi", "env": env, **more})


def test_a_secret_inside_a_non_secret_env_value_is_refused_unshown() -> None:
    with pytest.raises(ProfileError) as err:
        _profile({"DB_PASSWORD": SECRET, "PLAIN": SECRET + "-plain"})
    assert "env.PLAIN" in str(err.value) and "env.DB_PASSWORD" in str(err.value)
    assert SECRET[:6] not in str(err.value) + (err.value.hint or "")
    with pytest.raises(ProfileError, match="kimi.api_key"):
        _profile({"URL": f"http://db/?key={SECRET}"}, api_key=SECRET)
    # a URL's password, found in a plain value
    with pytest.raises(ProfileError, match="env.OTHER"):
        _profile({"DATABASE_URL": f"postgres://kimi:{SECRET}@db/x", "OTHER": f"pw {SECRET}"})


def test_env_values_without_a_secret_are_accepted() -> None:
    _profile({"DB_PASSWORD": SECRET, "PLAIN": "plain", "HF_TOKEN": HF, "OTHER_TOKEN": HF})
