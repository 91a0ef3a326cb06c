#!/usr/bin/env bash
# Build the deep-validation oracle venv: real megatron-core 0.19.2, megatron-bridge 0.6.2 and sglang 0.5.23
# on CPU, Python 3.11 or 3.12 (they declare 3.12 but run on 3.11; sglang 0.5.23 and megatron-core 0.19.2 publish
# no wheel for 3.10), plus this repository (editable) and the CPU stubs via a .pth file.
#
#   tests/deep/build_env.sh VENV_DIR
#   DEEP_PYTHON=python3.12   the interpreter (default: the first of python3.11, python3.12, python3 that is 3.11/3.12)
#   DEEP_TORCH_INDEX=URL     a PyTorch CPU wheel index to take torch from (its CPU build: no CUDA libraries)
#
# Idempotent: when VENV_DIR/.ultra-console-deep-ok holds the hash of the lock file, this script and
# the stub/repo paths, it exits at once. One pip call with --no-deps installs the pinned lock but torch
# (no resolver work). torch (the lock's pin) comes, in this order, from DEEP_TORCH_INDEX, from a wheel pip's own
# configuration offers on disk (find-links, no network), else from the package index pip is configured
# with, where the Linux wheel is the CUDA build: then its CUDA runtime libraries come along (about 3 GB; it
# still runs on CPU). Nothing here needs a pip configuration or a constraints file of this machine.
set -euo pipefail

VENV=${1:?usage: tests/deep/build_env.sh VENV_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LOCK="$HERE/requirements.lock"
STUBS="$HERE/stubs"
MARKER="$VENV/.ultra-console-deep-ok"
TORCH=$(grep -E '^torch==' "$LOCK")
export PIP_CONSTRAINT=""  # the lock is complete: a machine's constraints file must not move a pin

supported() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12)))' 2>/dev/null; }
PY=${DEEP_PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then PY=$candidate; break; fi
  done
fi

stamp=$(cat "$LOCK" "$0" "$REPO/pyproject.toml" | sha256sum | cut -d' ' -f1)
stamp="$stamp $REPO"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$stamp" ] && [ -x "$VENV/bin/python" ]; then
  echo "deep oracle venv $VENV is complete"
  exit 0
fi

if [ -z "$PY" ] || ! supported "$PY"; then
  echo "deep oracle venv: no Python 3.11 or 3.12 found (${PY:-python3.11, python3.12, python3}); set DEEP_PYTHON" >&2
  exit 1
fi
echo "deep oracle venv: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])'), $TORCH"

start=$(date +%s)
rm -f "$MARKER"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip with its own progress, less the lines a machine's pip configuration adds (where it looks, a missing index)
pip_q() {
  "$VENV/bin/python" -m pip --disable-pip-version-check "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) | sed -u '/^Looking in /d'
}
echo "installing the pinned lock ($(grep -cE '^[A-Za-z]' "$LOCK") packages, --no-deps)…"
grep -vE '^torch==' "$LOCK" > "$VENV/deep-lock-no-torch.txt"
pip_q install --progress-bar on --no-deps --ignore-requires-python -r "$VENV/deep-lock-no-torch.txt"
if [ -n "${DEEP_TORCH_INDEX:-}" ]; then
  echo "installing $TORCH (CPU) from DEEP_TORCH_INDEX…"
  pip_q install --progress-bar on --no-deps --index-url "$DEEP_TORCH_INDEX" "$TORCH"
elif pip_q install -q --no-deps --no-index "$TORCH" 2>/dev/null; then
  echo "installed $TORCH from a wheel on this machine (pip's find-links)"
else
  echo "installing $TORCH from the package index (the CUDA build and its runtime libraries; DEEP_TORCH_INDEX avoids them)…"
  pip_q install --progress-bar on "$TORCH"
fi
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__, "imports")'

# This repository with its own dependencies (the console as installed on the head), then the CPU stubs
# (sitecustomize.py, cpu_stubs.py) on the venv's sys.path.
echo "installing this repository (editable)…"
pip_q install -q -e "$REPO"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$STUBS" > "$site/ultra_console_deep.pth"

# Prove the oracle imports before declaring the venv complete.
HF_HUB_OFFLINE=1 "$VENV/bin/python" - <<'EOF'
import logging
import warnings
logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")
import megatron.bridge.models.nemotronh.nemotron_h_bridge  # noqa: F401
import megatron.core.parallel_state  # noqa: F401
import megatron.training.arguments  # noqa: F401
import sglang.srt.server_args  # noqa: F401
import shim.bridge  # noqa: F401
import backend.plan.deep  # noqa: F401
EOF

echo "$stamp" > "$MARKER"
echo "deep oracle venv $VENV built in $(( $(date +%s) - start ))s ($(du -sh "$VENV" | cut -f1))"
