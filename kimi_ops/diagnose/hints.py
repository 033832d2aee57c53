"""Hint texts no single rule owns: the KV-cache fixes, signal hints, backend names, templates."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kimi_ops.diagnose.model import SHELL_SIGNAL_WORDS_L10N

_KV_FIX = "{kv_fix}"  # filled in by _decide, depending on the vLLM version
_KV_FIX_OLD = (
    "Run `fab patch-kv-config` to remove the checkpoint's FP8 KV-cache settings "
    "(kv_cache_scheme / kv_cache_quant_algo) so vLLM keeps a bf16 KV cache, or upgrade to "
    "vLLM >= 0.18, whose TRITON_MLA backend supports an FP8 KV cache (twice the KV capacity)."
)
_KV_FIX_NEW = (
    "vLLM {vllm_version} supports an FP8 KV cache on TRITON_MLA, so select that backend "
    "(--attention-backend TRITON_MLA), or run `fab patch-kv-config` to remove the "
    "checkpoint's FP8 KV-cache settings (kv_cache_scheme / kv_cache_quant_algo)."
)
_KV_FIX_CPU = (
    "On CPU, MLA serves only a bf16 (unquantized) KV cache[[ ({backend})]]: drop "
    "--kv-cache-dtype fp8 from the profile's extra_args[[ (now: {extra_args})]], and if the "
    "checkpoint itself asks for an FP8 KV cache (kv_cache_scheme / kv_cache_quant_algo) run "
    "`fab patch-kv-config` to remove it. Non-MLA models keep FP8 on CPU."
)


def _render(template: str, values: Mapping[str, str]) -> str:
    """Fill ``{field}``; drop ``[[...]]`` parts with unknown fields (``[[a||b]]`` -> b)."""

    def known(part: str) -> bool:
        return all(values.get(f) for f in re.findall(r"\{(\w+)\}", part))

    def optional(m: re.Match[str]) -> str:
        first, _, alt = m.group(1).partition("||")
        return first if known(first) else alt

    filled = re.sub(r"\[\[(.*?)\]\]", optional, template, flags=re.S)
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1)) or "?", filled)


#: Attention-backend class / display names -> the ``--attention-backend`` names.
_BACKEND_NAMES: dict[str, str] = {
    "amxmla": "AMX_MLA",
    "tritonmla": "TRITON_MLA",
    "triton mla": "TRITON_MLA",
    "fp8 triton mla": "TRITON_MLA",
    "cutlassmla": "CUTLASS_MLA",
    "cutlass mla": "CUTLASS_MLA",
    "flashmla": "FLASHMLA",
    "flash mla": "FLASHMLA",
    "flashattnmla": "FLASH_ATTN_MLA",
    "flashinfermla": "FLASHINFER_MLA",
    "flashinfer mla": "FLASHINFER_MLA",
    "flashattention": "FLASH_ATTN",
    "flash attention": "FLASH_ATTN",
    "flashattention-2": "FLASH_ATTN",
    "flashinfer": "FLASHINFER",
    "xformers": "XFORMERS",
    "torch sdpa": "TORCH_SDPA",
    "triton": "TRITON_ATTN",
    "flexattention": "FLEX_ATTENTION",
}


def _backend_name(name: str) -> str:
    """``TritonMLA`` -> ``TRITON_MLA``; unknown names are returned unchanged."""
    return _BACKEND_NAMES.get(name.strip().lower(), name)


def _version_at_least(version: str, minimum: tuple[int, int]) -> bool:
    """``"0.18.1rc1"`` >= (0, 18)? False when the version is unknown or unparsable."""
    m = re.match(r"v?(\d+)\.(\d+)", version)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= minimum


#: Linux signal numbers (``exit code: -9``) and shell / faulthandler wordings.
_SIGNALS: dict[int, str] = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    5: "SIGTRAP",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    10: "SIGUSR1",
    11: "SIGSEGV",
    12: "SIGUSR2",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}
_SHELL_SIGNALS: dict[str, str] = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
    "Floating point exception": "SIGFPE",
    "Segfault": "SIGSEGV",
    "Killed": "SIGKILL",
    "terminated": "SIGTERM",  # vLLM's SIGTERM handler: KeyboardInterrupt("terminated")
    "Terminated": "SIGTERM",  # bash's job report
    "Stopping": "SIGTERM",  # systemd stopping the unit
    # zsh's own words (foreground "zsh: bus error  cmd", or its job report)
    "killed": "SIGKILL",
    "segmentation fault": "SIGSEGV",
    "bus error": "SIGBUS",
    "IOT instruction": "SIGABRT",
    "abort": "SIGABRT",
    "illegal hardware instruction": "SIGILL",
    "floating point exception": "SIGFPE",
    **SHELL_SIGNAL_WORDS_L10N,  # the same words in other languages
}
_SIGNAL_HINTS: dict[str, str] = {
    "SIGKILL": (
        "[[{killed_proc}||A vLLM process]] was killed with SIGKILL[[ ({signal_note})]]: "
        "kill -9 or the kernel's OOM killer (SIGKILL leaves no traceback). Check `dmesg | grep "
        "-i -E 'killed process|out of memory'` and the host's free RAM; if nobody killed it by "
        "hand, lower host-memory use (max_model_len / max_num_seqs; on CPU a smaller "
        "VLLM_CPU_KVCACHE_SPACE) and redeploy. vLLM may still exit with status 0: that is not "
        "success."
    ),
    "SIGILL": (
        "[[{killed_proc}||A vLLM process]] died of SIGILL: it ran a CPU instruction this host "
        "lacks. The vLLM/PyTorch build targets a newer ISA than the CPU has (compare the avx512 "
        "/ amx flags in /proc/cpuinfo), or, on vLLM's CPU build, --enforce-eager takes such a "
        "path: remove --enforce-eager from the profile's extra_args[[ (now: {extra_args})]] or "
        "install a build for this CPU."
    ),
    "SIGBUS": (
        "[[{killed_proc}||A vLLM process]] died of SIGBUS: usually shared memory ran out "
        "(/dev/shm too small or full of leaked segments). Run `fab clean-shm`, check `df -h "
        "/dev/shm` (docker: --ipc=host or a larger --shm-size), then redeploy."
    ),
    "SIGTERM": (
        "[[{killed_proc}||A vLLM process]] was stopped by {signal}[[ ({signal_note})]] from "
        "outside while the rest "
        "kept running (an operator, a supervisor, systemd or Kubernetes): find who sent it "
        "(`journalctl`, `kubectl describe pod`) and redeploy with `fab deploy`."
    ),
}
_SIGNAL_HINTS["SIGINT"] = _SIGNAL_HINTS["SIGHUP"] = _SIGNAL_HINTS["SIGTERM"]
_SIGNAL_HINT_CRASH = (
    "[[{killed_proc}||A vLLM process]] crashed in native code ({signal}): a kernel, driver or "
    "library mismatch. Check `dmesg`, the GPU driver and the vLLM / PyTorch versions; retry "
    "with --enforce-eager to rule out CUDA-graph / torch.compile bugs, then redeploy."
)


def _signal_facts(facts: dict[str, str]) -> None:
    """Set ``facts["signal"]`` from the groups a kill line gave (SIGKILL when none)."""
    sig = facts.get("signame")
    if not sig and facts.get("signum", "").isdigit():
        sig = _SIGNALS.get(int(facts["signum"]), "signal " + facts["signum"])
    if not sig and facts.get("exitcode", "").isdigit():  # docker / shell: 128 + signal
        sig = _SIGNALS.get(int(facts["exitcode"]) - 128)
    if not sig and facts.get("shell_signal"):
        sig = _SHELL_SIGNALS.get(facts["shell_signal"])
    if not sig and facts.get("slurm_cancel"):  # Slurm stops a cancelled job's tasks so
        sig = "SIGTERM"
        facts.setdefault("signal_note", "Slurm: " + facts["slurm_cancel"])
    if not sig and facts.get("hsa_fault"):  # the ROCm runtime aborts after a GPU fault
        sig = "SIGABRT"
        facts.setdefault("signal_note", facts["hsa_fault"])
    if not sig:  # "Killed", or a process gone without a word: only SIGKILL is that silent
        sig = "SIGKILL"
        if facts.get("signature") == "engine_vanished":
            facts.setdefault("killed_proc", "EngineCore")
            facts["signal_inferred"] = "true"
            facts["signal_note"] = "inferred: it exited without an exception or a stop request"
    if facts.get("killer"):  # Ray's memory monitor named itself
        facts.setdefault("signal_note", "Ray's memory monitor killed it: the host ran out of RAM")
    facts["signal"] = sig


def _signal_hint(signal: str) -> str:
    return _SIGNAL_HINTS.get(signal, _SIGNAL_HINT_CRASH)
