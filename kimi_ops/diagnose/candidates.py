"""Which lines of a block are worth analysing: the trigger-word scan (C-speed, no line loop)
and the patterns that find hard-wrapped continuations (see scanner.py's note on its shape)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kimi_ops.diagnose.words import (
    _FIND_WORDS,
    _FREQ_HEALTHY,
    _FREQ_HEALTHY_JSON,
    _MARKED_FIND_WORDS,
    _TRIGGER_WORDS,
)


def _trie_regex(words: Iterable[str]) -> str:
    """A regex alternation of literals, factored as a trie (fast in ``re``)."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        if list(node) == [""]:
            return ""
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:
            return "(?:" + body + ")?"
        return body

    return build(trie)


def _dedupe_words(words: Iterable[str]) -> list[str]:
    """Drop words that contain a shorter word (that one finds the same lines)."""
    keep: list[str] = []
    for w in sorted(set(words), key=len):
        if not any(k in w for k in keep):
            keep.append(w)
    return keep


_ANCHORS = frozenset(w[0] for w in _TRIGGER_WORDS)
#: Maps every first character of a trigger word to ``\x01`` (all other bytes unchanged).
_ANCHOR_TABLE = bytes(1 if chr(b) in _ANCHORS else b for b in range(256))
#: The trigger words, translated the same way: one trie with the literal prefix ``\x01`` (fast).
_TRIGGER = re.compile(
    _trie_regex(
        w.encode("ascii").translate(_ANCHOR_TABLE).decode("latin-1")
        for w in _dedupe_words(_TRIGGER_WORDS)
    ).encode("latin-1")
)
_REC_BASIC = (
    r"\(|[ \t]{2}|\[|\t|INFO|WARN|ERROR|DEBUG|CRITICAL|Traceback|File |\d{4}-\d\d|"
    r"\d\d-\d\d[ ]\d\d:|\d\d:\d\d:\d\d|\n|$"
)
#: A newline followed by a line that does not look like the start of a log record
#: (also behind a docker-compose prefix or markdown quote marks): a wrap candidate.
_CONT = re.compile(
    r"\n(?!" + _REC_BASIC + r"|(?:(?:\[[\w.\-]+\]|[\w.\-]+)[ ]+\|[ ]?)?(?:[ \t]*>+[ ]?)?"
    r"(?:" + _REC_BASIC + "))"
)
#: The needles searched in the marked (ASCII) view, translated as it is.
_MARKED_FIND = tuple(w.encode("ascii").translate(_ANCHOR_TABLE) for w in _MARKED_FIND_WORDS)
#: A character that is rare in logs, per ``str.find`` needle that holds one: a block without it
#: cannot hold the needle, and one test for a single character (a memchr) is far cheaper than a
#: search for the whole needle through a block that lacks it.
_FIND_GATES = tuple((w, next((c for c in "^z<|{}'" if c in w), "")) for w in _FIND_WORDS)
#: Each frequent serving marker with a word it shares with others ("... metrics", "... request
#: "): a block without that word holds none of them, so one pass over the block (stopping at
#: the first hit when the word is there) spares a pass per member.
_FREQ_GATES = (" metrics", "atency: ", "LMCache INFO: ", "Acceptance ", " request")
_FREQ_GATED = tuple((next((g for g in _FREQ_GATES if g in kw), ""), kw) for kw in _FREQ_HEALTHY)


def _freq_keywords(scan: str, json_records: bool = False) -> list[str]:
    """The frequent serving markers (``words._FREQ_HEALTHY``) ``scan`` may hold: those whose
    shared word (:data:`_FREQ_GATES`) it lacks are left out; a block that was JSON records
    adds ``words._FREQ_HEALTHY_JSON``."""
    absent = {g for g in _FREQ_GATES if scan.rfind(g) < 0}  # (see _candidate_lines: rfind)
    found = [kw for gate, kw in _FREQ_GATED if gate not in absent]
    return found + list(_FREQ_HEALTHY_JSON) if json_records else found


_OPEN_FRAME = re.compile(r'File "[^"\n]{40,}\n')  # a frame's path wrapped: its rest is indented


def _candidate_lines(scan: str) -> list[int]:
    """Start offsets (sorted, unique) of the lines of ``scan`` worth analysing."""
    starts: set[int] = set()
    # ASCII-encode with one "?" per other character, so byte offsets equal str offsets.
    marked = scan.encode("ascii", "replace").translate(_ANCHOR_TABLE)
    search = _TRIGGER.search
    i = 0
    while True:
        m = search(marked, i)
        if m is None:
            break
        p = m.start()
        starts.add(scan.rfind("\n", 0, p) + 1)
        i = scan.find("\n", p) + 1
    # each word's lines, walked from the block's end: CPython's str.rfind is about twice as fast
    # as str.find (and `in`) for a needle that is absent, which most are (no word holds "\n")
    for word, gate in _FIND_GATES:
        if gate and gate not in scan:
            continue
        p = scan.rfind(word)
        while p >= 0:
            ls = scan.rfind("\n", 0, p) + 1
            starts.add(ls)
            p = scan.rfind(word, 0, ls)
    for needle in () if scan.isascii() else _MARKED_FIND:  # (str.isascii: a flag, O(1))
        p = marked.find(needle)
        while p >= 0:
            if needle[0] == 10:  # "\n...": the line after the newline
                starts.add(p + 1)
                p = marked.find(needle, p + 1)
            else:
                starts.add(marked.rfind(b"\n", 0, p) + 1)
                p = marked.find(needle, marked.find(b"\n", p))
    if marked[:1] == b"?":  # the block's first line starts with a non-ASCII word
        starts.add(0)
    return sorted(starts)
