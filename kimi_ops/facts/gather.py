"""The gathering command: one single-line sh command printing every preflight fact."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from .. import cpu as cpu_mod
from ..defaults import PIDFILE, STANDIN_SCRIPT
from ..shell import NL_PRELUDE
from ..shm import usage_command as shm_usage_command
from .gpu import compute_apps_query_args, gpu_query_args
from .model import CONFIG_BACKUP, HF_QUANT_BACKUP, model_listing_command
from .paths import _join, _sh_path, sh_quote
from .vllm import VLLM_VERSION_SCRIPT

if TYPE_CHECKING:
    from ..profile import Profile

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

_LOGIND_FILES = (
    "/etc/systemd/logind.conf",
    "/usr/lib/systemd/logind.conf.d/*.conf",
    "/usr/local/lib/systemd/logind.conf.d/*.conf",
    "/run/systemd/logind.conf.d/*.conf",
    "/etc/systemd/logind.conf.d/*.conf",
)


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
        ("shm_files", shm_usage_command(profile.shm_dir)),
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
