#!/usr/bin/env bash
# Build the deep-validation oracle venv: real megatron-core 0.19.2, megatron-bridge 0.6.2 and sglang 0.5.23
# on CPU Python 3.11 (they declare 3.12 but run on 3.11), plus this repository (editable) and the CPU stubs via a .pth file.
#
#   tests/deep/build_env.sh VENV_DIR
#
# Idempotent: when VENV_DIR/.ultra-console-deep-ok holds the hash of the lock file, this script and
# the stub/repo paths, it exits at once. One pip call with --no-deps installs the complete pinned lock
# (no resolver work); the CPU torch wheel comes from the machine's local wheel directory.
set -euo pipefail

VENV=${1:?usage: tests/deep/build_env.sh VENV_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LOCK="$HERE/requirements.lock"
STUBS="$HERE/stubs"
PY=${DEEP_PYTHON:-python3.11}
MARKER="$VENV/.ultra-console-deep-ok"

stamp=$(cat "$LOCK" "$0" "$REPO/pyproject.toml" | sha256sum | cut -d' ' -f1)
stamp="$stamp $REPO"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$stamp" ] && [ -x "$VENV/bin/python" ]; then
  echo "deep oracle venv $VENV is complete"
  exit 0
fi

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "deep oracle venv: $PY not found; the deep tests need Python 3.11 (its CPU torch wheel)" >&2
  exit 1
fi

start=$(date +%s)
rm -f "$MARKER"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --ignore-requires-python \
  -r "$LOCK" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# This repository with its own dependencies (the console as installed on the head), then the CPU stubs
# (sitecustomize.py, cpu_stubs.py) on the venv's sys.path.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$REPO" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
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
