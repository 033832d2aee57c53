from __future__ import annotations

from kimi_ops.shm import (
    ShmFile,
    human_bytes,
    list_command,
    parse_shm_listing,
    plan_shm_cleanup,
    remove_commands,
)


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


def test_refuses_while_a_server_is_alive() -> None:
    files = [ShmFile("/dev/shm/psm_1", 10)]
    plan = plan_shm_cleanup(files, [4321])
    assert plan.files == () and plan.refused is not None and "4321" in plan.refused
    free = plan_shm_cleanup(files, [])
    assert free.refused is None and free.total_bytes == 10


def test_remove_commands_quote_and_batch() -> None:
    files = [ShmFile(f"/dev/shm/psm_{i}", 1) for i in range(5)]
    cmds = remove_commands(files, batch=2)
    assert len(cmds) == 3 and all(c.startswith("rm -f -- ") for c in cmds)
    assert remove_commands([ShmFile("/etc/passwd", 1)]) == []


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(300 * 1024 * 1024) == "300.0 MiB"
