#!/usr/bin/env python3
"""A helper's check of a source before it takes an excerpt from it (copied into the blind set's
work folder beside ``srcnorm.py`` and ``used_keys.txt``; run from the helper's own folder).

Usage: ``take.py check URL`` -> FREE / MINE / USED (why); ``take.py take URL`` -> OK, OK-AGAIN
(a source the helper took already: the 2-per-source cap is the helper's to keep) or USED. A
committed file counts as used when its repository already gave 2 committed files."""

from __future__ import annotations

import fcntl
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from srcnorm import keys  # noqa: E402


def load_used(path: str) -> dict[str, int]:
    used: dict[str, int] = {}
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith("ghrepo:"):
                key, n = line.rsplit(" ", 1)
                used[key] = int(n)
            elif line:
                used[line] = -1
    return used


def status(url: str, me: str, used: dict[str, int], taken_path: str) -> str:
    ks = keys(url)
    mine = {k for k in ks if not k.startswith("ghrepo:")}
    for k in ks:
        if k.startswith("ghrepo:"):
            if used.get(k, 0) >= 2:
                return f"USED (repository already gave {used[k]} committed files)"
        elif k in used:
            return "USED (earlier blind sets)"
    if os.path.exists(taken_path):
        with open(taken_path) as fh:
            for line in fh:
                who, _, other = line.rstrip("\n").partition("\t")
                if mine & {k for k in keys(other) if not k.startswith("ghrepo:")}:
                    return "MINE" if who == me else "USED (taken by another helper this round)"
    return "FREE"


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("check", "take"):
        print(__doc__)
        sys.exit(2)
    cmd, url = sys.argv[1], sys.argv[2]
    me = os.environ.get("HELPER") or os.path.basename(os.getcwd())
    taken = os.path.join(HERE, "taken.txt")
    with open(os.path.join(HERE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        st = status(url, me, load_used(os.path.join(HERE, "used_keys.txt")), taken)
        if cmd == "check":
            print(st)
            sys.exit(0 if st in ("FREE", "MINE") else 1)
        if st == "FREE":
            with open(taken, "a") as fh:
                fh.write(f"{me}\t{url}\n")
            print("OK")
        elif st == "MINE":
            print("OK-AGAIN")
        else:
            print(st)
            sys.exit(1)


if __name__ == "__main__":
    main()
