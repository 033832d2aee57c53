"""MLA attention backends on CUDA: which serve a compute capability, vLLM version and KV dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .kv import kv_family
from .versions import _ANY, as_version, in_range


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
