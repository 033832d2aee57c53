"""A tool's own label on every line (stern's ``pod container``, pdsh's ``host:``, a wrapper's
``[tag]``) matches no known decoration: it is learned from the log's first lines and taken off
every line, and a log's own repeated words are never taken for one."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kimi_ops.diagnose import LogDiagnoser, diagnose
from kimi_ops.diagnose.clean import (
    learn_indent,
    learn_line_numbers,
    learn_line_prefix,
    learn_wrap_width,
    newest_first,
)

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


def fed_in_chunks(
    text: str, rng: random.Random, max_len: int, ask_early: bool = False
) -> LogDiagnoser:
    """A diagnoser fed ``text`` in random pieces of 1 to ``max_len`` characters (asked for a
    diagnosis after each piece of the first third, with ``ask_early``)."""
    d = LogDiagnoser()
    i = 0
    while i < len(text):
        n = rng.randint(1, max_len)
        d.feed(text[i : i + n])
        i += n
        if ask_early and i < len(text) // 3:
            d.diagnosis()
    return d


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
        # asked mid-way too, while the label is still undecided
        d = fed_in_chunks(labelled, rng, max_len, ask_early=True)
        assert d.diagnosis() == bare, max_len
        assert d.tail == whole.tail  # the lines shown, without the label


def test_the_tail_shows_lines_without_the_label() -> None:
    d = LogDiagnoser()
    d.feed(each("\n".join(VLLM_LINES), "gpu-node-01: ") + "\n")
    assert d.tail[-1] == "Loading weights took 1.2 seconds"


@pytest.mark.parametrize(
    ("numbered", "bare"),
    [
        ("{i}:{line}", "{line}"),  # grep -n
        ("{i}-{line}", "{line}"),  # grep -n -C: a context line
        ("{i:6d}\t{line}", "{line}"),  # cat -n, nl
        ("{i:7d} {line}", "{line}"),  # less -N
        ("logs/serve-1.log:{i}:{line}", "{line}"),  # grep -Hn
    ],
)
def test_line_numbers_are_learned_and_taken_off(numbered: str, bare: str) -> None:
    text = "\n".join(numbered.format(i=i, line=ln) for i, ln in enumerate(VLLM_LINES * 2, 1))
    numbers = learn_line_numbers(text)
    assert numbers is not None
    assert numbers.sub("", text) == "\n".join(VLLM_LINES * 2)


@pytest.mark.parametrize(
    "text",
    [
        "\n".join(VLLM_LINES),  # vLLM's own records
        "\n".join(f"2026-01-0{i} 10:00:00 INFO loading" for i in range(1, 6)),  # a date's year
        "\n".join(f"10:0{i}:00 INFO loading" for i in range(1, 6)),  # a time's hour
        "\n".join(f"0: INFO line {i}" for i in range(5)),  # srun's task number
        # an IPython traceback's source lines: numbered, but each frame starts again
        "     44 self.a = a\n     45 self.b = b\n---> 47 self._init()\n"
        "     34 self.c = c\n     35 self.d = d\n---> 36 self.load()",
    ],
)
def test_a_logs_own_numbers_are_no_line_numbers(text: str) -> None:
    assert learn_line_numbers(text) is None


def test_a_grep_n_paste_reads_as_the_bare_log_in_any_chunks() -> None:
    text = CRASH.read_text(encoding="utf-8")
    lines = text.rstrip("\n").split("\n")
    numbered = "\n".join(f"{i}:{ln}" for i, ln in enumerate(lines, 1)) + "\n"
    bare = diagnose(text)
    assert diagnose(numbered).label == bare.label
    streamed = LogDiagnoser()
    for i in range(0, len(numbered), 7):
        streamed.feed(numbered[i : i + 7])
    assert streamed.diagnosis().label == bare.label


@pytest.mark.parametrize(
    "path",
    [CRASH, FIXTURES / "engine_killed__engine_vanished__cpu032_json_records_kill9_engine_core.log"],
    ids=lambda p: p.name,
)
def test_numbers_come_off_before_docker_json_records_are_read(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    records = [
        json.dumps(
            {"log": ln + "\n", "stream": "stderr", "time": "2026-01-01T00:00:00Z"},
            separators=(",", ":"),  # docker's json-file driver writes no spaces
        )
        for ln in text.rstrip("\n").split("\n")
    ]
    numbered = "\n".join(f"{i}:{rec}" for i, rec in enumerate(records, 1)) + "\n"
    assert diagnose(numbered) == diagnose(text)


def _hard_wrapped(text: str, width: int) -> str:
    return "\n".join(
        "\n".join(ln[k : k + width] for k in range(0, len(ln), width)) if ln else ln
        for ln in text.split("\n")
    )


@pytest.mark.parametrize("width", [80, 100, 132])
@pytest.mark.parametrize("label", ["", "vllm-7d9f8c6b5-x2k4p vllm "])
@pytest.mark.parametrize("path", [SERVING, CRASH, BARS], ids=lambda p: p.name)
def test_a_hard_wrapped_log_reads_as_the_bare_one_in_any_chunks(
    path: Path, label: str, width: int
) -> None:
    text = path.read_text(encoding="utf-8")
    bare = diagnose(text)
    wrapped = _hard_wrapped(each(text.rstrip("\n"), label) if label else text, width)
    assert learn_wrap_width(wrapped) == width
    whole = diagnose(wrapped)
    assert (whole.label, whole.lifecycle, whole.evidence) == (
        bare.label,
        bare.lifecycle,
        bare.evidence,
    )
    rng = random.Random(f"{path.name}{width}")
    for max_len in (1, 50, 400):
        assert fed_in_chunks(wrapped, rng, max_len).diagnosis() == whole


def test_a_logs_own_lines_of_one_length_are_no_hard_wrap() -> None:
    # metrics lines of one length, each followed by a record of its own
    line = (
        "INFO 05-12 10:00:0{} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s,"
        " Avg generation throughput: 12.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs"
    )
    text = "\n".join(line.format(i) for i in range(8))
    assert learn_wrap_width(text) is None
    assert diagnose(text).label == "healthy"


#: real engine logs (vLLM's CPU build): up then a crash while serving, and a kill while up
SERVED_THEN_CRASHED = (
    FIXTURES / "engine_dead_other__engine_wrapper__cpu032_kill9_worker_while_serving.log"
)


@pytest.mark.parametrize("path", [SERVING, SERVED_THEN_CRASHED, CRASH], ids=lambda p: p.name)
def test_a_newest_first_paste_is_put_back_in_order(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not newest_first(text)  # a log as written is oldest first
    reversed_paste = "\n".join(reversed(text.rstrip("\n").split("\n"))) + "\n"
    assert newest_first(reversed_paste)  # vLLM's own record times fall
    assert diagnose(reversed_paste).label == diagnose(text).label


def test_a_few_records_out_of_order_are_no_newest_first_paste() -> None:
    # processes interleaving their records: a time may go back now and then
    times = ["10:00:01", "10:00:03", "10:00:02", "10:00:04", "10:00:05", "10:00:04", "10:00:06"]
    text = "\n".join(f"INFO 05-12 {t} [core.py:1] step" for t in times)
    assert not newest_first(text)
    assert not newest_first("INFO 05-12 10:00:02 [a.py:1] x\nINFO 05-12 10:00:01 [a.py:1] y")


def test_a_pastes_indentation_is_learned_but_a_tracebacks_own_is_not() -> None:
    frames = '  File "/x/vllm/engine.py", line 1, in run\n    run()\n  File "/y.py", line 2'
    assert learn_indent(frames) is None  # a cut traceback's frames keep their indentation
    assert learn_indent(each(frames, "    ")) == "    "  # ... in a markdown code block
    assert learn_indent(each("\n".join(VLLM_LINES), "\t")) == "\t"
    assert learn_indent("    only one line") is None
