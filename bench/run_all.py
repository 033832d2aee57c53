"""Run every kimi-ops benchmark (issue 8) and write the results.

    .venv/bin/python bench/run_all.py            # full run (about 10 minutes on 2 cores)
    .venv/bin/python bench/run_all.py --quick    # smoke run (1-2 reps, smaller sizes)

Starts its own sshd processes on 127.0.0.1 .. 127.0.0.9 (tests/e2e/harness.py) and deploys the
stand-in engine (the standin package: EMULATES vLLM, loads no model). Prints a markdown table and
writes bench/results/latest.json (with machine info and the date; the previous latest.json's
numbers appear in a "Prev" column) and bench/results/chart.png. Ansible runs from its own venv,
bench/.venv-ansible (created on first use: pip install ansible-core). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lib  # noqa: E402
import pngbars  # noqa: E402
import sec_deploy  # noqa: E402
import sec_diagnosis  # noqa: E402
import sec_fleet  # noqa: E402
import sec_poll  # noqa: E402

SECTIONS = ("deploy", "diagnosis", "fleet", "poll", "diagnose")


def run_bench_diagnose(mb: float) -> dict[str, Any]:
    """bench/bench_diagnose.py (written by another helper), parsed."""
    script = lib.BENCH / "bench_diagnose.py"
    proc = subprocess.run(
        [lib.PY, str(script), "--mb", str(mb)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=lib.REPO,
    )
    out: dict[str, Any] = {"mb": mb, "exit": proc.returncode, "output": proc.stdout[-2000:]}
    if proc.returncode != 0:
        out["stderr"] = proc.stderr[-3000:]
    for key, pattern in (
        ("whole_mb_s", r"^diagnose\(text\):.*?([\d.]+) MB/s\s+label=(\S+)"),
        ("stream_mb_s", r"^LogDiagnoser.*?([\d.]+) MB/s\s+label=(\S+)"),
    ):
        m = re.search(pattern, proc.stdout, re.M)
        if m:
            out[key] = float(m.group(1))
            out[key.replace("mb_s", "label")] = m.group(2)
    m = re.search(r"^log: ([\d.]+) MB", proc.stdout, re.M)
    if m:
        out["log_mb"] = float(m.group(1))
    return out


# --------------------------------------------------------------------------------------------
# table


def s(v: float | None, unit: str = "s", digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:.{digits}f} {unit}".strip()


def ratio(v: float | None, base: float | None) -> str:
    return "n/a" if not v or not base else f"{v / base:.2f}x"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, div in (("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def conns(d: dict[str, Any]) -> str:
    if d.get("connections") is None:
        return ""
    extra = f" +{d['sftp']:.0f} sftp" if d.get("sftp") else ""
    return f"{d['connections']:.0f} / {d['commands']:.0f}{extra}"


def build_rows(res: dict[str, Any]) -> list[dict[str, str]]:
    """One dict per table row; `key` is stable across runs (for the Prev column)."""
    rows: list[dict[str, str]] = []

    def add(
        key: str, what: str, method: str, result: str, rat: str = "", ssh: str = "", note: str = ""
    ) -> None:
        rows.append(
            {
                "key": key,
                "what": what,
                "method": method,
                "result": result,
                "ratio": rat,
                "ssh": ssh,
                "note": note,
            }
        )

    d = res.get("deploy")
    if d and "kimi_ops" in d:
        k = d["kimi_ops"]
        base = k["median_seconds"]
        what = f"1 Deploy to ready (load 0 s), median of {d['reps']}"
        add(
            "deploy.kimi_ops",
            what,
            "kimi-ops `fab deploy`",
            s(base),
            "1.00x",
            conns(k),
            f"{k['ok_runs']}/{len(k['runs'])} ok; 7 steps, verify polls every 2 s, "
            "ready = chat completion",
        )
        if k.get("step_median_seconds"):
            add(
                "deploy.kimi_ops.steps",
                what,
                "kimi-ops: where the time goes",
                ", ".join(f"{n} {v:.1f}" for n, v in k["step_median_seconds"].items()),
                "",
                "",
                "median s per step result line; preflight includes fab start-up",
            )
        m = d.get("manual")
        if m:
            add(
                "deploy.manual",
                what,
                "manual: 4 ssh steps + `sleep 5; ssh curl` loop",
                s(m["median_seconds"]),
                ratio(m["median_seconds"], base),
                conns(m),
                f"{m['ok_runs']}/{len(m['runs'])} ok; ready = /v1/models 200",
            )
        a = d.get("ansible")
        if a:
            retries = lib.median([r.get("uri_retries", 0) for r in a["runs"]])
            add(
                "deploy.ansible",
                what,
                "Ansible playbook (same steps)",
                s(a["median_seconds"]),
                ratio(a["median_seconds"], base),
                conns(a),
                f"{a['ok_runs']}/{len(a['runs'])} ok; {d.get('ansible_version', '')}, "
                f"pipelining, uri until/delay 5 s (median {retries:g} retries)",
            )
        else:
            add(
                "deploy.ansible",
                what,
                "Ansible playbook",
                "not run",
                "",
                "",
                d.get("ansible_note", ""),
            )
    g = res.get("diagnosis")
    if g:
        c = g["crash"]
        what = "2i Crash after ready -> failure in hand"
        kb = c["kimi_ops_median_seconds"]
        add(
            "crash.kimi_ops",
            what,
            "kimi-ops `while sleep 5; do fab status; done`",
            s(kb),
            "1.00x",
            "",
            f"labels {_labels(c)}; median of {c['ok_runs']}, from "
            "process exit (kimi-ops has no watch mode)",
        )
        add(
            "crash.manual",
            what,
            "manual `sleep 5; ssh curl/kill -0/tail` loop",
            s(c["manual_median_seconds"]),
            ratio(c["manual_median_seconds"], kb),
            "",
            "raw 250-line log tail, no label (a human reads it)",
        )
        what1 = "2i One check once dead (on demand)"
        add(
            "crash.status_once",
            what1,
            "kimi-ops `fab status`",
            s(c["status_once_median_seconds"]),
            "1.00x",
            "",
            "label + stage + hint",
        )
        add(
            "crash.verify_once",
            what1,
            "kimi-ops `fab verify`",
            s(c["verify_once_median_seconds"]),
            ratio(c["verify_once_median_seconds"], c["status_once_median_seconds"]),
            "",
            "exit 1: " + (c.get("verify_once_line") or "").split("] ", 1)[-1][:60],
        )
        add(
            "crash.manual_once",
            what1,
            "manual one ssh poll",
            s(c["manual_once_median_seconds"]),
            ratio(c["manual_once_median_seconds"], c["status_once_median_seconds"]),
            "",
            "log tail only",
        )
        n = g["never_started"]
        what = "2ii Launch that never starts -> reported"
        kd = n["kimi_ops_deploy"]["median_seconds"]
        add(
            "never.kimi_deploy",
            what,
            "kimi-ops `fab deploy` (python missing)",
            s(kd),
            "1.00x",
            "",
            "preflight fails before anything is killed: "
            + _short(n["kimi_ops_deploy"]["reported"], "preflight: ", 70),
        )
        kl = n["kimi_ops_launch"]
        add(
            "never.kimi_launch",
            what,
            "kimi-ops `fab launch` (python gone after upload)",
            s(kl["median_seconds"]),
            ratio(kl["median_seconds"], kd),
            "",
            _short(kl["reported"], "launch: ", 70) if kl["runs"] else kl["setup_failure"][:80],
        )
        mm = n["manual"]["median_seconds"]
        add(
            "never.manual",
            what,
            "manual launch + 5 s poll loop",
            s(mm),
            ratio(mm, kd),
            "",
            "first poll: curl fails, kill -0 fails, log tail",
        )
        add(
            "never.seed",
            what,
            "seed (fixed `sleep 45` then curl)",
            s(n["seed_fixed_sleep_seconds"]),
            ratio(n["seed_fixed_sleep_seconds"], kd),
            "",
            "quoted, not run",
        )
    f = res.get("fleet")
    if f:
        capable = f["fleet_capable"]
        for k, v in f["wall_seconds"].items():
            if capable:
                r = f["runs"][k]
                method = f"{k} host(s), concurrent: `fab -H <{k}> deploy`"
                note = (
                    f"{'ok' if r['ok'] else 'FAILED'}; slowest host {max(r['host_seconds']):.1f} s"
                    if r["host_seconds"]
                    else ("ok" if r["ok"] else "FAILED")
                )
            else:
                method = f"{k} host(s), SERIAL (no fleet mode)"
                note = "one `fab -H hostN deploy` after another"
            add(
                f"fleet.deploy.{'concurrent' if capable else 'serial'}.{k}",
                "3 Fleet deploy wall time",
                method,
                s(v),
                f"{f['ratio_to_1'][k]:.2f}x 1 host",
                "",
                note,
            )
        ref = f.get("serial_reference")
        if ref:
            base = f["wall_seconds"][min(f["wall_seconds"], key=int)]
            top = f["wall_seconds"][max(f["wall_seconds"], key=int)]
            add(
                "fleet.deploy.serial_ref",
                "3 Fleet deploy wall time",
                f"{ref['hosts']} host(s), `kimi.parallel: 1` (one at a time)",
                s(ref["seconds"]),
                f"{ref['seconds'] / base:.2f}x 1 host",
                "",
                f"{'ok' if ref['ok'] else 'FAILED'}; concurrent is "
                f"{ref['seconds'] / top:.1f}x faster",
            )
    p = res.get("poll")
    if p:
        what = f"4 One verify poll, {p['log_mb']:.0f} MB log +1 KB/poll"
        for key, method in (
            ("kimi_ops", "kimi-ops `poll_command` (offset)"),
            ("tail_250", "`tail -n 250 LOG`"),
            ("cat", "`cat LOG`"),
        ):
            v = p[key]
            add(
                f"poll.{key}",
                what,
                method,
                human_bytes(v["median_bytes"]),
                f"{v['bytes_ratio_to_kimi_ops']:g}x bytes",
                "1 / 1",
                f"{v['median_seconds']:.2f} s per poll over ssh",
            )
    dg = res.get("diagnose")
    if dg:
        what = f"5 Diagnosis throughput ({dg.get('log_mb', dg['mb'])} MB log)"
        add(
            "diagnose.whole",
            what,
            "`diagnose(text)`",
            s(dg.get("whole_mb_s"), "MB/s"),
            "",
            "",
            f"label {dg.get('whole_label')}; bench/bench_diagnose.py",
        )
        add(
            "diagnose.stream",
            what,
            "`LogDiagnoser` 1 MiB feeds",
            s(dg.get("stream_mb_s"), "MB/s"),
            "",
            "",
            f"label {dg.get('stream_label')}",
        )
    return rows


def _labels(c: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for label in c.get("labels", []):
        counts[str(label)] = counts.get(str(label), 0) + 1
    wrong = " (WRONG: the server crashed)"
    return ", ".join(
        f"`{k}` x{n}" + (wrong if k in ("None", "healthy", "unknown") else "")
        for k, n in counts.items()
    )


def _short(line: str, after: str, n: int) -> str:
    text = line.split(after, 1)[-1] if after in line else line
    return text[:n] + ("..." if len(text) > n else "")


def markdown(rows: list[dict[str, str]], prev: dict[str, str]) -> str:
    head = ["Benchmark", "Method", "Result", "Ratio", "SSH conns / cmds", "Note"]
    if prev:
        head.insert(3, "Prev")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["what"], r["method"], r["result"], r["ratio"], r["ssh"], r["note"]]
        if prev:
            cells.insert(3, prev.get(r["key"], ""))
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# chart


def chart(res: dict[str, Any], path: Path, subtitle: str) -> None:
    panels: list[pngbars.Panel] = []
    d = res.get("deploy")
    if d and "kimi_ops" in d:
        bars = [("kimi-ops fab deploy", d["kimi_ops"]["median_seconds"], True)]
        if "manual" in d:
            bars.append(("manual ssh + 5 s poll", d["manual"]["median_seconds"], False))
        if "ansible" in d:
            bars.append(("ansible playbook", d["ansible"]["median_seconds"], False))
        panels.append(
            ("1 deploy to ready, seconds (median)", [(a, v, s(v), h) for a, v, h in bars], False)
        )
    g = res.get("diagnosis")
    if g:
        c = g["crash"]
        bars = [
            ("fab status every 5 s", c["kimi_ops_median_seconds"], True),
            ("manual poll every 5 s", c["manual_median_seconds"], False),
            ("one fab status", c["status_once_median_seconds"], True),
            ("one fab verify", c["verify_once_median_seconds"], True),
            ("one manual poll", c["manual_once_median_seconds"], False),
        ]
        panels.append(
            (
                "2i crash after ready: seconds to failure in hand",
                [(a, v, s(v), h) for a, v, h in bars],
                False,
            )
        )
        n = g["never_started"]
        bars = [
            ("fab deploy (preflight)", n["kimi_ops_deploy"]["median_seconds"], True),
            ("fab launch (never started)", n["kimi_ops_launch"]["median_seconds"], True),
            ("manual 5 s poll", n["manual"]["median_seconds"], False),
            ("seed sleep 45", n["seed_fixed_sleep_seconds"], False),
        ]
        panels.append(
            ("2ii never started: seconds to report", [(a, v, s(v), h) for a, v, h in bars], False)
        )
    f = res.get("fleet")
    if f:
        bars = [
            (f"{k} host(s)", v, f"{s(v)}  {f['ratio_to_1'][k]:.2f}x", True)
            for k, v in f["wall_seconds"].items()
        ]
        ref = f.get("serial_reference")
        if ref:
            bars.append(
                (f"{ref['hosts']} hosts, parallel 1", ref["seconds"], s(ref["seconds"]), False)
            )
        kind = "concurrent fleet" if f["fleet_capable"] else "SERIAL, no fleet mode"
        panels.append((f"3 fleet deploy: wall time ({kind})", bars, False))
    p = res.get("poll")
    if p:
        bars = [
            (label, p[k]["median_bytes"], human_bytes(p[k]["median_bytes"]), k == "kimi_ops")
            for k, label in (
                ("kimi_ops", "kimi-ops poll_command"),
                ("tail_250", "tail -n 250"),
                ("cat", "cat"),
            )
        ]
        panels.append(("4 bytes per poll, 100 MB log (log scale)", bars, True))
    dg = res.get("diagnose")
    if dg and dg.get("whole_mb_s"):
        bars = [
            ("diagnose(text)", dg["whole_mb_s"], s(dg["whole_mb_s"], "MB/s"), True),
            (
                "LogDiagnoser 1 MiB feed",
                dg.get("stream_mb_s") or 0,
                s(dg.get("stream_mb_s"), "MB/s"),
                True,
            ),
        ]
        panels.append(("5 diagnosis throughput, MB/s", bars, False))
    pngbars.draw(panels, str(path), title="kimi-ops benchmarks  " + subtitle)


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the kimi-ops benchmarks (see bench/README.md).")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1-2 reps, smaller sizes")
    ap.add_argument("--reps", type=int, default=None, help="deploy reps (default 5; quick 2)")
    ap.add_argument("--no-ansible", action="store_true", help="skip the Ansible baseline")
    ap.add_argument("--only", nargs="*", choices=SECTIONS, help="run only these sections")
    ap.add_argument("--out", default=str(lib.BENCH / "results"), help="results directory")
    args = ap.parse_args(argv)

    quick = args.quick
    reps = args.reps or (2 if quick else 5)
    cfg = {
        "quick": quick,
        "deploy_reps": reps,
        "diagnosis_reps": 2 if quick else 3,
        "fleet_sizes": [1, 2] if quick else [1, 2, 4, 8],
        "poll_log_mb": 100,
        "poll_polls": 3 if quick else 10,
        "poll_cat_polls": 1 if quick else 3,
        "diagnose_mb": 20 if quick else 100,
        "ansible": not args.no_ansible,
        "marker": lib.MARKER,
    }
    sections = args.only or list(SECTIONS)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    # A smoke run must not replace the full run's numbers.
    stem = "quick" if quick else "latest"

    started = time.monotonic()
    machine = lib.machine_info()
    res: dict[str, Any] = {}
    errors: dict[str, str] = {}
    section_seconds: dict[str, float] = {}
    run = lib.Run()
    try:
        for name in sections:
            with lib.timed(name, section_seconds):
                try:
                    if name == "deploy":
                        res[name] = sec_deploy.run_section(run, reps, cfg["ansible"])
                    elif name == "diagnosis":
                        res[name] = sec_diagnosis.run_section(run, cfg["diagnosis_reps"])
                    elif name == "fleet":
                        res[name] = sec_fleet.run_section(run, tuple(cfg["fleet_sizes"]))
                    elif name == "poll":
                        res[name] = sec_poll.run_section(
                            run, cfg["poll_log_mb"], cfg["poll_polls"], cfg["poll_cat_polls"]
                        )
                    elif name == "diagnose":
                        res[name] = run_bench_diagnose(cfg["diagnose_mb"])
                except Exception:  # one broken section must not lose the others
                    errors[name] = traceback.format_exc()
                    lib.log(f"section {name} FAILED:\n{errors[name]}")
                lib.sweep_marker()
    finally:
        run.close()
    total = time.monotonic() - started
    machine["loadavg_end"] = list(os.getloadavg())

    rows = build_rows(res)
    latest = out_dir / f"{stem}.json"
    prev: dict[str, str] = {}
    prev_date = ""
    try:
        old = json.loads(latest.read_text())
        prev = {r["key"]: r["result"] for r in old.get("rows", [])}
        prev_date = old.get("date", "")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    table = markdown(rows, prev)
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    failures = _kimi_failures(res)
    doc = {
        "schema": 1,
        "date": date,
        "command": "python bench/run_all.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "total_seconds": round(total, 1),
        "section_seconds": section_seconds,
        "machine": machine,
        "config": cfg,
        "rows": rows,
        "table_markdown": table,
        "previous_date": prev_date,
        "kimi_ops_failures": failures,
        "errors": errors,
        "results": res,
    }
    tmp = out_dir / f"{stem}.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(latest)
    png = out_dir / ("chart.png" if not quick else "chart-quick.png")
    try:
        chart(res, png, f"{date[:10]}  {machine['nproc']} cpu  {machine['cpu_model'][:30]}")
    except Exception:
        errors["chart"] = traceback.format_exc()

    print(
        f"\n## kimi-ops benchmarks ({date}, {machine['nproc']} x {machine['cpu_model']}, "
        f"Python {machine['python']}{', QUICK' if quick else ''})\n"
    )
    print(table)
    if prev:
        print(f"\nPrev = the previous {latest.name} ({prev_date}).")
    if failures:
        print("\n### kimi-ops failures during the benchmark\n")
        for f in failures:
            print(f"```\n{f}\n```")
    for name, err in errors.items():
        print(f"\n### section {name} failed\n\n```\n{err[-3000:]}\n```")
    print(
        f"\ntotal runtime {total:.0f} s ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in section_seconds.items())
        + ")"
    )
    print(f"wrote {latest} and {png}")
    return 1 if errors or failures else 0


def _kimi_failures(res: dict[str, Any]) -> list[str]:
    """Every kimi-ops run that should have succeeded and did not, with its output."""
    out: list[str] = []
    for r in res.get("deploy", {}).get("kimi_ops", {}).get("runs", []):
        if not r.get("ok"):
            out.append("deploy: " + r.get("failure", ""))
    for r in res.get("diagnosis", {}).get("crash", {}).get("runs", []):
        if not r.get("ok"):
            out.append("crash scenario: " + r.get("failure", ""))
        elif not r.get("label_ok", True):
            out.append(
                f"crash scenario (crash_after_seconds={r['crash_after_seconds']}): the server "
                f"crashed, but `fab status` labelled its log `{r['kimi_ops_label']}`; "
                f"{r.get('log_lines_after_fatal')} log lines follow the fatal error.\n"
                f"$ fab status\n{r.get('status_output', '')}\n$ fab verify\n"
                f"{r.get('verify_output', '')}\nlog tail:\n" + "\n".join(r.get("log_tail", []))
            )
    nl = res.get("diagnosis", {}).get("never_started", {}).get("kimi_ops_launch", {})
    if nl and not nl.get("setup_ok", True):
        out.append("never-started setup (fab upload-script): " + nl.get("setup_failure", ""))
    fleet = res.get("fleet", {})
    for k, r in fleet.get("runs", {}).items():
        if not r.get("ok"):
            out.append(f"fleet deploy, {k} host(s): " + r.get("failure", ""))
    ref = fleet.get("serial_reference")
    if ref and not ref.get("ok"):
        out.append("fleet deploy, kimi.parallel=1: " + ref.get("failure", ""))
    for f in fleet.get("serial", {}).get("failures", []):
        out.append("fleet serial deploy: " + f)
    return out


if __name__ == "__main__":
    sys.exit(main())
