"""r1 F9: `fab status | head -1` lost the state's exit code to a BrokenPipeError traceback.
The task's stdout now outlives its reader (tasks.report.PipeSafeStream)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

from tasks.report import PipeSafeStream, Reporter, pipe_safe_stdout


def test_a_stream_whose_reader_left_swallows_the_broken_pipe_and_goes_on() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has left
    raw = io.TextIOWrapper(os.fdopen(write_end, "wb"), encoding="utf-8")
    stream = PipeSafeStream(raw)
    try:
        print("ok: [host] status: stopped: no server", file=stream, flush=True)
        assert stream.reader_gone
        Reporter(stream=stream).info("later lines go nowhere, without an error")  # type: ignore[arg-type]
        stream.flush()
    finally:
        raw.close()  # its fd now points at /dev/null: closing flushes without an error


def test_only_the_process_own_stdout_is_wrapped() -> None:
    replaced = io.StringIO()
    saved = sys.stdout
    sys.stdout = replaced
    try:
        pipe_safe_stdout()
        assert sys.stdout is replaced  # someone else's stdout (pytest's capture) is left alone
    finally:
        sys.stdout = saved


def test_a_process_printing_into_a_closed_pipe_keeps_its_exit_code() -> None:
    code = textwrap.dedent(
        """
        import sys
        from tasks.report import pipe_safe_stdout
        pipe_safe_stdout()
        for i in range(1000):
            print("status line", i, flush=True)
        sys.exit(4)
        """
    )
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run(
            [sys.executable, "-c", code],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert run.returncode == 4, run.stderr
    assert "BrokenPipeError" not in run.stderr and "Traceback" not in run.stderr, run.stderr
