"""Rules, part 1b (within part 1, rules_setup): the KV-cache dtype asked for (FP8 and others)
has no kernel here."""

from __future__ import annotations

from kimi_ops.diagnose.hints import _KV_FIX
from kimi_ops.diagnose.model import REFUSES, Rule, _rule

KV_DTYPE_RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------- kv_cache_dtype_unsupported
    _rule(
        "fp8_kv_cache_unsupported",
        "kv_cache_dtype_unsupported",
        95,
        (
            "KV cache not",
            "kv cache not",
            "KV cache is not",
            "kv cache is not",
            "Triton MLA not",
            "FP8 KV cache",
            "fp8 KV cache",
            "only supports",
        ),
        [
            r"(?:(?P<backend>[A-Za-z][\w\-]*?)(?: V\d)? )?with FP8 KV cache (?:is )?no(?:t "
            r"(?:yet )?supported|t?$)",  # also cut short by the excerpt
            r"(?P<backend>FP8 Triton MLA) not yet supported",
            r"^[\w.]*(?:Error|Exception)\b.*(?i:(?:fp8|quantized|turboquant|nvfp4|fp4|int8|int4) "
            r"kv[ _-]?cache (?:is )?not (?:yet )?(?:supported|implemented)|does not support "
            r"(?:an? )?(?:fp8|quantized) kv[ _-]?cache)",
            r"^[\w.]*(?:Error|Exception)\b.*?(?:(?P<backend>[A-Za-z]\w*?)(?:Impl|Backend)? )?"
            r"(?i:only supports? (?:an? )?(?:unquantized|bf16|16-bit)\b[^;.]*kv[ _-]?cache)",
            # "Only support per-tensor scaling factor for fp8 KV cache" (the refusal names a
            # condition, then the FP8 KV cache it applies to)
            r"^[\w.]*(?:Error|Exception)\b.*(?i:\bonly supports?\b|\bnot supported\b|"
            r"\bunsupported\b|does not support).*(?i:\b(?:fp8|float8|quantized) kv[ _-]?cache)",
        ],
        "The attention backend[[ ({backend})]] cannot use the FP8 KV cache the checkpoint (or "
        "--kv-cache-dtype) asks for[[ on vLLM {vllm_version}]]. " + _KV_FIX,
        "FP8 KV cache not supported by [[{backend}||the attention backend]]",
    ),
    _rule(
        "no_backend_for_kv_dtype",
        "kv_cache_dtype_unsupported",
        94,
        ("_dtype not supported",),
        [
            r"(?:No valid attention backend|not valid for this configuration).*"
            r"\[[^\]]*'?kv_cache_dtype not supported'?\s*[,\]]",
            # the selector's reasons list re-indented one reason per line
            r"^\s*(?:\w+: \[\s*)?'?kv_cache_dtype not supported'?\s*,?\s*\]?,?$",
        ],
        "No attention backend accepts the KV-cache dtype[[ {kv_cache_dtype}]] on this GPU"
        "[[ (vLLM {vllm_version})]]. " + _KV_FIX,
        "no attention backend supports kv_cache_dtype[[ {kv_cache_dtype}]]",
        # another backend's KV-dtype reason while the KV cache is the default: not the cause
        exclude=[r"\bkv_cache_dtype=auto\b"],
        extract=[
            r"kv_cache_dtype=(?P<kv_cache_dtype>\w+)",
            r"(?P<backend>\w+): \[\s*'?kv_cache_dtype not supported'?\s*\]",
        ],
    ),
    _rule(
        "kv_cache_dtype_rejected",
        "kv_cache_dtype_unsupported",
        93,
        (
            "Unsupported data type of kv cache",
            "nsupported kv cache",
            "nsupported KV cache",
            "kv-cache is not supported",
            "kv_cache is not supported",
            "kv cache is not supported",
            "kv_data_type",
            "cache dtype",
            "fp8_ds_mla",
            "query and key must have the same dtype",
            "KV cache dtypes",
            "KV cache (got",
            "KV quantization",
        ),
        [
            r"Unsupported data type of kv cache:? '?(?P<kv_cache_dtype>\w+)",
            r"(?i:unsupported kv[ _-]?cache (?:data ?type|dtype)[: ]+'?(?P<kv_cache_dtype>\w+))",
            # "fp8_e5m2 kv-cache is not supported with fp8 checkpoints"
            r"^[\w.]*(?:Error|Exception)\b.*\b(?P<kv_cache_dtype>fp8\w*|nvfp4|fp4\w*|int8|int4) "
            r"kv[-_ ]cache is not supported",
            # FlashInfer's MLA plan(): an FP8 cache is handed over as uint8
            r"^[\w.]*(?:Error|Exception)\b.*\bkv_data_type (?:torch\.)?(?P<kv_dtype_torch>\w+) is "
            r"not supported",
            # a cache-dtype family refusing the dtype it was given ("Unknown TurboQuant cache
            # dtype: 'auto'")
            r"(?i:unknown|unsupported|invalid) (?:\w+ )?cache dtype:? "
            r"'?(?P<kv_cache_dtype>[\w\-]+)",
            # DeepSeek sparse MLA's FP8 cache layout refusing the model's shape (not a feature
            # that requires it: "Tiered MoE requires kv_cache_dtype=fp8_ds_mla" asks for it)
            r"(?i:must|not supported|invalid|error|failed).*\b(?<!kv_cache_dtype=)"
            r"(?P<kv_cache_dtype>fp8_ds_mla)\b",
            # FlashAttention's own check: the queries are 16-bit, so the keys (the KV cache)
            # came in another dtype
            r"query and key must have the same dtype",
            # a backend naming the KV-cache dtypes it takes, then the one it got (vLLM 0.32:
            # "b12x currently supports only auto, bfloat16, fp8, and fp8_e4m3 KV cache dtypes;
            # got nvfp4.", "... supports only fp8/fp8_e4m3 quantized KV cache (got
            # kv_cache_dtype=nvfp4)")
            r"^[\w.]*(?:Error|Exception)\b.*(?i:\bsupports? only\b|\bonly supports?\b)[^;.]*"
            r"KV cache(?: dtypes?)?\W+\(?got (?:kv_cache_dtype=)?'?(?P<kv_cache_dtype>[\w\-]+)",
            # ... or refusing KV quantization as such ("... does not support KV quantization")
            r"^[\w.]*(?:Error|Exception)\b.*\bdoes not support KV(?:[ -]cache)? quantization",
        ],
        "This vLLM rejects --kv-cache-dtype[[ {kv_cache_dtype}]]: drop the explicit "
        "--kv-cache-dtype from extra_args and run `fab patch-kv-config` to remove the "
        "checkpoint's FP8 KV-cache settings instead (or upgrade to vLLM >= 0.18 and keep FP8).",
        "KV-cache dtype[[ {kv_cache_dtype}]] not supported",
    ),
    _rule(
        "kv_dtype_backend_selection",
        "kv_cache_dtype_unsupported",
        88,
        ("get_attn_backend",),
        [r'^\s*File "[^"]*/vllm/[^"]*", line \d+, in _?\w*get_attn_backend\w*$'],
        "vLLM crashed choosing an attention backend for the requested KV-cache dtype"
        "[[ {kv_cache_dtype}]]: no backend supports it[[ on vLLM {vllm_version}]]. Use "
        "--kv-cache-dtype auto (or fp8 where the backend supports it) in the profile's "
        "extra_args[[ (now: {extra_args})]].",
        "no attention backend for kv_cache_dtype[[ {kv_cache_dtype}]]",
    ),
    _rule(
        "float8_kv_dtype_mismatch",
        "kv_cache_dtype_unsupported",
        86,
        ("Float8_", "float8_"),
        # a kernel met an FP8 tensor where it wants another dtype; it counts only when the
        # failure is in attention / KV-cache code or the KV cache was asked to be FP8 (see
        # _fp8_in_kv_cache): an FP8 *weight* the kernel cannot take is another story
        [r"^[\w.]*(?:Error|Exception)\b.*\b(?:torch\.)?(?P<fp8_type>[Ff]loat8_e[45]m[23]\w*)"],
        "The attention kernel[[ ({backend})]][[ of vLLM {vllm_version}]] cannot read an FP8 KV "
        "cache ({fp8_type})[[, which kv_cache_dtype={kv_cache_dtype} asks for]]: it expects a "
        "16-bit cache. " + _KV_FIX,
        "FP8 KV cache ({fp8_type}) not supported by [[{backend}||the attention kernel]]",
    ),
    _rule(
        "kv_dtype_missing_in_torch",
        "kv_cache_dtype_unsupported",
        86,
        ("has no attribute",),
        # the attention library looks the KV dtype up in torch, and this torch lacks it
        # (FlashInfer's plan(): getattr(torch, "nvfp4")); counts only when the failure is in
        # attention code or the KV cache was asked for it (see _fp8_in_kv_cache)
        [r"module 'torch' has no attribute '(?P<kv_cache_dtype>nvfp4|fp4\w*|float4\w*|fp8\w*)'"],
        "The attention kernel[[ ({backend})]][[ of vLLM {vllm_version}]] cannot use the KV-cache "
        "dtype {kv_cache_dtype}: this PyTorch / attention library does not know it. Serve with "
        "--kv-cache-dtype auto (or fp8) in the profile's extra_args[[ (now: {extra_args})]], or "
        "install the versions that support it.",
        "KV-cache dtype {kv_cache_dtype} not supported by [[{backend}||the attention kernel]]",
    ),
    _rule(
        "fp8_kv_kernel_build_failed",
        "kv_cache_dtype_unsupported",
        30,  # below every specific cause: it names the kernel, another error may be the cause
        ("dtype_kv_e4m3", "dtype_kv_e5m2"),
        # FlashInfer JIT-builds one kernel per KV dtype (``..._dtype_kv_e4m3_...``); an nvcc
        # error about that kernel (see _EXIT_RE) means the FP8 KV cache has no working kernel
        [
            r"(?i:instantiation of|error|failed).*dtype_kv_(?P<fp8_type>e4m3|e5m2)",
            r"dtype_kv_(?P<fp8_type>e4m3|e5m2).*(?i:\berror\b|failed)",
        ],
        "The FP8 KV cache's attention kernel (KV dtype {fp8_type}) failed to build for this "
        "GPU[[ on vLLM {vllm_version}]]: this backend[[ ({backend})]] has no working FP8-KV "
        "kernel here. Serve with --kv-cache-dtype auto (drop fp8 from the profile's extra_args"
        "[[, now: {extra_args}]]; `fab patch-kv-config` if the checkpoint asks for an FP8 KV "
        "cache), or pick another attention backend (--attention-backend).",
        "FP8 KV cache kernel ({fp8_type}) failed to build[[ ({backend})]]",
        weak=True,
    ),
    _rule(
        "kv_write_op_failed",
        "kv_cache_dtype_unsupported",
        84,
        ("ReshapeAndCache", "ReshapeCache", "reshape_and_cache"),
        # the op that writes keys and values into the KV cache failed (torch_npu's RuntimeError
        # naming the op that failed; an error in CUDA's reshape_and_cache kernel): it counts
        # only when the KV cache was asked to be FP8 (see _fp8_in_kv_cache), the dtype that op
        # then writes; an error line names it (not a kernel list or a profile)
        [
            r"(?:Error\b.*?|operator name is |failed in )\b(?P<kv_op>Reshape(?:And)?Cache\w*|"
            r"reshape_and_cache\w*)",
        ],
        "The op that writes the KV cache ({kv_op}) failed with the KV cache in "
        "{kv_cache_dtype}: this device's kernel for it does not take that dtype. " + _KV_FIX,
        "KV-cache write ({kv_op}) failed with a {kv_cache_dtype} KV cache",
    ),
    _rule(
        "kv_dtype_refused",
        "kv_cache_dtype_unsupported",
        21,  # above error_names_option: naming kv_cache_dtype is this refusal's own words
        ("Error", "Exception"),
        # an attention backend / platform refusing the KV cache's dtype in any words
        # ("FlashAttention does not support fp8_e5m2 kv-cache on this device", "FP8 KV cache
        # on CPU requires x86 with AVX-512 or AMX", "FlexAttention does not support quantized
        # kv-cache"): an exception naming the KV cache and a dtype, and refusing; the more
        # specific rules above outrank it. Not the selector's list (a kv_cache_dtype=auto
        # config there is another reason's), which no_backend_for_kv_dtype reads.
        [
            r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception): (?P<reason>"
            r"(?!.*(?:kv_cache_dtype=auto,|AttentionSelectorConfig|(?i:quantization ?strategy|"
            r"\bweights?\b)))"
            # the KV cache named, or the attention that reads it ("FP8 FlashAttention MLA not
            # yet supported": vLLM 0.10's FlashAttention-MLA refusing an fp8 KV cache)
            r"(?=.*(?i:kv[-_ ]?cache|attention\b|\bMLA\b))"
            r"(?=.*?\b(?P<kv_cache_dtype>(?i:fp8\w*|nvfp4|fp4|int8|int4|float8\w*|quantized))\b)"
            r"(?=.*(?:" + REFUSES + r"|(?i:is not valid|not compatible|incompatible))).+?)\.?$"
        ],
        "The attention backend or platform refused the KV-cache dtype[[ {kv_cache_dtype}]]"
        "[[ (vLLM {vllm_version})]]: {reason}. Serve a 16-bit KV cache: drop --kv-cache-dtype "
        "from the profile's extra_args[[ (now: {extra_args})]], and if the checkpoint itself "
        "asks for a quantized KV cache (kv_cache_scheme / kv_cache_quant_algo) run `fab "
        "patch-kv-config` to remove it; or use a backend / device the engine names for it.",
        "KV-cache dtype[[ {kv_cache_dtype}]] refused by the attention backend",
    ),
)
