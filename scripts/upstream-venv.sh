#!/usr/bin/env bash
# Installs upstream Nova and Placement from PyPI into their own virtualenv (default .venv-upstream),
# for the conformance suite's oracle (tests/conformance/oracle.py). They never enter the project's
# virtualenv: virtcap must not depend on them, only be compared with them.
#
# Cached: nothing is done when the virtualenv is complete for these pins (a stamp file written
# last records them, with the Python version and the constraints file's hash); otherwise it is
# rebuilt from scratch, so an interrupted install never counts as done.
set -euo pipefail
cd "$(dirname "$0")/.."

NOVA_VERSION=34.0.0
PLACEMENT_VERSION=16.0.0
venv=${1:-.venv-upstream}
python=${PYTHON:-python3}
constraints=tests/conformance/upstream-constraints.txt
stamp="$venv/.virtcap-upstream-complete"

python_version=$("$python" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')
key="nova==$NOVA_VERSION openstack-placement==$PLACEMENT_VERSION gunicorn python==$python_version"
if [ -z "${UPSTREAM_UNPINNED:-}" ]; then
    key="$key constraints:$(sha256sum "$constraints" | cut -c1-16)"
else
    key="$key unpinned"
fi
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    exit 0
fi

echo "upstream-venv: installing nova==$NOVA_VERSION and openstack-placement==$PLACEMENT_VERSION into $venv"
started=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
pins=(--constraint "$constraints")
if [ -n "${UPSTREAM_UNPINNED:-}" ]; then
    pins=()
fi
# libvirt-python for Nova's libvirt driver (the oracle connects it to libvirt's test driver), built
# against libvirt-dev like the project's own; gunicorn to serve Placement over HTTP for the tests
# of the Placement reader (tests/support/placement_server.py): Placement's wheel installs no
# placement-api script.
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" \
    "nova==$NOVA_VERSION" "openstack-placement==$PLACEMENT_VERSION" libvirt-python gunicorn
# The oracle's imports, as a smoke test of the installation.
"$venv/bin/python" -W ignore -c 'import libvirt, nova.virt.libvirt.driver, nova.scheduler.utils, placement.deploy, gunicorn'
echo "$key" > "$stamp"
echo "upstream-venv: ready in $(($(date +%s) - started)) s"
