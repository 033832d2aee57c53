"""The vocabulary: labels, stages, limits, the Rule record and the Diagnosis verdict."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

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

#: The words vLLM refuses something in ("is not supported", "only supports", "requires", "not
#: yet implemented", "is supported only on", ...): a regex fragment (case-insensitive) that
#: rules reading a refusal in any words share; each adds its own extra words.
REFUSES = (
    r"(?i:not (?:yet )?supported|unsupported|only supports?\b|\brequires?\b|"
    r"(?:is |are )?supported only\b|is only supported\b|no longer supported|"
    r"\bonly\b[^.;:]{1,80}\b(?:is|are) supported\b|"
    r"not (?:yet )?implemented|does(?: not|n't) (?:yet )?support)"
)

#: How a shell starts its report of a job that ended (a regex fragment, anchored): bash's job
#: table ("[1]+  Killed   cmd") and zsh's, foreground ("zsh: killed  cmd") or job table ("[1]
#: + 4566 killed  cmd", the PID with ``setopt longlistjobs``). The signal's word follows.
BASH_JOB_REPORT = r"^\[\d+\][+-]? +"
ZSH_JOB_REPORT = r"^(?:zsh: |\[\d+\] +[+-]? +(?:\d+ +)?)"

#: The shell's words for a process that died of a signal, in the languages of a non-English
#: locale: glibc's strsignal() texts (libc.mo), as bash 5.2 prints them under zh_CN, zh_TW,
#: ja_JP, ko_KR, de_DE, ru_RU, fr_FR, es_ES and pt_BR (read off this machine: each locale
#: built with localedef, a process killing itself with each signal; ja keeps the English
#: words for SIGSEGV and SIGILL). The English words are in the kill rule's own patterns.
SHELL_SIGNAL_WORDS_L10N: dict[str, str] = {
    **dict.fromkeys(
        ("已杀死", "強制結束", "強制終了", "죽었음", "Getötet", "Убито", "Processus arrêté")
        + ("Terminado (killed)", "Morto"),
        "SIGKILL",
    ),
    **dict.fromkeys(
        ("段错误", "程式記憶體區段錯誤", "세그멘테이션 오류", "Speicherzugriffsfehler")
        + ("Ошибка сегментирования", "Erreur de segmentation", "Violación de segmento")
        + ("Falha de segmentação",),
        "SIGSEGV",
    ),
    **dict.fromkeys(
        ("已放弃", "中止", "중지됨", "Abgebrochen", "Аварийный останов", "Abandon", "Abortado"),
        "SIGABRT",
    ),
    **dict.fromkeys(
        ("总线错误", "匯流排錯誤", "バスエラー", "버스 오류", "Bus-Zugriffsfehler", "Ошибка шины")
        + ("Erreur du bus", "Error del bus", "Erro no barramento"),
        "SIGBUS",
    ),
    **dict.fromkeys(
        ("非法指令", "無效指令", "명령어가 잘못됨", "Ungültiger Maschinenbefehl")
        + ("Недопустимая инструкция", "Instruction non permise", "Instrucción ilegal")
        + ("Instrução ilegal",),
        "SIGILL",
    ),
    **dict.fromkeys(
        ("浮点数例外", "浮點數例外", "浮動小数点例外", "부동 소수점 예외", "Gleitkomma-Ausnahme")
        + ("Исключение в операции с плавающей точкой", "Exception en point flottant")
        + ("Excepción de coma flotante", "Exceção de ponto flutuante"),
        "SIGFPE",
    ),
    # SIGTERM: a stop (before the server was up, a kill); counted on a job report only
    **dict.fromkeys(
        ("已终止", "終止", "종료됨", "Beendet", "Завершено", "Complété", "Terminado"), "SIGTERM"
    ),
}
#: bash's "(core dumped)" in those languages (bash.mo), after the signal's word.
CORE_DUMPED_L10N: tuple[str, ...] = (
    "（核心已转储）",
    "(核心已傾印)",
    "(コアダンプ)",
    "(코어 덤프됨)",
    "(Speicherabzug geschrieben)",
    "(образ памяти сброшен на диск)",
    "(`core' generado)",
    "(imagem do núcleo gravada)",
)


def _alternation(words: Iterable[str]) -> str:
    """A regex alternation of literal words, the longest first (``Terminado (killed)``
    before ``Terminado``)."""
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


#: Regex fragments: any of those signal words (SIGTERM's, or all others), any core-dump note.
L10N_STOP_WORDS = _alternation(w for w, s in SHELL_SIGNAL_WORDS_L10N.items() if s == "SIGTERM")
L10N_KILL_WORDS = _alternation(w for w, s in SHELL_SIGNAL_WORDS_L10N.items() if s != "SIGTERM")
L10N_CORE_DUMPED = _alternation(CORE_DUMPED_L10N + ("(core dumped)",))


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
    ``b``. A ``weak`` rule (a warning, not an error) only counts when a crash follows, or
    when its hit ends what the log shows: ``fatal_at_end`` "traceback" (the exception that
    ends the log's last traceback: the program stopped on it) or "log" (no progress after
    it: the engine raises at once after that line, so a log ending there is that failure).
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
    fatal_at_end: Literal["", "traceback", "log"] = ""
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
    fatal_at_end: Literal["", "traceback", "log"] = "",
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
        fatal_at_end=fatal_at_end,
    )


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
