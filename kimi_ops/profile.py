"""The deployment profile: the ``kimi`` section of Fabric's configuration, validated.

``load_profile`` takes the merged mapping (defaults, fabric.yaml, ``-f FILE``, per-task command-line
overrides) and returns a frozen :class:`Profile`, or raises :class:`~kimi_ops.errors.ProfileError`
naming the key. Validation happens before any remote command runs.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from .defaults import DEFAULTS, STANDIN_DEFAULTS
from .errors import ProfileError
from .extra_args import check_extra_args, sets_max_model_len
from .procs import norm_dir
from .redact import (
    MASK,
    MIN_MASK_LENGTH,
    Masker,
    flag_secrets,
    is_secret_env,
    redact_env,
    secret_parts,
    with_default_patterns,
)
from .router import RouterSettings, parse_router
from .rundir import absolute_run_dir
from .sections import merged_section

ENGINES = ("vllm", "standin")
DEVICES = ("auto", "cuda", "cpu")
HOST_KEY_POLICIES = ("reject", "accept-new")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Names the launch script cannot export: bash's read-only or special variables, and the
#: script's own (``kimi_ops_*``).
RESERVED_ENV = frozenset(
    {
        "UID",
        "EUID",
        "PPID",
        "SHELLOPTS",
        "BASHOPTS",
        "BASH_VERSINFO",
        "BASHPID",
        "GROUPS",
        "FUNCNAME",
        "BASH_ARGV",
        "BASH_ARGC",
        "BASH_LINENO",
        "BASH_SOURCE",
        "IFS",
        "BASH_ENV",
        "ENV",
        "PS4",
    }
)
_CC = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True)
class StandinSettings:
    """What the stand-in engine emulates (``kimi.standin``)."""

    gpu: str = STANDIN_DEFAULTS["gpu"]
    gpu_count: int = STANDIN_DEFAULTS["gpu_count"]
    compute_capability: str = STANDIN_DEFAULTS["compute_capability"]
    vllm_version: str = STANDIN_DEFAULTS["vllm_version"]
    load_seconds: float = STANDIN_DEFAULTS["load_seconds"]
    memory_mib: int = STANDIN_DEFAULTS["memory_mib"]
    driver_version: str = STANDIN_DEFAULTS["driver_version"]
    crash_after_seconds: float | None = STANDIN_DEFAULTS["crash_after_seconds"]
    hang: bool = STANDIN_DEFAULTS["hang"]
    echo_argv: bool = STANDIN_DEFAULTS["echo_argv"]
    state_file: str | None = STANDIN_DEFAULTS["state_file"]
    device: str = STANDIN_DEFAULTS["device"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Profile:
    """One deployment: what to serve, how, and where its files live on the host."""

    model: str = DEFAULTS["model"]
    served_model_name: str = DEFAULTS["served_model_name"]
    python: str = DEFAULTS["python"]
    tensor_parallel_size: int = DEFAULTS["tensor_parallel_size"]
    host: str = DEFAULTS["host"]
    port: int = DEFAULTS["port"]
    tool_call_parser: str | None = DEFAULTS["tool_call_parser"]
    reasoning_parser: str | None = DEFAULTS["reasoning_parser"]
    trust_remote_code: bool = DEFAULTS["trust_remote_code"]
    env: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULTS["env"]))
    extra_args: tuple[str, ...] = ()
    run_dir: str = DEFAULTS["run_dir"]
    keep_logs: int = DEFAULTS["keep_logs"]
    startup_timeout: float = DEFAULTS["startup_timeout"]
    stall_timeout: float = DEFAULTS["stall_timeout"]
    poll_interval: float = DEFAULTS["poll_interval"]
    log_line_limit: int = DEFAULTS["log_line_limit"]
    grace_seconds: float = DEFAULTS["grace_seconds"]
    shm_dir: str = DEFAULTS["shm_dir"]
    engine: str = DEFAULTS["engine"]
    device: str = DEFAULTS["device"]
    patch_kv_config: bool | str = DEFAULTS["patch_kv_config"]
    max_model_len: int | str | None = DEFAULTS["max_model_len"]
    api_key: str | None = None
    api_key_env: str | None = None
    secret_env: tuple[str, ...] = tuple(DEFAULTS["secret_env"])
    secret_patterns: tuple[str, ...] = tuple(DEFAULTS["secret_patterns"])
    host_key_policy: str = DEFAULTS["host_key_policy"]
    known_hosts: str = DEFAULTS["known_hosts"]
    connect_timeout: float = DEFAULTS["connect_timeout"]
    command_timeout: float = DEFAULTS["command_timeout"]
    standin: StandinSettings = field(default_factory=StandinSettings)
    hosts: tuple[str, ...] = ()
    host_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    parallel: int = DEFAULTS["parallel"]
    router: RouterSettings = field(default_factory=RouterSettings)
    # kimi.cluster, validated by kimi_ops.cluster.load_cluster (empty: no cluster).
    cluster: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_standin(self) -> bool:
        return self.engine == "standin"

    def is_secret(self, name: str, value: object = None) -> bool:
        """Is the env variable ``name`` a secret: its name matches ``secret_patterns``, or its
        ``value`` carries a credential by its shape (a URL with a password, a known token
        format: :func:`kimi_ops.redact.is_secret_value`)?"""
        return is_secret_env(name, value, self.secret_patterns)

    def to_public_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with every secret shown as ``***`` (safe to print)."""
        out = self.to_dict()
        out["env"] = redact_env(self.env, self.secret_patterns)
        if self.api_key is not None:
            out["api_key"] = MASK
        masker = Masker(flag_secrets(self.extra_args))
        out["extra_args"] = [masker(a) for a in self.extra_args]
        out["host_overrides"] = {
            k: {
                **dict(v),
                **(
                    {"env": redact_env(v["env"], self.secret_patterns)}
                    if isinstance(v.get("env"), Mapping)
                    else {}
                ),
                **({"api_key": MASK} if v.get("api_key") is not None else {}),
            }
            for k, v in self.host_overrides.items()
        }
        return out

    def __repr__(self) -> str:  # never print a secret, even in a traceback or a debugger
        return f"Profile({self.to_public_dict()!r})"

    def with_run_dir(self, run_dir: str) -> Profile:
        """The same profile with ``run_dir`` resolved (e.g. ``~`` expanded on the host) and
        normalised (:func:`kimi_ops.procs.norm_dir`)."""
        return _replace(self, run_dir=norm_dir(run_dir))

    def for_host(self, names: str | Sequence[str]) -> Profile:
        """The profile with every ``host_overrides`` entry whose key is one of ``names`` applied,
        in the order given (see :func:`host_keys`: the most specific key wins)."""
        wanted = [names] if isinstance(names, str) else list(names)
        overs = [self.host_overrides[n] for n in dict.fromkeys(wanted) if n in self.host_overrides]
        if not overs:
            return self
        merged = self.to_dict()
        for over in overs:
            merged = merge(merged, dict(over))
        return load_profile(merged)

    def check_override_keys(self, run_hosts: Sequence[Sequence[str]]) -> None:
        """Every ``host_overrides`` key must name a host of this run (any of its
        :func:`host_keys`) or one listed in ``kimi.hosts``; raises ProfileError naming the first
        that does not (a typo there would otherwise be ignored silently)."""
        known = {n for names in run_hosts for n in names}
        for entry in self.hosts:
            known |= set(host_keys(*split_host(entry)))
        for key in self.host_overrides:
            if key not in known:
                typed = sorted({names[-1] for names in run_hosts if names} | set(self.hosts))
                raise ProfileError(
                    f"host_overrides.{key}",
                    "matches no host of this run" + (f" ({', '.join(typed)})" if typed else ""),
                    hint="a key is the host as you typed it (an ssh-config alias, host, "
                    "host:port, user@host or user@host:port) or its resolved hostname",
                )

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable mapping of every key (secrets included: do not print it)."""
        out = asdict(self)
        out["env"] = dict(self.env)
        out["extra_args"] = list(self.extra_args)
        out["secret_env"] = list(self.secret_env)
        out["secret_patterns"] = list(self.secret_patterns)
        out["hosts"] = list(self.hosts)
        out["host_overrides"] = {k: dict(v) for k, v in self.host_overrides.items()}
        out["router"] = {**asdict(self.router), "addresses": dict(self.router.addresses)}
        return out


def split_host(text: str) -> tuple[str | None, str, int | None]:
    """``user@host:port`` (user and port optional) as (user, host, port)."""
    user, _, rest = text.rpartition("@")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        host, port = rest, ""
    return (user or None), host, (int(port) if port else None)


def host_keys(
    user: str | None, typed: str, port: int | None = None, resolved: str | None = None
) -> list[str]:
    """The ``host_overrides`` keys that name one host, least specific first: the host (as typed:
    an ssh-config alias or an address; then the hostname it resolves to), ``host:port``,
    ``user@host``, ``user@host:port``."""
    hosts = list(dict.fromkeys(h for h in (resolved, typed) if h))
    keys = list(hosts)
    if port is not None:
        keys += [f"{h}:{port}" for h in hosts]
    if user:
        keys += [f"{user}@{h}" for h in hosts]
        if port is not None:
            keys += [f"{user}@{h}:{port}" for h in hosts]
    return keys


def _replace(profile: Profile, **changes: Any) -> Profile:
    from dataclasses import replace

    return replace(profile, **changes)


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two mappings (``override`` wins; nested mappings are merged, lists replaced)."""
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key != "env":
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --- validation -----------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _num(key: str, value: Any, *, minimum: float = 0.0, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(key, f"must be a number, got {value!r}")
    if value < minimum or (value == minimum and not allow_zero):
        bound = f">= {minimum}" if allow_zero else f"> {minimum}"
        raise ProfileError(key, f"must be {bound}, got {value!r}")
    return float(value)


def _str(key: str, value: Any, *, optional: bool = False, nonempty: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProfileError(key, f"must be a string, got {type(value).__name__} {value!r}")
    if nonempty and not value.strip():
        raise ProfileError(key, "must not be empty")
    if "\x00" in value:
        raise ProfileError(key, "must not contain a NUL byte")
    return value


def _known_secrets(
    env: Mapping[str, str], api_key: str | None, patterns: Sequence[str]
) -> dict[str, str]:
    """The profile's secret values by where they are given (``env.NAME``, ``api_key``)."""
    known = {f"env.{k}": v for k, v in env.items() if is_secret_env(k, v, patterns)}
    if api_key:
        known["api_key"] = api_key
    return known


def _no_secret_value_in_args(
    args: tuple[str, ...], env: Mapping[str, str], api_key: str | None, patterns: Sequence[str]
) -> None:
    """ProfileError if an extra argument holds the value of a secret the profile knows (a
    secret ``env`` value, ``api_key``): every extra argument is on the server's command line
    (``ps``) and in launch.sh, which masking the diff would have hidden from the user."""
    known = _known_secrets(env, api_key, patterns)
    for i, arg in enumerate(args):
        for where, value in known.items():
            if len(value) >= MIN_MASK_LENGTH and value in arg:
                raise ProfileError(
                    f"extra_args[{i}]",
                    f"holds the value of the secret kimi.{where} (not shown): every extra "
                    "argument is on the server's command line, visible in ps, and in launch.sh",
                    hint="let the server read the secret from its environment (kimi.env, "
                    "secret_env) rather than passing it as an argument",
                )


def _no_secret_value_in_env(
    env: Mapping[str, str], api_key: str | None, patterns: Sequence[str]
) -> None:
    """ProfileError if a non-secret ``env`` value holds the value of a secret the profile knows
    (a secret ``env`` value or a part of it: a URL's password; ``api_key``): a non-secret value
    is exported from launch.sh in clear, which masking the diff would have hidden from the
    user (red-team round 4, #17)."""
    known = _known_secrets(env, api_key, patterns)
    for name, text in env.items():
        if is_secret_env(name, text, patterns):
            continue
        for where, value in known.items():
            if any(part in text for part in secret_parts(value)):
                raise ProfileError(
                    f"env.{name}",
                    f"holds the value of the secret kimi.{where} (not shown): env.{name} is "
                    "not secret by its name, so it would be written into launch.sh in clear",
                    hint=f"give env.{name} a secret name (one of secret_patterns: it then goes "
                    "to the 0600 env file only), or leave the secret out of its value",
                )


def _api_key(key: str, value: str | None) -> str | None:
    """The API key as given, unless it holds a control character (a newline, a tab): an HTTP
    header cannot carry one, so every request (verify's included) would fail on the client
    with an error that quotes the key; refused here, its value not shown."""
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ProfileError(
            key,
            "holds a control character (a newline, a tab; not shown): an HTTP header cannot "
            "carry it, so no request could authenticate",
            hint="remove the trailing newline of the file or command the key came from",
        )
    return value


def _abs_path(key: str, value: Any) -> str:
    text = _str(key, value) or ""
    if not text.startswith("/") or "\n" in text:
        raise ProfileError(key, f"must be an absolute path, got {value!r}")
    return text.rstrip("/") or "/"


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(key, f"must be true or false, got {value!r}")
    return value


def _str_list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ProfileError(
            key,
            f"must be a list of strings, got {type(value).__name__} {value!r}",
            hint='write it as a YAML list, e.g. ["--max-model-len", "131072"]',
        )
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ProfileError(f"{key}[{i}]", f"must be a string, got {item!r}")
        text = str(item)
        if "\x00" in text:
            raise ProfileError(f"{key}[{i}]", "must not contain a NUL byte")
        out.append(text)
    return tuple(out)


def _env(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ProfileError(key, f"must be a mapping of NAME: value, got {value!r}")
    out: dict[str, str] = {}
    for name, val in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ProfileError(f"{key}.{name}", "is not a valid environment variable name")
        if name in RESERVED_ENV or name.lower().startswith("kimi_ops_"):
            raise ProfileError(
                f"{key}.{name}", "is reserved (a bash special variable or the script's own)"
            )
        if isinstance(val, bool) or not isinstance(val, (str, int, float)):
            raise ProfileError(f"{key}.{name}", f"must be a string, got {val!r}")
        text = str(val)
        if "\x00" in text:
            raise ProfileError(f"{key}.{name}", "must not contain a NUL byte")
        out[name] = text
    return out


def _standin(value: Any) -> StandinSettings:
    if value is None:
        raise ProfileError("standin", "must be a mapping, got None")
    data = merged_section("standin", value, STANDIN_DEFAULTS)
    count = data["gpu_count"]
    if not _is_int(count) or count < 0:
        raise ProfileError("standin.gpu_count", f"must be a whole number >= 0, got {count!r}")
    cc = str(data["compute_capability"])
    if not _CC.match(cc):
        raise ProfileError("standin.compute_capability", f"must look like 12.0, got {cc!r}")
    version = str(data["vllm_version"])
    try:
        Version(version)
    except InvalidVersion:
        raise ProfileError("standin.vllm_version", f"is not a version: {version!r}") from None
    memory = data["memory_mib"]
    if not _is_int(memory) or memory <= 0:
        raise ProfileError("standin.memory_mib", f"must be a positive integer, got {memory!r}")
    crash = data["crash_after_seconds"]
    if data["device"] not in ("cuda", "cpu"):
        raise ProfileError("standin.device", f"must be cuda or cpu, got {data['device']!r}")
    return StandinSettings(
        gpu=_str("standin.gpu", data["gpu"]) or "",
        gpu_count=count,
        compute_capability=cc,
        vllm_version=version,
        load_seconds=_num("standin.load_seconds", data["load_seconds"], allow_zero=True),
        memory_mib=memory,
        driver_version=str(data["driver_version"]),
        crash_after_seconds=(
            None if crash is None else _num("standin.crash_after_seconds", crash, allow_zero=True)
        ),
        hang=_bool("standin.hang", data["hang"]),
        echo_argv=_bool("standin.echo_argv", data["echo_argv"]),
        state_file=_str("standin.state_file", data["state_file"], optional=True),
        device=data["device"],
    )


def _max_model_len(value: Any, extra_args: Any) -> int | str | None:
    """``max_model_len``: None, a positive integer or ``"auto"``; not together with a
    ``--max-model-len`` in extra_args (two sources for one flag)."""
    if value is None:
        return None
    if value != "auto" and (not _is_int(value) or value < 1):
        raise ProfileError("max_model_len", f"must be a positive integer or auto, got {value!r}")
    if sets_max_model_len(extra_args):
        raise ProfileError(
            "max_model_len",
            "conflicts with --max-model-len in extra_args",
            hint="set the length in one place: kimi.max_model_len or extra_args",
        )
    return value


def load_profile(
    config: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
) -> Profile:
    """Validate the ``kimi`` configuration section (merged over the defaults) into a Profile.

    ``overrides`` (per-task command-line values) win over ``config``; keys whose value is None
    in ``overrides`` are ignored, so a task can pass all its optional flags unconditionally.
    Raises ProfileError naming the first bad key.
    """
    data = merge(DEFAULTS, dict(config or {}))
    if overrides:
        data = merge(data, {k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise ProfileError(
            unknown[0],
            "is not a known key",
            hint="known keys: " + ", ".join(sorted(DEFAULTS)),
        )

    tp = data["tensor_parallel_size"]
    if not _is_int(tp) or tp < 1:
        raise ProfileError("tensor_parallel_size", f"must be a positive integer, got {tp!r}")
    port = data["port"]
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not _is_int(port) or not 1 <= port <= 65535:
        raise ProfileError("port", f"must be an integer from 1 to 65535, got {port!r}")
    engine = data["engine"]
    if engine not in ENGINES:
        raise ProfileError("engine", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    device = data["device"]
    if device not in DEVICES:
        raise ProfileError("device", f"must be one of {', '.join(DEVICES)}, got {device!r}")
    patch = data["patch_kv_config"]
    if patch not in (True, False, "auto"):
        raise ProfileError("patch_kv_config", f"must be auto, true or false, got {patch!r}")
    max_model_len = _max_model_len(data["max_model_len"], data["extra_args"])
    policy = data["host_key_policy"]
    if policy not in HOST_KEY_POLICIES:
        raise ProfileError(
            "host_key_policy", f"must be one of {', '.join(HOST_KEY_POLICIES)}, got {policy!r}"
        )
    api_key_env = _str("api_key_env", data["api_key_env"], optional=True)
    if api_key_env is not None and not _ENV_NAME.match(api_key_env):
        raise ProfileError("api_key_env", f"is not an environment variable name: {api_key_env!r}")
    secret_env = _str_list("secret_env", data["secret_env"])
    for name in secret_env:
        if not _ENV_NAME.match(name):
            raise ProfileError("secret_env", f"is not an environment variable name: {name!r}")
    secret_patterns = _str_list("secret_patterns", data["secret_patterns"])
    if any(not p.strip() for p in secret_patterns):
        raise ProfileError("secret_patterns", "must not contain an empty pattern")
    secret_patterns = with_default_patterns(secret_patterns)  # add to the defaults, never replace
    line_limit = data["log_line_limit"]
    if not _is_int(line_limit) or line_limit < 1:
        raise ProfileError("log_line_limit", f"must be a positive integer, got {line_limit!r}")
    keep_logs = data["keep_logs"]
    if not _is_int(keep_logs) or keep_logs < 1:
        raise ProfileError("keep_logs", f"must be a positive integer, got {keep_logs!r}")
    parallel = data["parallel"]
    if not _is_int(parallel) or parallel < 1:
        raise ProfileError("parallel", f"must be a positive integer, got {parallel!r}")
    overrides_map = data["host_overrides"]
    if not isinstance(overrides_map, Mapping) or not all(
        isinstance(v, Mapping) for v in overrides_map.values()
    ):
        raise ProfileError("host_overrides", "must map host names to profile mappings")
    for host, over in overrides_map.items():
        bad = sorted(set(over) - set(DEFAULTS))
        if bad:
            raise ProfileError(f"host_overrides.{host}.{bad[0]}", "is not a known key")

    env = _env("env", data["env"])
    api_key = _api_key("api_key", _str("api_key", data["api_key"], optional=True))
    extra_args = check_extra_args(_str_list("extra_args", data["extra_args"]))
    _no_secret_value_in_args(extra_args, env, api_key, secret_patterns)
    _no_secret_value_in_env(env, api_key, secret_patterns)
    return Profile(
        model=_str("model", data["model"]) or "",
        served_model_name=_str("served_model_name", data["served_model_name"]) or "",
        python=_str("python", data["python"]) or "",
        tensor_parallel_size=tp,
        host=_str("host", data["host"]) or "",
        port=port,
        tool_call_parser=_str("tool_call_parser", data["tool_call_parser"], optional=True),
        reasoning_parser=_str("reasoning_parser", data["reasoning_parser"], optional=True),
        trust_remote_code=_bool("trust_remote_code", data["trust_remote_code"]),
        env=env,
        extra_args=extra_args,
        run_dir=absolute_run_dir("run_dir", _str("run_dir", data["run_dir"]) or ""),
        keep_logs=keep_logs,
        startup_timeout=_num("startup_timeout", data["startup_timeout"]),
        stall_timeout=_num("stall_timeout", data["stall_timeout"]),
        poll_interval=_num("poll_interval", data["poll_interval"]),
        log_line_limit=line_limit,
        grace_seconds=_num("grace_seconds", data["grace_seconds"], allow_zero=True),
        shm_dir=_abs_path("shm_dir", data["shm_dir"]),
        engine=engine,
        device=device,
        patch_kv_config=patch,
        max_model_len=max_model_len,
        api_key=api_key,
        api_key_env=api_key_env,
        secret_env=secret_env,
        secret_patterns=secret_patterns,
        host_key_policy=policy,
        known_hosts=_str("known_hosts", data["known_hosts"]) or "",
        connect_timeout=_num("connect_timeout", data["connect_timeout"]),
        command_timeout=_num("command_timeout", data["command_timeout"]),
        standin=_standin(data["standin"]),
        hosts=_str_list("hosts", data["hosts"]),
        host_overrides={str(k): dict(v) for k, v in overrides_map.items()},
        parallel=parallel,
        router=parse_router(data["router"]),
        cluster=_cluster_section(data["cluster"]),
    )


def _cluster_section(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ProfileError("cluster", f"must be a mapping (head, workers, ...), got {value!r}")
    return copy.deepcopy(dict(value))


def secret_env_values(profile: Profile, environ: Mapping[str, str]) -> dict[str, str]:
    """The secrets the server gets through its 0600 env file (never its command line).

    ``VLLM_API_KEY`` from ``api_key`` or the local variable ``api_key_env`` names, each
    variable in ``secret_env`` (e.g. HF_TOKEN) that is set locally, and each ``kimi.env`` value
    whose name looks secret (``secret_patterns``; the launch script leaves those out).
    ``environ`` is the local environment, passed in (this module does no I/O).
    """
    out: dict[str, str] = {k: v for k, v in profile.env.items() if profile.is_secret(k, v)}
    key = profile.api_key
    if key is None and profile.api_key_env:
        key = environ.get(profile.api_key_env)
        if not key:
            raise ProfileError(
                "api_key_env",
                f"names the environment variable {profile.api_key_env}, which is not set",
                hint=f"export {profile.api_key_env}=... before running fab",
            )
    if key:
        out["VLLM_API_KEY"] = _api_key("api_key_env", key) or key
    for name in profile.secret_env:
        value = environ.get(name)
        if value:
            out[name] = value
    return out


def unset_secret_env(profile: Profile, environ: Mapping[str, str]) -> list[str]:
    """The ``secret_env`` names not set (or empty) in the local environment ``environ``: the
    server would get none of them. Never dropped silently: deploy fails when the host's env
    file holds one (the running server got it), and says so otherwise."""
    return [name for name in profile.secret_env if not environ.get(name)]
