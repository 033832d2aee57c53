"""The 0600 env file keeps any secret value intact, one with a newline too (red-team F10)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_ops.shell import file_quote
from tasks.steps import env_file_text

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg'kq\\hkiG9w0\n-----END PRIVATE KEY-----\n"


def _sourced(tmp_path: Path, values: dict[str, str]) -> dict[str, str]:
    """Each value as bash sees it after `set -a; . server.env` under `set -euo pipefail`
    (what the launch script does)."""
    env_file = tmp_path / "server.env"
    env_file.write_text(env_file_text(values))
    shown = "".join(f'printf "%s\\0" "${name}"; ' for name in sorted(values))
    script = f"set -euo pipefail; set -a; . {env_file}; set +a; {shown}"
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env={})
    return dict(zip(sorted(values), out.stdout.decode().split("\0")[:-1], strict=True))


def test_a_secret_with_newlines_survives_the_env_file(tmp_path: Path) -> None:
    # F10: the value was written as pw-REDTEAM"$kimi_ops_nl"..., an unbound variable under set -u
    values = {"MY_PASSWORD": "pw-REDTEAM\nNEWLINE-SECOND-LINE", "TLS_PRIVATE_KEY": PEM}
    text = env_file_text(values)
    assert len(text.splitlines()) == 2 and "kimi_ops_nl" not in text
    assert _sourced(tmp_path, values) == values


@pytest.mark.parametrize("value", ["plain", "it's", 'q"\\$x`id`', "ünï€", "tab\there", "\x01\x7f"])
def test_file_quote_round_trips_through_bash(value: str, tmp_path: Path) -> None:
    assert "\n" not in file_quote(value)
    assert _sourced(tmp_path, {"V": value}) == {"V": value}


@settings(max_examples=40, deadline=None)
@given(value=st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"])))
def test_any_value_round_trips_through_bash(
    value: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("env")
    assert _sourced(tmp, {"V": value}) == {"V": value}


def test_the_probe_reads_every_value_back_from_the_env_file(tmp_path: Path) -> None:
    # the probe reads VLLM_API_KEY from the same file: the $'...' lines must not break it
    from tasks.remote.kimi_probe import read_env_file

    values = {"VLLM_API_KEY": "sk-a'b\\c\nd", "TLS_PRIVATE_KEY": PEM, "HF_TOKEN": "hf_x y'z"}
    env_file = tmp_path / "server.env"
    env_file.write_text(env_file_text(values))
    assert read_env_file(str(env_file)) == values
