"""kimi_ops.facts: parsers against real command output, and the gathering command run for real."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from kimi_ops import facts
from kimi_ops.defaults import BACKUP_SUFFIX, PIDFILE, STANDIN_SCRIPT
from kimi_ops.facts import (
    COMPUTE_APPS_FIELDS,
    GPU_QUERY_FIELDS,
    DiskSpace,
    Gpu,
    GpuProcess,
    gather_command,
    gpu_query_args,
    parse_compute_apps,
    parse_df,
    parse_gathered,
    parse_gpus,
    parse_listen_addresses,
    parse_logind_remove_ipc,
    parse_model_listing,
    parse_proc_net_tcp,
    parse_ss_listen,
    parse_ss_listen_processes,
    parse_vllm_version,
    shards_from_index,
    split_sections,
)
from kimi_ops.profile import load_profile
from kimi_ops.shell import NL_PRELUDE

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- nvidia-smi -------------------------------------------------------------------------------


def test_gpu_query_args() -> None:
    assert gpu_query_args() == [
        "--query-gpu=index,name,compute_cap,memory.total,memory.used,driver_version,uuid",
        "--format=csv,noheader,nounits",
    ]
    assert GPU_QUERY_FIELDS[0] == "index" and COMPUTE_APPS_FIELDS == (
        "pid",
        "process_name",
        "used_memory",
    )


def test_parse_gpus_kimi_query_rtx_pro_6000() -> None:
    gpus = parse_gpus(fixture("nvidia_smi_kimi_query_rtxpro6000_8gpu.csv"))
    assert len(gpus) == 8
    assert gpus[0] == Gpu(
        index=0,
        name=RTX,
        compute_capability="12.0",
        memory_total_mib=97887,
        memory_used_mib=0,
        driver_version="580.95.05",
        uuid="GPU-5ee4b2a1-3c1d-6e0f-9a7b-2c8d41f00000",
    )
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[7].cc_major == 12 and gpus[7].memory_free_mib == 97887


def test_parse_gpus_header_with_units_rtx_pro_6000() -> None:
    """vllm#26211's output: a header line and ``MiB`` units; the header picks the columns."""
    gpus = parse_gpus(fixture("nvidia_smi_rtxpro6000_header_units.csv"))
    assert len(gpus) == 9
    assert {g.name for g in gpus} == {RTX}
    assert {g.compute_capability for g in gpus} == {"12.0"}
    assert {g.memory_total_mib for g in gpus} == {97887}
    assert {g.driver_version for g in gpus} == {"580.65.06"}
    assert gpus[8].index == 8 and gpus[0].memory_used_mib is None


def test_parse_gpus_busy_rtx_pro_6000_other_field_order() -> None:
    fields = (
        "index",
        "name",
        "compute_cap",
        "memory.total",
        "memory.used",
        "memory.free",
        "temperature.gpu",
    )
    (gpu,) = parse_gpus(fixture("nvidia_smi_rtxpro6000_busy.csv"), fields)
    assert gpu.name == RTX and gpu.compute_capability == "12.0"
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (97887, 96997)


def test_parse_gpus_h100() -> None:
    fields = ("index", "name", "compute_cap", "memory.total", "driver_version")
    (gpu,) = parse_gpus(fixture("nvidia_smi_h100.csv"), fields)
    assert (gpu.index, gpu.name, gpu.compute_capability) == (1, "NVIDIA H100 80GB HBM3", "9.0")
    assert gpu.memory_total_mib == 81559 and gpu.driver_version == "590.44"


def test_parse_gpus_b200_without_index_column() -> None:
    fields = ("name", "compute_cap", "memory.total", "driver_version")
    gpus = parse_gpus(fixture("nvidia_smi_b200_8gpu.csv"), fields)
    assert [g.index for g in gpus] == list(range(8))
    assert {(g.name, g.compute_capability, g.memory_total_mib) for g in gpus} == {
        ("NVIDIA B200", "10.0", 183359)
    }
    assert gpus[0].cc_major == 10


def test_parse_gpus_a100_header() -> None:
    (gpu,) = parse_gpus(fixture("nvidia_smi_a100_header.csv"))
    assert (gpu.name, gpu.compute_capability, gpu.memory_total_mib) == (
        "NVIDIA A100-SXM4-80GB",
        "8.0",
        81920,
    )


def test_parse_gpus_not_available_cells() -> None:
    (gpu,) = parse_gpus(fixture("nvidia_smi_kimi_query_na.csv"))
    assert gpu.memory_used_mib is None and gpu.uuid == "" and gpu.memory_free_mib is None
    assert gpu.memory_total_mib == 97887


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "No devices were found",
    ],
)
def test_parse_gpus_error_output_gives_no_gpus(text: str) -> None:
    assert parse_gpus(text) == []


def test_parse_gpus_units_other_than_mib() -> None:
    (gpu,) = parse_gpus("0 ,  X , 9.0 , 1.5 GiB , 512 KiB , 1 , u \n")
    assert gpu.memory_total_mib == 1536 and gpu.memory_used_mib == 0


def test_parse_compute_apps_stale_python() -> None:
    assert parse_compute_apps(fixture("nvidia_smi_compute_apps_stale_python.csv")) == [
        GpuProcess(269473, "/home/eabban/.conda/envs/bitnet/bin/python", 96860)
    ]


@pytest.mark.parametrize(
    "name", ["nvidia_smi_compute_apps_empty.csv", "nvidia_smi_compute_apps_none_legacy.txt"]
)
def test_parse_compute_apps_none_running(name: str) -> None:
    assert parse_compute_apps(fixture(name)) == []


def test_parse_compute_apps_na_memory_and_comma_in_name() -> None:
    procs = parse_compute_apps("12, VLLM::Worker_TP0, [N/A]\n13, python3 -c a,b, 100 MiB\n")
    assert procs == [
        GpuProcess(12, "VLLM::Worker_TP0", None),
        GpuProcess(13, "python3 -c a,b", 100),
    ]


# --- df, /proc/net/tcp, ss, logind ----------------------------------------------------------


def test_parse_df_root() -> None:
    disk = parse_df(fixture("df_pk_root.txt"))
    assert disk == DiskSpace(path="/", total_bytes=264212084 * 1024, free_bytes=83657412 * 1024)
    assert disk.free_gib == pytest.approx(79.78, abs=0.01)


def test_parse_df_dev_shm() -> None:
    disk = parse_df(fixture("df_pk_dev_shm.txt"))
    assert disk is not None and disk.path == "/dev/shm"
    assert disk.free_bytes == disk.total_bytes == 24683584 * 1024


def test_parse_df_odd_filesystem_name_and_garbage() -> None:
    text = (
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        "map auto 10 4 6 40% /mnt/my dir\n"
    )
    assert parse_df(text) == DiskSpace("/mnt/my dir", 10240, 6144)
    assert parse_df("df: /nope: No such file or directory\n") is None


def test_parse_proc_net_tcp_listeners() -> None:
    tcp = fixture("proc_net_tcp_listener.txt")
    tcp6 = fixture("proc_net_tcp6_listener.txt")
    assert parse_proc_net_tcp(tcp) == {18000, 2024}
    assert parse_proc_net_tcp(tcp6) == {18001}
    assert parse_proc_net_tcp(tcp + tcp6) == {18000, 2024, 18001}
    assert parse_proc_net_tcp("") == set()


def test_listen_addresses_agree_between_proc_and_ss() -> None:
    proc = fixture("proc_net_tcp_listener.txt") + fixture("proc_net_tcp6_listener.txt")
    want = {18000: {"127.0.0.1"}, 2024: {"0.0.0.0"}, 18001: {"::1"}}
    assert parse_listen_addresses(proc) == want  # (connected sockets are no listeners)
    assert parse_listen_addresses(fixture("ss_hltnp_listener.txt")) == want
    ss = (
        "State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
        "LISTEN 0 4096 *:9090 *:*\n"
        "LISTEN 0 4096 127.0.0.53%lo:53 0.0.0.0:*\n"
        "LISTEN 0 4096 [::ffff:127.0.0.3]:8000 [::]:*\n"
    )
    assert parse_listen_addresses(ss) == {
        9090: {"*"},
        53: {"127.0.0.53"},
        8000: {"::ffff:127.0.0.3"},
    }


@pytest.mark.skipif(not shutil.which("ss"), reason="no ss on this machine")
def test_listen_addresses_of_this_machine_agree_between_its_kernel_and_ss() -> None:
    """The hex of the real /proc/net/tcp(6) reads as the addresses the real ss prints."""

    def read() -> tuple[dict[int, set[str]], dict[int, set[str]]]:
        proc = "".join(
            Path(p).read_text() for p in ("/proc/net/tcp", "/proc/net/tcp6") if Path(p).exists()
        )
        ss = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=True).stdout
        by_ss = {
            port: {"::" if a == "*" else a for a in addrs}  # ss shows a dual-stack [::] as *
            for port, addrs in parse_listen_addresses(ss).items()
        }
        return parse_listen_addresses(proc), by_ss

    for _ in range(5):  # listeners come and go on a shared machine: agree on one reading
        by_proc, by_ss = read()
        if by_proc == by_ss:
            break
    assert by_proc == by_ss and by_proc


def test_parse_ss_listen() -> None:
    text = fixture("ss_hltnp_listener.txt")
    assert parse_ss_listen(text) == {18000: [4505], 2024: [], 18001: [4505]}
    assert parse_ss_listen_processes(text)[18000] == [("python3", 4505)]


def test_parse_ss_listen_with_header_and_several_owners() -> None:
    text = (
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
        'LISTEN 0 2048 0.0.0.0:8000 0.0.0.0:* users:(("vllm",pid=77,fd=20),'
        '("python3",pid=78,fd=20))\n'
        'LISTEN 0 4096 *:9090 *:* users:(("prometheus",pid=5,fd=7))\n'
    )
    assert parse_ss_listen(text) == {8000: [77, 78], 9090: [5]}


def test_logind_default_file_leaves_remove_ipc_unset() -> None:
    assert "#RemoveIPC=yes" in fixture("logind_debian12_default.conf")
    assert parse_logind_remove_ipc(fixture("logind_debian12_default.conf")) is None


def test_logind_drop_in_wins() -> None:
    assert parse_logind_remove_ipc(fixture("logind_with_dropin_removeipc_no.conf")) is False
    assert parse_logind_remove_ipc(fixture("logind_removeipc_yes.conf")) is True
    assert parse_logind_remove_ipc("RemoveIPC=no\nRemoveIPC = yes\n") is True
    assert parse_logind_remove_ipc("RemoveIPC=no\n; RemoveIPC=yes\n") is False


# --- vLLM, model directory ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.17.1\n", "0.17.1"),
        (
            "INFO 03-20 10:00:00 [__init__.py:239] Automatically detected platform cuda.\n0.18.0\n",
            "0.18.0",
        ),
        ("0.11.1rc2.dev171+g1234abcd\n", "0.11.1rc2.dev171+g1234abcd"),
    ],
)
def test_parse_vllm_version(text: str, expected: str) -> None:
    assert parse_vllm_version(text) == Version(expected)


def test_parse_vllm_version_traceback() -> None:
    text = (
        "Traceback (most recent call last):\n  File ...\n"
        "ModuleNotFoundError: No module named 'vllm'\n"
    )
    assert parse_vllm_version(text) is None


def test_model_listing_and_index() -> None:
    listing = "5000\tmodel-00001-of-00003.safetensors\n12\tconfig.json\nnot a line\n"
    assert parse_model_listing(listing) == {
        "model-00001-of-00003.safetensors": 5000,
        "config.json": 12,
    }
    shards = shards_from_index(fixture("kimi_small_model.safetensors.index.json"))
    assert shards == {f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)}
    with pytest.raises(ValueError):
        shards_from_index("{}")
    with pytest.raises(ValueError):
        shards_from_index("not json")


# --- the gathering command ------------------------------------------------------------------


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _model_dir(path: Path, *, missing_shard: bool = False, backups: bool = False) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(fixture("kimi_k25_nvfp4_config.json"))
    (path / "hf_quant_config.json").write_text(fixture("kimi_k25_nvfp4_hf_quant_config.json"))
    index = fixture("kimi_small_model.safetensors.index.json")
    (path / "model.safetensors.index.json").write_text(index)
    for shard in sorted(shards_from_index(index))[: 2 if missing_shard else 3]:
        (path / shard).write_bytes(b"\0" * 4096)
    if backups:
        (path / ("config.json" + BACKUP_SUFFIX)).write_text(fixture("kimi_k25_nvfp4_config.json"))
    return path


def _run(command: str, env: dict[str, str], shell: str = "sh") -> str:
    assert "\n" not in command
    proc = subprocess.run(
        [shell, "-c", command], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stderr == ""
    return proc.stdout


@pytest.fixture
def host(tmp_path: Path) -> dict[str, object]:
    """A fake host: a model dir, a fake python printing a version, a fake nvidia-smi on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rows = fixture("nvidia_smi_kimi_query_rtxpro6000_8gpu.csv")
    _executable(
        bindir / "nvidia-smi",
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=*) cat <<'EOF'\n{rows}EOF\n;;\n"
        "  --query-compute-apps=*) echo '269473, /usr/bin/python3, 96860';;\n"
        "  *) exit 9;;\nesac\n",
    )
    python = _executable(tmp_path / "fake-python", "#!/bin/sh\necho 0.17.1\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(home), "LC_ALL": "C"}
    return {"tmp": tmp_path, "python": python, "home": home, "env": env}


def _profile(**overrides: object):
    return load_profile(overrides)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_gather_command_recovers_the_facts(host: dict, shell: str) -> None:
    tmp: Path = host["tmp"]  # type: ignore[assignment]
    model = _model_dir(tmp / "models" / "Kimi-K2.5-NVFP4", missing_shard=True)
    run_dir = tmp / "run"
    run_dir.mkdir()
    (run_dir / PIDFILE).write_text("4242\n")
    profile = _profile(model=str(model), python=str(host["python"]), run_dir=str(run_dir))
    command = gather_command(profile)
    assert "\n" not in command

    out = _run(command, host["env"], shell)  # type: ignore[arg-type]
    sections = split_sections(out)
    assert set(sections) == set(facts.SECTIONS)
    got = parse_gathered(out)

    assert got.home == str(host["home"])
    assert got.uid == os.getuid()
    assert got.gpus is not None and len(got.gpus) == 8 and got.gpus[0].name == RTX
    assert got.compute_apps == [GpuProcess(269473, "/usr/bin/python3", 96860)]
    assert got.python_found is True and got.python_path == str(host["python"])
    assert got.vllm_version == Version("0.17.1")
    assert got.config_json == json.loads(fixture("kimi_k25_nvfp4_config.json"))
    assert got.hf_quant_config is not None
    assert got.hf_quant_config["quantization"]["kv_cache_quant_algo"] == "FP8"
    assert got.index_shards is not None and len(got.index_shards) == 3
    assert got.model_files is not None
    assert got.model_files["model-00001-of-00003.safetensors"] == 4096
    assert "model-00003-of-00003.safetensors" not in got.model_files
    assert got.backups == frozenset() and got.config_json_orig is None
    assert got.listening_ports is not None and got.listening_addresses is not None
    assert got.run_dir_probe == str(run_dir) and got.run_dir_disk is not None
    assert got.shm_disk is not None and got.shm_disk.path == "/dev/shm"
    assert got.pidfile_pid == 4242
    assert got.logind_read is True
    if shutil.which("ss"):
        assert got.port_pids is not None


def test_gather_command_reports_failures_per_section(host: dict) -> None:
    tmp: Path = host["tmp"]  # type: ignore[assignment]
    env = dict(host["env"])  # type: ignore[arg-type]
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi
    profile = _profile(
        model=str(tmp / "no-such-model"), python=sys.executable, run_dir=str(tmp / "a" / "b" / "c")
    )
    got = parse_gathered(_run(gather_command(profile), env))
    assert got.gpus is None and "nvidia-smi" in got.gpu_error and "exit 127" in got.gpu_error
    assert got.compute_apps is None
    assert got.python_found is True
    assert got.vllm_version is None and "vllm" in got.vllm_error.lower()
    assert got.config_json is None and got.config_error == "config.json is missing"
    assert got.index_shards is None and "missing" in got.index_error
    assert got.model_files is None and "exit" in got.model_dir_error
    assert got.run_dir_probe == str(tmp)  # nearest existing parent
    assert got.run_dir_disk is not None
    assert got.pidfile_pid is None


def test_gather_command_missing_python(host: dict) -> None:
    tmp: Path = host["tmp"]  # type: ignore[assignment]
    profile = _profile(model=str(tmp), python=str(tmp / "nope" / "python3"), run_dir=str(tmp))
    got = parse_gathered(_run(gather_command(profile), host["env"]))  # type: ignore[arg-type]
    assert got.python_found is False and got.vllm_version is None


def test_gather_command_standin(host: dict) -> None:
    """With the stand-in engine, GPUs and the vLLM version come from RUN_DIR/kimi_standin.py."""
    tmp: Path = host["tmp"]  # type: ignore[assignment]
    run_dir = tmp / "run dir"
    run_dir.mkdir()
    (run_dir / STANDIN_SCRIPT).write_text(
        "import sys\n"
        "if sys.argv[1] == 'vllm-version':\n"
        "    print('0.18.0')\n"
        "elif sys.argv[1] == 'nvidia-smi' and sys.argv[2].startswith('--query-gpu='):\n"
        "    for i in range(4):\n"
        "        print(f'{i}, NVIDIA H100 80GB HBM3, 9.0, 81559, 0, 555.42.02, GPU-{i}')\n"
        "elif sys.argv[1] == 'nvidia-smi':\n"
        "    pass\n"
        "else:\n"
        "    sys.exit(2)\n"
    )
    env = dict(host["env"])  # type: ignore[arg-type]
    env["PATH"] = "/usr/bin:/bin"  # a real nvidia-smi must not be needed
    profile = _profile(
        engine="standin",
        model=str(_model_dir(tmp / "m")),
        python=sys.executable,
        run_dir=str(run_dir),
    )
    command = gather_command(profile)
    assert "kimi_standin.py nvidia-smi" in command and "vllm-version" in command
    got = parse_gathered(_run(command, env))
    assert got.gpus is not None and [g.compute_capability for g in got.gpus] == ["9.0"] * 4
    assert got.compute_apps == []
    assert got.vllm_version == Version("0.18.0")


HOSTILE = 'it\'s a "$dir"; rm -rf nothing `id` & $(echo x) \\ done'


def test_gather_command_survives_hostile_paths(host: dict) -> None:
    tmp: Path = host["tmp"]  # type: ignore[assignment]
    home: Path = host["home"]  # type: ignore[assignment]
    model = _model_dir(tmp / HOSTILE / "model $HOME;x", backups=True)
    run_dir = home / HOSTILE
    run_dir.mkdir()
    (run_dir / PIDFILE).write_text("77\n")
    python = _executable(tmp / HOSTILE / "py thon", "#!/bin/sh\necho 0.19.0\n")
    profile = _profile(model=str(model), python=str(python), run_dir="~/" + HOSTILE)
    command = gather_command(profile)
    assert "\n" not in command
    assert '"$HOME"/' in command

    got = parse_gathered(_run(command, host["env"]))  # type: ignore[arg-type]
    assert got.config_json is not None and got.config_json["architectures"] == [
        "KimiK25ForConditionalGeneration"
    ]
    assert got.backups == frozenset({"config.json" + BACKUP_SUFFIX})
    assert got.config_json_orig == got.config_json
    assert got.model_files is not None and len(got.model_files) >= 6
    assert got.vllm_version == Version("0.19.0")
    assert got.run_dir_probe == str(run_dir)
    assert got.pidfile_pid == 77
    assert not (tmp / "x").exists()


def test_gather_command_newline_in_path(host: dict) -> None:
    tmp: Path = host["tmp"]  # type: ignore[assignment]
    model = _model_dir(tmp / "two\nlines")
    profile = _profile(model=str(model), python=str(host["python"]), run_dir=str(tmp))
    command = gather_command(profile)
    assert "\n" not in command
    got = parse_gathered(_run(command, host["env"]))  # type: ignore[arg-type]
    assert got.config_json is not None and got.index_shards is not None


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=40,
    )
)
def test_sh_quote_round_trips_any_text(value: str) -> None:
    word = facts.sh_quote(value)
    assert "\n" not in word
    script = f"{NL_PRELUDE}printf '%s' {word}"
    proc = subprocess.run(["sh", "-c", script], capture_output=True, timeout=10, check=True)
    assert proc.stdout.decode("utf-8", "surrogateescape") == value


def test_parse_gathered_tolerates_missing_sections_and_noise() -> None:
    text = "Welcome to Ubuntu\n" + facts.render_sections(
        [("gpus", 0, fixture("nvidia_smi_kimi_query_h100_4gpu.csv")), ("logind", 0, "")]
    )
    got = parse_gathered(text + "@@kimi-ops:user\n0\nroot\n")  # truncated: no end marker
    assert got.gpus is not None and len(got.gpus) == 4
    assert got.uid is None and got.vllm_version is None
    assert "not gathered" in got.vllm_error
    assert got.remove_ipc is None and got.logind_read is True
    assert got.section("gpus") is not None and got.section("user") is None


def test_section_body_is_exact() -> None:
    text = facts.render_sections([("home", 0, "/root\n"), ("pidfile", 1, "")])
    sections = split_sections(text)
    assert sections["home"].text == "/root\n" and sections["home"].ok
    assert sections["pidfile"].text == "" and sections["pidfile"].rc == 1


@pytest.mark.parametrize("module", ["facts", "compat", "preflight"])
def test_pure_core_imports_no_io_modules(module: str) -> None:
    core = Path(__file__).parent.parent / "kimi_ops"
    files = [core / f"{module}.py"] if (core / f"{module}.py").exists() else []
    files += sorted((core / module).glob("*.py"))  # the module split into a package
    assert files, module
    imported: set[str] = set()
    for node in (n for f in files for n in ast.walk(ast.parse(f.read_text()))):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    forbidden = {"fabric", "invoke", "paramiko", "subprocess", "socket", "os"}
    assert imported & forbidden == set()


def test_unfinished_part_names_the_part_a_timed_out_command_was_in() -> None:
    done = "@@kimi-ops:home\n/root\n@@kimi-ops:home:rc=0\n"
    assert facts.unfinished_part(done + "@@kimi-ops:df_run_dir\n") == "df_run_dir"
    assert facts.unfinished_part(done + "@@kimi-ops:gpus\nGPU 0, partial") == "gpus"
    assert facts.unfinished_part(done + "@@kimi-ops:ps\r\nself_pid=1\r\n") == "ps"
    # every part begun also ended (it blocked between parts), nothing begun, no markers
    assert facts.unfinished_part(done) is None
    assert facts.unfinished_part("") is None
    assert facts.unfinished_part("some output\n@@kimi-ops-1234:nodir\n") is None
