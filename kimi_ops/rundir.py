"""Is run_dir safe to write to and execute from? (like OpenSSH's StrictModes)

kimi-ops runs ``launch.sh``, the probe, the stand-in and the log diagnoser from run_dir, trusts
its pidfile for the PID to signal, and sources its env file, often as root. A run_dir (or an
ancestor of it) that another user can write lets that user swap any of them and run code as
us. So before any task uses run_dir, one read-only command (:func:`facts_command`) reports the
connecting user's uid, run_dir's real path (symlinks resolved) and the owner and mode of that
path, of every existing ancestor and of the files kimi-ops keeps there;
:func:`check_run_dir` decides from that text:

* run_dir itself, if it exists, is a directory owned by the connecting user and writable by
  no group or other user;
* every existing ancestor is owned by root or by that user, and is not writable by group or
  others unless it has the sticky bit (``/tmp``);
* every file kimi-ops keeps in run_dir (:data:`RUN_DIR_FILES`), if present, is owned by that
  user and writable by no one else (a file planted while run_dir was open stays after a
  ``chmod 700``).

Every later command uses the resolved path, so a symlink swapped after the check changes
nothing, and processes are matched by the path they were launched with.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from .defaults import (
    CURRENT_LOG,
    DIAGNOSE_MODULE,
    DIAGNOSE_RUNNER,
    ENV_FILE,
    LAUNCH_ID_FILE,
    LAUNCH_SCRIPT,
    LOCK_FILE,
    LOG_DIR,
    PIDFILE,
    PROBE_SCRIPT,
    STANDIN_CONFIG,
    STANDIN_SCRIPT,
)
from .errors import ProfileError
from .procs import norm_dir
from .shell import one_line, quote
from .shm import OWNED_FILE

#: What kimi-ops runs, sources, trusts or writes through in run_dir.
RUN_DIR_FILES: tuple[str, ...] = (
    LAUNCH_SCRIPT,
    PROBE_SCRIPT,
    STANDIN_SCRIPT,
    STANDIN_CONFIG,
    ENV_FILE,
    DIAGNOSE_MODULE,
    DIAGNOSE_RUNNER,
    PIDFILE,
    LAUNCH_ID_FILE,
    LOCK_FILE,
    LOCK_FILE + ".holder",
    CURRENT_LOG,
    LOG_DIR,
    "stopped.launch",  # hoststate.STOP_MARKER (not imported: hoststate imports diagnose)
    "ray",  # cluster.RAY_DIR: a node's Ray pidfile and log (cluster imports this module)
    OWNED_FILE,  # the shm files clean-shm may remove: a planted list would name others'
)

_GROUP_OTHER_WRITE = 0o022
_STICKY = 0o1000


def absolute_run_dir(key: str, text: str) -> str:
    """``text`` normalised if it is an absolute path or one under ``~`` (the host expands it);
    else ProfileError: a relative run_dir would be resolved against whatever directory the task
    happened to run in (and was created there before anything failed)."""
    if not (text.startswith("/") or text == "~" or text.startswith("~/")):
        raise ProfileError(
            key,
            f"must be an absolute path (or ~/...), got {text!r}",
            hint="e.g. --run-dir /srv/kimi-ops or --run-dir ~/kimi-ops",
        )
    return norm_dir(text)


def facts_command(run_dir: str, files: Sequence[str] = RUN_DIR_FILES) -> str:
    """One read-only command: ``uid=``; run_dir's real path between ``@@resolved`` and
    ``@@end`` lines (any byte but NUL, newlines included); then one ``path=uid:mode:type``
    line (``path=-``: missing) for that path and each ancestor up to ``/``, in that order; then
    one ``file=uid:mode:type`` line (``file=-``) per name of ``files``, in order. No name is
    printed after a stat, so a path with a newline cannot shift the lines."""
    p = quote(run_dir)
    names = " ".join(quote(n) for n in files) or "''"
    stat = 'stat -c "%u:%a:%F" -- '
    return one_line(
        'echo "uid=$(id -u)"; '
        f"kimi_r=$(realpath -m -- {p} && echo .) || kimi_r=$(readlink -f -- {p} && echo .) || "
        "kimi_r=..; kimi_r=${kimi_r%??}; "
        "printf '@@resolved\\n%s\\n@@end\\n' \"$kimi_r\"; "
        'if [ -n "$kimi_r" ]; then kimi_p=$kimi_r; while :; do '
        'if [ -e "$kimi_p" ] || [ -L "$kimi_p" ]; then printf path=; '
        f'{stat}"$kimi_p"; else echo path=-; fi; '
        '[ "$kimi_p" = / ] && break; kimi_p=$(dirname -- "$kimi_p"; echo .); kimi_p=${kimi_p%??}; '
        f'done; for kimi_n in {names}; do kimi_f="$kimi_r/$kimi_n"; '
        'if [ -e "$kimi_f" ] || [ -L "$kimi_f" ]; then printf file=; '
        f'{stat}"$kimi_f"; else echo file=-; fi; done; '
        # every other entry (two levels: logs/, ray/) someone else owns, or a symlink but the
        # one kimi-ops makes (run_dir/current.log): counted (-name, not -path: no glob of run_dir)
        'if [ -d "$kimi_r" ]; then kimi_o=$({ '
        'find "$kimi_r" -mindepth 1 -maxdepth 2 ! -user "$(id -u)" -exec printf x \\; ; '
        f'find "$kimi_r" -mindepth 1 -maxdepth 1 -type l ! -name {CURRENT_LOG} '
        "-exec printf x \\; ; "
        'find "$kimi_r" -mindepth 2 -maxdepth 2 -type l -exec printf x \\; ; '
        '} 2>/dev/null); echo "foreign=${#kimi_o}"; fi; fi; true'
    )


@dataclass(frozen=True)
class Entry:
    """One ``stat`` line: owner uid, mode bits, file type (``directory``, ``regular file``,
    ``symbolic link`` ...) and path."""

    uid: int
    mode: int
    kind: str
    path: str


@dataclass(frozen=True)
class RunDirFacts:
    uid: int | None
    resolved: str
    paths: tuple[Entry, ...]  # run_dir (if it exists) and its existing ancestors
    files: tuple[Entry, ...]  # kimi-ops' files in run_dir
    #: entries in run_dir (two levels) owned by another user, or symlinks kimi-ops did not make
    #: (a planted launch.id.tmp -> /etc/x would have a write follow it)
    foreign: int = 0


def _entry(text: str, path: str) -> Entry | None:
    parts = text.split(":", 2)
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    try:
        mode = int(parts[1], 8)
    except ValueError:
        return None
    return Entry(int(parts[0]), mode, parts[2], path)


def _ancestors(path: str) -> list[str]:
    out = [path]
    while out[-1] != "/":
        parent = posixpath.dirname(out[-1]) or "/"
        out.append(parent)
    return out


def parse_facts(text: str, files: Sequence[str] = RUN_DIR_FILES) -> RunDirFacts:
    """:func:`facts_command`'s output (``files``: the same names, in the same order)."""
    head, sep, rest = text.partition("@@resolved\n")
    uid_text = head.rsplit("uid=", 1)[-1].strip() if "uid=" in head else ""
    uid = int(uid_text) if uid_text.isdigit() else None
    resolved, end, tail = rest.partition("\n@@end\n")
    if not sep or not end or not resolved.startswith("/"):
        return RunDirFacts(uid, "", (), ())
    lines = tail.split("\n")
    path_lines = [ln[5:] for ln in lines if ln.startswith("path=")]
    file_lines = [ln[5:] for ln in lines if ln.startswith("file=")]
    chain = _ancestors(resolved)
    if len(path_lines) != len(chain) or len(file_lines) != len(files):
        return RunDirFacts(uid, "", (), ())  # cut short: nothing is taken as checked
    paths = [_entry(t, n) for t, n in zip(path_lines, chain, strict=True) if t != "-"]
    found = [
        _entry(t, f"{resolved.rstrip('/')}/{n}")
        for t, n in zip(file_lines, files, strict=True)
        if t != "-"
    ]
    if None in paths or None in found:
        return RunDirFacts(uid, "", (), ())
    counted = [ln[8:] for ln in lines if ln.startswith("foreign=")]
    return RunDirFacts(
        uid,
        resolved,
        tuple(e for e in paths if e is not None),
        tuple(e for e in found if e is not None),
        int(counted[-1]) if counted and counted[-1].isdigit() else 0,
    )


@dataclass(frozen=True)
class RunDirVerdict:
    """:func:`check_run_dir`'s decision: the real path to use, and what is unsafe (empty: ok)."""

    resolved: str
    problems: tuple[str, ...]
    hint: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _who(uid: int) -> str:
    return "root" if uid == 0 else f"uid {uid}"


def check_run_dir(facts: RunDirFacts, run_dir: str) -> RunDirVerdict:
    """Decide whether ``run_dir`` (as given) is safe from :func:`parse_facts`' facts."""
    if facts.uid is None or not facts.resolved.startswith("/"):
        return RunDirVerdict(
            "",
            (
                f"could not resolve run_dir {run_dir} and stat it and its parents on the host (no "
                "realpath or readlink -f? its output cut short?)",
            ),
            "install GNU coreutils (realpath) on the host",
        )
    me, real = facts.uid, facts.resolved
    problems: list[str] = []
    hints: list[str] = []
    for e in facts.paths:
        where = "run_dir" if e.path == real else "its parent directory"
        if e.path == real:
            if e.kind != "directory":
                problems.append(f"run_dir {real} is a {e.kind}, not a directory")
                hints.append(f"remove {real} or choose another run_dir")
                continue
            if e.uid != me:
                problems.append(f"run_dir {real} is owned by {_who(e.uid)}, not by you ({me})")
                hints.append(f"chown {_who(me).replace('uid ', '')} {real} (and check its files)")
            if e.mode & _GROUP_OTHER_WRITE:
                problems.append(
                    f"run_dir {real} is writable by group or others (mode {e.mode & 0o7777:o})"
                )
                hints.append(f"chmod 700 {real} (and check that its files are yours)")
            continue
        if e.uid not in (0, me):
            problems.append(f"{where} {e.path} is owned by {_who(e.uid)}, not by root or you")
            hints.append("choose a run_dir under a directory only you (or root) can write")
        if e.mode & _GROUP_OTHER_WRITE and not e.mode & _STICKY:
            problems.append(
                f"{where} {e.path} is writable by group or others without the sticky bit "
                f"(mode {e.mode & 0o7777:o})"
            )
            hints.append("choose a run_dir under a directory only you (or root) can write")
    for e in facts.files:
        if e.uid != me or (e.mode & _GROUP_OTHER_WRITE and e.kind != "symbolic link"):
            problems.append(
                f"{e.path} ({e.kind}, owner {_who(e.uid)}, mode {e.mode & 0o7777:o}) may have "
                "been put there by someone else"
            )
            hints.append(f"check and remove {e.path}; kimi-ops writes it again")
    if facts.foreign:
        problems.append(
            f"{facts.foreign} entr{'y' if facts.foreign == 1 else 'ies'} in {real} (or in its "
            "subdirectories) owned by another user, or a symlink kimi-ops does not make: a write "
            "or a run through it could reach a file someone else chose"
        )
        hints.append(
            f"list them with `find {real} -maxdepth 2 \\( ! -user $(id -u) -o -type l \\)` "
            "and remove what kimi-ops did not make"
        )
    return RunDirVerdict(real, tuple(problems), "; ".join(dict.fromkeys(hints)))


def private_dir_test(run_dir: str, what: str = "run_dir") -> str:
    """A shell test, for right after ``mkdir -p -m 700 run_dir``: true only if run_dir is a
    directory (not a symlink) owned by the connecting user and writable by no group or other
    user, and every ancestor is still a directory (not a symlink) owned by root or that user
    and writable by no group or other user unless sticky (as :func:`check_run_dir` asks), so a
    directory someone else created between the check and the mkdir is refused: run_dir itself,
    or a missing parent made in a sticky ``/tmp`` (its owner could rename run_dir away).
    ``what`` names the directory in the message (a Ray node's ``temp_dir``)."""
    r = quote(run_dir)
    why = quote(f"{what} {run_dir} is not a directory only you can write (changed meanwhile?)")
    parent = quote(f"a parent directory of {what} {run_dir} is not safe (changed meanwhile?)")
    return (
        f"[ -d {r} ] && [ ! -L {r} ] && [ -O {r} ] && "
        f"[ $(( 0$(stat -c %a -- {r}) & 18 )) -eq 0 ] || {{ echo {why} >&2; false; }} && "
        f'kimi_a={r} && kimi_bad= && while [ "$kimi_a" != / ]; do '
        'kimi_a=$(dirname -- "$kimi_a"; echo .); kimi_a=${kimi_a%??}; '
        '[ -d "$kimi_a" ] && [ ! -L "$kimi_a" ] && kimi_s=$(stat -c %u:%a -- "$kimi_a") && '
        '{ [ "${kimi_s%%:*}" = 0 ] || [ "${kimi_s%%:*}" = "$(id -u)" ]; } && '
        "{ [ $(( 0${kimi_s#*:} & 18 )) -eq 0 ] || [ $(( 0${kimi_s#*:} & 512 )) -ne 0 ]; } || "
        f'{{ echo {parent} >&2; kimi_bad=1; break; }}; done && [ -z "$kimi_bad" ]'
    )
