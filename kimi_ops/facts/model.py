"""Model-directory facts: the file listing, the shard index and kimi-ops's config backups."""

from __future__ import annotations

import json

from ..defaults import BACKUP_SUFFIX
from .paths import _sh_path

CONFIG_BACKUP = "config.json" + BACKUP_SUFFIX
HF_QUANT_BACKUP = "hf_quant_config.json" + BACKUP_SUFFIX


def model_listing_command(model_dir: str) -> str:
    """The command whose output :func:`parse_model_listing` reads (follows symlinks: HF caches)."""
    return f"find -L {_sh_path(model_dir)} -maxdepth 1 -type f -printf '%s\\t%f\\n'"


def parse_model_listing(text: str) -> dict[str, int]:
    """File name -> size in bytes from ``find DIR -maxdepth 1 -type f -printf '%s\\t%f\\n'``."""
    files: dict[str, int] = {}
    for line in text.splitlines():
        size, sep, name = line.partition("\t")
        if sep and size.strip().isdigit() and name:
            files[name] = int(size)
    return files


def shards_from_index(index_json_text: str) -> set[str]:
    """The weight files named by ``model.safetensors.index.json`` (its weight_map values).

    Raises ValueError when the text is not an index (invalid JSON or no weight_map mapping).
    """
    data = json.loads(index_json_text)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError("no weight_map object")
    return {str(v) for v in weight_map.values()}
