"""Red-team B (1): a value shaped like a credential, or given to a secret name, is masked in
everything fab prints, wherever it came from and whether or not fab's shell knows it."""

from __future__ import annotations

import io

import pytest

from kimi_ops.redact import Masker, is_secret_value, mask_shapes, mask_unknown_secrets
from tasks import masking

URL = "x=https://u:RTURLPW777@127.0.0.1/x"
SK = "sk-RTSKTOKEN0123456789abcdef"

SHAPES = [
    "user:RTPROXYPW9@proxy.example:3128",  # a proxy without a scheme
    "https://u:pa/ss/RT77@host.example/x",  # a URL password with a slash
    "glpat-ABCDEFGHIJ0123456789",  # GitLab
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",  # Google
    "npm_abcdefghijklmnopqrstuvwxyz0123456789",  # npm
]


@pytest.mark.parametrize("value", SHAPES)
def test_these_credential_shapes_are_recognised_and_masked(value: str) -> None:
    assert is_secret_value(value)
    shown = mask_shapes(f"HTTPS_PROXY is {value} now")
    secret_part = value.split("@")[0].split(":")[-1] if "@" in value else value
    assert secret_part not in shown and "***" in shown, shown


@pytest.mark.parametrize(
    "text",
    [
        "max_num_batched_tokens=8192 block_size=16",
        "INFO 12-06 00:03:57 [api_server.py:1234] Started server process",
        "git@github.com:org/repo.git",
        "http://127.0.0.1:8000/v1/models",
        # a secret name without a secret value stays readable
        "hint: export HF_TOKEN=... before running fab",
        '{"api_key": null, "env": {"HF_TOKEN": "***"}}',
        "Profile({'api_key': None})",
        "secret_env HF_TOKEN is not set in this shell",
    ],
)
def test_ordinary_text_and_secret_names_without_values_are_left_alone(text: str) -> None:
    assert mask_shapes(text) == text


def test_everything_fab_prints_masks_credential_shapes_without_knowing_them() -> None:
    out = io.StringIO()
    stream = masking.MaskingStream(out, Masker())  # knows no value at all
    stream.write(f"+  --lora-modules {URL} --api-token-x {SK}\n")
    stream.write('{"extra_args": ["' + SK + '"]}\n')
    shown = out.getvalue()
    assert "RTURLPW777" not in shown and "RTSKTOKEN" not in shown, shown


def test_a_known_secret_name_is_masked_in_a_log_whatever_fab_s_environment() -> None:
    line = "HF_TOKEN=plantedvalue123 VLLM_API_KEY: 'planted-key-456'\n"
    args = "non-default args: {'api_key': ['planted-key-789'], 'hf_token': 'plantedhf0'}"
    shown = mask_shapes(line + args)
    for value in ("plantedvalue123", "planted-key-456", "planted-key-789", "plantedhf0"):
        assert value not in shown, shown
    out = io.StringIO()
    masking.MaskingStream(out, Masker()).write(line)
    assert "plantedvalue123" not in out.getvalue()


def test_a_followed_log_shows_a_credential_split_across_two_polls_masked_whole() -> None:
    out = io.StringIO()
    shown = masking.MaskingStream(out, Masker())  # fab's stdout: knows no value
    stream = Masker().stream()  # logs --follow: pieces as the polls read them
    for piece in ("INFO key sk-RTSK0123", "456789abcdefghij and https://u:RT", "PW99@h/x\nnext"):
        shown.write(stream.feed(piece))
    shown.write(stream.flush())
    text = out.getvalue()
    assert "RTSK" not in text and "RTPW99" not in text and "PW99" not in text, text
    assert text.endswith("\nnext"), text


def test_a_flag_whose_name_ends_in_tokens_is_no_secret_assignment() -> None:
    """Red team round 2: the old launch script's `--max-num-batched-tokens=8192` was shown as
    `=***` (its tail read as the shell assignment `tokens=8192`), so an unchanged line looked
    changed in the diff. A flag's `=value` is no shell assignment."""
    line = "exec vllm serve /m --max-num-batched-tokens=8192 --max-model-len=4096"
    assert mask_unknown_secrets(line) == line
    # guard: a shell assignment to a secret name is still masked
    assert mask_unknown_secrets("export HF_TOKEN=abcdef123") == "export HF_TOKEN=***"


def test_a_name_with_a_colon_and_an_at_sign_is_no_proxy_credential() -> None:
    """Red team round 2: served_model_name `team:kimi@prod` read as `user:pw@host` and showed as
    `***prod` in diffs and reports; a scheme-less credential needs a host with a port or a
    domain after its `@`."""
    assert mask_shapes("PID 1, team:kimi@prod on port 8000") == "PID 1, team:kimi@prod on port 8000"
    # guards: a proxy's user:pw@host:port and user:pw@host.domain are still masked
    assert "pw" not in mask_shapes("HTTPS_PROXY=user:pw@proxy:3128")
    assert "pw" not in mask_shapes("proxy user:pw@proxy.corp.example")
