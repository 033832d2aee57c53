"""vLLM version helpers: parse a version, test it against a range (``_ANY``: every version)."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


def as_version(value: Version | str | None) -> Version | None:
    """A packaging Version from a Version or string; None for None or an unparsable string."""
    if value is None or isinstance(value, Version):
        return value
    try:
        return Version(str(value).strip())
    except InvalidVersion:
        return None


def in_range(version: Version | str | None, spec: SpecifierSet) -> bool:
    """Whether ``version`` is in ``spec``; pre-/dev-releases count (False when unknown)."""
    v = as_version(version)
    return v is not None and spec.contains(v, prereleases=True)


_ANY = SpecifierSet()
