"""run_dir safety (StrictModes-like): decided from plain `stat` text, and the command run for
real on this machine's directories."""

from __future__ import annotations

import os
import posixpath
import subprocess
from pathlib import Path

import pytest

from kimi_ops.rundir import (
    RUN_DIR_FILES,
    check_run_dir,
    facts_command,
    parse_facts,
    private_dir_test,
)

ME = 1000


def _facts(*paths: str, files: tuple[str, ...] = (), resolved: str = "/home/u/run") -> str:
    """The command's output from ``uid:mode:type:path`` entries (absent ones: ``-`` lines)."""
    given = {p.split(":", 3)[3]: p.rsplit(":", 1)[0] for p in paths}
    kept = {f.split(":", 3)[3]: f.rsplit(":", 1)[0] for f in files}
    chain = [resolved]
    while chain[-1] != "/":
        chain.append(posixpath.dirname(chain[-1]))
    lines = [f"uid={ME}", "@@resolved", resolved, "@@end"]
    lines += [f"path={given.get(c, '-')}" for c in chain]
    lines += [f"file={kept.get(f'{resolved}/{n}', '-')}" for n in RUN_DIR_FILES]
    return "\n".join(lines) + "\n"


SAFE_PARENTS = ("1000:755:directory:/home/u", "0:755:directory:/home", "0:755:directory:/")


def _verdict(text: str, given: str = "/home/u/run"):  # type: ignore[no-untyped-def]
    return check_run_dir(parse_facts(text), given)


def test_a_private_run_dir_under_safe_parents_is_ok() -> None:
    v = _verdict(_facts("1000:700:directory:/home/u/run", *SAFE_PARENTS))
    assert v.ok and v.resolved == "/home/u/run" and v.problems == ()


def test_a_run_dir_that_does_not_exist_yet_is_ok_under_safe_parents() -> None:
    assert _verdict(_facts(*SAFE_PARENTS)).ok


def test_a_world_writable_run_dir_is_refused_with_a_chmod_hint() -> None:
    v = _verdict(_facts("1000:777:directory:/home/u/run", *SAFE_PARENTS))
    assert not v.ok
    assert "writable by group or others (mode 777)" in v.problems[0]
    assert "chmod 700 /home/u/run" in v.hint


def test_a_group_writable_run_dir_is_refused() -> None:
    assert not _verdict(_facts("1000:770:directory:/home/u/run", *SAFE_PARENTS)).ok


def test_a_run_dir_owned_by_another_user_is_refused() -> None:
    v = _verdict(_facts("65534:700:directory:/home/u/run", *SAFE_PARENTS))
    assert not v.ok and "owned by uid 65534" in v.problems[0]


def test_a_run_dir_that_is_a_file_is_refused() -> None:
    v = _verdict(_facts("1000:600:regular file:/home/u/run", *SAFE_PARENTS))
    assert not v.ok and "is a regular file, not a directory" in v.problems[0]


def test_a_world_writable_parent_without_sticky_bit_is_refused() -> None:
    text = _facts(
        "0:777:directory:/tmp/rt", "0:1777:directory:/tmp", "0:755:directory:/",
        resolved="/tmp/rt/run8",
    )  # fmt: skip
    v = _verdict(text, "/tmp/rt/run8")
    assert (
        not v.ok
        and "/tmp/rt is writable by group or others without the sticky bit" in (v.problems[0])
    )
    assert "choose a run_dir under a directory only you" in v.hint


def test_a_sticky_world_writable_parent_is_ok() -> None:
    text = _facts(
        "1000:700:directory:/tmp/run", "0:1777:directory:/tmp", "0:755:directory:/",
        resolved="/tmp/run",
    )  # fmt: skip
    assert _verdict(text, "/tmp/run").ok


def test_a_parent_owned_by_another_user_is_refused() -> None:
    text = _facts("1000:700:directory:/home/u/run", "2000:755:directory:/home/u", *SAFE_PARENTS[1:])
    v = _verdict(text)
    assert not v.ok and "/home/u is owned by uid 2000, not by root or you" in v.problems[0]


def test_a_planted_file_in_a_private_run_dir_is_refused() -> None:
    text = _facts(
        "1000:700:directory:/home/u/run", *SAFE_PARENTS,
        files=("65534:755:regular file:/home/u/run/kimi_probe.py",),
    )  # fmt: skip
    v = _verdict(text)
    assert not v.ok and "/home/u/run/kimi_probe.py" in v.problems[0]
    ours = _facts(
        "1000:700:directory:/home/u/run", *SAFE_PARENTS,
        files=("1000:600:regular file:/home/u/run/kimi_probe.py",
               "1000:777:symbolic link:/home/u/run/current.log"),
    )  # fmt: skip
    assert _verdict(ours).ok


def test_the_resolved_path_is_returned_and_an_unresolved_one_refused() -> None:
    text = _facts("1000:700:directory:/srv/real", "0:755:directory:/srv", "0:755:directory:/",
                  resolved="/srv/real")  # fmt: skip
    v = _verdict(text, "/srv/link")
    assert v.ok and v.resolved == "/srv/real"
    assert not _verdict("uid=1000\n@@resolved\n\n@@end\n").ok
    cut = _facts("1000:700:directory:/home/u/run", *SAFE_PARENTS).rsplit("file=", 3)[0]
    assert not _verdict(cut).ok  # output cut short: nothing is taken as checked


def _run(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout


def test_the_facts_command_on_real_directories(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    run.chmod(0o700)
    (tmp_path / "link").symlink_to("run")
    facts = parse_facts(_run(facts_command(str(tmp_path / "link"))))
    assert facts.uid == os.getuid() and facts.resolved == str(run.resolve())
    assert facts.paths[0].path == str(run.resolve()) and facts.paths[-1].path == "/"
    assert check_run_dir(facts, str(tmp_path / "link")).resolved == str(run.resolve())
    run.chmod(0o777)
    (run / "kimi_probe.py").write_text("print('x')\n")
    bad = check_run_dir(parse_facts(_run(facts_command(str(run)))), str(run))
    assert not bad.ok and "mode 777" in bad.problems[0]
    assert any("kimi_probe.py" in f.path for f in parse_facts(_run(facts_command(str(run)))).files)


@pytest.mark.parametrize(("mode", "ok"), [(0o700, True), (0o755, True), (0o777, False)])
def test_private_dir_test(tmp_path: Path, mode: int, ok: bool) -> None:
    d = tmp_path / "d"
    d.mkdir()
    d.chmod(mode)
    done = subprocess.run(["sh", "-c", private_dir_test(str(d))], capture_output=True, text=True)
    assert (done.returncode == 0) is ok, done.stderr


def test_every_file_kimi_ops_keeps_in_run_dir_is_checked() -> None:
    from kimi_ops import cluster, defaults, hoststate, shm
    from kimi_ops.rundir import RUN_DIR_FILES

    names = [v for k, v in vars(defaults).items() if k.isupper() and isinstance(v, str)]
    kept = {n for n in names if n.endswith((".sh", ".py", ".json", ".env", ".pid", ".id", ".lock"))}
    kept |= {defaults.CURRENT_LOG, defaults.LOG_DIR, hoststate.STOP_MARKER, cluster.RAY_DIR}
    kept.add(shm.OWNED_FILE)
    assert kept <= set(RUN_DIR_FILES), kept - set(RUN_DIR_FILES)


def test_a_run_dir_with_newlines_in_its_name(tmp_path: Path) -> None:
    odd = tmp_path / "a\nb" / "run\n"
    odd.mkdir(parents=True)
    odd.chmod(0o700)
    facts = parse_facts(_run(facts_command(str(odd))))
    verdict = check_run_dir(facts, str(odd))
    assert verdict.ok and verdict.resolved == str(odd), verdict
    assert [e.path for e in facts.paths][:3] == [str(odd), str(odd.parent), str(tmp_path)]
    odd.chmod(0o777)
    assert (
        "mode 777"
        in check_run_dir(parse_facts(_run(facts_command(str(odd)))), str(odd)).problems[0]
    )


def test_another_list_of_files_is_read_with_the_same_list(tmp_path: Path) -> None:
    """The router's run_dir is checked with its own file names."""
    d = tmp_path / "router"
    d.mkdir(mode=0o700)
    d.chmod(0o700)
    (d / "haproxy.cfg").write_text("global\n")
    names = ("haproxy.cfg", "router.pid")
    facts = parse_facts(_run(facts_command(str(d), names)), names)
    assert check_run_dir(facts, str(d)).ok
    assert [f.path for f in facts.files] == [f"{d}/haproxy.cfg"]
    assert not check_run_dir(parse_facts(_run(facts_command(str(d), names))), str(d)).ok


def test_a_planted_symlink_or_foreign_file_under_any_name_is_refused(tmp_path: Path) -> None:
    """Red team round 2: a symlink planted under a temporary name (server.pid.tmp -> a root
    file) while run_dir was open had root's `>` write through it after a `chmod 700`; every
    entry (two levels) is checked now, not only the names kimi-ops keeps."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    run.chmod(0o700)
    (run / "logs" / "vllm-1.log").write_text("")
    (run / "current.log").symlink_to(run / "logs" / "vllm-1.log")  # kimi-ops makes this one
    assert check_run_dir(parse_facts(_run(facts_command(str(run)))), str(run)).ok
    (run / "server.pid.tmp").symlink_to(tmp_path / "victim")
    v = check_run_dir(parse_facts(_run(facts_command(str(run)))), str(run))
    assert not v.ok and "symlink kimi-ops does not make" in v.problems[0], v
    (run / "server.pid.tmp").unlink()
    if os.geteuid() == 0:  # a file another user owns, one level down
        planted = run / "logs" / "x.tmp"
        planted.write_text("")
        os.chown(planted, 65534, 65534)
        v = check_run_dir(parse_facts(_run(facts_command(str(run)))), str(run))
        assert not v.ok and "owned by another user" in v.problems[0], v


def test_only_run_dirs_own_current_log_symlink_is_exempt(tmp_path: Path) -> None:
    """The one symlink kimi-ops makes is run_dir/current.log; one of that name elsewhere (a
    planted logs/current.log) is no exemption."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    run.chmod(0o700)
    (run / "logs" / "current.log").symlink_to(tmp_path / "victim")
    assert not check_run_dir(parse_facts(_run(facts_command(str(run)))), str(run)).ok


def test_a_run_dir_with_glob_characters_keeps_its_current_log_exempt(tmp_path: Path) -> None:
    run = tmp_path / "run[1]*"
    (run / "logs").mkdir(parents=True)
    run.chmod(0o700)
    (run / "logs" / "vllm-1.log").write_text("")
    (run / "current.log").symlink_to(run / "logs" / "vllm-1.log")
    assert check_run_dir(parse_facts(_run(facts_command(str(run)))), str(run)).ok


def _chown(path: Path, uid: int) -> None:
    try:
        os.chown(path, uid, -1)
    except PermissionError:
        pytest.skip("needs root to give a directory to another user")


@pytest.mark.parametrize(
    ("parent", "ok"),
    [("private", True), ("sticky", True), ("open", False), ("other", False), ("symlink", False)],
)
def test_private_dir_test_checks_the_parents_made_meanwhile(
    tmp_path: Path, parent: str, ok: bool
) -> None:
    # red team round 2's edge: run_dir /tmp/x/kimi with /tmp/x missing at the check; another
    # user makes /tmp/x (sticky /tmp lets them) before our mkdir -p; run_dir is ours, but its
    # parent's owner can rename it away and put their own in its place
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    p = base / "p"
    if parent == "symlink":
        (base / "elsewhere").mkdir(mode=0o755)
        p.symlink_to(base / "elsewhere")
    else:
        p.mkdir()
        p.chmod({"private": 0o755, "sticky": 0o1777, "open": 0o777, "other": 0o755}[parent])
        if parent == "other":
            _chown(p, 65534)
    run = p / "kimi"
    run.mkdir(mode=0o700)
    done = subprocess.run(["sh", "-c", private_dir_test(str(run))], capture_output=True, text=True)
    assert (done.returncode == 0) is ok, done.stderr
    assert ("a parent directory of run_dir" in done.stderr) is not ok


def test_private_dir_test_refuses_a_run_dir_under_a_swapped_ancestor_high_up(
    tmp_path: Path,
) -> None:
    # every ancestor is checked, not only the nearest one
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    top.chmod(0o777)
    run = top / "a" / "b" / "kimi"
    run.mkdir(mode=0o700)
    done = subprocess.run(["sh", "-c", private_dir_test(str(run))], capture_output=True, text=True)
    assert done.returncode != 0 and "a parent directory of run_dir" in done.stderr
