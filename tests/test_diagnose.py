"""Tests for kimi_ops.diagnose: real vLLM excerpts, synthetic fixtures, streaming, speed.

Fixtures in ``tests/fixtures/logs`` are named ``<label>__<signature>__<what>.log``: the
expected label, the rule that must decide it (``none`` when no rule should), and a short
description. They are written in vLLM's real log formats with the decorations a tool
meets: process prefixes, ``[rank0]:``, ANSI colours, docker-compose prefixes, markdown
quotes, ISO / bracketed / syslog timestamps, ``\\r`` tqdm updates and hard wraps.
"""

from __future__ import annotations

import ast
import importlib
import json
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kimi_ops.diagnose import (
    FAILURE_LABELS,
    LABELS,
    RULES,
    STAGES,
    TAIL_LINES,
    Diagnosis,
    LogDiagnoser,
    Rule,
    clean_line,
    diagnose,
)
from kimi_ops.diagnose.clean import oldest_first

# ``kimi_ops`` re-exports a *function* called ``diagnose``; fetch the module itself.
D = importlib.import_module("kimi_ops.diagnose")
#: The package's modules: the fast line filter and streaming state, and the line patterns.
SCANNER = importlib.import_module("kimi_ops.diagnose.scanner")
CANDIDATES = importlib.import_module("kimi_ops.diagnose.candidates")
MARKERS = importlib.import_module("kimi_ops.diagnose.markers")
WORDS = importlib.import_module("kimi_ops.diagnose.words")
RULES_MODULE = importlib.import_module("kimi_ops.diagnose.rules")

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "logs"


def _shared(name: str) -> Path:
    """../shared/vllm/NAME seen from the main checkout or from a worktree under /work/wt."""
    for up in Path(__file__).resolve().parents[2:4]:
        if (up / "shared" / "vllm" / name).is_dir():
            return up / "shared" / "vllm" / name
    return Path(__file__).resolve().parents[2] / "shared" / "vllm" / name


SHARED_LOGS = _shared("logs")
CONTEXT: dict[str, object] = {
    "port": 8000,
    "vllm_version": "0.17.1",
    "extra_args": ["--max-num-seqs", "64"],
}


def read(path: Path) -> str:
    """Read a log keeping ``\\r`` (``read_text`` would translate it to ``\\n``)."""
    return path.read_bytes().decode("utf-8")


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.log"))


def fixture_meta(path: Path) -> tuple[str, str]:
    label, signature, _ = path.stem.split("__")
    return label, signature


def real_logs() -> dict[Path, str]:
    """Real excerpt -> expected label (from INDEX.tsv, else from the file name)."""
    if not SHARED_LOGS.is_dir():
        return {}
    labels: dict[str, str] = {}
    index = SHARED_LOGS / "INDEX.tsv"
    if index.is_file():
        for row in index.read_text().splitlines()[1:]:
            cols = row.split("\t")
            if len(cols) >= 2:
                labels[cols[0]] = cols[1]
    out = {}
    for p in sorted(SHARED_LOGS.glob("*.log")):
        out[p] = labels.get(p.name, p.stem.split("_", 1)[1])
    return out


def real_params() -> list[object]:
    logs = real_logs()
    if not logs:
        return [pytest.param(None, None, marks=pytest.mark.skip(reason="no shared vLLM logs"))]
    return [pytest.param(p, label, id=p.name) for p, label in logs.items()]


def all_logs() -> list[object]:
    """Every real and synthetic log, as pytest params."""
    params = [pytest.param(p, id=p.name) for p in fixture_files()]
    params += [pytest.param(p, id="real-" + p.name) for p in real_logs()]
    return params


def random_chunks(text: str, rng: random.Random, max_len: int) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, max_len)
        out.append(text[i : i + n])
        i += n
    return out


def feed_all(chunks: list[str], context: dict[str, object] | None = None) -> LogDiagnoser:
    d = LogDiagnoser(context)
    for c in chunks:
        d.feed(c)
    return d


# --------------------------------------------------------------------------- API shape


def test_labels_and_failure_labels() -> None:
    assert LABELS == (
        "starting",
        "healthy",
        "kv_cache_dtype_unsupported",
        "cuda_oom",
        "kv_cache_insufficient",
        "port_in_use",
        "nccl_error",
        "bad_argument",
        "model_not_found",
        "trust_remote_code",
        "unsupported_gpu",
        "quantization_unsupported",
        "engine_killed",
        "engine_dead_other",
        "unknown",
    )
    assert frozenset(LABELS) - {"starting", "healthy"} == FAILURE_LABELS


def test_stages_follow_startup_order() -> None:
    names = [name for name, _ in STAGES]
    assert len(set(names)) == len(names)
    assert all(desc for _, desc in STAGES)
    order = [
        "api_server_starting",
        "loading_model",
        "loading_shards",
        "weights_loaded",
        "kv_cache_allocated",
        "cuda_graphs",
        "engine_initialized",
        "server_starting",
        "ready",
    ]
    assert [n for n in names if n in order] == order


def test_rules_are_well_formed_data() -> None:
    names = [r.name for r in RULES]
    assert len(set(names)) == len(names), "rule names must be unique"
    for r in RULES:
        assert isinstance(r, Rule)
        assert r.label in FAILURE_LABELS, r.name
        assert r.patterns and all(isinstance(p, re.Pattern) for p in r.patterns)
        assert r.keywords, f"{r.name}: keywords are the cheap prefilter"
        assert r.hint and r.summary
    labels_with_rules = {r.label for r in RULES}
    assert labels_with_rules == FAILURE_LABELS


def test_diagnosis_properties_and_to_dict_is_json() -> None:
    d = diagnose(read(FIXTURES / "port_in_use__port_in_use__uvicorn_after_startup.log"))
    assert isinstance(d, Diagnosis)
    assert d.failed and not d.ready
    blob = json.loads(json.dumps(d.to_dict()))
    assert blob["label"] == "port_in_use"
    assert blob["failed"] is True and blob["ready"] is False
    assert blob["evidence"] == list(d.evidence)
    assert all(isinstance(v, str) for v in blob["facts"].values())
    ok = diagnose(read(FIXTURES / "healthy__none__v04_uvicorn_journal.log"))
    assert ok.ready and not ok.failed


def test_rule_match_api() -> None:
    rule = next(r for r in RULES if r.name == "port_in_use")
    groups = rule.match(
        "ERROR: [Errno 98] error while attempting to bind on address ('0.0.0.0', 9000)"
    )
    assert groups is not None and groups["port"] == "9000"
    assert rule.match("INFO: all good") is None


# --------------------------------------------------------------------------- real excerpts


@pytest.mark.parametrize(("path", "label"), real_params())
def test_real_excerpt(path: Path, label: str) -> None:
    d = diagnose(read(path), CONTEXT)
    assert d.label == label, (d.summary, d.evidence)
    if label in FAILURE_LABELS:
        assert d.evidence and d.hint and d.summary.startswith("crashed")
        assert "?" not in re.findall(r"\S+", d.hint), d.hint


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_fixture(path: Path) -> None:
    label, signature = fixture_meta(path)
    d = diagnose(read(path), CONTEXT)
    assert d.label == label, (d.summary, d.evidence)
    assert d.facts.get("signature", "none") == signature, d.facts
    if d.failed:
        assert d.evidence, "a failure must show the line(s) that decided it"
        # no template field left unrendered (a message quoted in it may hold braces: a Python
        # dict, Ray's placement-group specs)
        assert not re.search(r"\{[a-z_]+\}", d.hint) and "[[" not in d.hint
        assert " ? " not in d.hint and not d.hint.startswith("?")


def test_every_rule_has_a_fixture() -> None:
    """Every rule record (the table, and the variants ``_decide`` swaps in) has a
    fixture it must decide (``test_fixture`` checks the label and the deciding rule)."""
    covered = {fixture_meta(p) for p in fixture_files()}
    records = (*RULES, RULES_MODULE._FP8_ARCH_KV_RULE, RULES_MODULE._DEVICE_QUERY_FAILED_RULE)
    missing = [r.name for r in records if (r.label, r.name) not in covered]
    assert not missing, f"rules without a test case: {missing}"


def test_every_label_has_real_and_synthetic_cases() -> None:
    synthetic: dict[str, int] = {}
    for p in fixture_files():
        synthetic[fixture_meta(p)[0]] = synthetic.get(fixture_meta(p)[0], 0) + 1
    for label in LABELS:
        assert synthetic.get(label, 0) >= 1, label
    real = set(real_logs().values())
    if REAL_CPU_LOGS.is_dir():
        real |= {label for label, _, _ in REAL_CPU_EXPECTED.values()}
    if real:
        # every label has a real excerpt except "starting" (a log that has not ended yet)
        assert set(LABELS) - real <= {"starting"}
        assert synthetic["starting"] >= 2


# --------------------------------------------------------------------------- hints and facts


def fx(name: str, context: dict[str, object] | None = None) -> Diagnosis:
    return diagnose(read(FIXTURES / name), CONTEXT if context is None else context)


def test_kv_dtype_hint_names_the_fix_and_the_version() -> None:
    d = fx("kv_cache_dtype_unsupported__fp8_kv_cache_unsupported__v1_tp8_wrapper.log")
    assert d.summary == "crashed: FP8 KV cache not supported by TRITON_MLA"
    assert "fab patch-kv-config" in d.hint and ">= 0.18" in d.hint
    assert "vLLM 0.17.1" in d.hint
    assert d.facts["vllm_version"] == "0.17.1" and d.facts["port"] == "8000"
    assert d.evidence[0] == "NotImplementedError: TritonMLA V1 with FP8 KV cache not yet supported"


def test_port_hint_uses_the_logged_port_over_the_context() -> None:
    d = fx("port_in_use__port_in_use__uvicorn_after_startup.log")
    assert d.facts["port"] == "8001"
    assert "Port 8001" in d.hint and "fab kill-stale" in d.hint


def test_port_hint_falls_back_to_the_context_port() -> None:
    text = "OSError: [Errno 98] Address already in use\n"
    assert "Port 8123 " in diagnose(text, {"port": 8123}).hint
    assert diagnose(text).hint.startswith("Port is already in use")


def test_kv_insufficient_hint_quotes_the_numbers() -> None:
    d = fx("kv_cache_insufficient__kv_cache_too_small__hard_wrapped.log")
    for needle in ("131072", "8.5 GiB", "3.2 GiB", "52000", "--max-model-len"):
        assert needle in d.hint, needle
    d = fx("kv_cache_insufficient__kv_cache_no_memory__v0_docker_ts.log")
    assert "-1.56 GiB" in d.hint and "gpu_memory_utilization" in d.hint
    d = fx("kv_cache_insufficient__kv_cache_too_small__v0_max_seq_len.log")
    assert "32768" in d.hint and "20000" in d.hint


def test_cuda_oom_hints_point_at_stale_processes() -> None:
    d = fx("cuda_oom__cuda_oom__cuda_graphs_rank0_ansi.log")
    assert "fab kill-stale" in d.hint and "nvidia-smi" in d.hint and "1.50 GiB" in d.hint
    assert d.stage == "cuda_graphs" and d.progress == "30/67"
    d = fx("cuda_oom__gpu_memory_in_use__stale_process.log")
    assert "3.25 of 94.97 GiB" in d.hint and "fab kill-stale" in d.hint


def test_bad_argument_hint_names_argument_and_extra_args() -> None:
    d = fx("bad_argument__argparse_error__compose_removed_flag.log")
    assert d.facts["bad_args"] == "--disable-log-requests"
    assert "--disable-log-requests" in d.hint and "--max-num-seqs 64" in d.hint
    d = fx("bad_argument__argparse_error__invalid_choice_ansi.log")
    assert d.facts["bad_args"] == "--kv-cache-dtype" and "invalid choice: 'fp4'" in d.hint


def test_model_trust_gpu_nccl_hints() -> None:
    d = fx("model_not_found__model_not_found__local_path_iso_ts.log")
    assert d.facts["model"] == "/models/Kimi-K2.5" and "`model` path" in d.hint
    d = fx("trust_remote_code__trust_remote_code__rank0_prompt.log")
    assert "trust_remote_code: true" in d.hint
    d = fx("unsupported_gpu__bfloat16_unsupported__v0_v100.log")
    assert "Tesla V100-SXM2-32GB" in d.hint and "7.0" in d.hint and "--dtype half" in d.hint
    d = fx("unsupported_gpu__no_kernel_image__sm120_old_torch.log")
    assert "sm_120" in d.hint
    d = fx("nccl_error__nccl_shm__dev_shm_full.log")
    assert "fab clean-shm" in d.hint and "/dev/shm" in d.hint
    d = fx("nccl_error__nccl_error__watchdog_timeout.log")
    assert "NCCL_P2P_LEVEL" in d.hint and "NCCL_PROTO" in d.hint


def test_engine_dead_other_shows_the_root_cause() -> None:
    d = fx("engine_dead_other__engine_wrapper__illegal_memory_access.log")
    root = "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered"
    assert root in d.evidence and root in d.hint and root in d.summary
    d = fx("engine_dead_other__engine_wrapper__v0_mq_engine.log")
    assert "AssertionError: expected block_size to be a multiple of 16" in d.hint


def test_facts_are_extracted() -> None:
    d = fx("healthy__none__v1_full_startup_with_warnings.log")
    assert d.facts["vllm_version"] == "0.17.1"
    assert d.facts["url"] == "http://0.0.0.0:8000" and d.facts["port"] == "8000"
    assert d.facts["kv_cache_gib"] == "12.30" and d.facts["kv_cache_tokens"] == "840,160"
    assert d.facts["backend"] == "TRITON_MLA" and d.facts["model"] == "/models/Kimi-K2.5-NVFP4"
    d = fx("healthy__none__v04_uvicorn_journal.log")
    assert d.facts["port"] == "8002" and d.facts["gpu_blocks"] == "27951"


# --------------------------------------------------------------------------- ordering rules


def test_healthy_with_warnings_is_healthy() -> None:
    d = fx("healthy__none__v1_full_startup_with_warnings.log")
    assert d.label == "healthy" and d.ready and d.stage == "ready"
    assert d.summary == "healthy: server up on http://0.0.0.0:8000"


def test_destroy_process_group_warning_is_not_an_nccl_failure() -> None:
    warn = (
        "[rank0]:[W1120 10:00:05.000000 ProcessGroupNCCL.cpp:1250] Warning: WARNING: "
        "destroy_process_group() was not called before program exit, which can leak "
        "resources. For more info, please see https://pytorch.org/docs/stable/"
        "distributed.html#shutdown (function operator())\n"
    )
    up = "INFO 01-01 00:00:00 [launcher.py:1] Route: /health, Methods: GET\n"
    assert diagnose(up + warn).label == "healthy"
    assert diagnose(warn).label == "starting"
    crash = "Traceback (most recent call last):\nKeyError: 'model.layers.0.weight'\n"
    d = diagnose(crash + warn)
    assert d.label == "unknown" and d.evidence[0] == "KeyError: 'model.layers.0.weight'"


def test_error_after_startup_complete_wins_over_healthy() -> None:
    assert fx("port_in_use__port_in_use__uvicorn_after_startup.log").label == "port_in_use"
    d = fx("cuda_oom__cuda_oom__after_startup_request.log")
    assert d.label == "cuda_oom" and d.stage == "ready"


def test_specific_cause_wins_over_wrappers() -> None:
    d = fx("kv_cache_dtype_unsupported__fp8_kv_cache_unsupported__v1_tp8_wrapper.log")
    assert d.label == "kv_cache_dtype_unsupported"
    assert fx("cuda_oom__gpu_memory_in_use__stale_process.log").label == "cuda_oom"
    only_wrapper = (
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}\n"
    )
    assert diagnose(only_wrapper).label == "engine_dead_other"


def test_priority_between_specific_causes() -> None:
    # the selector lists both [compute capability not supported] and [kv_cache_dtype ...]
    d = fx("kv_cache_dtype_unsupported__no_backend_for_kv_dtype__sm120_selector.log")
    assert d.label == "kv_cache_dtype_unsupported"
    assert fx("nccl_error__nccl_shm__dev_shm_full.log").facts["signature"] == "nccl_shm"


def test_unknown_traceback_points_at_the_last_exception() -> None:
    # a traceback through vLLM's own code is vLLM dying of an unrecognised exception
    d = fx("engine_dead_other__vllm_traceback__keyerror_loading_weights.log")
    assert d.label == "engine_dead_other" and d.failed
    assert d.evidence[0] == "KeyError: 'model.layers.0.mlp.experts.w13_weight_scale'"
    assert "w13_weight_scale" in d.summary
    # a CUDA runtime error has its own rule: the summary names it
    d = fx("engine_dead_other__cuda_runtime_error__illegal_memory_no_wrapper.log")
    assert d.label == "engine_dead_other" and d.facts["signature"] == "cuda_runtime_error"
    assert d.evidence[0] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "illegal memory access" in d.summary
    text = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: first problem\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 3, in <module>\n'
        "TypeError: second problem\n"
    )
    d = diagnose(text)
    assert d.label == "unknown"
    assert d.evidence == ("TypeError: second problem", "ValueError: first problem")


def test_process_killed_names_sigkill_with_an_oom_killer_hint() -> None:
    d = fx("engine_killed__engine_signal__killed_while_loading.log")
    assert d.label == "engine_killed" and d.facts["signal"] == "SIGKILL"
    assert "dmesg" in d.hint and d.progress == "26/64" and d.lifecycle == "failed"


@pytest.mark.parametrize(
    ("line", "signal"),
    [
        (
            "Worker proc VllmWorker-3 died unexpectedly (exit code: -9), shutting down executor.",
            "SIGKILL",
        ),
        ("Engine core proc EngineCore_DP0 died unexpectedly (exit code: -11)", "SIGSEGV"),
        ("Process EngineCore_DP0 exited with exitcode -6", "SIGABRT"),
        ("The actor died unexpectedly: the process was killed by SIGKILL (OOM)", "SIGKILL"),
        ("vllm-1 exited with code 137", "SIGKILL"),
        ("Fatal Python error: Segmentation fault", "SIGSEGV"),
        ("./serve.sh: line 3:  77 Bus error               (core dumped) vllm serve m", "SIGBUS"),
        ("bash: line 1: 12 Illegal instruction     (core dumped) vllm serve m", "SIGILL"),
        ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.", "SIGKILL"),
        (
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 17 got "
            "signal: 9"
            " Signal 9 (SIGKILL) received by PID 17",
            "SIGKILL",
        ),
        ("    Last State:     Terminated  Reason: OOMKilled  Exit Code: 137", "SIGKILL"),
    ],
)
def test_kill_wordings_name_the_signal(line: str, signal: str) -> None:
    up = "INFO:     Application startup complete.\n"
    for text in (line + "\n", up + line + "\n"):
        d = diagnose(text)
        assert d.label == "engine_killed", (text, d.summary)
        assert d.facts["signal"] == signal and signal in d.summary


def test_engine_gone_without_exception_is_sigkill_but_with_one_is_engine_dead() -> None:
    up = "INFO:     Application startup complete.\n"
    gone = "WARNING [core_client.py:1] MPClient: engine core exited unexpectedly\n"
    d = diagnose(up + gone)
    assert d.label == "engine_killed" and d.facts["signal_inferred"] == "true"
    crash = (
        "ERROR [core.py:1] EngineCore encountered a fatal error.\n"
        "ERROR [core.py:1] ValueError: bad shape for layer 3\n"
    )
    d = diagnose(up + crash + gone)
    assert d.label == "engine_dead_other" and "ValueError: bad shape" in d.hint
    assert diagnose("Worker proc W died unexpectedly (exit code: 1)\n").label != "engine_killed"


def test_exit_status_zero_after_engine_death_is_not_success() -> None:
    d = fx("engine_killed__engine_vanished__cpu032_kill9_engine_core.log")
    assert (d.label, d.lifecycle, d.facts["signal"]) == ("engine_killed", "failed", "SIGKILL")
    assert "EngineCore" in d.hint and "status 0" in d.hint
    assert d.evidence == ("MPClient: engine core exited unexpectedly; starting cleanup",)


def test_nonfatal_traceback_followed_by_progress_is_still_starting() -> None:
    d = fx("starting__none__nonfatal_traceback_then_progress.log")
    assert d.label == "starting" and d.stage == "loading_shards" and d.progress == "5/163"


def test_in_process_engine_is_up_after_its_own_ready_line() -> None:
    """vLLM's LLM class (and Unsloth driving it) has no HTTP server: past "init engine ..
    took", its own ready line means up. The API server's "Supported tasks" does not (its HTTP
    server is still to start), nor does Unsloth talking while vLLM still loads."""
    for name in (
        "healthy__none__inprocess_llm_supported_tasks.log",
        "healthy__none__unsloth_v0_patches_after_engine_init.log",
    ):
        d = fx(name)
        assert d.label == "healthy" and d.facts.get("in_process") == "true", name
        assert d.summary == "healthy: in-process engine up" and "serves no HTTP" in d.hint
    d = fx("starting__none__api_server_supported_tasks_before_routes.log")
    assert d.label == "starting" and d.stage == "engine_initialized"
    assert "in_process" not in d.facts
    d = fx("starting__none__unsloth_talks_while_vllm_loads.log")
    assert d.label == "starting" and d.stage == "weights_loaded"


def test_weak_signature_needs_a_crash() -> None:
    assert fx("starting__none__sm120_warning_only.log").label == "starting"
    d = fx("unsupported_gpu__torch_arch_incompatible__warning_then_crash.log")
    assert d.label == "unsupported_gpu" and d.facts["sm"] == "120"


def test_request_logs_with_error_text_do_not_fail_a_healthy_server() -> None:
    d = fx("healthy__none__mid_run_access_log_excerpt.log")
    assert d.label == "healthy"


def test_shutdown_after_healthy_keeps_healthy_but_says_so() -> None:
    d = fx("healthy__none__ctrl_c_shutdown_destroy_pg.log")
    assert d.label == "healthy" and d.facts["shutdown"] == "true"
    assert d.summary.endswith("(then shut down)")


def test_ctrl_c_after_healthy_is_not_an_engine_death() -> None:
    text = (
        "INFO 01-01 00:00:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"
        "^C(APIServer pid=1) ERROR 01-01 01:00:00 [llm.py:1] AsyncLLM output_handler failed.\n"
        "(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
        "issue. See stack trace (above) for the root cause.\n"
    )
    d = diagnose(text)
    assert d.label == "healthy" and d.facts["shutdown"] == "true"


def test_restart_loop() -> None:
    start = "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.0\n"
    up = "INFO:     Application startup complete.\n"
    down = "INFO:     Waiting for application shutdown.\n"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    port = "OSError: [Errno 98] Address already in use\n"
    assert diagnose(start + port + start + up).label == "healthy"  # fixed by the restart
    assert diagnose(start + port + start).label == "port_in_use"  # excerpt ends mid-restart
    assert diagnose(start + up + down + start).label == "starting"
    assert diagnose(start + up + down + start + oom).label == "cuda_oom"


def test_starting_reports_stage_and_progress() -> None:
    d = fx("starting__none__loading_shards_tqdm_cr.log")
    assert (d.label, d.stage, d.progress) == ("starting", "loading_shards", "26/64")
    assert d.summary == "starting: loading checkpoint shards (26/64)"
    assert not d.failed and not d.ready
    empty = diagnose("")
    assert (empty.label, empty.stage, empty.evidence) == ("starting", None, ())


def test_unrecognised_error_word_alone_is_not_a_failure() -> None:
    text = (
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.0\n"
        "ERROR 01-01 00:00:01 [registry.py:1] Error in cpuinfo: prctl(PR_SET_SECCOMP) failed\n"
        "WARNING 01-01 00:00:02 [utils.py:1] Found NCCL_P2P_LEVEL in env; NCCL tuning ignored\n"
    )
    assert diagnose(text).label == "starting"


def test_kv_dtype_hint_depends_on_the_vllm_version() -> None:
    text = "NotImplementedError: TritonMLA V1 with FP8 KV cache not yet supported\n"
    old = diagnose(text, {"vllm_version": "0.17.1"})
    assert "fab patch-kv-config" in old.hint and ">= 0.18" in old.hint
    new = diagnose(text, {"vllm_version": "0.19.0"})
    assert "--attention-backend TRITON_MLA" in new.hint and "fab patch-kv-config" in new.hint
    assert ">= 0.18" not in new.hint


# Signatures that also occur in benign lines must not mislabel an unrelated crash.
_CRASH = "Traceback (most recent call last):\nRuntimeError: something unrecognised\n"


@pytest.mark.parametrize(
    "benign",
    [
        # torch tries IPv6 first; IPv4 may still bind
        "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 "
        "(errno: 98 - Address already in use).",
        # an optional processor file is looked up and not found
        "WARNING 01-01 00:00:00 [processing.py:1] /models/x does not appear to have a file "
        "named preprocessor_config.json.",
        # debug-level backend selection before another backend is chosen
        "DEBUG 01-01 00:00:00 [cuda.py:1] Some attention backends are not valid for cuda with "
        "kv_cache_dtype=fp8. Reasons: {FLASH_ATTN: [kv_cache_dtype not supported]}.",
        "WARNING 01-01 00:00:00 [attn.py:1] compute capability 12.0 is not supported by "
        "FlashAttention 3, falling back to FlashAttention 2",
        "WARNING 01-01 00:00:00 [x.py:1] fp8 kv cache is not supported with this backend, "
        "using auto",
    ],
)
def test_benign_mentions_do_not_decide_the_label(benign: str) -> None:
    assert diagnose(benign + "\n").label == "starting"
    d = diagnose(benign + "\n" + _CRASH)
    assert d.label == "unknown", d.facts
    assert d.evidence[0] == "RuntimeError: something unrecognised"


# --------------------------------------------------------------------------- cleaning


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("(APIServer pid=1) INFO 03-20 14:02:11 [api_server.py:12] hello", "hello"),
        ('(EngineCore_DP0 pid=123) ERROR 03-20 14:02:11 [core.py:7]   File "x"', '  File "x"'),
        ("(VllmWorker rank=3 pid=9) WARNING 03-20 14:02:11 [a.py:1] w", "w"),
        ("(RayWorkerWrapper pid=5, ip=10.0.0.1) INFO 03-20 14:02:11 x.py:3] ray", "ray"),
        ("[rank0]: NotImplementedError: boom", "NotImplementedError: boom"),
        ('[rank0]:   File "y.py", line 3', '  File "y.py", line 3'),
        ("vllm-1  | INFO 09-01 10:00:00 [x.py:1] up", "up"),
        ("[vllm]                 | ERROR 06-02 05:17:18 [core.py:387] bad", "bad"),
        ("> > INFO 06-21 19:07:50 [__init__.py:25] quoted", "quoted"),
        ("2025-08-19T10:00:00.123456789Z INFO 08-19 10:00:00 [a.py:1] iso", "iso"),
        ("[2025-08-19 10:00:00] ValueError: bracketed", "ValueError: bracketed"),
        ("Mar 20 14:00:00 host vllm[42]: INFO 03-20 14:00:00 [a.py:1] journal", "journal"),
        ("\x1b[1;31mERROR\x1b[0m 03-20 14:00:00 [a.py:1] \x1b[33mred\x1b[0m", "red"),
        ("^[[0;36m(APIServer pid=31)^[[0;0m INFO 02-03 19:00:05 [a.py:38] caret", "caret"),
        ("INFO:     Application startup complete.", "Application startup complete."),
        ("ERROR:    [Errno 98] error while binding", "[Errno 98] error while binding"),
        ("INFO 08-23 08:25:25 multiproc_worker_utils.py:226] old format", "old format"),
        ("WARNING 2025-01-01 10:00:00,123 [a.py:3] with year", "with year"),
        (
            "Loading safetensors checkpoint shards: 5/9 [00:01<00:01](EngineCore pid=2) "
            "ERROR 01-01 00:00:00 [core.py:1] glued after a tqdm bar",
            "glued after a tqdm bar",
        ),
        (
            "    return self._loop.run_until_complete(task)",
            "    return self._loop.run_until_complete(task)",
        ),
        (
            "Loading safetensors checkpoint shards:  40% Completed | 26/64",
            "Loading safetensors checkpoint shards:  40% Completed | 26/64",
        ),
        ("INFO something without a timestamp", "INFO something without a timestamp"),
        (
            "2026-06-09 14:01:54.604 [Info] (Process) (APIServer pid=42406) "
            "torch.OutOfMemoryError: HIP out of memory.",
            "torch.OutOfMemoryError: HIP out of memory.",
        ),
        (
            '(AsyncVLLMInferenceEngine pid=8) (EngineCore_0 pid=9)   File "x.py", line 2',
            '  File "x.py", line 2',
        ),
        ("[Errno 98] Address already in use", "[Errno 98] Address already in use"),
        ("^CINFO 06-10 11:00:00 [launcher.py:80] Shutting down.", "^C Shutting down."),
        (
            "│ INFO 03-21 20:19:24 [launcher.py:34] Route: /v1/models, Methods: GET     │",
            "Route: /v1/models, Methods: GET",
        ),
        (
            "авг 18 14:15:04 llm python3[28059]: (EngineCore pid=28059) INFO 08-18 14:15:04 "
            "[vllm.py:1721] Cudagraph is disabled under eager mode",
            "Cudagraph is disabled under eager mode",
        ),
        # the other `journalctl -o` formats of a systemd unit's log, and syslog's headers
        ("2026-12-04T23:00:01+0000 gpu-01 python3[481]: ValueError: iso", "ValueError: iso"),
        ("Dec 04 23:00:01.123456 gpu-01 vllm[481]: ValueError: precise", "ValueError: precise"),
        ("Fri 2026-12-04 23:00:01 UTC gpu-01 vllm[481]: ValueError: full", "ValueError: full"),
        ("[ 1234.567890] gpu-01 vllm[481]: ValueError: monotonic", "ValueError: monotonic"),
        ("<14>Dec  4 23:00:01 gpu-01 vllm[481]: ValueError: rfc3164", "ValueError: rfc3164"),
        (
            "<14>1 2026-12-04T23:00:01.003Z gpu-01 vllm 481 - - ValueError: rfc5424",
            "ValueError: rfc5424",
        ),
        # the kernel's own lines keep the process they name (dmesg, journalctl -k)
        (
            "[ 1234.567890] python3[481]: segfault at 0 ip 00007f error 4",
            "[ 1234.567890] python3[481]: segfault at 0 ip 00007f error 4",
        ),
        (
            "Dec 04 23:00:01 gpu-01 kernel: python3[481]: segfault at 0 ip 00007f error 4",
            "python3[481]: segfault at 0 ip 00007f error 4",
        ),
    ],
)
def test_clean_line(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("path", all_logs())
def test_streaming_in_random_chunks_equals_whole(path: Path) -> None:
    text = read(path)
    whole = diagnose(text, CONTEXT)
    ref = feed_all([text], CONTEXT)
    rng = random.Random(path.name)
    for max_len in (1, 7, 64, 4096):
        d = feed_all(random_chunks(text, rng, max_len), CONTEXT)
        assert d.diagnosis() == whole, max_len
        assert d.tail == ref.tail


def test_crlf_split_between_chunks_and_bytes_input() -> None:
    text = read(FIXTURES / "healthy__none__v1_full_startup_with_warnings.log")
    crlf = text.replace("\n", "\r\n")
    whole = diagnose(text)
    assert diagnose(crlf) == whole
    cut = crlf.index("\r\n", 500) + 1  # between \r and \n
    d = feed_all([crlf[:cut], crlf[cut:]])
    assert d.diagnosis() == whole
    # bytes, split inside a multi-byte UTF-8 character
    raw = ("tqdm █ bar\n" + text).encode()
    cut = raw.index("█".encode()) + 1
    d = LogDiagnoser()
    d.feed(raw[:cut])
    d.feed(raw[cut:])
    assert d.diagnosis() == diagnose(raw.decode())


_PIECES = [
    "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.0\n",
    "(EngineCore_DP0 pid=2) INFO 01-01 00:00:01 [loader.py:1] Loading weights took 3 s\n",
    "\rLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]",
    "\rLoading safetensors checkpoint shards: 100% Completed | 2/2 [00:02<00:00]\n",
    "INFO:     Application startup complete.\r\n",
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n",
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8001): "
    "address already in use\n",
    'Traceback (most recent call last):\n  File "a.py", line 1, in f\nValueError: x\n',
    "RuntimeError: Engine core initialization failed. See root cause above.\n",
    "ValueError: To serve at least one request with the models's max seq len (4096), (1.0 Gi",
    "B KV cache is needed, which is larger than the available KV cache memory (0.5 GiB).\n",
    "WARNING 01-01 00:00:02 [x.py:1] just a warning\n",
    "INFO:     Waiting for application shutdown.\n",
    "./run.sh: line 1: 42 Killed  vllm serve\n",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
)
def test_streaming_property(pieces: list[str], cuts: list[int]) -> None:
    # diagnose(text) first puts a newest-first paste back in order (pieces whose vLLM times
    # fall line after line, as drawn); a stream is read as it comes: fed in logged order
    text = oldest_first("".join(pieces))
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    d = feed_all(chunks)
    whole = diagnose(text)
    assert d.diagnosis() == whole
    assert d.tail == feed_all([text]).tail
    assert whole.label in LABELS


def test_diagnosis_is_available_at_any_time() -> None:
    text = read(FIXTURES / "cuda_oom__cuda_oom__after_startup_request.log")
    d = LogDiagnoser(CONTEXT)
    seen = []
    for line in text.splitlines(keepends=True):
        d.feed(line)
        seen.append(d.diagnosis().label)
    assert seen[0] == "starting"
    assert "healthy" in seen
    assert seen[-1] == "cuda_oom"
    # V1 prints "EngineCore encountered a fatal error." before the traceback holding the
    # cause, so the wrapper label may show for a few lines; never a wrong specific cause.
    assert set(seen) <= {"starting", "healthy", "engine_dead_other", "cuda_oom"}
    assert seen.index("engine_dead_other") > seen.index("healthy")


def test_partial_last_line_is_seen_but_not_committed() -> None:
    d = LogDiagnoser()
    d.feed("INFO:     Application startup comp")
    assert d.diagnosis().label == "starting"
    d.feed("lete.")
    assert d.diagnosis().label == "healthy"
    assert d.tail == ["Application startup complete."]


def test_tail_is_bounded_cleaned_and_collapses_tqdm() -> None:
    text = read(FIXTURES / "starting__none__loading_shards_tqdm_cr.log")
    d = feed_all([text])
    assert (
        d.tail[-1]
        == "Loading safetensors checkpoint shards:  40% Completed | 26/64 [00:26<01:30, 1.4s/it]"
    )
    assert sum("checkpoint shards" in x for x in d.tail) == 1
    assert d.tail[0] == "vLLM API server version 0.17.1"
    many = "".join(
        f"(APIServer pid=1) INFO 01-01 00:00:00 [a.py:1] line {i}\n" for i in range(5000)
    )
    d = feed_all([many])
    assert len(d.tail) == TAIL_LINES and d.tail[-1] == "line 4999"
    assert d.tail[0] == f"line {5000 - TAIL_LINES}"


# --------------------------------------------------------------------------- fast path


#: Excerpts whose deciding lines (argparse usage dumps, transformers' custom-code prompt)
#: hold no trigger word: only the head scan (every line of the first ``_FULL_SCAN`` chars)
#: reads them, and in a whole log such lines come first, inside the head.
HEAD_SCAN_ONLY = {
    # the interpreter's "python: No module named X" for `python -m X`: the only line it prints,
    # so always in the head
    "unknown__module_not_found__cpu032_python_m_no_such_module.log",
    "bad_argument__argparse_error__cpu032_no_such_flag.log",
    "bad_argument__argparse_error__invalid_choice_ansi.log",
    "bad_argument__argparse_usage__k8s_usage_cut.log",
    "016_bad_argument.log",
    "025_trust_remote_code.log",
    "037_kv_cache_dtype_unsupported.log",  # the fact kv_cache_dtype=fp8: its command line
    # a user's retyping of the error ("oserror : ..."): a real log says "OSError:"
    "model_not_found__model_not_found__config_json_missing_retyped.log",
    # Ray's GCS text line "... has been marked dead because ..." (its event log's JSON form
    # holds the trigger MARKED_DEAD): found in the head only
    "unknown__none__ray_node_marked_dead.log",
    # a weak fact (no KV blocks) and a traceback cut before its exception: the crash signal
    # is the "Traceback (most recent call last)" header, which holds no trigger word
    "kv_cache_insufficient__kv_blocks_zero__v0_negative_gpu_blocks.log",
    # lines without a trigger word, kept so (each needle costs a scan of every chunk): in a
    # whole log the same failure comes with an Error / exit line (tt-metal's "RuntimeError:
    # TT_THROW ... Out of Memory"), or it is a wrapper's last word in a short excerpt
    "cuda_oom__cuda_oom__tenstorrent_dram_out_of_memory.log",
    "unknown__none__wrapper_says_vllm_failed_to_start.log",
}


@pytest.mark.parametrize("path", all_logs())
def test_fast_line_filter_misses_nothing(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Analysing only the trigger lines gives the same result as analysing every line."""
    text = read(path)
    fast = diagnose(text, CONTEXT)
    if path.name not in HEAD_SCAN_ONLY:  # the trigger lines alone decide the same
        monkeypatch.setattr(SCANNER, "_FULL_SCAN", 0)
        assert diagnose(text, CONTEXT) == fast

    def every_line(scan: str) -> list[int]:
        return [0] + [i + 1 for i, ch in enumerate(scan[:-1]) if ch == "\n"]

    monkeypatch.setattr(SCANNER, "_candidate_lines", every_line)
    assert diagnose(text, CONTEXT) == fast


def test_module_is_pure() -> None:
    imported = set()
    package = Path(D.__file__).parent
    trees = [ast.parse(p.read_text()) for p in sorted(package.glob("*.py"))]
    assert len(trees) > 5  # the package's modules, not only __init__.py
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"open", "exec", "eval"}
    assert not imported & {"fabric", "invoke", "paramiko", "subprocess", "socket", "os"}


# --------------------------------------------------------------------------- speed


def _big_log(target_bytes: int) -> str:
    block = "".join(
        [
            '(APIServer pid=1) INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" '
            "200 OK\n",
            "(APIServer pid=1) INFO 03-20 14:02:11 [loggers.py:123] Engine 000: Avg prompt "
            "throughput: 812.4 tokens/s, Avg generation throughput: 64.0 tokens/s, Running: 5 "
            "reqs, Waiting: 0 reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 40.1%\n",
            "(EngineCore_DP0 pid=2) DEBUG 03-20 14:02:11 [core.py:412] EngineCore busy loop\n",
            "(VllmWorker TP3 pid=9) WARNING 03-20 14:02:11 [shm_broadcast.py:466] No available "
            "shared memory broadcast block found in 60 second.\n",
        ]
    )
    return block * (target_bytes // len(block))


def test_large_log_is_fast_and_linear() -> None:
    text = _big_log(8_000_000) + "torch.OutOfMemoryError: CUDA out of memory.\n"
    t0 = time.perf_counter()
    d = feed_all([text[i : i + (1 << 20)] for i in range(0, len(text), 1 << 20)])
    elapsed = time.perf_counter() - t0
    assert d.diagnosis().label == "cuda_oom"
    assert elapsed < 4.0, f"8 MB took {elapsed:.2f} s"  # ~0.1 s expected; loose for CI


def test_many_interesting_lines_stay_fast() -> None:
    tb = (
        "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:00 [core.py:1] "
        "Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=2) ERROR 01-01 00:00:00 [core.py:1]   File "x.py", line 1, in f\n'
        "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:00 [core.py:1] ValueError: boom\n"
    )
    text = tb * 5000
    t0 = time.perf_counter()
    d = diagnose(text)
    assert time.perf_counter() - t0 < 4.0
    # logged by vLLM's engine core (its prefix and logger format): vLLM died of it
    assert d.label == "engine_dead_other" and d.evidence[0] == "ValueError: boom"


def test_every_stage_and_fact_keyword_is_reachable_by_the_line_filter() -> None:
    words = WORDS._TRIGGER_WORDS + WORDS._FIND_WORDS
    keys = {k for mk in MARKERS._STAGE_MARKERS for k in mk.keywords}
    keys |= {k for ks, _ in MARKERS._FACT_PATTERNS for k in ks}
    keys -= WORDS._KEYWORDS_ON_ERROR_LINES | WORDS._HEAD_ONLY_KEYWORDS
    unreachable = sorted(k for k in keys if not any(w in k for w in words))
    assert not unreachable


def test_error_final_line_and_exit_code_are_unknown_crashes() -> None:
    assert diagnose("Error: model loading failed\n").label == "unknown"
    d = diagnose(
        "vllm-1  | INFO 01-01 00:00:00 [a.py:1] Loading weights took 3 s\n"
        "vllm-1 exited with code 137\n"
    )
    assert d.label == "engine_killed" and d.evidence == ("vllm-1 exited with code 137",)
    assert diagnose("vllm-1 exited with code 1\n").label == "unknown"
    assert diagnose("vllm-1 exited with code 0\n").label == "starting"


def test_huge_single_feed_is_sliced_but_equivalent() -> None:
    text = _big_log(9_000_000) + "OSError: [Errno 98] Address already in use\n"
    d = LogDiagnoser()
    d.feed(text)  # one call, processed internally in slices
    assert (
        d.diagnosis()
        == feed_all([text[i : i + 65536] for i in range(0, len(text), 65536)]).diagnosis()
    )
    assert d.diagnosis().label == "port_in_use"


def test_trigger_words_stay_selective_after_translation() -> None:
    for word in WORDS._TRIGGER_WORDS:
        literal = [ch for ch in word if ch not in CANDIDATES._ANCHORS]
        assert len(literal) >= 3, f"{word!r} would match any run of anchor characters"


# --------------------------------------------------------------------------- lifecycle

REAL_CPU_LOGS = _shared("real-cpu-logs")
#: vLLM CPU build 0.32.0 logs (README there): file -> (label, lifecycle, signal).
REAL_CPU_EXPECTED: dict[str, tuple[str, str, str | None]] = {
    "healthy.log": ("healthy", "serving", None),
    "healthy_no_triton.log": ("healthy", "stopped", None),
    "dsv3_mla_healthy.log": ("healthy", "stopped", None),
    "sigterm_graceful_stop.log": ("healthy", "stopped", None),
    "kv_fp8_flag_llama.log": ("healthy", "stopped", None),
    "port_in_use.log": ("port_in_use", "failed", None),
    "model_missing.log": ("model_not_found", "failed", None),
    "bad_flag.log": ("bad_argument", "failed", None),
    "max_model_len_too_big.log": ("bad_argument", "failed", None),
    "kv_fp8_flag_dsv3_mla.log": ("kv_cache_dtype_unsupported", "failed", None),
    "nvfp4_fp8kv_config_dsv3.log": ("quantization_unsupported", "failed", None),
    "engine_kill9.log": ("engine_killed", "failed", "SIGKILL"),
    "healthy_enforce_eager.log": ("engine_killed", "failed", "SIGILL"),
    "crash_first_request_headdim16.log": ("engine_dead_other", "failed", None),
    "dsv3_no_topk_method_keyerror.log": ("engine_dead_other", "failed", None),
}


def real_cpu_params() -> list[object]:
    if not REAL_CPU_LOGS.is_dir():
        return [pytest.param("", marks=pytest.mark.skip(reason="no shared real-cpu-logs"))]
    return [pytest.param(p.name, id=p.name) for p in sorted(REAL_CPU_LOGS.glob("*.log"))]


@pytest.mark.parametrize("name", real_cpu_params())
def test_real_cpu_engine_log(name: str) -> None:
    assert name in REAL_CPU_EXPECTED, f"{name}: new real log, add its expected label here"
    label, lifecycle, signal = REAL_CPU_EXPECTED[name]
    d = diagnose(read(REAL_CPU_LOGS / name), {"vllm_version": "0.32.0"})
    assert (d.label, d.lifecycle) == (label, lifecycle), (d.summary, d.evidence)
    assert d.facts.get("signal") == signal
    if d.failed:
        assert d.evidence and "{" not in d.hint and "[[" not in d.hint
    if label == "engine_dead_other":  # the exception is the evidence
        assert any(re.match(r"\w+Error: ", e) for e in d.evidence), d.evidence


def test_sigterm_stop_is_healthy_then_stopped_not_an_engine_death() -> None:
    for name in (
        "healthy__none__cpu032_sigterm_whole_tree.log",
        "healthy__none__cpu032_sigterm_api_server_only.log",
        "healthy__none__cpu032_mla_sigterm_stop.log",
    ):
        d = fx(name)
        assert (d.label, d.lifecycle, d.facts["shutdown"]) == ("healthy", "stopped", "true")
        assert d.summary.endswith("(then shut down)")
        assert not d.ready and not d.failed  # it served, but it does not serve now
    serving = fx("healthy__none__cpu032_serving.log")
    assert (serving.lifecycle, serving.facts.get("shutdown")) == ("serving", None)


def test_cpu_specific_hints() -> None:
    d = fx("kv_cache_dtype_unsupported__fp8_kv_cache_unsupported__cpu032_amx_mla.log")
    assert d.facts["backend"] == "AMX_MLA" and d.facts["device"] == "cpu"
    assert "On CPU, MLA serves only a bf16" in d.hint and "--kv-cache-dtype fp8" in d.hint
    assert "kv_cache_scheme" in d.hint and "TRITON_MLA" not in d.hint
    d = fx("quantization_unsupported__quantization_no_kernel__cpu032_nvfp4.log")
    assert d.facts["quantization"] == "NVFP4" and d.facts["platform"] == "CPU"
    assert "NVFP4 needs a Blackwell GPU" in d.hint
    d = fx("engine_killed__engine_signal__cpu032_sigill_enforce_eager.log")
    assert d.facts["killed_proc"] == "Worker proc VllmWorker-0"
    assert "--enforce-eager" in d.hint and "SIGILL" in d.summary


def test_lifecycle_of_each_state() -> None:
    d = fx("starting__none__cpu032_cut_while_compiling.log")
    assert (d.label, d.lifecycle, d.stage) == ("starting", "starting", "weights_loaded")
    assert fx("cuda_oom__cuda_oom__after_startup_request.log").lifecycle == "failed"
    assert diagnose("").lifecycle == "starting"
    assert fx("healthy__none__ctrl_c_shutdown_destroy_pg.log").lifecycle == "stopped"
    # a log cut right after the route list is up, not starting
    routes = (
        "(APIServer pid=1) INFO 01-01 00:00:00 [launcher.py:1] Available routes are:\n"
        "(APIServer pid=1) INFO 01-01 00:00:00 [launcher.py:2] Route: /health, Methods: GET\n"
    )
    assert (diagnose(routes).label, diagnose(routes).lifecycle) == ("healthy", "serving")
    started = "INFO:     Started server process [7]\n"
    assert diagnose(started).lifecycle == "serving"
    # lifecycle is part of the JSON form; left out, it is derived from the label
    assert fx("bad_argument__argparse_error__cpu032_no_such_flag.log").to_dict()["lifecycle"] == (
        "failed"
    )
    assert Diagnosis("healthy", "ready", None, (), "h", "s").lifecycle == "serving"
    assert set(D.LIFECYCLES) == {"starting", "serving", "stopped", "failed"}


def test_kv_shortfall_from_max_concurrency_below_one() -> None:
    text = (
        "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 9,000 tokens\n"
        "INFO 01-01 00:00:00 [kv_cache_utils.py:1] Maximum concurrency for 32,768 tokens per "
        "request: 0.27x\n"
    )
    assert diagnose(text).label == "starting"  # a warning alone: the engine may go on
    crash = text + "Traceback (most recent call last):\nValueError: something else\n"
    d = diagnose(crash)
    assert d.label == "kv_cache_insufficient" and "32,768" in d.summary + d.hint


@pytest.mark.parametrize(
    ("text", "label"),
    [
        # a method name this vLLM does not know, refused by name with the list it takes (read
        # so by the labellers 2 to 1; quantization_unsupported before blind set ZF)
        (
            "ValueError: Unknown quantization method: mxfp4. Must be one of ['awq', 'fp8'].",
            "bad_argument",
        ),
        # quantization without a kernel on this device, in several versions' words
        (
            "ValueError: fp8 quantization is currently not supported in CPU.",
            "quantization_unsupported",
        ),
        (
            "The quantization method gptq_marlin is not supported for the current GPU. Minimum "
            "capability: 80. Current capability: 75.",
            "quantization_unsupported",
        ),
        (
            "ValueError: Marlin does not support weight_bits = uint4b8. Only types = [] are "
            "supported (for group_size = 128, min_capability = 75, zp = False)",
            "quantization_unsupported",
        ),
        (
            "NotImplementedError: Could not run '_C::static_scaled_fp8_quant' with arguments from "
            "the 'CPU' backend.",
            "quantization_unsupported",
        ),
        (  # a dtype to change (--dtype half); on the CPU build no dtype helps (own test)
            "ValueError: torch.bfloat16 is not supported for quantization method awq. Supported "
            "dtypes: [torch.float16]",
            "bad_argument",
        ),
        (
            "ValueError: Currently, only 4-bit weight quantization is supported for AWQ, but got "
            "8 bits.",
            "quantization_unsupported",
        ),
        # the GPU itself
        ("RuntimeError: HIP error: invalid device function", "unsupported_gpu"),
        # model access
        (
            "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/"
            "models/org/m: offline mode is enabled.",
            "model_not_found",
        ),
        (
            "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url",
            "model_not_found",
        ),
        # custom code prompts, without the exception line
        (
            "The repository for org/m contains custom code that must be executed to correctly load "
            "the model.",
            "trust_remote_code",
        ),
        # crashes that say only that the process is gone
        (
            "Fatal Python error: _enter_buffered_busy: could not acquire lock at interpreter "
            "shutdown",
            "unknown",
        ),
        (
            "2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start "
            "model server: integer division or modulo by zero",
            "unknown",
        ),
        (
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this "
            "task.",
            "unknown",
        ),
        (
            "The actor is dead because its worker process has died. Potential root causes: (1) "
            "The process is killed by SIGKILL by OOM killer due to high memory usage.",
            "unknown",
        ),
        # a V1 executor that lost its workers, and a bare 'died unexpectedly': engine errors
        (
            "CRITICAL 03-15 17:24:18 [multiproc_executor.py:48] MulitprocExecutor got fatal signal "
            "from worker processes, shutting down. See stack trace above for root cause issue.",
            "engine_dead_other",
        ),
        (
            "ERROR 10-23 18:21:12 [core_client.py:597] Engine core proc EngineCore_DP0 died "
            "unexpectedly, shutting down client.",
            "engine_dead_other",
        ),
        (
            "(RayWorker pid=4856) *** SIGBUS received at time=1695209888 on cpu 3 ***",
            "engine_killed",
        ),
        ("!!!!!!! Segfault encountered !!!!!!!", "engine_killed"),
        (
            "ERROR 04-29 21:35:55 [engine.py:448] Bfloat16 is only supported on GPUs with compute "
            "capability of at least 8.0. Your Tesla P40 GPU has compute capability 6.1.",
            "unsupported_gpu",
        ),
    ],
)
def test_wordings_across_versions(text: str, label: str) -> None:
    d = diagnose(text + "\n")
    assert d.label == label, (d.summary, d.evidence)
    if d.failed:
        assert d.evidence and "{" not in d.hint and "[[" not in d.hint


def test_a_stop_shown_without_its_startup_is_healthy_then_stopped() -> None:
    stop = (
        "(APIServer pid=1) INFO 08-13 22:38:43 [launcher.py:1] [shutdown] API server: shutting "
        "down FastAPI HTTP server\n"
        "(APIServer pid=1) INFO:     Shutting down\n"
        "(APIServer pid=1) INFO:     Waiting for application shutdown.\n"
        "(APIServer pid=1) INFO:     Application shutdown complete.\n"
    )
    d = diagnose(stop)
    assert (d.label, d.lifecycle) == ("healthy", "stopped")
    # the V0 workers then die of the SIGTERM the stop sent them: still a stop
    d = diagnose(stop + "ERROR 08-18 03:43:42 [x.py:1] Worker pid 7 died, exit code: -15\n")
    assert (d.label, d.lifecycle) == ("healthy", "stopped")
    # but an error before the stop is why it stopped
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert diagnose(oom + stop).label == "cuda_oom"


def test_kubectl_prefix_is_stripped() -> None:
    assert clean_line("[pod/vllm-0/vllm] INFO 01-01 00:00:00 [a.py:1] up") == "up"
    # on an empty line the prefix's trailing space is all that follows it (a CI run failed on it)
    assert clean_line("[pod/vllm-0/vllm] \n") == ""


def test_every_line_of_a_small_excerpt_is_read() -> None:
    line = "Repository Not Found for url: https://huggingface.co/api/models/org/missing.\n"
    assert not any(w in line for w in WORDS._FIND_WORDS)  # no trigger word: only the head scan
    assert diagnose(line).label == "model_not_found"
    # past the head, a big log is read through its trigger lines only (speed)
    filler = "INFO 01-01 00:00:00 [a.py:1] step\n" * (SCANNER._FULL_SCAN // 30)
    assert diagnose(filler + line).label == "starting"
    chunks = [(filler + line)[i : i + 999] for i in range(0, len(filler + line), 999)]
    assert feed_all(chunks).diagnosis() == diagnose(filler + line)


def test_a_stopped_server_s_hint_says_it_was_stopped_and_serves_nothing() -> None:
    d = fx("healthy__none__cpu032_sigterm_whole_tree.log")
    assert (d.label, d.lifecycle) == ("healthy", "stopped")
    assert "then was stopped" in d.hint and "nothing failed" in d.hint
    assert "confirm it answers" not in d.hint  # (the running server's hint)
    up = fx("healthy__none__cpu032_serving.log")
    assert "confirm it answers" in up.hint and "stopped" not in up.hint
