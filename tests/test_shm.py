"""clean-shm decides per file: whether this deployment recorded it, who maps it or holds it open
(issue 12.12; red team 2026-12-06: only files this deployment's server made)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from kimi_ops.shm import (
    INIT_PID,
    Owned,
    ShmFile,
    ShmUsage,
    forget_command,
    human_bytes,
    list_command,
    parse_shm_listing,
    parse_usage,
    plan_shm_cleanup,
    record_command,
    remove_commands,
    to_record,
    usage_command,
)

NOW = 1_000_000.0
OLD = NOW - 600


def test_listing_keeps_only_vllm_shm_files() -> None:
    text = (
        "104857600\t/dev/shm/psm_1a2b3c\n"
        "32\t/dev/shm/sem.mp-abc_123\n"
        "4096\t/dev/shm/nccl-xyz\n"  # not ours to judge
        "12\t/dev/shm/psm_../etc/passwd\n"  # never a path outside /dev/shm
        "x\t/dev/shm/psm_bad\n"
    )
    files = parse_shm_listing(text)
    assert [f.path for f in files] == ["/dev/shm/psm_1a2b3c", "/dev/shm/sem.mp-abc_123"]
    assert "-maxdepth 1" in list_command() and "psm_*" in list_command()
    assert parse_shm_listing("5\t/tmp/t/psm_1\n", "/tmp/t") == [ShmFile("/tmp/t/psm_1", 5)]
    assert parse_shm_listing("5\t/tmp/t/psm_1\n") == []  # not in /dev/shm


def test_usage_output_is_parsed_per_file() -> None:
    text = (
        "dir=/dev/shm\nnow=1000000\n"
        "F\t104857600\t999000.5\t0\t600\t26\t12\t/dev/shm/psm_aaaa\n"
        "F\t32\t999000.5\t0\t600\t26\t14\t/dev/shm/sem.mp-bbbb\n"
        "F\t32\t999999.0\t0\t600\t26\t15\t/dev/shm/psm_young\n"
        "F\t9\t999000.5\t0\t600\t26\t16\t/dev/shm/nccl-1\n"  # not a vLLM name: never listed
        "F\t9\t999000.5\t0\t600\t26\t17\t/other/psm_cccc\n"  # not in the directory
        "O\t26\t12\tpsm_aaaa\nO\t26\t14\tsem.mp-bbbb\nO\t26\t15\tpsm_young\n"
        "O\t26\t99\tpsm_gone\nO\t26\t16\t../etc\n"
        "U 1 0\nU 4242 1000\n"
        "/proc/300/maps:7f00-7f10 rw-s 00000000 00:1a 12 /dev/shm/psm_aaaa\n"
        "/proc/300/maps:7f20-7f30 rw-s 00000000 00:1a 13 /dev/shm/psm_gone (deleted)\n"
        "D\t/proc/301/fd\t/dev/shm/psm_aaaa\n"
    )
    usage = parse_usage(text)
    assert [f.path for f in usage.files] == [
        "/dev/shm/psm_aaaa",
        "/dev/shm/sem.mp-bbbb",
        "/dev/shm/psm_young",
    ]
    assert usage.users == {"/dev/shm/psm_aaaa": frozenset({300, 301})}
    assert usage.unreadable == {1: 0, 4242: 1000} and usage.now == NOW
    assert usage.owned == {
        Owned(26, 12, "psm_aaaa"),
        Owned(26, 14, "sem.mp-bbbb"),
        Owned(26, 15, "psm_young"),
        Owned(26, 99, "psm_gone"),
    }
    plan = plan_shm_cleanup(usage)
    # recorded and unused: removed at any age (a recorded file was mapped by the server)
    assert [f.path for f in plan.files] == ["/dev/shm/sem.mp-bbbb", "/dev/shm/psm_young"]
    kept = {f.path: why for f, why in plan.kept}
    assert kept == {"/dev/shm/psm_aaaa": "still in use by PID 300, 301"}
    # the record forgets what is gone and what this plan removes
    assert plan.forget == (
        Owned(26, 14, "sem.mp-bbbb"),
        Owned(26, 15, "psm_young"),
        Owned(26, 99, "psm_gone"),
    )
    # PID 1 (a sandbox init, unreadable even to root) and a non-root process that cannot open a
    # root-owned 0600 file do not block the cleanup.


def _f(
    name: str, ino: int, size: int = 10, uid: int | None = None, mode: int | None = None
) -> ShmFile:
    return ShmFile(f"/dev/shm/{name}", size, OLD, uid, mode, dev=26, ino=ino)


def _keys(*files: ShmFile) -> frozenset[Owned]:
    """The record naming these files."""
    return frozenset(k for f in files if (k := f.key) is not None)


def test_a_file_this_deployment_did_not_record_is_left_alone() -> None:
    """Red team 2026-12-06: a hand-made psm_rtorphan, and another application's named
    SharedMemory("psm_rtapp_keep") that it closed but kept, were removed (unused, old)."""
    orphan, kept_app, ours = _f("psm_rtorphan", 1), _f("psm_rtapp_keep", 2), _f("psm_ours", 3)
    usage = ShmUsage((orphan, kept_app, ours), {}, {}, NOW, owned=_keys(ours))
    plan = plan_shm_cleanup(usage)
    assert plan.files == (ours,)
    assert plan.not_ours == (orphan, kept_app) and plan.kept == ()
    # the same name with another inode is another file (made anew since): not ours either
    again = ShmUsage((_f("psm_ours", 4),), {}, {}, NOW, owned=_keys(ours))
    assert plan_shm_cleanup(again).files == ()
    # output without device and inode cannot be matched to the record: never removed
    bare = ShmUsage((ShmFile("/dev/shm/psm_x", 1, OLD),), {}, {}, NOW)
    assert plan_shm_cleanup(bare).not_ours == bare.files


def test_the_deployments_processes_files_are_recorded_once() -> None:
    text = (
        "dir=/dev/shm\nnow=1000000\n"
        "F\t4096\t999000\t0\t600\t26\t12\t/dev/shm/psm_new\n"
        "F\t4096\t999000\t0\t600\t26\t13\t/dev/shm/psm_known\n"
        "F\t4096\t999000\t0\t600\t26\t14\t/dev/shm/psm_unused\n"
        "F\t4096\t999000\t0\t600\t\t/dev/shm/psm_bare\n"
        "O\t26\t13\tpsm_known\n"
        "/proc/300/maps:7f00-7f10 rw-s 00000000 00:1a 12 /dev/shm/psm_new\n"
        "/proc/300/maps:7f00-7f10 rw-s 00000000 00:1a 13 /dev/shm/psm_known\n"
        "D\t/proc/301/fd\t/dev/shm/psm_bare\n"
    )
    usage = parse_usage(text)
    assert to_record(usage) == [Owned(26, 12, "psm_new")]
    assert to_record(usage, pids=[999]) == []


def test_a_live_server_of_another_deployment_no_longer_blocks_the_others_files() -> None:
    """The old rule refused the whole cleanup while any vLLM was alive."""
    files = (_f("psm_theirs", 1), _f("psm_ours", 2, 20))
    usage = ShmUsage(
        files,
        {"/dev/shm/psm_theirs": frozenset({777})},
        {},
        NOW,
        owned=_keys(files[1]),
    )
    plan = plan_shm_cleanup(usage)
    assert plan.files == (files[1],) and plan.total_bytes == 20
    assert plan.not_ours == (files[0],) and plan.kept == ()
    # a recorded file a live process (here another one) uses is kept and named
    owned_both = ShmUsage(files, usage.users, {}, NOW, owned=_keys(*files))
    assert plan_shm_cleanup(owned_both).kept == ((files[0], "still in use by PID 777"),)


def test_unreadable_maps_keep_the_files_that_process_could_use() -> None:
    root_file = _f("psm_root", 1, 1, uid=0, mode=0o600)
    user_file = _f("psm_user", 2, 1, uid=1000, mode=0o600)
    open_file = _f("psm_open", 3, 1, uid=0, mode=0o666)
    mine = _keys(root_file, user_file, open_file)
    usage = ShmUsage((root_file, user_file, open_file), {}, {4242: 1000}, NOW, owned=mine)
    plan = plan_shm_cleanup(usage)
    assert plan.files == (root_file,)  # uid 1000 cannot open root's 0600 file
    assert {f.path for f in plan.undecided} == {user_file.path, open_file.path}
    assert all("PID 4242 cannot be read" in why for _, why in plan.kept)
    root_blind = ShmUsage((root_file,), {}, {99: 0}, NOW, owned=mine)
    assert plan_shm_cleanup(root_blind).undecided == (root_file,)
    init_blind = ShmUsage((root_file,), {}, {1: 0}, NOW, owned=mine)
    assert plan_shm_cleanup(init_blind).files == (root_file,)


def test_a_missing_shm_dir_is_said() -> None:
    """Red team 2026-12-06: a shm_dir that does not exist read as "no stale shared memory"."""
    usage = parse_usage("nodir\nO\t26\t12\tpsm_a\n", "/tmp/rt/nonexist-shm")
    assert usage.missing and usage.files == () and usage.directory is None
    assert not parse_usage("dir=/dev/shm\nnow=1\n").missing


def test_remove_commands_quote_and_batch() -> None:
    files = [ShmFile(f"/dev/shm/psm_{i}", 1) for i in range(5)]
    cmds = remove_commands(files, batch=2)
    assert len(cmds) == 3 and all(c.startswith("rm -f -- ") for c in cmds)
    assert remove_commands([ShmFile("/etc/passwd", 1)]) == []


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(300 * 1024 * 1024) == "300.0 MiB"


HOLDER = """
import mmap, os, sys, time
mapped = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(mapped, 4096)
os.close(mapped)                       # mapped only: visible in /proc/PID/maps
held = os.open(sys.argv[2], os.O_RDONLY)  # open only: visible in /proc/PID/fd
print("ready", flush=True)
time.sleep(60)
"""


def _usage(shm_dir: Path, **kw: object) -> ShmUsage:
    """The real command on this machine, repeated until no process's maps were unreadable (other
    processes come and go: one exiting while it was read rightly keeps every file it could have
    opened; seen once in a CI run beside other work)."""
    for _ in range(10):
        out = subprocess.run(
            ["bash", "-c", usage_command(str(shm_dir), **kw)],  # type: ignore[arg-type]
            capture_output=True,
            text=True,
            timeout=60,
        )
        usage = parse_usage(out.stdout, str(shm_dir))
        if not set(usage.unreadable) - {INIT_PID}:
            break
        time.sleep(0.5)
    return usage


def test_the_usage_command_sees_real_mappings_and_open_files(tmp_path: Path) -> None:
    """Run the real commands on this machine: a process (the "server", in its own session) maps
    one file, holds another open; its files are recorded, kept while it lives and removed once
    it is gone; two files it never used are left alone, however old."""
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    record = tmp_path / "shm.owned"
    paths = {n: shm_dir / n for n in ("psm_mapped", "sem.mp-held", "psm_leaked", "psm_fresh")}
    for p in paths.values():
        p.write_bytes(b"\0" * 4096)
    old = time.time() - 600
    for name in ("psm_mapped", "sem.mp-held", "psm_leaked"):
        os.utime(paths[name], (old, old))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(paths["psm_mapped"]), str(paths["sem.mp-held"])],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        by_pid = _usage(shm_dir, owned_file=str(record), pids=[holder.pid])
        by_session = _usage(shm_dir, owned_file=str(record), session=holder.pid)
        new = to_record(by_pid)
        assert {e.name for e in new} == {"psm_mapped", "sem.mp-held"}
        assert to_record(by_session) == new and by_pid.unreadable == {}
        subprocess.run(["bash", "-c", record_command(str(record), new)], check=True)
        usage = _usage(shm_dir, owned_file=str(record))
        assert usage.owned == set(new) and to_record(usage, [holder.pid]) == []
        assert usage.users[str(paths["psm_mapped"])] == {holder.pid}
        assert usage.users[str(paths["sem.mp-held"])] == {holder.pid}
        assert holder.pid not in usage.unreadable
        plan = plan_shm_cleanup(usage)
        kept = {Path(f.path).name: why for f, why in plan.kept}
        assert kept["psm_mapped"] == kept["sem.mp-held"] == f"still in use by PID {holder.pid}"
        assert {Path(f.path).name for f in plan.not_ours} == {"psm_leaked", "psm_fresh"}
        assert plan.files == ()
    finally:
        holder.kill()
        holder.wait()
    plan = plan_shm_cleanup(_usage(shm_dir, owned_file=str(record)))
    assert {Path(f.path).name for f in plan.not_ours} == {"psm_leaked", "psm_fresh"}
    if not plan.undecided:
        assert {Path(f.path).name for f in plan.files} == {"psm_mapped", "sem.mp-held"}
        assert set(plan.forget) == set(new)
    # the record forgets only what it is told to (a line appended meanwhile would stay)
    subprocess.run(["bash", "-c", forget_command(str(record), [new[0]])], check=True)
    assert record.read_text() == new[1].line() + "\n"
    subprocess.run(["bash", "-c", forget_command(str(record), new)], check=True)
    assert record.read_text() == ""


def test_a_file_mapped_or_held_by_another_path_is_in_use(tmp_path: Path) -> None:
    """Red team 2026-12-05: "in use" was decided by path, so a process that reached the file by
    another path (a bind mount, a container's view, here a hard link) did not count, and its
    live ring buffer was removed. Users are matched by device and inode now."""
    shm_dir, elsewhere = tmp_path / "shm", tmp_path / "bound"
    shm_dir.mkdir()
    elsewhere.mkdir()
    mapped, held = shm_dir / "psm_viaother", shm_dir / "sem.mp-viaother"
    for p in (mapped, held):
        p.write_bytes(b"\0" * 4096)
        os.link(p, elsewhere / p.name)
        old = time.time() - 600
        os.utime(p, (old, old))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(elsewhere / mapped.name), str(elsewhere / held.name)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        out = subprocess.run(
            ["bash", "-c", usage_command(str(shm_dir))], capture_output=True, text=True, timeout=60
        )
        usage = parse_usage(out.stdout, str(shm_dir))
        assert holder.pid in usage.users.get(str(mapped), ()), out.stdout[-2000:]
        assert holder.pid in usage.users.get(str(held), ()), out.stdout[-2000:]
        # even recorded as this deployment's, a file in use is kept
        usage = replace(usage, owned=_keys(*usage.files))
        plan = plan_shm_cleanup(usage)
        assert not any(f.path in (str(mapped), str(held)) for f in plan.files)
    finally:
        holder.kill()
        holder.wait()


def test_maps_device_numbers_are_read_as_stat_gives_them() -> None:
    from kimi_ops.shm import st_dev

    assert st_dev(0, 0x1A) == os.makedev(0, 0x1A)
    assert st_dev(259, 0x103) == os.makedev(259, 0x103)
    text = (
        "dir=/dev/shm\nnow=1000000\n"
        f"F\t10\t1.0\t0\t600\t{os.makedev(0, 0x1A)}\t77\t/dev/shm/psm_a\n"
        "/proc/9/maps:7f00-7f10 rw-s 00000000 00:1a 77 /mnt/elsewhere/psm_a\n"
        f"I\t/proc/10/fd/4\t{os.makedev(0, 0x1A)} 77\n"
        "/proc/11/maps:7f00-7f10 rw-s 00000000 00:1b 77 /mnt/other-fs/psm_a\n"
    )
    assert parse_usage(text).users == {"/dev/shm/psm_a": frozenset({9, 10})}


def test_files_only_ending_processes_use_are_planned_for_removal_and_named() -> None:
    """A dry run's kill-stale would end PID 700 first (the real one records its files before it
    signals): its files, even unrecorded, are what the real run removes; a file another live
    process also uses is kept."""
    mine, shared = _f("psm_mine", 1), _f("psm_shared", 2)
    other = _f("psm_other", 3)  # no process of ours uses it, and it was never recorded
    usage = ShmUsage(
        (mine, shared, other),
        {mine.path: frozenset({700}), shared.path: frozenset({700, 9})},
        {},
        NOW,
    )
    plan = plan_shm_cleanup(usage, ending=[700])
    assert plan.files == (mine,) and plan.freed_by_ending == ((mine, (700,)),)
    assert plan.kept == ((shared, "still in use by PID 9"),)
    assert plan.not_ours == (other,)
    assert plan_shm_cleanup(usage).files == ()  # without it: none is ours
