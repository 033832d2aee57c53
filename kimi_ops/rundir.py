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
from .shell import quote

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
)

_GROUP_OTHER_WRITE = 0o022
_STICKY = 0o1000


def absolute_run_dir(key: str, text: str) -> str:
    """``text`` normalised if it is an absolute path or one under ``~`` (the host expands it);
    else ProfileError: a relative run_dir would be resolved against whatever directory the task
    happened to run in (and was created there before anything failed)."""
    if not (text.startswith("/") or text == "~" or text.startswith("~/")) or "\n" in text:
        raise ProfileError(
            key,
            f"must be an absolute path (or ~/...), got {text!r}",
            hint="e.g. --run-dir /srv/kimi-ops or --run-dir ~/kimi-ops",
        )
    return norm_dir(text)


def facts_command(run_dir: str, files: Sequence[str] = RUN_DIR_FILES) -> str:
    """One read-only command: ``uid=``, ``resolved=``, then one ``path=uid:mode:type:name``
    line for run_dir's real path and each existing ancestor (deepest first) and one
    ``file=uid:mode:type:name`` line per existing :data:`RUN_DIR_FILES` entry."""
    p = quote(run_dir)
    names = " ".join(quote(n) for n in RUN_DIR_FILES)
    return (
        'echo "uid=$(id -u)"; '
        f"kimi_r=$(realpath -m -- {p} 2>/dev/null) || kimi_r=$(readlink -f -- {p}) || kimi_r=; "
        'echo "resolved=$kimi_r"; '
        'if [ -n "$kimi_r" ]; then kimi_p=$kimi_r; while :; do '
        'if [ -e "$kimi_p" ] || [ -L "$kimi_p" ]; then '
        'stat -c "path=%u:%a:%F:%n" -- "$kimi_p"; fi; '
        '[ "$kimi_p" = / ] && break; kimi_p=$(dirname -- "$kimi_p"); done; '
        f'for kimi_n in {names}; do kimi_f="$kimi_r/$kimi_n"; '
        'if [ -e "$kimi_f" ] || [ -L "$kimi_f" ]; then stat -c "file=%u:%a:%F:%n" -- "$kimi_f"; '
        "fi; done; fi; true"
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


def _entry(text: str) -> Entry | None:
    parts = text.split(":", 3)
    if len(parts) != 4 or not parts[0].isdigit():
        return None
    try:
        mode = int(parts[1], 8)
    except ValueError:
        return None
    return Entry(int(parts[0]), mode, parts[2], parts[3])


def parse_facts(text: str) -> RunDirFacts:
    """:func:`facts_command`'s output."""
    uid: int | None = None
    resolved = ""
    paths: list[Entry] = []
    files: list[Entry] = []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "uid" and value.strip().isdigit():
            uid = int(value.strip())
        elif key == "resolved":
            resolved = value
        elif key in ("path", "file"):
            entry = _entry(value)
            if entry is not None:
                (paths if key == "path" else files).append(entry)
    return RunDirFacts(uid, resolved, tuple(paths), tuple(files))


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
            (f"could not resolve run_dir {run_dir} on the host (no realpath or readlink -f?)",),
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
    return RunDirVerdict(real, tuple(problems), "; ".join(dict.fromkeys(hints)))


def private_dir_test(run_dir: str) -> str:
    """A shell test, for right after ``mkdir -p -m 700 run_dir``: true only if run_dir is a
    directory (not a symlink) owned by the connecting user and writable by no group or other
    user, so a directory someone else created between the check and the mkdir is refused."""
    r = quote(run_dir)
    why = quote(f"run_dir {run_dir} is not a directory only you can write (changed meanwhile?)")
    return (
        f"[ -d {r} ] && [ ! -L {r} ] && [ -O {r} ] && "
        f"[ $(( 0$(stat -c %a -- {r}) & 18 )) -eq 0 ] || {{ echo {why} >&2; false; }}"
    )
