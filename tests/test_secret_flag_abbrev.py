"""Red-team round 4, finding 10: vLLM's parser takes any unambiguous abbreviation of a flag
(``--api-ke KEY`` is ``--api-key KEY``), so a foreign server's argv that kill-stale / stop
print ("left alone: ...") may give its key with one; the masker hides the value of every flag
that abbreviates a secret one (the flags ``extra_args`` refuses), and no other flag's."""

from __future__ import annotations

import io

import pytest

from kimi_ops.redact import SECRET_FLAGS, Masker, mask_shapes, spelled_flag
from standin.args import build_parser
from tasks import masking

KEY = "plainword5555secret"
ABBREVIATED = [
    "--api-k",
    "--api-ke",
    "--api_ke",
    "--api-key",
    "--hf-t",
    "--hf-tok",
    "--hf_toke",
    "--hf-token",
]


@pytest.mark.parametrize("flag", ABBREVIATED)
@pytest.mark.parametrize("sep", [" ", "=", "  "])
def test_an_abbreviated_secret_flag_s_value_is_masked(flag: str, sep: str) -> None:
    line = f"left alone: 8268 (vLLM server): python3 s.py --port 18431 {flag}{sep}{KEY} --x 1"
    shown = mask_shapes(line)
    assert KEY not in shown, shown
    assert shown.endswith(f"{flag}{sep}*** --x 1"), shown
    assert spelled_flag(flag, SECRET_FLAGS) is not None  # the same set extra_args refuses


def test_every_stream_fab_prints_masks_them() -> None:
    out = io.StringIO()
    masking.MaskingStream(out, Masker()).write(f"x --hf-tok tokval77665544 --api-k {KEY}\n")
    assert "tokval77665544" not in out.getvalue() and KEY not in out.getvalue()


def test_in_an_argv_list_s_repr_or_json() -> None:
    for text in (f"['python3', '--api-ke', '{KEY}', '--port', '8']", f'["--hf-to", "{KEY}"]'):
        shown = mask_shapes(text)
        assert KEY not in shown and shown.count("***") == 1, shown


def test_every_value_of_api_key_which_takes_several() -> None:
    shown = mask_shapes(f"vllm serve m --api-k first1234 {KEY} --port 8000")
    assert shown == "vllm serve m --api-k *** --port 8000"
    listed = mask_shapes(f"['--api-key', 'first1234', '{KEY}', '--port', '8000']")
    assert listed == "['--api-key', '***', '--port', '8000']"
    # --hf-token takes one value: what follows it is another argument
    assert mask_shapes("--hf-tok tok12345 model") == "--hf-tok *** model"


def _vllm_flags() -> set[str]:
    found: set[str] = set()
    for entry in ("serve", "api_server"):
        parser = build_parser((0, 11, 0), entry)
        found |= {s for a in parser._actions for s in a.option_strings}
    return found


def test_no_other_vllm_flag_is_masked() -> None:
    flags = _vllm_flags()
    assert "--api-server-count" in flags and "--hf-config-path" in flags
    for flag in sorted(flags - set(SECRET_FLAGS)):
        for text in (f"{flag} value7788", f"{flag}=value7788"):
            assert mask_shapes(text) == text, flag


def test_what_is_masked_short_of_unambiguous_is_ambiguous_in_vllm() -> None:
    """The masker hides the value after any prefix of a secret flag (``--api``, ``--hf``):
    short of ``--api-k`` / ``--hf-t`` such a prefix is ambiguous in vLLM's parser (an error
    there), never a flag of its own, so masking it hides no other flag's value."""
    flags = _vllm_flags()
    for secret in SECRET_FLAGS:
        for end in range(3, len(secret)):
            prefix = secret[:end]
            assert mask_shapes(f"{prefix} v1234") == f"{prefix} ***", prefix
            # either it abbreviates the secret flag alone, or more flags: an error in vLLM
            assert prefix not in flags, prefix
