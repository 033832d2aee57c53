"""Every secret stays hidden in what fab prints: stdout and stderr pass through a masker.

:func:`install` collects the secret values the ``kimi`` configuration can bring in
(:func:`kimi_ops.redact.config_secrets`: secret-named ``env`` values, the API key, ``secret_env``
variables, ``--api-key`` in ``extra_args``) and wraps ``sys.stdout`` and ``sys.stderr`` so each
write shows them as ``***``, and with them every value shaped like a credential and every value
given to a secret name (:func:`kimi_ops.redact.mask_shapes`), known or not: step results, diffs
(both sides: an old launch script that still held a token, a new one with a credential-shaped
value), JSON, errors, log lines from the host, tracebacks under ``fab -d``. Log records (``fab -d``:
Invoke's debug log, bound to stderr before the wrap) pass a :class:`MaskingFilter`, installed
when ``tasks`` is imported, before Invoke loads and logs the config files. The launch script and the
preflight report leave secret-named values out by construction; this is the net under them.

The same streams show control characters from outside escaped (:mod:`kimi_ops.printable`: a log
line's ``ESC c`` or cursor moves, an argv's OSC title cannot act on the terminal); fab's own
redraw sequences (:mod:`tasks.report`) go through :meth:`MaskingStream.write_terminal`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from kimi_ops.printable import printable
from kimi_ops.redact import (
    MASK,
    Masker,
    config_secret_names,
    config_secrets,
    hide_logged_data,
    mask_shapes,
    secrets_in_logged_config,
)

MASKER = Masker()
#: Secret variable names of the profile (``secret_env``, ``api_key_env``, secret-named env
#: keys): their values are masked in what fab shows even when fab does not know them.
NAMES: set[str] = set()


def hide(masker: Masker, text: str) -> str:
    """``text`` as fab may show it: known secret values (and a part of one left at a cut:
    :meth:`kimi_ops.redact.Masker.hide`), then credential shapes and the values of secret names
    (:func:`kimi_ops.redact.mask_shapes`), as ``***``."""
    return mask_shapes(masker.hide(text), NAMES)


def _masked_values(masker: Masker, value: Any) -> Any:
    """A JSON document's data with each string (and each number that is a secret) hidden."""
    if isinstance(value, str):
        return hide(masker, value)
    if isinstance(value, dict):
        return {hide(masker, k): _masked_values(masker, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_values(masker, v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value if hide(masker, str(value)) == str(value) else MASK
    return value  # null, true, false: they show no secret


def hide_json(masker: Masker, text: str) -> str | None:
    """``text`` (a whole JSON document, as ``--json`` prints it) with its values masked, still
    valid JSON: masking the text would turn a secret equal to a JSON word or number (``null``,
    ``1234``) into a bare ``***``. None if ``text`` is no JSON document."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    indent = 2 if "\n" in text.strip() else None
    return json.dumps(_masked_values(masker, data), indent=indent)


class MaskingStream:
    """A text stream that masks secrets in everything written to it (a JSON document by its
    values: :func:`hide_json`) and shows control characters escaped (:func:`printable`; a
    JSON document is ``json.dumps`` output, escaped already, and stays valid JSON)."""

    def __init__(self, stream: TextIO, masker: Masker) -> None:
        self._stream = stream
        self._masker = masker

    def write(self, text: str) -> int:
        as_json = hide_json(self._masker, text)
        self._stream.write(printable(hide(self._masker, text)) if as_json is None else as_json)
        return len(text)

    def write_terminal(self, text: str) -> int:
        """``text`` masked but not escaped: for fab's own terminal sequences (a live line's
        ``\\r ESC[K``, the fleet board's cursor moves), whose content the caller escaped."""
        self._stream.write(hide(self._masker, text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self._stream, name)


class MaskingFilter(logging.Filter):
    """Masks every log record (``fab -d`` is Invoke's DEBUG logging, whose handler writes to
    the stderr it was given before the masker wrapped it). Invoke logs each config file's data
    while loading it, before any task learnt its secrets: the filter learns them from that
    data first (:func:`kimi_ops.redact.secrets_in_logged_config`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.name.startswith("invoke") and getattr(record, "module", "") == "config":
            found = secrets_in_logged_config(message, os.environ)
            if found is None:
                message = hide_logged_data(message)
            else:
                MASKER.add(found)
        record.msg, record.args = printable(hide(MASKER, message)), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = printable(hide(MASKER, record.exc_text))
        return True


FILTER = MaskingFilter()


def install_logging() -> None:
    """Mask log records: on Invoke's logger (whatever handler it reaches) and on each handler
    of the root logger (paramiko, fabric, ...). Safe to call more than once."""
    for target in (logging.getLogger("invoke"), *logging.getLogger().handlers):
        if FILTER not in target.filters:
            target.addFilter(FILTER)


def install(config: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> Masker:
    """Learn the secrets of ``config`` (the raw ``kimi`` section, plus command-line overrides)
    and make sure stdout and stderr mask them. Safe to call more than once."""
    merged = {**dict(config), **{k: v for k, v in (overrides or {}).items() if v is not None}}
    MASKER.add(config_secrets(merged, os.environ))
    NAMES.update(config_secret_names(merged))
    install_logging()
    if not isinstance(sys.stdout, MaskingStream):
        sys.stdout = MaskingStream(sys.stdout, MASKER)  # type: ignore[assignment]
    if not isinstance(sys.stderr, MaskingStream):
        sys.stderr = MaskingStream(sys.stderr, MASKER)  # type: ignore[assignment]
    return MASKER
