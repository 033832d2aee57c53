"""Red-team B (7): a secret_env name unset in fab's shell never silently drops the secret the
host's server got: deploy fails before anything changes, or says the server gets none."""

from __future__ import annotations

import pytest

from kimi_ops.errors import StepFailed
from kimi_ops.profile import load_profile, secret_env_values, unset_secret_env
from tasks import steps
from tasks.host import Host
from tasks.testing import ScriptedConnection


def test_an_unset_secret_env_name_is_reported_not_dropped() -> None:
    profile = load_profile({"secret_env": ["HF_TOKEN", "WANDB_API_KEY"]})
    assert unset_secret_env(profile, {"HF_TOKEN": "hf_x"}) == ["WANDB_API_KEY"]
    assert secret_env_values(profile, {"HF_TOKEN": "hf_x"}) == {"HF_TOKEN": "hf_x"}


def _env_check(env_file: str, environ: dict[str, str]) -> tuple[ScriptedConnection, object]:
    profile = load_profile({"run_dir": "/srv/kimi"})
    conn = ScriptedConnection().on(r"server\.env", stdout=env_file)
    host = Host(conn, profile)  # type: ignore[arg-type]
    return conn, steps.check_secret_env(host, profile, environ)


def test_an_unset_secret_env_name_the_host_has_fails_before_anything_changes() -> None:
    with pytest.raises(StepFailed) as exc:
        _env_check("HF_TOKEN\nVLLM_API_KEY\n", {})
    err = exc.value
    assert "HF_TOKEN" in err.reason and "not set" in err.reason
    assert "export HF_TOKEN" in err.hint and "secret_env" in err.hint


def test_an_unset_secret_env_name_the_host_lacks_too_is_said_not_silent() -> None:
    conn, note = _env_check("", {})
    assert note is not None and "HF_TOKEN" in str(note) and "not set" in str(note)
    assert all("cat " not in c for c in conn.commands)  # names only, never the values
    _, none = _env_check("HF_TOKEN\n", {"HF_TOKEN": "hf_abc"})
    assert none is None
