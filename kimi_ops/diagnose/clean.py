"""Strip a log line's decorations (prefixes, timestamps, ANSI colours, quotes) before matching."""

from __future__ import annotations

import functools
import json
import re

_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
#: Colour codes pasted in caret notation (``^[[0;36m``), as terminals copy them.
_CARET_ANSI_RE = re.compile(r"\^\[\[[0-?]*[ -/]*[@-~]")
#: Colour codes whose ESC byte a paste spelled out (``ESC[1;36m``, ``\x1b[0m``, ``\033[0m``,
#: syslog's ``#033[0m``) or lost (`` [36m``): only SGR codes (digits and ``;`` then ``m``),
#: so ``[5m]`` text stays.
_LITERAL_ANSI_RE = re.compile(
    r"(?:ESC|\\x1[bB]|\\033|#033|\\e|\\u001[bB])?\[(?:\d{1,3};)*\d{1,3}m(?!\])"
)
_BOLD_PREFIX_RE = re.compile(r"\*\*(\([^()]*pid=\d+[^()]*\))\*\*")
_PREFIX_RE = re.compile(  # one or more decorations at the start of a line
    r"""^(?:
        [ \t]*>+[ ]?                                          # markdown quote
      | [ \t]*\#[ ](?=[ ]*(?:Traceback[ ]|File[ ]"|[\w.]+(?:Error|Exception)\b))  # commented out
      | \[\d{4}-\d\d-\d\d[ ]\d\d:\d\d:\d\d,\d+[ ][IWEF][ ]\d+[ ]\d+\][ ]  # Ray's C++ log
      | (?:\[[\w.\-]+\]|[\w.\-]+)[ ]+\|[ ]?                  # docker compose "svc-1  | "
      | [ \t]*\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ \t]?  # ISO
        (?:\|[ ]?)?                                          # ... "ts | " (log viewers)
        (?:std(?:out|err)[ ][FP][ ])?                        # ... CRI's stream and tag
        (?:[\w.\-]+[ ][\w.\-/@]+\[\d+\]:[ ])?                 # ... journalctl -o short-iso
      | (?:<\d{1,3}>)?(?:\w{2,4}\.?[ ]+\d{1,2}[ ]\d\d:\d\d:\d\d(?:\.\d+)?  # syslog, short-precise
          |\w{3}[ ]\d{4}-\d\d-\d\d[ ]\d\d:\d\d:\d\d[ ]\w+)   # journalctl -o short-full
        [ ]\S+[ ][\w.\-/@]+(?:\[\d+\])?:[ ]                  # ... host ident[pid]:
      | \[[ ]*\d+\.\d+\][ ][\w.\-]+[ ][\w.\-/@]+\[\d+\]:[ ]     # journalctl -o short-monotonic
      | <\d{1,3}>\d[ ]\S+[ ]\S+[ ]\S+[ ]\S+[ ]\S+[ ](?:-|(?:\[[^\]]*\])+)[ ]?  # RFC 5424 header
      | [│┃][ ]*                                              # k9s / kubectl box border
      | \[pod/[\w.\-]+/[\w.\-]+\](?:[ ]|$)                    # kubectl logs --prefix
      | \((?:[^()\s]+[ ])*?pid=\d+[^()]*\)[ ]?               # (APIServer pid=1)
      | \[rank\d+\]:[ ]?                                      # torch rank prefix
      | \[default\d+\]:                                       # torchrun's --tee / --redirects
      | \[\d+,\d+\]<std(?:out|err)>:[ ]?                      # mpirun --tag-output
      | [ ]*\d{1,5}:[ ]                                       # srun --label: "0: "
      | E[ ]{3,7}                                             # pytest's failure lines
      | [ ]*\|[ ](?=[ ]*(?:File[ ]"|Traceback[ ]|[\w.]+(?:Error|Exception)\b))  # loguru, ExcGroup
      | \[[A-Za-z]+\][ ]                                     # "[Info] " level tags
      | \[Stage-\d+\][ ]                                      # vLLM-Omni's stage tag
      | \[[A-Z]+[ ]?\][ ]W-\d+-\S+[ ]MODEL_LOG[ ]-[ ]          # TorchServe's worker output
      | \[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\|[\w.\-]+:\d+(?::\d+)?\][ ]  # transformers'
        (?:\d{4}-\d\d-\d\d[ ][\d:,.]+[ ])?>>[ ]?            # ... "[INFO|f.py:12] <ts> >> "
      | [ ]*(?:TRACE|DEBUG|INFO|WARN|ERROR)[ ]+[a-z_]\w*(?:::\w+)+:[ ]  # Rust tracing's target
      | \((?:Process|stdout|stderr)\)[ ]                       # launcher stream tags
      | \|[ ](?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ ]\|[ ][\w.\-]+[ ]\|[ ]  # FastChat
      | [ \t]*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)      # level ...
        (?::[ ]+
          |[ ]+(?=\d\d-\d\d[ ]|\d{4}-\d\d|\[[\w.\-/]+\.py(?::\d+)?\]|[\w.\-/]+\.py:\d+\]))
        (?:\d{2,4}-\d\d(?:-\d\d)?[ ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?[ ]+)?  # ... timestamp
        (?:\[?[\w.\-/]+\.py:\d+\[?\][ ]?|\[[\w.\-/]+\.py\][ ]?)?  # ... [file.py:12] ("12[]"
        #                                             pasted; [file.py]: a JSON record's logger)
    )+""",
    re.X,
)
_GLUED_RE = re.compile(r"\((?:[^()\s]+ )*?pid=\d+[^()]*\) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


#: docker's json-file log driver (``/var/lib/docker/containers/*/*-json.log``, and collectors
#: that forward it as is): one JSON object per line, the output line in its "log" field.
DOCKER_JSON_START = '{"log":"'


def _unwrapped(line: str) -> str:
    """The output line a docker json-file record holds (its "log" field, without its newline),
    or ``line`` itself when it is no such record."""
    if not line.startswith(DOCKER_JSON_START):
        return line
    try:
        record = json.loads(line)
    except ValueError:  # cut mid-record: its text, unescaped as far as it goes
        return line[len(DOCKER_JSON_START) :].split('","stream":', 1)[0].replace('\\"', '"')
    text = record.get("log") if isinstance(record, dict) else None
    return text.rstrip("\r\n") if isinstance(text, str) else line


def unwrap_docker_json(block: str) -> str:
    """``block`` (complete lines) with each docker json-file record replaced by the output
    line it holds; other lines unchanged."""
    lines = block.split("\n")
    return "\n".join(_unwrapped(ln) if ln[:1] == "{" else ln for ln in lines)


#: A structured log record, one JSON object a line: vLLM's own ``--logging-config.formatter
#: json`` (0.32; python-json-logger with asctime, levelname, name, processName, process,
#: message, vllm_process_name, and the traceback in exc_info), and the like configured through
#: VLLM_LOGGING_CONFIG_PATH or a log shipper (msg / level / time / logger keys).
_JSON_RECORD_KEYS = ('"message"', '"msg"')
_RECORD_TIME_RE = re.compile(r"\d{4}-(\d\d-\d\d)[T ](\d\d:\d\d:\d\d)")
_RECORD_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


@functools.lru_cache(maxsize=256)
def _record_head(proc: str, pid: str, level: str, where: str) -> tuple[str, str | None]:
    """The header vLLM's text formatter prints before each line of a record, in two parts
    around the time: ``("(EngineCore pid=9) ERROR ", "[core.py] ")``; no line number (a JSON
    record of vLLM's own format has none: its logger's module stands for the file). A record
    that names no level gets the process prefix alone, and ``None`` for the second part (no
    time, no file)."""
    head = f"({proc} pid={pid}) " if proc and pid.isdigit() else ""
    level = level.upper()
    level = "WARNING" if level == "WARN" else level
    if level not in _RECORD_LEVELS:
        return head, None
    return head + level + " ", f"[{where}] " if where else ""


@functools.lru_cache(maxsize=256)
def _logger_file(name: str) -> str:
    """``vllm.v1.engine.core`` -> ``core.py`` (vLLM's loggers are named after their module)."""
    return name.rsplit(".", 1)[-1] + ".py" if name.replace(".", "_").isidentifier() else ""


def _record_lines(record: dict[str, object]) -> list[str] | None:
    """The lines vLLM's text formatter prints for this JSON log record (every line of the
    message and of its traceback behind the record's header, as its NewLineFormatter does),
    or ``None`` when the object is no log record."""
    get = record.get
    message = get("message", get("msg"))
    level = get("levelname") or get("level") or get("severity")
    # a record has a level or a logger beside its message (an API's error body has neither)
    if not isinstance(message, str) or not (level or get("name") or get("logger")):
        return None
    where = get("filename")
    if where:  # a custom format's %(filename)s:%(lineno)d; else the logger's module
        line = str(get("lineno", ""))
        where = f"{where}:{line}" if line.isdigit() else str(where)
    else:
        where = _logger_file(str(get("name") or get("logger") or ""))
    head, after = _record_head(
        str(get("vllm_process_name") or ""), str(get("process", "")), str(level or ""), where
    )
    if after is not None:  # a level: the time between it and the file
        when = str(get("asctime") or get("time") or get("timestamp") or "")
        if len(when) >= 19 and when[4] == "-" and when[13] == ":":  # asctime / ISO, quickly
            head += f"{when[5:10]} {when[11:19]} "
        elif (m := _RECORD_TIME_RE.search(when)) is not None:
            head += f"{m[1]} {m[2]} "
        head += after
    text = message
    for key in ("exc_info", "exc_text", "stack_info"):
        extra = get(key)
        if isinstance(extra, str) and extra and extra != "None":
            text += "\n" + extra.rstrip("\n")
    if "\n" not in text:
        return [head + text]
    return [head + part for part in text.split("\n")]


def _unwrap_record(line: str) -> str:
    start = line.find('{"')
    if start < 0 or not any(k in line for k in _JSON_RECORD_KEYS):
        return line
    prefix = line[:start]
    if prefix:  # a decoration before the record (compose, kubectl, a timestamp): kept
        bare = uncolored(prefix)
        known = _PREFIX_RE.match(bare)
        if known is None or known.end() != len(bare):
            return line
    try:
        record = json.loads(line[start:])
    except ValueError:
        return line
    lines = _record_lines(record) if isinstance(record, dict) else None
    return line if lines is None else "\n".join(prefix + part for part in lines)


def unwrap_json_records(block: str) -> str:
    """``block`` (complete lines) with each structured JSON log record written as the lines
    vLLM's text formatter prints for it (its traceback one line a frame, as the rules read
    it); other lines unchanged."""
    return "\n".join(_unwrap_record(ln) if '{"' in ln else ln for ln in block.split("\n"))


def has_json_records(block: str) -> bool:
    """Whether ``block`` may hold structured JSON log records (a cheap test first)."""
    # (str.rfind: about twice as fast as `in` for a needle that is absent, the common case)
    return block.rfind('{"') >= 0 and any(block.rfind(k + ":") >= 0 for k in _JSON_RECORD_KEYS)


#: How many of a log's first non-empty lines decide its learned line prefix (below).
PREFIX_SAMPLE = 12
#: ... and its hard wrap (long lines are fewer: a terminal's width shows on them only).
WRAP_SAMPLE = 40
#: One token of an unknown per-line decoration: a pod, container or host name ("vllm-0",
#: "gpu-node-01:"), no spaces or parentheses; each holds a digit or a separator (a later one
#: may be a lowercase container name), so a sentence's words ("Loading safetensors ...",
#: "Processed prompts: ...") are never taken for one.
_PREFIX_TOKEN_RE = re.compile(r"[^\s()]+ ")  # one space: the line's own indent stays
_MARKED_TOKEN_RE = re.compile(r"[\d\-_./@\[\]]")
_DNS_LABEL_RE = re.compile(r"[a-z0-9][a-z0-9\-]*$")
#: ... nor a level, a traceback word, a time, a bare number (a date's day, a line number), or
#: NCCL's own "host:pid:tid" and "NCCL" (its records are the log's text, not a decoration).
_NOT_A_PREFIX_RE = re.compile(
    r"(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL|File|Traceback|NCCL|\^C)\W*$"
    r"|.*\d:\d\d|\d+$|\S+:\d+:\d+$"
)


def _first_lines(text: str, n: int, blank: bool = False) -> list[str]:
    """The first ``n`` non-empty lines of ``text`` (among its first ``4 * n``), the sample
    each learned decoration is decided from; with ``blank``, lines of spaces count (a hard
    wrap's piece of a line padded with trailing spaces)."""
    return [ln for ln in text.split("\n", 4 * n) if (ln if blank else ln.strip())][:n]


def learn_line_prefix(text: str) -> str | None:
    """The decoration every line of ``text`` starts with that no known one matches, if any.

    Tools prefix each line with their own constant label: stern's ``pod container``, pdsh /
    clush's ``host:``, a wrapper script's tag. Such a label is learned from the log's first
    :data:`PREFIX_SAMPLE` non-empty lines: up to three leading tokens that at least three
    quarters of them (and at least two) share, the first marked as a name (a digit or a
    separator in it), none a level, a time or a traceback word, stopping where a known
    decoration (timestamp, process prefix, level) begins. ``None`` when there is none.
    """
    # "\n" lines only: a progress bar's "\r" updates carry no label of their own
    lines = _first_lines(text, PREFIX_SAMPLE)
    if any(ln.startswith(DOCKER_JSON_START) for ln in lines):  # the lines the records hold
        lines = [_unwrapped(ln) for ln in lines]
    if len(lines) < 2:
        return None
    need = max(2, -(-3 * len(lines) // 4))
    first = lines[0]  # raw: a coloured label (stern colours each pod's) is constant too
    prefix = ""
    for _ in range(3):
        rest = first[len(prefix) :]
        known = _PREFIX_RE.match(uncolored(rest))
        tok = _PREFIX_TOKEN_RE.match(rest)
        if (known is not None and known.end() > 0) or tok is None:
            break
        word = uncolored(tok.group()).rstrip()
        # the first token marked as a name; a later one marked too, or a container's name
        unmarked = not _MARKED_TOKEN_RE.search(word) and (
            not prefix or not _DNS_LABEL_RE.match(word)
        )
        if not word or unmarked or _NOT_A_PREFIX_RE.match(word):
            break
        candidate = prefix + tok.group()
        if sum(1 for ln in lines if ln.startswith(candidate)) < need:
            break
        prefix = candidate
    return prefix or None


#: Line numbers a tool put before each line, in the order tried: ``grep -n`` (``12:`` a match,
#: ``13-`` a context line), ``cat -n`` / ``nl`` (right-aligned, then a tab), ``less -N``
#: (right-aligned, then a space), and ``grep -n`` that names the file first (``-H``, several
#: files: ``f:12:`` / ``f-13-``; the name holds a non-digit, so ``3:2026-...`` is line 3).
#: Group 1 is the file (an empty ``()`` in the first three, which their strip pattern drops),
#: group 2 the number.
_NUMBERED_FORMS = (
    re.compile(r"()(\d+)[:\-]"),
    re.compile(r"()[ ]*(\d+)(?:\t|$)"),
    re.compile(r"()[ ]*(\d+)(?:[ ]|$)"),
    re.compile(r"([^\s:]*?[^\s:\d][^\s:]*?)[:\-](\d+)[:\-]"),
)


def learn_line_numbers(text: str) -> re.Pattern[str] | None:
    """A pattern for the line numbers every line of ``text`` starts with, if it has them.

    Learned from the first :data:`PREFIX_SAMPLE` non-empty lines: at least three quarters of
    them (and at least three) start with a number in one of :data:`_NUMBERED_FORMS` (after
    the same file name, if any), and the numbers rise from line to line (or all fall: a
    newest-first paste put back in order), so a time, a date's year or srun's constant task
    number is never taken for one. ``None`` when there are none.
    """
    lines = _first_lines(text, PREFIX_SAMPLE)
    need = max(3, -(-3 * len(lines) // 4))
    for form in _NUMBERED_FORMS:
        found = [m for ln in lines if (m := form.match(ln)) is not None]
        if len(found) < need or len({m[1] for m in found}) != 1:
            continue
        numbers = [int(m[2]) for m in found]
        pairs = list(zip(numbers, numbers[1:], strict=False))
        # rising; or falling, where a newest-first paste was put back in order
        if all(a < b for a, b in pairs) or all(a > b for a, b in pairs):
            file = found[0][1]
            if file:  # the file's name before a match's ":" or a context line's "-"
                return re.compile(rf"^{re.escape(file)}[:\-]\d+[:\-]", re.M)
            return re.compile("^" + form.pattern[2:], re.M)
    return None


def strip_line_numbers(block: str, numbers: re.Pattern[str]) -> str:
    """``block`` with the learned line numbers taken off each line (and grep's ``--``
    separator lines between context groups left as they are)."""
    return numbers.sub("", block)


#: How a line that begins a record of its own starts (beyond a known decoration): a traceback's
#: indentation or words, a bracket (not a Python list of strings, nor an address cut from its
#: line: "[<redacted>]:58159", "[::1]:8000"), a process prefix, a syslog priority, a JSON
#: record, an exception, a level, a date or time.
_RECORD_START_RE = re.compile(
    r"\t|[ ]{2}|Traceback|File[ ]\"|\[(?!['\"<:])|\([^()]*pid=\d|<\d|\{\""
    # an exception's type, or a program's own "Error: ..." / "Warning: ..." line
    r"|(?:[A-Z]\w*)?(?:Error|Exception|Warning|Exit)\b"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b|\d{4}-\d\d-\d\d|\d\d-\d\d[ ]\d\d:"
)
#: The narrowest terminal width taken for a hard wrap (narrower lines are a log's own).
_MIN_WRAP = 60


#: A line that ends at a record's head, its logger's ``[file.py:N]`` (vLLM's format puts the
#: message after it on the same line): cut there by a wrap, whatever the next piece begins with.
_BARE_HEAD_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) .*\[[\w.\-]+:\d+\]$")


#: A line that ends inside a chain of bracket tags glued together (the heads of HCCL's and
#: other C++ loggers: "[3154][TaskExecStage]"), and a piece that goes on with one more glued tag
#: ("[Timeout][AICPU]Task run failed"): a wrap cut the chain, no record starts there.
_TAG_CHAIN_END_RE = re.compile(r"\][\w.\-]*\[[^\[\]\s]+\]$")
_TAG_CHAIN_GOES_ON_RE = re.compile(r"\[[^\[\]\s]+\][\[\w]")


def _continues(prev: str, line: str, lead: re.Pattern[str] | None) -> bool:
    """Is ``line`` the rest of ``prev``, a line a hard wrap cut?"""
    if not _starts_record(line, lead):
        return True
    if not prev.endswith("]"):
        return False
    return _BARE_HEAD_RE.search(prev) is not None or (
        _TAG_CHAIN_END_RE.search(prev) is not None and _TAG_CHAIN_GOES_ON_RE.match(line) is not None
    )


def _starts_record(line: str, lead: re.Pattern[str] | None = None) -> bool:
    """Whether ``line`` begins a record of its own: a tool's learned decoration (``lead``: its
    line numbers or label, which a wrapped piece lacks), a known one, or a record's words."""
    if lead is not None and lead.match(line):
        return True
    if not line.strip():  # spaces alone: a piece of a line padded with trailing spaces
        return False
    bare = uncolored(line)
    known = _PREFIX_RE.match(bare)
    return (known is not None and known.end() > 0) or _RECORD_START_RE.match(bare) is not None


def line_lead(numbers: re.Pattern[str] | None, prefix: str | None) -> re.Pattern[str] | None:
    """A pattern for the start of a line that a tool decorated with the learned ``numbers``
    or ``prefix`` (either may be ``None``), or ``None`` without either."""
    parts = [numbers.pattern.removeprefix("^")] if numbers is not None else []
    parts += [re.escape(prefix)] if prefix else []
    return re.compile("|".join(parts)) if parts else None


def learn_wrap_width(text: str, lead: re.Pattern[str] | None = None) -> int | None:
    """The width a terminal (tmux, screen, a web console) hard-wrapped ``text`` at, if it did.

    Learned from the first :data:`WRAP_SAMPLE` non-empty lines: the longest is at least
    :data:`_MIN_WRAP` characters, at least two lines have exactly its length and are followed
    by a line that begins no record (a piece of the same line), and so are two thirds of the
    lines of that length (a log's own lines of one length, metrics or progress lines, are each
    followed by a record of their own). ``None`` when it was not wrapped.
    """
    lines = _first_lines(text, WRAP_SAMPLE, blank=True)
    width = max((len(ln) for ln in lines), default=0)
    if width < _MIN_WRAP:
        return None
    full = [i for i, ln in enumerate(lines[:-1]) if len(ln) == width]
    pieces = sum(1 for i in full if _continues(lines[i], lines[i + 1], lead))
    return width if pieces >= 2 and 3 * pieces >= 2 * len(full) else None


def join_wrapped(block: str, width: int, lead: re.Pattern[str] | None = None) -> str:
    """``block`` with each line that a hard wrap at ``width`` cut joined up again: a line of
    exactly that width continues on the next unless the next begins a record of its own."""
    lines = block.split("\n")
    out: list[str] = []
    last = 0  # the length of the last physical line read
    for ln in lines:
        if last == width and out and ln and _continues(out[-1][-width:], ln, lead):
            out[-1] += ln
        else:
            out.append(ln)
        last = len(ln)
    return "\n".join(out)


def first_pieces(text: str, width: int) -> str:
    """The lines of ``text`` that no line of exactly ``width`` precedes: the starts of the
    lines a hard wrap at ``width`` cut (where a tool's numbers or label are)."""
    lines = text.split("\n")
    return "\n".join(ln for i, ln in enumerate(lines) if i == 0 or len(lines[i - 1]) != width)


def held_wrapped_line(data: str, cut: int, width: int) -> int:
    """Where to cut ``data`` (complete lines up to ``cut``, a newline) so that the last lines
    of exactly ``width`` (the pieces of one line so far) wait for the next one: the newline
    before the first of them (-1 if all are), or ``cut``."""
    while cut >= 0:
        start = data.rfind("\n", 0, cut) + 1
        if cut - start != width:
            break
        cut = start - 1
    return cut


#: A record's time, as a log viewer prefixes it (ISO date and time) or as vLLM prints it
#: (level, month-day, time): what tells a newest-first paste (Grafana, Kibana) from a log.
_ISO_STAMP_RE = re.compile(r"^\W{0,4}(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:[.,]\d+)?)")
_VLLM_STAMP_RE = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d) (\d\d:\d\d:\d\d)")
#: How many changes of time among a log's first lines (up to _ORDER_LINES) decide its order.
_ORDER_CHANGES = 20
_ORDER_LINES = 2000
_MIN_DESCENDING = 2


def newest_first(text: str) -> bool:
    """Whether ``text`` is a log pasted newest line first (Grafana's and Kibana's default
    order): from line to line of its first lines that carry a time (a viewer's ISO stamps
    compared among themselves, and vLLM's own), the time falls at least
    :data:`_MIN_DESCENDING` times and four times as often as it rises (each kind read until
    :data:`_ORDER_CHANGES` changes). RunPod's console, for one, shows a worker's log so."""
    head = text[: 512 * _ORDER_LINES].split("\n", _ORDER_LINES)[:_ORDER_LINES]
    falls = rises = 0
    for stamp in (_ISO_STAMP_RE, _VLLM_STAMP_RE):  # each kind of time against its own kind
        last = None
        for line in head:
            m = stamp.search(uncolored(line)) if stamp is _VLLM_STAMP_RE else stamp.match(line)
            if m is None:
                continue
            now = m[1] + " " + m[2].replace(",", ".")
            if last is not None and now != last:
                falls, rises = falls + (now < last), rises + (now > last)
                if falls + rises >= _ORDER_CHANGES:
                    break
            last = now
    return falls >= _MIN_DESCENDING and falls >= 4 * rises


def oldest_first(text: str) -> str:
    """``text`` in the order it was logged: a newest-first paste (:func:`newest_first`) with
    its lines reversed, else ``text`` itself."""
    if not newest_first(text):
        return text
    lines = text.rstrip("\n").split("\n")
    return "\n".join(reversed(lines)) + "\n"


#: Typographic quotes a web page or a word processor put in place of a log's own ' and ".
_CURLY_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def straight_quotes(block: str) -> str:
    """``block`` with typographic quotes (a blog's or a rendered page's ``‘...’``, ``“...”``)
    made the straight ones the log printed (a cheap test first: most blocks are ASCII)."""
    if block.isascii() or not any(q in block for q in "\u2018\u2019\u201c\u201d"):
        return block
    return block.translate(_CURLY_QUOTES)


def learn_indent(text: str) -> str | None:
    """The indentation a paste put before every line (a markdown code block's four spaces, a
    document's tab), learned from the first :data:`PREFIX_SAMPLE` non-empty lines: all of
    them (at least two) start with it. Four spaces only, so a cut traceback's own frames
    ("  File ...") keep theirs. ``None`` when there is none."""
    lines = _first_lines(text, PREFIX_SAMPLE)
    for indent in ("\t", "    "):
        if len(lines) >= 2 and all(ln.startswith(indent) for ln in lines):
            return indent
    return None


def strip_line_prefix(block: str, prefix: str) -> str:
    """``block`` with ``prefix`` taken off every line that starts with it."""
    n = len(prefix)
    return "\n".join(ln[n:] if ln.startswith(prefix) else ln for ln in block.split("\n"))


def uncolored(line: str) -> str:
    """``line`` without ANSI colour codes (the ESC byte's and caret notation's) and with
    nothing else changed: vLLM's own colour formatter (a terminal, ``docker run -t``) wraps the
    level, the time and ``[file.py:N]`` in codes, which the raw-line checks (whose logger, which
    process prefix) must not see."""
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    if "^[[" in line:
        line = _CARET_ANSI_RE.sub("", line)
    return line


def clean_line(line: str) -> str:
    """Return the message of one log line, without decoration.

    Strips ANSI colour codes and, repeatedly, leading markdown ``>`` quote marks,
    docker-compose ``service-1  | `` prefixes, ISO / bracketed / syslog timestamps and
    ``journalctl``'s ``host ident[pid]:`` in each of its ``-o short*`` formats,
    process prefixes (``(APIServer pid=1)``, ``(EngineCore_DP0 pid=2)``,
    ``(VllmWorker rank=3 pid=4)``), ``[rank0]:``, pytest's ``E   ``, the vLLM / uvicorn level prefix
    (``INFO 03-20 14:02:11 [file.py:12] ``, ``ERROR:    ``). Traceback indentation is
    kept. A log record glued after a tqdm bar (no newline between them) is cut out; a
    leading Ctrl-C echo ``^C`` is kept as ``"^C "``; a trailing caret-notation ``^M`` goes.
    """
    s = line
    if "\x1b" in s:
        s = _ANSI_RE.sub("", s)
    if "^[[" in s:
        s = _CARET_ANSI_RE.sub("", s)
    if "m" in s and ("[0" in s or "[1" in s or "[3" in s or "[9" in s):
        # a reset code between two spaces leaves one space, not two
        t = _LITERAL_ANSI_RE.sub("", s.replace(" [0m ", " ").replace(" [0;0m ", " "))
        if t != s:
            s = t.lstrip(" ") if _LITERAL_ANSI_RE.match(s.lstrip(" ")) else t
    if "\xa0" in s:  # a web page's non-breaking spaces
        s = s.replace("\xa0", " ")
    if "**(" in s:  # a process prefix set in markdown bold: **(VllmWorker TP0 pid=1)**
        s = _BOLD_PREFIX_RE.sub(r"\1", s)
    s = s.rstrip()
    if s.endswith("^M"):  # a carriage return in caret notation (pasted from `cat -v`, less)
        s = s[:-2].rstrip()
    if s.startswith("^C") and len(s) > 2:  # Ctrl-C echoed before a record: keep the mark
        return "^C " + clean_line(s[2:])
    if s.endswith(("│", "┃")):
        s = s[:-1].rstrip()
    m = _PREFIX_RE.match(s + " ")  # (a decoration of an empty line lost its space above)
    if m is not None:
        s = s[m.end() :]
    if s.startswith("**") and s.endswith("**") and len(s) > 6 and "*" not in (s[2], s[-3]):
        s = s[2:-2]  # a line a paste set in markdown bold: **KeyError: 'x'** (not absl's ***)
    if "pid=" in s:
        g = _GLUED_RE.search(s)
        if g is not None and g.start() > 0:
            return clean_line(s[g.start() :])
    return s
