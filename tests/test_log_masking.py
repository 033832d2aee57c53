"""Secrets in log lines that `fab logs` shows (red-team findings F7 and F3)."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from kimi_ops.profile import load_profile
from kimi_ops.redact import Masker, config_secrets, is_secret_value, mask_shapes
from tasks import steps
from tasks.host import Host
from tasks.testing import Reply, ScriptedConnection

SECRET = "pw-REDTEAM-0123456789"


def _host(conn: ScriptedConnection, profile: object) -> Host:
    return Host(conn, profile)  # type: ignore[arg-type]


def test_logs_masks_a_secret_before_cutting_the_line() -> None:
    # F7: the cut at log_line_limit came first, so half the secret was shown
    profile = load_profile({"run_dir": "/srv/kimi", "log_line_limit": 2000})
    conn = ScriptedConnection()
    conn.on(r"tail -n", Reply("X" * 1990 + SECRET + " tail\nnext line\n"))
    shown = steps.read_log(_host(conn, profile), profile, 6, mask=Masker([SECRET]))
    assert SECRET[:4] not in shown
    assert shown == "X" * 1990 + "*** tail\nnext line\n"


def _poll(size: int, chunk: str) -> Reply:
    encoded = base64.b64encode(chunk.encode()).decode()  # the poll sends the bytes in base64
    return Reply(f"pid=7\nsize={size}\nread={len(chunk.encode())}\n@@log\n{encoded}")


def _follow(pieces: list[str], masker: Masker) -> list[str]:
    """What follow_log writes when the log grows by ``pieces``, one per poll."""
    profile = load_profile({"run_dir": "/srv/kimi", "poll_interval": 0.01})
    conn = ScriptedConnection()
    size, replies = 0, [_poll(0, "")]  # the first poll only asks for the size
    for piece in pieces:
        size += len(piece.encode())
        replies.append(_poll(size, piece))
    replies.append(_poll(size, ""))
    conn.on(r"@@log", *replies)
    polls = iter(range(len(replies) - 1))
    written: list[str] = []
    steps.follow_log(
        _host(conn, profile),
        profile,
        written.append,
        sleep=lambda _s: None,
        until=lambda: next(polls, None) is None,
        masker=masker,
    )
    return written


def test_follow_masks_a_secret_the_server_wrote_in_two_pieces() -> None:
    # F3: masking was per write, so a secret split across two polls was printed whole
    written = _follow(["INFO token hf_REDTEAMRO", "TATEDNEW000 end\n", "INFO next\n"], MASKER)
    shown = "".join(written)
    assert shown == "INFO token *** end\nINFO next\n"
    assert not any("hf_REDTEAM" in w or "TATEDNEW000" in w for w in written)


def test_follow_shows_a_secret_s_held_back_start_as_stars_when_it_ends() -> None:
    written = _follow(["INFO token hf_REDTEAMRO"], MASKER)
    assert "".join(written) == "INFO token ***"


MASKER = Masker(["hf_REDTEAMROTATEDNEW000", SECRET])


@given(
    text=st.lists(
        st.sampled_from(["INFO ", "x", "\n", "hf_RED", "TEAMRO", "TATEDNEW000", SECRET, "pw-"]),
        max_size=30,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_a_stream_masks_like_the_whole_text_however_it_is_split(
    text: list[str], cuts: list[int]
) -> None:
    whole = "".join(text) + "\n"
    bounds = sorted({min(c, len(whole)) for c in cuts} | {0, len(whole)})
    stream = MASKER.stream()
    shown = [stream.feed(whole[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert "".join(shown) + stream.flush() == MASKER(whole)
    assert stream.pending == ""


def test_a_credential_urls_password_is_masked_alone_and_percent_encoded() -> None:
    # round 2's leftover: a URL in env was masked whole, but a client that logs its password
    # alone, or the URL with the password percent-encoded (or decoded), showed it
    config = {"env": {"DATABASE_URL": "postgres://app:s3cr/t!RT77@db.internal:5432/x"}}
    mask = Masker(config_secrets(config, {}))
    lines = [
        "connecting with password s3cr/t!RT77",
        "dsn=postgres://app:s3cr%2Ft%21RT77@db.internal:5432/x",
        "retrying app:s3cr/t!RT77@db.internal",
    ]
    shown = "\n".join(mask(line) for line in lines)
    for form in ("s3cr/t!RT77", "s3cr%2Ft%21RT77", "RT77"):
        assert form not in shown
    assert shown.splitlines()[0] == "connecting with password ***"


def test_a_short_url_password_is_not_masked_everywhere() -> None:
    # "pw" masked by value would blank every "pw" in every line; the URL itself is still hidden
    mask = Masker(config_secrets({"env": {"PROXY": "http://u:pw@proxy.example:3128"}}, {}))
    assert mask("pwd is /srv; url http://u:pw@proxy.example:3128") == "pwd is /srv; url ***"


def test_url_passwords_inside_a_word_with_an_at_sign_or_lowercase_hex_are_masked() -> None:
    # red team round 3: a URL after "--db=" gave "//u:PW" as its password; "p@ss" was cut at
    # its first "@"; a password percent-encoded in lowercase hex ("%2f") was shown
    cases = [
        ({"DB_OPTS": "--db=postgres://u:hunter22RT@db/x"}, "password hunter22RT", "hunter22RT"),
        ({"DB_URL": "postgres://u:p@ssw0rd9RT@db/x"}, "password p@ssw0rd9RT", "ssw0rd9RT"),
        ({"DB_URL": "https://u:pa/ss99RT@h/x"}, "enc pa%2fss99RT", "ss99RT"),
    ]
    for env, line, hidden in cases:
        mask = Masker(config_secrets({"env": env}, {}))
        assert hidden not in mask(line), (env, mask(line))


def test_a_connection_strings_password_is_a_secret_by_its_shape() -> None:
    # red team round 3: libpq's "host=db user=kimi password=PW" went into launch.sh and the
    # diff in clear (the assignment rule called it secret, the value's shape did not)
    value = "host=db user=kimi password=hunter22secretRT"
    assert is_secret_value(value)
    mask = Masker(config_secrets({"env": {"DB_CONN": value}}, {}))
    assert "hunter22secretRT" not in mask("auth failed for password hunter22secretRT")
    assert "hunter22secretRT" not in mask_shapes("dsn: host=db password=hunter22secretRT x=1")
    # guard: a flag naming a password file, or the word alone, is no password
    assert not is_secret_value("--password-file=/etc/x") and not is_secret_value("password= x")


def test_json_output_stays_valid_json_when_a_secret_is_a_json_word_or_number() -> None:
    # red team round 3: a URL password "null" (or a number that is also a PID) turned
    # `"report": null` into `"report": ***` in --json output, and the exit code stayed 0
    import io
    import json

    from tasks.masking import MaskingStream

    out = io.StringIO()
    stream = MaskingStream(out, Masker(config_secrets({"env": {"DB": "pg://u:null@db/x"}}, {})))
    doc = {"report": None, "pid": 4242, "note": "dsn pg://u:null@db/x", "ok": True}
    print(json.dumps(doc, indent=2), file=stream)
    shown = json.loads(out.getvalue())
    assert shown["report"] is None and shown["pid"] == 4242 and shown["ok"] is True
    assert "null@" not in shown["note"]
    number = io.StringIO()
    print(json.dumps({"pid": 4242}), file=MaskingStream(number, Masker(["4242"])))
    assert json.loads(number.getvalue()) == {"pid": "***"}
    # guard: text that is no JSON document is masked as text
    plain = io.StringIO()
    print("pid 4242 {not json", file=MaskingStream(plain, Masker(["4242"])))
    assert plain.getvalue() == "pid *** {not json\n"
