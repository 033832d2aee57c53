"""Fleet logic without SSH: batching, rolling, fail-fast, the recap and the live board."""

from __future__ import annotations

import io
import threading

from tasks.fleet import HostOutcome, recap_json, recap_table, run_fleet
from tasks.report import FleetBoard, Reporter


def _runner(fail: set[str], seen: list[str]):
    lock = threading.Lock()

    def run_one(spec: str, cancel: threading.Event) -> HostOutcome:
        with lock:
            seen.append(spec)
        return HostOutcome(
            spec, "failed" if spec in fail else "ready", "verify" if spec in fail else ""
        )

    return run_one


def test_all_hosts_run_and_one_failure_does_not_stop_the_others() -> None:
    seen: list[str] = []
    out = run_fleet(["a", "b", "c", "d"], _runner({"b"}, seen), parallel=4)
    assert sorted(seen) == ["a", "b", "c", "d"]
    assert [o.result for o in out] == ["ready", "failed", "ready", "ready"]


def test_rolling_stops_after_the_failed_batch() -> None:
    seen: list[str] = []
    out = run_fleet(["a", "b", "c", "d", "e"], _runner({"c"}, seen), parallel=8, rolling=2)
    assert sorted(seen) == ["a", "b", "c", "d"]  # batches [a,b], [c,d]; [e] never starts
    assert out[4].result == "skipped" and "roll stopped" in out[4].step


def test_fail_fast_skips_hosts_not_yet_started() -> None:
    seen: list[str] = []
    out = run_fleet(["a", "b", "c"], _runner({"a"}, seen), parallel=1, fail_fast=True)
    assert seen == ["a"]
    assert [o.result for o in out] == ["failed", "skipped", "skipped"]


def test_a_crashing_host_is_a_failed_row_not_a_crash() -> None:
    def boom(spec: str, cancel: threading.Event) -> HostOutcome:
        raise RuntimeError("bug")

    (row,) = run_fleet(["a"], boom, parallel=1)
    assert row.result == "failed" and "RuntimeError: bug" in row.message


def test_recap_table_and_json() -> None:
    rows = [HostOutcome("a", "ready", "", "healthy", 7.5, 42), HostOutcome("b", "failed", "launch")]
    table = recap_table(rows).splitlines()
    assert table[0] == "RECAP" and table[1].split() == [
        "host",
        "result",
        "step",
        "label",
        "time",
        "pid",
    ]
    assert table[2].split() == ["a", "ready", "healthy", "7.5s", "42"]
    assert '"step": "launch"' in recap_json("deploy", rows)


def test_board_redraws_one_line_per_host_in_place() -> None:
    stream = io.StringIO()
    board = FleetBoard(["gpu1", "gpu2"], stream)
    rep = Reporter("gpu2", stream=stream, board=board)
    rep.progress("verify", "loading_shards 3/64")
    rep.progress("verify", "loading_shards 9/64")
    text = stream.getvalue()
    assert text.count("\x1b[2F") == 1  # the second draw moved up over the first
    assert text.rstrip("\n").splitlines()[-1].endswith("gpu2  verify: loading_shards 9/64")
    assert "gpu1  waiting" in text


def test_each_host_s_connection_has_its_own_config() -> None:
    """Fabric keeps the Config a Connection is given and writes to its connect_kwargs; shared
    between the fleet's threads, a write re-merges it while another host reads its key files
    (CI saw "No authentication methods available" on the second host of a two-host status)."""
    from fabric import Config, Connection

    from tasks.fleet import connection_for

    config = Config(overrides={"connect_kwargs": {"key_filename": ["/keys/id_ed25519"]}})
    parent = Connection("root@127.0.0.1", config=config)
    a = connection_for(parent, "root@127.0.0.1:2201")
    b = connection_for(parent, {"host": "127.0.0.2", "port": 2202, "user": "root"})
    assert a.config is not b.config and a.config is not parent.config
    a.connect_kwargs["banner_timeout"] = 3
    assert "banner_timeout" not in b.connect_kwargs
    assert b.connect_kwargs["key_filename"] == ["/keys/id_ed25519"]
    assert (a.host, a.port, b.host, b.port) == ("127.0.0.1", 2201, "127.0.0.2", 2202)
