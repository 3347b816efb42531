#!/usr/bin/env bash
# Makes target/helm-venv with tests/helm/requirements.txt installed (Helm v4 through helm-python-sdk), for the tests
# that drive Helm (sim/tests/helm.rs). Idempotent: a venv whose stamp matches the requirements is left alone.
#
#   tests/helm/setup.sh            # from the repository root (any directory works)
#
# Env: HELM_VENV (default <repo>/target/helm-venv), HELM_PYTHON (the interpreter to build it with; default the first
# of python3.13 python3.12 python3.11 python3.10 python3 that is >= 3.10). Exit 1 if it cannot be made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${HELM_VENV:-$root/target/helm-venv}
requirements=$here/requirements.txt
stamp=$venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)

if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  exit 0
fi

python=${HELM_PYTHON:-}
if [[ -z $python ]]; then
  for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
    if command -v "$candidate" >/dev/null &&
      "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      python=$candidate
      break
    fi
  done
fi
if [[ -z $python ]]; then
  echo "tests/helm/setup.sh: no Python >= 3.10 with the venv module (helm-python-sdk needs 3.10+)" >&2
  exit 1
fi

echo "tests/helm/setup.sh: installing $(grep -Eo '^[a-z0-9-]+==[^ ]+' "$requirements") into $venv"
rm -rf "$venv"
"$python" -m venv "$venv"
# --require-hashes: the wheel must be the one pinned; --no-deps is implied by hashes (it has none).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$requirements"
"$venv/bin/python" -c 'import helm_python; print("tests/helm/setup.sh: Helm SDK", helm_python.helm_sdk_version())'
echo "$want" >"$stamp"
