"""`fab -d` (Invoke's debug log) masks secrets, those of config files too (red-team F2)."""

from __future__ import annotations

import io
import logging

from kimi_ops.redact import hide_logged_data, secrets_in_logged_config
from tasks import masking

CONFIG = {
    "kimi": {
        "env": {"HF_TOKEN": "hf_LOGGEDTOKEN0001", "NCCL_DEBUG": "WARN"},
        "api_key": "sk-LOGGEDKEY0002",
        "host_overrides": {"gpu2": {"env": {"MY_PASSWORD": "pw-LOGGED'Q\\0003"}}},
    }
}


def test_the_secrets_of_a_logged_config_are_read_back_from_its_repr() -> None:
    message = f"Runtime config file (/tmp/cfg (1).json): {CONFIG!r}"
    found = secrets_in_logged_config(message, {})
    assert found == {"hf_LOGGEDTOKEN0001", "sk-LOGGEDKEY0002", "pw-LOGGED'Q\\0003"}
    assert secrets_in_logged_config("Overrides: {'run': {'echo': True}}", {}) == set()
    assert secrets_in_logged_config("Defaults: {'runners': <class 'x'>}", {}) == set()


def test_a_logged_kimi_section_that_cannot_be_read_back_is_not_shown() -> None:
    message = "Per-user config file (/h/.fabric.yaml): {'kimi': {'at': datetime.date(2026, 1, 2)}}"
    assert secrets_in_logged_config(message, {}) is None
    shown = hide_logged_data(message)
    assert shown.startswith("Per-user config file (/h/.fabric.yaml): {...} (not shown")
    assert "datetime" not in shown


def test_invoke_debug_records_are_masked_whatever_stream_their_handler_holds() -> None:
    # F2: `fab -d` printed each config file's data (every secret) through a handler bound to
    # the real stderr before the masker wrapped sys.stderr
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s.%(module)s.%(funcName)s: %(message)s"))
    invoke_log = logging.getLogger("invoke")
    old_level = invoke_log.level
    invoke_log.addHandler(handler)
    invoke_log.setLevel(logging.DEBUG)
    try:
        masking.install_logging()
        # as invoke.config._merge_file logs it (this module stands in for invoke's config.py)
        record = invoke_log.makeRecord(
            "invoke", logging.DEBUG, "config.py", 977, "%s (%s): %r", None, None, "_merge_file"
        )
        record.args = ("Runtime config file", "/tmp/cfg.json", CONFIG)
        record.module = "config"
        invoke_log.handle(record)
        invoke_log.debug("later, in a task: token %s", "hf_LOGGEDTOKEN0001")
    finally:
        invoke_log.removeHandler(handler)
        invoke_log.setLevel(old_level)
    text = out.getvalue()
    assert "'HF_TOKEN': '***'" in text and "'api_key': '***'" in text, text
    assert "'MY_PASSWORD': \"***\"" in text and "'NCCL_DEBUG': 'WARN'" in text, text
    assert "later, in a task: token ***" in text, text
    for secret in ("hf_LOGGEDTOKEN0001", "sk-LOGGEDKEY0002", "LOGGED\\'Q", "LOGGED'Q"):
        assert secret not in text, text
