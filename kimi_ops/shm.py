"""Stale shared memory left by a crashed or SIGKILLed vLLM: which files, decided file by file.

vLLM's shm_broadcast ring buffers are ``/dev/shm/psm_*`` (about 100 MiB each) and Python's
multiprocessing semaphores are ``/dev/shm/sem.mp-*``. They leak on a crash and fill /dev/shm,
after which NCCL fails.

Only files this deployment's server made are ever removed. Their names say nothing (another
program's ``SharedMemory("psm_x")`` looks the same), so kimi-ops records them while the server
runs: verify (while it polls and when it ends), status and kill-stale (before it signals) read
which ``psm_*`` / ``sem.mp-*`` files in shm_dir the deployment's processes map or hold open and
append each (device, inode, name) to ``run_dir/shm.owned`` (:data:`OWNED_FILE`). clean-shm then
removes a file only when it is on that list (same device, inode and name) and no live process
uses it: none maps it (``/proc/PID/maps``) and none holds it open (``/proc/PID/fd``), matched by
device and inode, so a process that reached the file by another path (a bind mount, a
container's view, a hard link) counts. A file never recorded is left alone and named ("not made
by this deployment"), including one a server made and crashed before anything recorded it.
When the maps or fds of some process cannot be read (another user's process, without root), each
file it could have opened (its uid owns the file, it is root, or the file's mode lets group/others
in) is possibly in use: kept, and the report says so. PID 1 (the init system, whose maps a sandbox
can hide even from root) is the one process not counted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

SHM_DIR = "/dev/shm"
#: The file in run_dir that lists the shm files this deployment's processes were seen using, one
#: ``DEV<TAB>INODE<TAB>NAME`` line each (:meth:`Owned.line`).
OWNED_FILE = "shm.owned"
#: The init system: never a vLLM process. Its maps can be unreadable even to root (a sandbox or
#: container runtime's init with capabilities root lacks), which must not block every cleanup.
INIT_PID = 1
#: At most this many files left alone are named one by one in a report.
SHOWN = 20
_NAME = re.compile(r"^(psm_|sem\.mp-)[^/\s]+$")
_FILE = re.compile(r"^F\t(\d+)\t([0-9.]+)\t(\d+)\t([0-7]+)\t(?:(\d+)\t(\d+)\t)?(/.*)$")
_MAPS = re.compile(r"^/proc/(\d+)/maps:\S+ \S+ \S+ ([0-9a-fA-F]+):([0-9a-fA-F]+) (\d+)\s+(.*)$")
_FD_INODE = re.compile(r"^I\t/proc/(\d+)/fd/\d+\t(\d+) (\d+)$")
_UNREADABLE = re.compile(r"^U (\d+) (\d+)$")
_FD = re.compile(r"^D\t/proc/(\d+)/fd\t(.*)$")
_OWNED = re.compile(r"^O\t(\d+)\t(\d+)\t([^\t/]+)$")


def list_command(shm_dir: str = SHM_DIR) -> str:
    """Lists candidates in ``shm_dir`` as ``size<TAB>path`` lines (no usage; see usage_command)."""
    return (
        f"find {shlex.quote(shm_dir)} -maxdepth 1 -type f \\( -name 'psm_*' -o -name 'sem.mp-*' "
        "\\) -printf '%s\\t%p\\n'"
    )


def usage_command(
    shm_dir: str = SHM_DIR,
    *,
    owned_file: str | None = None,
    pids: Sequence[int] | None = None,
    session: int | None = None,
) -> str:
    """One line: the candidate files (size, mtime) and, for every process, which of them it maps
    or holds open, plus the processes whose maps cannot be read. Needs bash, grep, find, date.

    Output: ``nodir`` alone when shm_dir does not exist; else ``dir=RESOLVED``, ``now=EPOCH``,
    ``F<TAB>size<TAB>mtime<TAB>uid<TAB>mode<TAB>dev<TAB>inode<TAB>path`` per file, ``U PID UID``
    per process whose maps cannot be opened, grep's ``/proc/PID/maps:<maps line>`` per mapping
    of any ``psm_*`` / ``sem.mp-*`` file, and per descriptor open on one ``D<TAB>/proc/PID/fd<TAB>
    target`` and ``I<TAB>/proc/PID/fd/N<TAB>dev inode``. A file is matched to its users by device
    and inode, so a process that reached it by another path (a bind mount, a hard link, a
    container's view of the directory) is seen.

    ``owned_file``: also print its lines as ``O<TAB>line`` (this deployment's record).
    ``pids`` / ``session``: read only those processes (or the members of that session) and
    print no ``U`` lines: what they use, to be recorded (:func:`to_record`).
    """
    d = shlex.quote(shm_dir)
    if pids is not None:
        procs = "set -- " + " ".join(f"/proc/{int(x)}" for x in pids) + "; "
    elif session is not None:
        procs = (
            f"sid={int(session)}; set --; for s in /proc/[0-9]*/stat; do "
            "l=; { read -r l; } 2>/dev/null < \"$s\" || continue; l=${l##*') '}; "
            'read -r _ _ _ x _ <<< "$l"; [ "$x" = "$sid" ] && set -- "$@" "${s%/stat}"; done; '
        )
    else:
        procs = "set -- /proc/[0-9]*; "
    blind = (
        'for p in "$@"; do m=$p/maps; { :; } 2>/dev/null < "$m" && continue; '
        'u=; while read -r k r e x; do [ "$k" = Uid: ] && u=$e && break; '
        'done 2>/dev/null < "$p/status"; [ -n "$u" ] && echo "U ${p#/proc/} $u"; done; '
        if pids is None and session is None
        else ""
    )
    owned = (
        f"while IFS= read -r l; do printf 'O\\t%s\\n' \"$l\"; done 2>/dev/null "
        f"< {shlex.quote(owned_file)}; "
        if owned_file
        else ""
    )
    script = (
        "export LC_ALL=C; "
        f'd=$(cd {d} 2>/dev/null && pwd -P) || {{ echo "nodir"; {owned}exit 0; }}; '
        'echo "dir=$d"; echo "now=$(date +%s)"; '
        "find \"$d\" -maxdepth 1 -type f \\( -name 'psm_*' -o -name 'sem.mp-*' \\) "
        "-printf 'F\\t%s\\t%T@\\t%U\\t%m\\t%D\\t%i\\t%p\\n' 2>/dev/null; "
        + owned
        + procs
        + "[ $# -gt 0 ] || exit 0; "
        + blind
        + 'grep -s -H -F -e "/psm_" -e "/sem.mp-" "${@/%//maps}"; '
        'find "${@/%//fd}" -mindepth 1 -maxdepth 1 '
        '\\( -lname "*/psm_*" -o -lname "*/sem.mp-*" \\) '
        "-printf 'D\\t%h\\t%l\\n%p\\n' 2>/dev/null | while IFS= read -r l; do "
        'case "$l" in D*) printf "%s\\n" "$l";; *) i=$(stat -L -c "%d %i" "$l" 2>/dev/null) '
        '&& printf "I\\t%s\\t%s\\n" "$l" "$i";; esac; done; true'
    )
    return "bash -c " + shlex.quote(script)


def _safe(path: str, shm_dir: str) -> bool:
    head, _, name = path.rpartition("/")
    return head == shm_dir.rstrip("/") and bool(_NAME.match(name))


@dataclass(frozen=True)
class ShmFile:
    path: str
    size: int
    mtime: float | None = None
    uid: int | None = None
    mode: int | None = None
    #: Device and inode (``stat``'s numbers), when the host said them.
    dev: int | None = None
    ino: int | None = None

    def openable_by(self, euid: int | None) -> bool:
        """Could a process with this effective uid have opened the file? (Unknown: yes.)"""
        if euid is None or self.uid is None or self.mode is None:
            return True
        return euid in (0, self.uid) or bool(self.mode & 0o066)

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def key(self) -> Owned | None:
        """How this deployment's record names the file (None without its device and inode)."""
        if self.dev is None or self.ino is None:
            return None
        return Owned(self.dev, self.ino, self.name)


@dataclass(frozen=True, order=True)
class Owned:
    """One recorded file: a deployment's process was seen using it (by device, inode, name)."""

    dev: int
    ino: int
    name: str

    def line(self) -> str:
        return f"{self.dev}\t{self.ino}\t{self.name}"


@dataclass(frozen=True)
class ShmUsage:
    """What :func:`usage_command` found: the files, who uses each, whose maps are unreadable."""

    files: tuple[ShmFile, ...]
    users: Mapping[str, frozenset[int]] = field(default_factory=dict)
    #: PID -> effective uid of each process whose maps could not be opened.
    unreadable: Mapping[int, int] = field(default_factory=dict)
    now: float | None = None
    directory: str | None = None
    #: The files this deployment recorded (:data:`OWNED_FILE`).
    owned: frozenset[Owned] = frozenset()
    #: shm_dir does not exist on the host.
    missing: bool = False


@dataclass(frozen=True)
class ShmPlan:
    """The files to remove (and their bytes), the files kept, each with why, and the files left
    alone because this deployment did not make them."""

    files: tuple[ShmFile, ...]
    kept: tuple[tuple[ShmFile, str], ...] = ()
    #: Of ``files``: those in use now only by processes that are to be ended first (a dry run's
    #: kill-stale would end them), with their PIDs.
    freed_by_ending: tuple[tuple[ShmFile, tuple[int, ...]], ...] = ()
    #: Files no record of this deployment names: never removed.
    not_ours: tuple[ShmFile, ...] = ()
    #: Recorded files that are gone, or are removed by this plan: the record forgets them.
    forget: tuple[Owned, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def undecided(self) -> tuple[ShmFile, ...]:
        """Files kept only because some process's maps could not be read."""
        return tuple(f for f, why in self.kept if why.startswith("possibly in use"))


def parse_shm_listing(text: str, shm_dir: str = SHM_DIR) -> list[ShmFile]:
    """Parse :func:`list_command` output, keeping only vLLM's shm files directly in shm_dir."""
    out: list[ShmFile] = []
    for line in text.splitlines():
        size, _, path = line.partition("\t")
        if size.strip().isdigit() and _safe(path, shm_dir):
            out.append(ShmFile(path, int(size)))
    return out


def st_dev(major: int, minor: int) -> int:
    """A device number as ``stat`` gives it (glibc's ``makedev``), from the ``MAJOR:MINOR`` (hex)
    of a ``/proc/PID/maps`` line."""
    return (
        ((major & 0xFFFFF000) << 32)
        | ((major & 0xFFF) << 8)
        | ((minor & 0xFFFFFF00) << 12)
        | (minor & 0xFF)
    )


def parse_usage(text: str, shm_dir: str = SHM_DIR) -> ShmUsage:
    """Parse :func:`usage_command` output. Paths are reported under ``shm_dir`` as given (the
    host resolves symlinks to match the kernel's paths in maps and fd links). A mapping or an
    open descriptor counts for a file when its device and inode are the file's (whatever path
    the process reached it by), or, without those facts (older output), by its path."""
    given = shm_dir.rstrip("/") or "/"
    resolved = given
    now: float | None = None
    files: list[ShmFile] = []
    users: dict[str, set[int]] = {}
    unreadable: dict[int, int] = {}
    owned: set[Owned] = set()
    by_name: dict[str, str] = {}
    by_inode: dict[tuple[int, int], str] = {}
    lines = text.split("\n")
    missing = False
    for line in lines:
        if line == "nodir":
            missing = True
        elif line.startswith("dir="):
            resolved = line[4:].rstrip("/") or "/"
        elif line.startswith("now=") and line[4:].strip().isdigit():
            now = float(line[4:])
        elif m := _FILE.match(line):
            size, mtime, uid, mode, dev, ino, full = m.groups()
            head, _, name = full.rpartition("/")
            path = f"{given}/{name}"
            if head == resolved and _safe(path, given):
                files.append(
                    ShmFile(
                        path,
                        int(size),
                        float(mtime),
                        int(uid),
                        int(mode, 8),
                        None if dev is None else int(dev),
                        None if ino is None else int(ino),
                    )
                )
                by_name[name] = path
                if dev is not None and ino is not None:
                    by_inode[(int(dev), int(ino))] = path
        elif u := _UNREADABLE.match(line):
            unreadable[int(u.group(1))] = int(u.group(2))
        elif (o := _OWNED.match(line)) and _NAME.match(o.group(3)):
            owned.add(Owned(int(o.group(1)), int(o.group(2)), o.group(3)))

    def user(pid: str, path: str, inode: tuple[int, int] | None) -> None:
        found = by_inode.get(inode) if inode is not None else None
        if found is None:
            head, _, name = path.removesuffix(" (deleted)").rpartition("/")
            found = by_name.get(name) if head == resolved and not path.endswith(")") else None
        if found is not None:
            users.setdefault(found, set()).add(int(pid))

    for line in lines:
        if m := _MAPS.match(line):
            pid, major, minor, ino, path = m.groups()
            user(pid, path, (st_dev(int(major, 16), int(minor, 16)), int(ino)))
        elif m := _FD.match(line):
            user(m.group(1), m.group(2), None)
        elif m := _FD_INODE.match(line):
            user(m.group(1), "", (int(m.group(2)), int(m.group(3))))
    return ShmUsage(
        tuple(files),
        {k: frozenset(v) for k, v in users.items()},
        unreadable,
        now,
        None if missing else resolved,
        frozenset(owned),
        missing,
    )


def to_record(usage: ShmUsage, pids: Iterable[int] | None = None) -> list[Owned]:
    """The files that the processes (``pids``; None: every process the usage read, as a
    ``pids=``/``session=`` usage command reads only the deployment's) use and the record does not
    name yet. A file without its device and inode (older output) is never recorded."""
    ours = None if pids is None else frozenset(pids)
    new: list[Owned] = []
    for f in usage.files:
        users = usage.users.get(f.path, frozenset())
        used = bool(users) if ours is None else bool(users & ours)
        if used and (key := f.key) is not None and key not in usage.owned:
            new.append(key)
    return sorted(set(new))


def _printf(entries: Iterable[Owned]) -> str:
    """A one-line ``printf`` of record lines (the names are shell-quoted)."""
    args = "".join(f" {e.dev} {e.ino} {shlex.quote(e.name)}" for e in entries)
    return "printf '%s\\t%s\\t%s\\n'" + args if args else "true"


def record_command(owned_file: str, entries: Sequence[Owned]) -> str:
    """Append ``entries`` to the record (one ``DEV<TAB>INODE<TAB>NAME`` line each)."""
    return f"{_printf(entries)} >> {shlex.quote(owned_file)}"


def forget_command(owned_file: str, forget: Iterable[Owned]) -> str:
    """Drop ``forget`` from the record: only those lines go (a line another run appended
    meanwhile stays), through a temporary file and mv."""
    lines = sorted(set(forget))
    if not lines:
        return "true"
    f = shlex.quote(owned_file)
    tmp = shlex.quote(owned_file + ".tmp")
    patterns = " ".join("-e " + shlex.quote(e.line()) for e in lines)
    return f"{{ grep -vxF {patterns} {f}; true; }} > {tmp} 2>/dev/null && mv -f {tmp} {f}"


def unused(usage: ShmUsage) -> list[ShmFile]:
    """The files no process maps or holds open (and none whose maps cannot be read could)."""
    out = []
    for f in usage.files:
        if usage.users.get(f.path):
            continue
        if any(p != INIT_PID and f.openable_by(uid) for p, uid in usage.unreadable.items()):
            continue
        out.append(f)
    return out


def plan_shm_cleanup(usage: ShmUsage, ending: Iterable[int] = ()) -> ShmPlan:
    """Per file: remove it when this deployment recorded it (:data:`OWNED_FILE`) and no live
    process maps it or holds it open; a file the record does not name is left alone.

    ``ending``: PIDs that will have been ended before the removal (what a dry run's kill-stale
    would end; the real kill-stale records their files before it signals them): their use
    does not keep a file, makes it this deployment's, and the plan names those files."""
    remove: list[ShmFile] = []
    kept: list[tuple[ShmFile, str]] = []
    freed: list[tuple[ShmFile, tuple[int, ...]]] = []
    not_ours: list[ShmFile] = []
    gone = frozenset(ending)
    present: set[Owned] = set()
    for f in usage.files:
        users = sorted(usage.users.get(f.path, ()))
        pids = [x for x in users if x not in gone]
        key = f.key
        if key is not None:
            present.add(key)
        if (key is None or key not in usage.owned) and not (gone & set(users)):
            not_ours.append(f)
        elif pids:
            kept.append((f, "still in use by PID " + ", ".join(str(p) for p in pids)))
        elif blind := [
            p for p, uid in sorted(usage.unreadable.items()) if p != INIT_PID and f.openable_by(uid)
        ]:
            few = ", ".join(str(p) for p in blind[:5]) + ("..." if len(blind) > 5 else "")
            kept.append((f, f"possibly in use: the maps of PID {few} cannot be read (run as root)"))
        else:
            remove.append(f)
            if users:
                freed.append((f, tuple(users)))
    removed = {k for f in remove if (k := f.key) is not None}
    forget = sorted(k for k in usage.owned if k not in present or k in removed)
    return ShmPlan(tuple(remove), tuple(kept), tuple(freed), tuple(not_ours), tuple(forget))


def remove_commands(
    files: Sequence[ShmFile], shm_dir: str = SHM_DIR, batch: int = 200
) -> list[str]:
    """``rm -f --`` commands (batched so no command line grows unbounded)."""
    paths = [f.path for f in files if _safe(f.path, shm_dir)]
    return [
        "rm -f -- " + " ".join(shlex.quote(p) for p in paths[i : i + batch])
        for i in range(0, len(paths), batch)
    ]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
