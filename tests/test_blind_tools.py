"""The blind-set tools (bench/blind/): a source is recognised as used whatever URL form names
it, a near copy of a corpus excerpt is dropped, and a helper cannot take a used source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BLIND = Path(__file__).resolve().parents[1] / "bench" / "blind"
sys.path.insert(0, str(BLIND))

import import_set  # noqa: E402
import take  # noqa: E402
from srcnorm import keys  # noqa: E402


def test_one_thread_or_file_has_one_key_whatever_its_url() -> None:
    issue = keys("https://github.com/vllm-project/vllm/issues/1354#issuecomment-9")
    assert (
        issue
        == keys("github:vllm-project/vllm#1354")
        == keys("https://www.github.com/vllm-project/vllm/pull/1354/")
    )
    assert issue == ["gh:vllm-project/vllm#1354"]
    blob = keys("https://github.com/o/r/blob/abc123/logs/run.log")
    assert blob == keys("https://raw.githubusercontent.com/o/r/main/logs/run.log")
    assert "ghrepo:o/r" in blob
    assert keys("https://huggingface.co/org/model/discussions/4#x") == ["hf:org/model#4"]
    assert "gh:vllm-project/vllm#77" in keys(
        "https://mirror.example/host-https-github.com/vllm-project/vllm/issues/77"
    )


def test_a_near_copy_needs_rare_shared_lines_unless_the_excerpt_is_tiny() -> None:
    rare = {f"ERROR 01-01 00:00:0{i} [core.py:1] a rare line number {i} here" for i in range(5)}
    common = "INFO:     Application startup complete. (a line many excerpts hold)"
    index = {s: {"old.log"} for s in rare}
    index[common] = {f"x{i}.log" for i in range(10)} | {"old.log"}
    assert import_set.near_copy(rare | {common}, index) == ("old.log", 6)
    # sharing only common lines is no copy; a 1-line excerpt held whole is one
    assert import_set.near_copy({common, "a new line nobody has seen before, long"}, index) is None
    assert import_set.near_copy({common}, index) is not None


def test_a_helper_takes_a_free_source_once_and_never_a_used_one(tmp_path: Path) -> None:
    for name in ("take.py", "srcnorm.py"):
        (tmp_path / name).write_text((BLIND / name).read_text())
    (tmp_path / "used_keys.txt").write_text("gh:vllm-project/vllm#1\nghrepo:o/full 2\n")
    me, other = tmp_path / "h1", tmp_path / "h2"
    me.mkdir()
    other.mkdir()

    def run(cwd: Path, *args: str) -> str:
        cmd = [sys.executable, str(tmp_path / "take.py"), *args]
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True).stdout.strip()

    assert run(me, "take", "https://github.com/vllm-project/vllm/issues/1").startswith("USED")
    assert run(me, "take", "https://github.com/o/full/blob/main/a.log").startswith("USED")
    assert run(me, "take", "https://github.com/vllm-project/vllm/issues/2") == "OK"
    assert run(me, "take", "github:vllm-project/vllm#2") == "OK-AGAIN"
    assert run(other, "check", "https://github.com/vllm-project/vllm/pull/2").startswith("USED")
    assert take.load_used(str(tmp_path / "used_keys.txt"))["ghrepo:o/full"] == 2


def test_the_helpers_guide_names_the_set_and_the_take_rule(tmp_path: Path) -> None:
    import prepare

    text = prepare.guide(tmp_path, "zp")
    assert f"{tmp_path}/take.py take <URL>" in text and "used_sources.txt" not in text
    assert "__zp<N><NN>_" in text and "__l<N><NN>_" not in text
    assert "## Labels" in text  # the rest of the guide is kept whole
