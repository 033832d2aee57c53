"""Many hosts at once: one worker per host, each on its own Connection, then a recap.

``fab -H a,b,c deploy`` would make Fabric run deploy on a, then b, then c. The
:class:`FleetExecutor` (installed as ``tasks.executor_class`` by the collection) hands the whole
host list to a fleet-capable task instead, which runs the hosts concurrently (bounded by
``kimi.parallel``); hosts may also come from ``kimi.hosts``. One host failing does not stop or
corrupt the others (``--fail-fast`` stops them at their next step). ``--rolling N`` replaces
servers N hosts at a time and stops the roll at the first host that does not become ready,
leaving the remaining hosts on their old servers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from fabric import Connection, Executor
from invoke import Context
from invoke.exceptions import Exit

from kimi_ops.hoststate import STATE_CODES

from .host import host_label

#: Tasks that run on many hosts at once.
FLEET_TASKS = frozenset(
    {"deploy", "verify", "status", "stop", "preflight"}
    | {"router-deploy", "router-status", "router-stop"}  # the hosts are the router's replicas
)


class FleetExecutor(Executor):
    """Fabric's executor, except that a fleet task given several hosts is called once with
    all of them (``fleet_hosts``) instead of once per host, one after another."""

    def expand_calls(self, calls: list[Any], apply_hosts: bool = True) -> list[Any]:
        host_str = self.core[0].args.hosts.value if apply_hosts else None
        hosts = [h for h in (host_str or "").split(",") if h]
        if len(hosts) < 2:
            return super().expand_calls(calls, apply_hosts)
        out: list[Any] = []
        for call in calls:
            if call.task.name in FLEET_TASKS:
                kwargs = {**call.kwargs, "fleet_hosts": self.normalize_hosts(hosts)}
                out.append(call.clone(with_={"kwargs": kwargs}))
            else:
                out.extend(super().expand_calls([call], apply_hosts))
        return out


@dataclass
class HostOutcome:
    """One row of the recap."""

    host: str
    # ready / ok / failed / skipped / dry run; status: the state (serving, ...)
    result: str = "skipped"
    step: str = ""  # the step that failed (or why skipped)
    label: str = ""  # the diagnosis label, when there is one
    seconds: float = 0.0
    pid: int | None = None
    message: str = ""
    report: dict[str, Any] | None = None  # preflight's {"checks", "plan"} for this host


def connection_for(c: Context, spec: Any) -> Any:
    """A Connection for one host (from -H's parsed form, or a ``kimi.hosts`` string); a
    Context or Connection given as the spec is the host itself (a one-host run).

    Each gets its own copy of the config: Fabric keeps the Config it is given, and a
    Connection writes to it (its connect_kwargs: the key files, the banner timeout). Shared
    between the fleet's threads, one host's write re-merges the config while another host
    reads its connect_kwargs, which can then lack the key files ("No authentication methods
    available", seen in CI on a two-host status)."""
    if isinstance(spec, Context):
        return spec
    if isinstance(spec, str):
        return Connection(spec, config=c.config.clone())
    return Connection(config=c.config.clone(), **spec)


def host_name(spec: Any) -> str:
    """The host as the user typed it (the same name in every line and in the recap)."""
    if isinstance(spec, Context):
        return host_label(spec)
    if isinstance(spec, str):
        return spec
    port = spec.get("port")
    user = spec.get("user")
    name = spec.get("host", "?")
    return (f"{user}@" if user else "") + name + (f":{port}" if port else "")


RunOne = Callable[[Connection, threading.Event], HostOutcome]


def run_fleet(
    specs: Sequence[dict[str, Any] | str],
    run_one: RunOne,
    *,
    parallel: int,
    fail_fast: bool = False,
    rolling: int | None = None,
) -> list[HostOutcome]:
    """Run ``run_one`` on every host, ``parallel`` at a time (``rolling``: in batches of N that
    stop at the first failed batch). Returns one outcome per host, in the given order."""
    outcomes = [HostOutcome(host_name(s)) for s in specs]
    cancel = threading.Event()

    def work(i: int, conn_spec: dict[str, Any] | str) -> None:
        if cancel.is_set():
            outcomes[i].step = "not started: another host failed (--fail-fast)"
            return
        outcome = run_one_safely(run_one, conn_spec, cancel)
        outcomes[i] = outcome
        if outcome.result == "failed" and fail_fast:
            cancel.set()

    batches = (
        [list(range(i, min(i + rolling, len(specs)))) for i in range(0, len(specs), rolling)]
        if rolling
        else [list(range(len(specs)))]
    )
    for n, batch in enumerate(batches):
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(batch)))) as pool:
            for i in batch:
                pool.submit(work, i, specs[i])
        if rolling and any(outcomes[i].result == "failed" for i in batch):
            for later in batches[n + 1 :]:
                for i in later:
                    outcomes[i].step = "roll stopped: an earlier host failed; old server left"
            break
    return outcomes


def run_one_safely(
    run_one: RunOne, spec: dict[str, Any] | str, cancel: threading.Event
) -> HostOutcome:
    started = time.monotonic()
    name = host_name(spec)
    try:
        outcome = run_one(spec, cancel)  # type: ignore[arg-type]
    except Exception as exc:  # one host's bug must not take the others down
        outcome = HostOutcome(name, "failed", "internal", message=f"{type(exc).__name__}: {exc}")
    outcome.seconds = round(time.monotonic() - started, 1)
    return outcome


def recap_table(outcomes: Sequence[HostOutcome]) -> str:
    rows = [("host", "result", "step", "label", "time", "pid")]
    for o in outcomes:
        rows.append((o.host, o.result, o.step, o.label, f"{o.seconds:.1f}s", str(o.pid or "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "RECAP\n" + "\n".join(lines)


def recap_json(task: str, outcomes: Sequence[HostOutcome]) -> str:
    return json.dumps({"task": task, "hosts": [asdict(o) for o in outcomes]}, indent=2)


#: The recap's result for a host of a dry run that did not fail (it changed nothing).
DRY_RUN = "dry run"


def exit_code(task: str, outcomes: Sequence[HostOutcome]) -> int:
    """0 when every host is ready / ok / dry run; for status, the highest state code of any host (a
    host whose state could not be read counts 1); else 1."""
    if task == "status":
        return max((STATE_CODES.get(o.result, 1) for o in outcomes), default=0)
    return 0 if all(o.result in ("ready", "ok", DRY_RUN) for o in outcomes) else 1


def finish(task: str, outcomes: Sequence[HostOutcome], as_json: bool) -> None:
    print(recap_json(task, outcomes) if as_json else recap_table(outcomes), flush=True)
    code = exit_code(task, outcomes)
    if code:
        raise Exit(code=code)
