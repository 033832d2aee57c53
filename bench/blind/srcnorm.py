"""Source keys: one normal form per public source, so a thread or file used by any blind set is
recognised whatever URL form a helper finds it under (stdlib only; copied beside the helpers)."""

from __future__ import annotations

import re
from urllib.parse import unquote


def keys(url: str) -> list[str]:
    """The keys of ``url``: ``gh:owner/repo#N`` for a GitHub issue or PR (the same number is the
    same thread), ``gh:owner/repo#discN`` for a discussion, ``ghfile:owner/repo/path`` (any ref)
    plus ``ghrepo:owner/repo`` for a committed file, ``hf:org/model#N`` for a Hugging Face
    discussion, else the URL without scheme, ``www.``, query, fragment and trailing slash."""
    raw = url.strip()
    if raw.startswith("github:"):
        m = re.match(r"github:([^/\s]+/[^#\s]+)#(\d+)", raw.lower())
        if m:
            return [f"gh:{m.group(1)}#{m.group(2)}"]
    u = unquote(raw).split("#", 1)[0].strip().lower()
    u = u.split("?", 1)[0].rstrip("/")
    u = re.sub(r"^https?://(www\.)?", "", u)
    m = re.match(r"github\.com/([^/]+/[^/]+)/(issues|pull|pulls|discussions)/(\d+)", u)
    if m:
        kind = "disc" if m.group(2) == "discussions" else ""
        return [f"gh:{m.group(1)}#{kind}{m.group(3)}"]
    m = re.match(r"github\.com/([^/]+/[^/]+)/(?:blob|raw|tree)/[^/]+/(.+)", u) or re.match(
        r"raw\.githubusercontent\.com/([^/]+/[^/]+)/[^/]+/(.+)", u
    )
    if m:
        return [f"ghfile:{m.group(1)}/{m.group(2)}", f"ghrepo:{m.group(1)}"]
    m = re.match(r"github\.com/([^/]+/[^/]+)/commit/", u)
    if m:
        return [u, f"ghrepo:{m.group(1)}"]
    m = re.match(r"huggingface\.co/(.+?)/discussions/(\d+)", u)
    if m:
        return [f"hf:{m.group(1)}#{m.group(2)}"]
    m = re.search(r"github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", u)  # a mirror's page
    if m:
        return [u, f"gh:{m.group(1)}#{m.group(2)}"]
    return [u]
