"""Decoration does not change a diagnosis: every real corpus excerpt, re-wrapped the way log
viewers and pastes wrap lines, gets the label it gets bare.

The real excerpts in ``tests/fixtures/corpus`` come with whatever decoration their source had;
the same log reaches users through docker compose, ``kubectl logs --prefix``, timestamping
log shippers, systemd's journal and syslog servers, docker's json-file records, markdown
quotes, k9s, the launchers' per-rank labels (srun, torchrun, mpirun) and vLLM's own colour
formatter. A rule that only works on
one decoration is fitted to it, so each excerpt is decorated line by line and diagnosed again.
Tools' own labels (stern's pod and container, pdsh's host) match no pattern: they are learned
from the log's first lines.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_ops.diagnose import diagnose

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"

#: vLLM's own ColoredFormatter (vllm/logging_utils/formatter.py, on a terminal or under
#: ``docker run -t``): the level in its colour, the time and ``[file.py:N]`` in grey.
_VLLM_RECORD_RE = re.compile(
    r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (\[[\w./-]+:\d+\])"
)
_LEVEL_COLOUR = {"DEBUG": 37, "INFO": 32, "WARNING": 33, "ERROR": 31, "CRITICAL": 35}


def _vllm_colours(line: str) -> str:
    return _VLLM_RECORD_RE.sub(
        lambda m: (
            f"\x1b[{_LEVEL_COLOUR[m[1]]}m{m[1]}\x1b[0m \x1b[90m{m[2]}\x1b[0m \x1b[90m{m[3]}\x1b[0m"
        ),
        line,
    )


#: Each prefixes every line, as the tool in its name does (vllm_colour: colours vLLM's
#: records as its own formatter does).
DECORATIONS: dict[str, Callable[[str], str]] = {
    "vllm_colour": _vllm_colours,
    "compose": lambda line: "vllm-1  | " + line,
    "kubectl": lambda line: "[pod/vllm-0/vllm] " + line,
    "shipper": lambda line: "2026-01-01T00:00:00.123456789Z " + line,
    "cri": lambda line: "2026-01-01T00:00:00.123456789Z stderr F " + line,  # /var/log/pods
    "docker_json": lambda line: (
        json.dumps(  # docker's json-file driver, one record a line
            {"log": line, "stream": "stderr", "time": "2026-01-01T00:00:00.1Z"},
            separators=(",", ":"),
        )
        + "\n"
    ),
    "viewer": lambda line: "2026-01-01 00:00:00.123 | " + line,
    # a systemd unit's log: journalctl -o short-iso, and a syslog server's RFC 5424 records
    "journald_iso": lambda line: "2026-01-01T00:00:00+0000 gpu-node-01 python3[4821]: " + line,
    "rfc5424": lambda line: "<14>1 2026-01-01T00:00:00.1Z gpu-node-01 vllm 4821 - - " + line,
    "quote": lambda line: "> " + line,
    "srun": lambda line: "0: " + line,  # srun --label (Slurm)
    "torchrun": lambda line: "[default0]:" + line,  # torchrun --tee
    "mpirun": lambda line: "[1,0]<stderr>:" + line,  # mpirun --tag-output
    # labels no pattern knows, learned from the log's first lines (learn_line_prefix)
    "stern": lambda line: "vllm-7d9f8c6b5-x2k4p vllm " + line,  # stern's "pod container"
    "pdsh": lambda line: "gpu-node-01: " + line,  # pdsh / clush's host label
}
#: Decorations told from a constant label on every line: a one-line excerpt cannot show one.
LEARNED = {"stern", "pdsh"}

#: Pastes hard-wrapped at a terminal's width: a viewer would prefix the whole logical line
#: once, not each wrapped piece, so prefixing every physical line is no real decoration.
HARD_WRAPPED = {
    "engine_killed__h216_raylet_memory_pressure_oom_workers_killed_colour.log",
    "quantization_unsupported__d423_odysseus_pascal_compressed_tensors_pydantic_quoted.log",
    "kv_cache_insufficient__f209_v1_qwen36_27b_200k_to_serve_wrapped.log",
    "kv_cache_insufficient__b116_arc_b70_v1_kv_needed_wrapped.log",
    "kv_cache_insufficient__a004_intel_arc_b70_kv_bytes_too_small.log",
    "kv_cache_dtype_unsupported__f212_v1_gemma4_turboquant_backend_kv_dtype_rejected.log",
    "kv_cache_dtype_unsupported__a063_rdna3_fp8kv_prefix_caching_triton_v0.log",
    "engine_dead_other__g414_club3090_gemma4_perheadkv_page_size_notimpl.log",
    # DeepGEMM's "Assertion error (file:line): reason" is one line; the paste wrapped it
    "unsupported_gpu__u807_deepgemm_sm121_unsupported_arch.log",
    # Gloo's "RuntimeError: [.../unbound_buffer.cc:78] Timed out waiting ..." is one line
    "nccl_error__w901_ray_multinode_gloo_recv_timeout.log",
    # an exception's message wrapped by a README's line width (two lines, no prefix)
    "kv_cache_dtype_unsupported__zz503_nvfp4_kv_triton_backend_invalid.log",
    "kv_cache_insufficient__zz605_max_seq_len_exceeds_kv_cache_note.log",
}


def _excerpts() -> list[Path]:
    names: list[str] = []
    for index in sorted((CORPUS / "index").glob("*.tsv")):
        with index.open(encoding="utf-8", newline="") as fh:
            names += [row["file"] for row in csv.DictReader(fh, delimiter="\t")]
    return [CORPUS / "logs" / n for n in names if n not in HARD_WRAPPED]


def test_the_hard_wrapped_list_names_real_excerpts() -> None:
    for name in HARD_WRAPPED:
        assert (CORPUS / "logs" / name).is_file(), name


@pytest.mark.parametrize("name", sorted(DECORATIONS))
def test_decorating_every_line_keeps_every_label(name: str) -> None:
    decorate = DECORATIONS[name]
    changed = []
    paths = _excerpts()
    assert len(paths) > 500
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        if name in LEARNED and sum(1 for ln in text.split("\n") if ln.strip()) < 2:
            continue
        bare = diagnose(text).label
        dressed = "".join(decorate(line) for line in text.splitlines(keepends=True))
        got = diagnose(dressed).label
        if got != bare:
            changed.append(f"{path.name}: {bare} -> {got}")
    assert not changed, "\n".join(changed)
