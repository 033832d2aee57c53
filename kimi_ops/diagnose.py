"""Diagnose a vLLM server log: is it starting, healthy, or why did it fail?

Pure core: no I/O, no processes, no network. The caller feeds log text (whole, or in
chunks as it arrives over SSH) and gets a :class:`Diagnosis` with a label, the last
startup stage reached, the evidence lines, and a concrete hint.

Design
------
* The failure signatures are data: :data:`RULES` is a table of :class:`Rule` (label,
  priority, regexes, hint template, literal keywords). Stage markers and fact
  extractors are small tables too.
* Speed: a chunk is not scanned line by line in Python. A few trigger words (every
  exception line holds ``Error``/``Exception``; stage lines have their own words) are
  found with one ``re`` scan whose only literal prefix is a byte that ``bytes.translate``
  put in place of every trigger word's first character, plus a couple of ``str.find``
  needles. Only those lines are cleaned and matched, so a 200 MB log takes seconds.
* Ordering decides, not mere presence: a failure counts only after the last "server is
  up" marker (an error after ``Application startup complete.`` still wins); wrappers
  (``Engine core initialization failed``...) lose to any specific cause; a bare
  traceback is "unknown" unless startup progressed after it; after a post-startup
  shutdown (Ctrl-C) nothing counts; a new ``vLLM API server version`` starts a new run.
* Structured facts over sentences: an exception type and message, "engine core exited
  unexpectedly" with no exception (an inferred SIGKILL), "exit code: -N" (a signal's
  name), "Maximum concurrency ... 0.x" (a KV shortfall once the engine dies), the route
  list / "Started server process" (up), a traceback through vLLM's own code (the engine
  died of an exception: ``engine_dead_other``, not ``unknown``).
* Lifecycle beside the cause (:attr:`Diagnosis.lifecycle`): a SIGTERM / Ctrl-C stop of a
  server that was up (the whole tree or only the API server) is ``healthy`` + ``stopped``:
  the teardown errors after the stop (EngineDeadError, killed workers) do not count.
* Streaming: :class:`LogDiagnoser` keeps a small state (first hit per rule, facts,
  stage, a few error lines) plus a tail of the last lines; feeding a log in any split
  gives exactly the same diagnosis as feeding it whole.
* Robustness: prefixes (``(APIServer pid=1)``, ``[rank0]:``, docker-compose
  ``svc-1  | ``, timestamps, markdown ``> ``, ANSI colours) are stripped before
  matching; ``\\r`` tqdm updates are separate lines; a hard-wrapped line is also
  matched joined with its continuation; request-log lines (which quote user prompts)
  are ignored.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = [
    "FAILURE_LABELS",
    "LABELS",
    "LIFECYCLES",
    "RULES",
    "STAGES",
    "Diagnosis",
    "LogDiagnoser",
    "Rule",
    "clean_line",
    "diagnose",
]

LABELS: tuple[str, ...] = (
    "starting",
    "healthy",
    "kv_cache_dtype_unsupported",
    "cuda_oom",
    "kv_cache_insufficient",
    "port_in_use",
    "nccl_error",
    "bad_argument",
    "model_not_found",
    "trust_remote_code",
    "unsupported_gpu",
    "quantization_unsupported",
    "engine_killed",
    "engine_dead_other",
    "unknown",
)
#: Where the server is in its life, beside the cause: see :attr:`Diagnosis.lifecycle`.
LIFECYCLES: tuple[str, ...] = ("starting", "serving", "stopped", "failed")
FAILURE_LABELS: frozenset[str] = frozenset(LABELS) - {"starting", "healthy"}

#: Startup stages in order (facts.md section 4). ``(name, description)``.
STAGES: tuple[tuple[str, str], ...] = (
    ("api_server_starting", "API server process started (version / arguments printed)"),
    ("initializing_engine", "engine process initialising (config, devices, distributed)"),
    ("loading_model", "starting to load the model"),
    ("loading_shards", "loading checkpoint shards"),
    ("weights_loaded", "model weights loaded"),
    ("compiling", "torch.compile / kernel compilation (may be silent for minutes)"),
    ("kv_cache_allocated", "GPU memory profiled, KV cache allocated"),
    ("cuda_graphs", "capturing CUDA graphs"),
    ("engine_initialized", "engine initialised (profile, KV cache, warm-up done)"),
    ("server_starting", "HTTP server starting, routes listed"),
    ("ready", "application startup complete, serving requests"),
)
_STAGE_INDEX: dict[str, int] = {name: i for i, (name, _) in enumerate(STAGES)}
_STAGE_DESC: dict[str, str] = dict(STAGES)
_HEALTHY_STAGE = _STAGE_INDEX["server_starting"]

TAIL_LINES = 250
_MAX_TAIL_LINE = 2000
_MAX_EVIDENCE = 500
_MAX_PENDING = 4 * 1024 * 1024
_SLICE = 4 * 1024 * 1024  # feed() works on at most this much text at a time
_WRAP_MIN = 60  # a line this long may have been hard-wrapped by a terminal / paste
#: Every line that starts in the first this many characters of a log is analysed, not only
#: the trigger lines: an excerpt pasted into an issue is small, and its one telling line
#: may hold none of the trigger words. Past it, the trigger scan keeps big logs fast.
_FULL_SCAN = 64 * 1024


# --------------------------------------------------------------------------- cleaning

_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
#: Colour codes pasted in caret notation (``^[[0;36m``), as terminals copy them.
_CARET_ANSI_RE = re.compile(r"\^\[\[[0-?]*[ -/]*[@-~]")
_PREFIX_RE = re.compile(  # one or more decorations at the start of a line
    r"""^(?:
        [ \t]*>+[ ]?                                          # markdown quote
      | (?:\[[\w.\-]+\]|[\w.\-]+)[ ]+\|[ ]?                  # docker compose "svc-1  | "
      | \[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ ]?  # ISO
      | \w{3,4}\.?[ ]+\d{1,2}[ ]\d\d:\d\d:\d\d[ ]\S+[ ][\w.\-/]+(?:\[\d+\])?:[ ]  # syslog
      | [│┃][ ]*                                              # k9s / kubectl box border
      | \[pod/[\w.\-]+/[\w.\-]+\][ ]                          # kubectl logs --prefix
      | \((?:[^()\s]+[ ])*?pid=\d+[^()]*\)[ ]?               # (APIServer pid=1)
      | \[rank\d+\]:[ ]?                                      # torch rank prefix
      | \[[A-Za-z]+\][ ]                                     # "[Info] " level tags
      | \((?:Process|stdout|stderr)\)[ ]                       # launcher stream tags
      | \|[ ](?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ ]\|[ ][\w.\-]+[ ]\|[ ]  # FastChat
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)            # level ...
        (?::[ ]+
          |[ ]+(?=\d\d-\d\d[ ]|\d{4}-\d\d|\[[\w.\-/]+\.py:\d+\]|[\w.\-/]+\.py:\d+\]))
        (?:\d{2,4}-\d\d(?:-\d\d)?[ ]\d\d:\d\d:\d\d(?:[.,]\d+)?[ ]+)?   # ... timestamp
        (?:\[?[\w.\-/]+\.py:\d+\][ ]?)?                               # ... [file.py:12]
    )+""",
    re.X,
)
_GLUED_RE = re.compile(r"\((?:[^()\s]+ )*?pid=\d+[^()]*\) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def clean_line(line: str) -> str:
    """Return the message of one log line, without decoration.

    Strips ANSI colour codes and, repeatedly, leading markdown ``>`` quote marks,
    docker-compose ``service-1  | `` prefixes, ISO / bracketed / syslog timestamps,
    process prefixes (``(APIServer pid=1)``, ``(EngineCore_DP0 pid=2)``,
    ``(VllmWorker rank=3 pid=4)``), ``[rank0]:``, and the vLLM / uvicorn level prefix
    (``INFO 03-20 14:02:11 [file.py:12] ``, ``ERROR:    ``). Traceback indentation is
    kept. A log record glued after a tqdm bar (no newline between them) is cut out; a
    leading Ctrl-C echo ``^C`` is kept as ``"^C "``.
    """
    s = line
    if "\x1b" in s:
        s = _ANSI_RE.sub("", s)
    if "^[[" in s:
        s = _CARET_ANSI_RE.sub("", s)
    s = s.rstrip()
    if s.startswith("^C") and len(s) > 2:  # Ctrl-C echoed before a record: keep the mark
        return "^C " + clean_line(s[2:])
    if s.endswith(("│", "┃")):
        s = s[:-1].rstrip()
    m = _PREFIX_RE.match(s)
    if m is not None:
        s = s[m.end() :]
    if "pid=" in s:
        g = _GLUED_RE.search(s)
        if g is not None and g.start() > 0:
            return clean_line(s[g.start() :])
    return s


# --------------------------------------------------------------------------- rules


def _compile_all(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


@dataclass(frozen=True)
class Rule:
    """One failure signature.

    ``patterns`` decide the label (any one matching a cleaned line is a hit);
    ``keywords`` are literal substrings, at least one of which every matching line
    contains (a cheap prefilter: the regexes only run on lines that hold a keyword);
    ``exclude`` vetoes a hit; ``extract`` pulls extra named groups for the hint.
    ``hint`` / ``summary`` are ``str.format``-style templates (``{port}``) filled from
    the named groups, the facts found in the log and the caller's context; a part in
    ``[[...]]`` is dropped unless all its fields are known, ``[[a||b]]`` falls back to
    ``b``. A ``weak`` rule (a warning, not an error) only counts when a crash follows.
    Among hits after the last "server up" marker the highest ``priority`` wins.
    """

    label: str
    priority: int
    patterns: tuple[re.Pattern[str], ...]
    hint: str
    name: str = ""
    summary: str = ""
    keywords: tuple[str, ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()
    extract: tuple[re.Pattern[str], ...] = ()
    weak: bool = False
    _kwset: frozenset[str] = field(init=False, repr=False, compare=False, default=frozenset())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_kwset", frozenset(self.keywords))

    def match(self, text: str, present: Collection[str] | None = None) -> dict[str, str] | None:
        """Match one cleaned line; return its named groups, or None if no hit.

        ``present`` (optional) is the set of keywords known to occur in ``text``.
        """
        if present is None:
            if not any(k in text for k in self.keywords):
                return None
        elif self._kwset.isdisjoint(present):
            return None
        return self._search(text)

    def _search(self, text: str) -> dict[str, str] | None:
        """``match`` without the keyword prefilter."""
        for ex in self.exclude:
            if ex.search(text):
                return None
        for pat in self.patterns:
            m = pat.search(text)
            if m is None:
                continue
            groups = {k: v for k, v in m.groupdict().items() if v}
            for ext in self.extract:
                em = ext.search(text)
                if em is not None:
                    for k, v in em.groupdict().items():
                        if v and k not in groups:
                            groups[k] = v
            return groups
        return None


def _rule(
    name: str,
    label: str,
    priority: int,
    keywords: tuple[str, ...],
    patterns: Iterable[str],
    hint: str,
    summary: str,
    *,
    extract: Iterable[str] = (),
    exclude: Iterable[str] = (),
    weak: bool = False,
) -> Rule:
    return Rule(
        label=label,
        priority=priority,
        patterns=_compile_all(patterns),
        hint=hint,
        name=name,
        summary=summary,
        keywords=keywords,
        exclude=_compile_all(exclude),
        extract=_compile_all(extract),
        weak=weak,
    )


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
_GIB = r"[KMGT]i?B"

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- bad_argument
    _rule(
        "argparse_error",
        "bad_argument",
        100,
        (": error: ",),
        [
            r": error: (?P<argerr>(?:unrecognized arguments?|the following arguments are "
            r"required|ambiguous option|argument |invalid choice|unexpected argument|"
            r"expected one argument|one of the arguments).*)"
        ],
        "vLLM's argument parser rejected the command line: {argerr}. Fix the profile's "
        "extra_args[[ (now: {extra_args})]][[ - offending: {bad_args}]]: the flag may be "
        "misspelt, removed or renamed in this vLLM version[[ ({vllm_version})]] (e.g. "
        "--disable-log-requests became --no-enable-log-requests), or given a bad value."
        "[[ {serve_note}]]",
        "vLLM rejected its arguments: {argerr}",
        extract=[
            r"unrecognized arguments?: (?P<bad_args>.+?)\s*$",
            r"argument (?P<bad_args>-[-\w/]+)",
            r"ambiguous option: (?P<bad_args>\S+)",
        ],
    ),
    _rule(
        "invalid_option_value",
        "bad_argument",
        98,
        ("invalid tool call parser", "invalid reasoning parser", " requires --", " requires `--"),
        [
            r"invalid (?P<option>tool call|reasoning) parser:? '?(?P<bad_value>[\w\-.]+)",
            r"^[\w.]*(?:Error|Exception)\b.*?(?P<bad_args>--[\w-]+)`? requires `?--[\w-]+",
        ],
        "vLLM rejected an option value[[ ({option} parser '{bad_value}')]][[ ({bad_args})]]: "
        "this vLLM version[[ ({vllm_version})]] does not know it or needs another flag with it."
        " Fix the profile's extra_args[[ (now: {extra_args})]] or upgrade vLLM (the kimi_k2 "
        "tool-call and reasoning parsers need a recent release).",
        "invalid option value[[: {option} parser {bad_value}]][[: {bad_args}]]",
    ),
    _rule(
        "parallel_size_mismatch",
        "bad_argument",
        97,
        ("divisible by",),
        [
            r"(?P<what>[\w ]+?) \(?(?P<count>\d+)?\)? (?:must|should) be divisible by "
            r"(?P<option>tensor|pipeline)[ _]parallel[ _]size(?: \((?P<size>\d+)\))?",
            r"is not divisible by (?P<option>tensor|pipeline)[ _]parallel[ _]size",
        ],
        "The model cannot be split over {option}_parallel_size[[ {size}]][[: {what} ({count}) "
        "must be divisible by it]]. Pick a {option}_parallel_size that divides it (e.g. 1, 2, "
        "4) in the profile, or another model.",
        "{option}_parallel_size[[ {size}]] does not divide the model[[ ({what} {count})]]",
    ),
    _rule(
        "unexpected_engine_kwarg",
        "bad_argument",
        96,
        ("unexpected keyword argument",),
        [
            r"(?P<where>(?:Async)?EngineArgs|LLM|\w*Config)(?:\.__init__)?\(\) got an unexpected "
            r"keyword argument '(?P<bad_args>\w+)'"
        ],
        "This vLLM[[ ({vllm_version})]] has no option '{bad_args}' ({where} rejected it): it "
        "was renamed or removed, or is newer than this version. Fix the profile's extra_args"
        "[[ (now: {extra_args})]] or the engine arguments, or install the vLLM version they "
        "were written for.",
        "unknown engine option {bad_args}",
    ),
    _rule(
        "quantization_arg_mismatch",
        "bad_argument",
        96,
        ("does not match the quantization method",),
        [
            r"model config \((?P<quantization>[\w\-]+)\) does not match the quantization method "
            r"specified in the `?quantization`? argument \((?P<bad_value>[\w\-]+)\)"
        ],
        "--quantization {bad_value} contradicts the checkpoint's own quantization "
        "({quantization}): drop --quantization from the profile's extra_args[[ (now: "
        "{extra_args})]] (vLLM reads it from the checkpoint) or set it to {quantization}.",
        "--quantization {bad_value} does not match the checkpoint ({quantization})",
    ),
    _rule(
        "argparse_usage",
        "bad_argument",
        60,
        ("usage: ",),
        [r"^usage: \S*(?:vllm|api_server)\S*(?: serve)? \[-h\]"],
        "vLLM printed its usage: its argument parser rejected the command line (the excerpt "
        "is cut before the error line). Fix the profile's extra_args[[ (now: {extra_args})]]: "
        "a flag may be misspelt, removed or renamed in this vLLM version[[ ({vllm_version})]].",
        "vLLM rejected its arguments (usage printed)",
    ),
    _rule(
        "max_model_len_too_large",
        "bad_argument",
        50,
        ("User-specified max_model_len",),
        [
            r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than the "
            r"derived max_model_len(?: \((?P<derived>[^)]*)\))?"
        ],
        "--max-model-len[[ {max_model_len}]] is larger than the model supports[[ ({derived})]]:"
        " lower max_model_len in the profile (only set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the "
        "model really supports more, e.g. with RoPE scaling).",
        "max_model_len[[ {max_model_len}]] exceeds the model's maximum",
    ),
    # ---------------------------------------------------- kv_cache_dtype_unsupported
    _rule(
        "fp8_kv_cache_unsupported",
        "kv_cache_dtype_unsupported",
        95,
        (
            "KV cache not",
            "kv cache not",
            "Triton MLA not",
            "FP8 KV cache",
            "fp8 KV cache",
            "only supports",
        ),
        [
            r"(?:(?P<backend>[A-Za-z][\w\-]*?)(?: V\d)? )?with FP8 KV cache (?:is )?no(?:t "
            r"(?:yet )?supported|t?$)",  # also cut short by the excerpt
            r"(?P<backend>FP8 Triton MLA) not yet supported",
            r"^[\w.]*(?:Error|Exception)\b.*(?i:(?:fp8|quantized) kv[ _-]?cache (?:is )?not "
            r"(?:yet )?(?:supported|implemented)|does not support (?:an? )?(?:fp8|quantized) "
            r"kv[ _-]?cache)",
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
            r"\[\s*'?kv_cache_dtype not supported'?\s*\]",
            # the selector's reasons list re-indented one reason per line
            r"^\s*(?:\w+: \[\s*)?'?kv_cache_dtype not supported'?\s*,?\s*\]?,?$",
        ],
        "No attention backend accepts the KV-cache dtype[[ {kv_cache_dtype}]] on this GPU"
        "[[ (vLLM {vllm_version})]]. " + _KV_FIX,
        "no attention backend supports kv_cache_dtype[[ {kv_cache_dtype}]]",
        extract=[
            r"kv_cache_dtype=(?P<kv_cache_dtype>\w+)",
            r"(?P<backend>\w+): \[\s*'?kv_cache_dtype not supported'?\s*\]",
        ],
    ),
    _rule(
        "kv_cache_dtype_rejected",
        "kv_cache_dtype_unsupported",
        93,
        ("Unsupported data type of kv cache", "nsupported kv cache", "nsupported KV cache"),
        [
            r"Unsupported data type of kv cache:? '?(?P<kv_cache_dtype>\w+)",
            r"(?i:unsupported kv[ _-]?cache (?:data ?type|dtype)[: ]+'?(?P<kv_cache_dtype>\w+))",
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
    # ----------------------------------------------------------- trust_remote_code
    _rule(
        "trust_remote_code",
        "trust_remote_code",
        90,
        (
            "custom code",
            "requires you to execute",
            "trust_remote_code=True",
            "trust-remote-code",
            "resolve_trust_remote_code",
        ),
        [
            r"contains custom code (?:which|that) must be executed",
            r"requires you to execute the (?:\w+ )?(?:file|code)",
            r"(?:pass the argument|set the option|consider setting|Please pass) "
            r"`?trust_remote_code=True`?",
            r"Failed to load the model config.*trust[_-]remote[_-]code",
            r"(?:, in |= )resolve_trust_remote_code\b",
        ],
        "The model[[ {model}]] ships custom Python code: set `trust_remote_code: true` in the "
        "profile (adds --trust-remote-code) and redeploy.",
        "the model needs trust_remote_code",
        extract=[r"(?:Loading|repository for) (?P<model>\S+?)/? (?:requires|contains)"],
    ),
    # ------------------------------------------------------------- model_not_found
    _rule(
        "model_not_found",
        "model_not_found",
        85,
        (
            "Invalid repository ID",
            "does not appear to have a file named",
            "HFValidationError",
            "Repo id must",
            "RepositoryNotFoundError",
            "Repository Not Found",
            "is not a local folder",
            "Client Error",
            "GatedRepoError",
            "gated repo",
            "Can't load the configuration",
            "Incorrect path_or_model_id",
            "LocalEntryNotFoundError",
            "We couldn't connect to",
            "OfflineModeIsEnabled",
            "Client Error",
            "No supported config format",
            "Could not detect config format",
            "config.json",
            "is restricted",
        ),
        [
            r"Invalid repository ID or local directory specified:? '?(?P<model>[^'\s]+)?",
            r"^[\w.]*(?:Error|Exception)\b.*?(?:(?P<model>\S+) )?does not appear to have a file "
            r"named (?P<missing_file>(?:config|params)\.json|[\w.\-]+\.(?:safetensors|bin|gguf))",
            r"^(?:[\w.]+\.)?HFValidationError\b",
            r"Repo id must (?:be in the form|use alphanumeric)",
            r"RepositoryNotFoundError|Repository Not Found for url",
            r"'?(?P<model>[^'\s]+?)'? is not a local folder and is not a valid model identifier",
            r"40[13] Client Error.*huggingface",
            r"404 Client Error.*(?:Repository Not Found|/config\.json|/params\.json)",
            r"GatedRepoError|Cannot access gated repo|Access to model \S+ is restricted",
            r"Can't load the configuration of '(?P<model>[^']+)'",
            r"Incorrect path_or_model_id:? '(?P<model>[^']+)'",
            r"^(?:[\w.]+\.)?LocalEntryNotFoundError\b",
            r"^(?:[\w.]+\.)?OfflineModeIsEnabled\b",
            r"^(?:[\w.]+\.)?HTTPError: 40[13] Client Error",
            r"^[\w.]*(?:Error|Exception)\b.*We couldn't connect to '?https://huggingface\.co",
            r"No supported config format found in (?P<model>\S+)",
            r"Could not detect config format",
            r"(?:No such file or directory|FileNotFoundError).*'(?P<model>[^']*?)/config\.json'",
        ],
        "vLLM could not find or load the model[[ '{model}']]. Check the `model` path in the "
        "profile: a directory on the GPU host containing config.json and the weights, or a "
        "valid Hugging Face repo id; for Hub downloads also check HF_TOKEN (gated repos) and "
        "the host's network access.",
        "model not found or not accessible[[: {model}]]",
    ),
    # ------------------------------------------------------------ unsupported_gpu
    _rule(
        "no_kernel_image",
        "unsupported_gpu",
        80,
        ("no kernel image", "NoKernelImage", "invalid device function", "InvalidDeviceFunction"),
        [
            r"no kernel image is available for execution on the device",
            r"cudaErrorNoKernelImageForDevice",
            r"(?:HIP|CUDA) error: invalid device function|hipErrorInvalidDeviceFunction",
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
            # only this error
            r"\b_check_if_gpu_supports_dtype\b",
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
        ),
        [
            r"(?i:quantization method|quantization scheme) ?(?P<quantization>\w*) is not "
            r"supported for\W*the current GPU",
            r"(?P<quantization>[\w\-]+(?: [\w\-]+)?) (?i:quantization) is not supported on GPUs "
            r"with",
            r"(?P<quantization>\w*[Mm]arlin\w*) does not support weight_bits",
            r"Only types = \[\] are supported",
            # a traceback through compressed-tensors' capability check (message cut off): it
            # raises only "Quantization scheme is not supported for the current GPU"
            r"\b_check_scheme_supported\b",
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
            "Ampere GPUs or newer",
            "on CUDA arch",
            "gpu-name",
            "capability not supported",
            "does not support this kernel",
            "nsupported GPU",
            "this GPU",
            "current GPU",
            "requires sm",
            "requires SM",
            "CUDA capability",
            "no longer supports this GPU",
        ),
        [
            r"GPUs? with compute capability (?:below|less than|<) ?[\d.]+ (?:are|is) not supported",
            r"No compiled \w+ for a compute capability",
            r"current device does not support this kernel",
            r"FlashAttention only supports Ampere GPUs or newer",
            r"No valid attention backend.*\[\s*'?compute capability not supported'?\s*\]",
            # the selector's reasons list re-indented one reason per line
            r"^\s*(?:\w+: \[\s*)?'?compute capability not supported'?\s*,?\s*\]?,?$",
            # PyTorch's import-time check: no kernels of this build run on the GPU
            r"PyTorch no longer supports this GPU because it is too old",
            r"is not supported on CUDA arch",
            r"Value 'sm_(?P<sm>\d+a?)' is not defined for option 'gpu-name'",
            r"^[\w.]*(?:Error|Exception)\b.*(?i:compute capability\s+\S+\s+(?:is\s+)?not\s+"
            r"supported|unsupported (?:GPU|compute capability|CUDA arch)|not supported on "
            r"(?:GPUs? with (?:compute|CUDA) capability|this GPU|the current GPU)|requires "
            r"(?:a GPU with )?(?:compute capability|CUDA capability|sm_?\d+|SM ?\d+))",
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
            "Unknown quantization method",
            "with arguments from the",
            "for quantization method",
            "-bit weight quantization is supported",
            "-bit quantization is supported",
            "not supported on CPU",
            "not supported for CPU",
        ),
        [
            r"Failed to find a kernel that can implement the (?P<quantization>[\w\-]+) "
            r"(?:linear|MoE|moe)",
            r"(?P<quantization>[\w\-]+) quantization is (?:currently )?not supported "
            r"(?:in|on|for|by) (?P<platform>[\w\-]+)",
            r"Unknown quantization method:? '?(?P<quantization>[\w\-]+)",
            r"Could not run '\w*::\w*(?i:quant|fp8|fp4|marlin|gptq|awq)\w*' with arguments from "
            r"the '(?P<platform>\w+)' backend",
            r"is not supported for quantization method (?P<quantization>[\w\-]+)",
            r"only (?P<bits>\d+)-bit (?:weight )?quantization is supported for "
            r"(?P<quantization>[\w\-]+)",
            r"^[\w.]*(?:Error|Exception)\b.*?(?i:quantiz\w*)\b.*?(?P<platform>CPU|cpu) is not "
            r"supported|^[\w.]*(?:Error|Exception)\b.*?(?i:quantiz\w*).*not supported (?:on|for) "
            r"(?P<platform2>CPU|cpu)",
        ],
        "No kernel for the checkpoint's quantization[[ ({quantization})]] on this "
        "[[{platform}||device]][[ (vLLM {vllm_version})]]: serve a checkpoint in a format this "
        "device runs (on CPU: bf16, or a quantization the CPU build lists, e.g. AWQ/GPTQ "
        "int4 or W8A8 int8; NVFP4 needs a Blackwell GPU), or use hardware and a vLLM build "
        "with a kernel for it.",
        "quantization[[ {quantization}]] not supported on [[{platform}||this device]]",
        exclude=[r"(?i:compute capability|capability[:<>])"],  # quantization_needs_newer_gpu
    ),
    _rule(
        "fp8_type_unsupported_arch",
        "quantization_unsupported",
        83,
        ("not supported in this architecture", "data type is not supported on CUDA arch"),
        [
            r"type (?P<fp8_type>fp8\w+) not supported in this architecture",
            # Triton < 3.x: an assertion in its type conversion
            r"(?P<fp8_type>fp8\w+) data type is not supported on CUDA arch",
        ],
        "This GPU has no native FP8 ({fp8_type}), which the Triton kernel[[ {triton_kernel}]] "
        "needs: FP8 compute needs compute capability 8.9+ (Ada, Hopper, Blackwell). Use a "
        "checkpoint that is not FP8-quantized (bf16, AWQ/GPTQ int4) on this GPU, or a newer GPU.",
        "FP8 ({fp8_type}) not supported on this GPU[[ (kernel {triton_kernel})]]",
    ),
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
        ),
        [
            r"No available memory for the cache blocks",
            r"Available KV cache memory: (?P<kv_cache_gib>-\d[\d.]*) ?GiB",
            r"reserved for KV Cache is (?P<kv_cache_gib>-\d[\d.]*) ?GiB",
            r"Cannot auto-fit max_model_len",
        ],
        "After loading the weights[[ ({model_mem_gib} GiB)]] no GPU memory is left for the KV "
        "cache[[ (available KV cache memory: {kv_cache_gib} GiB)]]. Raise "
        "gpu_memory_utilization[[ (now {gpu_memory_utilization})]], lower max_model_len"
        "[[ (now {max_model_len})]] / max_num_seqs, or spread the model over more GPUs "
        "(tensor_parallel_size); `nvidia-smi` shows whether a stale process holds memory "
        "(`fab kill-stale`).",
        "no GPU memory left for the KV cache[[ ({kv_cache_gib} GiB available)]]",
    ),
    _rule(
        "kv_cache_too_small",
        "kv_cache_insufficient",
        70,
        ("KV cache is needed", "stored in KV cache"),
        [
            r"\(?(?P<needed_gib>[\d.]+) GiB KV cache is needed, which is larger than the "
            r"available KV cache memory \((?P<available_gib>[\d.]+) GiB\)",
            r"KV cache is needed, which is larger than the available",
            r"max seq len \((?P<max_seq_len>\d+)\) is larger than the maximum number of tokens "
            r"that can be stored in KV cache \((?P<kv_tokens>\d+)\)",
            r"is larger than the maximum number of tokens that can be stored in KV cache",
        ],
        "The KV cache cannot hold one request of max_model_len[[ {max_seq_len}]] tokens"
        "[[: it needs {needed_gib} GiB but only {available_gib} GiB is available]]"
        "[[ (it holds {kv_tokens} tokens)]]. Lower --max-model-len[[ to at most {est_max_len}]]"
        " or raise --gpu-memory-utilization[[ (now {gpu_memory_utilization})]].",
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
            "only one usage of each socket address",
        ),
        [
            r"\[Errno (?:98|48|10048)\]",
            r"(?i:address already in use)",
            r"EADDRINUSE",
            r"only one usage of each socket address",
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
        ("less than desired GPU memory utilization",),
        [
            r"Free memory on device(?: \S+)? \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\)"
            r" on startup is less than desired GPU memory utilization "
            r"\((?P<gpu_memory_utilization>[\d.]+), (?P<want_gib>[\d.]+) GiB\)",
            r"is less than desired GPU memory utilization",
        ],
        "Only[[ {free_gib} of {total_gib} GiB of]] GPU memory was free at startup, less than "
        "gpu_memory_utilization[[ {gpu_memory_utilization}]] asks for[[ ({want_gib} GiB)]]: "
        "another process (often a stale vLLM) holds GPU memory. Check `nvidia-smi`, run `fab "
        "kill-stale`, or lower gpu_memory_utilization in the profile.",
        "GPU memory already in use at startup[[ ({free_gib}/{total_gib} GiB free)]]",
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
        ),
        [
            r"(?:CUDA|HIP|XPU|NPU|GPU|cuda|hip) out of memory",
            r"(?i:(?:cuda|hip)(?: driver)? error: out of memory)",
            r"OutOfMemoryError: (?:CUDA|HIP)",
            r"(?i:cuda failure \d* ?'out of memory')",
            r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation",
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
        ),
        [
            r"(?i:NCCL error)",
            r"nccl(?:SystemError|UnhandledCudaError|InternalError|InvalidUsage|RemoteError|"
            r"InvalidArgument)",
            r"Watchdog caught collective operation timeout",
            r"NCCL communicator was aborted",
            r"NCCL timeout",
            # torch.distributed's backend (NCCL / Gloo) error type, also as a C++ abort
            r"\b(?:c10::|torch\.distributed\.)?DistBackendError\b",
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
            "OOMKilled",
            "Exit Code:",
            "Segmentation fault",
            "Aborted",
            "Bus error",
            "Illegal instruction",
            "Floating point exception",
            "Memory access fault by GPU",
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
            # the ROCm (HSA) runtime prints this, then aborts the process
            r"(?P<hsa_fault>Memory access fault by GPU node-\d+)",
            r"(?:^|: )Killed process \d+",  # the kernel's OOM killer (dmesg)
            r"exited with code (?P<exitcode>13[2-79])\b",
            r"Fatal Python error: (?P<shell_signal>Segmentation fault|Aborted|Bus error|Illegal "
            r"instruction|Floating point exception)",
            r"(?P<shell_signal>Segmentation fault|Aborted|Bus error|Illegal instruction|"
            r"Floating point exception) +\(core dumped\)",
            r"(?:received|got|with) (?P<signame>SIGKILL)\b",
            r"\*\*\* (?P<signame>SIG[A-Z]+) received at time=",  # abseil failure handler
            r"killed by signal: (?P<shell_signal>Killed|Segmentation fault|Aborted|Bus error|"
            r"Illegal instruction)",
            r"Signal (?P<signum>\d+) \((?P<signame>SIG[A-Z]+)\) received by PID",  # torchrun
            r"\bOOMKilled\b|Exit Code:\s+(?P<exitcode>13[2-79])\b",  # Kubernetes
            r"(?P<shell_signal>Segfault) encountered",  # torch's c10 handler
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
    # ---------------------------------------------------------- engine_dead_other
    _rule(
        "engine_wrapper",
        "engine_dead_other",
        5,
        (
            "Engine core initialization failed",
            "EngineCore failed to start",
            "died unexpectedly",
            "Engine process failed to start",
            "WorkerProc",
            "Worker failed with error",
            "EngineDeadError",
            "EngineCore encountered",
            "Background loop has errored",
            "Engine loop has died",
            "is already dead",
            "Exception in worker",
            "Error executing method",
            "Executor failed",
            "fatal signal from worker",
        ),
        [
            r"Engine core initialization failed",
            r"EngineCore failed to start",
            r"died unexpectedly",
            r"Engine process failed to start",
            r"WorkerProc (?:failed to start|initialization failed|hit an exception)",
            r"Worker failed with error",
            r"EngineDeadError",
            r"EngineCore encountered (?:a fatal error|an issue)",
            r"Background loop has errored already",
            r"Engine loop has died",
            r"MQLLMEngine is already dead",
            r"Exception in worker \S+ while processing method",
            r"Error executing method",
            r"Executor failed",
            r"(?i:got fatal signal from worker processes)",
        ],
        "The engine died and none of the known causes was recognised. Read the traceback "
        "above the wrapper error[[ - first error: {root_cause}]]; the last log lines show the "
        "context.[[ {extra_hint}]]",
        "engine died[[: {root_cause}]]",
        exclude=[r"[Aa]ctor died"],  # a Ray actor of another framework, not vLLM's engine
    ),
    _rule(
        "engine_traceback",
        "engine_dead_other",
        4,
        ("run_engine_core", "run_mp_engine", "worker_main", "worker_busy_loop"),
        [r", in (?:run_engine_core|run_mp_engine|worker_main|worker_busy_loop)\b"],
        "The engine process crashed with a traceback and none of the known causes was "
        "recognised[[ - first error: {root_cause}]]. Read the traceback; the last log lines "
        "show the context.[[ {extra_hint}]]",
        "engine process crashed[[: {root_cause}]]",
    ),
    # --------------------------------------------- unknown (known, but no own label)
    _rule(
        "no_gpu_platform",
        "unknown",
        3,
        ("UnspecifiedPlatform", "Failed to infer device type"),
        [
            r"No platform detected, vLLM is running on UnspecifiedPlatform",
            r"Failed to infer device type",
        ],
        "vLLM found no usable GPU platform (UnspecifiedPlatform): the vLLM install is broken "
        "or incomplete (package metadata missing), or no NVIDIA GPU/driver is visible to the "
        "process. Check `pip show vllm`, `python -c 'import torch; "
        "print(torch.cuda.is_available())'` and `nvidia-smi` on the host; reinstall vLLM if "
        "needed.",
        "vLLM detected no GPU platform",
    ),
    _rule(
        "gpu_driver_problem",
        "unknown",
        3,
        (
            "driver version is insufficient",
            "driver on your system is too old",
            "Found no NVIDIA driver",
            "No CUDA GPUs are available",
            "forward compatibility was attempted",
            "cudaErrorInsufficientDriver",
        ),
        [
            r"CUDA driver version is insufficient",
            r"NVIDIA driver on your system is too old",
            r"Found no NVIDIA driver",
            r"No CUDA GPUs are available",
            r"forward compatibility was attempted on non supported HW",
            r"cudaErrorInsufficientDriver",
        ],
        "The GPU is not usable from this process: the NVIDIA driver is missing or older than "
        "the CUDA version of this PyTorch/vLLM build, or no GPU is visible "
        "(CUDA_VISIBLE_DEVICES, docker --gpus). Check `nvidia-smi` on the host and pick a "
        "vLLM build whose CUDA version the driver supports.",
        "GPU/driver not usable",
    ),
    _rule(
        "unsupported_model",
        "unknown",
        3,
        ("are not supported for now", "is not supported for now", "does not recognize this arch"),
        [
            r"Model architectures? \[?(?P<arch>[^\]]*?)\]? (?:are|is) not supported for now",
            r"model type `(?P<model_type>[\w\-]+)` but Transformers does not recognize this "
            r"architecture",
            r"does not recognize this architecture",
        ],
        "This vLLM / transformers does not know the model architecture[[ {arch}]]"
        "[[ (model type {model_type})]]: upgrade vLLM (and transformers) to a release that "
        "supports it, or set trust_remote_code if the model ships its own code.",
        "model architecture not supported[[: {arch}]]",
    ),
)
_RULE_LABEL: dict[str, str] = {r.name: r.label for r in RULES}
#: ``fp8_type_unsupported_arch`` when the kernel that needs FP8 is the KV-cache write: the
#: FP8 is the KV cache's, and so is the fix.
_FP8_ARCH_KV_RULE = _rule(
    "fp8_type_unsupported_arch",
    "kv_cache_dtype_unsupported",
    83,
    ("not supported in this architecture",),
    [r"type (?P<fp8_type>fp8\w+) not supported in this architecture"],
    "This GPU has no native FP8 ({fp8_type}), which the FP8 KV cache's kernel[[ "
    "{triton_kernel}]] needs (compute capability 8.9+). Serve with a 16-bit KV cache: drop "
    "--kv-cache-dtype fp8 from extra_args[[ (now: {extra_args})]] and run `fab "
    "patch-kv-config` if the checkpoint asks for an FP8 KV cache (kv_cache_scheme).",
    "FP8 KV cache ({fp8_type}) not supported on this GPU[[ (kernel {triton_kernel})]]",
)

_RULE_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


# --------------------------------------------------------------------------- markers
class _Marker(NamedTuple):
    stage: int
    keywords: frozenset[str]
    pattern: re.Pattern[str] | None


def _marker(stage: str, keywords: tuple[str, ...], pattern: str | None = None) -> _Marker:
    return _Marker(
        _STAGE_INDEX[stage], frozenset(keywords), re.compile(pattern) if pattern else None
    )


_STAGE_MARKERS: tuple[_Marker, ...] = (
    _marker("api_server_starting", ("vLLM API server version", "non-default args")),
    _marker(
        "initializing_engine",
        ("LLM engine",),
        r"Initializing an? (?:V\d )?LLM engine",
    ),
    _marker(
        "loading_model",
        ("Starting to load model", "Loading model from scratch", "Using model weights format"),
    ),
    _marker(
        "loading_shards",
        ("Loading safetensors", "Loading pt checkpoint", "Loading checkpoint shards"),
    ),
    _marker(
        "weights_loaded",
        ("Loading weights took", "Model loading took", "Loading model weights took"),
    ),
    _marker(
        "compiling",
        ("Dynamo bytecode transform", "Compiling a graph for", "Directly load the compiled graph"),
    ),
    _marker(
        "kv_cache_allocated",
        (
            "Available KV cache memory",
            "GPU KV cache size",
            "# GPU blocks",
            "# cuda blocks",
            "Maximum concurrency for",
            "Memory profiling takes",
            "KV Cache is",
        ),
    ),
    _marker(
        "cuda_graphs",
        (
            "Capturing CUDA graph",
            "Capturing cudagraphs",
            "Capturing the model for CUDA graphs",
            "CUDA graphs can take additional",
        ),
    ),
    _marker("engine_initialized", ("warmup model) took",)),
    _marker(
        "server_starting",
        (
            "LLM API server",
            "LLM server on",
            "Waiting for application startup",
            "Available routes",
            "Started server process",
            "Route: /",
        ),
        r"Starting vLLM (?:API )?server|Waiting for application startup|Available routes are|"
        r"Started server process|^Route: /\S*, Methods:",
    ),
    _marker("ready", ("Application startup complete", "Uvicorn running on")),
)
_RUN_START = "vLLM API server version"
#: Frequent "serving" markers (metrics, access log): found per chunk with rfind, not per line.
_FREQ_HEALTHY: tuple[str, ...] = ("Avg prompt throughput", 'HTTP/1.1" 200')
_PROGRESS_RE = re.compile(r"\|\s*(\d+)/(\d+)\s*(?:\[|$)")

_FACT_PATTERNS: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple(
    (frozenset(kw), re.compile(p))
    for kw, p in (
        (("vLLM API server version",), r"vLLM API server version (?P<vllm_version>v?\d[\w.+\-]*)"),
        (("LLM engine (v",), r"LLM engine \(v(?P<vllm_version>\d[\w.+\-]*)\)"),
        (
            ("LLM API server", "LLM server on", "Uvicorn running on"),
            r"(?:Starting vLLM (?:API )?server(?: \d+)? on|Uvicorn running on) "
            r"(?P<url>https?://[^\s/]*?:(?P<port>\d+))",
        ),
        (("non-default args",), r"'port': (?P<port>\d+)"),
        (("non-default args",), r"'model(?:_tag)?': '(?P<model>[^']+)'"),
        (("LLM engine (v",), r"\bmodel='(?P<model>[^']+)'"),
        (("LLM engine (v",), r"\bdevice_config=(?P<device>\w+)"),
        (("def ",), r"^def (?P<triton_kernel>\w+)\("),  # Triton CompilationError echo
        (("LLM engine (v",), r"\bquantization=(?P<quantization>(?!None\b)\w+)"),
        (("non-default args",), r"'max_model_len': (?P<max_model_len>\d+)"),
        (("non-default args",), r"'gpu_memory_utilization': (?P<gpu_memory_utilization>[\d.]+)"),
        (("non-default args",), r"'kv_cache_dtype': '(?P<kv_cache_dtype>\w+)'"),
        # the engine's config dump, V0's "args: Namespace(...)", the attention selector's config
        (("kv_cache_dtype=",), r"\bkv_cache_dtype=['\"]?(?P<kv_cache_dtype>\w+)"),
        # vLLM's own notice (config.py / cache.py, 0.4 .. 0.3x) when the KV cache is FP8
        (
            ("Using fp8 data type",),
            r"Using (?P<kv_cache_dtype>fp8\w*) data type to store kv cache",
        ),
        (("--kv-cache-dtype",), r"--kv-cache-dtype[= ]+['\"]?(?P<kv_cache_dtype>fp8\w*)"),
        (("non-default args",), r"'tensor_parallel_size': (?P<tensor_parallel_size>\d+)"),
        (
            ("Available KV cache memory",),
            r"Available KV cache memory: (?P<kv_cache_gib>-?[\d.]+) ?GiB",
        ),
        (("GPU KV cache size",), r"GPU KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens"),
        (
            ("maximum model length is",),
            r"estimated maximum model length is (?P<est_max_len>\d+)",
        ),
        (
            ("Maximum concurrency for",),
            r"Maximum concurrency for (?P<max_model_len>[\d,]+) tokens per request: "
            r"(?P<max_concurrency>[\d.]+)x",
        ),
        (("# GPU blocks", "# cuda blocks"), r"# (?:GPU|cuda) blocks: (?P<gpu_blocks>\d+)"),
        (("KV Cache is",), r"reserved for KV Cache is (?P<kv_cache_gib>-?[\d.]+) ?GiB"),
        (
            ("Model loading took", "Loading model weights took"),
            r"(?:Model loading|Loading model weights) took (?P<model_mem_gib>[\d.]+) ?(?:GiB|GB)",
        ),
        (
            (
                "Using Flash",
                "Using FLASH",
                "Using Triton",
                "Using TRITON",
                "Using XFormers",
                "Using Torch SDPA",
                "Using CUTLASS",
                "Using Cutlass",
                "Using ROCm",
                "Using AITER",
                "Using FlexAttention",
                "Using AMX",
                "Using CPU_",
                "Using FLEX",
                "Using AttentionBackendEnum",
                "Using _Backend",
            ),
            r"Using (?:AttentionBackendEnum\.|_Backend\.)?(?P<backend>[A-Za-z][\w\-]*(?: [A-Z]"
            r"[\w\-]*)*?) (?:attention )?backend\b",
        ),
    )
)

_EXC_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?:\w*(?:Error|Exception|Interrupt|Exit)|Error)(?:\([\w.]+\))?"
    r"(?::(?:\s.*)?)?$"
)
_EXIT_RE = re.compile(
    r"(?:^|\s)Killed(?:\s|$)|core dumped|exited with (?:exit )?code [1-9]|^Fatal Python error:|"
    r"Failed to start (?:the )?(?:model )?server|^The actor (?:is dead|died)\b|"
    r"\bprocess terminated unexpectedly\b|"  # a launcher's word for a vanished server
    r"\bWorker exit type: (?!INTENDED)[A-Z_]+|"  # Ray: a worker process died
    r"\.(?:cuh?|hh?|hpp|cpp|cc)\(\d+\): error: "  # nvcc: a JIT kernel build failed
)
_EXIT_KEYWORDS: frozenset[str] = frozenset(
    {
        "Killed",
        "core dumped",
        "exited with code",
        "exited with exit code",
        "Fatal Python error",
        "Failed to start",
        "The actor",
        "terminated unexpectedly",
        "Worker exit type: ",
        "): error: ",
    }
)
#: A frame of a native backtrace (a crash handler's: UCX, glog, c10): `` 3 0x00007f.. fn() lib``.
_NATIVE_FRAME_RE = re.compile(r"^\s*#?\d{1,3}\s+0x[0-9a-fA-F]{8,}\s+\S")
#: An operator's stop (SIGTERM / Ctrl-C) of a server that was up; what follows it is the
#: teardown (EngineDeadError, "force killing" the engine...), not a crash.
_SHUTDOWN_KEYWORDS: frozenset[str] = frozenset(
    {
        "KeyboardInterrupt",
        "Waiting for application shutdown",
        "^C",  # a terminal's echo of Ctrl-C
        "shutdown triggered",  # vLLM >= 0.2x: "[shutdown] API server: shutdown triggered"
        "signal=SIGTERM",  # "[shutdown] EngineCore: trigger received signal=SIGTERM"
        "signal=SIGINT",
        "Received SIGTERM",
        "received SIGTERM",
        "Application shutdown complete",
        "gracefully shutting down",
    }
)
#: Shutdown lines only a server that was up prints (uvicorn's lifespan, vLLM's stop):
#: an excerpt that starts after startup and shows only these was healthy, then stopped.
_UP_SHUTDOWN_RE = re.compile(
    r"Waiting for application shutdown|Application shutdown complete|API server: shutdown "
    r"triggered|Engine is gracefully shutting down"
)
_TRACEBACK = "Traceback (most recent call last)"
#: Request-log lines quote user prompts, which may contain any text: never analysed.
_IGNORED_PREFIXES = ("Received request ", "Added request ", "Generated response ")
#: Every keyword some line check looks for; ``_analyze`` tests each once per line.
_ALL_KEYWORDS: tuple[str, ...] = tuple(
    sorted(
        {k for r in RULES for k in r.keywords}
        | {k for mk in _STAGE_MARKERS for k in mk.keywords}
        | {k for keys, _ in _FACT_PATTERNS for k in keys}
        | _EXIT_KEYWORDS
        | _SHUTDOWN_KEYWORDS
    )
)
_SIG_STAGE, _SIG_FACT, _SIG_RULE = range(3)


def _build_dispatch() -> dict[str, tuple[tuple[int, int], ...]]:
    """keyword -> the (kind, index) of every stage marker / fact / rule that uses it."""
    table: dict[str, list[tuple[int, int]]] = {}
    for i, mk in enumerate(_STAGE_MARKERS):
        for k in mk.keywords:
            table.setdefault(k, []).append((_SIG_STAGE, i))
    for i, (keys, _) in enumerate(_FACT_PATTERNS):
        for k in keys:
            table.setdefault(k, []).append((_SIG_FACT, i))
    for i, rule in enumerate(RULES):
        for k in rule.keywords:
            table.setdefault(k, []).append((_SIG_RULE, i))
    return {k: tuple(v) for k, v in table.items()}


_DISPATCH = _build_dispatch()
_FRAME_RE = re.compile(r'\s*File "[^"]*", line \d+')
#: Traceback frames in attention / KV-cache code, and in weight-quantization / GEMM code:
#: where an FP8 dtype failure happened tells whose FP8 it is (the KV cache's or the weights').
_ATTN_FRAME_RE = re.compile(
    r"(?i:/attention/|attn|/mla/|_mla\b|\bmla_|kv_?cache|paged_attention|prefix_prefill)"
)
_QUANT_FRAME_RE = re.compile(r"(?i:/quantization/|fused_moe|scaled_mm|gemm|matmul|/linear\.py)")
#: Triton kernel names (the ``def kernel(`` a CompilationError echoes) of either kind.
#: vLLM's Triton attention kernels: ``_fwd_kernel`` (prefix_prefill), ``_fwd_kernel_stage1`` /
#: ``_fwd_grouped_kernel_stage1`` (decode), ``kernel_unified_attention_2d``,
#: ``kernel_paged_attention_2d``, ``attn_fwd`` (ROCm), ``reshape_and_cache``...
_ATTN_KERNEL_RE = re.compile(r"(?i:cache|attn|attention|prefill|decode|paged|_fwd_\w*kernel)")
_QUANT_KERNEL_RE = re.compile(r"(?i:mm\b|_mm_|gemm|matmul|moe|quant|scaled|linear)")
_NEWLINE = re.compile("\n")


def _trie_regex(words: Iterable[str]) -> str:
    """A regex alternation of literals, factored as a trie (fast in ``re``)."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        if list(node) == [""]:
            return ""
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:
            return "(?:" + body + ")?"
        return body

    return build(trie)


#: Words that find the lines worth analysing. Coverage relies on context: every exception
#: line holds ``Error`` / ``Exception``, so ``ValueError: No available memory ...`` needs no
#: word of its own; the rest cover stage, fact and non-exception failure lines. The tests
#: check this fast path against analysing every line. For speed, all first characters of
#: these words are mapped to one byte (see ``_candidate_lines``), so keep them few and rare,
#: and keep at least three other characters in each (a word made only of first characters
#: would match any run of them).
_TRIGGER_WORDS: tuple[str, ...] = (
    # exceptions, tracebacks, exits; every ERROR / CRITICAL record
    "Error",
    "ERROR",
    "CRITICAL",
    "Exception",
    "KeyboardInterrupt",
    "Killed",
    '", line ',
    "xited with code",
    "xit code",  # died unexpectedly (exit code: -9); exited with exit code 1
    "xitcode",
    "Exit Code",
    "xpectedly",  # died unexpectedly
    # failure messages that are not (always) exception lines
    "Errno",
    "EADDRINUSE",
    "CUDA error",
    "CUDA out of memory",
    "CUDA driver",
    "CUDA capability",
    "CUDA graphs",
    "CUDA kernel",
    "Cuda failure",
    "CUBLAS_STATUS",
    "Value error",
    "Value 'sm_",
    "Watchdog caught",
    "Worker proc",
    "WorkerProc ",
    "Worker failed",
    "Engine core",
    "EngineCore failed",
    "EngineCore encountered",
    "Engine process",
    "Engine loop",
    "Engine is already dead",
    "Executor failed",
    "KV cache is needed",
    "KV Cache is",
    "UnspecifiedPlatform",
    "Unsupported",
    "User-specified",
    # stages and facts
    "LLM API server",
    "LLM server on",
    "LLM engine",
    "Loading ",
    "Model loading took",
    "Maximum concurrency",
    "Memory profiling",
    "Using ",
    "Dynamo bytecode",
    "Directly load the compiled",
    "Compiling a graph",
    "KV cache memory",
    "KV cache size",
    "# GPU blocks",
    "# cuda blocks",
    "Capturing",
    "warmup model) took",
    "Uvicorn running",
    "Waiting for application",
    "wn triggered",  # [shutdown] API server: shutdown triggered
    "Started server",
    # signals: stops (SIGTERM / SIGINT) and kills; "Segfault encountered" (torch's handler)
    "SIGTERM",
    "SIGINT",
    "SIGHUP",
    "SIGKILL",
    "SIGSEGV",
    "SIGBUS",
    "SIGABRT",
    "SIGILL",
    "SIGFPE",
    "Segfault",
    "Segmentation fault",  # the shell's word for SIGSEGV (a line of its own)
    "Memory access fault",  # the ROCm runtime's, before it aborts the process
    "ModeIsEnabled",  # OfflineModeIsEnabled
)
#: Needles whose characters are all common; searched with ``str.find`` (few, on purpose).
#: Keywords whose lines need no trigger word: they only occur in exception messages (which
#: hold ``Error``) or in hard-wrapped continuations (analysed regardless of triggers).
_KEYWORDS_ON_ERROR_LINES: frozenset[str] = frozenset(
    {"maximum model length is", "def "}  # "def kernel(": Triton's CompilationError, an ERROR
)
_FIND_WORDS: tuple[str, ...] = (
    ": error: ",
    "Illegal instruction",  # the shell's word for SIGILL (a line of its own: no trigger word)
    "startup complete",
    "non-default args",
    "Starting to load",
    "core dumped",
    "^C",
    "Available routes",
)
#: Keywords found only by the head scan (``_FULL_SCAN``): they mark lines that, in a whole
#: log, come with a trigger word nearby or early (a route line, after "Starting vLLM API
#: server"); only a pasted excerpt shows them alone, and an excerpt is small.
_HEAD_ONLY_KEYWORDS: frozenset[str] = frozenset(
    {
        "Route: /",
        # the KV-cache dtype asked for: a command line or argparse Namespace comes first; the
        # engine's config dump (kv_cache_dtype=fp8) is on an "LLM engine" (trigger) line
        "--kv-cache-dtype",
        "kv_cache_dtype=",
        "no longer supports this GPU",  # PyTorch's warning at import, before vLLM starts
    }
)


def _dedupe_words(words: Iterable[str]) -> list[str]:
    """Drop words that contain a shorter word (that one finds the same lines)."""
    keep: list[str] = []
    for w in sorted(set(words), key=len):
        if not any(k in w for k in keep):
            keep.append(w)
    return keep


_ANCHORS = frozenset(w[0] for w in _TRIGGER_WORDS)
#: Maps every first character of a trigger word to ``\x01`` (all other bytes unchanged).
_ANCHOR_TABLE = bytes(1 if chr(b) in _ANCHORS else b for b in range(256))
#: The trigger words, translated the same way: one trie with the single literal prefix
#: ``\x01``, which ``re`` scans for about as fast as ``str.find``.
_TRIGGER = re.compile(
    _trie_regex(
        w.encode("ascii").translate(_ANCHOR_TABLE).decode("latin-1")
        for w in _dedupe_words(_TRIGGER_WORDS)
    ).encode("latin-1")
)
_REC_BASIC = (
    r"\(|[ \t]{2}|\[|\t|INFO|WARN|ERROR|DEBUG|CRITICAL|Traceback|File |\d{4}-\d\d|"
    r"\d\d-\d\d[ ]\d\d:|\d\d:\d\d:\d\d|\n|$"
)
#: A newline followed by a line that does not look like the start of a log record
#: (also behind a docker-compose prefix or markdown quote marks): a wrap candidate.
_CONT = re.compile(
    r"\n(?!" + _REC_BASIC + r"|(?:(?:\[[\w.\-]+\]|[\w.\-]+)[ ]+\|[ ]?)?(?:[ \t]*>+[ ]?)?"
    r"(?:" + _REC_BASIC + "))"
)


def _candidate_lines(scan: str) -> list[int]:
    """Start offsets (sorted, unique) of the lines of ``scan`` worth analysing."""
    starts: set[int] = set()
    # ASCII-encode with one "?" per other character, so byte offsets equal str offsets.
    marked = scan.encode("ascii", "replace").translate(_ANCHOR_TABLE)
    search = _TRIGGER.search
    i = 0
    while True:
        m = search(marked, i)
        if m is None:
            break
        p = m.start()
        starts.add(scan.rfind("\n", 0, p) + 1)
        i = scan.find("\n", p) + 1
    for word in _FIND_WORDS:
        p = scan.find(word)
        while p >= 0:
            starts.add(scan.rfind("\n", 0, p) + 1)
            p = scan.find(word, scan.find("\n", p))
    return sorted(starts)


# --------------------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class Diagnosis:
    """The verdict on a log: label, stage reached, evidence and what to do.

    ``facts`` holds what the log showed (all strings), e.g. ``vllm_version``, ``port``,
    ``url``, ``model``, ``kv_cache_gib``, ``kv_cache_tokens``, ``backend``, the numbers
    of the deciding error (``needed_gib``, ``available_gib``, ``alloc``, ``bad_args``...),
    ``signature`` (the name of the deciding :class:`Rule`), ``shutdown`` ("true" when
    a server that came up was then stopped) and ``signal`` (``SIGKILL``... for
    ``engine_killed``; ``signal_inferred`` is "true" when no line names it).

    ``lifecycle`` says where the server is, beside the cause: ``starting`` (no terminal
    state yet; ``stage`` is the last stage reached), ``serving`` (up, nothing fatal
    after), ``stopped`` (up, then stopped by an operator: SIGTERM / Ctrl-C, the whole
    tree or only the API server; the label stays ``healthy``) or ``failed`` (any
    failure label). Left empty, it is derived from the label.
    """

    label: str
    stage: str | None
    progress: str | None
    evidence: tuple[str, ...]
    hint: str
    summary: str
    facts: dict[str, str] = field(default_factory=dict)
    lifecycle: str = ""

    def __post_init__(self) -> None:
        if not self.lifecycle:
            derived = (
                "failed"
                if self.label in FAILURE_LABELS
                else "stopped"
                if self.facts.get("shutdown") == "true"
                else "serving"
                if self.label == "healthy"
                else "starting"
            )
            object.__setattr__(self, "lifecycle", derived)

    @property
    def failed(self) -> bool:
        """True when the label is a failure (not starting / healthy)."""
        return self.label in FAILURE_LABELS

    @property
    def ready(self) -> bool:
        """True when the server came up and nothing fatal followed (and it was not stopped)."""
        return self.label == "healthy" and self.lifecycle != "stopped"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field plus ``failed`` / ``ready``."""
        return {
            "label": self.label,
            "stage": self.stage,
            "progress": self.progress,
            "evidence": list(self.evidence),
            "hint": self.hint,
            "summary": self.summary,
            "facts": dict(self.facts),
            "lifecycle": self.lifecycle,
            "failed": self.failed,
            "ready": self.ready,
        }


class _Hit(NamedTuple):
    pos: int
    text: str
    groups: Mapping[str, str]


class _Line(NamedTuple):
    pos: int
    text: str


# Event kinds; on one line they apply in this order.
_EV_FACT, _EV_STAGE, _EV_HEALTHY, _EV_RULE, _EV_EXC, _EV_HEADER, _EV_EXIT = range(7)
_EV_SHUTDOWN, _EV_FRAME = 7, 8


class _State:
    """Everything the diagnosis depends on; small, so it can be cloned cheaply."""

    __slots__ = (
        "offset",
        "last_line",
        "healthy_pos",
        "healthy_text",
        "shutdown_pos",
        "hits",
        "facts",
        "stage",
        "progress",
        "stage_text",
        "last_progress_pos",
        "last_crash_pos",
        "last_signal_pos",
        "last_exc",
        "first_exc_since_progress",
        "first_exc_since_healthy",
        "last_header",
        "last_exit",
        "last_frame",
        "last_vllm_frame_pos",
        "last_attn_frame_pos",
        "last_quant_frame_pos",
        "tail",
        "tail_provisional",
    )

    def __init__(self) -> None:
        self.offset = 0  # offset of the next block in the (\r\n-normalised) stream
        self.last_line: str | None = None
        self.healthy_pos = -1
        self.healthy_text: str | None = None
        self.shutdown_pos = -1
        self.hits: dict[str, _Hit] = {}  # rule name -> first hit since the healthy marker
        self.facts: dict[str, str] = {}
        self.stage = -1
        self.progress: str | None = None
        self.stage_text: str | None = None
        self.last_progress_pos = -1
        self.last_crash_pos = -1
        self.last_signal_pos = -1
        self.last_exc: _Line | None = None
        self.first_exc_since_progress: _Line | None = None
        self.first_exc_since_healthy: _Line | None = None
        self.last_header: _Line | None = None
        self.last_exit: _Line | None = None
        self.last_frame: _Line | None = None
        self.last_vllm_frame_pos = -1  # a traceback frame in vLLM's own code
        self.last_attn_frame_pos = -1  # ... in attention / KV-cache code
        self.last_quant_frame_pos = -1  # ... in weight-quantization / GEMM / MoE code
        self.tail: deque[str] = deque(maxlen=TAIL_LINES + 1)
        self.tail_provisional = False

    def clone(self) -> _State:
        new = _State.__new__(_State)
        for name in _State.__slots__:
            setattr(new, name, getattr(self, name))
        new.hits = dict(self.hits)
        new.facts = dict(self.facts)
        new.tail = deque(self.tail, maxlen=TAIL_LINES + 1)
        return new


def _truncate(text: str, limit: int = _MAX_EVIDENCE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _analyze(text: str, pos: int, events: list[tuple[Any, ...]], *, joined: bool) -> None:
    """Append the events one cleaned line produces (at log position ``pos``)."""
    for tpl in _line_events(text, joined):
        events.append((pos, *tpl))


@lru_cache(maxsize=4096)
def _line_events(text: str, joined: bool) -> tuple[tuple[Any, ...], ...]:
    """The events of one cleaned line, without position (cached: lines repeat a lot).

    A ``joined`` text (a line plus its hard-wrapped continuation) only yields rule and
    fact events: its stage markers and crash lines were already seen line by line.
    """
    events: list[tuple[Any, ...]] = []
    present = [k for k in _ALL_KEYWORDS if k in text]
    stages: set[int] = set()
    facts: set[int] = set()
    rules: set[int] = set()
    for k in present:
        for kind, idx in _DISPATCH.get(k, ()):
            (stages if kind == _SIG_STAGE else facts if kind == _SIG_FACT else rules).add(idx)
    best_stage = -1
    if not joined:
        for idx in stages:
            mk = _STAGE_MARKERS[idx]
            if mk.stage > best_stage and (mk.pattern is None or mk.pattern.search(text)):
                best_stage = mk.stage
    if best_stage >= 0:
        pm = _PROGRESS_RE.search(text)
        progress = f"{pm.group(1)}/{pm.group(2)}" if pm else None
        events.append((_EV_STAGE, best_stage, progress, text, _RUN_START in text))
        if best_stage >= _HEALTHY_STAGE:
            events.append((_EV_HEALTHY, text))
    for idx in sorted(facts):
        m = _FACT_PATTERNS[idx][1].search(text)
        if m is not None:
            groups = {k: v for k, v in m.groupdict().items() if v}
            if groups:
                events.append((_EV_FACT, groups))
    is_wrapper = False
    for idx in sorted(rules):
        rule = RULES[idx]
        groups = rule._search(text)
        if groups is not None:
            events.append((_EV_RULE, rule.name, text, groups))
            if rule.label == "engine_dead_other":
                is_wrapper = True
    if joined:
        return tuple(events)
    if _EXC_RE.match(text):
        events.append((_EV_EXC, text, is_wrapper))
    elif _TRACEBACK in text:
        events.append((_EV_HEADER, text))
    exit_line = bool(present) and not _EXIT_KEYWORDS.isdisjoint(present) and _EXIT_RE.search(text)
    if exit_line or _NATIVE_FRAME_RE.match(text):  # ... or a crash handler's native backtrace
        events.append((_EV_EXIT, text))
    if present and not _SHUTDOWN_KEYWORDS.isdisjoint(present):
        events.append((_EV_SHUTDOWN, text))
    if _FRAME_RE.match(text):
        events.append((_EV_FRAME, text))
    return tuple(events)


def _is_continuation(prev_raw: str, cur_clean: str) -> bool:
    """Is this line the hard-wrapped rest of the (long) previous one?"""
    if len(prev_raw) < _WRAP_MIN or not cur_clean.strip():
        return False
    return not cur_clean.startswith(
        (_TRACEBACK, "File ", "  ", "\t", "During handling", "The above exception")
    )


def _analyze_join(prev_raw: str, cur_raw: str, pos: int, events: list[tuple[Any, ...]]) -> None:
    cur = clean_line(cur_raw)
    if not _is_continuation(prev_raw, cur):
        return
    prev = clean_line(prev_raw)
    if prev.startswith(_IGNORED_PREFIXES):
        return
    for sep in ("", " "):
        _analyze(prev + sep + cur, pos, events, joined=True)


def _apply(st: _State, ev: tuple[Any, ...]) -> None:
    """Fold one event into the state (events arrive in log order)."""
    pos, kind = ev[0], ev[1]
    if kind == _EV_FACT:
        st.facts.update(ev[2])
    elif kind == _EV_STAGE:
        stage, progress, text, run_start = ev[2], ev[3], ev[4], ev[5]
        if run_start:  # a new server run: the previous run's "up" / shutdown are history
            st.stage, st.progress = stage, None
            st.healthy_pos, st.healthy_text, st.shutdown_pos = -1, None, -1
        elif stage > st.stage:
            st.stage, st.progress = stage, progress
        elif stage == st.stage and progress:
            st.progress = progress
        st.stage_text = text
        st.last_progress_pos = pos
        st.first_exc_since_progress = None
    elif kind == _EV_HEALTHY:
        frequent = len(ev) > 3 and ev[3]
        if frequent and any(_RULE_LABEL.get(name, "unknown") != "unknown" for name in st.hits):
            # An access-log "200" or a throughput line after a specific failure (the engine
            # died, but the API server still answers /v1/models until it shuts down) is not
            # a recovery: the failure stands.
            return
        if pos > st.healthy_pos:
            st.healthy_pos = pos
            st.healthy_text = ev[2]
            st.hits = {}
            st.shutdown_pos = -1
            st.first_exc_since_healthy = None
            st.first_exc_since_progress = None
            st.last_progress_pos = max(st.last_progress_pos, pos)
    elif kind == _EV_RULE:
        name, text, groups = ev[2], ev[3], ev[4]
        if pos <= st.healthy_pos:
            return
        old = st.hits.get(name)
        if old is None:
            st.hits[name] = _Hit(pos, text, dict(groups))
        else:
            missing = {k: v for k, v in groups.items() if k not in old.groups}
            if missing:
                st.hits[name] = _Hit(old.pos, old.text, {**old.groups, **missing})
        if not _RULE_BY_NAME[name].weak:
            st.last_signal_pos = max(st.last_signal_pos, pos)
    elif kind == _EV_EXC:
        line = _Line(pos, ev[2])
        st.last_exc = line
        st.last_crash_pos = st.last_signal_pos = pos
        if not ev[3]:
            if st.first_exc_since_progress is None:
                st.first_exc_since_progress = line
            if st.first_exc_since_healthy is None:
                st.first_exc_since_healthy = line
    elif kind == _EV_HEADER:
        st.last_header = _Line(pos, ev[2])
        st.last_crash_pos = st.last_signal_pos = pos
    elif kind == _EV_EXIT:
        st.last_exit = _Line(pos, ev[2])
        st.last_crash_pos = st.last_signal_pos = pos
    elif kind == _EV_SHUTDOWN:
        if (
            st.healthy_pos < 0
            and not st.hits
            and st.last_crash_pos < 0
            and _UP_SHUTDOWN_RE.search(ev[2])
        ):  # an excerpt that begins after startup: the stop shows the server was up
            st.healthy_pos = pos
            st.healthy_text = ev[2]
            st.last_progress_pos = max(st.last_progress_pos, pos)
        if st.healthy_pos >= 0 and st.shutdown_pos < 0:
            st.shutdown_pos = pos
    elif kind == _EV_FRAME:
        st.last_frame = _Line(pos, ev[2])
        if "/vllm/" in ev[2]:
            st.last_vllm_frame_pos = pos
        if _ATTN_FRAME_RE.search(ev[2]):
            st.last_attn_frame_pos = pos
        elif _QUANT_FRAME_RE.search(ev[2]):
            st.last_quant_frame_pos = pos
        st.last_crash_pos = max(st.last_crash_pos, pos)


def _update_tail(st: _State, block: str, scan: str) -> None:
    """Append the block's last lines to the tail; a ``\\r``-ended line is provisional.

    ``scan`` is ``block`` with every ``\\r`` turned into ``\\n`` (same offsets).
    """
    n = len(block)
    end = n - 1  # index of the terminator of the last segment
    count = 0
    start = n
    while end >= 0 and count <= TAIL_LINES:
        s = scan.rfind("\n", 0, end) + 1
        if block[end] == "\n" or end == n - 1:
            count += 1
        start = s
        end = s - 1
    i = start
    while i < n:
        j = scan.find("\n", i)
        if st.tail_provisional and st.tail:
            st.tail.pop()
        st.tail.append(block[i:j][:_MAX_TAIL_LINE])
        st.tail_provisional = block[j] == "\r"
        i = j + 1


def _process(st: _State, block: str) -> None:
    """Consume a block of complete lines (ends with a terminator; ``\\r\\n`` normalised)."""
    base = st.offset
    st.offset += len(block)
    scan = block.replace("\r", "\n") if "\r" in block else block
    events: list[tuple[Any, ...]] = []
    for kw in _FREQ_HEALTHY:  # frequent serving markers: only the last one matters
        p = scan.rfind(kw)
        if p >= 0:
            ls = scan.rfind("\n", 0, p) + 1
            text = clean_line(scan[ls : scan.find("\n", p)])
            events.append((base + ls, _EV_STAGE, _STAGE_INDEX["ready"], None, text, False))
            events.append((base + ls, _EV_HEALTHY, text, True))
    starts = _candidate_lines(scan)
    if base < _FULL_SCAN:
        head = _FULL_SCAN - base
        every = [0] + [m.end() for m in _NEWLINE.finditer(scan, 0, min(head, len(scan) - 1))]
        starts = sorted(set(starts).union(every))
    for ls in starts:
        text = clean_line(scan[ls : scan.find("\n", ls)])
        if text and not text.startswith(_IGNORED_PREFIXES):
            _analyze(text, base + ls, events, joined=False)
    # hard-wrapped continuations; the first line continues the previous block's last line
    first_end = scan.find("\n")
    if st.last_line is not None and _CONT.match("\n" + scan[: min(first_end, 200)] + "\n"):
        _analyze_join(st.last_line, scan[:first_end], base, events)
    for m in _CONT.finditer(scan):
        ls = m.start() + 1
        if ls >= len(scan):
            break
        prev_start = scan.rfind("\n", 0, m.start()) + 1
        _analyze_join(
            scan[prev_start : m.start()], scan[ls : scan.find("\n", ls)], base + ls, events
        )
    st.last_line = scan[scan.rfind("\n", 0, len(scan) - 1) + 1 : -1]
    if events:
        events.sort(key=lambda e: (e[0], e[1]))
        for ev in events:
            _apply(st, ev)
    _update_tail(st, block, scan)


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
        "[[{killed_proc}||A vLLM process]] was stopped by {signal} from outside while the rest "
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
    if not sig and facts.get("hsa_fault"):  # the ROCm runtime aborts after a GPU fault
        sig = "SIGABRT"
        facts.setdefault("signal_note", facts["hsa_fault"])
    if not sig:  # "Killed", or a process gone without a word: only SIGKILL is that silent
        sig = "SIGKILL"
        if facts.get("signature") == "engine_vanished":
            facts.setdefault("killed_proc", "EngineCore")
            facts["signal_inferred"] = "true"
            facts["signal_note"] = "inferred: it exited without an exception or a stop request"
    facts["signal"] = sig


def _signal_hint(signal: str) -> str:
    return _SIGNAL_HINTS.get(signal, _SIGNAL_HINT_CRASH)


def _context_values(context: Mapping[str, object]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in context.items():
        if v is None or v == "" or v == [] or v == ():
            continue
        if isinstance(v, (list, tuple)):
            out[k] = " ".join(str(x) for x in v)
        else:
            out[k] = str(v)
    return out


def _stage_name(st: _State) -> str | None:
    return STAGES[st.stage][0] if st.stage >= 0 else None


def _progress(st: _State) -> str | None:
    return st.progress if st.stage >= 0 else None


def _fp8_in_kv_cache(st: _State, facts: Mapping[str, str]) -> bool:
    """Is the FP8 that a kernel failed on the KV cache's (not the weights')?

    In order: the failing Triton kernel's name (``reshape_and_cache`` vs ``..._scaled_mm``);
    the deepest traceback frame in attention / KV-cache code vs in quantization / GEMM code;
    else whether the KV cache was asked to be FP8 (``--kv-cache-dtype fp8``, the engine
    config's ``kv_cache_dtype=fp8``).
    """
    kernel = facts.get("triton_kernel", "")
    if kernel and _ATTN_KERNEL_RE.search(kernel):
        return True
    if kernel and _QUANT_KERNEL_RE.search(kernel):
        return False
    attn = st.last_attn_frame_pos if st.last_attn_frame_pos > st.healthy_pos else -1
    quant = st.last_quant_frame_pos if st.last_quant_frame_pos > st.healthy_pos else -1
    if attn != quant:
        return attn > quant
    return facts.get("kv_cache_dtype", "").startswith("fp8")


def _decide(st: _State, context: Mapping[str, object]) -> Diagnosis:
    """Turn the state into a diagnosis (see the module docstring for the order rules)."""
    ctx = _context_values(context)
    facts = dict(st.facts)
    if "backend" in facts:
        facts["backend"] = _backend_name(facts["backend"])
    stage = _stage_name(st)
    progress = _progress(st)
    shutdown = st.shutdown_pos if st.shutdown_pos >= 0 else None

    active: list[tuple[Rule, _Hit]] = []
    for rule in RULES:
        hit = st.hits.get(rule.name)
        if hit is None or (shutdown is not None and hit.pos > shutdown):
            continue
        if rule.weak and st.last_signal_pos <= hit.pos:
            continue
        active.append((rule, hit))

    root = st.first_exc_since_progress or st.first_exc_since_healthy
    if root is not None:  # an exception explains the engine's death: not a silent kill
        active = [(r, h) for r, h in active if r.name != "engine_vanished"]
    if facts.get("kv_cache_dtype", "auto") == "auto":  # the selector failed for another reason
        active = [(r, h) for r, h in active if r.name != "kv_dtype_backend_selection"]
    fp8_kv = _fp8_in_kv_cache(st, facts)
    if not fp8_kv:  # an FP8 dtype failure outside the KV cache: not a KV-dtype problem
        active = [(r, h) for r, h in active if r.name != "float8_kv_dtype_mismatch"]

    def best(label_filter: frozenset[str]) -> tuple[Rule, _Hit] | None:
        cands = [(r, h) for r, h in active if r.label in label_filter]
        if not cands:
            return None
        return max(cands, key=lambda rh: (rh[0].priority, -rh[1].pos))

    specific = FAILURE_LABELS - {"engine_dead_other", "unknown"}
    winner = (
        best(frozenset(specific))
        or best(frozenset({"engine_dead_other"}))
        or best(frozenset({"unknown"}))
    )
    if winner is not None:
        rule, hit = winner
        same = sorted((h for r, h in active if r.label == rule.label), key=lambda h: h.pos)
        if rule.name == "fp8_type_unsupported_arch" and fp8_kv:
            rule = _FP8_ARCH_KV_RULE
        groups: dict[str, str] = {}
        for h in same:
            for k, v in h.groups.items():
                groups.setdefault(k, v)
        facts.update(groups)
        facts["signature"] = rule.name
        if "backend" in facts:
            facts["backend"] = _backend_name(facts["backend"])
        if rule.label == "engine_killed":
            _signal_facts(facts)
        values = {**ctx, **facts}
        if rule.label == "quantization_unsupported" and not values.get("platform"):
            platform = values.get("platform2") or values.get("device")
            if platform:
                values["platform"] = facts["platform"] = platform.upper()
        if rule.label == "engine_killed":
            values["signal_hint"] = _render(_signal_hint(facts["signal"]), values)
            stop = facts["signal"] in ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")
            values["signal_verb"] = "was killed by" if stop else "died of"
        evidence = [h.text for h in same[:3]]
        if rule.label in ("engine_dead_other", "unknown") and root is not None:
            values["root_cause"] = _truncate(root.text, 300)
            if root.text not in evidence:
                evidence.append(root.text)
        if rule.label == "engine_dead_other":
            extra = best(frozenset({"unknown"}))
            if extra is not None:
                values["extra_hint"] = _render(extra[0].hint, values)
                evidence.append(extra[1].text)
        if rule.label == "kv_cache_dtype_unsupported":
            new = _version_at_least(values.get("vllm_version", ""), (0, 18))
            cpu = values.get("device") == "cpu" or values.get("backend", "").startswith(
                ("AMX", "CPU")
            )
            fix = _KV_FIX_CPU if cpu else _KV_FIX_NEW if new else _KV_FIX_OLD
            values["kv_fix"] = _render(fix, values)
        if rule.name == "argparse_error" and values.get("bad_args", "").startswith("serve "):
            values["serve_note"] = (
                "The image's entrypoint already runs `vllm serve`: do not repeat "
                "`vllm serve MODEL` in the arguments."
            )
        return Diagnosis(
            label=rule.label,
            stage=stage,
            progress=progress,
            evidence=tuple(_truncate(e) for e in evidence),
            hint=_render(rule.hint, values),
            summary="crashed: " + _render(rule.summary, values),
            facts=facts,
        )

    healthy = st.healthy_pos >= 0
    crashed_before_up = not healthy and st.last_crash_pos > st.last_progress_pos
    died_after_up = (
        healthy
        and st.last_exit is not None
        and st.last_exit.pos > st.healthy_pos
        and (shutdown is None or st.last_exit.pos < shutdown)
    )
    if crashed_before_up or died_after_up:
        engine = crashed_before_up and st.last_vllm_frame_pos > st.last_progress_pos
        return _generic_unknown(st, facts, ctx, stage, progress, root, engine=engine)
    values = {**ctx, **facts}
    if healthy:
        if shutdown is not None:
            facts["shutdown"] = "true"
        where = f" on {facts['url']}" if "url" in facts else ""
        summary = f"healthy: server up{where}"
        if shutdown is not None:
            summary += " (then shut down)"
        hint = _render(
            "The server came up[[ on {url}]]; confirm it answers with a completion request "
            "(GET /health and /v1/models can succeed before the model answers).",
            values,
        )
        evidence = (_truncate(st.healthy_text),) if st.healthy_text else ()
        return Diagnosis("healthy", stage, progress, evidence, hint, summary, facts)
    desc = _STAGE_DESC.get(stage, "no startup stage seen yet") if stage else "no output yet"
    summary = f"starting: {desc}" + (f" ({progress})" if progress else "")
    hint = (
        f"No terminal state yet; last stage: {desc}"
        + (f" ({progress})" if progress else "")
        + ". Loading a large checkpoint or compiling kernels can print nothing for minutes."
    )
    evidence = (_truncate(st.stage_text),) if st.stage_text else ()
    return Diagnosis("starting", stage, progress, evidence, hint, summary, facts)


def _generic_unknown(
    st: _State,
    facts: dict[str, str],
    ctx: Mapping[str, str],
    stage: str | None,
    progress: str | None,
    root: _Line | None,
    *,
    engine: bool = False,
) -> Diagnosis:
    """An unrecognised crash: point at the most telling error line.

    ``engine``: the traceback runs through vLLM's own code, so vLLM itself died of an
    exception no rule knows: ``engine_dead_other`` rather than ``unknown``.
    """
    candidates = [x for x in (st.last_exc, st.last_exit) if x is not None]
    main = max(candidates, key=lambda x: x.pos) if candidates else None
    if main is None:
        main = st.last_frame or st.last_header
    evidence: list[str] = []
    if main is not None:
        evidence.append(main.text)
    if root is not None and root.text not in evidence:
        evidence.append(root.text)
    what = main.text.strip() if main is not None else "the process stopped"
    values = {**ctx, **facts, "what": _truncate(what, 300)}
    if engine and main is not None and main is st.last_exc:
        facts["signature"] = "vllm_traceback"
        first = root.text if root is not None else main.text
        return Diagnosis(
            label="engine_dead_other",
            stage=stage,
            progress=progress,
            evidence=tuple(_truncate(e) for e in evidence),
            hint=_render(
                "vLLM died of an exception no known cause matches: {first}. Read the "
                "traceback (it runs through vLLM's code) and the last log lines; search vLLM's "
                "issues for the exception with the model and version[[ ({vllm_version})]].",
                {**values, "first": _truncate(first, 300)},
            ),
            summary="crashed: engine died: " + _truncate(first, 200),
            facts=facts,
        )
    if main is not None and main is st.last_exit and "Killed" in main.text:
        hint = _render(
            "The process was killed ({what}): often the host's OOM killer (check `dmesg`, host "
            "RAM and swap while loading weights) or a manual kill. Read the last log lines.",
            values,
        )
    else:
        hint = _render(
            "Unrecognised failure: {what}. Read the traceback and the last log lines; none of "
            "the known causes (memory, port, NCCL, arguments, model path, GPU support) was "
            "found.",
            values,
        )
    return Diagnosis(
        label="unknown",
        stage=stage,
        progress=progress,
        evidence=tuple(_truncate(e) for e in evidence),
        hint=hint,
        summary="crashed: " + _truncate(what, 200),
        facts=facts,
    )


class LogDiagnoser:
    """Streaming diagnosis of a vLLM log.

    Feed text chunks as they arrive (any split, even mid-line or inside ``\\r\\n``);
    :meth:`diagnosis` can be called at any time and is "starting" while no terminal
    state is visible. Work is linear in the log size and memory is bounded: a small
    state (first hit per rule, facts, stage) plus the last ``TAIL_LINES`` lines.

    While a crash is still being written the label can sharpen: vLLM V1 logs
    ``EngineCore failed to start.`` *before* the traceback that names the cause, so
    ``engine_dead_other`` may turn into e.g. ``cuda_oom`` a few lines later. A caller
    that stops at the first failure should read on briefly (one more poll, or until the
    process has exited) before reporting.
    """

    def __init__(self, context: dict[str, object] | None = None) -> None:
        self._context: dict[str, object] = dict(context or {})
        self._state = _State()
        self._pending = ""
        self._decoder: codecs.IncrementalDecoder | None = None

    def feed(self, chunk: str | bytes) -> None:
        """Consume the next piece of the log (``bytes`` are decoded as UTF-8)."""
        if isinstance(chunk, (bytes, bytearray)):
            if self._decoder is None:
                self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            chunk = self._decoder.decode(bytes(chunk))
        if not chunk:
            return
        if len(chunk) > _SLICE:  # bound the working copies for huge inputs
            for i in range(0, len(chunk), _SLICE):
                self.feed(chunk[i : i + _SLICE])
            return
        data = self._pending + chunk
        if "\r" in data and "\r\n" in data:
            data = data.replace("\r\n", "\n")
        stop = len(data) - 1 if data.endswith("\r") else len(data)
        cut = max(data.rfind("\n", 0, stop), data.rfind("\r", 0, stop))
        if cut < 0:
            if len(data) <= _MAX_PENDING:
                self._pending = data
                return
            data += "\n"  # pathological: a line longer than _MAX_PENDING is cut here
            cut = len(data) - 1
        self._pending = data[cut + 1 :]
        _process(self._state, data[: cut + 1])

    def _peek(self) -> _State:
        """The state as if the partial last line were complete (state is not changed)."""
        if not self._pending:
            return self._state
        st = self._state.clone()
        _process(st, self._pending.rstrip("\r") + "\n")
        return st

    def diagnosis(self) -> Diagnosis:
        """The diagnosis of everything fed so far."""
        return _decide(self._peek(), self._context)

    @property
    def tail(self) -> list[str]:
        """The last ``TAIL_LINES`` cleaned lines (tqdm ``\\r`` updates collapsed)."""
        st = self._peek()
        lines = list(st.tail)[-TAIL_LINES:]
        return [clean_line(x) for x in lines]


def diagnose(text: str, context: dict[str, object] | None = None) -> Diagnosis:
    """Diagnose a whole log at once (same result as feeding it in chunks)."""
    d = LogDiagnoser(context)
    d.feed(text)
    return d.diagnosis()
