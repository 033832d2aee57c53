"""Tests for the stand-in engine (the ``standin`` package), which EMULATES vLLM (it loads no model).

Every test runs the stand-in as a real subprocess, as a host does: the ONE file the deploy
uploads, built from the package by ``standin.bundle`` (``sys.executable kimi_standin.py``), with
its own temp dir (model dir, standin.json via KIMI_STANDIN_CONFIG, state file) and a free port on
127.0.0.1. Every process a test starts is killed by PID in the fixture's teardown, and the
/dev/shm files a stand-in leaves behind are removed by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from standin import bundle

READY = "Application startup complete."
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never use a proxy

MLA_TEXT = {
    "model_type": "kimi_k2",
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "max_position_embeddings": 262144,
}
FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}
HF_QUANT_FP8 = {
    "producer": {"name": "modelopt", "version": "0.37.0"},
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_model(
    path: Path,
    quant: dict[str, Any] | None = None,
    hf_quant: dict[str, Any] | None = None,
    shards: int = 8,
    auto_map: bool = True,
) -> Path:
    """A fake Kimi-K2.5-like checkpoint: config.json (+ hf_quant_config.json, index.json)."""
    path.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": MLA_TEXT,
    }
    if auto_map:
        config["auto_map"] = {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}
    if quant is not None:
        config["quantization_config"] = quant
    (path / "config.json").write_text(json.dumps(config))
    if hf_quant is not None:
        (path / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    weight_map = {
        f"layer.{i}": f"model-{i % shards:05d}-of-{shards:05d}.safetensors" for i in range(40)
    }
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return path


def nvfp4_quant(kv_scheme: Any = FP8_SCHEME) -> dict[str, Any]:
    quant: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    if kv_scheme is not None:
        quant["kv_cache_scheme"] = kv_scheme
    return quant


def descendants(pid: int) -> list[int]:
    """PIDs below pid in the process tree (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


class Standin:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, case: Case, port: int) -> None:
        self.proc = proc
        self.log_path = log
        self.case = case
        self.port = port
        self.known: set[int] = {proc.pid}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log()
            if text in log:
                self.remember()
                return log
            if self.proc.poll() is not None:
                log = self.log()
                if text in log:
                    return log
                raise AssertionError(
                    f"exited {self.proc.returncode} before {text!r}:\n{log[-3000:]}"
                )
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {text!r}:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = 10.0) -> int:
        self.remember()
        return self.proc.wait(timeout=timeout)

    def remember(self) -> None:
        if self.proc.poll() is None:
            self.known.update(descendants(self.proc.pid))

    def state(self) -> dict[str, Any]:
        data = json.loads(self.case.state.read_text())
        (entry,) = [s for s in data["servers"] if s["pid"] == self.proc.pid]
        return entry

    def http(
        self,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, bytes]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, headers=headers or {}
        )
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with OPENER.open(req, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()


class Case:
    """One test's temp world: model dir, config file, state file."""

    def __init__(self, tmp: Path, script: Path) -> None:
        self.tmp = tmp
        self.script = script
        self.config_path = tmp / "standin-test.json"
        self.state = tmp / "gpu-state.json"
        self.started: list[Standin] = []
        self.shm: set[str] = set()

    def config(self, **overrides: Any) -> dict[str, Any]:
        cfg = {"load_seconds": 0.2, "state_file": str(self.state), "vllm_version": "0.17.1"}
        cfg.update(overrides)
        self.config_path.write_text(json.dumps(cfg))
        return cfg

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_VISIBLE"))}
        env["KIMI_STANDIN_CONFIG"] = str(self.config_path)
        env.update(extra or {})
        return env

    def run(
        self, args: list[str], timeout: float = 10.0, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        """Short-lived invocations (errors, nvidia-smi, vllm-version)."""
        return subprocess.run(
            [sys.executable, str(kw.pop("script", self.script)), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(kw.pop("env", None)),
            **kw,
        )

    def start(self, args: list[str], env: dict[str, str] | None = None, port: int = 0) -> Standin:
        log = self.tmp / f"standin-{len(self.started)}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, str(self.script), *args],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self.env(env),
            )
        s = Standin(proc, log, self, port)
        self.started.append(s)
        return s

    def serve_args(self, model: Path, port: int, *extra: str, tp: int = 8) -> list[str]:
        return [
            "--model",
            str(model),
            "--served-model-name",
            "kimi-k2.5",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tensor-parallel-size",
            str(tp),
            "--trust-remote-code",
            "--tool-call-parser",
            "kimi_k2",
            "--enable-auto-tool-choice",
            "--reasoning-parser",
            "kimi_k2",
            "--max-model-len",
            "131072",
            "--gpu-memory-utilization",
            "0.92",
            "--no-enable-log-requests",
            *extra,
        ]

    def serve(
        self, model: Path, *extra: str, tp: int = 8, env: dict[str, str] | None = None
    ) -> Standin:
        port = free_port()
        return self.start(self.serve_args(model, port, *extra, tp=tp), env=env, port=port)

    def note_shm(self, s: Standin) -> list[str]:
        files = list(s.state().get("shm_files", []))
        self.shm.update(files)
        return files

    def shm_from_state(self) -> None:
        """Every server of this test lists its /dev/shm files in the state file."""
        try:
            servers = json.loads(self.state.read_text())["servers"]
        except (OSError, ValueError, KeyError):
            return
        mine = {s.proc.pid for s in self.started}
        for entry in servers:
            if entry.get("pid") in mine:
                self.shm.update(entry.get("shm_files", []))

    def cleanup(self) -> None:
        """Stop what this test started (by PID only) and remove the shm files it left."""
        self.shm_from_state()
        for s in self.started:
            s.remember()
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)  # graceful first: the stand-in cleans up
                try:
                    s.proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    s.proc.kill()
                    s.proc.wait(timeout=10)
            if not wait_gone(sorted(s.known - {s.proc.pid}), timeout=3):
                for pid in sorted(s.known - {s.proc.pid}):
                    if alive(pid):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                wait_gone(sorted(s.known), timeout=5)
        self.shm_from_state()
        for path in self.shm:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


@pytest.fixture(scope="session")
def standin_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one file a host runs, built from the standin package once per session."""
    path = tmp_path_factory.mktemp("bundle") / "kimi_standin.py"
    path.write_bytes(bundle.build())
    return path


@pytest.fixture
def case(tmp_path: Path, standin_script: Path):
    c = Case(tmp_path, standin_script)
    c.config()
    try:
        yield c
    finally:
        c.cleanup()


def kv_tokens(log: str) -> int:
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", log)
    assert m, log[-2000:]
    return int(m.group(1).replace(",", ""))


# ------------------------------------------------------------------------------------------
# Argument parsing
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entrypoint", "usage"),
    [("api_server", "usage: api_server.py"), ("serve", "usage: vllm [-h]")],
)
def test_unknown_flag_is_an_argparse_error(case: Case, entrypoint: str, usage: str) -> None:
    case.config(entrypoint=entrypoint)
    res = case.run(["--model", str(case.tmp), "--port", "1", "--bogus"])
    assert res.returncode == 2
    assert usage in res.stderr
    assert "error: unrecognized arguments: --bogus" in res.stderr
    assert res.stdout.startswith("kimi-standin argv: ")


def test_invalid_choice_is_an_argparse_error(case: Case) -> None:
    case.config(entrypoint="serve")
    res = case.run(["--model", "m", "--kv-cache-dtype", "int3"])
    assert res.returncode == 2
    assert "usage: vllm serve [model_tag] [options]" in res.stderr
    assert "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'int3'" in res.stderr


def test_disable_log_requests_depends_on_version(case: Case) -> None:
    missing = str(case.tmp / "no-such-model")
    case.config(vllm_version="0.17.1")
    local = ["--host", "127.0.0.1", "--port", str(free_port())]
    res = case.run(["--model", missing, *local, "--disable-log-requests"])
    assert res.returncode == 2
    assert "unrecognized arguments: --disable-log-requests" in res.stderr
    case.config(vllm_version="0.11.0")  # still accepted (deprecated) -> fails later, on the model
    res = case.run(["--model", missing, *local, "--disable-log-requests"])
    assert res.returncode == 1
    assert "unrecognized arguments" not in res.stderr
    assert "`--disable-log-requests` is deprecated" in res.stdout
    assert "vLLM API server version 0.11.0" in res.stdout
    case.config(vllm_version="0.10.2")  # --attention-backend did not exist yet
    res = case.run(["--model", missing, *local, "--attention-backend", "TRITON_MLA"])
    assert res.returncode == 2
    assert "unrecognized arguments: --attention-backend TRITON_MLA" in res.stderr


# ------------------------------------------------------------------------------------------
# KV-cache dtype and the SM120 / TRITON_MLA failure
# ------------------------------------------------------------------------------------------


def test_fp8_kv_on_sm120_with_0171_fails_fast(case: Case) -> None:
    model = write_model(case.tmp / "Kimi-K2.5-NVFP4", nvfp4_quant(), HF_QUANT_FP8)
    s = case.serve(model, "--attention-backend", "TRITON_MLA", "--kv-cache-dtype", "auto")
    rc = s.wait_exit(timeout=10)
    assert rc == 1
    log = s.log()
    # fast: the backend refuses while the model is built, before any weight is loaded
    assert "Loading safetensors checkpoint shards" not in log and "Loading weights took" not in log
    assert "Using TRITON_MLA attention backend out of potential backends: ['TRITON_MLA']" in log
    assert "NotImplementedError: TritonMLA V1 with FP8 KV cache not yet supported" in log
    assert "(EngineCore_DP0 pid=" in log and "EngineCore failed to start." in log
    assert "RuntimeError: Engine core initialization failed. See root cause above." in log
    assert READY not in log
    # The shared-memory files (named in the shm_broadcast line) were removed on the way out.
    for name in re.findall(r"'(psm_[0-9a-f]{8})'", log):
        assert not os.path.exists(f"/dev/shm/{name}")
    assert wait_gone(sorted(s.known))


def test_fp8_kv_on_sm120_with_0180_serves(case: Case) -> None:
    case.config(vllm_version="0.18.0")
    model = write_model(case.tmp / "Kimi-K2.5-NVFP4", nvfp4_quant(), HF_QUANT_FP8)
    s = case.serve(model)
    log = s.wait_for(READY)
    case.note_shm(s)
    assert "Using fp8_e4m3 data type to store kv cache" in log
    assert "(EngineCore pid=" in log  # 0.18 drops the _DP0 suffix
    assert f"Starting vLLM server on http://127.0.0.1:{s.port}" in log
    assert s.http("/health")[0] == 200
    code, body = s.http("/v1/models")
    assert code == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["kimi-k2.5"]
    code, body = s.http(
        "/v1/chat/completions",
        {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    )
    assert code == 200
    reply = json.loads(body)
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"] == "Hello"
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 1
    code, body = s.http("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert code == 200
    assert (
        "emulated vLLM 0.18.0, no model loaded"
        in json.loads(body)["choices"][0]["message"]["content"]
    )
    assert s.http("/v1/chat/completions", raw=b"{not json")[0] == 400
    code, body = s.http(
        "/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    )
    assert code == 404
    assert json.loads(body)["error"]["message"] == "The model `nope` does not exist."
    assert json.loads(s.http("/version")[1]) == {"version": "0.18.0"}
    assert '"GET /health HTTP/1.1" 200 OK' in s.log()


def test_fp8_kv_on_cc10_with_0171_serves_and_doubles_kv_tokens(case: Case) -> None:
    case.config(compute_capability="10.0", gpu="NVIDIA B200", memory_mib=97887)
    fp8 = write_model(case.tmp / "fp8", nvfp4_quant())
    bf16 = write_model(case.tmp / "bf16", nvfp4_quant(kv_scheme=None))
    s = case.serve(fp8, "--enforce-eager")
    log = s.wait_for(READY)
    assert "Using CUTLASS_MLA attention backend" in log
    assert s.http("/health")[0] == 200
    fp8_tokens = kv_tokens(log)
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    s2 = case.serve(bf16, "--enforce-eager")
    bf16_tokens = kv_tokens(s2.wait_for(READY))
    assert 1.9 < fp8_tokens / bf16_tokens < 2.1


@pytest.mark.parametrize(
    ("quant", "hf_quant", "fp8"),
    [
        (nvfp4_quant(kv_scheme=None), HF_QUANT_FP8, False),  # config.json wins: no kv scheme
        (None, HF_QUANT_FP8, True),  # no quantization_config -> hf_quant_config.json is read
        (nvfp4_quant(kv_scheme="FP8"), None, True),  # older exporters: a string
    ],
    ids=["config-json-wins", "hf-quant-config-fallback", "string-scheme"],
)
def test_kv_cache_dtype_precedence(case: Case, quant: Any, hf_quant: Any, fp8: bool) -> None:
    model = write_model(case.tmp / "model", quant, hf_quant)
    s = case.serve(model)
    if fp8:
        assert s.wait_exit() == 1
        assert "TritonMLA V1 with FP8 KV cache not yet supported" in s.log()
    else:
        log = s.wait_for(READY)
        assert "data type to store kv cache" not in log
        assert "TritonMLA V1 with FP8" not in log
        assert s.http("/health")[0] == 200


def test_explicit_fp8_flag_fails_and_bf16_flag_hits_the_old_kv_bug(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, "--kv-cache-dtype", "fp8")
    assert s.wait_exit() == 1
    assert "TritonMLA V1 with FP8 KV cache not yet supported" in s.log()
    s = case.serve(model, "--kv-cache-dtype", "bfloat16")
    assert s.wait_exit() == 1
    log = s.log()
    assert "RuntimeError: Unsupported data type of kv cache: bfloat16" in log
    assert "WorkerProc hit an exception." in log


# ------------------------------------------------------------------------------------------
# Other start-up failures
# ------------------------------------------------------------------------------------------


def test_missing_model_dir_and_missing_config_json(case: Case) -> None:
    missing = case.tmp / "models" / "Kimi-K2.5-NVFP4"
    res = case.run(["--model", str(missing), "--host", "127.0.0.1", "--port", str(free_port())])
    assert res.returncode == 1
    assert (
        f"ValueError: Invalid repository ID or local directory specified: '{missing}'."
        in res.stderr
    )
    assert "huggingface_hub.errors.HFValidationError" in res.stderr
    missing.mkdir(parents=True)
    res = case.run(["--model", str(missing), "--host", "127.0.0.1", "--port", str(free_port())])
    assert res.returncode == 1
    assert "Invalid repository ID or local directory specified" in res.stderr
    assert "Could not detect config format" in res.stderr


def test_custom_code_without_trust_remote_code(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant())
    res = case.run(["--model", str(model), "--host", "127.0.0.1", "--port", str(free_port())])
    assert res.returncode == 1
    assert "contains custom code which must be executed" in res.stderr
    assert "`--trust-remote-code` flag in the CLI" in res.stderr


def test_busy_port(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res = case.run(case.serve_args(model, port))
    assert res.returncode == 1
    assert "Starting to load model" not in res.stderr  # the bind fails before the engine starts
    assert "sock.bind(addr)" in res.stderr
    assert res.stderr.rstrip().endswith("OSError: [Errno 98] Address already in use")


def test_not_enough_kv_cache_memory(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, "--gpu-memory-utilization", "0.80")
    assert s.wait_exit() == 1
    assert "To serve at least one request with the models's max seq len (131072)" in s.log()
    s = case.serve(model, "--gpu-memory-utilization", "0.70")
    assert s.wait_exit() == 1
    log = s.log()
    assert re.search(r"Available KV cache memory: -\d", log)
    assert "No available memory for the cache blocks" in log


def test_max_model_len_auto_fits_the_length_to_the_kv_cache(case: Case) -> None:
    """vllm#29431's --max-model-len auto (kimi.max_model_len: auto on vLLM >= 0.13): the length
    that failed at 0.80 above is reduced to what fits instead."""
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, "--gpu-memory-utilization", "0.80", "--max-model-len", "auto")
    log = s.wait_for("Maximum concurrency for")
    fitted = int(re.search(r"Auto-fit max_model_len: reduced to (\d+)", log).group(1))  # type: ignore[union-attr]
    assert 0 < fitted < 131072
    assert f"Maximum concurrency for {fitted:,} tokens per request: 1.00x" in log
    assert s.proc.poll() is None  # serving; the fixture ends it


# ------------------------------------------------------------------------------------------
# HTTP behaviour
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["flag", "env"])
def test_api_key_only_guards_v1(case: Case, how: str) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    if how == "flag":
        s = case.serve(model, "--api-key", "s3cret", tp=1)
    else:
        s = case.serve(model, tp=1, env={"VLLM_API_KEY": "s3cret"})
    s.wait_for(READY)
    case.note_shm(s)
    code, body = s.http("/v1/models")
    assert code == 401
    assert json.loads(body) == {"error": "Unauthorized"}
    assert s.http("/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert s.http("/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
    for path in ("/health", "/ping", "/version", "/metrics"):
        assert s.http(path)[0] == 200, path


# ------------------------------------------------------------------------------------------
# Process lifecycle, /dev/shm, state file
# ------------------------------------------------------------------------------------------


def test_sigterm_exits_0_and_cleans_up(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model)
    s.wait_for(READY)
    shm = case.note_shm(s)
    entry = s.state()
    assert shm and all(os.path.exists(p) for p in shm)
    assert any(os.path.basename(p).startswith("psm_") for p in shm)
    assert any(os.path.basename(p).startswith("sem.mp-") for p in shm)
    tree = [entry["engine_pid"], *entry["worker_pids"]]
    assert len(entry["worker_pids"]) == 8
    assert set(tree) <= set(descendants(s.proc.pid))
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    assert not any(os.path.exists(p) for p in shm)
    assert not case.state.exists()
    assert wait_gone(tree, timeout=3)
    log = s.log()
    assert "Shutting down FastAPI HTTP server." in log
    assert "Application shutdown complete." in log


def test_sigkill_leaves_shm_files_behind(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, tp=2)
    s.wait_for(READY)
    shm = case.note_shm(s)
    entry = s.state()
    tree = [entry["engine_pid"], *entry["worker_pids"]]
    s.proc.send_signal(signal.SIGKILL)
    assert s.wait_exit() == -signal.SIGKILL
    assert wait_gone(tree, timeout=3), "engine/workers must exit when the API server dies"
    assert shm and all(os.path.exists(p) for p in shm)  # leaked, like a real SIGKILL
    # The state file still names the dead server, but nvidia-smi no longer lists it.
    res = case.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"])
    assert res.returncode == 0 and res.stdout == ""


def test_crash_after_ready(case: Case) -> None:
    case.config(crash_after_seconds=1.2)
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, tp=2)
    s.wait_for(READY)
    case.note_shm(s)
    assert s.http("/health")[0] == 200
    s.wait_for("EngineDeadError")
    codes = set()
    while s.proc.poll() is None:
        try:
            codes.add(s.http("/health")[0])
        except OSError:
            break
        time.sleep(0.05)
    assert s.wait_exit() == 1
    assert 503 in codes
    log = s.log()
    assert "EngineCore encountered a fatal error." in log
    assert "crash_after_seconds=1.2" in log


def test_killing_a_worker_kills_the_server(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, tp=2)
    s.wait_for(READY)
    case.note_shm(s)
    worker = s.state()["worker_pids"][1]
    assert worker in descendants(s.proc.pid)
    os.kill(worker, signal.SIGKILL)
    assert s.wait_exit() == 1
    assert "Worker proc VllmWorker-1 died unexpectedly" in s.log()


def test_hang_goes_silent_until_sigterm(case: Case) -> None:
    case.config(hang=True)
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, tp=2)
    s.wait_for("Loading safetensors checkpoint shards:   0% Completed")
    shm = case.note_shm(s)
    size = len(s.log())
    time.sleep(1.0)
    assert s.proc.poll() is None
    assert len(s.log()) == size  # silent
    with pytest.raises(OSError):
        s.http("/health")  # bound but not listening: connection refused
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    assert not any(os.path.exists(p) for p in shm)


def test_second_server_on_the_same_gpus_sees_them_busy(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    first = case.serve(model)
    first.wait_for(READY)
    case.note_shm(first)
    second = case.serve(model)
    assert second.wait_exit() == 1
    log = second.log()
    # 97887 MiB total - 90056 MiB held by the first server = 7.65 GiB free < 0.92 * 95.59 GiB
    assert "Free memory on device cuda:0 (7.65/95.59 GiB) on startup is less than desired" in log
    assert "Engine core initialization failed" in log
    assert first.http("/health")[0] == 200


# ------------------------------------------------------------------------------------------
# nvidia-smi and vllm-version modes
# ------------------------------------------------------------------------------------------

GPU_QUERY = "index,name,compute_cap,memory.total,memory.used,driver_version,uuid,pci.bus_id"


def test_nvidia_smi_query_gpu(case: Case) -> None:
    res = case.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    assert res.returncode == 0
    rows = [line.split(", ") for line in res.stdout.splitlines()]
    assert len(rows) == 8
    for i, row in enumerate(rows):
        assert row[:6] == [
            str(i),
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "12.0",
            "97887",
            "0",
            "580.95.05",
        ]
        assert row[6].startswith("GPU-") and re.match(r"^00000000:[0-9A-F]{2}:00\.0$", row[7])
    res = case.run(["nvidia-smi", "--query-gpu=index,compute_cap,memory.total", "--format=csv"])
    lines = res.stdout.splitlines()
    assert lines[0] == "index, compute_cap, memory.total [MiB]"
    assert lines[1] == "0, 12.0, 97887 MiB"
    res = case.run(["nvidia-smi", "--query-gpu=index,bogus", "--format=csv"])
    assert res.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in res.stdout
    res = case.run(["nvidia-smi", "-L"])
    assert res.stdout.splitlines()[0].startswith(
        "GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-"
    )


def test_nvidia_smi_sees_the_live_server(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, tp=4)
    s.wait_for(READY)
    case.note_shm(s)
    res = case.run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"]
    )
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[0] == "pid, process_name, used_gpu_memory [MiB]"
    apps = [line.split(", ") for line in lines[1:]]
    assert len(apps) == 4
    tree = descendants(s.proc.pid)
    assert all(int(pid) in tree for pid, _, _ in apps)  # GPU pids belong to the server's tree
    assert [name for _, name, _ in apps] == [f"VLLM::Worker_TP{i}" for i in range(4)]
    assert {mem for _, _, mem in apps} == {"90056 MiB"}
    res = case.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"])
    used = [int(line.split(", ")[1]) for line in res.stdout.splitlines()]
    assert used == [90056] * 4 + [0] * 4
    case.config(compute_app_name="python")
    res = case.run(["nvidia-smi", "--query-compute-apps=process_name", "--format=csv,noheader"])
    assert res.stdout.splitlines() == [sys.executable] * 4


def test_vllm_version_and_config_beside_the_file(case: Case) -> None:
    assert case.run(["vllm-version"]).stdout == "0.17.1\n"
    run_dir = case.tmp / "run dir"
    run_dir.mkdir()
    script = run_dir / "kimi_standin.py"
    shutil.copy(case.script, script)
    (run_dir / "standin.json").write_text(json.dumps({"vllm_version": "0.18.0", "gpu_count": 2}))
    env = {k: v for k, v in os.environ.items() if k != "KIMI_STANDIN_CONFIG"}
    res = subprocess.run(
        [sys.executable, str(script), "vllm-version"], capture_output=True, text=True, env=env
    )
    assert res.stdout == "0.18.0\n"
    res = subprocess.run(
        [sys.executable, str(script), "nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.stdout == "0\n1\n"


def test_argv_echo_round_trips_awkward_paths(case: Case) -> None:
    model = write_model(
        case.tmp / "models" / "Kimi K2.5 \"q\" 'x' $HOME; rm -rf /\nnext",
        nvfp4_quant(kv_scheme=None),
    )
    s = case.serve(model, tp=1)
    log = s.wait_for(READY)
    case.note_shm(s)
    line = next(x for x in log.splitlines() if x.startswith("kimi-standin argv: "))
    argv = json.loads(line[len("kimi-standin argv: ") :])
    assert argv == case.serve_args(model, s.port, tp=1)
    assert argv[1] == str(model)
    models = json.loads(s.http("/v1/models")[1])["data"]
    assert models[0]["root"] == str(model)


def test_max_model_len_above_the_derived_maximum(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    args = case.serve_args(model, free_port(), tp=1)
    args[args.index("--max-model-len") + 1] = "300k"
    res = case.run(args)
    assert res.returncode == 1
    assert (
        "User-specified max_model_len (300000) is greater than the derived max_model_len"
        in res.stderr
    )
    assert "max_position_embeddings=262144" in res.stderr


def test_listen_failure_can_follow_startup_complete(case: Case) -> None:
    model = write_model(case.tmp / "model", nvfp4_quant(kv_scheme=None))
    s = case.serve(model, tp=1)
    s.wait_for("Resolved architecture")  # the stand-in has bound (not yet listening)
    with socket.socket() as thief:
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        thief.bind(("127.0.0.1", s.port))
        thief.listen(1)
        assert s.wait_exit() == 1
    log = s.log()
    assert log.index(READY) < log.index("[Errno 98] error while attempting to bind on address")


def test_a_sigterm_right_after_the_fork_waits_for_the_childs_own_handler() -> None:
    """An engine that fails at once SIGTERMs workers that may not have set their handler yet
    (a loaded machine): the signal must wait for it, not run the parent's copy and be lost
    (the stand-in then waited for its workers forever; CI 2026-12-06, 'timed out after 10.0')."""
    from standin.procs import fork_child

    seen: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda *_: seen.append(1))  # like the engine's flag

    def slow_worker() -> int:
        time.sleep(0.3)  # not yet scheduled when the SIGTERM comes
        signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        time.sleep(5.0)
        return 0

    try:
        pid = fork_child(slow_worker)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        if not done[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert done[0] == pid, "the child ran the parent's handler and kept sleeping"
        assert os.waitstatus_to_exitcode(done[1]) == 7
        assert seen == []  # the parent was not signalled; its mask is as it was
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.signal(signal.SIGTERM, old)
