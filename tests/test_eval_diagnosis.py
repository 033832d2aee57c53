"""The corpus evaluation (bench/eval_diagnosis.py): its split, its checks, and the real run.

``test_corpus_meets_issue_13`` runs the evaluation on whatever corpus is in the tree
(tests/fixtures/corpus) and fails when a check of issue 13 fails, so CI runs it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "eval_diagnosis", ROOT / "bench" / "eval_diagnosis.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["eval_diagnosis"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


E = _load()


def run(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = E.main(args)
    return code, out.getvalue()


def test_split_zero_is_the_fixed_rule() -> None:
    for group in ("github:vllm-project/vllm#6746", "real-cpu:0.32", "x"):
        want = int(hashlib.sha256(group.encode()).hexdigest(), 16) % 10 < 3
        assert E.held_out(group) is want
        again = int(hashlib.sha256(f"4:{group}".encode()).hexdigest(), 16) % 10 < 3
        assert E.held_out(group, 4) is again
    share = sum(E.held_out(f"g{i}") for i in range(2000)) / 2000
    assert 0.25 < share < 0.35


def _group_on(side: bool, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(1000) if E.held_out(f"{prefix}{i}") is side)


def _write_corpus(
    root: Path, rows: list[tuple[str, str, str, str]], index_name: str = "t.tsv"
) -> None:
    logs = root / "tests" / "fixtures" / "corpus" / "logs"
    index = root / "tests" / "fixtures" / "corpus" / "index"
    logs.mkdir(parents=True, exist_ok=True)
    index.mkdir(parents=True, exist_ok=True)
    lines = ["file\tlabel\tgroup\tsource_url\tvllm_version\tnote"]
    for name, label, group, text in rows:
        (logs / name).write_text(text)
        lines.append(f"{name}\t{label}\t{group}\thttps://example.invalid/{group}\t0.9\tsynthetic")
    (index / index_name).write_text("\n".join(lines) + "\n")


PORT = "OSError: [Errno 98] Address already in use\n"
UP = "INFO:     Application startup complete.\n"


def test_report_on_a_small_corpus(tmp_path: Path) -> None:
    held, dev = _group_on(True, "h"), _group_on(False, "d")
    _write_corpus(
        tmp_path,
        [
            ("a.log", "port_in_use", held, PORT),
            ("b.log", "healthy", held, UP),
            ("c.log", "port_in_use", dev, UP),  # a dev-side miss: not a held-out check
            ("d.log", "no_such_label", dev, UP),
        ],
    )
    code, out = run(["--root", str(tmp_path), "--json", "--seeds", "3"])
    rep = json.loads(out)
    assert code == 0, rep["checks"]
    assert rep["corpus"]["excerpts"] == 3 and rep["corpus"]["held_out_excerpts"] == 2
    assert rep["split0_held_out"]["accuracy"] == 1.0
    assert rep["split0_dev_accuracy"] == 0.0
    assert len(rep["resplits"]) == 3 and "problems" in rep
    assert rep["blind"] is None and rep["checked_on"].startswith("split 0")
    # no blind set: every excerpt has been read, the whole corpus is dev data
    code, out = run(["--root", str(tmp_path), "--list-dev"])
    assert code == 0 and all(f"{n}.log" in out for n in "abc")


def test_safety_checks_fail_the_run(tmp_path: Path) -> None:
    held = _group_on(True, "h")
    _write_corpus(
        tmp_path,
        [
            ("a.log", "port_in_use", held, UP),  # a failure read as healthy
            ("b.log", "healthy", held, PORT),  # a healthy log read as a failure
        ],
    )
    code, out = run(["--root", str(tmp_path)])
    assert code == 1
    assert "[FAIL] no healthy log labelled a failure" in out
    assert "[FAIL] no failure labelled healthy or starting" in out
    assert "a.log: port_in_use -> healthy" in out  # held-out misses: file and labels only
    assert "Address already in use" not in out  # never the excerpt


def test_the_newest_blind_set_is_what_the_checks_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(E, "MIN_BLIND_EXCERPTS", 2)  # a two-excerpt set stands for a big one
    held = _group_on(True, "h")
    # the dev corpus: split 0's held-out side fails a safety check, but it is not checked
    _write_corpus(tmp_path, [("a.log", "port_in_use", held, UP)])
    _write_corpus(tmp_path, [("b.log", "port_in_use", "old", UP)], "blind-a.tsv")
    _write_corpus(
        tmp_path,
        [("c.log", "port_in_use", "new1", PORT), ("d.log", "healthy", "new2", UP)],
        "blind-b.tsv",
    )
    code, out = run(["--root", str(tmp_path), "--json", "--seeds", "4"])
    rep = json.loads(out)
    assert code == 0, rep["checks"]
    assert rep["blind"]["set"] == "blind-b" and rep["blind"]["n"] == 2
    assert rep["blind"]["accuracy"] == 1.0 and rep["checked_on"] == "blind set blind-b"
    assert rep["blind"]["frozen_at"] == "unrecorded"  # not in BLIND_SETS
    assert rep["blind"]["spent_at"] is None and rep["checks"][0]["ok"]
    assert len(rep["blind"]["resplits"]) == 4
    assert rep["split0_held_out"]["n"] == 1  # split 0 covers the non-blind indexes only
    # the dev side (for writing rules) is everything but the newest blind set
    code, out = run(["--root", str(tmp_path), "--list-dev"])
    assert "a.log" in out and "b.log" in out and "c.log" not in out and "d.log" not in out
    # a blind set must not share a source with anything else
    _write_corpus(tmp_path, [("e.log", "port_in_use", "new1", PORT)], "u.tsv")
    code, out = run(["--root", str(tmp_path), "--json"])
    assert any("new1" in p for p in json.loads(out)["problems"])


def test_a_small_blind_set_cannot_meet_the_checks(tmp_path: Path) -> None:
    """One miss in 20 is 95%: a blind set under MIN_BLIND_EXCERPTS fails, however it scored."""
    _write_corpus(tmp_path, [("c.log", "port_in_use", "new1", PORT)], "blind-y.tsv")
    code, out = run(["--root", str(tmp_path), "--json"])
    rep = json.loads(out)
    assert code == 1 and rep["blind"]["accuracy"] == 1.0
    size = [c for c in rep["checks"] if c["check"].startswith("the blind set holds")]
    assert size == [
        {
            "check": f"the blind set holds >= {E.MIN_BLIND_EXCERPTS} excerpts",
            "ok": False,
            "value": 1,
        }
    ]


def test_a_spent_blind_set_fails_the_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_corpus(tmp_path, [("c.log", "port_in_use", "new1", PORT)], "blind-z.tsv")
    monkeypatch.setitem(E.BLIND_SETS, "blind-z", ("aaaaaaa", "bbbbbbb"))
    code, out = run(["--root", str(tmp_path)])
    assert code == 1
    assert "SPENT: the rules learned from its misses at bbbbbbb" in out
    assert "[FAIL] scored on a blind set the rules have not learned from" in out
    assert "[ok] overall accuracy >= 95%" in out  # the score itself passed: spent is why


def test_no_corpus_is_exit_2(tmp_path: Path) -> None:
    assert run(["--root", str(tmp_path)])[0] == 2


NO_CORPUS = pytest.mark.skipif(
    not any((ROOT / "tests" / "fixtures" / "corpus" / "index").glob("*.tsv")),
    reason="no corpus in this tree (tests/fixtures/corpus)",
)


@functools.cache
def corpus_report() -> tuple[int, str]:
    """The whole corpus's evaluation (``--json``), run once for the tests that read it."""
    return run(["--json"])


@NO_CORPUS
def test_corpus_evaluation_runs() -> None:
    code, out = corpus_report()
    rep = json.loads(out)
    assert code in (0, 1) and rep["corpus"]["held_out_excerpts"] > 0
    assert rep["split0_held_out"]["n"] == rep["corpus"]["held_out_excerpts"]
    assert len(rep["resplits"]) == 10 and rep["checks"]
    assert rep["blind"] is not None and rep["blind"]["frozen_at"] != "unrecorded"


# Issue 13's checks on the newest blind set. The sets before ZS fell short when first scored
# (README's table: D-X 61.0-92.9%; Y 96.2% but 80 excerpts; ZA 94.4%, ZE 95.6% with unknown
# 83.3%, ZK 95.7% with 3 failures read as starting / healthy, ZM 94.5%, ZP 93.7%, ZQ 91.0%, ZR
# 89.7%). ZS (2026-12-06: 118 excerpts from 117 sources, the rules of c39ce82) meets every
# check: 95.8%, each label with >= 8 excerpts at >= 85%, no healthy log read as a failure and
# no failure read as healthy or starting. It stays blind: its misses are not read. If rules
# ever learn from it (a second commit in BLIND_SETS), the script fails the "still blind" check
# and this test fails with it until a new blind set is added: mark it xfail with the measured
# numbers until then, never silently.
@NO_CORPUS
def test_corpus_meets_issue_13() -> None:
    code, out = corpus_report()
    rep = json.loads(out)
    failed = [c["check"] for c in rep["checks"] if not c["ok"]]
    assert code == 0, f"{failed}; held-out misses: {rep['split0_held_out']['misses']}"
