# The two entry points of the README: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Upstream Nova and Placement, for the conformance suite only (tests/conformance): their own virtualenv.
UPSTREAM_VENV := .venv-upstream
KEYSTONE_VENV := .venv-keystone
# The lowest releases pyproject.toml accepts, for `make lower-bounds` only: their own virtualenv.
LOWER_VENV := .venv-lower
LOWER_BOUNDS := constraints/lower-bounds.txt

.PHONY: demo test lint typecheck unit lower-bounds conformance upstream-venv keystone-venv bench generate system-deps clean

system-deps:
	@bash scripts/install-system-deps.sh

# The newest release of every dependency, even over an older virtualenv's.
$(BIN)/virtcap: pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --upgrade --upgrade-strategy eager -e '.[test,dev]'
	@touch $@

# Every runtime and test dependency at its lower bound (the constraints file pins each one there),
# the rest newest: what a user whose distribution ships old releases runs. With the dev tools:
# tests/system/test_layers.py runs import-linter, at its lower bound too. Made anew whenever either file
# changes.
$(LOWER_VENV)/bin/virtcap: pyproject.toml $(LOWER_BOUNDS) | system-deps
	rm -rf $(LOWER_VENV)
	$(PYTHON) -m venv $(LOWER_VENV)
	$(LOWER_VENV)/bin/pip install --quiet --upgrade pip
	$(LOWER_VENV)/bin/pip install --quiet --constraint $(LOWER_BOUNDS) -e '.[test,dev]'
	@touch $@

venv: $(BIN)/virtcap

demo: system-deps $(BIN)/virtcap
	$(BIN)/virtcap audit --demo
	$(BIN)/virtcap serve --demo

lint: $(BIN)/virtcap
	$(BIN)/ruff check exporter tests bench
	$(BIN)/ruff format --check exporter tests bench
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	$(BIN)/lint-imports --no-cache

# Meanwhile, on the other CPU, the tests are collected once, so that pytest's rewritten test modules
# are cached before `unit` starts its workers: each rewrote all of them again, 6 s of CPU apiece
# (PYTHONDONTWRITEBYTECODE stops pytest from writing that cache; reading it is always on).
typecheck: $(BIN)/virtcap
	@env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest --collect-only -q -p no:cacheprovider > /dev/null 2>&1 & \
	  $(BIN)/mypy; status=$$?; wait; exit $$status

# Installed from PyPI once, then cached: the script does nothing while its stamp matches the pins.
upstream-venv: system-deps
	@PYTHON=$(PYTHON) bash scripts/upstream-venv.sh $(UPSTREAM_VENV)

# Keystone for the Placement harness's tests with Keystone-issued tokens; cached the same way.
keystone-venv: system-deps
	@PYTHON=$(PYTHON) bash scripts/keystone-venv.sh $(KEYSTONE_VENV)

# Workers (pytest-xdist), each with its own private libvirtd, PostgreSQL cluster and Nova oracle
# when its tests ask for them. Twice the 2 cores of the smallest machine it runs on: most of a test's
# time is spent waiting for the processes it starts (`virtcap serve`, Prometheus, libvirtd, QEMU),
# not computing. A file's tests stay on one worker (loadfile): their module-scoped servers start once.
WORKERS ?= 4
PYTEST_PARALLEL = -n $(WORKERS) --dist loadfile
# The suite starts hundreds of interpreters (`virtcap serve`, the commands, their workers), each
# compiling every module of virtcap anew where PYTHONDONTWRITEBYTECODE is set: compiled once, here
# (compileall writes the caches whatever that variable says).
COMPILED = -m compileall -q exporter/virtcap

unit: $(BIN)/virtcap upstream-venv keystone-venv
	$(BIN)/python $(COMPILED)
	VIRTCAP_UPSTREAM_VENV=$(abspath $(UPSTREAM_VENV)) VIRTCAP_KEYSTONE_VENV=$(abspath $(KEYSTONE_VENV)) $(BIN)/pytest $(PYTEST_PARALLEL) --durations=15

# The unit tests under the lowest releases pyproject.toml accepts: each lower bound must be one that
# works. Those of a private libvirtd and of upstream Nova are left to `make unit`: they test libvirt
# and Nova more than these libraries, and take long.
lower-bounds: system-deps $(LOWER_VENV)/bin/virtcap
	$(LOWER_VENV)/bin/python $(COMPILED)
	$(LOWER_VENV)/bin/pytest $(PYTEST_PARALLEL) -m "not libvirtd and not upstream" --ignore=tests/conformance

# The conformance suite alone (`make unit` runs it too): virtcap against upstream Nova and Placement.
conformance: $(BIN)/virtcap upstream-venv
	$(BIN)/python $(COMPILED)
	VIRTCAP_UPSTREAM_VENV=$(abspath $(UPSTREAM_VENV)) $(BIN)/pytest $(PYTEST_PARALLEL) tests/conformance

test: system-deps $(BIN)/virtcap lint typecheck unit

# The committed rule files and dashboards are generated from the Jsonnet mixin (sources in alerts/
# and dashboards/ beside the files they generate, mixin/ for what both share; no dependencies, no
# -J path), the README's metrics table from the metric catalogue and the demo's node files and
# captures by virtcap.demo.generate; a test fails when any of them drifts. Jsonnet is go-jsonnet
# from PyPI (the test extra's gojsonnet), as the tests render the mixin: Debian's C++ jsonnet took
# seconds of CPU for each rendering.
JSONNET = $(BIN)/python -m tests.support.jsonnet
generate: system-deps $(BIN)/virtcap
	$(BIN)/python -m virtcap.exposition.catalogue docs/metrics.md
	$(BIN)/python -m virtcap.demo.generate > /dev/null
	$(JSONNET) -S alerts/prometheus_alerts.jsonnet > alerts/prometheus_alerts.yaml
	$(JSONNET) -S alerts/prometheus_rules.jsonnet > alerts/prometheus_rules.yaml
	rm -f dashboards/*.json
	$(JSONNET) -m dashboards dashboards/dashboards.jsonnet > /dev/null

# Side by side with the Debian prometheus-libvirt-exporter; the real-libvirtd figure needs root and
# the system libvirtd (the tests only ever start a private one).
bench: system-deps $(BIN)/virtcap
	@dpkg-query -W prometheus-libvirt-exporter libvirt-daemon-system iproute2 >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus-libvirt-exporter libvirt-daemon-system iproute2
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) $(UPSTREAM_VENV) $(KEYSTONE_VENV) $(LOWER_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis exporter/*.egg-info
