"""The shell's report of a killed process in a non-English locale is a killed process.

Each line below is verbatim what bash 5.2 printed on this machine under that locale (built with
``localedef``; a Python process killing itself with the signal; ``ulimit -c unlimited`` for the
core-dump note): a script's report ("bash: 第 1 行： ..."), the job table of an interactive
shell ("[1]+  已杀死  ..."), and an interactive shell's line of its own ("段错误（核心已转储）").
Read as English only, 28 of these 29 were ``starting`` (a failure read as starting) and one
``unknown``.
"""

from __future__ import annotations

import pytest

from kimi_ops.diagnose import diagnose
from kimi_ops.diagnose.model import SHELL_SIGNAL_WORDS_L10N

#: A server mid-startup, then the shell's line.
STARTUP = (
    "INFO 12-04 23:20:01 [api_server.py:1] vLLM API server version 0.32.0\n"
    "INFO 12-04 23:20:09 [default_loader.py:1] Loading weights took 3.20 seconds\n"
)
#: A server that was up, then the shell's line.
UP = STARTUP + "INFO:     Application startup complete.\n"

SCRIPT = [  # bash -c '...' (a script, no job control): "<line N>: PID <signal>  <command>"
    ("bash: 第 1 行： 2361 已杀死               python3 /tmp/kloc/selfkill.py SIGKILL", "SIGKILL"),
    (
        "bash: 第 1 行： 7134 段错误               （核心已转储）python3 /tmp/kloc/selfkill.py "
        "SIGSEGV",
        "SIGSEGV",
    ),
    ("bash: 1 行:  2577 強制終了            python3 /tmp/kloc/selfkill.py SIGKILL", "SIGKILL"),
    (
        "bash: 1 行:  7258 中止                  (コアダンプ) python3 /tmp/kloc/selfkill.py "
        "SIGABRT",
        "SIGABRT",
    ),
    ("bash: 줄 1:  2795 죽었음               python3 /tmp/kloc/selfkill.py SIGKILL", "SIGKILL"),
    (
        "bash: Zeile 1:  3084 Getötet                python3 /tmp/kloc/selfkill.py SIGKILL",
        "SIGKILL",
    ),
    (
        "bash: Zeile 1:  7341 Abgebrochen             (Speicherabzug geschrieben) python3 "
        "/tmp/kloc/selfkill.py SIGABRT",
        "SIGABRT",
    ),
    ("bash: строка 1:  3300 Убито              python3 /tmp/kloc/selfkill.py SIGKILL", "SIGKILL"),
]
JOB_TABLE = [  # an interactive bash's report of a background job
    ("[1]+  已杀死               python3 /tmp/kloc/selfkill.py SIGKILL", "SIGKILL"),
    ("[1]+  总线错误            python3 /tmp/kloc/selfkill.py SIGBUS", "SIGBUS"),
    ("[1]+  バスエラー         python3 /tmp/kloc/selfkill.py SIGBUS", "SIGBUS"),
    ("[1]+  세그멘테이션 오류 python3 /tmp/kloc/selfkill.py SIGSEGV", "SIGSEGV"),
    ("[1]+  Bus-Zugriffsfehler      python3 /tmp/kloc/selfkill.py SIGBUS", "SIGBUS"),
    (
        "[1]+  Ошибка сегментирования                   python3 /tmp/kloc/selfkill.py SIGSEGV",
        "SIGSEGV",
    ),
]
OWN_LINE = [  # an interactive bash, the job in the foreground
    ("已杀死", "SIGKILL"),
    ("段错误（核心已转储）", "SIGSEGV"),
    ("非法指令（核心已转储）", "SIGILL"),
    ("浮動小数点例外 (コアダンプ)", "SIGFPE"),
    ("죽었음", "SIGKILL"),
    ("Getötet", "SIGKILL"),
    ("Speicherzugriffsfehler (Speicherabzug geschrieben)", "SIGSEGV"),
    ("Убито", "SIGKILL"),
    ("Ошибка шины (образ памяти сброшен на диск)", "SIGBUS"),
    ("Processus arrêté", "SIGKILL"),
    ("Erreur de segmentation (core dumped)", "SIGSEGV"),
    ("Terminado (killed)", "SIGKILL"),
    ("Violación de segmento (`core' generado)", "SIGSEGV"),
    ("Morto", "SIGKILL"),
    ("Falha de segmentação (imagem do núcleo gravada)", "SIGSEGV"),
]


@pytest.mark.parametrize(("line", "signal"), SCRIPT + JOB_TABLE + OWN_LINE)
def test_the_shell_s_words_in_other_languages_name_the_signal(line: str, signal: str) -> None:
    d = diagnose(STARTUP + line + "\n")
    assert (d.label, d.facts.get("signal")) == ("engine_killed", signal), (d.summary, d.evidence)


@pytest.mark.parametrize(("line", "signal"), SCRIPT[:1] + JOB_TABLE[:1] + OWN_LINE[:2])
def test_far_into_a_long_log_too(line: str, signal: str) -> None:
    """Past the head every line is read in (``scanner._FULL_SCAN``), the line filter finds them:
    a line that starts with a non-ASCII word, a job report, a script's "bash: "."""
    serving = "".join(
        f"INFO 12-04 23:{i // 60 % 60:02d}:{i % 60:02d} [loggers.py:1] Engine 000: Avg prompt "
        "throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs\n"
        for i in range(40_000)
    )
    d = diagnose(UP + serving + line + "\n")
    assert (d.label, d.facts.get("signal")) == ("engine_killed", signal), d.summary


@pytest.mark.parametrize("word", ["已终止", "Beendet", "Завершено", "종료됨", "Terminado"])
def test_a_job_stopped_with_sigterm_once_up_is_a_stop(word: str) -> None:
    d = diagnose(UP + f"[1]+  {word}               vllm serve /models/x\n")
    assert d.label == "healthy" and d.lifecycle == "stopped", (d.summary, d.evidence)
    d = diagnose(STARTUP + f"[1]+  {word}               vllm serve /models/x\n")
    assert (d.label, d.facts.get("signal")) == ("engine_killed", "SIGTERM")


def test_the_words_stay_the_shell_s_in_a_sentence() -> None:
    for text in ("Abandon the run if it stalls", "Morto di fame", "中止当前请求", "Beendet."):
        assert diagnose(UP + text + "\n").label == "healthy"


def test_every_word_has_a_signal() -> None:
    assert set(SHELL_SIGNAL_WORDS_L10N.values()) == {
        "SIGKILL",
        "SIGSEGV",
        "SIGABRT",
        "SIGBUS",
        "SIGILL",
        "SIGFPE",
        "SIGTERM",
    }
