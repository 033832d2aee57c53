"""A tool's own label on every line (stern's ``pod container``, pdsh's ``host:``, a wrapper's
``[tag]``) matches no known decoration: it is learned from the log's first lines and taken off
every line, and a log's own repeated words are never taken for one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kimi_ops.diagnose import LogDiagnoser, diagnose
from kimi_ops.diagnose.clean import learn_line_prefix

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
SERVING = FIXTURES / "healthy__none__cpu032_serving.log"
#: a real failure whose traceback indentation must survive the label's removal
CRASH = next(FIXTURES.glob("cuda_oom__*.log"))
#: the real engine's log with tqdm's "\r" updates (a chunk may end after any "\r")
BARS = FIXTURES / "bad_argument__max_model_len_too_large__cpu032.log"

VLLM_LINES = [
    "INFO 05-12 10:00:01 [api_server.py:1](APIServer pid=1) non-default args: {}",
    "INFO 05-12 10:00:02 [model.py:2] Resolved architecture: LlamaForCausalLM",
    "INFO 05-12 10:00:03 [loader.py:3] Loading weights took 1.2 seconds",
]


def each(text: str, label: str) -> str:
    return "\n".join(label + line for line in text.split("\n"))


@pytest.mark.parametrize(
    "label",
    [
        "vllm-7d9f8c6b5-x2k4p vllm ",  # stern
        "\x1b[36mvllm-7d9f8c6b5-x2k4p\x1b[0m \x1b[33mvllm\x1b[0m ",  # stern, coloured
        "gpu-node-01: ",  # pdsh / clush
        "[RAW SERVER] ",  # a wrapper script's tag
        "kserve-container ",
    ],
)
def test_a_tools_label_is_learned(label: str) -> None:
    assert learn_line_prefix(each("\n".join(VLLM_LINES), label)) == label


@pytest.mark.parametrize(
    "text",
    [
        "\n".join(VLLM_LINES),  # vLLM's own records: the level is no label
        "\n".join(["Loading safetensors checkpoint shards: 10% done"] * 4),  # a sentence
        "\n".join(["Processed prompts: 100%|##| 5/5"] * 4),
        # NCCL's own records ("host:pid:tid [dev] NCCL INFO") are the log's text
        "\n".join(f"node1:908:908 [0] NCCL INFO Channel 0{i}/02" for i in range(4)),
        "\n".join(f"[06:51:0{i}] loading" for i in range(4)),  # a time is no label
        "\n".join(f"vllm-1  | INFO line {i}" for i in range(4)),  # compose: a known one
        '  File "/x/vllm/engine.py", line 1, in run\n    run()\n  File "/y.py", line 2',
        "gpu-node-01: only one line",  # one line cannot show a label
    ],
)
def test_a_logs_own_words_are_no_label(text: str) -> None:
    assert learn_line_prefix(text) is None


def test_under_pdsh_only_the_host_is_the_label() -> None:
    text = each("\n".join(["Processed prompts: 100%|##| 5/5"] * 4), "gpu-node-01: ")
    assert learn_line_prefix(text) == "gpu-node-01: "


@pytest.mark.parametrize("path", [SERVING, CRASH, BARS], ids=lambda p: p.name)
@pytest.mark.parametrize("label", ["vllm-7d9f8c6b5-x2k4p vllm ", "gpu-node-01: "])
def test_a_labelled_log_reads_as_the_bare_one_in_any_chunks(path: Path, label: str) -> None:
    text = path.read_text(encoding="utf-8")
    bare = diagnose(text)
    labelled = each(text.rstrip("\n"), label) + "\n"
    assert diagnose(labelled) == bare
    whole = LogDiagnoser()
    whole.feed(text)
    rng = random.Random(path.name)
    for max_len in (1, 13, 200):
        d = LogDiagnoser()
        i = 0
        while i < len(labelled):
            n = rng.randint(1, max_len)
            d.feed(labelled[i : i + n])
            i += n
            if i < len(labelled) // 3:  # asked mid-way, while the label is still undecided
                d.diagnosis()
        assert d.diagnosis() == bare, max_len
        assert d.tail == whole.tail  # the lines shown, without the label


def test_the_tail_shows_lines_without_the_label() -> None:
    d = LogDiagnoser()
    d.feed(each("\n".join(VLLM_LINES), "gpu-node-01: ") + "\n")
    assert d.tail[-1] == "Loading weights took 1.2 seconds"
