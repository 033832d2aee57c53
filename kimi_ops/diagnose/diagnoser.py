"""The public entry points: LogDiagnoser (streaming) and diagnose (whole text)."""

from __future__ import annotations

import codecs

from kimi_ops.diagnose.clean import (
    WRAP_SAMPLE,
    clean_line,
    first_pieces,
    held_wrapped_line,
    learn_indent,
    learn_line_numbers,
    learn_line_prefix,
    learn_wrap_width,
    line_lead,
    oldest_first,
    strip_line_numbers,
    strip_line_prefix,
)
from kimi_ops.diagnose.decide import _decide
from kimi_ops.diagnose.model import _MAX_PENDING, _SLICE, TAIL_LINES, Diagnosis
from kimi_ops.diagnose.scanner import _process
from kimi_ops.diagnose.state import _State


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
        # complete lines held until the first WRAP_SAMPLE non-empty ones decide whether every
        # line carries a tool's label or numbers, or a hard wrap (_learn_decorations); None
        # once decided
        self._held: list[str] | None = []
        self._held_lines = 0
        self._held_size = 0

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
        width = self._state.wrap_width
        if width is not None and cut >= 0 and data[cut] == "\n":  # a cut line waits
            cut = held_wrapped_line(data, cut, width)
        if cut < 0:
            if len(data) <= _MAX_PENDING:
                self._pending = data
                return
            data += "\n"  # pathological: a line longer than _MAX_PENDING is cut here
            cut = len(data) - 1
        self._pending = data[cut + 1 :]
        block = data[: cut + 1]
        if self._held is not None:  # the line prefix is not decided yet
            self._held.append(block)
            self._held_lines += _nonempty_lines(block)
            self._held_size += len(block)
            if self._held_lines < WRAP_SAMPLE and self._held_size <= _MAX_PENDING:
                return
            held = "".join(self._held)
            self._held = None
            _learn_decorations(self._state, held)
            width = self._state.wrap_width
            if width is not None and held.endswith("\n"):  # its last line may go on
                k = held_wrapped_line(held, len(held) - 1, width)
                held, self._pending = held[: k + 1], held[k + 1 :] + self._pending
            block = held
        _process(self._state, block)

    def _peek(self) -> _State:
        """The state as if the partial last line were complete (state is not changed)."""
        if not self._pending and not self._held:
            return self._state
        st = self._state.clone()
        rest = self._pending.rstrip("\r") + "\n" if self._pending else ""
        if self._held is not None:  # a short log: its lines so far decide the prefix
            rest = "".join(self._held) + rest
            _learn_decorations(st, rest)
        _process(st, rest)
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


def _nonempty_lines(block: str) -> int:
    """How many non-empty ``\\n``-ended lines ``block`` has, counted up to :data:`WRAP_SAMPLE`.

    A line begun in an earlier block may count as empty here, never the reverse: the count
    can only delay the decision, so the prefix is learned from the same first lines whatever
    the chunking.
    """
    count = i = 0
    while count < WRAP_SAMPLE:
        j = block.find("\n", i)
        if j < 0:
            break
        count += bool(block[i:j].strip())
        i = j + 1
    return count


def diagnose(text: str, context: dict[str, object] | None = None) -> Diagnosis:
    """Diagnose a whole log at once (same result as feeding it in chunks, but for a paste
    whose lines run newest first, as Grafana and Kibana show them: a whole text is put back
    in the order it was logged; a stream is read in the order it comes)."""
    d = LogDiagnoser(context)
    d.feed(oldest_first(text))
    return d.diagnosis()


def _learn_decorations(st: _State, head: str) -> None:
    """Learn what a tool did to every line from the log's first lines: line numbers (``grep
    -n``, ``cat -n``), inside them a paste's indentation (a markdown code block's) and a
    constant label (stern's, pdsh's), and a terminal's hard wrap (whose pieces go on without
    the numbers or the label). Where wrapped pieces hid the numbers or the label (too few
    lines began with them), they are learned again from the first pieces of the lines cut."""
    _learn_lead(st, head)
    st.wrap_width = learn_wrap_width(head, st.line_lead)
    if st.wrap_width is not None and (st.line_numbers is None or st.line_prefix is None):
        _learn_lead(st, first_pieces(head, st.wrap_width))


def _learn_lead(st: _State, head: str) -> None:
    st.line_numbers = learn_line_numbers(head)
    bare = head if st.line_numbers is None else strip_line_numbers(head, st.line_numbers)
    indent = learn_indent(bare) or ""  # a markdown code block's, before any label
    label = learn_line_prefix(strip_line_prefix(bare, indent) if indent else bare)
    st.line_prefix = indent + (label or "") or None
    st.line_lead = line_lead(st.line_numbers, st.line_prefix)
