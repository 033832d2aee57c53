"""Rules, part 2: the device or environment cannot run it (unsupported GPU / accelerator,
quantization; unknown: no device, a broken install)."""

from __future__ import annotations

from kimi_ops.diagnose.model import REFUSES, Rule, _rule

#: Not a kernel that refuses another setting than the device or the checkpoint's scheme ("..
#: does not support the deployment configuration since kernel does not support batch
#: invariance / parallel config ..."): that fix is the setting, not the quantization.
_NOT_ANOTHER_SETTING = r"(?!.*since kernel does not support (?!current device|quantization scheme))"

DEVICE_RULES: tuple[Rule, ...] = (
    # ------------------------------------------------------------ unsupported_gpu
    _rule(
        "no_kernel_image",
        "unsupported_gpu",
        80,
        (
            "no kernel image",
            "NoKernelImage",
            "invalid device function",
            "InvalidDeviceFunction",
            "Unsupported arch",
            "Unsupported GPU arch",
            "support .target sm_",
            "supported arch was not in",
            "not supported on .target",
            "No supported CUDA arch",
            "hipErrorNoBinaryForGpu",
            "kernel image is invalid",
            "INVALID_IMAGE",
            "InvalidKernelImage",
            "does not support opType",
            "invalid kernel file",
            "InvalidKernelFile",
            "expects arch to be one of",
            "of bin package does not match",
        ),
        [
            r"no kernel image is available\b",  # ("... for execution on the device")
            r"cudaErrorNoKernelImageForDevice",
            r"(?:HIP|CUDA) error: invalid device function|hipErrorInvalidDeviceFunction",
            # the same fact from a kernel library or a compiler: DeepGEMM's / CUTLASS's
            # "Unsupported architecture", ptxas unable to target the GPU, an extension built
            # without the GPU's arch ("a supported arch was not in the list of target arches")
            r"(?:Error|error|Assertion)\b.*\bUnsupported (?:GPU )?arch(?:itecture)?\b",
            r"does not support \.target (?P<sm_target>sm_\d+\w*)",
            r"not supported on \.target '?(?P<sm_target>sm_\d+\w*)",  # ptxas: a PTX feature
            # FlashInfer's JIT: none of the CUDA archs it builds for is this GPU's
            r"No supported CUDA architectures? found for major versions? \[?(?P<major>[\d, ]+)",
            r"supported arch was not in the list of target arch",
            # ROCm: no code object for this GPU's gfx target; CUDA: a kernel image built for
            # another GPU (Triton's loader, the driver API); Ascend: no op kernel for the SoC
            r"hipErrorNoBinaryForGpu|Unable to find code object for all current devices",
            # ... or one whose code object does not fit this GPU's ISA (a gfx target the
            # build lacks: "HIP error: invalid kernel file" on Strix Halo's gfx1151)
            r"HIP error: invalid kernel file|hipErrorInvalidKernelFile",
            # CUTLASS's Python DSL (CuTe) building a kernel for an arch it does not list
            # ("OpError: expects arch to be one of ['sm_120a'], but got Arch.sm_121a")
            r"expects arch to be one of \[[^\]]*\], but got Arch\.(?P<sm_target>sm_\d+\w*)",
            r"device kernel image is invalid|CUDA_ERROR_INVALID_IMAGE|cudaErrorInvalidKernelImage",
            r"socVersion \[(?P<gpu>\w+)\] does not support opType \[\w+\]",
            # ... or a custom-op package built for another SoC (vllm-ascend's ops on a 310P)
            r"socversion \w+ of bin package does not match the current device socver\w* "
            r"(?P<gpu>\w+)",
        ],
        "The PyTorch/vLLM build has no GPU kernels for this GPU[[ {gpu}]][[ (sm_{sm})]]: "
        "install a build compiled for its compute capability (Blackwell sm_120 needs CUDA "
        "12.8+ builds of PyTorch and vLLM), or use a vLLM image/wheel that lists the "
        "architecture.",
        "no CUDA kernel image for this GPU",
    ),
    _rule(
        "bfloat16_unsupported",
        "unsupported_gpu",
        82,
        ("Bfloat16 is only supported", "_check_if_gpu_supports_dtype"),
        [
            r"Bfloat16 is only supported on GPUs with compute capability of at least "
            r"(?P<min_capability>\d+(?:\.\d+)?)",
            # a traceback through vLLM's dtype check (its message cut off): the check raises
            # only this error. A frame in it, or the call as a traceback's source line (the
            # deepest, when the excerpt cuts there), not IPython's numbered context lines
            # around the failing one ("    168     _check_if_gpu_supports_dtype(...)")
            r", in _check_if_gpu_supports_dtype\b",
            r"^\s*(?:-+>\s*\d+\s+)?_check_if_gpu_supports_dtype\(",
        ],
        "The GPU[[ {gpu}]][[ (compute capability {compute_capability})]] has no bfloat16 "
        "support[[ (needs >= {min_capability})]]: add `--dtype half` to the profile's "
        "extra_args, or use an Ampere or newer GPU.",
        "GPU[[ {gpu}]] cannot run bfloat16",
        extract=[
            r"Your (?P<gpu>.+?) GPU has compute capability (?P<compute_capability>\d+(?:\.\d+)?)"
        ],
    ),
    _rule(
        "quantization_needs_newer_gpu",
        "quantization_unsupported",
        85,
        (
            "the current GPU",
            "not supported on GPUs with",
            "does not support weight_bits",
            "Only types = []",
            "_check_scheme_supported",
            "_scaled_mm is only supported",
        ),
        [
            r"(?i:quantization method|quantization scheme) ?(?P<quantization>[\w\-]*) is not "
            r"supported for\W*the current GPU",
            r"(?P<quantization>[\w\-]+(?: [\w\-]+)?) (?i:quantization) is not supported on GPUs "
            r"with",
            r"(?P<quantization>\w*[Mm]arlin\w*) does not support weight_bits",
            r"Only types = \[\] are supported",
            # a traceback through compressed-tensors' capability check (message cut off): it
            # raises only "Quantization scheme is not supported for the current GPU"
            r"\b_check_scheme_supported\b",
            # torch's own FP8 GEMM refusing the GPU (FP8 weights run through it)
            r"_scaled_mm is only supported on \w+ devices with compute "
            r"capability >= ?(?P<min_capability>\d+(?:\.\d+)?)",
        ],
        "The checkpoint's quantization[[ ({quantization})]][[ ({fp8_type} kernels)]] has no "
        "kernel for this GPU[[: minimum compute capability {min_capability}]][[, this GPU has "
        "{compute_capability}]]. Use a checkpoint quantized for this GPU (e.g. AWQ/GPTQ int4 or "
        "unquantized on older GPUs; FP8 needs compute capability 8.9+, NVFP4 a Blackwell GPU) "
        "or a newer GPU.",
        "quantization[[ {quantization}]][[ ({fp8_type})]] not supported on this GPU",
        extract=[
            r"Min(?:imum)? capability:? =? ?(?P<min_capability>\d+(?:\.\d+)?)",
            r"min_capability = (?P<min_capability>\d+)",
            r"Current (?:compute )?capability:? (?P<compute_capability>\d+(?:\.\d+)?)",
        ],
    ),
    _rule(
        "gpu_capability",
        "unsupported_gpu",
        80,
        (
            "compute capability",
            "Compute capability",
            "device capability",
            "GPUs or newer",
            "on CUDA arch",
            "gpu-name",
            "capability not supported",
            "does not support this kernel",
            "nsupported GPU",
            "this GPU",
            "current GPU",
            "requires sm",
            "requires SM",
            "requires an SM",
            "requires CUDA SM",
            "Unknown GPU architecture",
            "CUDA capability",
            "no longer supports this GPU",
            "too old to be supported",
            "only supports devices of CUDA",
            "only supported on Hopper",
            "only supported on Blackwell",
            "tpu_version",
            "Required aspect",
            "is_fa_version_supported",
            "on SM",
            "on sm_",
        ),
        [
            r"GPUs? with compute capability (?:below|less than|<) ?[\d.]+ (?:are|is) not supported",
            # torch.compile's Triton backend (inductor) refuses GPUs below its minimum
            r"too old to be supported by the triton GPU compiler",
            r"Triton only supports devices of CUDA [Cc]apability",
            # an attention backend's own reason, e.g. "FlashMLA Sparse is only supported on
            # Hopper and Blackwell DC devices"
            r"is only supported on (?:Hopper|Blackwell)\b",
            # a kernel without support for this accelerator generation / feature
            r"(?i:unsupported (?:tpu|gpu|xpu|npu|device)[ _]?(?:version|generation|arch\w*))",
            r"Required aspect \w+ is not supported on the devic",  # SYCL (Intel XPU)
            # V1's FlashAttention backend: no FlashAttention build for this GPU (pre-Ampere)
            r"\bassert is_fa_version_supported\(",
            r"No compiled \w+ for a compute capability",
            r"current device does not support this kernel",
            # a kernel library naming the oldest generation it runs on (flash-attn's "Ampere",
            # ROCm's "AMD MI200")
            r"\bonly supports (?:[\w-]+ ){1,3}GPUs or newer",
            r"No valid attention backend.*\[\s*'?compute capability not supported'?\s*\]",
            # the selector's reasons list re-indented one reason per line
            r"^\s*(?:\w+: \[\s*)?'?compute capability not supported'?\s*,?\s*\]?,?$",
            # ... or one backend's reasons on one line, among them the GPU's capability
            r"^\s*'?[A-Z][A-Z0-9_]+'?: \[.*\bcompute capability not supported\b",
            # PyTorch's import-time check: no kernels of this build run on the GPU
            r"PyTorch no longer supports this GPU because it is too old",
            r"is not supported on CUDA arch",
            r"Value 'sm_(?P<sm>\d+a?)' is not defined for option 'gpu-name'",
            # a kernel library's list of the GPUs it knows (ROCm's aiter: "gfx1101")
            r"Unknown GPU architecture:? '?(?P<gpu>\w+)'?\.? Supported architectures",
            r"^[\w.]*(?:Error|Exception)\b.*(?i:compute capability\s+\S+\s+(?:is\s+)?not\s+"
            r"supported|unsupported (?:GPU|compute capability|CUDA arch)|not supported on "
            r"(?:GPUs? with (?:compute|CUDA) capability|this GPU|the current GPU)|requires "
            r"(?:an? )?(?:GPU with )?(?:CUDA )?(?:compute capability|CUDA capability|sm_?\d+|"
            r"SM ?\d+)"
            # a kernel or backend limited to some architectures ("only supported on SM89+",
            # "which FlashMLA decodes only on SM100", "require b12x on SM12x": vLLM 0.32)
            r"|\bonly (?:supported |available |runs? )?on (?:SM ?|sm_?)\d"
            r"|\brequires? [\w-]+ on (?:SM ?|sm_?)\d)",
        ],
        "The GPU[[ {gpu}]][[ (compute capability {compute_capability})]] is not supported by "
        "this build or feature. Use a PyTorch/vLLM build compiled for this architecture "
        "(Blackwell sm_120 needs CUDA 12.8+ builds), or avoid what the GPU lacks (another "
        "dtype, quantization or attention backend).",
        "GPU not supported[[ (compute capability {compute_capability})]]",
        extract=[
            r"Current (?:compute )?capability:? (?P<compute_capability>\d+(?:\.\d+)?)",
            r"CUDA device capability: (?P<compute_capability>\d+)",
            r"compute capability:? (?P<compute_capability>\d+(?:\.\d+)?)",
        ],
    ),
    _rule(
        "no_attention_backend",
        "unsupported_gpu",
        74,
        ("No valid attention backend",),
        # the selector found no backend for this model's attention (MLA, sparse, head size,
        # sinks) on this device; a KV-cache dtype among its reasons is no_backend_for_kv_dtype's
        [r"No valid attention backend found for (?P<platform>\w+)"],
        "No attention backend of this vLLM[[ ({vllm_version})]] runs this model's attention on "
        "this[[ {platform}]] device (MLA, sparse attention and attention sinks need specific "
        "GPU generations; the error lists each backend's reasons). Use a GPU the model's "
        "attention has a backend for, a vLLM version that adds one, or another model.",
        "no attention backend for this model on this device",
    ),
    _rule(
        "torch_arch_incompatible",
        "unsupported_gpu",
        75,
        ("is not compatible with the current PyTorch",),
        [
            r"(?:(?P<gpu>\S.*?) with )?CUDA capability sm_(?P<sm>\d+a?) is not compatible with "
            r"the current PyTorch installation",
            r"is not compatible with the current PyTorch installation",
        ],
        "PyTorch in this environment was not built for this GPU[[ ({gpu}, sm_{sm})]]: install "
        "a PyTorch/vLLM build that supports it (Blackwell sm_120 needs CUDA 12.8+ builds, "
        "e.g. vLLM's cu128/cu129 wheels or images).",
        "PyTorch build does not support this GPU[[ (sm_{sm})]]",
        weak=True,
    ),
    # ---------------------------------------------------- quantization_unsupported
    _rule(
        "quantization_no_kernel",
        "quantization_unsupported",
        84,
        (
            "Failed to find a kernel",
            "quantization is currently not supported",
            "quantization is not supported",
            "compatible scheme was found",
            "KeyError: <PlatformEnum.",
            "with arguments from the",
            "for quantization method",
            "-bit weight quantization is supported",
            "-bit quantization is supported",
            "-bit weight quantization are supported",
            "not supported on CPU",
            "not supported for CPU",
            "MoE backend",
            "does not support current device",
            "object has no attribute '",
            "/quantization/",
            "is_checkpoint_",
        ),
        [
            # a CUTLASS kernel of vLLM's quantized GEMMs failing inside (a block-scaled FP8 GEMM
            # on an architecture it was not built or tuned for: "cutlass_gemm_caller, /.../csrc/
            # .../quantization/w8a8/cutlass/c3x/cutlass_gemm_caller.cuh:62, Error Internal")
            r"\b(?P<quant_op>cutlass\w*), \S*/csrc/\S*quantization/\S*\.cuh?:\d+, Error ",
            r"Failed to find a kernel that can implement the (?P<quantization>[\w\-]+) "
            r"(?:linear|MoE|moe)",
            r"(?P<quantization>[\w\-]+) quantization is (?:currently )?not supported "
            r"(?:in|on|for|by) (?P<platform>[\w\-]+)",
            # a quantized-kernel table without an entry for this platform (XPU, HPU, ...):
            # "KeyError: <PlatformEnum.XPU: 4>" from choose_scaled_mm_linear_kernel
            r"^KeyError: <PlatformEnum\.(?P<platform>\w+): \d+>",
            # compressed-tensors found no scheme that runs the checkpoint here
            r"No (?P<quantization>compressed-tensors) compatible scheme was found",
            # a quantized-MoE kernel backend refusing the device or the checkpoint's scheme
            # ("NvFp4 MoE backend 'FLASHINFER_CUTLASS' does not support the deployment
            # configuration since kernel does not support current device"); not when the reason
            # is another setting (batch invariance, the parallel config): that fix is the setting
            _NOT_ANOTHER_SETTING
            + r"(?i:(?P<quantization>nvfp4|mxfp4|fp8|fp4|w4a\d+|w8a8|int4|int8|awq|gptq|marlin)\w*)"
            r" MoE backend\b.*(?:does not support|not supported)",
            r"No (?i:(?P<quantization>nvfp4|mxfp4|fp8|fp4|w4a\d+|w8a8|int4|int8)\w*) MoE backend "
            r"supports",
            r"kernel does not support current device",
            # a platform's path that takes only online quantization asserting the checkpoint is
            # not pre-quantized ("assert not quant_config.is_checkpoint_fp8_serialized")
            r"^(?:[\w.]+\.)?AssertionError: assert not (?:self\.)?(?:\w+\.)?is_checkpoint_"
            r"(?P<quantization>\w+?)_serialized\b",
            # the build has no kernel for the quantized GEMM / repack / dequant op on this
            # device ("'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'")
            r"'_C' object has no attribute '(?P<quant_op>\w*(?i:gemm|marlin|awq|gptq|fp8|fp4|"
            r"quant|scaled_mm|w8a8|wna16|ggml|gguf|int8|int4|cutlass|machete|exllama)\w*)",
            r"Could not run '\w*::\w*(?i:quant|fp8|fp4|marlin|gptq|awq)\w*' with arguments from "
            r"the '(?P<platform>\w+)' backend",
            r"(?<!float16 )(?<!float32 )is not supported for quantization method "
            r"(?P<quantization>[\w\-]+)",
            # "only 4-bit", "only 2/3/4/8-bit", "only 6-bit or 8-bit weight quantization are"
            r"only (?:\d+(?:-bit)?(?:/| or |, ))*(?P<bits>\d+)-bit (?:weight )?quantization "
            r"(?:is|are) supported for (?P<quantization>[\w\-]+)",
            r"^[\w.]*(?:Error|Exception)\b.*?(?i:quantiz\w*)\b.*?(?P<platform>CPU|cpu) is not "
            r"supported|^[\w.]*(?:Error|Exception)\b.*?(?i:quantiz\w*).*not supported (?:on|for) "
            r"(?P<platform2>CPU|cpu)",
        ],
        "No kernel for the checkpoint's quantization[[ ({quantization})]] on this "
        "[[{platform}||device]][[ (vLLM {vllm_version})]][[ (this build has no {quant_op} op)]]: "
        "serve a checkpoint in a format this "
        "device runs (on CPU: bf16, or a quantization the CPU build lists, e.g. AWQ/GPTQ "
        "int4 or W8A8 int8; NVFP4 needs a Blackwell GPU), or use hardware and a vLLM build "
        "with a kernel for it.",
        "quantization[[ {quantization}]] not supported on [[{platform}||this device]]"
        "[[ (no {quant_op} kernel)]]",
        exclude=[r"(?i:compute capability|capability[:<>])"],  # quantization_needs_newer_gpu
    ),
    _rule(
        "quant_dtype_mismatch",
        "bad_argument",
        85,
        ("for quantization method",),
        # the model dtype asked for (or the checkpoint's default) is not one the quantized
        # kernels take: the fix is --dtype, not another checkpoint
        [
            r"(?:torch\.)?(?P<dtype>bfloat16|float16|float32) is not supported for quantization "
            r"method (?P<quantization>[\w\-]+)\. Supported dtypes: (?P<supported>\[[^\]]*\])"
        ],
        "The {quantization} kernels do not take the model dtype {dtype} (they take "
        "{supported}): set --dtype in the profile's extra_args to one of those (`--dtype half` "
        "for float16).",
        "dtype {dtype} not supported by {quantization} quantization",
    ),
    _rule(
        "quant_scheme_refused",
        "quantization_unsupported",
        18,
        ("Error",),
        # vLLM's quantization code refusing the checkpoint's scheme on this device or build,
        # in any of its many words ("MXFP4 weight + INT8 activation is not supported", "Marlin
        # W4A8-FP8 only support SM89 or SM12x device", "AutoAWQMoEMethod only supports 4bit
        # now"): an exception naming a quantization format and refusing it. Not the KV cache's
        # (a dtype of its own), not attention's, not a missing / outdated package (unknown),
        # not a shape that the tensor-parallel split does not divide (a size to change).
        [
            r"^\s*(?:[\w.]+\.)?(?:Value|NotImplemented|Runtime|Assertion)Error: "
            r"(?!.*(?i:kv.?cache|attention|\battn|install|outdated|divisible|with architecture))"
            + _NOT_ANOTHER_SETTING
            # the format may carry a prefix ("ptpc_fp8")
            + r"(?=.*?(?:\b|(?<=[a-z])(?=[A-Z]))(?P<quantization>(?:[a-z]+_)?(?i:nvfp4|mxfp4|"
            r"mxfp6|mxfp8|fp8|fp4|int4|int8|w4a8|w4a16|w8a8|w8a16|awq|gptq|marlin|machete|gguf|"
            r"bitsandbytes|compressed[-_ ]tensors|quark|modelopt|exl2|hqq|aqlm|squeezellm))\w*)"
            r"(?=.*(?:" + REFUSES + r"|(?i:no (?:\w+ )*(?:kernel|scheme|backend)s? (?:was |were )?"
            r"found)))"
        ],
        "vLLM's quantization code refused the checkpoint's scheme ({quantization}) here: "
        "serve a checkpoint in a format this device and vLLM version run (unquantized, or a "
        "quantization the build lists for this GPU / CPU), or use the hardware and vLLM "
        "version the checkpoint was made for.",
        "quantization {quantization} refused here",
    ),
    _rule(
        "model_quantization_unsupported",
        "quantization_unsupported",
        84,
        ("quantization yet", "quantization is not supported for"),
        [
            r"(?:[Mm]odel|[Aa]rchitecture) (?P<model_class>\w+) does not support "
            r"(?P<quantization>[\w\-]+) quantization yet",
            r"(?P<quantization>[\w\-]+) quantization is not supported for (?P<model_class>\w+"
            r"For\w+)",
        ],
        "vLLM's implementation of this model[[ ({model_class})]] does not support "
        "{quantization} quantization[[ in vLLM {vllm_version}]]: serve a checkpoint in another "
        "format (unquantized, or a quantization the model lists), or a vLLM version that adds it.",
        "{quantization} quantization not supported for this model[[ ({model_class})]]",
    ),
    _rule(
        "fp8_type_unsupported_arch",
        "quantization_unsupported",
        83,
        (
            "not supported in this architecture",
            "data type is not supported on CUDA arch",
            "not supported (only '",
        ),
        [
            r"type (?P<fp8_type>fp8\w+) not supported in this architecture",
            # Triton on ROCm: "type fp8e4nv not supported (only 'fp8e5')"
            r"type (?P<fp8_type>fp8\w+) not supported \(only '",
            # Triton < 3.x: an assertion in its type conversion
            r"(?P<fp8_type>fp8\w+) data type is not supported on CUDA arch",
        ],
        "This GPU has no native FP8 ({fp8_type}), which the Triton kernel[[ {triton_kernel}]] "
        "needs: FP8 compute needs compute capability 8.9+ (Ada, Hopper, Blackwell). Use a "
        "checkpoint that is not FP8-quantized (bf16, AWQ/GPTQ int4) on this GPU, or a newer GPU.",
        "FP8 ({fp8_type}) not supported on this GPU[[ (kernel {triton_kernel})]]",
    ),
    # ------------------------------------ unknown: no usable device (the environment)
    _rule(
        "no_gpu_platform",
        "unknown",
        3,
        (
            "UnspecifiedPlatform",
            "Failed to infer device type",
            "No supported device detected",
            "Device string must not be empty",
            "Unable to initialize backend",
        ),
        [
            r"No platform detected, vLLM is running on UnspecifiedPlatform",
            r"Failed to infer device type",
            r"No supported device detected",  # vLLM <= 0.2's DeviceConfig
            # DeviceConfig with no platform: torch.device("") (vLLM ~0.8)
            r"Device string must not be empty",
            # JAX on a TPU VM that sees no chip
            r"Unable to initialize backend '(?P<backend>\w+)': .*\bNo \w+ devices found",
        ],
        "vLLM found no usable accelerator platform (UnspecifiedPlatform)[[, backend {backend}]]: "
        "the vLLM install (or its platform plugin's venv) is broken or not active, or no "
        "GPU/TPU and driver is visible to the process. Check `pip show vllm`, `python -c "
        "'import torch; print(torch.cuda.is_available())'` and `nvidia-smi` on the host; "
        "reinstall vLLM (and its plugin) if needed.",
        "vLLM detected no GPU platform",
    ),
    _rule(
        "ray_node_no_device",
        "unknown",
        3,
        ("Current node has no",),
        # vLLM's Ray placement (ray_utils.initialize_ray_cluster, 0.4 .. 0.1x): the Ray node
        # the engine starts on registers none of the accelerator resource it asks for
        [r"Current node has no (?P<device>\w+) available"],
        "Ray's node where the engine starts lists no {device} resource, so vLLM cannot place "
        "its workers: start Ray on that node with the accelerators visible and registered "
        "under the name vLLM asks for (`ray start --num-gpus N`, or the platform's resource, "
        "e.g. NPU), and run the server on a node of the Ray cluster that has them.",
        "Ray node has no {device} for the engine",
    ),
    _rule(
        "gpu_driver_problem",
        "unknown",
        3,
        (
            "driver version is insufficient",
            "driver on your system is too old",
            "Found no NVIDIA driver",
            "GPUs are available",
            "forward compatibility was attempted",
            "cudaGetDeviceCount",
            "NVMLError_",
            "cudaErrorInsufficientDriver",
            "CUDA driver initialization failed",
            "unsupported toolchain",
            "cudaErrorUnsupportedPtxVersion",
            "CUDA-capable device is detected",
            "cuda driver combination",
            "system not yet initialized",
        ),
        [
            r"CUDA driver version is insufficient",
            r"NVIDIA driver on your system is too old",
            r"Found no NVIDIA driver",
            r"No (?:CUDA|HIP|XPU) GPUs are available",
            r"forward compatibility was attempted on non supported HW",
            # torch asking the driver how many GPUs there are and getting an error (802: the
            # fabric manager of an NVSwitch host not running; 999: the driver in a bad state)
            # (torch's warning of the same words, and platform detection's debug lines, are no
            # failure: on a CPU / NPU host they are expected)
            r"^(?:[\w.]+\.)?RuntimeError: Unexpected error from cudaGetDeviceCount\(\)",
            # no NVIDIA driver library (NVML) in the container / host, raised
            r"^(?:[\w.]+\.)?NVMLError_(?:LibraryNotFound|DriverNotLoaded)\b",
            r"cudaErrorInsufficientDriver",
            r"CUDA driver initialization failed, you might not have a CUDA gpu",
            # the driver is older than the compiler that built the kernels' PTX
            r"provided PTX was compiled with an unsupported toolchain",
            # the CUDA runtime's own strings (cudaGetErrorString): no device, a driver whose
            # kernel module and user library differ, a fabric manager not yet up (NVSwitch)
            r"no CUDA-capable device is detected",
            r"unsupported display driver / cuda driver combination",
            r"CUDA error: system not yet initialized",
            r"cudaErrorUnsupportedPtxVersion",
        ],
        "The GPU is not usable from this process: the NVIDIA driver is missing or older than "
        "the CUDA version of this PyTorch/vLLM build, or no GPU is visible "
        "(CUDA_VISIBLE_DEVICES, docker --gpus). Check `nvidia-smi` on the host and pick a "
        "vLLM build whose CUDA version the driver supports.",
        "GPU/driver not usable",
    ),
    _rule(
        "cuda_toolkit_missing",
        "unknown",
        3,
        ("Could not find nvcc", "CUDA_HOME environment variable is not set"),
        # a JIT build (FlashInfer, DeepGEMM, torch extensions) needs the CUDA toolkit
        [
            r"Could not find nvcc\b",
            r"CUDA_HOME environment variable is not set",
        ],
        "A kernel is compiled at startup (FlashInfer / DeepGEMM JIT, a torch extension) and the "
        "CUDA toolkit (nvcc) is not on the host: install the CUDA toolkit matching this "
        "PyTorch's CUDA and set CUDA_HOME in the profile's env, use the vLLM docker image, or "
        "pick an attention / sampling backend that needs no JIT build.",
        "CUDA toolkit (nvcc) not found for a JIT kernel build",
    ),
    _rule(
        "device_busy",
        "unknown",
        3,
        ("Device or resource busy", "libtpu_lockfile", "lockfile", "CUDA-capable device"),
        # only the failure itself: a warning that mentions the lockfile is no cause
        [
            r"(?:TPU|device) initialization failed: .*Device or resource busy",
            # cudaErrorDevicesUnavailable: another process holds a GPU in exclusive mode
            r"CUDA-capable devices? ?(?:\(s\) )?(?:is|are|is/are) busy or unavailable",
            r"Unable to initialize backend '\w+': .*(?:Device or resource busy|libtpu "
            r"(?:multi-process )?lockfile)",
        ],
        "The accelerator is held by another process (device busy / libtpu lockfile, or a GPU "
        "in exclusive compute mode that another process uses): a stale server or another job "
        "still owns it. Stop that process (`fab kill-stale` for one this "
        "deployment started; otherwise find it with `lsof /dev/vfio/*` or `fuser`), remove a "
        "stale /tmp/libtpu_lockfile if no process holds it, then redeploy.",
        "accelerator busy (held by another process)",
    ),
    _rule(
        "device_not_visible",
        "unknown",
        3,
        ("invalid device=", "open device ", "invalid device ordinal"),
        # the process was told to use a device it cannot see or open (Ascend's runtime: "Set
        # visible device failed, invalid device=1"; CUDA: "invalid device ordinal")
        [
            r"Set visible device failed, invalid device=(?P<device_id>\d+)",
            r"\bopen device (?P<device_id>\d+) failed\b",
            r"\b(?:CUDA|HIP) error: invalid device ordinal\b",
        ],
        "A process was given an accelerator[[ ({device_id})]] it cannot see or open: the "
        "visible-device list (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES / "
        "HIP_VISIBLE_DEVICES in the profile's env or the container's device list) holds fewer "
        "devices than tensor_parallel_size x pipeline_parallel_size asks for, or names one the "
        "host lacks. Compare `nvidia-smi -L` (`npu-smi info`) with the profile.",
        "accelerator[[ {device_id}]] not visible to the process",
    ),
    _rule(
        "triton_backend_failed",
        "unknown",
        3,
        ("Failed to initialize Python stub", "failed to load '"),
        # NVIDIA Triton's Python backend could not start the model (its vllm backend's
        # model.py): an exception quoted on Triton's own log line; a cause another rule names
        # in the same line (a vLLM refusal) outranks this
        [
            r"Failed to initialize Python stub: (?P<what>[\w.]+(?:Error|Exception)\b[^\\\"]*)",
            r"failed to load '[\w\-]+' version \d+: \w+: (?P<what>[\w.]+(?:Error|Exception)\b"
            r"[^\\\"]*)",
        ],
        "Triton's Python backend could not start the vLLM model: {what}. A TypeError or "
        "AttributeError here usually means the backend's model.py and the installed vLLM do "
        "not match (an API it calls changed): use the Triton vLLM image whose vLLM the backend "
        "was written for, or pin vLLM to it.",
        "Triton backend failed to start the model: {what}",
    ),
)
