"""The profile: defaults for Kimi-K2.5-NVFP4, validation that names the key."""

from __future__ import annotations

import pytest

from kimi_ops.defaults import DEFAULTS
from kimi_ops.errors import ProfileError
from kimi_ops.profile import load_profile


def test_defaults_are_the_kimi_deployment() -> None:
    p = load_profile()
    assert p.model.endswith("Kimi-K2.5-NVFP4")
    assert p.tensor_parallel_size == 8
    assert p.env == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
    assert p.tool_call_parser == "kimi_k2" and p.reasoning_parser == "kimi_k2"
    assert p.trust_remote_code is True and p.engine == "vllm"
    assert p.standin.compute_capability == "12.0" and p.standin.vllm_version == "0.17.1"
    assert p.standin.gpu_count == 8
    assert p.device == "auto"
    assert set(p.to_dict()) == set(DEFAULTS)


@pytest.mark.parametrize("device", ["auto", "cuda", "cpu"])
def test_device_values(device: str) -> None:
    assert load_profile({"device": device}).device == device


def test_overrides_win_and_none_is_ignored() -> None:
    p = load_profile({"port": 8001, "env": {"A": "1"}}, {"port": 9000, "model": None})
    assert p.port == 9000 and p.model == DEFAULTS["model"]
    assert p.env == {"A": "1"}  # env is replaced as a whole, not merged with the defaults


def test_nested_standin_keys_merge() -> None:
    p = load_profile({"engine": "standin", "standin": {"vllm_version": "0.18.0"}})
    assert p.is_standin and p.standin.vllm_version == "0.18.0" and p.standin.gpu_count == 8


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"port": "http"}, "port"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"tensor_parallel_size": 2.5}, "tensor_parallel_size"),
        ({"tensor_parallel_size": True}, "tensor_parallel_size"),
        ({"bogus": 1}, "bogus"),
        ({"model": 42}, "model"),
        ({"model": ""}, "model"),
        ({"trust_remote_code": "yes"}, "trust_remote_code"),
        ({"extra_args": "--max-model-len 4096"}, "extra_args"),
        ({"extra_args": [["x"]]}, "extra_args[0]"),
        ({"env": {"BAD NAME": "1"}}, "env.BAD NAME"),
        ({"env": ["A=1"]}, "env"),
        ({"engine": "sglang"}, "engine"),
        ({"device": "gpu"}, "device"),
        ({"device": "CPU"}, "device"),
        ({"device": None}, "device"),
        ({"patch_kv_config": "yes"}, "patch_kv_config"),
        ({"startup_timeout": -1}, "startup_timeout"),
        ({"host_key_policy": "accept-all"}, "host_key_policy"),
        ({"standin": {"gpu_count": -1}}, "standin.gpu_count"),
        ({"standin": {"vllm_version": "latest"}}, "standin.vllm_version"),
        ({"standin": {"colour": "red"}}, "standin.colour"),
        ({"standin": {"device": "auto"}}, "standin.device"),
        ({"standin": {"compute_capability": "sm120"}}, "standin.compute_capability"),
        ({"host_overrides": {"gpu2": {"nope": 1}}}, "host_overrides.gpu2.nope"),
    ],
)
def test_bad_values_name_the_key(config: dict, key: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(config)
    assert info.value.key == key
    assert f"kimi.{key}" in str(info.value)


def test_host_overrides_apply_per_host() -> None:
    p = load_profile({"host_overrides": {"gpu4": {"tensor_parallel_size": 4}}})
    assert p.for_host("gpu4").tensor_parallel_size == 4
    assert p.for_host("gpu8").tensor_parallel_size == 8


@pytest.mark.parametrize(
    ("args", "index", "key"),
    [
        (["--port", "9000"], 0, "port"),
        (["--max-model-len", "4096", "--port=9000"], 2, "port"),
        (["--host", "127.0.0.1"], 0, "host"),
        (["--model=/other"], 0, "model"),
        (["--served_model_name", "x"], 0, "served_model_name"),
        (["--api-key=sekrit"], 0, "api_key (or api_key_env)"),
        (["-tp", "4"], 0, "tensor_parallel_size"),
        (["--tensor-parallel-size=4"], 0, "tensor_parallel_size"),
        (["--trust-remote-code"], 0, "trust_remote_code"),
        (["--tool-call-parser", "hermes"], 0, "tool_call_parser"),
    ],
)
def test_extra_args_may_not_set_what_the_profile_owns(
    args: list[str], index: int, key: str
) -> None:
    with pytest.raises(ProfileError) as exc:
        load_profile({"extra_args": args})
    assert exc.value.key == f"extra_args[{index}]"
    assert f"use kimi.{key} instead" in exc.value.message
    assert "sekrit" not in exc.value.message + exc.value.hint  # a value may be a secret


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (["--hf-token", "hf_SEKRIT1234"], 0),
        (["--max-model-len", "4096", "--hf-token=hf_SEKRIT1234"], 2),
        (["--hf_token", "hf_SEKRIT1234"], 0),
    ],
)
def test_extra_args_may_not_put_the_hf_token_on_the_command_line(
    args: list[str], index: int
) -> None:
    # red-team F5: --hf-token went onto the exec line (ps), into launch.sh and every diff
    with pytest.raises(ProfileError) as exc:
        load_profile({"extra_args": args})
    assert exc.value.key == f"extra_args[{index}]"
    assert "kimi.env.HF_TOKEN" in exc.value.message
    assert "kimi.env.HF_TOKEN" in exc.value.hint and "0600 env file" in exc.value.hint
    assert "hf_SEKRIT1234" not in exc.value.message + exc.value.hint


def test_extra_args_values_that_only_look_like_owned_flags_are_kept() -> None:
    args = ["--max-model-len", "4096", "--chat-template", "uses --port in text", "--portal"]
    assert load_profile({"extra_args": args}).extra_args == tuple(args)


def test_run_dir_is_normalised_so_every_task_names_the_same_directory() -> None:
    """r2 F9: `stop --run-dir /srv/s1//run` must act on the deployment in /srv/s1/run."""
    assert load_profile({"run_dir": "/srv/s1//run"}).run_dir == "/srv/s1/run"
    assert load_profile({"run_dir": "/srv/s1/./run/"}).run_dir == "/srv/s1/run"
    assert load_profile({"run_dir": "~/kimi-ops"}).run_dir == "~/kimi-ops"
    p = load_profile({"run_dir": "~/kimi-ops"}).with_run_dir("/home/u//kimi-ops/.")
    assert p.run_dir == "/home/u/kimi-ops"


@pytest.mark.parametrize("run_dir", ["relrun", "./relrun", "run/dir", "~user/run", "relrun/"])
def test_a_run_dir_that_is_not_absolute_is_refused_up_front(run_dir: str) -> None:
    """A relative run_dir crashed with a traceback in script.py after the lock had created
    ./relrun; the profile refuses it before anything runs."""
    with pytest.raises(ProfileError) as info:
        load_profile({"run_dir": run_dir})
    assert info.value.key == "run_dir" and "absolute path" in info.value.problem
    with pytest.raises(ProfileError):
        load_profile({"host_overrides": {"h1": {"run_dir": run_dir}}}).for_host("h1")


def test_a_home_relative_run_dir_is_kept_for_the_host_to_expand() -> None:
    assert load_profile({"run_dir": "~"}).run_dir == "~"
    assert load_profile({"run_dir": "~/x/../run"}).run_dir == "~/run"
