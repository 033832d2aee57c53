"""Ownership: which processes are this deployment's, from one /proc listing (plain data).

Fixtures are real listings: ownership_listing.txt (two deployments' vLLM-shaped trees, one with
its API server SIGKILLed; scripts/capture_ownership_listing.py) and real_vllm_listing.txt (the
real vLLM CPU engine's tree). seed_oneliner.txt is the old ``ps`` text (legacy format).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kimi_ops.procs import (
    Listing,
    Proc,
    format_row,
    norm_dir,
    owned_processes,
    parse_listing,
    parse_ps,
    parse_signal_output,
    protected_pids,
    server_args,
    server_port,
    signal_command,
    still_running,
)

FIXTURES = Path(__file__).parent / "fixtures" / "ps"
A, B = "/srv/kimi-a", "/srv/kimi-b"


def _fixture(name: str) -> tuple[Listing, dict[str, int]]:
    """The listing and the PIDs its header names (session of tree A, of tree B...)."""
    text = (FIXTURES / name).read_text()
    head = {m[0]: int(m[1]) for m in re.findall(r"(tree A|tree B|foreign|odd)\D*?(\d+)", text)}
    return parse_listing(text), head


def _env(run_dir: str, launch: str = "L1") -> tuple[tuple[str, str], ...]:
    return (("KIMI_OPS_LAUNCH_ID", launch), ("KIMI_OPS_RUN_DIR", run_dir))


# --- the listing ------------------------------------------------------------------------------


def test_real_listing_reads_exact_argv_env_and_sessions() -> None:
    listing, head = _fixture("ownership_listing.txt")
    by = listing.by_pid()
    a, b = head["tree A"], head["tree B"]
    assert a not in by  # SIGKILLed: its children live on
    tree_a = [p for p in listing.procs if p.sid == a]
    assert sorted(p.argv[0] for p in tree_a) == [
        "VLLM::EngineCore",
        "VLLM::Worker",
        "python3",
        "sleep",
    ]
    assert all(p.run_dir == A and p.launch_id == "launch-a1" for p in tree_a)
    server_b = by[b]
    assert server_b.argv == (
        "python3", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/k --port 9000", "--port", "8000",
    )  # fmt: skip
    odd = by[head["odd"]]
    assert odd.argv[odd.argv.index("--model") + 1] == "a\tb\nc"  # one element, tab and newline
    assert by[1].env is None  # PID 1's environ is unreadable here (a sandbox init)
    # Only KIMI_OPS_* variables are printed (the trees carried HF_TOKEN too).
    assert all(name.startswith("KIMI_OPS_") for p in listing.procs for name, _ in p.env or ())
    assert "hf_secret" not in (FIXTURES / "ownership_listing.txt").read_text()


def test_setproctitle_padding_is_dropped_from_the_real_engines_titles() -> None:
    listing, _ = _fixture("real_vllm_listing.txt")
    titles = [p.argv for p in listing.procs if p.argv[0].startswith("VLLM::")]
    assert titles == [("VLLM::EngineCore",), ("VLLM::Worker",)]


def test_rows_round_trip_and_garbage_is_skipped() -> None:
    p = Proc(5, 1, 5, ("a\tb", "c\\d", "x\ny", "", "e\r"), 5, _env("/r\t"), "S")
    assert parse_listing(format_row(p)).procs == (p,)
    q = Proc(6, 1, 6, ("x",), 6, None, "Z")
    assert parse_listing("junk\n" + format_row(q) + "\n7 1 7\n").procs[0] == q
    legacy = parse_ps("self_pid=77\n  1 0 1 init\nnot a row\n 5 1 5 vllm serve /m\n")
    assert legacy.self_pid == 77 and legacy.procs[1].argv == ("vllm", "serve", "/m")
    assert legacy.procs[1].env is None and legacy.procs[1].sid is None


# --- port detection (issue 12.10) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "port"),
    [
        (["--model", "/m", "--port", "8001"], 8001),
        (["--port=8001"], 8001),
        (["--port", "8001", "--port", "8002"], 8002),  # argparse: the last one wins
        (["--port=8001", "--port", "8002"], 8002),
        (["--model", "/models/x --port 9000", "--port", "8001"], 8001),  # one element: not a flag
        (["--model", "/models/x --port 9000"], 8000),  # vLLM's default
        (["--config", "serve.yaml"], None),  # the YAML may set the port: unknown
        (["--config=serve.yaml", "--port", "8001"], None),
        (["--por", "8001"], None),  # argparse's prefix matching: do not guess
        (["--port", "eighty"], None),
        (["--port", "²"], None),
        (["--port"], None),
        (["--", "--port", "9000"], 8000),
    ],
)
def test_server_port_reads_argv_like_vllms_parser(argv: list[str], port: int | None) -> None:
    assert server_port(argv) == port


def test_a_model_path_with_port_text_does_not_make_another_server_ours_or_foreign() -> None:
    """Old code split args on whitespace and took the first --port: this server was on 8000."""
    p = Proc(40, 1, 40, ("vllm", "serve", "/m --port 8000", "--port", "9001"), 40, ())
    sel = owned_processes(Listing((p,)), A, port=8000)
    assert sel.pids == [] and sel.foreign == ()
    assert server_port(server_args(p.argv) or []) == 9001


@pytest.mark.parametrize(
    "argv",
    [
        "python3 -m vllm.entrypoints.openai.api_server --model /m --port 8000",
        "/root/ml-env/bin/python3 /root/ml-env/bin/vllm serve /models/k --port 8000",
        "/usr/bin/python3.12 -u -X faulthandler -m vllm.entrypoints.cli.main serve /m",
        "vllm serve /models/k --port 8000",
        "python3 /srv/run/kimi_standin.py --model /m --port 8000",
    ],
)
def test_server_command_lines_are_recognised(argv: str) -> None:
    args = server_args(argv.split())
    assert args is not None and server_port(args) == 8000


@pytest.mark.parametrize(
    "argv",
    [
        ["tail", "-f", "/root/vllm_kimi.log"],
        ["python3", "-m", "vllm_tools", "--watch"],
        ["python3", "-c", "import vllm"],
        ["bash", "-c", "nohup python3 -m vllm.entrypoints.openai.api_server"],
        ["python3", "/srv/run/kimi_standin.py", "nvidia-smi"],
        ["VLLM::EngineCore"],
        [],
    ],
)
def test_processes_that_merely_mention_vllm_are_not_servers(argv: list[str]) -> None:
    assert server_args(argv) is None


# --- ownership (issues 12.11 and 11.5) --------------------------------------------------------


def test_orphans_of_this_deployment_are_ours_and_the_identical_other_tree_is_not() -> None:
    listing, head = _fixture("ownership_listing.txt")
    a, b = head["tree A"], head["tree B"]
    sel = owned_processes(listing, A, pidfile_pid=a, current_launch_id="launch-a1", port=8000)
    by = listing.by_pid()
    assert sorted(sel.pids) == sorted(p.pid for p in listing.procs if p.sid == a)
    assert len(sel.pids) == 4  # resource_tracker, its child, EngineCore, Worker
    assert set(sel.orphans) == set(sel.pids)  # the API server is gone
    assert set(sel.current) == set(sel.pids)
    assert all(by[pid].run_dir == A for pid in sel.pids)
    # Tree B has the same titles and port: left alone, and its server named in the report.
    assert not [pid for pid in sel.pids if by[pid].sid == b]
    assert (
        by[b],
        "vLLM server on port 8000, another deployment's (KIMI_OPS_RUN_DIR=/srv/kimi-b)",
    ) in sel.foreign
    assert any(p.pid == head["foreign"] and "cannot be known" in why for p, why in sel.foreign)
    # The listing shell and its ancestors are never selected, whatever their environment.
    assert listing.self_pid not in sel.pids and 1 not in sel.pids


def test_the_other_deployment_sees_its_own_tree_not_orphans() -> None:
    listing, head = _fixture("ownership_listing.txt")
    b = head["tree B"]
    sel = owned_processes(listing, B + "/", pidfile_pid=b, current_launch_id="launch-b1")
    assert sorted(sel.pids) == sorted(p.pid for p in listing.procs if p.sid == b)
    assert sel.orphans == frozenset()
    assert "KIMI_OPS_RUN_DIR of this deployment, this launch" in sel.reasons[b]


def test_titles_and_ports_alone_never_make_a_process_ours() -> None:
    listing = Listing(
        (
            Proc(1, 0, 1, ("init",), 1),
            Proc(300, 1, 300, ("VLLM::EngineCore",), 300, ()),  # someone's orphan, no env
            Proc(310, 1, 310, ("python3", "/x/kimi_standin.py", "--port", "8000"), 310, ()),
            Proc(320, 1, 320, ("VLLM::Worker",), 320, None),  # env unreadable, other session
        )
    )
    sel = owned_processes(listing, A, pidfile_pid=999, current_launch_id="L1", port=8000)
    assert sel.pids == []
    assert [p.pid for p, _ in sel.foreign] == [310]


def test_stale_launches_are_ours_and_marked_so() -> None:
    listing = Listing(
        (
            Proc(100, 1, 100, ("vllm", "serve", "/m"), 100, _env(A, "new")),
            Proc(200, 1, 150, ("VLLM::EngineCore",), 150, _env(A, "old")),  # older launch
        )
    )
    sel = owned_processes(listing, A, pidfile_pid=100, current_launch_id="new")
    assert sorted(sel.pids) == [100, 200]
    assert sel.current == {100} and sel.stale == {200} and sel.orphans == {200}
    assert "launch old" in sel.reasons[200]


def test_unreadable_environment_counts_only_inside_our_sessions() -> None:
    listing = Listing(
        (
            Proc(100, 1, 100, ("vllm", "serve", "/m"), 100, _env(A)),
            Proc(101, 1, 100, ("VLLM::EngineCore",), 100, None),  # our session: ours
            Proc(102, 1, 102, ("VLLM::EngineCore",), 102, None),  # another session: not
            Proc(103, 101, 100, ("worker",), 100, (("KIMI_OPS_RUN_DIR", B),)),  # names B
        )
    )
    sel = owned_processes(listing, A, pidfile_pid=100, current_launch_id="L1")
    assert sorted(sel.pids) == [100, 101]
    assert "environment unreadable" in sel.reasons[101]


def test_children_follow_unless_they_name_another_deployment() -> None:
    listing = Listing(
        (
            Proc(100, 1, 100, ("vllm", "serve", "/m"), 100, _env(A)),
            Proc(110, 100, 110, ("ninja", "-j8"), 110, ()),  # cleared env, own session
            Proc(111, 110, 110, ("cc1plus",), 110, ()),
        )
    )
    sel = owned_processes(listing, A, pidfile_pid=100)
    assert sorted(sel.pids) == [100, 110, 111]
    assert sel.reasons[111] == "child of 110"


def test_a_server_launched_before_the_variable_is_ours_only_as_the_pidfiles_session_leader() -> (
    None
):
    listing, _ = _fixture("real_vllm_listing.txt")
    tree = sorted(p.pid for p in listing.procs)
    sel = owned_processes(listing, A, pidfile_pid=20692, port=18391)
    assert sorted(sel.pids) == tree  # API server, resource_tracker, EngineCore, Worker
    assert "launched without KIMI_OPS_RUN_DIR" in sel.reasons[20692]
    # Without the pidfile, or on another port, the same tree is not ours: only reported.
    assert owned_processes(listing, A, pidfile_pid=None, port=18391).pids == []
    other = owned_processes(listing, A, pidfile_pid=20692, port=8000)
    assert other.pids == [] and other.foreign == ()
    # A pidfile PID reused by a process that is not a session leader is not ours either.
    reused = Listing((Proc(20692, 1, 5, listing.procs[0].argv, 5, ()),))
    assert owned_processes(reused, A, pidfile_pid=20692, port=18391).pids == []


def test_the_listing_shell_and_its_ancestors_are_never_selected() -> None:
    listing = Listing(
        (
            Proc(1, 0, 1, ("init",), 1, _env(A)),
            Proc(10, 1, 10, ("vllm", "serve", "/m"), 10, _env(A)),
            Proc(11, 10, 10, ("bash", "-c", "listing"), 10, _env(A)),
            Proc(12, 11, 10, ("cat",), 10, _env(A)),
            Proc(13, 10, 10, ("VLLM::EngineCore",), 10, _env(A)),
        ),
        self_pid=11,
    )
    sel = owned_processes(listing, A, pidfile_pid=10)
    assert sel.pids == [13]
    assert {10, 11, 12} <= sel.protected


def test_still_running_ignores_reused_pids_and_zombies() -> None:
    p = Proc(7, 1, 7, ("vllm", "serve", "/m"), 7, _env(A))
    before = owned_processes(Listing((p,)), A)
    assert still_running(before, Listing((p,))) == [p]
    assert still_running(before, Listing((Proc(7, 1, 7, ("bash",), 7, ()),))) == []
    assert still_running(before, Listing((Proc(7, 1, 7, p.argv, 7, (), "Z"),))) == []
    assert still_running(before, Listing(())) == []


def test_signal_command_and_its_output() -> None:
    cmd = signal_command("TERM", [12, 34])
    assert "kill -TERM" in cmd and "12 34" in cmd and "\n" not in cmd
    assert parse_signal_output("sent 12\ngone 34\n") == ([12], [34])
    with pytest.raises(ValueError):
        signal_command("TERM; rm -rf /", [1])


def test_the_seed_one_liners_shell_is_never_taken_from_the_legacy_listing() -> None:
    """The old ps fixture: the seed's shell (whose argv holds the pkill pattern) is protected,
    and without sessions or environments nothing there is provably ours."""
    listing = parse_ps((FIXTURES / "seed_oneliner.txt").read_text())
    assert listing.self_pid == 530
    hit = {p.pid for p in listing.procs if re.search("python3.*vllm", p.args)}
    assert 530 in hit  # the trap pkill -f fell into
    sel = owned_processes(listing, "/root/kimi-ops", pidfile_pid=111, port=8000)
    assert sel.pids == []
    assert {530, 444} <= protected_pids(listing)  # the shell and its sshd session


def _real(name: str) -> tuple[Listing, int, str]:
    text = (FIXTURES / name).read_text()
    m = re.search(r"pidfile_pid=(\d+) launch_id=(\S+)", text)
    assert m
    return parse_listing(text), int(m[1]), m[2]


def test_the_real_engines_titled_processes_are_ours_by_session() -> None:
    """The real engine launched by kimi-ops: setproctitle wiped the environment of EngineCore
    and Worker; they are ours as members of the launch's session."""
    listing, pidfile, launch = _real("real_vllm_kimi_launch.txt")
    titled = [p for p in listing.procs if p.argv[0].startswith("VLLM::")]
    assert [p.argv for p in titled] == [("VLLM::EngineCore",), ("VLLM::Worker",)]
    assert all(p.env == () for p in titled)  # readable, but nothing left in it
    sel = owned_processes(listing, "/tmp/own/real/run", pidfile, launch, port=18777)
    assert sorted(sel.pids) == sorted(p.pid for p in listing.procs)  # server, tracker, g++...
    assert sel.orphans == frozenset() and sel.current == set(sel.pids)
    for p in titled:
        assert (
            sel.reasons[p.pid]
            == f"in session {pidfile} of this deployment (no KIMI_OPS_RUN_DIR left in it)"
        )
    # Another deployment sees none of it; a foreign run_dir never takes it by session.
    assert owned_processes(listing, "/srv/other", None, None, port=18777).pids == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("real_vllm_kimi_orphans.txt", ["VLLM::EngineCore", "VLLM::Worker", "g++", "python"]),
        ("real_vllm_kimi_orphans_serving.txt", ["VLLM::EngineCore", "VLLM::Worker", "python"]),
    ],
)
def test_the_real_engines_orphans_after_kill_9_of_the_api_server(
    name: str, expected: list[str]
) -> None:
    listing, pidfile, launch = _real(name)
    assert pidfile not in listing.by_pid()
    sel = owned_processes(listing, "/tmp/own/real/run", pidfile, launch, port=18777)
    names = sorted(p.argv[0].rsplit("/", 1)[-1] for p in sel.targets)
    assert names == expected and sorted(sel.pids) == sorted(p.pid for p in listing.procs)
    assert sel.orphans == set(sel.pids)
    # Without the pidfile the tracker's environment still names the session.
    assert sorted(owned_processes(listing, "/tmp/own/real/run").pids) == sorted(sel.pids)


def test_a_reused_pidfile_pid_leading_a_foreign_session_gives_nothing() -> None:
    listing = Listing(
        (
            Proc(500, 1, 500, ("sshd: bob",), 500, ()),  # the pidfile's PID, reused
            Proc(501, 500, 500, ("VLLM::EngineCore",), 500, ()),
        )
    )
    assert owned_processes(listing, A, pidfile_pid=500, port=8000).pids == []


# --- r2 F9: a non-normalised run_dir names the same deployment ----------------------------------


@pytest.mark.parametrize("spelled", [A + "//", "/srv//kimi-a", "/srv/./kimi-a", "/srv/x/../kimi-a"])
def test_a_run_dir_spelled_with_extra_slashes_or_dots_owns_its_server(spelled: str) -> None:
    listing = Listing((Proc(100, 1, 100, ("vllm", "serve", "/m"), 100, _env(A)),))
    sel = owned_processes(listing, spelled, pidfile_pid=100, current_launch_id="L1", port=8000)
    assert sel.pids == [100] and sel.foreign == ()


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/srv/s1//run", "/srv/s1/run"),
        ("/srv/s1/./run/", "/srv/s1/run"),
        ("//srv/run", "/srv/run"),
        ("~//kimi-ops/./run", "~/kimi-ops/run"),
        ("/", "/"),
    ],
)
def test_norm_dir(path: str, normal: str) -> None:
    assert norm_dir(path) == normal
