"""Is a server of this deployment alive, whatever its pidfile says (pure).

The pidfile is one file in run_dir, and a file can go (moved, deleted, unreadable) while its
server serves. Without it, status once said ``orphans: no server runs``, verify ``the server
exited``, and an unchanged deploy ended the healthy server and launched it again. The server's
processes still carry ``KIMI_OPS_RUN_DIR`` and ``KIMI_OPS_LAUNCH_ID`` (the launch script exports
both before it ``exec``\\ s the server under ``setsid``), so the current launch's server can be
found in the process listing by the launch id in ``launch.id`` (:func:`current_server`), and the
pidfile put back when that is safe (:func:`restore_pidfile_command`).

The same facts say whether ``fab launch`` may start a server at all: not while one of this
deployment's lives (:func:`live_servers`, :func:`launch_refusal`), since a second copy would
overwrite ``launch.id``, ``server.pid`` and ``current.log`` of the live one and then die on the
port the live one holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .defaults import LAUNCH_ID_FILE, PIDFILE
from .procs import (
    LAUNCH_ID_VAR,
    LISTING_READ_TIMEOUT,
    RUN_DIR_VAR,
    Listing,
    PidfileProcess,
    Proc,
    Selection,
    _read_bound,
    is_vllm_title,
    norm_dir,
    server_args,
)
from .shell import quote as q

_LAUNCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _ours(p: Proc, run_dir: str, launch_id: str) -> bool:
    return p.run_dir == run_dir and p.launch_id == launch_id


def _serverlike(p: Proc) -> bool:
    return p.unread or server_args(p.argv) is not None or is_vllm_title(p.argv)


def current_server(listing: Listing, run_dir: str, launch_id: str | None) -> Proc | None:
    """The server of the current launch (``launch_id``, the content of ``launch.id``) in
    ``listing``, found without the pidfile; None when there is none, or more than one candidate.

    It is a live session leader (the launch's ``setsid``) that runs a vLLM server (or a process
    vLLM renamed, or one whose command line did not answer in time), and either its environment
    holds this run_dir and this launch id, or it is unreadable (setproctitle overwrote it) and a
    process of its session holds both: a session is named after its leader's PID, which cannot be
    reused while the leader lives, so that session is the one this launch created."""
    if not launch_id:
        return None
    ours_dir = norm_dir(run_dir)
    by_env = {p.sid for p in listing.procs if _ours(p, ours_dir, launch_id) and not p.zombie}
    found = [
        p
        for p in listing.procs
        if p.sid == p.pid
        and p.pid > 1
        and not p.zombie
        and _serverlike(p)
        and (_ours(p, ours_dir, launch_id) or (p.run_dir is None and p.pid in by_env))
    ]
    return found[0] if len(found) == 1 else None


def as_pidfile_process(p: Proc) -> PidfileProcess:
    """``p`` as the pidfile's process would have been read (:func:`procs.parse_pidfile_process`),
    so the decisions that take a pidfile's process take it unchanged."""
    return PidfileProcess(p.pid, True, p.argv, p.env, state=p.state, unread=p.unread)


def live_servers(selection: Selection) -> list[Proc]:
    """This deployment's live servers in ``selection`` (:func:`procs.owned_processes`): the
    owned processes that lead their own session, the one each launch's ``setsid`` created (an
    orphan's leader is gone; a worker or an engine core leads no session)."""
    return [p for p in selection.targets if p.sid is not None and p.sid == p.pid]


def launch_refusal(servers: Sequence[Proc], run_dir: str, port: int) -> str:
    """Why ``fab launch`` starts nothing while ``servers`` (:func:`live_servers`) live."""
    named = ", ".join(
        f"PID {p.pid} (launch {p.launch_id or '?'})" for p in sorted(servers, key=lambda x: x.pid)
    )
    return (
        f"a server of this deployment ({norm_dir(run_dir)}, port {port}) is alive: {named}; "
        f"a second one would overwrite its {LAUNCH_ID_FILE}, {PIDFILE} and log link and then "
        "die on its port: nothing was started or written"
    )


#: What :func:`restore_pidfile_command` did, by the word it prints.
RESTORE_OUTCOMES: Mapping[str, str] = {
    "restored": "restored",
    "exists": "not restored: a pidfile appeared meanwhile (a new launch?); it is kept",
    "unreadable": "not restored: the file is there but names no PID (unreadable, empty or not "
    "a number); it is left as it is",
    "relaunched": f"not restored: {LAUNCH_ID_FILE} changed meanwhile (a new launch)",
    "not_owned": "not restored: the server runs as another user",
    "gone": "not restored: the process no longer carries this launch id (it ended)",
    "failed": "not restored: it could not be written (permissions? a full disk?)",
    "dry": "not restored (dry run)",
}


def restore_pidfile_command(run_dir: str, pid: int, launch_id: str) -> str:
    """Shell: put ``pid`` back in the missing pidfile, and print ``restore=WORD``
    (:data:`RESTORE_OUTCOMES`) and ``etime=`` (the server's uptime, as ``ps`` says it).

    Safe: only when no pidfile exists (written beside it, then linked with ``ln``, which never
    replaces a file: a launch that writes one meanwhile wins); while ``launch.id`` still names
    ``launch_id``; while ``pid`` is the caller's user's process (``test -O /proc/PID``) and its
    environment still holds ``KIMI_OPS_LAUNCH_ID=launch_id`` (the same process, not a reused
    PID). A pidfile that exists but names no PID (garbage, unreadable) is left as it is."""
    if not _LAUNCH_ID.match(launch_id):
        raise ValueError(f"bad launch id {launch_id!r}")
    r = norm_dir(run_dir)
    pf, ids = q(f"{r}/{PIDFILE}"), q(f"{r}/{LAUNCH_ID_FILE}")
    tmp = q(f"{r}/.{PIDFILE}.restore") + ".$$"
    n = int(pid)
    return (
        _read_bound("to", LISTING_READ_TIMEOUT) + f"if [ -e {pf} ] || [ -L {pf} ]; then "
        f'case "$(head -n 1 {pf} 2>/dev/null)" in ""|*[!0-9]*) w=unreadable;; *) w=exists;; esac; '
        f'elif [ "$(head -n 1 {ids} 2>/dev/null)" != {q(launch_id)} ]; then w=relaunched; '
        f"elif ! [ -O /proc/{n} ]; then w=not_owned; "
        f"elif ! $to cat /proc/{n}/environ 2>/dev/null | tr '\\000' '\\n' "
        f"| grep -qxF -e {q(f'{LAUNCH_ID_VAR}={launch_id}')}; then w=gone; "
        f"elif printf '%s\\n' {n} > {tmp} 2>/dev/null && ln {tmp} {pf} 2>/dev/null; "
        "then w=restored; "
        f"elif [ -e {pf} ]; then w=exists; else w=failed; fi; rm -f {tmp}; "
        'echo "restore=$w"; '
        f'echo "etime=$(ps -o etime= -p {n} 2>/dev/null | tr -d " ")"'
    )


@dataclass(frozen=True)
class Adopted:
    """The current launch's server, found by its launch id while the pidfile named no PID."""

    proc: Proc
    launch_id: str
    #: What became of the pidfile: a key of :data:`RESTORE_OUTCOMES`.
    outcome: str
    etime: str = ""

    @property
    def restored(self) -> bool:
        return self.outcome == "restored"

    def note(self, run_dir: str) -> str:
        """One report line: the pidfile was missing, how the server was found, what was done."""
        done = RESTORE_OUTCOMES.get(self.outcome, f"not restored ({self.outcome or 'unknown'})")
        return (
            f"pidfile: {norm_dir(run_dir)}/{PIDFILE} named no PID (missing or unreadable); "
            f"server PID {self.proc.pid} found by its {RUN_DIR_VAR} and launch id "
            f"{self.launch_id}; pidfile {done}"
        )


def parse_restore(
    values: Mapping[str, str], proc: Proc, launch_id: str, *, dry: bool = False
) -> Adopted:
    """The :class:`Adopted` from :func:`restore_pidfile_command`'s ``key=value`` lines (a dry
    run, which did not run it: ``dry``)."""
    word = "dry" if dry else values.get("restore", "").strip()
    return Adopted(proc, launch_id, word, values.get("etime", "").strip())
