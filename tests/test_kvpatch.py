"""The KV-cache config patch: minimal textual edit, checked by re-parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_ops.errors import ConfigPatchError
from kimi_ops.kvpatch import kv_settings, patch_text, plan_patch, remove_key, unified_diff

MODEL = Path(__file__).parent / "fixtures" / "model"


def _files() -> dict[str, str | None]:
    return {n: (MODEL / n).read_text() for n in ("config.json", "hf_quant_config.json")}


def test_patch_removes_exactly_the_two_keys_and_nothing_else() -> None:
    patches = plan_patch(_files())
    by_name = {p.name: p for p in patches}
    cfg = by_name["config.json"]
    hf = by_name["hf_quant_config.json"]
    assert cfg.removed == ("quantization_config.kv_cache_scheme",)
    assert hf.removed == ("quantization.kv_cache_quant_algo",)
    new_cfg, old_cfg = json.loads(cfg.new), json.loads(cfg.old)
    old_cfg["quantization_config"].pop("kv_cache_scheme")
    assert new_cfg == old_cfg
    assert "kv_cache_quant_algo" not in json.loads(hf.new)["quantization"]
    assert json.loads(hf.new)["quantization"]["quant_algo"] == "NVFP4"
    # Only the removed member's lines change.
    diff = cfg.diff("/models/k")
    removed = [ln for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert added == []
    assert len(removed) == 5 and '"kv_cache_scheme"' in removed[0]
    assert diff.startswith("--- a/models/k/config.json\n+++ b/models/k/config.json\n")


def test_patch_is_idempotent() -> None:
    once = {p.name: p.new for p in plan_patch(_files())}
    again = plan_patch(once)  # type: ignore[arg-type]
    assert all(not p.changed for p in again)
    assert kv_settings("config.json", once["config.json"]) is None


def test_string_form_and_last_member_and_only_member() -> None:
    text = '{"quantization_config": {"quant_method": "modelopt", "kv_cache_scheme": "FP8"}}'
    new, removed = remove_key(text, ("quantization_config", "kv_cache_scheme"))
    assert removed and json.loads(new) == {"quantization_config": {"quant_method": "modelopt"}}
    only = '{"quantization_config": {"kv_cache_scheme": "FP8"}}'
    new, _ = remove_key(only, ("quantization_config", "kv_cache_scheme"))
    assert json.loads(new) == {"quantization_config": {}}


def test_duplicate_keys_are_all_removed() -> None:
    text = '{"q": {"k": 1, "a": 2, "k": 3}}'
    new, removed = remove_key(text, ("q", "k"))
    assert removed and json.loads(new) == {"q": {"a": 2}}


def test_no_quantization_config_is_no_change() -> None:
    fp = patch_text("config.json", '{"architectures": ["X"]}\n')
    assert not fp.changed and fp.removed == ()


def test_malformed_or_non_object_json_or_missing_config_is_an_error() -> None:
    with pytest.raises(ConfigPatchError, match="not valid JSON"):
        plan_patch({"config.json": '{"a": ', "hf_quant_config.json": None})
    with pytest.raises(ConfigPatchError, match="not a JSON object"):
        plan_patch({"config.json": "[1, 2]", "hf_quant_config.json": None})
    with pytest.raises(ConfigPatchError, match="missing"):
        plan_patch({"config.json": None, "hf_quant_config.json": "{}"})


def test_missing_hf_quant_config_is_left_out() -> None:
    patches = plan_patch({"config.json": _files()["config.json"], "hf_quant_config.json": None})
    assert [p.name for p in patches] == ["config.json"]


def test_unified_diff_marks_missing_final_newline() -> None:
    diff = unified_diff("a\nb", "a\n", "f")
    assert "\\ No newline at end of file" in diff
    assert unified_diff("same", "same", "f") == ""
