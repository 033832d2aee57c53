"""verify: poll the server until it answers, dies or times out, with the log's diagnosis."""

from __future__ import annotations

import codecs
import time
from dataclasses import replace

from kimi_ops import liveserver
from kimi_ops import verify as vfy
from kimi_ops.profile import Profile
from kimi_ops.result import StepResult, failed, ok

from ..host import Host
from ..report import Reporter
from .common import Clock, Sleep, _probe_command, _run_dir
from .processes import adopt_server, record_shm

#: Seconds between two records of the shm files a starting server uses (clean-shm removes only
#: recorded files; a server that crashes later still has its files recorded).
RECORD_EVERY = 5.0


def _poll(
    h: Host,
    p: Profile,
    step: str,
    offset: int,
    decoder: codecs.IncrementalDecoder | None,
    *,
    mutating: bool = False,
) -> tuple[vfy.PollFacts, liveserver.Adopted | None]:
    """One poll. When the pidfile names no PID but ``launch.id`` names a launch, the server is
    looked for by that launch id (:func:`adopt_server`, which puts the pidfile back when safe):
    a moved pidfile does not make a live server "exited"."""
    r = _run_dir(p)
    out = h.run(vfy.poll_command(r, offset), step=step, mutating=mutating)
    facts = vfy.parse_poll(out.stdout, decoder, r)
    if facts.alive or facts.pid is not None or not facts.launch_id:
        return facts, None
    adopted = adopt_server(h, p, step)
    if adopted is None or adopted.launch_id != facts.launch_id:
        return facts, None
    server = liveserver.as_pidfile_process(adopted.proc)
    alive = server.server_alive(r)
    return replace(facts, pid=server.pid, alive=alive, stopped=alive and server.stopped), adopted


def verify(
    h: Host,
    p: Profile,
    reporter: Reporter,
    *,
    step: str = "verify",
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
    from_end: bool = False,
    expect_launch_id: str | None = None,
) -> StepResult:
    """Poll until ready, failed, or startup_timeout (see :mod:`kimi_ops.verify`).

    ``expect_launch_id``: the launch this run started; verify fails if another launch replaced
    it rather than follow a server this run did not start."""
    r = _run_dir(p)
    state = vfy.VerifyState(
        p.served_model_name,
        p.startup_timeout,
        p.stall_timeout,
        context={"port": p.port, "served_model_name": p.served_model_name},
        expected_launch_id=expect_launch_id,
    )
    start = clock()
    probe = _probe_command(p)
    decoder = vfy.log_decoder()
    notes: dict[int, str] = {}  # a server found by its launch id: what was done, once per PID
    recorded_at: float | None = None
    while True:
        facts, adopted = _poll(h, p, step, state.offset, decoder)
        if adopted is not None:
            notes.setdefault(adopted.proc.pid, adopted.note(r))
        if facts.log_exists and facts.log_size < state.offset:  # a new log: nothing pending
            decoder = vfy.log_decoder()
        verdict = state.feed_poll(facts, clock() - start)
        if (
            facts.alive
            and facts.pid
            and (recorded_at is None or clock() - recorded_at >= RECORD_EVERY)
        ):
            # the server leads its own session: its members are its tree
            record_shm(h, p, step, session=facts.pid)
            recorded_at = clock()
        if verdict.probe_due and not verdict.done:
            res = h.run(probe, step=step, check=False, mutating=False, timeout=90)
            answer, port = vfy.read_probe(res.stdout, res.stderr, facts.pid, p.port, p.host)
            verdict = state.feed_probe(answer, clock() - start, port)
            if verdict.ok and expect_launch_id:
                # The answer came from the port: prove the launch there is still this run's,
                # and (run through the lock guard, as mutating commands are) that this run
                # still holds the deployment lock: a run that lost it never reports ready.
                # (A dry run prints mutating commands instead of running them: not this read.)
                facts, _ = _poll(h, p, step, state.offset, None, mutating=not h.dry)
                recheck = state.feed_poll(facts, clock() - start)
                if recheck.done:  # replaced, stopped or gone meanwhile
                    verdict = recheck
        if verdict.done:
            break
        reporter.progress(step, verdict.message)
        if facts.read < vfy.MAX_POLL_BYTES:  # caught up with the log: wait for more
            sleep(p.poll_interval)
    diag = verdict.diagnosis
    data = {
        "state": verdict.state,
        "diagnosis": diag.to_dict(),
        "seconds": round(clock() - start, 1),
        "pid": facts.pid,
        "launch_id": facts.launch_id,
    }
    if verdict.note:
        data["port"] = verdict.note
    if verdict.ok:
        if facts.pid:  # ready: what it uses now (a segment made late in startup too)
            record_shm(h, p, step, session=facts.pid)
        return ok(
            step,
            verdict.message,
            data=data,
            lines=(
                f"PID {facts.pid}, {p.served_model_name} on port {p.port}",
                verdict.note,
                *notes.values(),
            ),
        )
    lines = [*notes.values(), f"label: {diag.label}"]
    lines += [f"evidence: {e}" for e in diag.evidence[:3]]
    lines.append("last log lines:")
    lines += [f"  {ln}" for ln in state.diagnoser.tail[-30:]]
    return failed(step, verdict.message, lines=tuple(lines), hint=diag.hint, data=data)
