"""HostFacts: the gathered output split into sections and parsed into one frozen record."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from .. import cpu as cpu_mod
from .. import shm as shm_mod
from .disk import DiskSpace, parse_df
from .gather import MARKER
from .gpu import Gpu, GpuProcess, parse_compute_apps, parse_gpus
from .model import CONFIG_BACKUP, HF_QUANT_BACKUP, parse_model_listing, shards_from_index
from .ports import (
    parse_listen_addresses,
    parse_proc_net_tcp,
    parse_ss_listen,
    parse_ss_listen_processes,
)
from .system import parse_logind_remove_ipc, parse_pidfile
from .vllm import parse_vllm_dists, parse_vllm_version


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


_START_RE = re.compile(r"^" + re.escape(MARKER) + r"(?P<name>[a-z_]+)(?P<end>:rc=\d+)?$", re.M)


def unfinished_part(text: str) -> str | None:
    """The part a marked command (:func:`gather_command`, the process listing after it) was in
    when it was ended: the last part it began and did not end, or None (no part begun, or the
    last one ended). What a timed-out preflight names as what blocked."""
    last: str | None = None
    for m in _START_RE.finditer(text.replace("\r\n", "\n")):
        last = None if m.group("end") else m.group("name")
    return last


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
    #: port -> local addresses listening on it (ss's view, else /proc/net/tcp's)
    listening_addresses: dict[int, set[str]] | None = None
    run_dir_probe: str | None = None
    run_dir_disk: DiskSpace | None = None
    shm_disk: DiskSpace | None = None
    #: The psm_* and sem.mp-* files in shm_dir that no process maps or holds open (name -> size).
    shm_psm_files: dict[str, int] | None = None
    #: shm_dir does not exist on the host.
    shm_dir_missing: bool = False
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
    # cat exits 1 when tcp6 is missing (IPv6 disabled) but still prints tcp.
    proc_tcp = sec.text if sec is not None and sec.text.strip() else None
    if proc_tcp is not None:
        facts["listening_ports"] = parse_proc_net_tcp(proc_tcp)
    sec = get("ss_listen")
    if sec is not None and sec.ok:
        facts["port_processes"] = parse_ss_listen_processes(sec.text)
        facts["port_pids"] = parse_ss_listen(sec.text)
        facts["listening_addresses"] = parse_listen_addresses(sec.text)
    elif proc_tcp is not None:  # ss's view of the addresses, else the kernel's
        facts["listening_addresses"] = parse_listen_addresses(proc_tcp)

    sec = get("df_run_dir")
    if sec is not None and sec.text.strip():
        first, _, rest = sec.text.partition("\n")
        facts["run_dir_probe"] = first.strip() or None
        if sec.ok:
            facts["run_dir_disk"] = parse_df(rest)
    if (sec := get("df_shm")) is not None and sec.ok:
        facts["shm_disk"] = parse_df(sec.text)
    if (sec := get("shm_files")) is not None and sec.ok:
        where = next((ln[4:] for ln in sec.text.split("\n") if ln.startswith("dir=")), "/")
        usage = shm_mod.parse_usage(sec.text, where)
        facts["shm_dir_missing"] = usage.missing
        facts["shm_psm_files"] = {f.name: f.size for f in shm_mod.unused(usage)}

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
