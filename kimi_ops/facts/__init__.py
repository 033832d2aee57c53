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

One module per fact family: :mod:`.gpu` (nvidia-smi), :mod:`.vllm` (version), :mod:`.model`
(model directory), :mod:`.disk` (df), :mod:`.ports` (/proc/net/tcp, ss), :mod:`.system` (logind,
pidfile); :mod:`.gather` builds the command, :mod:`.host` parses its output. CPU facts live in
:mod:`kimi_ops.cpu`. Every public name is re-exported here.
"""

from __future__ import annotations

from .disk import DiskSpace, parse_df
from .gather import JSON_READ_LIMIT, MARKER, SECTIONS, gather_command, nvidia_smi_command
from .gpu import (
    COMPUTE_APPS_FIELDS,
    GPU_QUERY_FIELDS,
    Gpu,
    GpuProcess,
    compute_apps_query_args,
    gpu_query_args,
    parse_compute_apps,
    parse_gpus,
)
from .host import (
    HostFacts,
    Section,
    facts_from_mapping,
    facts_from_sections,
    nvidia_smi_missing,
    one_line,
    parse_gathered,
    render_sections,
    split_sections,
    unfinished_part,
)
from .model import (
    CONFIG_BACKUP,
    HF_QUANT_BACKUP,
    model_listing_command,
    parse_model_listing,
    shards_from_index,
)
from .paths import sh_quote
from .ports import (
    parse_listen_addresses,
    parse_proc_net_tcp,
    parse_ss_listen,
    parse_ss_listen_processes,
)
from .system import parse_logind_remove_ipc, parse_pidfile
from .vllm import VLLM_VERSION_SCRIPT, parse_vllm_dists, parse_vllm_version

__all__ = [
    "COMPUTE_APPS_FIELDS",
    "CONFIG_BACKUP",
    "DiskSpace",
    "GPU_QUERY_FIELDS",
    "Gpu",
    "GpuProcess",
    "HF_QUANT_BACKUP",
    "HostFacts",
    "JSON_READ_LIMIT",
    "MARKER",
    "SECTIONS",
    "Section",
    "VLLM_VERSION_SCRIPT",
    "compute_apps_query_args",
    "facts_from_mapping",
    "facts_from_sections",
    "gather_command",
    "gpu_query_args",
    "model_listing_command",
    "nvidia_smi_command",
    "nvidia_smi_missing",
    "one_line",
    "parse_compute_apps",
    "parse_df",
    "parse_gathered",
    "parse_gpus",
    "parse_logind_remove_ipc",
    "parse_model_listing",
    "parse_pidfile",
    "parse_listen_addresses",
    "parse_proc_net_tcp",
    "parse_ss_listen",
    "parse_ss_listen_processes",
    "parse_vllm_dists",
    "parse_vllm_version",
    "render_sections",
    "sh_quote",
    "shards_from_index",
    "split_sections",
    "unfinished_part",
]
