#!/usr/bin/env bash
# Install real Ray (the cluster tests' engine runtime) into a cached venv; idempotent.
# Prints the venv's python. Override the place with KIMI_OPS_RAY_VENV, the version with
# KIMI_OPS_RAY_VERSION.
set -euo pipefail
version="${KIMI_OPS_RAY_VERSION:-2.58.0}"
venv="${KIMI_OPS_RAY_VENV:-${HOME}/.cache/kimi-ops/ray-venv}"
py="$venv/bin/python"
if [ -x "$py" ] && "$py" -c "import ray, sys; sys.exit(ray.__version__ != '$version')" 2>/dev/null; then
    echo "$py"
    exit 0
fi
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv"
"$py" -m pip install -q --disable-pip-version-check "ray[default]==$version" >&2
"$py" -c "import ray; print('ray', ray.__version__)" >&2
echo "$py"
