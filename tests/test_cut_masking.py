"""A secret cut short is still masked (red-team round 4, #13 and #14).

A line cut before the masker sees it (by the host in bytes for `fab logs`, at 500 characters for
the diagnosis's evidence, at 160 characters for a process's argv) leaves only a head of a known
secret, which no longer matches it whole; a credential shape (``hf_...``) cut short is shorter
than its shape. The masker hides a secret's part at a cut.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_ops.diagnose import LogDiagnoser
from kimi_ops.procs import Listing, Proc, owned_processes
from kimi_ops.profile import load_profile
from kimi_ops.redact import MASK, Masker, cut, mask_shapes
from kimi_ops.result import clip
from tasks import steps
from tasks.host import Host
from tasks.masking import hide, hide_json
from tasks.testing import Reply, ScriptedConnection

SECRET = "Pw7xQ2mZ9kLr4TnB8vYc3HdF6sJg1WpA5eRu0KoN2iMq7ZtX9bVl3CyE8hGj4Dfs"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


def _shown_parts(shown: str, secret: str = SECRET, least: int = 6) -> list[str]:
    """Every piece of ``secret`` at least ``least`` characters long that ``shown`` holds."""
    return [
        secret[i : i + n]
        for n in range(least, len(secret) + 1)
        for i in range(len(secret) - n + 1)
        if secret[i : i + n] in shown
    ]


def test_fab_logs_masks_a_secret_the_host_cut_in_bytes() -> None:
    # the host cuts each line at 4 * (2000 + 1) bytes: after 1986 four-byte emoji, 60 bytes of
    # the secret are left, and the 2000-character cap then showed its first 14 characters
    profile = load_profile({"run_dir": "/srv/kimi", "log_line_limit": 2000})
    conn = ScriptedConnection()
    line = "\U0001f600" * 1986 + SECRET + "\n"
    sent = line.encode()[: 4 * 2001].decode() + "\n"  # what `cut -b 1-8004` sends
    conn.on(r"tail -n .*\| cut -b 1-8004", Reply(sent + "INFO next\n"))
    masker = Masker([SECRET])
    shown = steps.read_log(Host(conn, profile), profile, 400, mask=lambda t: hide(masker, t))
    assert _shown_parts(shown) == []
    assert shown.splitlines()[0].startswith("\U0001f600" * 1986 + MASK)
    assert shown.endswith("\nINFO next\n")


def test_a_secret_s_tail_at_a_line_s_start_is_masked() -> None:
    # `tail -c` starts inside a line: what is left of a secret there is masked too
    masker = Masker([SECRET])
    assert masker.hide(SECRET[20:] + " rest\nINFO\n") == f"{MASK} rest\nINFO\n"


def test_short_words_at_a_cut_are_not_masked() -> None:
    masker = Masker([SECRET, "short"])
    text = f"INFO {SECRET[:5]}\nsho...\nPw7x...\n"
    assert masker.hide(text) == text


def _evidence_log(secret: str, pad: int) -> str:
    head = "ERROR 12-06 05:00:01 [core.py:1] RuntimeError: connection to the database failed: "
    return (
        "INFO 12-06 05:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
        + head
        + "x" * pad
        + " "
        + secret
        + " rest\n"
    )


@pytest.mark.parametrize("pad", [386, 400, 430, 440])
def test_evidence_cut_inside_a_known_secret_is_masked(pad: int) -> None:
    d = LogDiagnoser({})
    d.feed(_evidence_log(SECRET, pad))
    diagnosis = d.diagnosis()
    assert any(e.endswith("...") for e in diagnosis.evidence)  # the diagnoser cut it
    masker = Masker([SECRET])
    shown = "\n".join(f"evidence: {hide(masker, e)}" for e in diagnosis.evidence)
    assert _shown_parts(shown) == [], shown
    as_json = hide_json(masker, json.dumps(diagnosis.to_dict()))
    assert as_json is not None and _shown_parts(as_json) == []


def test_evidence_cut_inside_an_hf_token_is_masked_by_its_shape() -> None:
    d = LogDiagnoser({})
    d.feed(_evidence_log(f"token {HF}", 424))
    (evidence, *_) = d.diagnosis().evidence
    assert "hf_AbCd" in evidence  # cut short, and shorter than the hf_ shape's 20 characters
    shown = hide(Masker(), evidence)
    assert "hf_" not in shown and shown.endswith(f"token {MASK}...")


@pytest.mark.parametrize("tail", [HF[:8], HF[:19], HF[:23]])
def test_a_token_shape_cut_short_is_masked_at_a_cut(tail: str) -> None:
    assert mask_shapes(f"--revision {tail}") == f"--revision {MASK}"
    assert mask_shapes(f"x {tail}... y") == f"x {MASK}... y"
    assert mask_shapes(f"x {tail}…") == f"x {MASK}…"
    assert mask_shapes(f"db postgres://kimi:{tail}\n") == f"db {MASK}\n"
    # the same heads, not at a cut, are no credential: left as they are
    assert mask_shapes(f"x {tail} y") == f"x {tail} y" or len(tail) >= 23


def test_a_url_s_port_at_a_line_s_end_is_no_password() -> None:
    text = "Uvicorn running on http://0.0.0.0:8000\nhttp://[::1]:8000\npip install hf_"
    assert mask_shapes(text) == text


def test_clip_keeps_no_part_of_a_secret_at_its_cuts() -> None:
    text = "mv: cannot move " + "p" * 60 + SECRET + "q" * 60 + " to " + "r" * 80 + SECRET[::-1]
    clipped = clip(text, 150)
    assert " ... " in clipped
    assert _shown_parts(Masker([SECRET]).hide(clipped)) == []
    assert cut("abcdef", 3) == "abc…" and cut("abc", 3) == "abc"


def _foreign(args: tuple[str, ...]) -> list[str]:
    listing = Listing((Proc(1, 0, 1, ("init",), 1), Proc(310, 1, 310, args, 310, ())))
    return owned_processes(listing, "/srv/kimi-a", pidfile_pid=999, port=8000).describe_foreign()


@pytest.mark.parametrize(
    ("flag", "secret"),
    [("--api-key", SECRET), ("--revision", HF), ("--db-password-file", SECRET)],
)
def test_kill_stale_s_argv_cut_at_160_shows_no_secret(flag: str, secret: str) -> None:
    args = ("python3", "/x/kimi_standin.py", "--port", "8000", "--model")
    path = "/models/" + "a" * (160 - len(" ".join(args)) - 1 - 8 - len(flag) - 1 - 10)
    (line,) = _foreign((*args, path, flag, secret))
    shown = hide(Masker([SECRET]), line)
    assert f"{flag} " in shown  # the cut fell 10 characters into the secret
    assert _shown_parts(shown, secret) == [], shown
    assert "hf_" not in shown


def _hide_by_every_part(masker: Masker, text: str) -> str:
    """The reference: every proper prefix / suffix (>= 6) of every long form, tried longest
    first at each cut edge (what Masker.hide does, written the slow, obvious way)."""
    from kimi_ops.redact import _CUT_END_RE, _CUT_START_RE

    text = masker(text)
    longs = [f for f in masker.forms if len(f) >= 8]
    heads = {f[:k] for f in longs for k in range(6, len(f))}
    tails = {f[-k:] for f in longs for k in range(6, len(f))}
    spans = []
    for end in (*(m.start() for m in _CUT_END_RE.finditer(text)), len(text)):
        for k in range(min(max(map(len, longs)), end), 5, -1):
            if text[end - k : end] in heads:
                spans.append((end - k, end))
                break
    for start in (0, *(m.end() for m in _CUT_START_RE.finditer(text))):
        for k in range(min(max(map(len, longs)), len(text) - start), 5, -1):
            if text[start : start + k] in tails:
                spans.append((start, start + k))
                break
    out, pos = [], 0
    for a, b in sorted(spans):
        if a >= pos:
            out += [text[pos:a], MASK]
            pos = b
        elif b > pos:
            pos = b
    return "".join(out) + text[pos:]


@given(
    st.lists(
        st.sampled_from(["aaBBaaBBcc", "xyzxyzxyzQ", "line", "\n", " ... ", "…", " "]), max_size=12
    ),
    st.integers(0, 9),
    st.integers(1, 9),
)
@settings(max_examples=300, deadline=None)
def test_hide_masks_what_every_prefix_and_suffix_would(pieces: list[str], a: int, b: int) -> None:
    # the parts are searched at each cut, not kept as sets of every prefix and suffix
    masker = Masker(["aaBBaaBBcc", "xyzxyzxyzQ"])
    text = "".join(pieces)
    text = text[a:] + "aaBBaaBBcc"[: 6 + b % 4] + "\n" + "xyzxyzxyzQ"[b % 4 :]
    assert masker.hide(text) == _hide_by_every_part(masker, text)


def test_a_long_secret_costs_memory_linear_in_its_length() -> None:
    # a PEM key as a secret env value: every prefix and suffix kept as a set took 60 MB for 3 KB
    import tracemalloc

    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(f"{i:04d}" + "Q" * 60 for i in range(50))
    tracemalloc.start()
    try:
        masker = Masker([pem])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    assert masker.hide("key: " + pem[:2000]).endswith(MASK)
