"""The fast path's shortcuts (2026-12-05, throughput on this session's machine): a needle is
skipped only when the block cannot hold it, so no line the full search finds is missed."""

from __future__ import annotations

from kimi_ops.diagnose import candidates, diagnose
from kimi_ops.diagnose.words import _FIND_WORDS, _FREQ_HEALTHY


def test_a_frequent_marker_is_searched_whenever_the_block_could_hold_it() -> None:
    for kw in _FREQ_HEALTHY:
        assert kw in candidates._freq_keywords(f"INFO x {kw} y\n"), kw
    # a block without a group's shared word skips the group; one with it searches it
    bare = candidates._freq_keywords("INFO plain line\n")
    assert "SpecDecoding metrics" not in bare and "Finished request " not in bare
    assert "Avg prompt throughput" in bare  # (no shared word: always searched)
    assert "SpecDecoding metrics" in candidates._freq_keywords("x KV cache metrics y\n")


def test_a_find_needle_is_gated_only_on_a_character_it_holds() -> None:
    gates = dict(candidates._FIND_GATES)
    assert set(gates) == set(_FIND_WORDS)
    assert all(g in w for w, g in gates.items() if g)
    assert gates["^C"] == "^"
    # the gated needles still find their lines in a big block (past the head scan)
    filler = "INFO 01-01 00:00:00 [a.py:1] step\n" * 40000
    ctrl_c = diagnose(
        filler + "INFO:     Application startup complete.\n" + filler + "^C\n"
        "INFO:     Shutting down\n"
    )
    assert ctrl_c.label == "healthy" and ctrl_c.lifecycle == "stopped", ctrl_c.summary
    missing = diagnose(filler + "bash: line 1: vllm: command not found\n")
    assert missing.failed, missing.summary
