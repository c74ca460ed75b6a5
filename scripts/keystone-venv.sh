#!/usr/bin/env bash
# Installs OpenStack Keystone from PyPI, with gunicorn to serve it, into its own virtualenv (default
# .venv-keystone), for the tests of the Placement reader with Keystone-issued tokens
# (tests/support/keystone_server.py). Never in the project's virtualenv, nor in the upstream one
# (the conformance suite's pins stay Nova's and Placement's alone).
#
# Cached like scripts/upstream-venv.sh: a stamp written last records the pins; otherwise the
# virtualenv is rebuilt from scratch, so an interrupted install never counts as done.
set -euo pipefail
cd "$(dirname "$0")/.."

KEYSTONE_VERSION=30.0.0
venv=${1:-.venv-keystone}
python=${PYTHON:-python3}
constraints=tests/support/keystone-constraints.txt
stamp="$venv/.virtcap-keystone-complete"

python_version=$("$python" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')
key="keystone==$KEYSTONE_VERSION gunicorn python==$python_version"
if [ -z "${UNPINNED:-}" ]; then
    key="$key constraints:$(sha256sum "$constraints" | cut -c1-16)"
else
    key="$key unpinned"
fi
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    exit 0
fi

echo "keystone-venv: installing keystone==$KEYSTONE_VERSION into $venv"
started=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
pins=(--constraint "$constraints")
if [ -n "${UNPINNED:-}" ]; then
    pins=()
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" "keystone==$KEYSTONE_VERSION" gunicorn
"$venv/bin/python" -W ignore -c 'import keystone.server.wsgi, gunicorn'
echo "$key" > "$stamp"
echo "keystone-venv: ready in $(($(date +%s) - started)) s"
