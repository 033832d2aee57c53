"""Nested profile sections (``kimi.standin``, ``kimi.router``): one shape check for all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ProfileError


def merged_section(name: str, value: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` (a mapping, or None for none) over ``defaults``; a non-mapping or an unknown
    key raises ProfileError naming ``name.key``."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ProfileError(name, f"must be a mapping, got {value!r}")
    unknown = sorted(set(value) - set(defaults))
    if unknown:
        raise ProfileError(
            f"{name}.{unknown[0]}",
            "is not a known key",
            hint="known keys: " + ", ".join(sorted(defaults)),
        )
    return {**defaults, **value}
