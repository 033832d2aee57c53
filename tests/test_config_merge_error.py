"""Red-team round 4, finding 11: a ``-f`` file whose key holds a list or a scalar where a lower
level holds a mapping (``kimi: {env: []}`` over ``~/.fabric.yaml``'s env) made Invoke's merge
raise AmbiguousMergeError, printed as a traceback ending in the repr of the lower level's
values (HF_TOKEN, api_key) in clear. Now one line names the file, the key and the kinds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAB = Path(sys.executable).parent / "fab"
SECRETS = ("plainHfTokenValue4242", "plainDbPassword5151", "plainApiKeyValue7373")
USER_FILE = f"""kimi:
  api_key: {SECRETS[2]}
  env:
    HF_TOKEN: {SECRETS[0]}
    DB_PASSWORD: {SECRETS[1]}
  standin:
    delay: 1
"""


def _fab_status(home: Path, profile: str) -> subprocess.CompletedProcess[str]:
    (home / ".fabric.yaml").write_text(USER_FILE)
    path = home / "profile.yaml"
    path.write_text(profile)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    env["HOME"] = str(home)
    return subprocess.run(
        [str(FAB), "-f", str(path), "status"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("profile", "key", "kind"),
    [
        ("kimi:\n  env: []\n", "kimi.env", "list"),
        ("kimi: []\n", "kimi", "list"),
        ("kimi:\n  env:\n", "kimi.env", "nothing (null)"),
        ("kimi:\n  standin: 1\n", "kimi.standin", "number"),
        ("kimi:\n  router: x\n", "kimi.router", "string"),
        ("kimi:\n  host_overrides: []\n", "kimi.host_overrides", "list"),
    ],
)
def test_a_profile_key_of_the_wrong_kind_is_one_line_without_values(
    tmp_path: Path, profile: str, key: str, kind: str
) -> None:
    out = _fab_status(tmp_path, profile)
    shown = out.stdout + out.stderr
    assert out.returncode != 0, shown
    for secret in SECRETS:
        assert secret not in shown, shown
    assert "Traceback" not in shown and "AmbiguousMergeError" not in shown, shown
    expected = (
        f"error: config file {tmp_path / 'profile.yaml'}: {key} must be a mapping, got {kind}"
    )
    assert shown.strip() == expected, shown


def test_a_mapping_over_a_lower_file_s_scalar_names_both(tmp_path: Path) -> None:
    out = _fab_status(tmp_path, "kimi:\n  api_key: {a: 1}\n")
    shown = out.stdout + out.stderr
    assert out.returncode != 0 and SECRETS[2] not in shown and "Traceback" not in shown, shown
    assert shown.strip() == (
        f"error: config file {tmp_path / 'profile.yaml'}: kimi.api_key is a mapping, but "
        f"config file {tmp_path / '.fabric.yaml'} gives it as string: one of them is wrong"
    )
