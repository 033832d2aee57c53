"""GPU facts: the nvidia-smi queries and the parsers of their CSV output."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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
