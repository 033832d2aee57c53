"""logs and diagnose: read or follow the current log, and diagnose it on the host."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kimi_ops import logview
from kimi_ops import verify as vfy
from kimi_ops.defaults import (
    CURRENT_LOG,
    DIAGNOSE_MODULE,
    DIAGNOSE_RUNNER,
)
from kimi_ops.diagnose import Diagnosis, LogDiagnoser
from kimi_ops.errors import StepFailed
from kimi_ops.profile import Profile
from kimi_ops.redact import Masker, cut
from kimi_ops.shell import quote as q

from ..host import Host
from ..masking import MASKER, hide
from .common import Sleep, _resource, _run_dir
from .upload import sync_files

#: When run_dir has no current log: nothing was launched, or someone deleted it while a server
#: may still run; status tells which.
NO_LOG_HINT = (
    "nothing was launched yet (`fab deploy`), or the log was deleted: `fab status` says whether "
    "a server runs"
)


def read_log(
    h: Host,
    p: Profile,
    lines: int,
    *,
    step: str = "logs",
    mask: Callable[[str], str] | None = None,
) -> str:
    """The last ``lines`` lines of the current log, each cut to ``kimi.log_line_limit``
    characters (the host sends at most that many bytes of a line: ``cut -b``). Secrets are
    masked BEFORE the cut: cut first, a secret across the cut would show its first part. By
    default the known values and every credential shape or secret name's value
    (:func:`tasks.masking.hide`), whether or not fab's environment holds the secret."""
    path = f"{_run_dir(p)}/{CURRENT_LOG}"
    out = h.run(
        f"test -e {q(path)} && tail -n {int(lines)} {q(path)} "
        f"| cut -b 1-{logview.host_byte_limit(p.log_line_limit)}",
        step=step,
        check=False,
        mutating=False,
    )
    if not out.ok:
        raise StepFailed(
            step,
            f"no log at {path}",
            command=out.command,
            stderr=out.stderr,
            hint=NO_LOG_HINT,
        )
    shown = mask(out.stdout) if mask is not None else hide(MASKER, out.stdout)
    return logview.cap_lines(shown, p.log_line_limit)


def follow_log(
    h: Host,
    p: Profile,
    write: Callable[[str], None],
    *,
    step: str = "logs",
    sleep: Sleep = time.sleep,
    until: Callable[[], bool] = lambda: False,
    masker: Masker = MASKER,
) -> None:
    """Print new log bytes as they arrive (reads from an offset; Ctrl-C ends it), each line
    cut to ``kimi.log_line_limit`` characters after its secrets are masked. A secret the server
    wrote in two pieces (read by two polls) is masked whole: the stream masker holds back a
    tail that may be the start of a secret until the next piece shows whether it is; when the
    follow ends, such a tail is shown as ``***``."""
    r = _run_dir(p)
    offset = -1
    decoder, capper = vfy.log_decoder(), logview.LineCapper(p.log_line_limit)
    stream = masker.stream()
    try:
        while not until():
            if offset < 0:
                size = h.run(vfy.poll_command(r, 0, 0), step=step, mutating=False)
                offset = max(0, vfy.parse_poll(size.stdout).log_size)
            out = h.run(vfy.poll_command(r, offset), step=step, mutating=False)
            facts = vfy.parse_poll(out.stdout, decoder)
            if facts.log_size >= 0 and facts.log_size < offset:  # a new log: start over
                write(capper.feed(stream.flush()))
                offset = 0
                decoder = vfy.log_decoder()
                continue
            if facts.read:
                write(capper.feed(stream.feed(facts.chunk)))
                offset += facts.read
            else:
                sleep(p.poll_interval)
    finally:
        write(capper.feed(stream.flush()))


def diagnose_host_log(
    h: Host,
    p: Profile,
    *,
    step: str = "diagnose",
    progress: Callable[[str], None] | None = None,
) -> Diagnosis:
    """The diagnosis of the host's current log, made ON the host: one-file kimi_ops.diagnose and a
    small runner are uploaded to run_dir and run with the profile's python, which reads the log
    where it lies and prints the diagnosis as JSON (a log of gigabytes answers in seconds, not
    after crossing SSH). If that python cannot run it, the log is streamed here instead, with
    ``progress`` told how far it got."""
    r = _run_dir(p)
    context = {"port": p.port, "served_model_name": p.served_model_name}
    files = {n: (_resource(n), 0o600) for n in (DIAGNOSE_MODULE, DIAGNOSE_RUNNER)}
    synced = sync_files(h, p, files, step=step)
    if h.dry and synced.changed:
        # A dry run uploads nothing: the host holds no runner, or another version's; running
        # it would answer for a file this run did not put there. The log is read here instead.
        if progress is not None:
            names = ", ".join(synced.changed)
            progress(f"dry run: would upload {names} and run it there; streaming the log here")
        return stream_diagnose_host_log(h, p, step=step, progress=progress).diagnosis()
    out = h.run(
        f"{q(p.python)} {q(f'{r}/{DIAGNOSE_RUNNER}')} {q(f'{r}/{CURRENT_LOG}')} "
        f"{q(json.dumps(context))}",
        step=step,
        check=False,
        mutating=False,
        timeout=max(600.0, p.command_timeout),
        show_stderr=progress is not None,
    )
    answer = _last_json(out.stdout) if out.ok else None
    if answer is not None and "missing" in answer:
        raise _no_log(step, r)
    if answer is not None and isinstance(answer.get("diagnosis"), dict):
        return diagnosis_from_dict(answer["diagnosis"])
    if progress is not None:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.exited}"])[-1]
        why = cut(hide(MASKER, why), 200)  # masked before it is cut
        progress(f"cannot diagnose on the host ({why}): streaming the log here")
    return stream_diagnose_host_log(h, p, step=step, progress=progress).diagnosis()


def _no_log(step: str, run_dir: str) -> StepFailed:
    return StepFailed(
        step,
        f"no log at {run_dir}/{CURRENT_LOG}",
        hint="nothing has been launched yet (`fab deploy`)",
    )


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def diagnosis_from_dict(d: dict[str, Any]) -> Diagnosis:
    """A :class:`Diagnosis` back from its ``to_dict`` form."""
    return Diagnosis(
        label=str(d.get("label", "unknown")),
        stage=d.get("stage"),
        progress=d.get("progress"),
        evidence=tuple(d.get("evidence") or ()),
        hint=str(d.get("hint", "")),
        summary=str(d.get("summary", "")),
        facts=dict(d.get("facts") or {}),
    )


def stream_diagnose_host_log(
    h: Host,
    p: Profile,
    *,
    step: str = "diagnose",
    progress: Callable[[str], None] | None = None,
) -> LogDiagnoser:
    """Stream the host's current log through the diagnosis, a bounded chunk per round trip."""
    r = _run_dir(p)
    diagnoser = LogDiagnoser({"port": p.port, "served_model_name": p.served_model_name})
    decoder = vfy.log_decoder()
    offset = 0
    while True:
        facts = vfy.parse_poll(
            h.run(vfy.poll_command(r, offset), step=step, mutating=False).stdout, decoder
        )
        if not facts.log_exists:
            raise _no_log(step, r)
        diagnoser.feed(facts.chunk)
        offset += facts.read
        if progress is not None and facts.log_size > 0:
            progress(f"read {offset / 2**20:.0f} of {facts.log_size / 2**20:.0f} MiB")
        if facts.read < vfy.MAX_POLL_BYTES:
            return diagnoser
