"""Rules, part 5: the host's environment refused the server (a thread or file limit, a missing
module, package or shared library, a full or read-only disk).

Each is ``unknown`` (no label of its own: the fix is on the host, not in vLLM's settings), but
it names the cause and what to change. The patterns are failure lines (mostly the exception's
type first): the same words in a warning or a debug line are no failure. Most words are the C
library's / CPython's / the dynamic loader's, the same under every vLLM version.
"""

from __future__ import annotations

from kimi_ops.diagnose.model import Rule, _rule

#: An exception line: its type (dotted or not) first, then its message.
_EXC = r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b:?.*?"

HOST_RULES: tuple[Rule, ...] = (
    _rule(
        "host_thread_limit",
        "unknown",
        3,
        ("ThreadPoolBuildError", "thread: Resource temporarily unavailable"),
        # the host refused a new thread (EAGAIN: a ulimit -u / pids cgroup limit, or too many
        # threads already): a tokenizer's rayon pool, Ray's C++ threads
        [
            r"ThreadPoolBuildError\b.*Resource temporarily unavailable",
            r"\bthread: Resource temporarily unavailable\b",
        ],
        "The host refused to start a thread (Resource temporarily unavailable, EAGAIN): the "
        "process or container hit its thread / process limit (ulimit -u, the pids cgroup "
        "limit of docker or Kubernetes) or the host is out of them. Raise the limit (docker "
        "--pids-limit, ulimit -u) or run fewer workers / tokenizer threads "
        "(RAYON_NUM_THREADS, TOKENIZERS_PARALLELISM=false).",
        "the host refused a new thread (thread / process limit)",
    ),
    _rule(
        "module_not_found",
        "unknown",
        3,
        ("Error while finding module specification", ": No module named "),
        # `python -m X` whose module this python does not have (a renamed entry point, or vLLM
        # not installed in that python): the interpreter exits before anything starts. Python
        # says "python: No module named X" (the real CPU engine's venv, 3.11), or, when a
        # parent package is missing, "Error while finding module specification for 'X'"
        [
            r"Error while finding module specification for '(?P<module>[\w.]+)'"
            r"(?: \(ModuleNotFoundError: (?P<why>[^)]*)\))?",
            r"^\S*python[\d.]*: No module named (?P<module>[\w.]+)$",
        ],
        "`python -m {module}` found no such module in this python[[ ({why})]]: check the entry "
        "point's name for this vLLM version (vllm.entrypoints.openai.api_server, or `vllm "
        "serve`) and that vLLM is installed in the profile's python.",
        "no module {module} in this python",
    ),
    _rule(
        "command_not_found",
        "unknown",
        3,
        ("command not found", ": not found", "executable file not found"),
        # the shell (bash, sh, zsh) or the container runtime found no such program: vLLM (or
        # its python) is not installed in that environment, or not on its PATH
        [
            r"^(?:\S+: )?(?:line \d+: )?(?P<command>[\w.\-]+): command not found$",
            r"^(?:\S+: )?\d+: (?P<command>[\w.\-]+): not found$",
            r"^zsh: command not found: (?P<command>[\w.\-]+)$",
            r"exec: \\?\"(?P<command>[\w./\-]+)\\?\": executable file not found in \$PATH",
        ],
        "The shell found no program {command}: it is not installed in that environment, or "
        "not on its PATH (a venv not activated, an image without it). Install vLLM in the "
        "profile's python (or activate its venv) and launch it by that python's path.",
        "no program {command} on the PATH",
    ),
    _rule(
        "python_module_missing",
        "unknown",
        3,
        ("ModuleNotFoundError", "Please install"),
        # the server (or a library it imports) imports a module its environment does not
        # have: a dependency missing, or one whose version moved the module (an install whose
        # packages do not match: "No module named 'compressed_tensors.compressors.pack_quantized'")
        [
            r"^\s*(?:[\w.]+\.)?ModuleNotFoundError: No module named '(?P<module>[\w.]+)'",
            # vLLM's own words for an optional dependency it lacks ("Please install
            # vllm[fastsafetensors] for fastsafetensors support")
            r"^\s*(?:[\w.]+\.)?ImportError: Please install (?P<module>vllm\[[\w,\-]+\]|[\w\-.]+)",
        ],
        "A Python module the server imports is missing: {module}. The environment is "
        "incomplete or holds versions that do not match vLLM's (a dependency upgraded or "
        "downgraded past the one vLLM was built against): install vLLM with its pinned "
        "requirements in a clean venv or image, or install the package that provides "
        "{module} at the version vLLM asks for.",
        "Python module {module} missing",
    ),
    _rule(
        "shared_library_missing",
        "unknown",
        3,
        ("cannot open shared object file", "cannot found", "cannot be found"),
        # the dynamic loader found no such library: the CUDA runtime / driver library (libcuda,
        # libcudart, libcudnn), libnuma for the CPU build... absent or not on the search path;
        # or a library's own search for one failed (Triton's "AssertionError: libcuda.so cannot
        # found! Possible files are located at [...]. Please create a symlink")
        [
            _EXC + r"\b(?P<library>[\w.+\-]+\.so(?:\.[\d.]+)?): cannot open shared object file",
            _EXC + r"\b(?P<library>lib[\w+\-]+\.so(?:\.[\d.]+)?) cannot (?:be )?found\b",
        ],
        "A shared library the server loads is not on the host[[ ({library})]]: the dynamic "
        "loader could not find it. Install the package that provides it (the CUDA runtime / "
        "driver libraries for libcuda / libcudart / libcudnn, libnuma1 for libnuma), or put "
        "its directory on LD_LIBRARY_PATH in the profile's env; the vLLM docker image has them.",
        "shared library missing[[: {library}]]",
    ),
    _rule(
        "package_not_installed",
        "unknown",
        3,
        ("pip install", "lease install", "not installed", "to be installed", "following error"),
        # an import that failed with install instructions: an optional dependency of a
        # feature, a kernel library or a parser that this environment lacks (vLLM's own
        # words in 0.4 .. 0.32: "tilelang is required for mhc but is not installed. Install
        # it with `pip install tilelang`")
        [
            r"^(?:[\w.]+\.)?(?:ImportError|ModuleNotFoundError): (?P<what>.*?(?:\bpip install\b|"
            r"[Pp]lease install\b|\bnot installed\b|\bto be installed\b).*?)\.?$",
            # transformers' lazy import of a model's module failing (the reason follows on
            # the next lines: a missing flash_attn, a broken extension)
            r"^(?:[\w.]+\.)?RuntimeError: Failed to import (?P<what>[\w.]+) because of the "
            r"following error",
            # vLLM's CLI logging it before it exits (0.32: "--omni flag requires a valid
            # instance of vllm-omni to be installed."; "tpu_inference not found, please install
            # tpu_inference to run vllm on TPU")
            r"(?P<what>--[\w-]+ flag requires a valid instance of [\w.-]+ to be installed)",
            r"(?P<what>[\w.-]+ not found, please install [\w.-]+ to run vllm on \w+)",
        ],
        "A package the server imports is missing or broken: {what}. The environment lacks an "
        "optional dependency of a feature, kernel or parser the profile uses (the lines before "
        "say which): install it in the profile's python (the version vLLM's requirements pin), "
        "or turn the feature off.",
        "package missing or broken: {what}",
    ),
    _rule(
        "python_headers_missing",
        "unknown",
        3,
        ("Python.h",),
        # a JIT build (Triton's / inductor's C helper, a torch extension) needs the headers of
        # this Python, which the host lacks
        [r"fatal error: Python\.h: No such file or directory"],
        "A kernel is compiled at startup (Triton / torch.compile build a C helper) and this "
        "Python's headers are not on the host (Python.h): install the dev package of the "
        "profile's Python (python3-dev / python3.X-dev, or the headers of a conda or pyenv "
        "build), or use the vLLM docker image.",
        "Python headers (Python.h) missing for a kernel build",
    ),
    _rule(
        "disk_full",
        "unknown",
        3,
        ("No space left on device", "Disk quota exceeded"),
        # a full disk (the Hugging Face cache, the compile caches, the log's own disk), or the
        # user's quota on it (EDQUOT, errno 122, on a cluster's shared file system); a full
        # /dev/shm is nccl_shm's (it ranks higher)
        [_EXC + r"(?:No space left on device|Disk quota exceeded)(?:: '(?P<path>[^']+)')?"],
        "A disk on the host is full, or the user's quota on it is used up (No space left on "
        "device / Disk quota exceeded[[: {path}]]): the model download, the compile caches or "
        "the logs could not be written. Free space there (`df -h`, `quota -s`; old "
        "checkpoints in the Hugging Face cache, ~/.cache/vllm), or point HF_HOME / "
        "VLLM_CACHE_ROOT in the profile's env to a disk with room.",
        "disk full[[: {path}]]",
    ),
    _rule(
        "read_only_filesystem",
        "unknown",
        3,
        ("Read-only file system",),
        [_EXC + r"\[Errno 30\] Read-only file system(?:: '(?P<path>[^']+)')?"],
        "The server tried to write to a read-only file system[[ ({path})]]: a container whose "
        "cache directory is mounted read-only, or a read-only home. Point HF_HOME / "
        "VLLM_CACHE_ROOT / XDG_CACHE_HOME in the profile's env to a writable directory.",
        "read-only file system[[: {path}]]",
    ),
    _rule(
        "open_files_limit",
        "unknown",
        3,
        ("Too many open files",),
        # the process hit its open-file limit (ulimit -n): sockets, shared memory, shards
        [_EXC + r"Too many open files"],
        "The server hit its open-file limit (Too many open files): raise it for the process "
        "(`ulimit -n 65536` in the launch script, docker --ulimit nofile=65536:65536, the "
        "systemd unit's LimitNOFILE), then redeploy.",
        "open-file limit reached (ulimit -n)",
    ),
    _rule(
        "import_failed",
        "unknown",
        3,
        ("ImportError",),
        # any other import that failed: packages whose versions do not fit together ("Numba
        # needs NumPy 2.2 or less"), a name moved between releases; not Python's own noise at
        # exit ("sys.meta_path is None")
        # (an undefined symbol, a missing library or package is a more specific rule's)
        [
            r"^(?:[\w.]+\.)?ImportError: (?!sys\.meta_path is None)"
            r"(?!.*(?:undefined symbol|cannot open shared object|[Pp]lease install|pip install|"
            r"not installed))(?P<what>.+)"
        ],
        "An import failed: {what}. The environment's packages do not fit together (versions "
        "outside what vLLM pins, a package half upgraded): install vLLM with its pinned "
        "requirements in a clean venv or image.",
        "import failed: {what}",
        weak=True,  # an optional import that failed and was survived is no failure
        fatal_at_end="traceback",  # a traceback ending in it: the program stopped on it
    ),
)
