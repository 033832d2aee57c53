"""Process selection: this deployment's server and its tree, never the shell or decoys."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_ops.procs import (
    Listing,
    Proc,
    alive_servers,
    parse_ps,
    parse_signal_output,
    select_server_processes,
    server_args,
    server_port,
    signal_command,
    still_running,
)

FIXTURES = Path(__file__).parent / "fixtures" / "ps"


def test_real_listing_of_the_seed_one_liner_spares_its_shell() -> None:
    """Captured while a shell ran the seed's `pkill -9 -f "python3.*vllm"; ... nohup python3 -m
    vllm...` line: the selection is the server and its child, never that shell."""
    text = (FIXTURES / "seed_oneliner.txt").read_text()
    listing = parse_ps(text)
    assert listing.self_pid == 530
    seed_shell = listing.by_pid()[530]
    assert 'pkill -9 -f "python3.*vllm"' in seed_shell.args  # the trap pkill -f fell into
    assert "python3 -m vllm.entrypoints.openai.api_server" in seed_shell.args
    sel = select_server_processes(listing, port=8000, pidfile_pid=111)
    assert sorted(sel.pids) == [111, 115]
    assert sel.reasons[111].startswith("vLLM server on port 8000")
    assert 115 in sel.reasons  # the forked child (same argv as its parent)
    # Every decoy and the session chain stay.
    for pid in (1, 2, 6, 216, 320, 424, 439, 444, 529, 530, 630):
        assert pid not in sel.pids


def test_a_regex_like_pkill_would_have_hit_the_shell() -> None:
    """The control: the seed's pattern, applied as pkill -f does, selects the shell itself."""
    import re

    listing = parse_ps((FIXTURES / "seed_oneliner.txt").read_text())
    hit = {p.pid for p in listing.procs if re.search("python3.*vllm", p.args)}
    assert 530 in hit  # the shell that runs pkill: why the seed launch vanished


@pytest.mark.parametrize(
    "args",
    [
        "python3 -m vllm.entrypoints.openai.api_server --model /m --port 8000",
        "/root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server --port=8000",
        "/root/ml-env/bin/python3 /root/ml-env/bin/vllm serve /models/k --port 8000",
        "/usr/bin/python3.12 -u -X faulthandler -m vllm.entrypoints.cli.main serve /m",
        "vllm serve /models/k --port 8000",
        "python3 /srv/run/kimi_standin.py --model /m --port 8000",
    ],
)
def test_server_command_lines_are_recognised(args: str) -> None:
    argv = server_args(args)
    assert argv is not None
    assert server_port(argv) == 8000


@pytest.mark.parametrize(
    "args",
    [
        "tail -f /root/vllm_kimi.log",
        "grep vllm",
        "less /root/kimi-ops/logs/vllm.log",
        "vim /root/ml-env/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py",
        "python3 -m vllm_tools --watch",
        "python3 -c import vllm; print(vllm.__version__)",
        'bash -c pkill -9 -f "python3.*vllm"; nohup python3 -m vllm.entrypoints.openai.api_server',
        "sshd: root@notty",
        "python3 -m pip install vllm",
        "python3 /tmp/vllm_bench.py --model x",
        "python3 /srv/run/kimi_standin.py nvidia-smi --query-gpu=index --format=csv",
        "python3 /srv/run/kimi_standin.py vllm-version",
        "",
    ],
)
def test_processes_that_merely_mention_vllm_are_not_servers(args: str) -> None:
    assert server_args(args) is None


def _listing(rows: list[tuple[int, int, int, str]], self_pid: int | None = None) -> Listing:
    return Listing(tuple(Proc(*r) for r in rows), self_pid)


def test_other_ports_are_left_alone_and_titled_orphans_are_taken() -> None:
    listing = _listing(
        [
            (1, 0, 1, "/sbin/init"),
            (100, 1, 100, "python3 -m vllm.entrypoints.openai.api_server --port 8000"),
            (101, 100, 100, "VLLM::EngineCore"),
            (102, 101, 100, "VLLM::Worker_TP0"),
            (200, 1, 200, "python3 -m vllm.entrypoints.openai.api_server --port 9000"),
            (201, 200, 200, "VLLM::EngineCore"),
            (300, 1, 300, "VLLM::Worker_TP3"),  # orphan of a SIGKILLed server
        ]
    )
    sel = select_server_processes(listing, port=8000)
    assert sorted(sel.pids) == [100, 101, 102, 300]
    assert sel.reasons[300] == "orphaned vLLM process"
    assert sorted(select_server_processes(listing, port=8000, include_orphans=False).pids) == [
        100,
        101,
        102,
    ]


def test_pidfile_pid_only_counts_while_its_command_line_matches() -> None:
    reused = _listing([(1, 0, 1, "init"), (4242, 1, 4242, "postgres: checkpointer")])
    assert select_server_processes(reused, port=8000, pidfile_pid=4242).pids == []
    titled = _listing([(1, 0, 1, "init"), (4242, 1, 4242, "VLLM::APIServer")])
    sel = select_server_processes(titled, port=8000, pidfile_pid=4242)
    assert sel.pids == [4242]


def test_process_group_members_follow_a_server_that_reparented_them() -> None:
    listing = _listing(
        [
            (1, 0, 1, "init"),
            (500, 1, 500, "python3 /r/kimi_standin.py --port 8000"),
            (510, 1, 500, "ninja -j 8"),  # reparented, still in the server's group
        ]
    )
    assert sorted(select_server_processes(listing, port=8000).pids) == [500, 510]


def test_the_listing_shell_and_its_ancestors_are_never_selected() -> None:
    # A server that (absurdly) is an ancestor of the shell running the listing.
    listing = _listing(
        [
            (1, 0, 1, "init"),
            (10, 1, 10, "python3 -m vllm.entrypoints.openai.api_server --port 8000"),
            (11, 10, 10, "bash -c ps"),
            (12, 11, 10, "ps -eww"),
        ],
        self_pid=11,
    )
    sel = select_server_processes(listing, port=8000)
    assert sel.pids == []  # the server is the shell's ancestor; 12 is the shell's own ps
    assert 10 in sel.protected


def test_alive_servers_finds_every_port() -> None:
    listing = _listing(
        [
            (1, 0, 1, "init"),
            (5, 1, 5, "python3 -m vllm.entrypoints.openai.api_server --port 8000"),
            (6, 1, 6, "vllm serve /m --port 9001"),
        ]
    )
    assert sorted(alive_servers(listing).pids) == [5, 6]


def test_still_running_ignores_reused_pids() -> None:
    before = select_server_processes(
        _listing([(1, 0, 1, "init"), (7, 1, 7, "vllm serve /m --port 8000")]), port=8000
    )
    assert still_running(before, _listing([(7, 1, 7, "vllm serve /m --port 8000")])) != []
    assert still_running(before, _listing([(7, 1, 7, "bash")])) == []
    assert still_running(before, _listing([])) == []


def test_signal_command_and_its_output() -> None:
    cmd = signal_command("TERM", [12, 34])
    assert "kill -TERM" in cmd and "12 34" in cmd and "\n" not in cmd
    assert parse_signal_output("sent 12\ngone 34\n") == ([12], [34])
    with pytest.raises(ValueError):
        signal_command("TERM; rm -rf /", [1])


def test_parse_ps_skips_garbage_and_reads_self_pid() -> None:
    listing = parse_ps("self_pid=77\n  1 0 1 init\nnot a row\n 5 1 5\n")
    assert listing.self_pid == 77
    assert [p.pid for p in listing.procs] == [1, 5]
    assert listing.procs[1].args == ""
