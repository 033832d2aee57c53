"""Issue 12 item 9: secret-named env values stay out of the launch script and every report."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kimi_ops.errors import ProfileError
from kimi_ops.preflight import build_plan, preflight_report
from kimi_ops.profile import load_profile, secret_env_values
from kimi_ops.redact import Masker, config_secrets, is_secret_name
from kimi_ops.script import render_launch_script

PATTERNS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "AUTH")

names = st.builds(
    lambda pre, pat, post: f"{pre}{pat}{post}",
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
    st.sampled_from(PATTERNS).flatmap(lambda p: st.sampled_from([p, p.lower(), p.title()])),
    st.from_regex(r"[A-Za-z0-9_]{0,6}", fullmatch=True),
)
values = st.text(alphabet="abcdefXYZ0123456789-_/+=.:@ '\"$`\\", min_size=8, max_size=40).map(
    lambda t: "zq!" + t
)


@given(name=names, value=values)
def test_a_secret_named_env_value_is_only_in_the_env_file(name: str, value: str) -> None:
    profile = load_profile({"env": {name: value, "NCCL_DEBUG": "WARN"}, "run_dir": "/srv/k"})
    assert is_secret_name(name, profile.secret_patterns)
    script = render_launch_script(profile)
    assert value not in script and f"export {name}=" not in script
    assert "export NCCL_DEBUG=WARN" in script
    assert secret_env_values(profile, {})[name] == value
    assert value not in repr(profile) and value not in json.dumps(profile.to_public_dict())
    assert Masker(config_secrets(profile.to_dict(), {}))(f"x {value} y") == "x *** y"


def test_the_preflight_report_shows_secret_env_as_stars() -> None:
    profile = load_profile({"env": {"HF_TOKEN": "hf_abcdef123", "NCCL_DEBUG": "INFO"}})
    from kimi_ops.facts import HostFacts

    plan = build_plan(profile, HostFacts())
    report = preflight_report((), plan, profile.secret_patterns)
    assert report["plan"]["env"]["HF_TOKEN"] == "***"
    assert "hf_abcdef123" not in json.dumps(report)


def test_secret_patterns_are_configurable() -> None:
    profile = load_profile({"env": {"UPSTREAM_BEARER": "b-123456"}, "run_dir": "/srv/k"})
    assert "b-123456" in render_launch_script(profile)  # not a default pattern
    custom = load_profile(
        {"env": {"UPSTREAM_BEARER": "b-123456"}, "run_dir": "/srv/k", "secret_patterns": ["BEARER"]}
    )
    assert "b-123456" not in render_launch_script(custom)


def test_custom_secret_patterns_add_to_the_defaults() -> None:
    # red-team F6: secret_patterns: ["MYCORP"] replaced the list, and HF_TOKEN went into launch.sh
    env = {"HF_TOKEN": "hf_abcdef123", "MYCORP_BEARER": "b-123456"}
    config = {"env": env, "run_dir": "/srv/k", "secret_patterns": ["MYCORP"]}
    profile = load_profile(config)
    script = render_launch_script(profile)
    assert "hf_abcdef123" not in script and "b-123456" not in script
    assert secret_env_values(profile, {}) == env
    assert profile.is_secret("HF_TOKEN") and profile.is_secret("MYCORP_BEARER")
    assert config_secrets(config, {}) == {"hf_abcdef123", "b-123456"}


def test_masker_hides_api_key_flags_and_nested_wrong_types() -> None:
    config = {
        "extra_args": ["--api-key", "sk-live-1", "--x", "--api-key=sk-live-2"],
        "env": {"MY_TOKEN": ["tok-nested-1"]},
    }
    mask = Masker(config_secrets(config, {}))
    assert mask("a sk-live-1 b sk-live-2 c ['tok-nested-1']") == "a *** b *** c ['***']"


def test_masker_hides_hf_token_flags() -> None:
    # red-team F5: --hf-token values were not known as secrets (shown in the refusal's context)
    config = {
        "extra_args": ["--hf-token", "hf_tok-1", "--hf-token=hf_tok-2", "--hf_token=hf_tok-3"]
    }
    mask = Masker(config_secrets(config, {}))
    assert mask("hf_tok-1 hf_tok-2 hf_tok-3") == "*** *** ***"


ESCAPED = ['pw"REDTEAMQUOTE\\77', "sk-REDTEAMünïcødé€777", "hf_RED'TEAM$(id)\"Q\\x`b` 99"]


@pytest.mark.parametrize("secret", ESCAPED)
def test_masker_hides_json_and_repr_escaped_secrets(secret: str) -> None:
    # red-team F4: json.dumps / repr escape quotes, backslashes and non-ASCII, and the masker
    # looked only for the value itself (diagnose --json, vLLM's "non-default args: {...}")
    mask = Masker([secret])
    line = f"auth failed for {secret} end"
    shown = [
        mask(json.dumps({"evidence": [line]})),
        mask(json.dumps({"evidence": [line]}, ensure_ascii=False)),
        mask(repr({"hf_token": secret})),
        mask(ascii({"hf_token": secret})),
        mask(json.dumps(f"non-default args: { ({'hf_token': secret}) }")),
    ]
    assert json.loads(shown[0]) == json.loads(shown[1]) == {"evidence": ["auth failed for *** end"]}
    assert shown[2] == shown[3] == "{'hf_token': '***'}"
    assert json.loads(shown[4]) == "non-default args: {'hf_token': '***'}"


@given(secret=st.text(min_size=4, max_size=30))
def test_masker_hides_any_secret_in_json_and_repr(secret: str) -> None:
    mask = Masker([secret])
    for text in (json.dumps([secret]), json.dumps([secret], ensure_ascii=False), repr([secret])):
        assert mask(text) in ('["***"]', "['***']"), (secret, text)


def test_with_timeout_round_trips_any_one_line_command() -> None:
    from kimi_ops.shell import with_timeout, without_timeout

    for command in ["true", "cat '/a b/c' | head -c 5; echo \"$x\"", "printf '%s' \"it's\""]:
        wrapped = with_timeout(command, 7)
        assert wrapped.startswith("timeout -k 5 7 bash -c ")
        assert without_timeout(wrapped) == command


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("DATABASE_URL", "postgres://app:s3cr3t-pw@db.internal:5432/app", True),
        ("HTTPS_PROXY", "http://alice:Pr0xyPw@proxy.corp:3128", True),
        ("HF_HUB_MIRROR", "https://user:tok123456@mirror.example/hf", True),
        ("UPSTREAM", "hf_" + "A1b2C3d4E5f6G7h8I9j0K1", True),
        ("OPENAI_BASE", "sk-proj-abcdefghijklmnopqrstuv", True),
        ("GH", "ghp_" + "a" * 36, True),
        ("AWS_ID", "AKIAIOSFODNN7EXAMPLE", True),
        # a URL without a password, a port, plain settings: not secrets
        ("HF_ENDPOINT", "https://hf-mirror.example/path", False),
        ("NO_PROXY", "localhost,127.0.0.1", False),
        ("VLLM_HOST_IP", "10.1.230.174", False),
        ("NCCL_SOCKET_IFNAME", "eth0", False),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", False),
    ],
)
def test_a_value_that_carries_a_credential_is_secret_whatever_its_name(
    name: str, value: str, secret: bool
) -> None:
    """Red team 2026-12-05: DATABASE_URL=postgres://user:pw@... went into the launch script and
    every report, its name matching no pattern."""
    profile = load_profile({"env": {name: value, "NCCL_DEBUG": "WARN"}, "run_dir": "/srv/k"})
    script = render_launch_script(profile)
    shown = json.dumps(profile.to_public_dict()) + repr(profile)
    masked = Masker(config_secrets(profile.to_dict(), {}))(f"x {value} y")
    if secret:
        assert value not in script and f"export {name}=" not in script
        assert secret_env_values(profile, {})[name] == value
        assert value not in shown and masked == "x *** y"
    else:
        assert f"export {name}=" in script and value in shown and masked == f"x {value} y"


def test_unknown_secrets_in_an_old_script_are_hidden_by_name_flag_and_shape() -> None:
    from kimi_ops.redact import mask_unknown_secrets

    old = (
        "export HF_TOKEN='hf_oldtokenvalue1234567890abcd'\n"
        "export NCCL_DEBUG=WARN\n"
        "export DATABASE_URL='postgres://u:pw1234@db/x'\n"
        "export MY_PASS=$'line1\\nline2'\n"
        "exec python3 -m vllm.entrypoints.openai.api_server --api-key sk-old123 --port 8000\n"
    )
    got = mask_unknown_secrets(old)
    for gone in ("hf_oldtoken", "pw1234", "line1", "sk-old123"):
        assert gone not in got, got
    assert "export NCCL_DEBUG=WARN" in got and "--port 8000" in got
    assert "export HF_TOKEN=***" in got and "--api-key ***" in got
    assert mask_unknown_secrets("A_BEARER=zz9", ["BEARER"]) == "A_BEARER=***"


def test_masker_hides_a_secret_in_a_bytes_repr_quoted_again() -> None:
    # red team round 3: http.client refused an API key in a header ("Invalid header value
    # b'Bearer ...'"), and the probe's report quoted that message in a repr: the key showed
    secret = "sek'rit\"k\u00e9y12345"
    inner = f"ValueError: Invalid header value {('Bearer ' + secret).encode()!r}"
    mask = Masker([secret])
    for text in (inner, repr(inner), json.dumps(repr(inner))):
        shown = mask(text)
        assert "12345" not in shown and "rit" not in shown, shown


@pytest.mark.parametrize("key", ["sekrit-key-12345\n", "sek\trit-12345", "abc\x7fdef"])
def test_an_api_key_with_a_control_character_is_refused_unshown(key: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile({"api_key": key})
    assert "12345" not in str(err.value) and "control character" in str(err.value)
    profile = load_profile({"api_key_env": "MY_KEY"})
    with pytest.raises(ProfileError) as from_env:
        secret_env_values(profile, {"MY_KEY": key})
    assert "12345" not in str(from_env.value) and from_env.value.key == "api_key_env"


def test_an_extra_argument_holding_a_known_secret_value_is_refused_unshown() -> None:
    # red team round 3: the diff showed "--chat-template-content-format ***" and launch.sh
    # (and ps) held the secret in clear
    for config in (
        {"env": {"MY_SECRET": "tokvalue1234"}, "extra_args": ["--served-x", "tokvalue1234"]},
        {"api_key": "k-tokvalue1234", "extra_args": ["--x=k-tokvalue1234"]},
    ):
        with pytest.raises(ProfileError) as err:
            load_profile(config)
        assert "tokvalue1234" not in str(err.value) and "extra_args[" in err.value.key
    # guard: a public env value may be repeated in an argument
    ok = load_profile({"env": {"MODEL_TAG": "tokvalue1234"}, "extra_args": ["tokvalue1234"]})
    assert ok.extra_args == ("tokvalue1234",)
