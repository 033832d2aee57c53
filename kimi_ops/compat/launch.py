"""Launch-argument changes across vLLM versions: renamed flags, the attention-backend choice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .versions import _ANY, as_version, in_range

#: Version range in which a backend can be chosen with ``--attention-backend NAME``.
ATTENTION_BACKEND_FLAG = SpecifierSet(">=0.13.0")
#: Versions that silently ignore the ``VLLM_ATTENTION_BACKEND`` environment variable.
ATTENTION_ENV_IGNORED = SpecifierSet(">=0.26.0")


@dataclass(frozen=True)
class FlagChange:
    """A launch-argument adjustment and the vLLM versions it applies to."""

    name: str
    old: str | None
    new: str | None
    applies: SpecifierSet
    source: str


FLAG_CHANGES: tuple[FlagChange, ...] = (
    FlagChange(
        "disable-log-requests",
        "--disable-log-requests",
        "--no-enable-log-requests",
        SpecifierSet(">=0.12.0"),
        "--enable-log-requests (and its --no- form) replaced it in vllm#21739 (present in "
        "0.11.x); vllm#29402 removed the old flag, first released in 0.12.0 (several "
        "downstream reports: dynamo#4659, kvcached#270; others place it as late as 0.17.0).",
    ),
    FlagChange(
        "auto-tool-choice",
        None,
        "--enable-auto-tool-choice",
        _ANY,
        "--tool-call-parser only takes effect together with --enable-auto-tool-choice.",
    ),
    FlagChange(
        "attention-backend-env",
        "VLLM_ATTENTION_BACKEND",
        "--attention-backend",
        ATTENTION_BACKEND_FLAG,
        "vllm#26315 (merged 2025-11) added AttentionConfig, --attention-backend and deprecated "
        "the env var; 0.13.0 is the first release certain to have the flag (it may be in "
        "0.12.0). The env var keeps working (with a warning) below 0.26.0, so below 0.13.0 the "
        "env var is used. From 0.26.0 the env var is silently ignored.",
    ),
)


def flag_change(name: str) -> FlagChange:
    """The FLAG_CHANGES row called ``name``."""
    return next(c for c in FLAG_CHANGES if c.name == name)


_BACKEND_OPTIONS = ("--attention-backend", "--attention-config.backend", "-ac.backend")


def find_option(args: Sequence[str], option: str) -> str | None:
    """The value of ``option`` in ``args`` (``--opt VALUE`` or ``--opt=VALUE``); last wins."""
    value: str | None = None
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(option + "="):
            value = arg[len(option) + 1 :]
    return value


def attention_backend_in_args(args: Sequence[str]) -> str | None:
    """An attention backend the arguments already choose, if any."""
    for option in _BACKEND_OPTIONS:
        value = find_option(args, option)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class LaunchAdjustment:
    """Launch arguments and environment after version adjustments, with one note per change."""

    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def adjust_launch(
    args: Sequence[str],
    env: Mapping[str, str],
    vllm_version: Version | str | None,
    tool_call_parser: str | None,
    attention_backend: str | None = None,
) -> LaunchAdjustment:
    """Adjust extra launch arguments and environment to the vLLM version on the host.

    * ``--disable-log-requests`` -> ``--no-enable-log-requests`` where the old flag is gone.
    * ``--enable-auto-tool-choice`` is added when a tool-call parser is set.
    * ``VLLM_ATTENTION_BACKEND`` moves to ``--attention-backend`` where that flag exists (the env
      var is ignored from 0.26.0).
    * ``attention_backend`` (a backend to pin) becomes ``--attention-backend NAME`` or, before
      the flag exists, ``VLLM_ATTENTION_BACKEND``; a backend the user already chose wins.

    With an unknown version only the tool-choice flag is added.
    """
    out = list(args)
    new_env = dict(env)
    notes: list[str] = []
    version = as_version(vllm_version)
    if version is None:
        notes.append("vLLM version unknown: version-dependent launch flags were not adjusted")

    change = flag_change("disable-log-requests")
    old, new = change.old or "", change.new or ""
    if version is not None and old in out and in_range(version, change.applies):
        out = [new if a == old else a for a in out]
        notes.append(f"vLLM {version} has no {change.old}: using {change.new}")

    change = flag_change("auto-tool-choice")
    parser = tool_call_parser or find_option(out, "--tool-call-parser")
    if parser and change.new and change.new not in out:
        out.append(change.new)
        notes.append(f"tool-call parser {parser} needs {change.new}: added")

    change = flag_change("attention-backend-env")
    flag_ok = version is not None and in_range(version, change.applies)
    env_backend = new_env.get("VLLM_ATTENTION_BACKEND")
    arg_backend = attention_backend_in_args(out)
    if env_backend is not None and flag_ok:
        del new_env["VLLM_ATTENTION_BACKEND"]
        ignored = in_range(version, ATTENTION_ENV_IGNORED)
        if arg_backend is None:
            out += ["--attention-backend", env_backend]
            arg_backend = env_backend
            why = "ignores" if ignored else "deprecates"
            notes.append(
                f"vLLM {version} {why} VLLM_ATTENTION_BACKEND: "
                f"using --attention-backend {env_backend}"
            )
        else:
            notes.append(
                f"dropped VLLM_ATTENTION_BACKEND={env_backend}: the arguments already choose "
                f"attention backend {arg_backend}"
            )
    if attention_backend:
        chosen = arg_backend or new_env.get("VLLM_ATTENTION_BACKEND")
        if chosen is not None:
            if chosen.upper() != attention_backend.upper():
                notes.append(
                    f"keeping the configured attention backend {chosen} "
                    f"(the plan would pin {attention_backend})"
                )
        elif flag_ok:
            out += ["--attention-backend", attention_backend]
            notes.append(f"pinned attention backend: --attention-backend {attention_backend}")
        else:
            new_env["VLLM_ATTENTION_BACKEND"] = attention_backend
            notes.append(
                f"pinned attention backend: VLLM_ATTENTION_BACKEND={attention_backend} "
                f"(vLLM {version or 'unknown'} predates --attention-backend)"
            )
    return LaunchAdjustment(args=tuple(out), env=new_env, notes=tuple(notes))
