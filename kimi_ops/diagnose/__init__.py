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
  ``svc-1  | ``, timestamps, CRI's ``stderr F``, markdown ``> ``, the launchers' rank
  labels ``0: `` / ``[default0]:`` / ``[1,0]<stderr>:``, ANSI colours) are stripped before
  matching; docker's json-file records are read for the line they hold; ``\\r`` tqdm
  updates are separate lines; a hard-wrapped line is also
  matched joined with its continuation; request-log lines (which quote user prompts)
  are ignored.

Modules, in dependency order (each imports only from those before it): ``model`` (labels,
stages, :class:`Rule`, :class:`Diagnosis`), ``clean`` (line decorations), ``hints`` (hint
texts that are no single rule's), ``options`` (vLLM's engine option names), ``rules_kv``,
``rules_setup``, ``rules_device``, ``rules_runtime``, ``rules_process``, ``rules_engine`` and
``rules_host`` (the rule table, one record per failure signature), ``rules`` (the joined
:data:`RULES`), ``words`` (trigger words), ``markers`` (stage and fact patterns),
``candidates`` (the fast line filter), ``events`` (one line's events), ``scanner`` (the
streaming state), ``decide`` (state -> Diagnosis), ``diagnoser`` (:class:`LogDiagnoser`,
:func:`diagnose`). A host runs them as
one uploaded file, ``kimi_diagnose.py``, joined by ``tasks/bundle.py``.
"""

from __future__ import annotations

from kimi_ops.diagnose.clean import clean_line
from kimi_ops.diagnose.diagnoser import LogDiagnoser, diagnose
from kimi_ops.diagnose.model import (
    FAILURE_LABELS,
    LABELS,
    LIFECYCLES,
    STAGES,
    TAIL_LINES,
    Diagnosis,
    Rule,
)
from kimi_ops.diagnose.rules import RULES

__all__ = [
    "FAILURE_LABELS",
    "LABELS",
    "LIFECYCLES",
    "RULES",
    "STAGES",
    "TAIL_LINES",
    "Diagnosis",
    "LogDiagnoser",
    "Rule",
    "clean_line",
    "diagnose",
]
