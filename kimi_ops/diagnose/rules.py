"""The rule table RULES (all parts, in order) and its lookups."""

from __future__ import annotations

from dataclasses import replace

from kimi_ops.diagnose.model import Rule
from kimi_ops.diagnose.rules_device import DEVICE_RULES
from kimi_ops.diagnose.rules_engine import ENGINE_RULES
from kimi_ops.diagnose.rules_host import HOST_RULES
from kimi_ops.diagnose.rules_process import PROCESS_RULES
from kimi_ops.diagnose.rules_runtime import RUNTIME_RULES
from kimi_ops.diagnose.rules_setup import SETUP_RULES

RULES: tuple[Rule, ...] = (
    SETUP_RULES + DEVICE_RULES + RUNTIME_RULES + PROCESS_RULES + ENGINE_RULES + HOST_RULES
)
_RULE_LABEL: dict[str, str] = {r.name: r.label for r in RULES}
_RULE_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
#: ``fp8_type_unsupported_arch`` when the kernel that needs FP8 is the KV-cache write: the
#: FP8 is the KV cache's, and so is the fix. The same signature (``_decide`` swaps it in after
#: the table's rule matched), with the KV cache's label and texts.
_FP8_ARCH_KV_RULE = replace(
    _RULE_BY_NAME["fp8_type_unsupported_arch"],
    label="kv_cache_dtype_unsupported",
    hint="This GPU has no native FP8 ({fp8_type}), which the FP8 KV cache's kernel[[ "
    "{triton_kernel}]] needs (compute capability 8.9+). Serve with a 16-bit KV cache: drop "
    "--kv-cache-dtype fp8 from extra_args[[ (now: {extra_args})]] and run `fab "
    "patch-kv-config` if the checkpoint asks for an FP8 KV cache (kv_cache_scheme).",
    summary="FP8 KV cache ({fp8_type}) not supported on this GPU[[ (kernel {triton_kernel})]]",
)
#: ``no_kernel_image`` when the kernel without a build for this GPU is a quantized one (the
#: deepest traceback frame is in quantization / GEMM code: ``gptq_gemm``, ``scaled_mm``...):
#: the checkpoint's quantization has no kernel here, and the fix is another checkpoint format.
_NO_KERNEL_IMAGE_QUANT_RULE = replace(
    _RULE_BY_NAME["no_kernel_image"],
    label="quantization_unsupported",
    hint="The quantized kernel the checkpoint needs has no build for this GPU[[ {gpu}]][[ "
    "(sm_{sm})]] (no kernel image, in quantization code): serve a checkpoint in a format this "
    "GPU runs (unquantized, or a quantization its build lists), or use a vLLM build or GPU "
    "with a kernel for it.",
    summary="no quantized-kernel image for this GPU",
)
#: ``gpu_capability`` when the check that refused the GPU is in quantization code (a quantized
#: GEMM / MoE kernel limited to some architectures: "Block-quantized dense weights require
#: b12x on SM12x"): the checkpoint's quantization has no kernel on this GPU.
_GPU_CAPABILITY_QUANT_RULE = replace(
    _RULE_BY_NAME["gpu_capability"],
    label="quantization_unsupported",
    hint="The quantized kernel the checkpoint needs does not run on this GPU[[ (compute "
    "capability {compute_capability})]]: the check that refused it is in vLLM's quantization "
    "code. Serve a checkpoint in a format this GPU runs (unquantized, or another "
    "quantization), or use a GPU generation the kernel supports.",
    summary="quantized kernel not supported on this GPU[[ (compute capability "
    "{compute_capability})]]",
)
#: ``quant_dtype_mismatch`` on the CPU build: it casts float16 to bfloat16 itself, so no
#: --dtype gets the kernels the dtype they take; the quantization has no CPU path.
_QUANT_DTYPE_CPU_RULE = replace(
    _RULE_BY_NAME["quant_dtype_mismatch"],
    label="quantization_unsupported",
    hint="The {quantization} kernels take only {supported}, and the CPU build runs float16 "
    "models as bfloat16: {quantization} has no path on this CPU build. Serve an unquantized "
    "checkpoint (or a quantization the CPU build lists) on CPU, or this one on a GPU.",
    summary="{quantization} quantization has no CPU path (dtype {dtype} refused)",
)
#: ``cuda_runtime_error`` raised by torch's first questions to the device (its free memory,
#: setting it, initialising CUDA), not by a kernel: the device is not usable from this process
#: (a container without the GPU's device files, a driver in a bad state), an environment
#: problem, not a vLLM bug.
_DEVICE_QUERY_FAILED_RULE = replace(
    _RULE_BY_NAME["cuda_runtime_error"],
    label="unknown",
    hint="The GPU failed torch's first question to it (CUDA/HIP error: {cuda_error}, from "
    "mem_get_info / set_device / CUDA init), before any kernel ran: the device is not usable "
    "from this process. Check that the container gets the GPU's device files (NVIDIA: "
    "--gpus / the device plugin; AMD: /dev/kfd and /dev/dri with the video / render groups), "
    "that `nvidia-smi` / `rocm-smi` works on the host, and that the driver is healthy (a "
    "reset or reboot clears a GPU in a bad state).",
    summary="GPU not usable: CUDA/HIP error at the first device query ({cuda_error})",
)
