"""Red-team B (1, 2): extra_args land on the server's command line (ps) and vLLM's parser takes
abbreviations: a credential-shaped value, and a flag that is or abbreviates a reserved one, are
refused (never printing the value)."""

from __future__ import annotations

import pytest

from kimi_ops.errors import ProfileError
from kimi_ops.extra_args import check_extra_args
from kimi_ops.profile import load_profile

URL = "x=https://u:RTURLPW777@127.0.0.1/x"
SK = "sk-RTSKTOKEN0123456789abcdef"


@pytest.mark.parametrize("arg", [URL, SK, "--api-token=" + SK])
def test_a_credential_shaped_extra_args_value_is_refused_without_printing_it(arg: str) -> None:
    with pytest.raises(ProfileError) as exc:
        load_profile({"extra_args": ["--lora-modules", arg]})
    text = f"{exc.value.message} {exc.value.hint}"
    assert "RTURLPW777" not in text and "RTSKTOKEN" not in text
    assert "extra_args[1]" in exc.value.key and "ps" in text and "secret_env" in text


@pytest.mark.parametrize(
    "args",
    [
        ["--api-ke", "X"],
        ["--api_ke=X"],
        ["--hf-tok", "X"],
        ["--por", "9999"],
        ["--por=9999"],
        ["--served-model", "other"],
        ["--tensor-par", "2"],
        ["--trust-remote"],
    ],
)
def test_an_abbreviated_reserved_flag_is_refused(args: list[str]) -> None:
    with pytest.raises(ProfileError) as exc:
        load_profile({"extra_args": args})
    assert exc.value.key == "extra_args[0]"
    assert "X" not in exc.value.message.replace("extra_args", "")


def test_an_abbreviated_max_model_len_conflicts_like_the_full_one() -> None:
    with pytest.raises(ProfileError, match="--max-model-len"):
        load_profile({"max_model_len": 4096, "extra_args": ["--max-model", "512"]})


@pytest.mark.parametrize(
    "args",
    [
        ["--max-model-len", "512"],
        ["--hf-overrides", "{}"],
        ["--reasoning-parser-plugin", "x.py"],
        ["--enable-auto-tool-choice"],
        ["--port-range-unknown-flag"],
        ["--"],
    ],
)
def test_other_flags_are_still_accepted(args: list[str]) -> None:
    assert load_profile({"extra_args": args}).extra_args == tuple(args)


def test_a_single_dash_abbreviation_and_a_config_file_are_refused() -> None:
    """Red team round 2: argparse abbreviates single-dash flags too (`-t 4` set
    tensor_parallel_size=4 past the profile's 8), and `--config FILE` reads flags (an api_key)
    from a file no check sees."""
    for args in (("-t", "4"), ("-tp=2",), ("--config", "vllm.yaml"), ("--config=vllm.yaml",)):
        with pytest.raises(ProfileError):
            check_extra_args(args)
    # guards: single-dash flags that abbreviate nothing refused stay allowed
    assert check_extra_args(("-O3", "-q", "awq")) == ("-O3", "-q", "awq")
