"""``fab demo``: the whole job on this machine, no GPU and no SSH, with the stand-in engine.

The stand-in EMULATES vLLM on eight RTX PRO 6000 Blackwell GPUs (compute capability 12.0) with
vLLM 0.17.1; it loads no model. The demo replays the seed's story: the checkpoint as shipped
(FP8 KV cache) fails on TRITON_MLA, the diagnosis names it, patch-kv-config fixes it, the next
deploy comes up and answers a chat request; then it stops the server and removes what it made.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from invoke import Context, task
from invoke.exceptions import Exit

from kimi_ops.checkpoint import checkpoint_files
from kimi_ops.preflight import build_plan
from kimi_ops.profile import Profile, load_profile
from kimi_ops.result import StepResult

from . import engine as real_engine
from . import steps
from .host import Host
from .report import Reporter
from .session import task_errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_model_dir(path: Path) -> None:
    path.mkdir(parents=True)
    for name, text in checkpoint_files().items():
        (path / name).write_text(text)


def demo_profile(tmp: Path, port: int, load_seconds: float) -> dict[str, Any]:
    return {
        "engine": "standin",
        "python": sys.executable,
        "model": str(tmp / "Kimi-K2.5-NVFP4"),
        "run_dir": str(tmp / "run"),
        "host": "127.0.0.1",
        "port": port,
        "shm_dir": str(tmp / "shm"),
        "startup_timeout": 60,
        "poll_interval": 0.5,
        "grace_seconds": 5,
        "secret_env": [],
        "standin": {"load_seconds": load_seconds},
    }


def chat_completion(
    port: int,
    model: str,
    content: str = "Hello!",
    *,
    max_tokens: int = 32,
    api_key: str | None = None,
    timeout: float = 10,
) -> dict[str, Any]:
    """POST one chat completion to 127.0.0.1:PORT; the server's JSON answer."""
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return dict(json.loads(resp.read()))


def chat(port: int, model: str, timeout: float = 10) -> str:
    data = chat_completion(port, model, timeout=timeout)
    return str(data["choices"][0]["message"]["content"])


def finish(tmp: Path, keep: bool, outcome: str, started: float) -> None:
    """Keep or remove the demo's directory; print the outcome and the time."""
    if keep:
        print(f"    kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"    removed {tmp}")
    print(f"\ndemo {outcome} in {time.monotonic() - started:.1f} s")


class _Demo:
    def __init__(self, c: Context, profile: Profile) -> None:
        self.rep = Reporter()
        self.profile = profile
        self.host = Host(c, profile)

    def title(self, text: str) -> None:
        print(f"\n=== {text}", flush=True)

    def step(self, result: StepResult) -> StepResult:
        return self.rep.result(result)

    def deploy(self, profile: Profile) -> StepResult | None:
        """The deploy pipeline; returns verify's result, or None if an earlier step failed."""
        h = self.host
        pre = steps.preflight(h, profile)
        if self.step(pre.result).failed:
            return None
        if profile.patch_kv_config is False:
            auto = build_plan(
                load_profile({**profile.to_dict(), "patch_kv_config": "auto"}), pre.facts
            )
            print(
                f"    (patch_kv_config is forced off to replay the seed; with the default "
                f"'auto' the plan says: patch={str(auto.patch_kv_config).lower()}: {auto.reason})"
            )
        # As in deploy, a live server elsewhere on this machine only skips the shm cleanup.
        cleanup = (steps.kill_stale(h, profile), steps.clean_shm(h, profile, refuse_fails=False))
        for result in cleanup:
            if self.step(result).failed:
                return None
        for result in (steps.upload_script(h, profile, plan=pre.plan), steps.launch(h, profile)):
            if self.step(result).failed:
                return result
        return self.step(steps.verify(h, profile, self.rep))


@task(
    auto_shortflags=False,
    help={
        "keep": "keep the temporary directory (model, run_dir, logs) for a look afterwards",
        "load_seconds": "how long the stand-in pretends to load shards (default 2)",
        "engine": "standin (default: emulated vLLM, ~10 s) or vllm (the real CPU build, ~2 min)",
    },
)
def demo(
    c: Context, keep: bool = False, load_seconds: float = 2.0, engine: str = "standin"
) -> None:
    """Run the whole job locally (no GPU, no SSH): the stand-in engine, or --engine vllm."""
    if getattr(getattr(c.config, "run", None), "dry", False):
        # Refused before anything is written: the demo's steps need the server it starts.
        raise Exit(DRY_REFUSAL, code=1)
    with task_errors("demo", Reporter()):  # a step that raises: its report, not a traceback
        run_demo(c, keep=keep, load_seconds=load_seconds, engine=engine)


#: ``fab --dry demo``: one line, exit 1, nothing written.
DRY_REFUSAL = (
    "error: demo: --dry is not supported (nothing was written): the demo creates its own "
    "throwaway checkpoint and server in a temporary directory, then removes them; run "
    "`fab demo`, or `fab --dry deploy` for a dry run of a real deployment"
)


def run_demo(c: Context, *, keep: bool, load_seconds: float, engine: str) -> None:
    if engine == "vllm":
        real_demo(c, keep=keep)
        return
    if engine != "standin":
        raise Exit(f"error: demo: --engine must be standin or vllm, got {engine!r}", code=1)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="kimi-ops-demo-"))
    port = free_port()
    config = demo_profile(tmp, port, float(load_seconds))
    seed = load_profile({**config, "patch_kv_config": False})
    d = _Demo(c, seed)
    outcome = "failed"
    try:
        make_model_dir(Path(seed.model))
        Path(seed.shm_dir).mkdir()
        print(f"kimi-ops demo: a throwaway Kimi-K2.5-NVFP4 checkpoint (FP8 KV cache) in {tmp}")
        print(
            "The stand-in engine EMULATES vLLM 0.17.1 on 8x RTX PRO 6000 Blackwell (SM120); "
            "it loads no model."
        )

        d.title("1. deploy the checkpoint as shipped (the seed's launch)")
        first = d.deploy(seed)
        if first is None or not first.failed:
            raise Exit("demo: the first deploy was expected to fail on the FP8 KV cache", code=1)
        label = first.data.get("diagnosis", {}).get("label")
        print(f"    diagnosis: {label} (the hint above says what to do)")

        d.title("2. patch-kv-config: remove the checkpoint's FP8 KV-cache settings")
        if d.step(steps.patch_kv_config(d.host, seed)).failed:
            raise Exit(code=1)

        d.title("3. deploy again (patch_kv_config: auto)")
        fixed = load_profile(config)
        second = d.deploy(fixed)
        if second is None or second.failed:
            raise Exit("demo: the second deploy did not become ready", code=1)

        d.title("4. one chat request through the port")
        print(
            f"    POST http://127.0.0.1:{port}/v1/chat/completions -> "
            f"{chat(port, fixed.served_model_name)!r}"
        )
        outcome = "ok"
    finally:
        d.title("5. stop the server and clean up")
        d.step(steps.kill_stale(d.host, seed, step="stop"))
        d.step(steps.clean_shm(d.host, seed, refuse_fails=False))
        finish(tmp, keep, outcome, started)


def real_demo(c: Context, *, keep: bool = False) -> None:
    """The demo on the real engine: vLLM's CPU build serves a tiny Llama (random weights) on
    127.0.0.1. A first deploy asks for more context than the model has and fails; the
    diagnosis names it; the fixed deploy answers a real chat completion; then it stops."""
    found = real_engine.installed_engine()
    if found is None:
        raise Exit(f"error: demo --engine vllm: {real_engine.missing_message()}", code=1)
    started = time.monotonic()
    print(f"kimi-ops demo on the real engine: vLLM {found.version} (CPU build) from {found.python}")
    models = real_engine.make_tiny_models(found)
    model = models / "tiny-llama"
    print(f"A tiny Llama with random weights ({model}): its answers are nonsense words.")
    tmp = Path(tempfile.mkdtemp(prefix="kimi-ops-demo-vllm-"))
    port = free_port()
    config = real_engine.cpu_profile(found, model, port=port, run_dir=tmp / "run")
    too_long = load_profile(
        {**config, "extra_args": ["--dtype", "bfloat16", "--max-model-len", "4096"]}
    )
    fixed = load_profile(config)
    d = _Demo(c, fixed)
    outcome = "failed"
    try:
        d.title("1. deploy with --max-model-len 4096 (the model has 512 positions)")
        first = d.deploy(too_long)
        if first is not None and not first.failed:
            raise Exit("demo: the first deploy was expected to fail (max_model_len)", code=1)
        if first is not None:  # None: the preflight refused it before launch
            diag = first.data.get("diagnosis", {})
            print(f"    diagnosis: {diag.get('label')}: {diag.get('hint')}")

        d.title("2. deploy with --max-model-len 512 (device auto: the CPU)")
        second = d.deploy(fixed)
        if second is None or second.failed:
            raise Exit("demo: the deploy did not become ready", code=1)

        d.title("3. one chat request through the port")
        answer = chat(port, fixed.served_model_name, timeout=120)
        print(f"    POST http://127.0.0.1:{port}/v1/chat/completions -> {answer!r}")
        outcome = "ok"
    finally:
        d.title("4. stop the server")
        d.step(steps.kill_stale(d.host, fixed, step="stop"))
        finish(tmp, keep, outcome, started)
