"""``kimi.extra_args``: the vLLM flags a profile adds, and the ones it may not add (pure).

vLLM's argument parser accepts any unambiguous abbreviation of a long flag (argparse's
``allow_abbrev``: ``--por 9999`` is ``--port 9999``, ``--api-ke X`` is ``--api-key X``), and
reads underscores as dashes. So a flag is refused when it is, or abbreviates, one that the
profile sets itself or that carries a secret; and a value shaped like a credential is refused
outright, since every extra argument lands on the server's command line (``ps``) and in
launch.sh.
"""

from __future__ import annotations

from typing import Any

from .errors import ProfileError
from .redact import flag_name, is_secret_value, spelled_flag

#: vLLM flags the profile itself sets on the server's command line: flag -> the profile key to
#: use instead. Given again in ``extra_args`` they would make the server listen elsewhere, serve
#: another name or demand a key verify does not know (vLLM's last flag wins), so they are refused.
PROFILE_FLAGS: dict[str, str] = {
    "--model": "model",
    "--served-model-name": "served_model_name",
    "--host": "host",
    "--port": "port",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--trust-remote-code": "trust_remote_code",
    "--no-trust-remote-code": "trust_remote_code",
    "--api-key": "api_key (or api_key_env)",
    "--tool-call-parser": "tool_call_parser",
    "--reasoning-parser": "reasoning_parser",
}

#: vLLM flags whose value is a secret the profile passes another way: flag -> the ``kimi.env``
#: variable to set instead. On the command line the value would be in ``ps`` for the server's
#: whole life, in launch.sh and in every diff of it; ``kimi.env`` secret-named values reach the
#: server only through the 0600 env file. (``--api-key`` is in :data:`PROFILE_FLAGS`.)
SECRET_ENV_FLAGS: dict[str, str] = {
    "--hf-token": "HF_TOKEN",
}

#: vLLM's ``--config FILE``: a YAML file whose keys become flags (``api_key``, ``port`` ...),
#: out of sight of the checks above; the profile's own keys and extra_args say the same.
CONFIG_FLAG = "--config"


def profile_flag(arg: str) -> str | None:
    """The :data:`PROFILE_FLAGS` flag ``arg`` spells or abbreviates, or None."""
    return spelled_flag(arg, PROFILE_FLAGS)


def _as(name: str, flag: str) -> str:
    return flag if name == flag else f"{name} (vLLM reads it as {flag})"


def check_extra_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` if no flag is refused and no value is a credential; else ProfileError naming
    the first (never its value)."""
    for i, arg in enumerate(args):
        name = flag_name(arg)
        secret_flag = spelled_flag(arg, SECRET_ENV_FLAGS)
        if secret_flag is not None:
            var = SECRET_ENV_FLAGS[secret_flag]
            raise ProfileError(
                f"extra_args[{i}]",
                f"{_as(name, secret_flag)} would put a secret on the server's command line (ps) "
                f"and in launch.sh: set kimi.env.{var} instead",  # never the value
                hint=f"remove {name} and its value from extra_args and set kimi.env.{var}: "
                "it reaches the server only through the 0600 env file",
            )
        if name == CONFIG_FLAG:
            raise ProfileError(
                f"extra_args[{i}]",
                f"{CONFIG_FLAG} would read flags from a file kimi-ops cannot check (an api_key, "
                "a port or a model there would override or bypass the profile's)",
                hint="put the file's settings in the profile: its own keys (port, model, ...) "
                "and extra_args for the rest",
            )
        flag = profile_flag(arg)
        if flag is not None:
            key = PROFILE_FLAGS[flag]
            raise ProfileError(
                f"extra_args[{i}]",
                f"{_as(name, flag)} is set by the profile: use kimi.{key} instead",
                hint=f"remove {name} from extra_args and set kimi.{key.split()[0]}",
            )
        if is_secret_value(arg):
            raise ProfileError(
                f"extra_args[{i}]",
                "holds a credential (a URL with a password or a token, not shown): every "
                "extra argument is on the server's command line, visible in ps, and in launch.sh",
                hint="pass the credential through the environment instead: kimi.env (a "
                "secret-named or credential-shaped value goes only to the 0600 server.env) or "
                "kimi.secret_env (a local variable), e.g. HF_TOKEN for the hub",
            )
    return args


def sets_max_model_len(args: Any) -> bool:
    """``args`` hold ``--max-model-len`` (or an abbreviation, ``--max-model-len=N``)."""
    items = args if isinstance(args, (list, tuple)) else []
    return any(spelled_flag(str(a), ("--max-model-len",)) for a in items)
