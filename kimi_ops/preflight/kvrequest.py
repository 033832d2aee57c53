"""The KV cache a deployment asks for: the checkpoint as shipped (backups count) and flags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import compat
from ..facts import CONFIG_BACKUP, HF_QUANT_BACKUP, HostFacts

if TYPE_CHECKING:
    from ..profile import Profile


def _original_configs(
    facts: HostFacts,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, bool]:
    """(config.json, hf_quant_config.json, patched_before) as the checkpoint shipped them.

    When patch-kv-config left backups, they hold the original files.
    """
    patched = bool(facts.backups)
    config = facts.config_json_orig if CONFIG_BACKUP in facts.backups else facts.config_json
    hf_quant = (
        facts.hf_quant_config_orig if HF_QUANT_BACKUP in facts.backups else facts.hf_quant_config
    )
    return config, hf_quant, patched


def _kv_request(
    profile: Profile, facts: HostFacts
) -> tuple[compat.KvCacheDtype, bool | None, bool]:
    """(the KV-cache dtype asked for, is it an MLA model, was the checkpoint patched before)."""
    cli_kv = compat.find_option(profile.extra_args, "--kv-cache-dtype")
    config, hf_quant, patched_before = _original_configs(facts)
    kv = compat.effective_kv_cache_dtype(config, hf_quant, cli_kv)
    return kv, compat.is_mla_model(config), patched_before
