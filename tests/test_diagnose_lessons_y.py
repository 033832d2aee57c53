"""What blind set Y's misses taught (2026-12-04), each as a general fact, in lines shaped like
the ones the misses held (not copies of them)."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

CORE = "(EngineCore_DP0 pid=8) ERROR 01-01 00:00:09 [core.py:900] "


def test_an_offline_run_s_progress_bar_at_zero_after_the_engine_s_traceback_is_no_run() -> None:
    crash = CORE + "KeyError: 'layers.0'\n"
    bar = "Processed prompts:   0%|          | 0/4 [00:00<?, ?it/s]"
    for tail in (bar + "\n", bar + "(EngineCore_DP0 pid=8) Process EngineCore_DP0:\n"):
        d = diagnose(crash + tail)
        assert d.label == "engine_dead_other", (tail, d.summary)
    # prompts that did get processed before the traceback: the run was up
    done = "Processed prompts: 100%|##########| 4/4 [00:02<00:00,  1.9it/s]\n"
    assert diagnose(done).label == "healthy"
    # ... and a bar at 0 with no failure before it is an offline run under way
    assert diagnose(bar + "\n").label == "healthy"


def test_an_import_the_engine_s_own_logger_reports_it_died_of_is_no_optional_one() -> None:
    # an ImportError may be an optional import that was survived; printed by the engine's own
    # error logger (inside "EngineCore failed to start"), the engine died of it
    line = "ImportError: Numba needs NumPy 2.2 or less. Got NumPy 2.4.\n"
    d = diagnose(CORE + line)
    assert (d.label, d.facts.get("signature")) == ("unknown", "import_failed"), d.summary
    assert "Numba needs NumPy 2.2 or less" in d.summary
    # the same line from an application, with nothing failing after it, is no failure
    up = "INFO:     Application startup complete.\n"
    assert diagnose(up + line).label == "healthy"


def test_a_v0_worker_s_failed_startup_method_is_the_engine_failing() -> None:
    # V0's multiprocessing worker logs it and returns the exception; the driver raises it
    w = "(VllmWorkerProcess pid=5) ERROR 01-01 00:00:09 [multiproc_worker_utils.py:238] "
    d = diagnose(
        w + "Exception in worker VllmWorkerProcess while processing method "
        "determine_num_available_blocks.\n" + w + "Traceback (most recent call last):\n"
    )
    assert d.label == "engine_dead_other", d.summary
