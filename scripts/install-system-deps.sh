#!/usr/bin/env bash
# Installs the Debian packages virtcap needs to build, demo and test, skipping the apt run entirely
# when every package is already there (so `make test` stays fast on a prepared machine).
set -euo pipefail

# Everything `make demo` and `make test` run beyond a Debian 12 minbase with git and make: that
# image has no curl, no openssl, no CA certificates.
packages=(
    # build of libvirt-python and the virtualenv; pip reaches PyPI over TLS
    python3 python3-venv python3-dev gcc pkg-config libvirt-dev ca-certificates
    # a real hypervisor for the tests: libvirtd with the QEMU driver (TCG), virsh, qemu-img. The
    # tests start their own private libvirtd in session mode, as nobody through setpriv: no
    # system daemon is needed
    libvirt-daemon libvirt-clients qemu-system-x86 qemu-utils util-linux
    # the monitoring stack the rules, dashboards and compose files are tested with
    prometheus prometheus-alertmanager docker-compose
    # the shared claim ledger: libpq for psycopg, and a real PostgreSQL server for its tests
    libpq5 postgresql
    # the test certificates of the TLS tests
    openssl
)

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

echo "installing system packages: ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi
"${sudo[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
