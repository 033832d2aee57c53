"""A terminal's hard wrap that cuts a chain of glued bracket tags (C++ loggers' heads)."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose
from kimi_ops.diagnose.clean import join_wrapped, learn_wrap_width

_HCCL = [
    "[ERROR] HCCL(4410,):2026-03-02-11:20:07.118.902 [task_exception_handler.cc:31] [7781]"
    "[TaskExecStage][Timeout][AICPU]Task run failed, para information is notify id:"
    "[0x00000000000001a4], stage:[0], remote rank:[local], tag[AllReduce_group_name_2].",
    "[ERROR] HCCL(4410,):2026-03-02-11:20:07.118.930 [task_exception_handler.cc:41] [7781]"
    "[TaskExecStage][Timeout][AICPU]Task run failed, groupRank information is group:"
    "[group_name_2], user define information[tp], rankSize[8], rankId[5], tag[AllReduce].",
]


def _wrapped(lines: list[str], width: int) -> str:
    return "\n".join(ln[k : k + width] for ln in lines for k in range(0, len(ln), width)) + "\n"


def test_a_wrap_between_glued_tags_is_joined_and_the_hccl_timeout_read() -> None:
    # Cut at 101 columns the heads end "...[7781][TaskExecStage]" and the next pieces begin
    # "[Timeout][AICPU]Task run failed": a bracket, which begins a record elsewhere, so the
    # pieces stayed apart and the collective's timeout lost its HCCL head (read "starting")
    width = _HCCL[0].index("[Timeout]")
    assert _HCCL[1].index("[Timeout]") == width
    text = _wrapped(_HCCL, width)
    assert learn_wrap_width(text) == width
    joined = join_wrapped(text, width)
    assert _HCCL[0] in joined and _HCCL[1] in joined, joined
    assert diagnose(text).label == "nccl_error"


def test_a_record_that_begins_with_one_tag_and_a_colon_is_not_joined() -> None:
    # guard: torch's "[rank0]: ..." begins a record of its own even after a line that ends in
    # a tag chain; so does a tag followed by a space
    head = "x" * 60 + " [7781][TaskExecStage]"
    for nxt in ("[rank0]: Traceback (most recent call last):", "[Timeout] next record"):
        assert join_wrapped(f"{head}\n{nxt}", len(head)) == f"{head}\n{nxt}"
