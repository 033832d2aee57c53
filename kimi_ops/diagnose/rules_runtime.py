"""Rules, part 3: the run failed (KV memory, the port, CUDA OOM, NCCL)."""

from __future__ import annotations

from kimi_ops.diagnose.model import Rule, _rule

_GIB = r"[KMGT]i?B"  # a size unit in a memory message

#: The rest of a message, up to a context dump ("| Context: {...}"), at most ~100 characters
_WHAT_TAIL = r"(?:[^|{]{0,99}[^|{\s])?"

_KV_ZERO_HINT = (
    "After loading the weights and profiling no device memory is left for the KV cache "
    "(available memory: 0). Raise gpu_memory_utilization[[ (now {gpu_memory_utilization})]],"
    " lower max_model_len[[ (now {max_model_len})]] / max_num_seqs, or spread the model over "
    "more devices (tensor_parallel_size)."
)
_KV_ZERO_SUMMARY = "no device memory left for the KV cache (available: 0)"

RUNTIME_RULES: tuple[Rule, ...] = (
    # ------------------------------------------------------- kv_cache_insufficient
    _rule(
        "kv_cache_no_memory",
        "kv_cache_insufficient",
        70,
        (
            "No available memory for the cache blocks",
            "Available KV cache memory: -",
            "reserved for KV Cache is -",
            "Cannot auto-fit max_model_len",
            "blocks of KV cache",
        ),
        [
            r"No available memory for the cache blocks",
            # a platform plugin's words (vllm-rbln: "Not enough memory for 24 blocks of KV
            # cache. Try reducing the number of blocks by setting --num-gpu-blocks-override.")
            r"\b[Nn]ot enough (?:\w+ )?memory for (?:the )?\d+ blocks of KV cache",
            r"Available KV cache memory: (?P<kv_cache_gib>-\d[\d.]*) ?GiB",
            r"reserved for KV Cache is (?P<kv_cache_gib>-\d[\d.]*) ?GiB",
            r"Cannot auto-fit max_model_len",
        ],
        "After loading the weights[[ ({model_mem_gib} GiB)]] no GPU memory is left for the KV "
        "cache[[ (available KV cache memory: {kv_cache_gib} GiB)]].[[ The KV cache's size is set "
        "explicitly (--kv-cache-memory-bytes {kv_cache_memory_bytes}): raise it first.]] Raise "
        "gpu_memory_utilization[[ (now {gpu_memory_utilization})]] (on the CPU build it is the "
        "share of RAM, or set VLLM_CPU_KVCACHE_SPACE), lower max_model_len"
        "[[ (now {max_model_len})]] / max_num_seqs, or spread the model over more GPUs "
        "(tensor_parallel_size); `nvidia-smi` shows whether a stale process holds memory "
        "(`fab kill-stale`).",
        "no GPU memory left for the KV cache[[ ({kv_cache_gib} GiB available)]]",
    ),
    _rule(
        "kv_cache_too_small",
        "kv_cache_insufficient",
        70,
        (
            "KV cache is needed",
            "stored in KV cache",
            "total_hbm_limit_cap_gb",
            "cache blocks (",
            "than the maximum number of",
        ),
        [
            r"\(?(?P<needed_gib>[\d.]+) GiB KV cache is needed, which is larger than the "
            r"available KV cache memory \((?P<available_gib>[\d.]+) GiB\)",
            r"KV cache is needed, which is larger than the available",
            r"max seq len \((?P<max_seq_len>\d+)\) is larger than the maximum number of tokens "
            r"that can be stored in KV cache \((?P<kv_tokens>\d+)\)",
            r"is larger than the maximum number of tokens that can be stored in KV cache",
            # ... its line cut where a console wrapped it (a vLLM-derived server's ERROR line)
            r"max seq len \((?P<max_seq_len>\d+)\) is larger than the maximum number of\s*$",
            r"total_hbm_used_gb=.*exceeds total_hbm_limit_cap_gb",  # tpu-inference: over the HBM
            # hybrid (Mamba) models: one cache block per sequence
            r"max_num_seqs \((?P<max_num_seqs>\d+)\) exceeds available \w+ cache blocks",
        ],
        "The KV cache cannot hold one request of max_model_len[[ {max_seq_len}]] tokens"
        "[[: it needs {needed_gib} GiB but only {available_gib} GiB is available]]"
        "[[ (it holds {kv_tokens} tokens)]]. Lower --max-model-len[[ to at most {est_max_len}]]"
        " or raise[[ --kv-cache-memory-bytes (now {kv_cache_memory_bytes}: it sets the size) or]]"
        " --gpu-memory-utilization[[ (now {gpu_memory_utilization})]].",
        "KV cache too small for max_model_len[[ {max_seq_len}]]"
        "[[ ({needed_gib} GiB needed, {available_gib} GiB available)]]",
        extract=[
            r"max seq len \((?P<max_seq_len>\d+)\)",
            r"estimated maximum model length is (?P<est_max_len>\d+)",
            r"\((?P<needed_gib>[\d.]+) GiB KV cache is needed",
            r"available KV cache memory \((?P<available_gib>[\d.]+) GiB\)",
        ],
    ),
    _rule(
        "kv_concurrency_below_one",
        "kv_cache_insufficient",
        69,
        ("Maximum concurrency for",),
        [
            r"Maximum concurrency for (?P<max_seq_len>[\d,]+) tokens per request: "
            r"(?P<max_concurrency>0(?:\.\d+)?)x"
        ],
        "The KV cache holds less than one request of max_model_len[[ {max_seq_len}]] tokens"
        "[[ (maximum concurrency {max_concurrency}x)]][[; it holds {kv_cache_tokens} tokens]]. "
        "Lower --max-model-len[[ to at most {kv_cache_tokens}]] or raise "
        "--gpu-memory-utilization[[ (now {gpu_memory_utilization})]] (on CPU: "
        "VLLM_CPU_KVCACHE_SPACE).",
        "KV cache too small for max_model_len[[ {max_seq_len}]] (concurrency "
        "[[{max_concurrency}||< 1]]x)",
        weak=True,  # printed as information; it counts when the engine then dies
    ),
    _rule(
        "kv_memory_zero",
        "kv_cache_insufficient",
        68,
        ("Available memory: 0,", "available_kv_cache_memory=0"),
        # vllm-ascend's worker: what is left for the KV cache after profiling, in bytes
        [r"Available memory: 0, total memory", r"available_kv_cache_memory=0(?:\.0)?\b"],
        _KV_ZERO_HINT,
        _KV_ZERO_SUMMARY,
        weak=True,  # an INFO line; it counts when the engine then dies
    ),
    _rule(
        "kv_blocks_zero",
        "kv_cache_insufficient",
        68,
        ("# GPU blocks: 0", "blocks: 0,", "# GPU blocks: -", "# cuda blocks: -"),
        # V0's block count after profiling (0.1-0.2 can print -1)
        [r"# (?:GPU|NPU|XPU|cuda|npu) blocks: (?:0\b|-\d)"],
        _KV_ZERO_HINT,
        _KV_ZERO_SUMMARY,
        # an INFO line, but V0 raises "No available memory for the cache blocks" right after
        # it on a device (a CPU prototype that printed it went on to run prompts: then a
        # later line shows progress), so a log ending there is that failure
        weak=True,
        fatal_at_end="log",
    ),
    # ----------------------------------------------------------------- port_in_use
    _rule(
        "port_in_use",
        "port_in_use",
        65,
        (
            "Address already in use",
            "address already in use",
            "EADDRINUSE",
            "Errno 98",
            "Errno 48",
            "Errno 10048",
            "WinError 10048",
            "only one usage of each socket address",
            "Only one usage of each socket address",
            "could not bind to address",
        ),
        [
            r"\[(?:Errno|WinError) (?:98|48|10048)\]",
            r"(?i:address already in use)",
            r"EADDRINUSE",
            r"(?i:only one usage of each socket address)",
            r"could not bind to address:? [\w.\-\[\]:]*?:(?P<port>\d+)",  # a Rust HTTP front end
        ],
        "Port[[ {port}]] is already in use on the host: an earlier vLLM (or another server) "
        "still holds it. Run `fab kill-stale` to stop stale servers[[ (`ss -ltnp "
        "'sport = :{port}'` shows the holder)]], or change the port in the profile.",
        "port[[ {port}]] already in use",
        exclude=[r"failed to bind to \[::\]"],  # torch's IPv6 attempt; IPv4 may still work
        extract=[
            r"\('(?P<host>[^']*)',\s*(?P<port>\d+)\)",
            r"addr='[a-z]+://[^']*:(?P<port>\d+)'",
            r"port: (?P<port>\d+)",
            r"(?:tcp|http)://[\w.\-\[\]:]*?:(?P<port>\d+)",
        ],
    ),
    # -------------------------------------------------------------------- cuda_oom
    _rule(
        "gpu_memory_in_use",
        "cuda_oom",
        60,
        (
            "less than desired GPU memory utilization",
            "less than desired CPU memory utilization",
        ),
        # the CPU build says it of a NUMA node's RAM ("Available memory on node 0 (13.68/15.09
        # GiB) on startup is less than desired CPU memory utilization (0.99, 14.94 GiB)"):
        # there gpu_memory_utilization is the share of the node's RAM
        [
            r"(?:Free memory on device|Available memory on node)(?: \S+)? \((?P<free_gib>[\d.]+)"
            r"/(?P<total_gib>[\d.]+) GiB\) on startup is less than desired (?P<mem_kind>GPU|CPU) "
            r"memory utilization \((?P<gpu_memory_utilization>[\d.]+), (?P<want_gib>[\d.]+) GiB\)",
            r"is less than desired (?P<mem_kind>GPU|CPU) memory utilization",
        ],
        "Only[[ {free_gib} of {total_gib} GiB of]] [[{mem_kind}||device]] memory was free at "
        "startup, less than gpu_memory_utilization[[ {gpu_memory_utilization}]] asks for[[ "
        "({want_gib} GiB)]]: another process (often a stale vLLM) holds that memory. Check "
        "`nvidia-smi` (on CPU: `free -g`), run `fab kill-stale`, or lower "
        "gpu_memory_utilization in the profile (on the CPU build it is the share of RAM).",
        "[[{mem_kind}||device]] memory already in use at startup"
        "[[ ({free_gib}/{total_gib} GiB free)]]",
    ),
    _rule(
        "kv_space_exceeds_memory",
        "cuda_oom",
        61,
        ("less than requested memory for kv",),
        # the CPU build: the KV cache asked for (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE)
        # does not fit in the node's free RAM (the real engine with --kv-cache-memory-bytes 200G)
        [
            r"Available memory on node \S+ \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on "
            r"kv cache allocation is less than requested memory for kv \((?P<want_gib>[\d.]+)"
        ],
        "The KV cache asked for[[ ({want_gib} GiB)]] does not fit in the memory free at startup"
        "[[ ({free_gib} of {total_gib} GiB)]]: lower --kv-cache-memory-bytes or "
        "VLLM_CPU_KVCACHE_SPACE in the profile, or free the memory other processes hold.",
        "KV cache larger than the free memory[[ ({want_gib} GiB asked, {free_gib} GiB free)]]",
    ),
    _rule(
        "cuda_oom",
        "cuda_oom",
        60,
        (
            "out of memory",
            "OutOfMemoryError",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "cudaErrorMemoryAllocation",
            "RESOURCE_EXHAUSTED",
            "PT_DEVMEM",
            "OUT_OF_DEVICE_MEMORY",
            "Allocation Failure",
            "Not enough space to allocate",
            "insufficient memory to allocate",
            "too large for the current device",
            "EL0004",
            "is allocated by PyTorch",
            "Ran out of memory in memory space",
            "Attempting to reserve ",
            "Failed to load model - not enough",
            "Tried to allocate",
        ),
        [
            r"(?:CUDA|HIP|XPU|NPU|GPU|cuda|hip) out of memory",
            # Intel's Level Zero / Unified Runtime (XPU): device memory exhausted
            r"\b(?:UR|ZE)_RESULT_ERROR_OUT_OF_DEVICE_MEMORY\b",
            # Intel Gaudi (HPU): the device-memory allocator failing
            r"MODULE:PT_DEVMEM Allocation failed",
            # JAX / XLA (TPU): device memory (HBM, or the core's VMEM) exhausted at run or
            # compile time ("E1000: CompileTimeHbmOom", "E1001: CompileTimeScopedVmemOom")
            r"RESOURCE_EXHAUSTED: (?:Error allocating device buffer|\w+: \w*(?:Allocation"
            r"Failure|Oom\b)|.*\b[Oo]ut of memory\b|.*\bAttempting to reserve \S+ at the bottom "
            r"of memory)",
            # ... XLA's own words when a compiled program does not fit ("Ran out of memory in
            # memory space vmem while allocating on stack for ...")
            r"Ran out of memory in memory space (?:vmem|hbm|smem|cmem)\b",
            # ... and the TPU runtime loading a program whose buffers do not fit in HBM, even
            # when the "RESOURCE_EXHAUSTED: " before it is on another line or cut ("Attempting
            # to reserve 420.19M at the bottom of memory. That was not possible. There are
            # 203.73M free, 0B reserved, and 203.73M reservable.")
            r"\bAttempting to reserve [\d.]+[KMGT]?i?B?\b.*\bThere are [\d.]+[KMGT]?i?B? free\b",
            # Ascend's runtime (CANN error code EL0004): device memory could not be allocated
            r"(?:^|[(:\s])EL0004\)?: (?:\[PID: \d+\] \S+ )?Failed to allocate memory",
            # AWS Neuron's runtime could not allocate a tensor on the NeuronCore
            r"\bnrt_tensor_allocate\b.*Allocation Failure",
            # Tenstorrent's allocator (tt-metal): device DRAM / L1 exhausted
            r"Out of Memory: Not enough space to allocate \d+ B (?:DRAM|L1)",
            r"(?i:(?:cuda|hip)(?: driver)? error: out of memory)",
            r"Triton Error \[(?:CUDA|HIP)\]: out of memory",  # a Triton kernel's launch / autotune
            r"OutOfMemoryError: (?:CUDA|HIP)",
            # torch's own OOM exception type, whatever vLLM wrapped its message in ("Error in
            # model execution ..."); Ray's OutOfMemoryError (host RAM) is not torch's
            r"\btorch\.(?:cuda\.)?OutOfMemoryError\b",
            # ... its message's own account, when a page or paste kept only the tail
            r"Of the allocated memory [\d.]+ \w+ is allocated by PyTorch",
            # ... or its head without "CUDA out of memory." before it (torch 2.1+: "Tried to
            # allocate 136.00 MiB. GPU 0 has a total capacity of ..."; older: "Tried to allocate
            # 20.00 MiB (GPU 0; 79.15 GiB total capacity; ...")
            r"\bTried to allocate [\d.]+ [KMGT]?i?B(?:\. GPU \d+ has a total capacity\b|"
            r" \(GPU \d+; [\d.]+ [KMGT]?i?B total capacity\b)",
            # IPython's traceback header names the exception by its class name only
            r"^OutOfMemoryError\s+Traceback \(most recent call last\)",
            r"(?i:cuda failure \d* ?'out of memory')",
            r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation",
            # vLLM re-raising torch's OOM in its own words (0.11: "Failed to create unquantized
            # linear weights. This may be caused by insufficient memory ..."; TPU: "... HBM")
            r"^\s*(?:[\w.]+\.)?\w*Error: .*\b(?:may be caused by insufficient memory to "
            r"allocate|too large for the current device's (?:HBM|memory))",
            # V1's model runner logs torch's OOM while loading weights in its own words first
            r"Failed to load model - not enough (?:GPU|device) memory",
        ],
        "The GPU ran out of memory[[ allocating {alloc}]][[ ({free} free of {total})]]. A stale "
        "process may still hold GPU memory: check `nvidia-smi` and run `fab kill-stale`. "
        "Otherwise lower gpu_memory_utilization[[ (now {gpu_memory_utilization})]] or "
        "max_model_len[[ (now {max_model_len})]] / max_num_seqs in the profile, or use more GPUs.",
        "CUDA out of memory[[ (tried to allocate {alloc})]]",
        extract=[
            r"Tried to allocate (?P<alloc>[\d.]+ " + _GIB + ")",
            r"total capacity of (?P<total>[\d.]+ "
            + _GIB
            + r") of which (?P<free>[\d.]+ "
            + _GIB
            + ") is free",
        ],
    ),
    _rule(
        "allocator_oom",
        "cuda_oom",
        59,  # (torch's OutOfMemoryError after it, when there, is the better account)
        ("failed with OOM on device",),
        # torch's caching allocator warns before it raises OutOfMemoryError ("[W830 12:05:56
        # CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 0 while
        # trying to allocate 272629760 bytes (free: 125304832, total: 85017624576)"). A caller
        # that catches the OOM (an autotuner trying a smaller size, a request's retry) goes
        # on: progress or serving after it is a recovery (scanner._SURVIVABLE_RULES); once the
        # server is up, only torch's exception (the cuda_oom rule) is a failure
        [
            r"memory allocation failed with OOM on device \d+ while trying to allocate "
            r"(?P<alloc_bytes>\d+) bytes"
        ],
        "The GPU ran out of memory[[ allocating {alloc_bytes} bytes]] during startup, and nothing "
        "after it shows a recovery (torch's allocator warns before it raises the OOM). A stale "
        "process may still hold GPU memory: "
        "check `nvidia-smi` and run `fab kill-stale`. Otherwise lower gpu_memory_utilization or "
        "max_model_len / max_num_seqs in the profile, or use more GPUs.",
        "CUDA out of memory[[ (tried to allocate {alloc_bytes} bytes)]]",
    ),
    # ------------------------------------------------------------------ nccl_error
    _rule(
        "nccl_shm",
        "nccl_error",
        42,
        ("/dev/shm", "shared memory segment"),
        [
            r"failed to extend /dev/shm/\S*",
            r"Error while (?:creating|attaching to) shared memory segment",
            r"No space left on device.*/dev/shm|/dev/shm\S*.*No space left on device",
        ],
        "NCCL / vLLM could not allocate shared memory in /dev/shm: leaked segments from "
        "crashed runs (psm_*, nccl-*) fill it, or it is too small. Run `fab clean-shm`, check "
        "`df -h /dev/shm` (docker: --ipc=host or a larger --shm-size), then redeploy.",
        "NCCL could not use /dev/shm (full or too small)",
    ),
    _rule(
        "nccl_error",
        "nccl_error",
        40,
        (
            "NCCL error",
            "NCCL Error",
            "NCCL ERROR",
            "ncclSystemError",
            "ncclUnhandledCudaError",
            "ncclInternalError",
            "ncclInvalidUsage",
            "ncclRemoteError",
            "ncclInvalidArgument",
            "Watchdog caught collective operation timeout",
            "NCCL communicator was aborted",
            "NCCL timeout",
            "DistBackendError",
            "HCCL function error",
            "hccl api failed",
            "function error: Hccl",
            "Gloo connectFullMesh failed",
            "gloo/transport/",
            "HCCL(",
            "HCCP(",
            "Connect: Connect to",
            "EI0",
            "client socket has timed out",
            "waiting for clients",
            "store based barrier",
            "custom_all_reduce.cu",
            "ncclCommWatchdog",
            "watchdog thread terminated",
            "watchdog got stuck",
            "Heartbeat monitor timed out",
            "|CCL_ERROR|",
            "oneCCL: ",
            "custom_all_reduce_utils.py",
            "[XCCL]",
            "xccl/",
        ),
        [
            r"(?i:NCCL error)",
            r"nccl(?:SystemError|UnhandledCudaError|InternalError|InvalidUsage|RemoteError|"
            r"InvalidArgument)",
            r"Watchdog caught collective operation timeout",
            # torch's ProcessGroupNCCL: its watchdog hung on a collective, and the heartbeat
            # monitor that then aborts the process (torch >= 2.2)
            r"ProcessGroupNCCL's watchdog got stuck|Heartbeat monitor timed out",
            r"NCCL communicator was aborted",
            r"NCCL timeout",
            # torch.distributed's backend error type (also a C++ abort); Ascend's HCCL (NCCL's)
            r"\b(?:c10::|torch\.distributed\.)?DistBackendError\b",
            r"HCCL function error|DIST call hccl api failed|OPS function error: Hccl[A-Z]\w*",
            # torch.distributed's Gloo backend (CPU side of the same collectives)
            r"Gloo connectFullMesh failed",
            # Ascend's HCCL / HCCP logging a failed call in its own format ("[ERROR] HCCL(106335,
            # python3):2026-05-21-21:41:12.783.481 [adapter_hccp.cc:1238] ... fail"; the level
            # is a decoration, so the line must say it failed)
            r"^HCC[LP]\(\d+,[^)]*\):\S+ \[[\w.]+:\d+\]\s*(?P<nccl_detail>.*?"
            r"(?i:\bfail(?:ed|ure)?\b|\berror\b|\berrNo\b|\btime(?:d)? ?out\b).*)$",
            # NCCL's bootstrap socket failing to reach a peer (its own words, without "NCCL")
            r"(?P<nccl_detail>socket(?:Start|Poll)Connect: Connect to \S+ (?:failed|returned)\b.*)",
            # CANN's error codes of the HCCL family ("EI0006: ... Getting socket times out",
            # "Communication_Error_Get_Socket(EI0006): ...")
            r"(?:^|[(:\s])EI\d{4}\)?: (?P<nccl_detail>(?:\[PID: \d+\] \S+ )?.*)",
            # Gloo's TCP transport losing a peer ("[.../gloo/transport/tcp/pair.cc:534]
            # Connection closed by peer [10.0.0.2]:29500", "Read error ..: Connection reset")
            r"gloo/transport/\w+/\w+\.cc:\d+\] (?P<nccl_detail>(?:Connection|Read error|"
            r"Write error|Timed out)[^\n]*)",
            # ... or failing to set up ("[enforce fail at ../third_party/gloo/gloo/transport/
            # tcp/device.cc:83] ifa != nullptr. Unable to find address for: eth0": a wrong
            # GLOO_SOCKET_IFNAME)
            r"enforce fail at \S*gloo/transport/\S+\] (?P<nccl_detail>.+)",
            # Kunlun's XCCL (the XPU's NCCL): its own log lines of a failure, and an
            # exception raised in its utilities ("(at .../new_xccl/XCCLUtils.hpp:53)")
            r"^\[XCCL\]\[[\w.]+:\d+\] (?P<nccl_detail>.*\b(?:failed|error)\b.*)",
            r"Error: (?P<nccl_detail>.*)\(at \S*/\w*xccl/\w+\.\w+:\d+\)",
            # torch.distributed's rendezvous: a rank never reached the store (another node not
            # started, a firewall, a wrong master address) - torch's own words (TCPStore, c10d)
            r"(?P<nccl_detail>The client socket has timed out after \S+ while trying to connect "
            r"to \([^)]*\))",
            r"(?P<nccl_detail>Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients "
            r"joined)",
            r"(?P<nccl_detail>Timed out initializing process group in store based barrier)",
            # Intel's oneCCL (XPU), NCCL's counterpart: "|CCL_ERROR| exchange_utils.cpp:202 .."
            r"\|CCL_ERROR\|",
            r"\boneCCL: \S+\.cpp:\d+",  # ... its error text ("oneCCL: ze_call.cpp:28 do_call: ..")
            # the custom all-reduce's GPU P2P check (a subprocess vLLM runs) failed
            r"custom_all_reduce_utils\.py'?\]?'? returned non-zero exit status",
            # vLLM's custom all-reduce (P2P / CUDA IPC between the GPUs) failing, other than
            # by a kernel fault ("invalid argument": IPC handles refused)
            r"custom_all_reduce\.cuh?:\d+ '(?P<nccl_detail>(?!an illegal memory access)[^']+)'",
            # the NCCL watchdog's C++ exception (the process terminates on it)
            r"Exception raised from ncclCommWatchdog\b|ProcessGroupNCCL::ncclCommWatchdog\(\)",
            r"(?:NCCL|HCCL|Process group) watchdog thread terminated with exception",
        ],
        "NCCL (GPU-to-GPU communication) failed[[: {nccl_detail}]]. Run `fab clean-shm` "
        "(leaked /dev/shm segments from crashed runs break NCCL) and make sure /dev/shm is "
        "large enough (docker: --ipc=host); on PCIe-only multi-GPU hosts set "
        "NCCL_P2P_LEVEL=SYS and/or NCCL_PROTO=LL in the profile's env; NCCL_DEBUG=INFO shows "
        "the underlying error.",
        "NCCL error[[: {nccl_detail}]]",
        exclude=[r"destroy_process_group"],
        extract=[
            r"(?P<nccl_detail>unhandled (?:system|cuda) error|remote process exited or there "
            r"was a network error|internal error|invalid usage|invalid argument|Watchdog "
            r"caught collective operation timeout)",
            r"NCCL version (?P<nccl_version>[\d.]+)",
        ],
    ),
    _rule(
        "nccl_warn_failure",
        "nccl_error",
        39,
        ("NCCL WARN", "Failed to load NCCL library"),
        # NCCL_DEBUG output: NCCL's own account of what failed ("Cuda failure 'operation not
        # supported'", "Call to connect returned ..."), or vLLM not finding the NCCL library
        # it was pointed at; it counts when the process then dies
        [
            r"NCCL WARN (?P<nccl_detail>.*?(?i:failure|failed|error)\b.*)",
            r"(?P<nccl_detail>Failed to load NCCL library from \S+?)\.?(?:\s|$)",
        ],
        "NCCL (GPU-to-GPU communication) failed while setting up or running a collective"
        "[[: {nccl_detail}]]. Check the GPUs' peer-to-peer support (`nvidia-smi topo -m`; on "
        "PCIe-only or virtualised hosts set NCCL_P2P_DISABLE=1 or NCCL_P2P_LEVEL=SYS in the "
        "profile's env), run `fab clean-shm`, and make sure /dev/shm is large enough.",
        "NCCL failure[[: {nccl_detail}]]",
        weak=True,
    ),
    _rule(
        "store_peer_lost",
        "nccl_error",
        37,
        ("TCPStore", "SocketImpl"),
        # torch.distributed's store (c10d TCPStore, which NCCL's heartbeat and bootstrap use)
        # lost its connection to the master rank: that rank's process or node went away
        [
            r"Failed to check the \"should dump\" flag on TCPStore",
            r"\[c10d\] (?:recvValue|sendBytes|recvBytes) failed on SocketImpl\(.*"
            r"(?P<nccl_detail>Connection was likely closed|Broken pipe|Connection reset by peer)",
        ],
        "torch.distributed's store (TCPStore) lost its connection to the master rank[[ "
        "({nccl_detail})]]: the rank-0 process or node went away while this rank waited on it. "
        "Read rank 0's (the head node's) log for why it stopped; then check the nodes reach each "
        "other on the master port (MASTER_ADDR / the Ray head), and restart every rank.",
        "distributed store connection lost[[ ({nccl_detail})]]",
    ),
    _rule(
        "nccl_error_trace",
        "nccl_error",
        38,
        ("NCCL INFO",),
        # NCCL_DEBUG=INFO's trace of an error code propagating up its calls ("init.cc:2257
        # -> 1"): printed only when a call failed; NCCL's own WARN line, when the excerpt
        # holds it, says more (nccl_warn_failure ranks higher)
        [r"NCCL INFO \S+\.(?:cc|cu|h|cpp):\d+ -> (?P<nccl_code>[1-9]\d*)\s*$"],
        "NCCL (GPU-to-GPU communication) returned an error code (NCCL_DEBUG trace: -> "
        "{nccl_code}) while setting up or running a collective. Check the GPUs' peer-to-peer "
        "support (`nvidia-smi topo -m`; on PCIe-only or virtualised hosts set "
        "NCCL_P2P_DISABLE=1 in the profile's env), run `fab clean-shm`, and read the NCCL WARN "
        "lines before the trace.",
        "NCCL returned error code {nccl_code}",
    ),
    _rule(
        "kv_transfer_failed",
        "unknown",
        3,
        ("transfer failed", "Failed to transfer KV", "transfer failure", "Unexpected UCX error"),
        # disaggregated serving: a KV connector could not move a request's KV cache between the
        # prefill and the decode instances (its own words: vLLM's Mooncake and NIXL connectors,
        # NIXL's UCX backend). No label of its own: the servers run, their requests fail
        [
            r"(?P<what>(?:Mooncake|NIXL) transfer fail(?:ed|ure)\b" + _WHAT_TAIL + ")",
            r"(?P<what>Failed to transfer KV cache for request\b" + _WHAT_TAIL + ")",
            r"(?P<what>Unexpected UCX error:" + _WHAT_TAIL + ")",
        ],
        "The KV cache of a request could not be moved between the prefill and the decode "
        "instances ({what}): the KV connector's transport failed. Check that the instances "
        "reach each other on the connector's ports and network (RDMA / UCX / TCP, the addresses "
        "in kv_transfer_config), that both run the same connector and vLLM version, and read "
        "the other instance's log for its side.",
        "KV cache transfer failed between instances ({what})",
    ),
)
