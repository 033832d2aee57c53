"""Decoration does not change a diagnosis: every real corpus excerpt, re-wrapped the way log
viewers and pastes wrap lines, gets the label it gets bare.

The real excerpts in ``tests/fixtures/corpus`` come with whatever decoration their source had;
the same log reaches users through docker compose, ``kubectl logs --prefix``, timestamping
log shippers, systemd's journal and syslog servers, docker's json-file records, markdown
quotes, k9s, the launchers' per-rank labels (srun, torchrun, mpirun), vLLM's own colour
formatter, a web page's typographic quotes, and the line numbers of ``grep -n`` / ``cat -n``.
A rule that only works on one decoration is fitted to it, so each excerpt is decorated line by
line and diagnosed again.
Tools' own labels (stern's pod and container, pdsh's host) match no pattern: they are learned
from the log's first lines.
"""

from __future__ import annotations

import csv
import functools
import json
import re
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_ops.diagnose import diagnose
from kimi_ops.diagnose.clean import newest_first

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
    "loki": lambda line: "2026-01-01 00:00:00.123\t" + line,  # Grafana / CloudWatch export
    "journald_iso": lambda line: "2026-01-01T00:00:00+0000 gpu-node-01 python3[4821]: " + line,
    "rfc5424": lambda line: "<14>1 2026-01-01T00:00:00.1Z gpu-node-01 vllm 4821 - - " + line,
    "quote": lambda line: "> " + line,
    # a blog's typographic quotes: an opening one after a space or bracket, else a closing one
    "page_quotes": lambda line: (
        re.sub(r"(?<=[\s(\[{=:])'|^'", "\u2018", re.sub(r'(?<=[\s(\[{=:])"|^"', "\u201c", line))
        .replace("'", "\u2019")
        .replace('"', "\u201d")
    ),
    "srun": lambda line: "0: " + line,  # srun --label (Slurm)
    "torchrun": lambda line: "[default0]:" + line,  # torchrun --tee
    "mpirun": lambda line: "[1,0]<stderr>:" + line,  # mpirun --tag-output
    # labels no pattern knows, learned from the log's first lines (learn_line_prefix)
    "stern": lambda line: "vllm-7d9f8c6b5-x2k4p vllm " + line,  # stern's "pod container"
    "pdsh": lambda line: "gpu-node-01: " + line,  # pdsh / clush's host label
    # a paste's indentation: a markdown code block's four spaces, a document's tab
    "md_indent": lambda line: "    " + line,
    "doc_tab": lambda line: "\t" + line,
}
#: Decorations told from a constant label on every line: a one-line excerpt cannot show one.
LEARNED = {"stern", "pdsh", "md_indent", "doc_tab"}

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
    # records a page joined into one line: a viewer prefixes each record, not the joined line
    "engine_dead_other__zc803_ascend_workerproc_execute_model_joined_lines.log",
    # a wrapper's "[ERROR|file.py:N:pid] <ts> >> " lines, cut at the terminal's width
    "unknown__zg411_singularity_vineppo_v0_load_model_cut.log",
}


def _excerpts() -> list[Path]:
    names: list[str] = []
    for index in sorted((CORPUS / "index").glob("*.tsv")):
        with index.open(encoding="utf-8", newline="") as fh:
            names += [row["file"] for row in csv.DictReader(fh, delimiter="\t")]
    return [CORPUS / "logs" / n for n in names if n not in HARD_WRAPPED]


@functools.cache
def _bare_label(path: Path) -> str:
    """The label an excerpt gets as it is (read once for all the decorations)."""
    return diagnose(path.read_text(encoding="utf-8", errors="replace")).label


def test_the_hard_wrapped_list_names_real_excerpts() -> None:
    for name in HARD_WRAPPED:
        assert (CORPUS / "logs" / name).is_file(), name


def _share(decoration: str, paths: list[Path]) -> list[Path]:
    """The half of the corpus a decoration is tried on, chosen by a hash of the decoration's and
    the excerpt's names: every excerpt is decorated about half of the ways (10 or so), every
    decoration meets about half of every label, and the suite's time stays near its target as
    the corpus grows (every excerpt every way took about five minutes of one core here)."""
    return [p for p in paths if zlib.crc32(f"{decoration}/{p.name}".encode()) % 2 == 0]


def test_every_excerpt_is_decorated_several_ways() -> None:
    paths = _excerpts()
    ways = {p: 0 for p in paths}
    for name in DECORATIONS:
        for p in _share(name, paths):
            ways[p] += 1
    assert min(ways.values()) >= 3, min(ways, key=ways.__getitem__)
    assert sum(ways.values()) / len(ways) >= len(DECORATIONS) / 2 - 1


@pytest.mark.parametrize("name", sorted(DECORATIONS))
def test_decorating_every_line_keeps_every_label(name: str) -> None:
    decorate = DECORATIONS[name]
    changed = []
    paths = _share(name, _excerpts())
    assert len(paths) > 500
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        if name in LEARNED and sum(1 for ln in text.split("\n") if ln.strip()) < 2:
            continue
        bare = _bare_label(path)
        dressed = "".join(decorate(line) for line in text.splitlines(keepends=True))
        got = diagnose(dressed).label
        if got != bare:
            changed.append(f"{path.name}: {bare} -> {got}")
    assert not changed, "\n".join(changed)


#: Line numbers a paste keeps: ``grep -n -C`` (":" on a match, "-" on a context line),
#: ``cat -n`` / ``nl``, ``less -N``, ``grep -Hn`` (the file named first).
NUMBERINGS: dict[str, Callable[[int, str], str]] = {
    "grep_n": lambda i, line: f"{i}{':' if 'Error' in line or 'ERROR' in line else '-'}{line}",
    "cat_n": lambda i, line: f"{i:6d}\t{line}",
    "less_n": lambda i, line: f"{i:7d} {line}",
    "grep_hn": lambda i, line: f"/var/log/vllm/serve-1.log:{i}:{line}",
}


def test_line_numbers_keep_every_label() -> None:
    """Each excerpt numbered one of the ways (in turn), diagnosed again: the numbers are
    learned from the first lines (they rise, a time or a year does not) and taken off."""
    changed = []
    forms = sorted(NUMBERINGS)
    for k, path in enumerate(_excerpts()):
        text = path.read_text(encoding="utf-8", errors="replace")
        if sum(1 for ln in text.split("\n") if ln.strip()) < 3:  # too short to show numbers
            continue
        number = NUMBERINGS[forms[k % len(forms)]]
        lines = text.splitlines(keepends=True)
        dressed = "".join(number(i, line) for i, line in enumerate(lines, start=120))
        bare, got = _bare_label(path), diagnose(dressed).label
        if got != bare:
            changed.append(f"{path.name} ({forms[k % len(forms)]}): {bare} -> {got}")
    assert not changed, "\n".join(changed)


#: Real excerpts pasted newest first already (RunPod's console shows a worker's log so).
NEWEST_FIRST_ALREADY = {"healthy__x612_runpod_worker_vllm_engine_ready.log"}


def test_a_real_newest_first_paste_is_told_and_put_back_in_order() -> None:
    for name in NEWEST_FIRST_ALREADY:
        text = (CORPUS / "logs" / name).read_text(encoding="utf-8")
        assert newest_first(text), name
        assert diagnose(text).label == name.split("__")[0], name


def test_a_newest_first_paste_keeps_every_label() -> None:
    """Each excerpt as Grafana or Kibana shows it by default: every line stamped with its
    time, newest first. The times fall from line to line, so the lines are put back in order
    (an excerpt of fewer than three lines cannot show that)."""
    changed = []
    for path in _excerpts():
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = [ln for ln in text.split("\n") if ln.strip()]
        if len(lines) < 3 or path.name in NEWEST_FIRST_ALREADY:
            continue
        stamped = [
            f"2026-01-01 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}\t{ln}"
            for i, ln in enumerate(lines)
        ]
        bare, got = _bare_label(path), diagnose("\n".join(reversed(stamped))).label
        if got != bare:
            changed.append(f"{path.name}: {bare} -> {got}")
    assert not changed, "\n".join(changed)


#: Terminal widths a paste was hard-wrapped at (tmux / screen copy mode, a web console).
WIDTHS = (80, 100, 120, 132)
#: Excerpts whose reading a hard wrap still changes, each for the reason given: a piece cut
#: off that begins the way a record of its own begins (a bracket, an exception's name, two
#: spaces, a date), so it stays a line of its own, or a wrap learned from no first line.
WRAP_CHANGES: dict[str, str] = {
    **dict.fromkeys(
        (
            "engine_dead_other__m416_jetson_nvml_unboundlocalerror.log",
            "healthy__zc611_ascend_xinference_inprocess_engine_loaded.log",
            "engine_dead_other__zc814_omni_stage_worker_init_device_cut.log",
            "unknown__ze807_cpu_prototype_benchmark_run_engine_cut.log",
            "bad_argument__zh111_rocm_mi50_gpt_oss_120b_float16_mxfp4_dtype.log",
            "engine_dead_other__zj207_falcon_load_weights_keyerror.log",
        ),
        "one line only is long enough to be cut: one piece cannot show a width",
    ),
    "unknown__z409_ppc64le_cpu_missing_ipex_module.log": (
        "a traceback cut in pieces that begin with its indentation or carets: they look like"
        " records of their own, as metrics lines of one length do, so no width is learned"
    ),
}


def _width_of(name: str) -> int:
    """The width an excerpt is wrapped at: one of :data:`WIDTHS`, by its name (so excerpts
    added to the corpus leave the others' widths as they were)."""
    return WIDTHS[zlib.crc32(name.encode()) % len(WIDTHS)]


def _wrapped(text: str, width: int) -> str:
    return "\n".join(
        "\n".join(line[k : k + width] for k in range(0, len(line), width)) if line else line
        for line in text.split("\n")
    )


def test_a_terminals_hard_wrap_keeps_every_label() -> None:
    """Each excerpt hard-wrapped at one of :data:`WIDTHS` (in turn), diagnosed again: the
    width is learned from the first lines (lines of exactly that width go on in a line that
    begins no record) and the pieces are joined."""
    changed = []
    for path in _excerpts():
        text = path.read_text(encoding="utf-8", errors="replace")
        dressed = _wrapped(text, _width_of(path.name))
        if dressed == text or path.name in WRAP_CHANGES:
            continue
        bare, got = _bare_label(path), diagnose(dressed).label
        if got != bare:
            changed.append(f"{path.name} ({_width_of(path.name)}): {bare} -> {got}")
    assert not changed, "\n".join(changed)


def test_the_wrap_changes_are_real_and_still_changed() -> None:
    names = [p.name for p in _excerpts()]
    for name, why in WRAP_CHANGES.items():
        assert why and name in names, name
        text = (CORPUS / "logs" / name).read_text(encoding="utf-8", errors="replace")
        assert diagnose(_wrapped(text, _width_of(name))).label != diagnose(text).label, name


#: One record of vLLM's text formatter: ``(EngineCore pid=9) ERROR 08-05 07:31:10 [core.py:12]
#: message`` (the process prefix since 0.10; older logs have none).
_TEXT_RECORD_RE = re.compile(
    r"^(?:\((?P<proc>[A-Za-z_]\w*)(?: [^()]*?)? ?pid=(?P<pid>\d+)[^()]*\) )?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<date>\d\d-\d\d) "
    r"(?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? \[(?P<file>[\w./-]+)\.py:(?P<line>\d+)\] ?(?P<msg>.*)$"
)


def as_vllm_json(text: str) -> str:
    """``text`` as vLLM would have written it with ``--logging-config.formatter json``
    (0.32; python-json-logger, vllm/logging_utils/formatter.py's JSON_FORMAT): each record of
    its text formatter becomes one JSON object (asctime, levelname, name, processName,
    process, message, vllm_process_name), a ``logger.exception``'s traceback (the record's
    lines from "Traceback" on, each behind the same header) goes in exc_info, and what no
    logger printed (a bare traceback on stderr, tqdm bars, prints) stays as it is. The field
    values are read off the real engine's JSON output (tests/fixtures/logs/*cpu032_json*)."""
    out: list[str] = []
    head: tuple[str, ...] | None = None
    msgs: list[str] = []

    def flush() -> None:
        if head is None:
            return
        proc, pid, level, date, clock, file = head
        tb = next((i for i, m in enumerate(msgs) if m.startswith("Traceback (most")), None)
        record: dict[str, object] = {
            "asctime": f"2026-{date} {clock},000",
            "levelname": level,
            "name": "vllm." + file.replace("/", "."),
            "processName": proc or "MainProcess",
            "process": int(pid or 1),
            "message": "\n".join(msgs[:tb] if tb else msgs),
        }
        if tb:
            record["exc_info"] = "\n".join(msgs[tb:])
        if proc:  # a version without the prefix had no vllm_process_name either
            record["vllm_process_name"] = proc
        out.append(json.dumps(record))

    for line in text.splitlines():
        m = _TEXT_RECORD_RE.match(line)
        if m is None:
            flush()
            head, msgs = None, []
            out.append(line)
            continue
        key = (m["proc"] or "", m["pid"] or "", m["level"], m["date"], m["time"], m["file"])
        # the same header continues one record only within a logged traceback: a loop's
        # records (the route list) share a second and a line but are records of their own
        if key == head and (len(msgs) > 1 or m["msg"].startswith("Traceback (most")):
            msgs.append(m["msg"])
            continue
        flush()
        head, msgs = key, [m["msg"]]
    flush()
    return "\n".join(out) + "\n"


def test_as_vllm_json_writes_a_logged_traceback_into_one_record() -> None:
    text = (
        "(EngineCore pid=9) ERROR 08-05 07:31:10 [core.py:12] EngineCore failed to start.\n"
        "(EngineCore pid=9) ERROR 08-05 07:31:10 [core.py:12] Traceback (most recent call last):\n"
        '(EngineCore pid=9) ERROR 08-05 07:31:10 [core.py:12]   File "x.py", line 1, in f\n'
        "(EngineCore pid=9) ERROR 08-05 07:31:10 [core.py:12] ValueError: boom\n"
        "(APIServer pid=1) INFO 08-05 07:31:11 [launcher.py:5] Route: /a, Methods: GET\n"
        "(APIServer pid=1) INFO 08-05 07:31:11 [launcher.py:5] Route: /b, Methods: GET\n"
    )
    records = [json.loads(ln) for ln in as_vllm_json(text).splitlines()]
    assert len(records) == 3
    assert records[0]["message"] == "EngineCore failed to start."
    assert records[0]["exc_info"].endswith("\nValueError: boom")
    assert records[0]["vllm_process_name"] == "EngineCore" and records[0]["process"] == 9
    assert [r["message"] for r in records[1:]] == [
        "Route: /a, Methods: GET",
        "Route: /b, Methods: GET",
    ]


def test_vllm_s_json_formatter_keeps_every_label() -> None:
    """Every corpus excerpt written in vLLM's text records, re-encoded as the records its JSON
    formatter writes, gets the label it gets as text (before the records were read as the
    lines they stand for, 126 of the 1,283 such excerpts changed: a traceback in one exc_info
    line, the engine's error logger unknown)."""
    changed, converted = [], 0
    for path in _excerpts():
        text = path.read_text(encoding="utf-8", errors="replace")
        as_json = as_vllm_json(text)
        if as_json.strip() == text.strip():
            continue
        converted += 1
        bare, got = _bare_label(path), diagnose(as_json).label
        if got != bare:
            changed.append(f"{path.name}: {bare} -> {got}")
    assert converted > 1000
    assert not changed, "\n".join(changed)
