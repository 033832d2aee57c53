"""Import a blind set's excerpts from its helpers' folders into the corpus, printing no excerpt
text (the person scoring stays blind): checks each index row (label, file, source not used
before), drops near copies of corpus excerpts or of each other and a third excerpt of a source,
then (with ``--write``) copies the logs and writes ``index/blind-NAME.tsv``.

Usage: ``python bench/blind/import_set.py WORKDIR NAME [--write]`` (WORKDIR holds h1/, h2/...,
each with index.tsv and logs/; NAME e.g. ``zn``). Record the set in
``bench/eval_diagnosis.py``'s BLIND_SETS and score it before reading any miss."""

from __future__ import annotations

import csv
import re
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from srcnorm import keys  # noqa: E402
from used_sources import used_keys  # noqa: E402

from kimi_ops.diagnose import LABELS  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "corpus"
COLUMNS = ["file", "label", "group", "source_url", "vllm_version", "note"]
NEAR = 0.6  # share of an excerpt's lines found in one other excerpt: a near copy


def lines_of(text: str) -> set[str]:
    """The excerpt's lines that say something (25+ characters, whitespace folded)."""
    return {
        s for s in (re.sub(r"\s+", " ", ln).strip() for ln in text.splitlines()) if len(s) >= 25
    }


def near_copy(lines: set[str], index: dict[str, set[str]]) -> tuple[str, int] | None:
    """The corpus file that holds most of ``lines`` when it is a near copy (at least 2 of the
    shared lines rare in the corpus, or an excerpt of 1-2 lines held whole), else None."""
    hits: Counter[str] = Counter(f for s in lines for f in index.get(s, ()))
    if not hits:
        return None
    best, n = hits.most_common(1)[0]
    rare = sum(1 for s in lines if best in index.get(s, ()) and len(index[s]) <= 3)
    if n / len(lines) >= NEAR and (rare >= 2 or len(lines) <= 2):
        return best, n
    return None


def main() -> None:
    work, name, write = Path(sys.argv[1]), sys.argv[2], "--write" in sys.argv
    index: dict[str, set[str]] = defaultdict(set)
    for log in (CORPUS / "logs").glob("*.log"):
        for s in lines_of(log.read_text(errors="replace")):
            index[s].add(log.name)
    used = {k for k in used_keys() if not k.startswith("ghrepo:")}
    kept: list[tuple[dict[str, str], Path]] = []
    problems: list[str] = []
    drops: list[str] = []
    per_source: Counter[str] = Counter()
    new: dict[str, set[str]] = {}
    folders = sorted(work.glob("h*/index.tsv"), key=lambda p: int(p.parent.name[1:] or 0))
    for tsv in folders:
        listed: set[str] = set()
        with tsv.open(newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        for row in rows:
            fn = (row.get("file") or "").strip().removeprefix("logs/")
            row["file"] = fn
            if not fn:
                continue
            listed.add(fn)
            path, label = tsv.parent / "logs" / fn, (row.get("label") or "").strip()
            tag = f"{tsv.parent.name} row {len(listed)}"
            if label not in LABELS or not fn.startswith(label + "__"):
                problems.append(f"{tag}: label {label!r} or file name")
            elif not path.is_file() or not path.read_text(errors="replace").strip():
                problems.append(f"{tag}: file missing or empty")
            elif set(keys(row["group"])) & used:
                drops.append(f"{tag}: source used before")
            else:
                lines = lines_of(path.read_text(errors="replace"))
                copy = near_copy(lines, index) if lines else None
                twin = next(
                    (o for o, ol in new.items() if lines and len(lines & ol) / len(lines) >= NEAR),
                    None,
                )
                group = row["group"].strip()
                per_source[group] += 1
                if copy:
                    drops.append(f"{tag}: near copy of corpus {copy[0]} ({copy[1]}/{len(lines)})")
                elif twin:
                    drops.append(f"{tag}: near copy of another new excerpt")
                elif per_source[group] > 2:
                    drops.append(f"{tag}: a third excerpt of one source")
                else:
                    new[fn] = lines
                    kept.append((row, path))
        extra = {p.name for p in (tsv.parent / "logs").glob("*.log")} - listed
        problems += (
            [f"{tsv.parent.name}: {len(extra)} log file(s) not in its index"] if extra else []
        )
    print("problems:", *problems, sep="\n  ")
    print("dropped:", *drops, sep="\n  ")
    sources = {r["group"].strip() for r, _ in kept}
    print(f"kept {len(kept)} excerpts from {len(sources)} sources")
    print(dict(Counter(r["label"].strip() for r, _ in kept)))
    if write:
        out = CORPUS / "index" / f"blind-{name}.tsv"
        with out.open("w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(COLUMNS)
            for row, path in kept:
                dest = CORPUS / "logs" / row["file"]
                if dest.exists():
                    sys.exit(f"{dest} exists already")
                shutil.copyfile(path, dest)
                w.writerow([" ".join((row.get(c) or "").split()) for c in COLUMNS])
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
