"""CPU host facts for vLLM's CPU build: parsers of /proc and /sys text. Pure: no I/O.

On a host without GPUs (``kimi.device: cpu``, or ``auto`` when nvidia-smi does not answer)
preflight checks the CPU instead: usable cores, NUMA memory nodes, memory, and the ISA flags
vLLM's CPU kernels need. Each parser reads the plain output of one command, so it is tested
against real captured output (tests/fixtures/facts/).

What vLLM 0.32's CPU build does with these facts (read in its source, vllm/platforms/cpu.py,
vllm/v1/worker/cpu_worker.py, vllm/utils/ompmultiprocessing.py, vllm/utils/cpu_resource_utils.py):

* Kernels: x86 with ``avx512f`` + ``avx512_bf16`` loads ``vllm._C``; ``avx512f`` alone
  ``vllm._C_AVX512``; otherwise ``vllm._C_AVX2`` (slower). The docs list avx512f as
  recommended, avx512_bf16 and avx512_vnni as optional. MLA models use the AMX_MLA backend
  when the CPU has AMX tiles (``amx_tile``), else the reference CPU_MLA backend.
* Memory: each worker binds its memory to one NUMA node and reads that node's
  ``/sys/devices/system/node/nodeN/meminfo``: available = MemFree + Active(file) +
  Inactive(file) + SReclaimable. Without an explicit KV-cache size (``VLLM_CPU_KVCACHE_SPACE``
  GiB, or ``--kv-cache-memory-bytes``) it reserves ``--gpu-memory-utilization`` (default 0.92)
  of the node's MemTotal and refuses to start when that exceeds the available memory.
* Tensor parallel: with ``VLLM_CPU_OMP_THREADS_BIND=auto`` (the default) rank N runs on the
  N-th allowed NUMA node, so TP needs at least TP allowed memory nodes; an explicit binding
  (``0-31|32-63``) needs one CPU list per rank. One core per rank is reserved for the scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

KIB = 1024

#: ISA flags preflight reports, in the order it names them.
ISA_FLAGS: tuple[str, ...] = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_bf16",
    "amx_tile",
    "amx_int8",
)


@dataclass(frozen=True)
class CpuInfo:
    """From /proc/cpuinfo: the model name, the first CPU's flags, and the physical cores."""

    model_name: str | None
    flags: frozenset[str] | None
    logical_cpus: int
    physical_cores: int | None

    def has(self, flag: str) -> bool:
        """Whether the CPU reports ``flag`` (False when flags are unknown)."""
        return self.flags is not None and flag in self.flags

    @property
    def isa_summary(self) -> str:
        """The notable ISA flags present, e.g. ``avx2 avx512f avx512_bf16``."""
        if self.flags is None:
            return "flags unknown"
        present = [f for f in ISA_FLAGS if f in self.flags]
        return " ".join(present) if present else "none of " + " ".join(ISA_FLAGS)


def cpuinfo_command() -> str:
    """A small extract of /proc/cpuinfo: the first model name and flags lines (big hosts print
    one ~1.5 KB flags line per CPU), and every processor / physical id / core id line."""
    return (
        "awk '/^(model name|flags|Features)[[:space:]]*:/ { if (!seen[$1]++) print; next } "
        "/^(processor|physical id|core id)[[:space:]]*:/ { print }' /proc/cpuinfo"
    )


def _field(line: str) -> tuple[str, str] | None:
    key, sep, value = line.partition(":")
    if not sep:
        return None
    return key.strip().lower(), value.strip()


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse /proc/cpuinfo (the whole file or :func:`cpuinfo_command`'s extract).

    ``flags`` are x86's ``flags`` line (aarch64 names it ``Features``) of the first CPU.
    ``physical_cores`` counts distinct (physical id, core id) pairs; None when the file has no
    core ids (some architectures and VMs).
    """
    model: str | None = None
    flags: frozenset[str] | None = None
    processors = 0
    cores: set[tuple[str, str]] = set()
    physical = ""
    for line in text.splitlines():
        parsed = _field(line)
        if parsed is None:
            continue
        key, value = parsed
        if key == "processor" and value.isdigit():
            processors += 1
            physical = ""
        elif key == "model name" and model is None:
            model = value
        elif key in ("flags", "features") and flags is None:
            flags = frozenset(value.split())
        elif key == "physical id":
            physical = value
        elif key == "core id":
            cores.add((physical, value))
    return CpuInfo(
        model_name=model,
        flags=flags,
        logical_cpus=processors,
        physical_cores=len(cores) or None,
    )


def parse_nproc(text: str) -> int | None:
    """The number ``nproc`` printed (CPUs this process may run on), None when not a number."""
    token = text.strip().splitlines()[-1].strip() if text.strip() else ""
    return int(token) if token.isdigit() else None


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo (``MemTotal:  24683568 kB``) or a NUMA node's meminfo (``Node 0 MemTotal:
    9135848 kB``) -> key -> bytes. Lines without a number are skipped; ``HugePages_*`` counts
    (no unit) are kept as plain numbers."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"^(?:Node\s+\d+\s+)?([A-Za-z0-9_()]+):\s+(\d+)(?:\s+(kB))?\s*$", line)
        if match:
            value = int(match.group(2))
            out[match.group(1)] = value * KIB if match.group(3) else value
    return out


#: The node meminfo fields vLLM's CPU worker adds up as "available" memory.
NODE_AVAILABLE_KEYS = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")


@dataclass(frozen=True)
class MemoryNode:
    """One NUMA node's memory as vLLM's CPU worker reads it (bytes)."""

    node: int
    total_bytes: int
    available_bytes: int


def node_available(meminfo: Mapping[str, int]) -> int:
    """vLLM's "available" memory of a node: MemFree, Active(file), Inactive(file), SReclaimable."""
    return sum(meminfo.get(k, 0) for k in NODE_AVAILABLE_KEYS)


def parse_id_list(text: str) -> list[int]:
    """``0-2,4`` -> [0, 1, 2, 4] (the kernel's list format, as in Mems_allowed_list)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            continue
        out.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return sorted(out)


@dataclass(frozen=True)
class NumaFacts:
    """The host's NUMA memory nodes and which of them the login shell may allocate on."""

    nodes: tuple[MemoryNode, ...] = ()
    mems_allowed: tuple[int, ...] = ()
    cpus_allowed: tuple[int, ...] = ()

    @property
    def allowed_nodes(self) -> tuple[MemoryNode, ...]:
        """The nodes in Mems_allowed_list (all nodes when that list is unknown)."""
        if not self.mems_allowed:
            return self.nodes
        return tuple(n for n in self.nodes if n.node in self.mems_allowed)


def numa_command() -> str:
    """Every NUMA node's meminfo and the shell's allowed memory nodes and CPUs."""
    return (
        "for n in /sys/devices/system/node/node[0-9]*; do "
        '[ -r "$n/meminfo" ] && cat "$n/meminfo"; done; '
        "grep -E '^(Mems_allowed_list|Cpus_allowed_list):' /proc/self/status; true"
    )


def parse_numa(text: str) -> NumaFacts:
    """Parse :func:`numa_command` output (node meminfo files, then the status lines)."""
    per_node: dict[int, dict[str, int]] = {}
    mems: list[int] = []
    cpus: list[int] = []
    for line in text.splitlines():
        node_match = re.match(r"^Node\s+(\d+)\s+", line)
        if node_match:
            per_node.setdefault(int(node_match.group(1)), {}).update(parse_meminfo(line))
            continue
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Mems_allowed_list":
            mems = parse_id_list(value)
        elif sep and key.strip() == "Cpus_allowed_list":
            cpus = parse_id_list(value)
    nodes = tuple(
        MemoryNode(node=n, total_bytes=info["MemTotal"], available_bytes=node_available(info))
        for n, info in sorted(per_node.items())
        if "MemTotal" in info
    )
    return NumaFacts(nodes=nodes, mems_allowed=tuple(mems), cpus_allowed=tuple(cpus))


#: cgroup memory files, v2 then v1, as vLLM reads them (cpu_resource_utils.get_cgroup_memory_*).
CGROUP_FILES: tuple[str, ...] = (
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory.current",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    "/sys/fs/cgroup/memory/memory.usage_in_bytes",
)
#: cgroup v1 reports a sentinel near PAGE_COUNTER_MAX when unlimited; vLLM treats >= 2**62 so.
CGROUP_V1_UNLIMITED = 1 << 62


def cgroup_command() -> str:
    """``PATH VALUE`` for each readable cgroup memory file."""
    return (
        "for f in " + " ".join(CGROUP_FILES) + "; do "
        '[ -r "$f" ] && printf \'%s %s\\n\' "$f" "$(cat "$f")"; done; true'
    )


@dataclass(frozen=True)
class CgroupMemory:
    """The memory limit and usage of the cgroup the server would run in (bytes)."""

    limit: int
    usage: int | None


def parse_cgroup(text: str) -> CgroupMemory | None:
    """:func:`cgroup_command` output -> the effective limit, as vLLM reads it: v2 memory.max
    (``max`` = none), else v1 limit_in_bytes below the unlimited sentinel; None when unlimited."""
    values: dict[str, int | None] = {}
    for line in text.splitlines():
        path, _, value = line.strip().partition(" ")
        if path in CGROUP_FILES:
            values[path] = int(value) if value.strip().isdigit() else None
    v2, v2_usage, v1, v1_usage = CGROUP_FILES
    if values.get(v2) is not None:
        return CgroupMemory(limit=values[v2] or 0, usage=values.get(v2_usage))
    limit = values.get(v1)
    if limit is not None and limit < CGROUP_V1_UNLIMITED:
        return CgroupMemory(limit=limit, usage=values.get(v1_usage))
    return None


def clamp_to_cgroup(node: MemoryNode, cgroup: CgroupMemory | None) -> MemoryNode:
    """The node as vLLM sees it under a cgroup limit: total = the limit when smaller, and
    available no more than limit - usage."""
    if cgroup is None or cgroup.limit >= node.total_bytes:
        return node
    available = max(0, min(node.available_bytes, cgroup.limit - (cgroup.usage or 0)))
    return MemoryNode(node=node.node, total_bytes=cgroup.limit, available_bytes=available)


@dataclass(frozen=True)
class CpuFacts:
    """Everything preflight knows about a CPU host (each part None when it could not be read)."""

    cpuinfo: CpuInfo | None = None
    nproc: int | None = None
    meminfo: Mapping[str, int] | None = None
    numa: NumaFacts = field(default_factory=NumaFacts)
    cgroup: CgroupMemory | None = None

    @property
    def mem_total(self) -> int | None:
        """/proc/meminfo MemTotal in bytes."""
        return (self.meminfo or {}).get("MemTotal")

    @property
    def mem_available(self) -> int | None:
        """/proc/meminfo MemAvailable in bytes."""
        return (self.meminfo or {}).get("MemAvailable")


# --- status: memory instead of GPU memory -----------------------------------------------------

#: Shell text for ``fab status`` (``$pid`` is the server's PID, a process-group leader): the
#: summed RSS of the server's process group in KiB, and the host's MemTotal and MemAvailable.
STATUS_MEMORY_COMMAND = (
    'if [ -n "$pid" ]; then echo "rss_kib=$(ps -eo pgid=,rss= 2>/dev/null '
    '| awk -v g="$pid" \'$1 == g { s += $2 } END { print s + 0 }\')"; fi; '
    'echo "meminfo=$(awk \'/^(MemTotal|MemAvailable):/ { printf "%s ", $2 }\' /proc/meminfo '
    '2>/dev/null)"'
)


def memory_status(values: Mapping[str, str]) -> dict[str, int]:
    """Bytes from STATUS_MEMORY_COMMAND's ``rss_kib=`` and ``meminfo=`` lines (parsed as
    key=value): ``server_rss`` (0 when the group has no process), ``mem_total`` and
    ``mem_available``; keys whose value is missing are left out."""
    out: dict[str, int] = {}
    rss = values.get("rss_kib", "").strip()
    if rss.isdigit():
        out["server_rss"] = int(rss) * KIB
    numbers = values.get("meminfo", "").split()
    if len(numbers) == 2 and all(n.isdigit() for n in numbers):
        out["mem_total"], out["mem_available"] = (int(n) * KIB for n in numbers)
    return out


def memory_status_line(memory: Mapping[str, int]) -> str | None:
    """``memory: server tree RSS 3.1 GiB; host 20.2 GiB available of 23.5 GiB``, or None."""
    parts = []
    if "server_rss" in memory:
        parts.append(f"server tree RSS {memory['server_rss'] / 1024**3:.1f} GiB")
    if "mem_total" in memory and "mem_available" in memory:
        parts.append(
            f"host {memory['mem_available'] / 1024**3:.1f} GiB available of "
            f"{memory['mem_total'] / 1024**3:.1f} GiB"
        )
    return "memory: " + "; ".join(parts) if parts else None
