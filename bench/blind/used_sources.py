"""Every source of every corpus index, as :func:`srcnorm.keys` (a repository's committed-file
count as ``ghrepo:owner/repo N``): what ``prepare.py`` writes as ``used_keys.txt`` and
``import_set.py`` checks a new set against."""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from srcnorm import keys  # noqa: E402

INDEX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "corpus" / "index"


def used_keys() -> set[str]:
    out: set[str] = set()
    files: set[tuple[str, str]] = set()
    for tsv in INDEX.glob("*.tsv"):
        with tsv.open(newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                for col in ("group", "source_url"):
                    value = (row.get(col) or "").strip()
                    if not value or value.isdigit():
                        continue
                    ks = keys(value)
                    out.update(k for k in ks if not k.startswith("ghrepo:"))
                    path = next((k for k in ks if k.startswith("ghfile:")), None)
                    repo = next((k for k in ks if k.startswith("ghrepo:")), None)
                    if col == "group" and path and repo:
                        files.add((repo, path))
    out.update(f"{repo} {n}" for repo, n in Counter(r for r, _ in files).items())
    return out
