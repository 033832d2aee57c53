"""Issue 12 (config and input), the parts testable without SSH."""

from __future__ import annotations

import pytest

from kimi_ops.errors import ProfileError
from kimi_ops.profile import host_keys, load_profile, split_host
from tasks import ns


def test_flags_are_long_only_so_no_letter_means_two_things() -> None:
    """`-r` was --restart on deploy and --run-dir elsewhere (Invoke's automatic short flags)."""
    for name, task in ns.tasks.items():
        for arg in task.get_arguments():
            assert all(len(n) > 1 for n in arg.names), (name, arg.names)


def test_host_keys_and_split_host() -> None:
    assert split_host("root@gpu1:2222") == ("root", "gpu1", 2222)
    assert split_host("gpu1") == (None, "gpu1", None)
    keys = host_keys("root", "gpu1", 2222, "10.0.0.5")
    assert keys[:2] == ["10.0.0.5", "gpu1"] and keys[-1] == "root@gpu1:2222"
    assert {"gpu1:2222", "root@gpu1", "root@10.0.0.5:2222"} <= set(keys)


def test_for_host_applies_the_more_specific_key_last() -> None:
    p = load_profile({"host_overrides": {"gpu1": {"port": 8001}, "root@gpu1:2222": {"port": 8002}}})
    assert p.for_host(host_keys("root", "gpu1", 2222)).port == 8002
    assert p.for_host(host_keys("admin", "gpu1", 22)).port == 8001


def test_an_override_key_for_no_host_of_the_run_is_refused() -> None:
    p = load_profile({"host_overrides": {"gpu9": {"port": 8001}}, "hosts": ["gpu1"]})
    with pytest.raises(ProfileError, match="host_overrides.gpu9.*matches no host"):
        p.check_override_keys([host_keys("root", "gpu1", 22)])
    listed = load_profile({"host_overrides": {"gpu9": {"port": 8001}}, "hosts": ["root@gpu9"]})
    listed.check_override_keys([host_keys("root", "gpu1", 22)])  # named by kimi.hosts: fine


def test_launch_rotates_old_logs_keeping_the_newest_and_never_the_current(tmp_path) -> None:
    """The real launch command, run by bash in a scratch run_dir: keep_logs=3 keeps this
    launch and the two newest before it; the log current.log names survives even keep_logs=1;
    files kimi-ops did not name are left alone."""
    import os
    import subprocess

    from kimi_ops.script import launch_command

    run = tmp_path / "run"
    logs = run / "logs"
    logs.mkdir(parents=True)
    (run / "launch.sh").write_text("#!/bin/bash\nexit 0\n")
    (run / "launch.sh").chmod(0o700)
    ids = [f"202612{d:02d}T120000-aaaa{d:02d}" for d in range(1, 8)]
    for lid in ids:
        (logs / f"{lid}.log").write_text(lid)
        (logs / f"{lid}.sha256").write_text("x")
    (logs / "notes.log").write_text("mine")
    os.symlink(f"logs/{ids[2]}.log", run / "current.log")  # an older launch is current

    def launch(lid: str, keep: int) -> set[str]:
        subprocess.run(["bash", "-c", launch_command(str(run), lid, keep)], check=True)
        return {p.name for p in logs.iterdir()}

    left = launch("20261209T120000-bbbb01", 3)
    assert {f"{i}.log" for i in ("20261209T120000-bbbb01", ids[6], ids[5], ids[2])} | {
        "notes.log"
    } == {n for n in left if n.endswith(".log")}, sorted(left)
    assert f"{ids[0]}.sha256" not in left and f"{ids[6]}.sha256" in left
    left = launch("20261210T120000-cccc01", 1)
    assert {n for n in left if n.endswith(".log")} == {
        "20261210T120000-cccc01.log",
        "20261209T120000-bbbb01.log",  # current.log named it when this launch began
        "notes.log",
    }, sorted(left)


def test_polls_that_split_a_utf8_character_decode_it_whole(tmp_path) -> None:
    """The real poll command, run by bash on a log of multi-byte characters, 7 bytes a poll:
    every poll ends inside a character somewhere; one decoder across polls joins them."""
    import subprocess

    from kimi_ops import verify as vfy

    text = "".join(f"ünï ✓ 日本語 {i} 🙂\n" for i in range(50))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_bytes(text.encode())
    (tmp_path / "current.log").symlink_to("logs/a.log")
    decoder, offset, shown = vfy.log_decoder(), 0, []
    while True:
        out = subprocess.run(
            ["bash", "-c", vfy.poll_command(str(tmp_path), offset, 7)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        facts = vfy.parse_poll(out, decoder)
        if not facts.read:
            break
        shown.append(facts.chunk)
        offset += facts.read
    assert "".join(shown) == text


def test_line_capper_is_streaming_and_marks_each_cut_once() -> None:
    from kimi_ops.logview import LineCapper, cap_lines

    assert cap_lines("abcdef\nab\nxyz", 3) == ("abc …[line cut at 3 chars]\nab\nxyz")
    capper = LineCapper(3)
    pieces = ["ab", "cd", "ef", "gh\nok", "\n", "1234"]
    assert "".join(capper.feed(p) for p in pieces) == (
        "abc …[line cut at 3 chars]\nok\n123 …[line cut at 3 chars]"
    )
