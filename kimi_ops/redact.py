"""Secrets: which values are secret, and how to hide them in anything shown (pure).

A ``kimi.env`` value is secret when its NAME contains one of ``kimi.secret_patterns``
(case-insensitive: TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, PASS, AUTH, ... ). Secret values
never go into the launch script: they reach the server only through the 0600 env file. Every
text kimi-ops shows (results, diffs, JSON, errors, log lines) passes through :func:`mask`, which
replaces each known secret value with ``***``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from .defaults import DEFAULTS

MASK = "***"

#: Substrings of a variable name that make its value a secret (``kimi.secret_patterns``).
DEFAULT_SECRET_PATTERNS: tuple[str, ...] = tuple(DEFAULTS["secret_patterns"])

#: vLLM flags whose value is a secret (``--api-key X`` or ``--api-key=X``; vLLM also reads
#: ``--hf_token``). Both are refused in ``extra_args``; their values are masked all the same.
SECRET_FLAGS: tuple[str, ...] = ("--api-key", "--hf-token")

#: Values shorter than this are not masked by value (masking "1" would blank every digit);
#: they are still kept out of the launch script by name.
MIN_MASK_LENGTH = 4

#: How kimi-ops marks text it cut short (:func:`cut`); "..." marks a cut too (the diagnosis's
#: evidence, :func:`kimi_ops.result.clip`).
CUT_MARK = "…"
#: A part of a known secret left at a cut (a line's end or start, or a cut mark) is masked when
#: it is at least :data:`MIN_CUT_PART` characters of a secret at least :data:`MIN_CUT_SECRET`
#: long (shorter parts would mask ordinary words).
MIN_CUT_PART = 6
MIN_CUT_SECRET = 8
#: Where text may have been cut: a line's end (the host cuts log lines in bytes: ``cut -b``), a
#: line's start (``tail -c`` starts inside a line), and either side of a cut mark.
_CUT_END_RE = re.compile(r"[\r\n]|\s?(?:\.\.\.|…)")  # a cut ends where it starts
_CUT_START_RE = re.compile(r"[\r\n]|(?:\.\.\.|…)[ \t]?")  # a cut starts where it ends
_CUT_EDGE = r"(?=[\r\n]|\s?(?:\.\.\.|…)|\Z)"
#: A credential shape cut short at a cut (:data:`SECRET_VALUE_RE` wants the whole of it): a
#: token's known head with what is left of its tail, a credential URL cut before its "@" (a
#: port's digits are not a password). Only for masking, never to judge a whole value.
_CUT_SHAPE_RE = re.compile(
    r"(?:\b(?:hf_|sk-|gh[pousr]_|github_pat_|glpat-|npm_|xox[abposr]-)|\bAIza|\b(?:AKIA|ASIA)"
    r"|\beyJ)[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*"
    + _CUT_EDGE
    + r"|(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:'\"]*:"
    r"(?![0-9]*" + _CUT_EDGE + r")[^\s/@:'\"]+" + _CUT_EDGE
)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, a cut marked with :data:`CUT_MARK`, so the masker
    hides a secret's head left before it (:meth:`Masker.hide`). Mask before cutting where the
    secrets are known; this is the net for where they are not."""
    return text if len(text) <= limit else text[:limit] + CUT_MARK


def with_default_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """The secret patterns in force: the defaults, always, plus the profile's own
    ``secret_patterns`` (config merging replaces a list, so a profile that lists one pattern
    of its own must not drop TOKEN, KEY, ...)."""
    return tuple(dict.fromkeys([*DEFAULT_SECRET_PATTERNS, *patterns]))


def is_secret_name(name: str, patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS) -> bool:
    upper = name.upper()
    return any(p.upper() in upper for p in patterns if p)


#: Values that carry a credential whatever their variable is called: a URL with a password in
#: it (``postgres://user:pw@db/x``, ``https://user:token@host``, a password holding ``/``), a
#: proxy's ``user:pw@host:3128`` without a scheme, and tokens in the well-known formats
#: (Hugging Face ``hf_...``, OpenAI-style ``sk-...``, GitHub ``ghp_`` / ``github_pat_``, GitLab
#: ``glpat-``, Google ``AIza...``, npm ``npm_...``, Slack ``xox?-``, AWS access key ids, JSON
#: web tokens), and a connection string's ``password=...`` (libpq, ODBC: ``host=db
#: password=x``).
SECRET_VALUE_RE = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:'\"]*:[^\s@'\"]+?@"
    r"|(?<![\w-])(?i:password|passwd|pwd)=[^\s;'\"&]+"
    r"|(?<![\w.%+~:/@-])[\w.%+~-]+:[^\s/@:'\"]+@(?=\[|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::\d|\.[A-Za-z]))"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\bsk-[A-Za-z0-9_-]{20,}"
    r"|\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"
    r"|\bglpat-[A-Za-z0-9_-]{20,}"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\bnpm_[A-Za-z0-9]{30,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"
)

#: Names whose value is a secret wherever it is written (a log line ``HF_TOKEN=...``, vLLM's
#: "non-default args: {'api_key': [...]}"), masked in every text fab shows even when fab's own
#: environment does not hold the value. A profile adds its own (:func:`secret_names`).
KNOWN_SECRET_NAMES: tuple[str, ...] = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "VLLM_API_KEY",
    "api_key",
    "hf_token",
)


def is_secret_value(value: object) -> bool:
    """``value`` holds a credential by its shape (:data:`SECRET_VALUE_RE`), whatever its
    variable's name: e.g. ``DATABASE_URL=postgres://user:pw@db/app``."""
    return isinstance(value, str) and SECRET_VALUE_RE.search(value) is not None


def is_secret_env(
    name: str, value: object, patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS
) -> bool:
    """An environment entry is secret by its name (``secret_patterns``) or by its value's
    shape (:func:`is_secret_value`). Secret entries go to the 0600 env file, never into the
    launch script, and their values are masked wherever kimi-ops shows text."""
    return is_secret_name(name, patterns) or is_secret_value(value)


def split_env(
    env: Mapping[str, str], patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS
) -> tuple[dict[str, str], dict[str, str]]:
    """(public, secret): the environment split by :func:`is_secret_env`."""
    public = {k: v for k, v in env.items() if not is_secret_env(k, v, patterns)}
    secret = {k: v for k, v in env.items() if is_secret_env(k, v, patterns)}
    return public, secret


def redact_env(
    env: Mapping[str, str], patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS
) -> dict[str, str]:
    """The environment with every secret value shown as ``***``."""
    return {k: MASK if is_secret_env(k, v, patterns) else v for k, v in env.items()}


_ASSIGNMENT_RE = re.compile(
    r"(?<![-.\w/])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\$'(?:[^'\\]|\\.)*'|'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^\s;&|]+)"
)


def _prefix_re(flag: str) -> str:
    """A regex for ``flag`` and every abbreviation of it (``--a``, ``--ap`` ... ``--api-key``),
    ``-`` or ``_`` between its words, as vLLM's parser reads it (argparse's ``allow_abbrev``)."""
    tail = ""
    for ch in reversed(flag[3:]):
        tail = f"(?:{'[-_]' if ch == '-' else re.escape(ch)}{tail})?"
    return re.escape(flag[:3]) + tail


#: vLLM's secret flags that take one value or more (``--api-key K1 K2``: nargs "+").
_MANY_VALUED = ("--api-key",)
_WORD = r"(?:'[^']*'|\"[^\"]*\"|\S+)"
_ITEM = r"(?:'[^']*'|\"[^\"]*\")"  # an item of a list's repr or JSON
#: A secret flag (:data:`SECRET_FLAGS`) or an abbreviation of one (``--api-ke``, ``--hf_tok``:
#: the flags :func:`spelled_flag` reads as secret, which ``extra_args`` refuses), and its value;
#: in the space form (and in an argv list's repr or JSON: ``'--api-ke', 'KEY'``) also the
#: words after it that are no flag (further ``--api-key`` values).
#: No complete flag of vLLM's but the secret ones abbreviates one (``--api-server-count`` does
#: not), and an ambiguous abbreviation (``--api``) is an error in vLLM's parser.
_SECRET_FLAG_RE = re.compile(
    r"(?P<flag>"
    + "|".join(_prefix_re(f) for f in SECRET_FLAGS)
    + rf")(?:(?P<eq>=){_WORD}"
    + rf"|(?P<ls>['\"],\s*){_ITEM}(?P<items>(?:,\s*(?!['\"]-){_ITEM})*)"
    + rf"|(?P<sp>\s+){_WORD}(?P<more>(?:[ \t]+(?!-){_WORD})*))"
)


def _mask_flag(m: re.Match[str]) -> str:
    """A :data:`_SECRET_FLAG_RE` match with its value hidden, and every further value of a flag
    that takes several (``--api-key``); a flag's later words otherwise kept."""
    flag = m.group("flag")
    many = spelled_flag(flag, _MANY_VALUED) is not None
    if m.group("eq"):
        return f"{flag}={MASK}"
    if m.group("ls"):  # in a list: keep its quotes
        sep = m.group("ls")
        return f"{flag}{sep}{sep[0]}{MASK}{sep[0]}" + ("" if many else m.group("items"))
    return f"{flag}{m.group('sp')}{MASK}" + ("" if many else m.group("more"))


def _named_value_re(names: Iterable[str]) -> re.Pattern[str]:
    """``NAME=value``, ``NAME: value``, ``'NAME': 'value'`` or ``'NAME': ['value']`` for each
    name (whole names only: ``OLD_HF_TOKEN`` is not ``HF_TOKEN``)."""
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(
        rf"(?P<head>(?<![\w$])(?:{alts})['\"]?\s*(?:=|:\s*)\[?\s*)"
        r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;&|\]}'\"]+)"
    )


_KNOWN_NAMED_RE = _named_value_re(KNOWN_SECRET_NAMES)
#: What a secret name may be given that is no secret: masked already, none, a placeholder
#: (``export HF_TOKEN=...`` in a hint).
_NO_VALUE = frozenset({MASK, "", "...", "None", "null"})


def mask_shapes(text: str, names: Iterable[str] = ()) -> str:
    """``text`` with every credential it shows by its shape hidden, whatever kimi-ops knows of
    its value: values shaped like credentials (:data:`SECRET_VALUE_RE`), a secret flag's value
    (``--api-key X``) and the value given to a known secret name (:data:`KNOWN_SECRET_NAMES`
    and ``names``: ``HF_TOKEN=...`` in a log), also a shape cut short at a cut (a line's end or
    start, a cut mark: ``hf_AbCd…``). Everything fab prints passes through it."""
    if not text:
        return text
    names = tuple(names)
    named = _named_value_re((*KNOWN_SECRET_NAMES, *names)) if names else _KNOWN_NAMED_RE

    def value(m: re.Match[str]) -> str:
        shown = m.group("value").strip("'\"")
        return m.group(0) if shown in _NO_VALUE else f"{m.group('head')}{MASK}"

    text = named.sub(value, text)
    text = _SECRET_FLAG_RE.sub(_mask_flag, text)
    return _CUT_SHAPE_RE.sub(MASK, SECRET_VALUE_RE.sub(MASK, text))


def mask_unknown_secrets(text: str, patterns: Sequence[str] = DEFAULT_SECRET_PATTERNS) -> str:
    """``text`` (a shell script, a command line) with secrets hidden that no :class:`Masker`
    knows the value of: an assignment to a secret-named variable (``export HF_TOKEN=...``), and
    what :func:`mask_shapes` hides. For text kimi-ops did not write now, e.g. an older launch
    script on the host, whose token the current profile no longer holds."""

    def assignment(m: re.Match[str]) -> str:
        if is_secret_env(m.group("name"), m.group("value"), patterns):
            return f"{m.group('name')}={MASK}"
        return m.group(0)

    return mask_shapes(_ASSIGNMENT_RE.sub(assignment, text))


def flag_name(arg: str) -> str:
    """``arg``'s flag name as vLLM reads it (before ``=``, underscores as dashes)."""
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def spelled_flag(arg: str, flags: Any) -> str | None:
    """The flag of ``flags`` that ``arg`` spells as vLLM's parser reads it: the flag itself
    (``--port``, ``--port=8001``, ``--served_model_name``) or an abbreviation of a long one
    (``--por``); None if none."""
    if not arg.startswith("-"):
        return None
    name = flag_name(arg)
    if name in flags:
        return name
    if len(name) < 2 or name == "--":  # "--" alone ends the options
        return None
    # argparse abbreviates single-dash flags too: "-t 4" is "-tp 4"
    long = name.startswith("--")
    return next((f for f in flags if f.startswith(name) and f.startswith("--") == long), None)


def flag_secrets(args: Iterable[Any]) -> list[str]:
    """Values of secret flags (``--api-key X``, ``--hf-token=X``, ``--hf_token X``) in an
    argument list."""
    items = [str(a) for a in args]
    out: list[str] = []
    for i, arg in enumerate(items):
        # vLLM's parser takes an abbreviation (--api-ke X); such a flag is refused, but its
        # value must not show in the error that says so either
        if spelled_flag(arg, SECRET_FLAGS) is None:
            continue
        _, eq, value = arg.partition("=")
        if eq:
            out.append(value)
        elif i + 1 < len(items):
            out.append(items[i + 1])
    return out


def config_secrets(config: Mapping[str, Any], environ: Mapping[str, str]) -> set[str]:
    """Every secret value a raw ``kimi`` section (not yet validated) can bring in: secret-named
    ``env`` values (also under ``host_overrides``), ``api_key``, the variables ``api_key_env``
    and ``secret_env`` name, and secret flags in ``extra_args``. Tolerant of wrong types, so it
    can run before validation (an error message must not show a secret either)."""
    found: set[str] = set()
    sections: list[Mapping[str, Any]] = [config]
    overrides = config.get("host_overrides")
    if isinstance(overrides, Mapping):
        sections += [v for v in overrides.values() if isinstance(v, Mapping)]
    patterns = DEFAULT_SECRET_PATTERNS
    given = config.get("secret_patterns")
    if isinstance(given, (list, tuple)):
        patterns = with_default_patterns(p for p in given if isinstance(p, str) and p)
    for section in sections:
        env = section.get("env")
        if isinstance(env, Mapping):
            for k, v in env.items():
                if is_secret_env(str(k), v, patterns):
                    found |= _strings(v)
        found |= _strings(section.get("api_key"))
        for name_key in ("api_key_env",):
            name = section.get(name_key)
            if isinstance(name, str) and environ.get(name):
                found.add(environ[name])
        names = section.get("secret_env")
        if isinstance(names, (list, tuple)):
            found |= {environ[n] for n in names if isinstance(n, str) and environ.get(n)}
        args = section.get("extra_args")
        if isinstance(args, (list, tuple)):
            found |= set(flag_secrets(args))
    return {v for v in found if v}


def config_secret_names(config: Mapping[str, Any]) -> set[str]:
    """The variable names whose values are secrets in a raw ``kimi`` section: ``secret_env``,
    ``api_key_env`` and the secret-named ``env`` keys (a log line ``NAME=value`` is masked by
    :func:`mask_shapes` even when fab's environment does not hold the value)."""
    names: set[str] = set()
    given = config.get("secret_patterns")
    patterns = DEFAULT_SECRET_PATTERNS
    if isinstance(given, (list, tuple)):
        patterns = with_default_patterns(p for p in given if isinstance(p, str) and p)
    env = config.get("env")
    if isinstance(env, Mapping):
        names |= {k for k in env if isinstance(k, str) and is_secret_name(k, patterns)}
    listed = config.get("secret_env")
    if isinstance(listed, (list, tuple)):
        names |= {n for n in listed if isinstance(n, str)}
    if isinstance(config.get("api_key_env"), str):
        names.add(config["api_key_env"])
    return {n for n in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)}


#: Where Invoke's debug log shows configuration data: ``Runtime config file (PATH): {...}``,
#: ``Overrides: {...}``, ``Environment variable config: {...}`` (a Python repr).
_LOGGED_DATA = ": {"


def secrets_in_logged_config(message: str, environ: Mapping[str, str]) -> set[str] | None:
    """The secrets a ``kimi`` section in an Invoke debug message brings in (``fab -d`` logs each
    config file's data, and the merged levels, as a repr, before any task has run and learnt
    them). None when the message shows a ``kimi`` section that cannot be read back (a YAML date,
    say): then it must not be shown at all."""
    start = message.find(_LOGGED_DATA)
    if start < 0 or "kimi" not in message[start:]:
        return set()
    try:
        data = ast.literal_eval(message[start + 2 :])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, Mapping):
        return None
    kimi = data.get("kimi")
    return config_secrets(kimi, environ) if isinstance(kimi, Mapping) else set()


def hide_logged_data(message: str) -> str:
    """``message`` without its config data (see :func:`secrets_in_logged_config`)."""
    start = message.find(_LOGGED_DATA)
    head = message if start < 0 else message[:start]
    return f"{head}: {{...}} (not shown: kimi-ops cannot read it to mask its secrets)"


def _strings(value: Any) -> set[str]:
    """Every string (or number, as text) in a value, however nested (a secret given with the
    wrong type must stay hidden in the error that says so)."""
    if isinstance(value, Mapping):
        return set().union(*(_strings(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple, set)):
        return set().union(*(_strings(v) for v in value)) if value else set()
    if value is None or isinstance(value, bool):
        return set()
    return {str(value)}


def escaped_forms(value: str) -> set[str]:
    """``value`` as it can appear in text kimi-ops shows: as is, repr-escaped (a Python dict
    printed in a log line: vLLM's "non-default args: {...}"), ``ascii()``-escaped, and each of
    these JSON-escaped with and without ``ensure_ascii`` (``--json`` output, evidence lines).
    A quote, a backslash or a non-ASCII character changes the escaped forms, and a masker that
    looks only for the value itself would miss them. Also its UTF-8 bytes' repr (``b'...'`` in
    an exception's message: http.client's "Invalid header value b'Bearer ...'") and each of
    these repr-escaped once more (that message quoted in another repr: the probe's report)."""
    raw = value.encode("utf-8", "surrogatepass")
    base = {value, repr(value)[1:-1], ascii(value)[1:-1], repr(raw)[2:-1]}
    base |= {repr(form)[1:-1] for form in base}
    forms = set(base)
    for form in base:
        forms.add(json.dumps(form)[1:-1])
        forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
    return forms


#: A credential URL anywhere in a word (``--db=postgres://u:PW@db``), as
#: :data:`SECRET_VALUE_RE` reads it (a password may hold "/"), or a proxy's
#: ``user:PASSWORD@host`` without a scheme at a word's start.
_URL_PASSWORD_RE = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:'\"]*:(?P<pw>[^\s@'\"]+?)@(?P<rest>\S*)"
)
_PROXY_PASSWORD_RE = re.compile(r"[^\s/@:'\"]*:(?P<pw>[^\s@'\"]+?)@(?P<rest>\S*)")
_PERCENT_RE = re.compile(r"%[0-9A-F]{2}")
#: A connection string's password (``host=db user=kimi password=PW``; ``Pwd=PW;`` in ODBC's).
_KV_PASSWORD_RE = re.compile(r"(?<![\w-])(?i:password|passwd|pwd)=([^\s;'\"&]+)")


def _url_passwords(word: str) -> set[str]:
    """The passwords of the credential URLs in ``word``: up to the first "@" after the user
    (:data:`SECRET_VALUE_RE`'s reading) and, when the host part holds another "@", up to the
    last one (``u:p@ss@db``: a client reads "p@ss")."""
    if "://" in word:  # each URL in the word, wherever it starts
        matches = list(_URL_PASSWORD_RE.finditer(word))
    else:  # a proxy's user:PASSWORD@host is the whole word
        proxy = _PROXY_PASSWORD_RE.match(word)
        matches = [proxy] if proxy else []
    found: set[str] = set()
    for m in matches:
        found.add(m.group("pw"))
        host = m.group("rest").split("/", 1)[0]
        if "@" in host:
            found.add(m.group("pw") + "@" + host.rpartition("@")[0])
    return found


def secret_parts(value: str) -> set[str]:
    """``value`` and what else shows the same secret: its percent-encoded and -decoded forms
    (a password written into a URL, a URL printed decoded), and the password of each credential
    URL in it, alone and in those forms (a client logs "authenticating with PASSWORD", or a
    URL's password percent-encoded). Parts shorter than :data:`MIN_MASK_LENGTH` are left out."""
    parts = {value}.union(*(_url_passwords(word) for word in value.split()))
    parts |= {m.group(1) for m in _KV_PASSWORD_RE.finditer(value)}
    parts |= {unquote(p) for p in parts}
    encoded = {quote(p, safe="") for p in parts}
    parts |= encoded | {_PERCENT_RE.sub(lambda m: m.group(0).lower(), e) for e in encoded}
    return {p for p in parts if len(p) >= MIN_MASK_LENGTH}


class Masker:
    """Replaces known secret values in text with ``***`` (longest first, so a secret that
    contains another is hidden whole), in each of their :func:`escaped_forms` and
    :func:`secret_parts` (a credential URL's password alone, percent-encoded or decoded)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: set[str] = set()
        self.forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._starts: dict[str, list[str]] = {}  # first character -> the forms it begins
        self._longest = 0
        self._long: list[str] = []  # the forms a part of which is masked at a cut
        self._grams: set[str] = set()  # their MIN_CUT_PART-character pieces (a quick "no")
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        given = {v for v in values if isinstance(v, str) and len(v) >= MIN_MASK_LENGTH}
        new = set().union(*(secret_parts(v) for v in given)) if given else set()
        if new - self.values:
            self.values |= new
            self.forms = set().union(*(escaped_forms(v) for v in self.values))
            ordered = sorted(self.forms, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
            self._longest = len(ordered[0])
            self._starts = {}
            for form in ordered:
                self._starts.setdefault(form[0], []).append(form)
            # Not every prefix and suffix as a set: that is quadratic in a secret's length (a
            # PEM key of 3 KB took 60 MB); the forms are searched at each cut instead.
            self._long = [f for f in ordered if len(f) >= MIN_CUT_SECRET]
            n = MIN_CUT_PART
            self._grams = {f[i : i + n] for f in self._long for i in range(len(f) - n + 1)}

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def hide(self, text: str) -> str:
        """``text`` as it may be shown: every known secret masked (as by calling the masker),
        and a part of one left at a cut masked too: a head (>= :data:`MIN_CUT_PART` characters
        of a secret >= :data:`MIN_CUT_SECRET` long) that ends a line or the text or comes before a
        cut mark ("...", "…"), a tail that starts a line or the text or follows a cut mark. A
        line cut in bytes on the host (``cut -b``), or cut by a limit where the secrets were not
        known, must not show a secret's first characters."""
        text = self(text)
        if not self._long or not text:
            return text
        spans: list[tuple[int, int]] = []
        n, grams = MIN_CUT_PART, self._grams
        for end in (*(m.start() for m in _CUT_END_RE.finditer(text)), len(text)):
            if end >= n and text[end - n : end] in grams:
                start = self._head_before(text, end)
                if start is not None:
                    spans.append((start, end))
        for start in (0, *(m.end() for m in _CUT_START_RE.finditer(text))):
            if text[start : start + n] in grams:
                end = self._tail_after(text, start)
                if end is not None:
                    spans.append((start, end))
        out: list[str] = []
        pos = 0
        for start, end in sorted(spans):
            if start >= pos:
                out += [text[pos:start], MASK]
                pos = end
            elif end > pos:  # overlaps the span before: one mask for both
                pos = end
        return "".join(out) + text[pos:]

    def _head_before(self, text: str, end: int) -> int | None:
        """Where the longest proper prefix (>= MIN_CUT_PART) of a long form that ends at
        ``end`` starts, or None."""
        best: int | None = None
        for form in self._long:
            head = form[:MIN_CUT_PART]
            i = text.find(head, max(0, end - len(form) + 1), end)
            while i != -1:  # the first match is the longest prefix of this form
                if form.startswith(text[i:end]):
                    best = i if best is None else min(best, i)
                    break
                i = text.find(head, i + 1, end)
        return best

    def _tail_after(self, text: str, start: int) -> int | None:
        """Where the longest proper suffix (>= MIN_CUT_PART) of a long form that starts at
        ``start`` ends, or None."""
        best: int | None = None
        for form in self._long:
            tail = form[-MIN_CUT_PART:]
            j = text.rfind(tail, start, min(len(text), start + len(form) - 1))
            while j != -1:  # the last match is the longest suffix of this form
                if form.endswith(text[start : j + MIN_CUT_PART]):
                    best = j + MIN_CUT_PART if best is None else max(best, j + MIN_CUT_PART)
                    break
                j = text.rfind(tail, start, j + MIN_CUT_PART - 1)
        return best

    def stream(self) -> MaskStream:
        """A masker for text that arrives in pieces (a log being followed)."""
        return MaskStream(self)

    def _mask_determined(self, raw: str) -> tuple[str, str]:
        """(``raw`` masked up to where more text cannot change it, the rest held back): the
        rest is the shortest tail that is the start of a secret (a proper prefix of one of its
        forms); every secret that begins before it is masked whole."""
        if self._pattern is None:
            return raw, ""
        out: list[str] = []
        pos = 0
        while True:
            hold = self._hold_from(raw, pos)
            m = self._pattern.search(raw, pos)
            if m is None or m.start() >= hold:
                out.append(raw[pos:hold])
                return "".join(out), raw[hold:]
            # a match before ``hold`` is final: more text cannot make a longer form match there
            out += [raw[pos : m.start()], MASK]
            pos = m.end()

    def _hold_from(self, raw: str, pos: int) -> int:
        """The first index from ``pos`` where a secret could begin and run past the end."""
        for r in range(max(pos, len(raw) - self._longest + 1), len(raw)):
            tail = raw[r:]
            forms = self._starts.get(raw[r], ())
            if any(len(f) > len(tail) and f.startswith(tail) for f in forms):
                return r
        return len(raw)


class MaskStream:
    """Masks text fed in pieces, so a secret split across two pieces (a log line written in
    two flushes, read by two polls) is still masked whole: ``feed`` returns what is safe to
    show and holds back a tail that may be the start of a secret (at most the longest secret's
    length), and the line it is in until that line ends (a ``\\n`` or ``\\r``, or
    :data:`HOLD_LIMIT` characters), so what reads a piece at a time (:func:`mask_shapes` on
    everything fab prints) sees whole lines and a credential's shape whole; ``flush`` at the
    end shows the held line, and a held-back tail as ``***``."""

    HOLD_LIMIT = 1 << 16

    def __init__(self, masker: Masker) -> None:
        self._masker = masker
        self._pending = ""
        self._line = ""  # masked, held until its line ends

    @property
    def pending(self) -> str:
        return self._pending + self._line

    def feed(self, text: str) -> str:
        shown, self._pending = self._masker._mask_determined(self._pending + text)
        shown = self._line + shown
        cut = max(shown.rfind("\n"), shown.rfind("\r")) + 1
        if len(shown) - cut > self.HOLD_LIMIT:
            cut = len(shown)
        self._line = shown[cut:]
        return shown[:cut]

    def flush(self) -> str:
        """The end of the text: the held line as is, and a held-back tail (the start of a
        secret) as ``***``."""
        shown = self._line + (MASK if self._pending else "")
        self._pending = self._line = ""
        return shown


def mask(text: str, values: Iterable[str]) -> str:
    """``text`` with every value of ``values`` replaced by ``***``."""
    return Masker(values)(text)
