"""Prepare a blind set's work folder: ``used_keys.txt`` (every source used so far), the
helpers' ``take.py`` and ``srcnorm.py``, and the labelling guide with the set's file names and
the take.py rule in place of the old used-sources list.

Usage: ``python bench/blind/prepare.py WORKDIR SET`` (e.g. ``/work/wt/blind-zp zp``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from used_sources import used_keys  # noqa: E402

GUIDE = HERE.parents[1] / "tests" / "fixtures" / "corpus" / "LABELLING.md"
OLD_RULE_START = "- A source already used is forbidden"
OLD_RULE_END = "- At most 2 excerpts per source"


def guide(work: Path, name: str) -> str:
    """LABELLING.md for this set: its file-name prefix, and the source rule through take.py."""
    text = GUIDE.read_text()
    start, end = text.index(OLD_RULE_START), text.index(OLD_RULE_END)
    rule = (
        "- A source already used is forbidden. Before you write an excerpt, run\n"
        f"  `{work}/take.py take <URL>` from your own folder (it prints OK, OK-AGAIN for a\n"
        "  source you took yourself, or USED): take only on OK / OK-AGAIN. `take.py check <URL>`\n"
        "  only checks. A different comment of a used issue is still the same source; a\n"
        "  committed file from a repository that already gave 2 committed files is used.\n"
    )
    text = text[:start] + rule + text[end:]
    return text.replace("__l<N><NN>_", f"__{name}<N><NN>_")


def main() -> None:
    work, name = Path(sys.argv[1]), sys.argv[2]
    work.mkdir(parents=True, exist_ok=True)
    found = sorted(used_keys())
    (work / "used_keys.txt").write_text("\n".join(found) + "\n")
    for tool in ("take.py", "srcnorm.py"):
        shutil.copyfile(HERE / tool, work / tool)
    (work / "take.py").chmod(0o755)
    (work / "LABELLING.md").write_text(guide(work, name))
    print(f"{work}: {len(found)} used keys, take.py, srcnorm.py, LABELLING.md")


if __name__ == "__main__":
    main()
