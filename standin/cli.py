"""Entry point: serve mode, `nvidia-smi ARGS` or `vllm-version`."""

from __future__ import annotations

import sys

from standin.apiserver import Server
from standin.config import ConfigError, load_config
from standin.logfmt import plain, write_out
from standin.smi import nvidia_smi_main


def main(argv: list[str]) -> int:
    try:
        cfg = load_config()
    except ConfigError as exc:
        write_out(sys.stderr, f"kimi-standin: config error: {exc}\n")
        return 1
    if argv[:1] == ["nvidia-smi"]:
        return nvidia_smi_main(argv[1:], cfg)
    if argv[:1] == ["vllm-version"]:
        plain(cfg["vllm_version"])
        return 0
    return Server(cfg).run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
