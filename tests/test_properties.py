"""Property tests (Hypothesis): launch-script quoting, process selection, the KV config patch.

Each property runs a few hundred examples. The expectations are derived in the test itself
(an independent tree walk for process selection, the JSON object model for the config patch,
the exec'd process's own /proc entries for the launch script), not by calling the helpers under
test again.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kimi_ops.errors import ConfigPatchError, ProfileError
from kimi_ops.kvpatch import KV_KEYS, patch_text, plan_patch, remove_key
from kimi_ops.procs import (
    Proc,
    format_row,
    owned_processes,
    parse_listing,
    server_args,
    server_port,
)
from kimi_ops.profile import load_profile
from kimi_ops.script import render_launch_script, server_argv

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)

VLLM_MODULE = "vllm.entrypoints.openai.api_server"

# --- strings ---------------------------------------------------------------------------------

#: Any character a UTF-8 launch script can carry, except NUL (argv and environ cannot hold it).
CHARS = st.characters(codec="utf-8", exclude_characters="\x00")
SHELL_BITS = [
    "'", '"', "$", "`", ";", "\\", "\n", "\r", "\t", " ", "$(touch pwned)", "`touch pwned`",
    "${HOME}", "$PATH", "$1", "$$", "!", "!!", "*", "?", "[a]", "~", "#", "&", "|", "<", ">",
    "(", ")", "{", "}", "--", "-", "-e", "-n", "=", "%s", "\\n", "'\\''", "\x01", "\x7f",
    "\x1b[31m", "é", "日本", "\u2028", "\u00a0", "\U0001f600", "EOF",
]  # fmt: skip
SHELLISH = st.lists(st.sampled_from(SHELL_BITS) | st.text(CHARS, max_size=4), max_size=8).map(
    "".join
)
ANY_TEXT = st.text(CHARS, max_size=30) | SHELLISH
#: Not blank (the profile refuses blank names): some non-whitespace character somewhere.
NONEMPTY = st.builds(
    lambda a, c, b: a + c + b, ANY_TEXT, CHARS.filter(str.strip), st.text(CHARS, max_size=5)
)

#: Names bash (or the dash stub, or the dynamic loader) treats specially: readonly, or changing
#: how the script or the stub runs. Exporting them is not a quoting question.
SPECIAL_NAMES = {
    "_", "ARGV_DUMP", "BASH", "BASHOPTS", "CDPATH", "CHILD_MAX", "COLUMNS", "COPROC",
    "DIRSTACK", "ENV", "EPOCHREALTIME", "EPOCHSECONDS", "EUID", "EXECIGNORE", "FIGNORE",
    "FUNCNAME", "GCONV_PATH", "GLIBC_TUNABLES", "GLOBIGNORE", "GROUPS", "HOME", "HOSTNAME",
    "HOSTTYPE", "IFS", "INPUTRC", "LANG", "LANGUAGE", "LINENO", "LINES", "LOCPATH", "MACHTYPE",
    "MAPFILE", "NLSPATH", "OLDPWD", "OPTARG", "OPTERR", "OPTIND", "OSTYPE", "PATH",
    "PIPESTATUS", "POSIXLY_CORRECT", "PPID", "PROMPT_COMMAND", "PS1", "PS2", "PS3", "PS4", "PWD",
    "RANDOM", "REPLY", "SECONDS", "SHELL", "SHELLOPTS", "SHLVL", "SRANDOM", "TERM",
    "TIMEFORMAT", "TMOUT", "TZ", "UID",
}  # fmt: skip
SPECIAL_PREFIXES = ("BASH_", "KIMI_", "LC_", "LD_", "MALLOC_", "COMP_", "HIST", "MAIL", "READLINE")
#: Names the launch script once used for its own variables (now kimi_ops_*, which the profile
#: refuses): test_env_names_of_script_variables checks they pass through.
SCRIPT_VARIABLES = {"launch_id", "run_dir", "server"}
ENV_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True).filter(
    lambda n: (
        n not in SPECIAL_NAMES
        and not n.startswith(SPECIAL_PREFIXES)
        and not n.lower().startswith("kimi_ops_")
    )
)
#: A directory name (no "/", not "." or ".."): the stub and run_dir live under one, so the
#: script's own paths are hostile too.
DIR_NAMES = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00/"), min_size=1, max_size=16
).filter(lambda s: s not in (".", "..") and len(s.encode()) <= 200)

# --- 1. the launch script --------------------------------------------------------------------

#: The stub server: dumps its path and argv (NUL-separated, by the printf builtin), the
#: environment it was exec'd with (straight from /proc, so dash changes nothing) and its PID.
#: Builtins and absolute paths only: no PATH lookup. One extra process (cat), so it is fast.
STUB = """#!/bin/sh
printf '%s\\0' "$0" "$@" > "$ARGV_DUMP.argv"
/bin/cat /proc/$$/environ > "$ARGV_DUMP.env"
echo $$ > "$ARGV_DUMP.pid"
"""
#: What bash itself adds to (or keeps in) the environment it passes on.
BASH_ADDED = {b"PWD", b"OLDPWD", b"SHLVL", b"_"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("launch")


def _nul_split(data: bytes) -> list[bytes]:
    assert data.endswith(b"\0") or data == b""
    return data.split(b"\0")[:-1]


def _run_launch(
    workdir: Path, config: dict[str, Any], dirname: str, launch_id: str
) -> dict[str, Any]:
    """Render the profile's launch script, run it with bash against the stub, collect."""
    base = Path(tempfile.mkdtemp(dir=workdir))
    try:
        root = base / dirname
        (root / "bin").mkdir(parents=True)
        run_dir = root / "run"
        run_dir.mkdir()
        stub = root / "bin" / "python3"
        stub.write_text(STUB)
        stub.chmod(0o755)
        profile = load_profile({**config, "python": str(stub), "run_dir": str(run_dir)})
        script = run_dir / "launch.sh"
        script.write_text(render_launch_script(profile), encoding="utf-8")
        dump = base / "dump"
        env = {"PATH": "/usr/bin:/bin", "ARGV_DUMP": str(dump)}
        # Started in ``base``: a file an injected command made before ``cd`` lands there too.
        proc = subprocess.run(
            ["bash", str(script), launch_id], env=env, cwd=base, capture_output=True, timeout=30
        )
        assert proc.returncode == 0, proc.stderr
        cmdline = _nul_split((base / "dump.argv").read_bytes())
        environ = dict(e.split(b"=", 1) for e in _nul_split((base / "dump.env").read_bytes()))
        return {
            "profile": profile,
            "stub": stub,
            "run_dir": run_dir,
            "env_in": env,
            "cmdline": cmdline,
            "environ": environ,
            "pid": int((base / "dump.pid").read_text()),
            "pidfile": (run_dir / "server.pid").read_bytes(),
            "launch_id_file": (run_dir / "launch.id").read_bytes(),
            "files": sorted(p.name for p in run_dir.iterdir()),
            "stray": sorted(p.name for p in base.iterdir()),
        }
    finally:
        shutil.rmtree(base)


@PROPERTY
@given(
    model=NONEMPTY,
    served=NONEMPTY,
    host=NONEMPTY,
    extra=st.lists(ANY_TEXT, max_size=6),
    env=st.dictionaries(ENV_NAMES, ANY_TEXT, max_size=5),
    tool_parser=st.none() | NONEMPTY,
    port=st.integers(1, 65535),
    tp=st.integers(1, 16),
    trust=st.booleans(),
    engine=st.sampled_from(["vllm", "standin"]),
    dirname=DIR_NAMES,
    launch_id=ANY_TEXT,
)
def test_launch_script_passes_any_strings_through_exactly(
    workdir: Path,
    model: str,
    served: str,
    host: str,
    extra: list[str],
    env: dict[str, str],
    tool_parser: str | None,
    port: int,
    tp: int,
    trust: bool,
    engine: str,
    dirname: str,
    launch_id: str,
) -> None:
    config = {
        "model": model,
        "served_model_name": served,
        "host": host,
        "extra_args": extra,
        "env": env,
        "tool_call_parser": tool_parser,
        "port": port,
        "tensor_parallel_size": tp,
        "trust_remote_code": trust,
        "engine": engine,
    }
    out = _run_launch(workdir, config, dirname, launch_id)
    profile, run_dir = out["profile"], str(out["run_dir"])
    assert dict(profile.env) == env and list(profile.extra_args) == extra

    # argv: the stub's $0 (its path, as exec'd), then its arguments, byte for byte.
    cmdline = out["cmdline"]
    assert cmdline[0] == os.fsencode(out["stub"])
    entry = ["-m", VLLM_MODULE] if engine == "vllm" else [f"{run_dir}/kimi_standin.py"]
    intended = [*entry, *server_argv(profile)]
    assert cmdline[1:] == [os.fsencode(a) for a in intended]
    # ...and the intended argv is the configured values, verbatim, in their places.
    head = ["--model", model, "--served-model-name", served, "--host", host]
    head += ["--port", str(port), "--tensor-parallel-size", str(tp)]
    got = intended[len(entry) :]
    assert got[: len(head)] == head
    assert got[len(got) - len(extra) :] == extra

    # environment: every configured value exactly, plus only what the caller and bash gave.
    environ = out["environ"]
    # Secret-named variables are not in the script: the secrets file (uploaded apart, mode
    # 600, not here) exports them; without it they are absent.
    expected_env = {
        os.fsencode(k): os.fsencode(v) for k, v in env.items() if not profile.is_secret(k)
    }
    assert not any(os.fsencode(k) in environ for k in env if profile.is_secret(k))
    if engine == "standin":
        expected_env[b"KIMI_STANDIN_CONFIG"] = os.fsencode(f"{run_dir}/standin.json")
    # Ownership: the tree inherits its run_dir and launch id (kimi_ops.procs.owned_processes).
    expected_env[b"KIMI_OPS_RUN_DIR"] = os.fsencode(run_dir)
    expected_env[b"KIMI_OPS_LAUNCH_ID"] = out["launch_id_file"][:-1]  # printf adds one newline
    expected_env[b"KIMI_OPS_LAUNCH_PID"] = str(out["pid"]).encode()  # the script's $$ (exec)
    expected_env.update({os.fsencode(k): os.fsencode(v) for k, v in out["env_in"].items()})
    assert {k: environ[k] for k in expected_env if k in environ} == expected_env
    assert set(environ) - set(expected_env) <= BASH_ADDED
    assert environ[b"PWD"] == os.fsencode(run_dir)

    # The pidfile names the exec'd server; the launch id is recorded verbatim; no stray files.
    assert out["pidfile"] == b"%d\n" % out["pid"]
    if launch_id:
        assert out["launch_id_file"] == os.fsencode(launch_id) + b"\n"
    else:
        assert re.fullmatch(rb"manual-\d{8}T\d{6}\n", out["launch_id_file"])
    assert out["files"] == ["launch.id", "launch.sh", "server.pid"]
    assert out["stray"] == sorted([dirname, "dump.argv", "dump.env", "dump.pid"])


def _config_with(field: str, value: str, name: str) -> tuple[dict[str, Any], str]:
    """A profile config with ``value`` in ``field``, and the key a ProfileError would name."""
    if field == "extra":
        return {"extra_args": ["--ok", value]}, "extra_args[1]"
    if field == "env":
        return {"env": {name: value}}, f"env.{name}"
    return {field: value}, field


@PROPERTY
@given(
    field=st.sampled_from(["model", "served_model_name", "host", "python", "extra", "env"]),
    text=ANY_TEXT,
    at=st.integers(0, 100),
    name=ENV_NAMES,
)
def test_a_nul_anywhere_in_a_string_is_a_profile_error(
    field: str, text: str, at: int, name: str
) -> None:
    at = min(at, len(text))
    config, key = _config_with(field, text[:at] + "\x00" + text[at:], name)
    with pytest.raises(ProfileError) as info:
        load_profile(config)
    assert info.value.key == key
    assert "NUL" in info.value.problem
    # Without the NUL the same value is accepted (where a blank one is allowed, or it is not).
    if text.strip() or field in ("extra", "env"):
        profile = load_profile(_config_with(field, text, name)[0])
        assert text in (
            profile.model,
            profile.served_model_name,
            profile.host,
            profile.python,
            *profile.extra_args,
            *profile.env.values(),
        )


def _shell_vars_case(name: str, workdir: Path) -> None:
    """Set an env var named like one of the script's shell variables and check it."""
    base = Path(tempfile.mkdtemp(dir=workdir))
    try:
        run_dir = base / "run"
        run_dir.mkdir()
        stub = base / "python3"
        stub.write_text(STUB)
        stub.chmod(0o755)
        (run_dir / "server.env").write_text("export VLLM_API_KEY=sk-test\n")
        value = str(base / "elsewhere")
        profile = load_profile({"python": str(stub), "run_dir": str(run_dir), "env": {name: value}})
        (run_dir / "launch.sh").write_text(render_launch_script(profile))
        dump = base / "dump"
        subprocess.run(
            ["bash", str(run_dir / "launch.sh"), "lid-1"],
            env={"PATH": "/usr/bin:/bin", "ARGV_DUMP": str(dump)},
            check=True,
            capture_output=True,
            timeout=30,
            cwd=base,
        )
        environ = dict(e.split(b"=", 1) for e in _nul_split((base / "dump.env").read_bytes()))
        assert environ.get(name.encode()) == value.encode()
        assert environ.get(b"VLLM_API_KEY") == b"sk-test"  # the secrets file was still sourced
        assert (run_dir / "launch.id").read_text() == "lid-1\n"
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("name", sorted(SCRIPT_VARIABLES))
def test_env_names_of_script_variables(workdir: Path, name: str) -> None:
    _shell_vars_case(name, workdir)


@pytest.mark.parametrize("name", ["UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS"])
def test_readonly_bash_names_are_refused_or_work(workdir: Path, name: str) -> None:
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    try:
        profile = load_profile({"python": "/bin/true", "run_dir": str(run_dir), "env": {name: "1"}})
    except ProfileError:
        return  # refused up front: fine
    (run_dir / "launch.sh").write_text(render_launch_script(profile))
    proc = subprocess.run(
        ["bash", str(run_dir / "launch.sh"), "lid"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=run_dir,
    )
    assert proc.returncode == 0, proc.stderr


# --- 2. process selection --------------------------------------------------------------------

PYTHONS = ["python3", "/root/ml-env/bin/python3", "python3.12", "python", "/usr/bin/python3.11"]
SERVER_FORMS = [
    "{py} -m vllm.entrypoints.openai.api_server --model /models/k{flag} --tensor-parallel-size 8",
    "{py} -u -X faulthandler -m vllm.entrypoints.openai.api_server{flag}",
    "{py} -mvllm.entrypoints.api_server{flag}",
    "{py} -m vllm.entrypoints.cli.main serve /models/k{flag}",
    "{py} -m vllm serve /models/k{flag}",
    "{py} /root/ml-env/bin/vllm serve /models/k{flag}",
    "vllm serve /models/k{flag}",
    "/root/ml-env/bin/vllm serve /models/k{flag} --trust-remote-code",
    "{py} /srv/kimi-ops/kimi_standin.py --model /m{flag}",
]
DECOYS = [
    "/sbin/init",
    "-bash",
    "bash -c python3 -m vllm.entrypoints.openai.api_server --port 8000",
    'bash -c pkill -9 -f "python3.*vllm"; nohup python3 -m vllm.entrypoints.openai.api_server',
    "pkill -9 -f python3.*vllm",
    "pkill -f python3 -m vllm.entrypoints.openai.api_server --port 8000",
    "nohup sh -c python3 -m vllm.entrypoints.openai.api_server --port 8000",
    "tail -f /root/kimi-ops/logs/vllm.log",
    "grep vllm --port 8000",
    "python3 -m vllm_tools --watch --port 8000",
    "python3 -c import vllm; --port 8000",
    "python3 -m vllm.entrypoints.openai.api_server_wrapper --port 8000",
    "python3 -m vllm.entrypoints.cli.main bench serve --port 8000",
    "vllm bench serve --port 8000",
    "python3 /tmp/vllm_bench.py --port 8000",
    "vim VLLM::EngineCore",
    "ps -eww -o pid=,ppid=,pgid=,args=",
    "sshd: root@notty",
    "sleep 300",
    "",
]
TITLES = ["VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP7", "VLLM::EngineCore_DP0"]
TOKENS = [
    "python3", "/root/ml-env/bin/python3", "bash", "-c", "-m", "-X", "dev", "-u", "vllm",
    "vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main", "serve", "--port",
    "--port=8000", "--port=9000", "8000", "8001", "9000", "٨٠٠٠", "--model", "/models/k",
    "kimi_standin.py", "/srv/k/kimi_standin.py", "VLLM::EngineCore", "VLLM::", "pkill", "-f",
    "python3.*vllm", "nohup", "&", ";",
]  # fmt: skip
#: One "word" of a command line as ps prints it: no line breaks, no control characters.
#: ("²" is a digit to str.isdigit() but not to int(): see
#: test_server_port_reads_argv_like_vllms_parser in test_procs.py.)
PS_CHARS = st.characters(
    codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp"), exclude_characters="\x00"
)
PORTS = [8000, 8001, 9000]


def _server_line(form: str, py: str, port: int | None, eq: bool) -> tuple[str, tuple[str, int]]:
    flag = "" if port is None else (f" --port={port}" if eq else f" --port {port}")
    return form.format(py=py, flag=flag), ("server", 8000 if port is None else port)


#: Deployments a process's environment may name: this one (with or without a trailing slash,
#: launches L1/L0), another, or none; None = environment unreadable.
OURS = "/srv/kimi-a"
ENVS = [
    (("KIMI_OPS_LAUNCH_ID", "L1"), ("KIMI_OPS_RUN_DIR", OURS)),
    (("KIMI_OPS_LAUNCH_ID", "L0"), ("KIMI_OPS_RUN_DIR", OURS + "/")),
    (("KIMI_OPS_LAUNCH_ID", "L1"), ("KIMI_OPS_RUN_DIR", "/srv/kimi-b")),
    (("KIMI_OPS_RUN_DIR", "/srv/kimi-a/x"),),
    (),
    None,
]


_SERVER_LINES = st.builds(
    _server_line,
    st.sampled_from(SERVER_FORMS),
    st.sampled_from(PYTHONS),
    st.sampled_from([None, *PORTS]),
    st.booleans(),
)
_WORDS = st.sampled_from(TOKENS) | st.text(PS_CHARS, min_size=1, max_size=6)
#: (args, label): label ("server", port), "title", "decoy", or None (random: unknown).
COMMAND_LINES = st.one_of(
    _SERVER_LINES,
    _SERVER_LINES,
    st.tuples(st.sampled_from(TITLES), st.just("title")),
    st.tuples(st.sampled_from(DECOYS), st.just("decoy")),
    st.tuples(st.lists(_WORDS, max_size=8).map(" ".join), st.none()),  # token soup
    st.tuples(st.text(PS_CHARS, max_size=40), st.none()),
)


def _port_of(argv: list[str]) -> int:
    """The server's --port in the generated lines (one flag at most; default 8000)."""
    for i, tok in enumerate(argv):
        if tok == "--port" and i + 1 < len(argv):
            return int(argv[i + 1])
        if tok.startswith("--port="):
            return int(tok[len("--port=") :])
    return 8000


def _is_title(args: str) -> bool:
    s = args.strip()
    return s.startswith("VLLM::") and len(s) > 6 and (s[6] == "_" or "a" <= s[6].lower() <= "z")


@st.composite
def process_tables(draw: st.DrawFn) -> dict[str, Any]:
    def pick(seq: list[Any]) -> Any:
        return seq[draw(st.integers(0, len(seq) - 1))]

    n = draw(st.integers(1, 18))
    others = draw(st.lists(st.integers(2, 40000), min_size=n - 1, max_size=n - 1, unique=True))
    order = [1, *others]
    missing = [40001, 40002, 40003]  # PIDs that are not in the listing (exited parents)
    rows: list[Proc] = []
    labels: dict[int, Any] = {}
    sid_of: dict[int, int] = {}
    env_of: dict[int, Any] = {}
    for i, pid in enumerate(order):
        # The parent: an earlier process (so: a forest under init), now and then one that exited.
        ppid = 0 if pid == 1 else pick(order[:i] * 9 + missing)
        sid = pick([pid, sid_of.get(ppid, pid), sid_of.get(ppid, pid), pick(order + missing)])
        sid_of[pid] = sid
        # Children mostly inherit their parent's environment (as after fork/exec).
        env = env_of[ppid] if ppid in env_of and draw(st.booleans()) else pick(ENVS)
        env_of[pid] = env
        args, label = draw(COMMAND_LINES)
        if pid == 1 and draw(st.booleans()):
            args, label = "/sbin/init", "decoy"
        argv = tuple(args.split())
        rows.append(Proc(pid, ppid, pick([pid, sid]), argv, sid, env, pick(["S", "R", "Z"])))
        labels[pid] = label
    me_mode = pick(["text", "param", "both", "none", "missing"])
    me = {"none": None, "missing": pick(missing)}.get(me_mode, pick(order[1:] or order))
    return {
        "rows": rows,
        "labels": labels,
        "me": me,
        "me_in_text": me_mode in ("text", "both"),
        "me_param": me if me_mode in ("param", "both", "missing") else None,
        "port": pick([None, *PORTS]),
        "pidfile": pick([None, 40002, *order]),
        "launch": pick([None, "L1", "L0"]),
    }


def _ancestry(pid: int, parent: dict[int, int]) -> list[int]:
    """pid, its parent, grandparent... (upward walk; stops at 0 or a PID not listed)."""
    chain = [pid]
    while chain[-1] in parent and parent[chain[-1]] > 0 and parent[chain[-1]] not in chain:
        chain.append(parent[chain[-1]])
    return chain


def _run_dir_of(env: Any) -> str | None:
    value = dict(env or ()).get("KIMI_OPS_RUN_DIR")
    return None if value is None else value.rstrip("/") or "/"


@PROPERTY
@given(table=process_tables())
def test_ownership_never_takes_another_deployment_nor_the_shell(table: dict) -> None:
    rows: list[Proc] = table["rows"]
    text = "".join(format_row(p) + "\n" for p in rows)
    if table["me_in_text"]:
        text = f"self_pid={table['me']}\n" + text
    listing = parse_listing(text)
    # The listing reads back exactly what was printed.
    assert listing.procs == tuple(rows)
    assert listing.self_pid == (table["me"] if table["me_in_text"] else None)
    by = {p.pid: p for p in rows}
    parent = {p.pid: p.ppid for p in rows}

    # The labelled command lines are classified as labelled.
    for pid, label in table["labels"].items():
        argv = server_args(by[pid].argv)
        if isinstance(label, tuple):
            assert argv is not None and server_port(argv) == label[1], by[pid].argv
        elif label == "title":
            assert argv is None and _is_title(by[pid].args)
        elif label == "decoy":
            assert argv is None and not _is_title(by[pid].args), by[pid].argv

    port, pidfile, me = table["port"], table["pidfile"], table["me"]
    sel = owned_processes(
        listing, OURS, pidfile, table["launch"], port=port, self_pid=table["me_param"]
    )

    # The model, derived independently (upward walks over the parent links).
    protected = {0, 1}
    if me is not None:
        protected |= set(_ancestry(me, parent))
        protected |= {p.pid for p in rows if me in _ancestry(p.pid, parent)[1:]}
    by_env = {p.pid for p in rows if _run_dir_of(p.env) == OURS}
    # A session is ours when the pidfile or an env-owned member names it, and its leader is
    # gone, a zombie, env-owned or unreadable (a live, readably foreign leader: PID reuse).
    named = {by[pid].sid for pid in by_env} | ({pidfile} if pidfile else set())
    sessions = {
        sid
        for sid in named
        if sid is not None
        and sid > 1
        and (sid not in by or by[sid].state == "Z" or sid in by_env or by[sid].env is None)
    }
    leader = by.get(pidfile) if pidfile else None
    legacy: set[int] = set()
    if (
        leader is not None
        and port is not None
        and _run_dir_of(leader.env) is None
        and leader.sid == leader.pid
        and leader.state != "Z"
        and server_args(leader.argv) is not None
        and server_port(server_args(leader.argv) or []) == port
    ):
        legacy = {p.pid for p in rows if p.sid == leader.pid and _run_dir_of(p.env) is None}
    by_session = {p.pid for p in rows if _run_dir_of(p.env) is None and p.sid in sessions}
    roots = by_env | legacy | by_session

    def follows(pid: int) -> bool:
        """Below a root through processes that name no other deployment."""
        for up in _ancestry(pid, parent):
            if up in roots:
                return True
            if up in by and _run_dir_of(by[up].env) not in (None, OURS):
                return False
        return False

    zombies = {p.pid for p in rows if p.state == "Z"}
    expected = ({p.pid for p in rows if follows(p.pid)} | roots) - protected - zombies
    assert sorted(sel.pids) == sorted(expected)
    for pid in sel.pids:
        # Never the listing shell, its ancestry, its children, init; never another deployment.
        assert pid not in protected and pid != 1
        assert _run_dir_of(by[pid].env) in (None, OURS), (pid, sel.reasons[pid])
    # An orphan's server (its session leader: no row records KIMI_OPS_LAUNCH_PID) is gone.
    for pid in sel.orphans:
        assert by[pid].sid not in by or by[by[pid].sid].state == "Z"
    assert not sel.current or table["launch"] is not None


# --- 3. the KV config patch ------------------------------------------------------------------

KEY_WORDS = ["quantization_config", "kv_cache_scheme", "quantization", "kv_cache_quant_algo"]
JSON_KEYS = st.text(CHARS, max_size=6) | st.sampled_from([*KEY_WORDS, "", "a", '"', "\\"])
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(CHARS, max_size=10)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_KEYS, inner, max_size=3),
    max_leaves=8,
)
WHITESPACE = ["", "", " ", "\n", "\t", "\r\n", "  ", "\n    "]


class Pairs(list):
    """A JSON object as written: (key, value) pairs, duplicates allowed."""


@st.composite
def serialise(draw: st.DrawFn, value: Any) -> str:
    """JSON text for ``value``: json.dumps with random options, or with random whitespace."""
    if not isinstance(value, Pairs) and draw(st.booleans()):
        indent = draw(st.sampled_from([None, 0, 1, 2, 4, "\t"]))
        separators = draw(st.sampled_from([None, (",", ":"), (", ", ": "), (" ,\n", " :  ")]))
        return json.dumps(
            value,
            indent=indent,
            separators=separators,
            sort_keys=draw(st.booleans()),
            ensure_ascii=draw(st.booleans()),
        )
    ascii_only = draw(st.booleans())
    rnd = draw(st.randoms(use_true_random=False))

    def ws() -> str:
        return rnd.choice(WHITESPACE)

    def dump(v: Any) -> str:
        if isinstance(v, (dict, Pairs)):
            items = v.items() if isinstance(v, dict) else v
            body = ",".join(
                f"{ws()}{json.dumps(k, ensure_ascii=ascii_only)}{ws()}:{dump(x)}" for k, x in items
            )
            return f"{ws()}{{{body}{ws()}}}{ws()}"
        if isinstance(v, list):
            return f"{ws()}[{','.join(dump(x) for x in v) or ws()}]{ws()}"
        return f"{ws()}{json.dumps(v, ensure_ascii=ascii_only)}{ws()}"

    return dump(value)


def _insert(draw: st.DrawFn, others: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    items = [(k, v) for k, v in others.items() if k != key]
    at = draw(st.integers(0, len(items)))
    return dict([*items[:at], (key, value), *items[at:]])


@st.composite
def configs_with_kv(draw: st.DrawFn) -> tuple[str, dict[str, Any], str]:
    name = draw(st.sampled_from(sorted(KV_KEYS)))
    outer, inner = KV_KEYS[name]
    section = _insert(
        draw, draw(st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=4)), inner, draw(JSON_VALUES)
    )
    obj = _insert(draw, draw(st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=4)), outer, section)
    return name, obj, draw(serialise(obj))


@PROPERTY
@given(case=configs_with_kv())
def test_kv_patch_removes_exactly_the_key_minimally_and_idempotently(case: tuple) -> None:
    name, obj, text = case
    outer, inner = KV_KEYS[name]
    assert json.loads(text) == obj
    original = str(text)

    patch = patch_text(name, text)
    # The original is untouched and kept byte for byte: restoring the backup is the identity.
    assert text == original and patch.old == original and patch.name == name
    assert patch.changed and patch.removed == (f"{outer}.{inner}",)
    # The patched text is the object minus exactly that key.
    expected = copy.deepcopy(obj)
    del expected[outer][inner]
    assert json.loads(patch.new) == expected
    # Minimal: one contiguous span of the original is cut out; the rest is byte for byte.
    k = 0
    while k < len(patch.new) and patch.new[k] == original[k]:
        k += 1
    assert original.endswith(patch.new[k:])
    assert len(patch.new) < len(original)
    # Idempotent: a second run changes nothing.
    again = patch_text(name, patch.new)
    assert again.new == patch.new and again.changed is False and again.removed == ()
    # plan_patch agrees (config.json is required, so give a trivial one when testing the other).
    files: dict[str, str | None] = {"config.json": "{}", "hf_quant_config.json": None}
    files[name] = original
    planned = {p.name: p for p in plan_patch(files)}
    assert planned[name] == patch


@st.composite
def objects_with_duplicates(draw: st.DrawFn) -> tuple[str, str]:
    """Objects as written, where the path's keys may be absent, repeated, or not objects."""
    name = draw(st.sampled_from(sorted(KV_KEYS)))
    outer, inner = KV_KEYS[name]
    pair_keys = JSON_KEYS | st.sampled_from([outer, inner])

    def pairs(extra_key: str) -> Pairs:
        items = draw(st.lists(st.tuples(pair_keys, JSON_VALUES), max_size=4))
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(items)))
            items.insert(at, (extra_key, draw(JSON_VALUES)))
        return Pairs(items)

    top = pairs(outer)
    for i, (key, _) in enumerate(top):
        if key == outer and draw(st.booleans()):
            top[i] = (key, pairs(inner))
    return name, draw(serialise(top))


@PROPERTY
@given(case=objects_with_duplicates())
def test_kv_patch_matches_json_semantics_with_duplicates_and_absent_keys(case: tuple) -> None:
    name, text = case
    outer, inner = KV_KEYS[name]
    expected = json.loads(text)  # the last duplicate wins, as for every json.load reader
    has_key = isinstance(expected.get(outer), dict) and inner in expected[outer]
    if has_key:
        del expected[outer][inner]
    patch = patch_text(name, text)
    assert patch.old == text
    assert json.loads(patch.new) == expected
    assert patch.changed is has_key
    assert patch.removed == ((f"{outer}.{inner}",) if has_key else ())
    if not has_key:
        assert patch.new == text
    again = patch_text(name, patch.new)
    assert again.changed is False and again.new == patch.new


NON_OBJECTS = st.one_of(
    st.text(CHARS, max_size=40),
    SHELLISH,
    (JSON_SCALARS | st.lists(JSON_VALUES, max_size=4)).flatmap(serialise),
    # a truncated object
    st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=4)
    .flatmap(serialise)
    .flatmap(lambda t: st.integers(0, len(t) - 1).map(lambda k: t[:k])),
    st.sampled_from(["", " ", "{", "}", "{]", '{"a":}', '{"a" 1}', "{'a': 1}", "\ufeff{}"]),
)


@PROPERTY
@given(text=NON_OBJECTS, name=st.sampled_from(sorted(KV_KEYS)))
def test_anything_but_a_json_object_is_a_config_patch_error(text: str, name: str) -> None:
    try:
        is_object = isinstance(json.loads(text), dict)
    except ValueError:
        is_object = False
    assume(not is_object)
    with pytest.raises(ConfigPatchError):
        patch_text(name, text)
    with pytest.raises(ConfigPatchError):
        remove_key(text, KV_KEYS[name], name)
    files: dict[str, str | None] = {"config.json": "{}", "hf_quant_config.json": None}
    files[name] = text
    with pytest.raises(ConfigPatchError):
        plan_patch(files)
