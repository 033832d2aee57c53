"""nvidia-smi emulation for the emulated GPUs and the live stand-in servers."""

from __future__ import annotations

import time
import uuid
from typing import Any

from standin.gpustate import gpu_usage
from standin.logfmt import plain

# query field -> (canonical header name, unit)
GPU_FIELDS: dict[str, tuple[str, str | None]] = {
    "index": ("index", None),
    "name": ("name", None),
    "gpu_name": ("name", None),
    "compute_cap": ("compute_cap", None),
    "memory.total": ("memory.total", "MiB"),
    "memory.used": ("memory.used", "MiB"),
    "memory.free": ("memory.free", "MiB"),
    "driver_version": ("driver_version", None),
    "uuid": ("uuid", None),
    "gpu_uuid": ("uuid", None),
    "pci.bus_id": ("pci.bus_id", None),
    "gpu_bus_id": ("pci.bus_id", None),
    "count": ("count", None),
    "utilization.gpu": ("utilization.gpu", "%"),
    "temperature.gpu": ("temperature.gpu", None),
    "power.draw": ("power.draw", "W"),
    "persistence_mode": ("persistence_mode", None),
    "compute_mode": ("compute_mode", None),
}
APP_FIELDS: dict[str, tuple[str, str | None]] = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "name": ("process_name", None),
    "used_memory": ("used_gpu_memory", "MiB"),
    "used_gpu_memory": ("used_gpu_memory", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_bus_id": ("gpu_bus_id", None),
    "gpu_name": ("gpu_name", None),
}
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."


def gpu_uuid(index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"kimi-standin-gpu-{index}"))


def gpu_bus_id(index: int) -> str:
    return f"00000000:{(0x01 + 0x20 * index) % 0x100:02X}:00.0"


def smi_fail(msg: str, code: int = 2) -> int:
    plain(msg)  # real nvidia-smi prints its errors on stdout
    return code


def nvidia_smi_main(argv: list[str], cfg: dict[str, Any]) -> int:
    opts: dict[str, str] = {}
    list_gpus = False
    i = 0
    while i < len(argv):
        key, eq, val = argv[i].partition("=")
        if key in ("--query-gpu", "--query-compute-apps", "--format", "--id", "-i"):
            if not eq:
                if i + 1 >= len(argv):
                    return smi_fail(BAD_ARGS)
                i += 1
                val = argv[i]
            opts["--id" if key == "-i" else key] = val
        elif argv[i] in ("-L", "--list-gpus"):
            list_gpus = True
        elif argv[i] in ("-h", "--help"):
            plain(
                f"NVIDIA System Management Interface -- v{cfg['driver_version']} (kimi-standin "
                "emulation)\nSupported: -L, -i ID, --query-gpu=..., --query-compute-apps=..., "
                "--format=csv[,noheader][,nounits]"
            )
            return 0
        else:
            return smi_fail(BAD_ARGS)
        i += 1
    count = cfg["gpu_count"]
    if count == 0:
        return smi_fail(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
            "sure that the latest NVIDIA driver is installed and running.",
            9,
        )
    indices = list(range(count))
    if "--id" in opts:
        try:
            indices = [int(x) for x in opts["--id"].split(",")]
        except ValueError:
            return smi_fail(f"Invalid GPU identifier: {opts['--id']}", 6)
        if any(not 0 <= x < count for x in indices):
            return smi_fail(f"No devices were found matching the ID: {opts['--id']}", 6)
    usage = gpu_usage(cfg)
    if list_gpus:
        for idx in indices:
            plain(f"GPU {idx}: {cfg['gpu']} (UUID: {gpu_uuid(idx)})")
        return 0
    query_gpu, query_apps = opts.get("--query-gpu"), opts.get("--query-compute-apps")
    if query_gpu is None and query_apps is None:
        return smi_table(cfg, indices, usage)
    if query_gpu is not None and query_apps is not None:
        return smi_fail(BAD_ARGS)
    fmt = [o.strip() for o in opts.get("--format", "").split(",") if o.strip()]
    if "csv" not in fmt or any(o not in ("csv", "noheader", "nounits") for o in fmt):
        return smi_fail('"--format" must be csv, optionally with noheader and/or nounits.')
    units = "nounits" not in fmt
    table = GPU_FIELDS if query_gpu is not None else APP_FIELDS
    fields = [f.strip() for f in (query_gpu or query_apps or "").split(",") if f.strip()]
    for field in fields or [""]:
        if field not in table:
            return smi_fail(f'Field "{field}" is not a valid field to query.\n')
    cols = [table[f] for f in fields]
    if "noheader" not in fmt:
        plain(", ".join(h + (f" [{u}]" if u and units else "") for h, u in cols))
    rows: list[dict[str, Any]] = []
    for idx in indices:
        if query_gpu is not None:
            used = min(cfg["memory_mib"], sum(m for _, _, m in usage.get(idx, [])))
            rows.append(
                {
                    "index": idx,
                    "name": cfg["gpu"],
                    "compute_cap": cfg["compute_capability"],
                    "memory.total": cfg["memory_mib"],
                    "memory.used": used,
                    "memory.free": cfg["memory_mib"] - used,
                    "driver_version": cfg["driver_version"],
                    "uuid": gpu_uuid(idx),
                    "pci.bus_id": gpu_bus_id(idx),
                    "count": count,
                    "utilization.gpu": 0,
                    "temperature.gpu": 34 + idx % 4,
                    "power.draw": f"{(85.0 if used else 31.0) + idx * 0.37:.2f}",
                    "persistence_mode": "Enabled",
                    "compute_mode": "Default",
                }
            )
        else:
            for pid, pname, mem in usage.get(idx, []):
                rows.append(
                    {
                        "pid": pid,
                        "process_name": pname,
                        "used_gpu_memory": mem,
                        "gpu_uuid": gpu_uuid(idx),
                        "gpu_bus_id": gpu_bus_id(idx),
                        "gpu_name": cfg["gpu"],
                    }
                )
    for row in rows:
        plain(", ".join(f"{row[h]} {u}" if u and units else str(row[h]) for h, u in cols))
    return 0


def smi_table(
    cfg: dict[str, Any], indices: list[int], usage: dict[int, list[tuple[int, str, int]]]
) -> int:
    """An approximation of the default nvidia-smi table (layout not byte-exact)."""
    bar = "+" + "-" * 87 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    plain(time.strftime("%a %b %d %H:%M:%S %Y"))
    plain(bar)
    drv, cuda = cfg["driver_version"], cfg["cuda_version"]
    head = f"NVIDIA-SMI {drv:<22} Driver Version: {drv:<14} CUDA Version: {cuda}"
    plain(f"| {head:<85} |")
    plain(sep)
    for cells in (
        (
            "GPU  Name                 Persistence-M",
            "Bus-Id          Disp.A",
            "Volatile Uncorr. ECC",
        ),
        (
            "Fan  Temp   Perf          Pwr:Usage/Cap",
            "          Memory-Usage",
            "GPU-Util  Compute M.",
        ),
        ("", "", "              MIG M."),
    ):
        plain(f"| {cells[0]:<39} | {cells[1]:<22} | {cells[2]:<20} |")
    plain("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for idx in indices:
        used = min(cfg["memory_mib"], sum(m for _, _, m in usage.get(idx, [])))
        name = cfg["gpu"] if len(cfg["gpu"]) <= 24 else cfg["gpu"][:21] + "..."
        power = f"{'85W' if used else '31W'} /  600W"
        perf = "P0" if used else "P8"
        rows = (
            (f"{idx:>3}  {name:<24}     On", f"{gpu_bus_id(idx)} Off", f"{'0':>20}"),
            (
                f"N/A   {34 + idx % 4}C    {perf}   {power:>20}",
                f"{used}MiB / {cfg['memory_mib']}MiB",
                "0%      Default",
            ),
            ("", "", f"{'N/A':>20}"),
        )
        for c in rows:
            plain(f"| {c[0]:<39} | {c[1]:>22} | {c[2]:>20} |")
        plain(sep)
    plain("")
    plain(bar)
    plain(f"| {'Processes:':<85} |")
    plain("| " + " GPU   GI   CI              PID   Type   Process name".ljust(75) + "GPU Memory |")
    plain("| " + "       ID   ID".ljust(75) + "Usage      |")
    plain("|" + "=" * 87 + "|")
    procs = [(idx, pid, name, mem) for idx in indices for pid, name, mem in usage.get(idx, [])]
    if not procs:
        plain(f"| {' No running processes found':<85} |")
    for idx, pid, name, mem in procs:
        short = name if len(name) <= 31 else "..." + name[-28:]
        plain(f"| {f'  {idx:>3}   N/A  N/A   {pid:>14}      C   {short:<31} {mem:>7}MiB':<85} |")
    plain(bar)
    return 0
