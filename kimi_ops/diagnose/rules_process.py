"""Rules, part 4: a process of the run died (a signal, the OOM killer), or an environment cause
with no label of its own (unknown: a broken install, a model architecture this vLLM or
transformers does not know)."""

from __future__ import annotations

from kimi_ops.diagnose.model import (
    BASH_JOB_REPORT,
    L10N_CORE_DUMPED,
    L10N_KILL_WORDS,
    L10N_STOP_WORDS,
    SHELL_SIGNAL_WORDS_L10N,
    ZSH_JOB_REPORT,
    Rule,
    _rule,
)

PROCESS_RULES: tuple[Rule, ...] = (
    # --------------------------------------------------------------- engine_killed
    _rule(
        "engine_signal",
        "engine_killed",
        9,
        (
            "exit code: -",
            "exit code -",
            "exitcode -",
            "exitcode=-",
            "exitcode: -",  # torchrun: "failed (exitcode: -11) local_rank: 0 (pid: 9) of binary"
            "exit_code=-",
            "killed by signal",
            "terminated by signal",
            "by SIG",
            "Killed",
            "exited with code 13",
            "Fatal Python error: ",
            "(core dumped)",
            "SIGKILL",
            " received at time=",
            "Segfault encountered",
            "killed by signal",
            ") received by PID",
            " received by PID",
            "Caught signal ",
            "Signal (",
            "OOMKilled",
            "Exit Code:",
            "Segmentation fault",
            "Aborted",
            "Bus error",
            "zsh: ",
            "killed  ",
            "segmentation fault  ",
            "bus error  ",
            "IOT instruction  ",
            "abort  ",
            "illegal hardware instruction  ",
            "floating point exception  ",
            "terminated  ",
            "Illegal instruction",
            "Floating point exception",
            "Memory access fault by GPU",
            "killed due to memory pressure",
            "Ray killed this worker",
            "KeyboardInterrupt: terminated",
            "CANCELLED AT",
            "<Signals.",
            "Main process exited, code=",
            ".service",
            "  Terminated ",
            "oom-kill",
            "OOM killer",
            "ray-oom-prevention",
            "OutOfMemoryError",
            *SHELL_SIGNAL_WORDS_L10N,
        ),
        [
            r"(?i:exit[ _]?code)[:= ]+-(?P<signum>\d+)\b",
            r"(?:killed|terminated) by (?:signal )?(?:(?P<signame>SIG[A-Z]+)|(?P<signum>\d+))",
            r"^Killed$|\d\s+Killed\s",  # the shell: "Killed", "line 3:  4242 Killed   vllm ..."
            # the shell's other signal words, alone or after the PID (no core dump written)
            r"^(?P<shell_signal>Segmentation fault|Aborted|Bus error|Illegal instruction|"
            r"Floating point exception)$",
            r"line \d+:\s+\d+\s+(?P<shell_signal>Segmentation fault|Aborted|Bus error|Illegal "
            r"instruction|Floating point exception)\b",
            # zsh's words (5.9), for a foreground command ("zsh: bus error  python3 ..") and in
            # its job report ("[1]    817166 bus error  python3", "[1]  + 4566 killed     ..")
            ZSH_JOB_REPORT + r"(?P<shell_signal>killed|segmentation fault|bus "
            r"error|IOT instruction|abort|illegal hardware instruction|floating point exception"
            r"|terminated)"  # (SIGTERM: a stop; before the server was up, as bash's Terminated)
            r"(?: \(core dumped\))? +\S",
            # the ROCm (HSA) runtime prints this, then aborts the process
            r"(?P<hsa_fault>Memory access fault by GPU node-\d+)",
            r"(?:^|: )Killed process \d+",  # the kernel's OOM killer (dmesg)
            # UCX's and tritonserver's signal handlers
            r"Caught signal (?P<signum>\d+)\b",
            r"^Signal \((?P<signum>\d+)\) received",
            r"exited with code (?P<exitcode>13[2-79])\b",
            r"Fatal Python error: (?P<shell_signal>Segmentation fault|Aborted|Bus error|Illegal "
            r"instruction|Floating point exception)",
            r"(?P<shell_signal>Segmentation fault|Aborted|Bus error|Illegal instruction|"
            r"Floating point exception) +\(core dumped\)",
            r"(?:received|got|with) (?P<signame>SIGKILL)\b",
            # abseil's failure handler (Ray, JAX / XLA): "*** SIGSEGV received at time=..",
            # "*** SIGTERM received by PID 12 (TID 12) on cpu 3, si_code=0, from PID 9"
            r"\*\*\* (?P<signame>SIG[A-Z]+) received (?:at time=|by PID \d+)",
            r"killed by signal: (?P<shell_signal>Killed|Segmentation fault|Aborted|Bus error|"
            r"Illegal instruction)",
            r"Signal (?P<signum>\d+) \((?P<signame>SIG[A-Z]+)\) received by PID",  # torchrun
            r"\bOOMKilled\b|Exit Code:\s+(?P<exitcode>13[2-79])\b",  # Kubernetes
            r"(?P<shell_signal>Segfault) encountered",  # torch's c10 handler
            # Ray's memory monitor kills workers (SIGKILL) when the host runs out of RAM
            r"(?P<killer>Workers? \(tasks / actors\) killed due to memory pressure) \(OOM\)",
            r"exceeds the memory usage threshold of [\d.]+\.\s*(?P<killer>Ray killed this worker)",
            r"(?P<killer>Refer to the documentation on how to address the out of memory issue): "
            r"\S*ray-oom-prevention",
            r"ray\.exceptions\.OutOfMemoryError: (?P<killer>(?:Task was|\d+ worker\(s\) were) "
            r"killed due to the node running low on memory)",
            # vLLM's SIGTERM handler: raise KeyboardInterrupt("terminated")
            r"^KeyboardInterrupt: (?P<shell_signal>terminated)$",
            # Python's subprocess: a child (a compiler, a helper) killed by a signal
            r"died with <Signals\.(?P<signame>SIG[A-Z]+): \d+>",
            # systemd's account of the unit's main process: killed by a signal, or the
            # kernel's OOM killer
            r"Main process exited, code=(?:killed|dumped), status=(?P<signum>\d+)/",
            r"(?:Failed with result 'oom-kill'|has been killed by the OOM killer)",
            # a stop before the server was up: systemd stopping the unit
            r"^(?P<shell_signal>Stopping) \S+\.service\b",
            # bash's job report of a job that died of a signal ("[1]+  Killed    python3 ..",
            # "[2]-  Segmentation fault      (core dumped) vllm serve ..") or was stopped before
            # the server was up ("[1]+  Terminated   vllm serve ..")
            BASH_JOB_REPORT
            + r"(?P<shell_signal>Terminated|Killed|Segmentation fault|Bus error|Aborted|Illegal "
            r"instruction|Floating point exception)(?: +\(core dumped\))? +\S",
            # the same words in a non-English locale (model.SHELL_SIGNAL_WORDS_L10N): bash's
            # job report ("[1]+  已杀死   python3 .."), a script's report ("bash: 第 1 行：
            # 7134 段错误  （核心已转储）python3 ..", "bash: Zeile 1:  3084 Getötet  vllm .."),
            # and an interactive shell's line of its own ("段错误（核心已转储）", "Убито")
            BASH_JOB_REPORT + rf"(?P<shell_signal>{L10N_KILL_WORDS}|{L10N_STOP_WORDS})(?=[ \t（(])",
            rf"\d+ ?行?[:：] +\d+ +(?P<shell_signal>{L10N_KILL_WORDS}|{L10N_STOP_WORDS})"
            r"(?=[ \t（(]|$)",
            rf"^(?P<shell_signal>{L10N_KILL_WORDS}) ?(?:{L10N_CORE_DUMPED})?$",
            # Slurm cancelling the job or step before the server was up (scancel, the time
            # limit): SIGTERM to the tasks, SIGKILL after its grace period
            r"\*\*\* (?:JOB|STEP) \S+ ON \S+ (?P<slurm_cancel>CANCELLED AT \S+(?: DUE TO "
            r"[A-Z ]+?)?) \*\*\*",
        ],
        "{signal_hint}",
        "[[{killed_proc}||a vLLM process]] {signal_verb} {signal}",
        exclude=[r"(?i:potential root causes|common causes|possible causes)"],  # Ray's guesses
        extract=[
            r"(?P<killed_proc>(?:Worker proc|Engine core proc|EngineCore|Worker) ?\S*?)"
            r"(?: \(pid \d+\))? died",
        ],
    ),
    _rule(
        "engine_vanished",
        "engine_killed",
        7,
        ("exited unexpectedly",),
        [r"(?i:engine core) (?:process )?exited unexpectedly"],
        "{signal_hint}",
        "[[{killed_proc}||the engine process]] vanished without an error: killed by {signal}",
        exclude=[r"exit ?code:? ?[1-9]"],
    ),
    # --------------------------------------------- unknown (known, but no own label)
    _rule(
        "platform_startup_timeout",
        "unknown",
        3,
        ("initializing for too long", "ping health check", "to start within", "ready within"),
        # the platform that runs the server gave up on it while it was still starting (its
        # startup / health-check deadline, not vLLM failing): Modal's runner ("Runner has been
        # initializing for too long: 300 seconds"), a SageMaker endpoint's container ("did not
        # pass the ping health check"), a wrapper that starts vLLM (Lemonade's "vllm-server
        # failed to start within timeout"). The log ends mid-startup, but this is no server
        # still starting: it was ended
        [
            r"(?P<what>\w+ has been initializing for too long(?:: [\w .]+)?)",
            r"(?P<what>did not pass the ping health check)",
            r"(?P<what>(?:failed to start|did not become ready) within (?:the )?[\w .]*?)\.?$",
        ],
        "The platform running the server gave up on it before it was ready ({what}): vLLM was "
        "still starting, not failing. Raise the platform's startup deadline (Modal: the "
        "function's timeout / startup timeout; SageMaker: "
        "container_startup_health_check_timeout; a wrapper: its own startup timeout), or make "
        "startup shorter: weights on a local disk or a cached volume, torch.compile's cache "
        "kept between runs, or --enforce-eager in extra_args (no compilation nor CUDA-graph "
        "capture).",
        "the platform ended the server while it was starting ({what})",
    ),
    _rule(
        "package_version_mismatch",
        "unknown",
        3,
        (
            "does not match",
            "mismatches the version",
        ),
        # two installed pieces that must be the same release are not: FlashInfer's own check
        # ("flashinfer-cubin version (0.6.6) does not match flashinfer version (0.6.4)"),
        # torch's extension build ("The detected CUDA version (12.1) mismatches the version that
        # was used to compile PyTorch (11.8)"); an import refusing a version (Numba's "needs
        # NumPy 2.2 or less") is import_failed's, which an optional import may survive
        [
            r"(?P<pkg_a>[\w.\-]+) version \((?P<ver_a>[^)]+)\) does not match (?P<pkg_b>[\w.\-]+) "
            r"version \((?P<ver_b>[^)]+)\)",
            r"The detected (?P<pkg_a>CUDA) version \((?P<ver_a>[^)]+)\) mismatches the version "
            r"that was used to compile (?P<pkg_b>PyTorch) \((?P<ver_b>[^)]+)\)",
        ],
        "Two installed pieces that must match do not: {pkg_a} {ver_a} and {pkg_b} {ver_b}. The "
        "environment is broken, not the model or its settings: install matching versions (the "
        "release vLLM pins, in a fresh venv), or use the vLLM docker image.",
        "version mismatch: {pkg_a} {ver_a} vs {pkg_b} {ver_b}",
    ),
    _rule(
        "broken_install",
        "unknown",
        3,
        (
            "undefined symbol",
            "failed to be inspected",
            "models.registry",
            "Tried to instantiate",
            "object has no attribute",
            "obsolete version of vllm",
        ),
        # a compiled extension built against another torch / CUDA than the one installed; vLLM
        # failing to import a model class in its inspection subprocess (an import error there)
        [
            r"^(?:ImportError|OSError)\b.*undefined symbol: (?P<symbol>\S+)",
            r"Model architectures? \[?(?P<arch>[^\]]*?)\]? failed to be inspected",
            # the same inspection subprocess failing outright (its command is vLLM's registry)
            r"'vllm\.model_executor\.models\.registry'\]' returned non-zero exit status",
            # vLLM's compiled ops not registered with this torch (_C / _core_C did not load)
            r"Tried to instantiate class '_(?:core_)?C\.\w+', but it does not exist",
            # an op missing from vLLM's compiled library (a quantized op is the quantization's)
            r"'_OpNamespace' '_C(?:_cache_ops)?' object has no attribute '(?P<op>\w+)'",
            # vLLM's own verdict when a compiled op is missing (_custom_ops, 0.4 .. 0.6)
            r"Possibly you have built or installed an obsolete version of vllm",
        ],
        "A compiled library (vLLM's kernels, flash-attn, or another extension) does not match "
        "the installed PyTorch / CUDA (undefined symbol[[ {symbol}]]): the environment is "
        "broken, not the model or its settings. Reinstall vLLM and its extensions from one "
        "matching release (a fresh venv or the vLLM docker image), or uninstall the extension "
        "that was built for another torch.",
        "broken install[[: undefined symbol {symbol}]][[: {arch} could not be imported]]"
        "[[: compiled op {op} missing]]",
    ),
    _rule(
        "unsupported_model",
        "unknown",
        3,
        (
            "are not supported for now",
            "is not supported for now",
            "does not recognize this arch",
            "are not supported on",
            "GGUF model with architecture",
        ),
        [
            # also a platform's own list ("... are not supported on Neuron for now")
            r"Model architectures? \[?(?P<arch>[^\]]*?)\]? (?:are|is) not supported "
            r"(?:on (?P<platform>\w+) )?for now",
            # vLLM's GGUF loader: the file's architecture has no mapping to a vLLM model
            r"GGUF model with architecture (?P<arch>[\w\-]+) is not supported",
            r"model type `(?P<model_type>[\w\-]+)` but Transformers does not recognize this "
            r"architecture",
            r"does not recognize this architecture",
        ],
        "This vLLM / transformers does not know the model architecture[[ {arch}]]"
        "[[ (model type {model_type})]][[ on {platform}]]: upgrade vLLM (and transformers) to a "
        "release that supports it, or set trust_remote_code if the model ships its own code.",
        "model architecture not supported[[: {arch}]]",
    ),
    _rule(
        "model_type_unknown",
        "unknown",
        2,
        ('CONFIG_MAPPING[config_dict["model_type"]]',),
        # transformers' AutoConfig looking the checkpoint's model_type up (the frame's source
        # line, in every release since 4.x): the KeyError it raises there comes before its "does
        # not recognize this architecture" ValueError (unsupported_model's), and a traceback cut
        # between the two shows only this
        [r'CONFIG_MAPPING\[config_dict\["model_type"\]\]'],
        "The installed transformers does not know the checkpoint's model type (AutoConfig's "
        "lookup of config.json's model_type failed): upgrade vLLM (and transformers) to a "
        "release that supports the model, or set trust_remote_code if the model ships its own "
        "code.",
        "model type not known to transformers",
    ),
)
