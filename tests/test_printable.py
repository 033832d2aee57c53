"""Control characters from outside are shown escaped, never sent to the terminal (red team round
4, findings 1, 2, 7 and 9): a server log line, another process's argv, a checkpoint's
config.json string cannot erase or forge what fab prints."""

from __future__ import annotations

import io
import json
import logging
import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kimi_ops.preflight import run_checks
from kimi_ops.printable import one_line, printable
from kimi_ops.procs import Proc, Selection
from kimi_ops.redact import Masker
from kimi_ops.result import Status, StepResult, failed, format_result, ok
from tasks.masking import MaskingFilter, MaskingStream
from tasks.report import FleetBoard, Reporter
from tests.test_cli import FAB, REPO
from tests.test_preflight import CONFIG, by_name, make_facts, profile

# What the red team put in a log line: a full reset, save/restore cursor, DECALN, a cursor move
# up, an erase, an OSC window title, backspaces, DEL, a C1 CSI and a right-to-left override.
HOSTILE = "a\x1b7\x1bc\x1b8\x1b#8\x1b[1A\x1b[2K\x1b]0;title\x07b\x08\x08\x7f\x9b2J\u202eevil\u2066"
RAW_CONTROLS = ("\x1b", "\x07", "\x08", "\x7f", "\x9b", "\u202e", "\u2066", "\r")


def _clean(text: str) -> bool:
    return not any(c in text for c in RAW_CONTROLS)


def test_each_class_of_control_character_is_shown_escaped() -> None:
    assert printable("\x1bc") == "\\x1bc"  # ESC c: full reset
    assert printable("\x1b7x\x1b8") == "\\x1b7x\\x1b8"  # save / restore the cursor
    assert printable("\x1b#8") == "\\x1b#8"  # DECALN: the screen filled with E
    assert printable("x\x1b[1A\x1b[2K") == "x\\x1b[1A\\x1b[2K"  # CSI: cursor up, erase line
    assert printable("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"  # OSC 52: the clipboard
    assert printable("ok\x08\x08no") == "ok\\x08\\x08no"  # backspaces
    assert printable("x\x7fy") == "x\\x7fy"  # DEL
    assert printable("x\x00y\x0bz\x0c") == "x\\x00y\\x0bz\\x0c"
    assert printable("\x9b2J\x85\x9d") == "\\x9b2J\\x85\\x9d"  # C1: CSI, NEL, OSC
    assert printable("txt\u202egnp.exe") == "txt\\u202egnp.exe"  # right-to-left override
    for c in ("\u202a", "\u202b", "\u202c", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069"):
        assert printable(c) == f"\\u{ord(c):04x}"
    assert printable("done\rforged") == "done\\rforged"  # a lone CR overwrites the line


def test_newlines_and_tabs_are_kept_crlf_becomes_lf_and_colours_are_dropped() -> None:
    assert printable("a\tb\nc\r\nd\r\n") == "a\tb\nc\nd\n"
    assert printable("\x1b[31mERROR\x1b[0m \x1b[1;32mok\x1b[m") == "ERROR ok"
    assert printable("\x1b[38;5;196mred\x1b[0m\x1b[2K") == "red\\x1b[2K"  # only SGR goes


def test_ordinary_text_and_utf8_are_returned_as_they_are() -> None:
    for text in ("", "plain ascii", "ünïcødé ✓ 日本語 😀 é\u00a0x", "C:\\path\\x1b", "a\tb\n"):
        assert printable(text) is text
    assert one_line("ünïcødé ✓ 日本語") == "ünïcødé ✓ 日本語"


def test_one_line_also_escapes_newlines_and_tabs() -> None:
    assert one_line("x\nok: forged\ty") == "x\\nok: forged\\ty"
    assert one_line("a\r\nb") == "a\\nb"
    assert one_line(HOSTILE).count("\n") == 0 and _clean(one_line(HOSTILE))


@given(st.text())
def test_printable_and_one_line_are_idempotent_and_leave_no_control(text: str) -> None:
    shown = printable(text)
    assert printable(shown) == shown
    assert _clean(shown)
    line = one_line(text)
    assert one_line(line) == line and "\n" not in line and "\t" not in line
    assert _clean(line)


def test_format_result_escapes_every_field_and_keeps_each_line_one_line() -> None:
    res = failed(
        "verify",
        f"the server exited: {HOSTILE}\nok: verify: ready",
        lines=(f"evidence: {HOSTILE}", "x\nok: forged"),
        command="tail\x1b]0;t\x07 log",
        stderr=f"line one{HOSTILE}\nline two\r\n",
        hint=f"see the log{HOSTILE}",
        diff=f"+arch {HOSTILE}\n-\tkept tab\n",
    )
    text = format_result(res, host="gpu\x1bc1")
    assert _clean(text)
    lines = text.splitlines()
    assert lines[0].startswith("failed: [gpu\\x1bc1] verify: the server exited: a\\x1b7\\x1bc")
    assert lines[0].endswith("\\nok: verify: ready")
    assert not any(ln.startswith("ok:") for ln in lines)
    assert "    x\\nok: forged" in lines
    assert "      line two" in lines and "    -\tkept tab" in lines  # a diff's tab stays


def test_a_multi_line_result_without_controls_is_unchanged() -> None:
    res = ok("status", "serving: server PID 7", lines=("GPU memory used/total MiB: 1/2",))
    shown = "ok: status: serving: server PID 7\n    GPU memory used/total MiB: 1/2"
    assert format_result(res) == shown


def test_a_foreign_argv_with_escapes_and_a_newline_is_shown_on_its_own_line() -> None:
    argv = ("python3", "kimi_standin.py", "--model", "x\x1b[2K\r\x1b[1A\nok: kill-stale: forged")
    proc = Proc(pid=16412, ppid=1, pgid=16412, argv=argv, sid=16412)
    sel = Selection(targets=(proc,), reasons={16412: "ours"}, foreign=((proc, "vLLM server"),))
    for line in (*sel.describe(), *sel.describe_foreign()):
        assert "\n" not in line and _clean(line)
        assert "x\\x1b[2K\\r\\x1b[1A\\nok: kill-stale: forged" in line
    shown = format_result(StepResult("kill-stale", Status.OK, "nothing", sel.describe_foreign()))
    assert len(shown.splitlines()) == 2


def test_config_json_strings_in_the_preflight_report_are_escaped() -> None:
    data = json.loads(CONFIG)
    data["architectures"] = ["KimiK25ForConditionalGeneration\u001b[2K\r\u001b]0;x\u0007\nfail"]
    data["quantization_config"]["quant_method"] = "modelopt\u001bc"
    facts = make_facts(config_json=json.dumps(data))
    detail = by_name(run_checks(profile(), facts), "model_config").detail
    assert _clean(detail) and "\n" not in detail
    assert detail.startswith("KimiK25ForConditionalGeneration\\x1b[2K\\r\\x1b]0;x\\x07\\nfail; ")
    assert "modelopt\\x1bc" in detail


def test_masking_stream_escapes_masks_and_keeps_json_valid() -> None:
    out = io.StringIO()
    stream = MaskingStream(out, Masker(["s3cret-value-42"]))
    stream.write(f"INFO token s3cret-value-42 {HOSTILE}\n")
    stream.write(json.dumps({"line": f"s3cret-value-42 {HOSTILE}"}, indent=2))
    shown = out.getvalue()
    assert _clean(shown) and "s3cret" not in shown
    first, _, doc = shown.partition("\n")
    assert first.startswith("INFO token *** a\\x1b7\\x1bc\\x1b8")
    assert json.loads(doc) == {"line": f"*** {HOSTILE}"}  # JSON escapes them itself
    out.truncate(0), out.seek(0)
    stream.write_terminal("\r\x1b[Ks3cret-value-42")  # fab's own sequences pass, still masked
    assert out.getvalue() == "\r\x1b[K***"


def test_debug_log_records_are_escaped() -> None:
    record = logging.LogRecord("paramiko", logging.DEBUG, __file__, 1, "out: %s", (HOSTILE,), None)
    MaskingFilter().filter(record)
    assert _clean(record.getMessage()) and "\\x1bc" in record.getMessage()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_keeps_its_redraw_and_escapes_what_it_draws() -> None:
    out = _Tty()
    stream = MaskingStream(out, Masker())
    rep = Reporter("gpu1", stream=stream)  # type: ignore[arg-type]
    rep.progress("verify", f"loading {HOSTILE}\nok: verify: ready")
    rep.result(ok("verify", "ready"))
    text = out.getvalue()
    assert text.startswith("\r\x1b[K[gpu1] verify: loading a\\x1b7\\x1bc")
    assert "\\nok: verify: ready\r\x1b[Kok: [gpu1] verify: ready\n" in text
    assert "\x1bc" not in text and "\x08" not in text and "\u202e" not in text


def test_the_board_keeps_its_cursor_moves_and_escapes_host_lines() -> None:
    out = io.StringIO()
    stream = MaskingStream(out, Masker())
    board = FleetBoard(["gpu1", "gp\x1bu2"], stream)  # type: ignore[arg-type]
    rep = Reporter("gpu1", stream=stream, board=board)  # type: ignore[arg-type]
    rep.progress("verify", f"shards 3/64 {HOSTILE}")
    rep.progress("verify", "shards 9/64\x1b[1A\x1b[2Kforged")
    text = out.getvalue()
    assert text.count("\x1b[2F") == 1 and text.count("\x1b[2K") == 4  # the board's own
    assert "gpu1      verify: shards 3/64 a\\x1b7\\x1bc" in text
    assert "gpu1      verify: shards 9/64\\x1b[1A\\x1b[2Kforged" in text
    assert "gp\\x1bu2" in text and "\x1bc" not in text and "\x07" not in text


def test_fab_diagnose_shows_a_hostile_log_line_escaped(tmp_path: Path) -> None:
    """Finding 1 through the real `fab diagnose --log`, its stdout read as raw bytes."""
    log = tmp_path / "vllm.log"
    log.write_bytes(
        b"INFO 12-06 05:00:00 [api_server.py:1] vLLM API server version 0.17.1\n"
        b"ERROR 12-06 05:00:01 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to"
        b" allocate 2.00 GiB\x1b7\x1bc\x1b8\x1b#8" + b"\x08" * 20 + b"\x7f\xe2\x80\xae healthy\n"
    )
    shown = {}
    for args in ((), ("--json",)):
        out = subprocess.run(
            [str(FAB), "diagnose", "--log", str(log), *args], cwd=REPO, capture_output=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        for raw in (b"\x1b", b"\x08", b"\x7f", b"\r", "\u202e".encode()):
            assert raw not in out.stdout, (raw, out.stdout)
        shown[args] = out.stdout.decode()
    assert "2.00 GiB\\x1b7\\x1bc\\x1b8\\x1b#8\\x08\\x08" in shown[()], shown[()]
    assert "\\x7f\\u202e healthy" in shown[()], shown[()]
    assert json.loads(shown[("--json",)])["label"] == "cuda_oom"
