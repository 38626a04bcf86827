# Two commands do all the set-up on a fresh machine:
#   make demo   the local GPU hub on http://127.0.0.1:8000 (Ctrl-C stops everything)
#   make test   unit tests, then the cluster tests against the real local control plane
#   make replay a 20-person team's generated week replayed on the dev cluster (~35 min;
#               docs/outcome.md): the real hub, culler, Kueue and ledger, Karpenter with
#               kwok nodes and the default kube-scheduler, not production's z2jh
#               user-scheduler and cluster autoscaler; beside one GPU VM per person
# Go binaries and the proxy are cached in ~/.cache/jupyterhub-gpu/ (first build: 16-32 min on 2 cores).

PYTHON ?= python3
VENV ?= .venv
SPEC ?= config/platform.yaml
BIN := $(VENV)/bin

.PHONY: install build demo lint test test-unit test-cluster docs clean labextension system-packages \
	bench bench-short bench-build replay replay-speeds

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,demo,docs]"
	touch $@

# checkov (the IaC scan the Terraform tests run) pins packages that clash with
# JupyterHub's, so it lives in a venv of its own, made only for the unit tests
# (tests/unit/test_bundle_terraform.py): `install`, `build` and `demo` skip it.
.venv-checkov/bin/checkov:
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install --quiet checkov

install: $(VENV)/.installed

# Debian's Chromium and its WebDriver, for the browser tests (tests/integration/
# test_browser.py), and PostgreSQL, for the usage ledger's tests (tests/postgres.py).
# Installed with apt-get when make runs as root (as CI does); otherwise it says what
# to install, and those tests skip (in CI they fail).
# chromium: the browser tests; postgresql: the ledger's PostgreSQL tests; libpq-dev:
# pg_config, to build psycopg2 for the hub image's venv (tests/integration/hub_image.py)
SYSTEM_PACKAGES := chromium chromium-driver postgresql libpq-dev
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; \
	else echo "not root: the browser and ledger tests need: sudo apt-get install$$missing"; fi

# The JupyterLab extension (labextension/) built into jupyterhub_gpu/labext/labextension/,
# which is committed (the wheel needs no Node.js); tests/unit/test_labextension_build.py
# checks that it is what the sources build.
labextension:
	cd labextension && npm ci --no-audit --no-fund && npm run build

build: install
	$(BIN)/jupyterhub-gpu devcluster build

demo: build
	$(BIN)/jupyterhub-gpu demo --spec $(SPEC)

# ruff (the test extra; pyproject.toml's [tool.ruff]): pyflakes and pycodestyle's errors
lint: install
	$(BIN)/ruff check .

# Both tiers run on pytest-xdist workers: the unit tier on every core (UNIT_WORKERS), the
# cluster tier on CLUSTER_WORKERS workers, each bringing up a dev cluster of its own on
# ports of its own (JUPYTERHUB_GPU_TEST_PORT_OFFSET + 1200 per worker, at most 4 workers:
# tests/integration/ports.py), a test file at a time, the slowest files first, each file
# leaving its worker's cluster as a fresh one (tests/integration/conftest.py).
# UNIT_WORKERS=0 / CLUSTER_WORKERS=0: one process.
UNIT_WORKERS ?= auto
CLUSTER_WORKERS ?= 2

test-unit: install lint .venv-checkov/bin/checkov
	$(BIN)/python -m pytest tests/unit -n $(UNIT_WORKERS)
	$(BIN)/jupyterhub-gpu check-bundle

docs: install
	$(BIN)/sphinx-build -W -b html docs docs/_build/html

test-cluster: build system-packages
	$(BIN)/python -m pytest tests/integration -n $(CLUSTER_WORKERS) --dist loadfile \
	  --no-loadscope-reorder --durations=50

# Benchmarks against plain KubeSpawner and the stock culler (docs/benchmarks.md): a dev
# cluster of their own, the two hubs in interleaved rounds, then a soak on a cluster of
# its own; `bench` (at most 60 min on 2 cores) rewrites docs/benchmarks.md,
# `bench-short` (CI, a tiny soak included) runs every benchmark with tiny numbers and
# fails only if one crashes (BENCH_ARGS: more arguments for `bench`, e.g.
# BENCH_ARGS='--note "..."'). The long soak: python -m benchmarks.soak --minutes 60.
# They need the project's venv and the cluster's binaries, not the IaC scanner's venv.
bench-build: install
	$(BIN)/jupyterhub-gpu devcluster build

bench: bench-build
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-short: bench-build
	$(BIN)/python -m benchmarks --short

# A 20-person team's week (generated, seed 1) replayed against the dev cluster 300 times
# faster than real time (a week in ~34 min): the table of both worlds, the accounting
# invariants (also in .replay/run/report.txt) and the plot .replay/week.png
# (docs/outcome.md, docs/replay.md).
REPLAY_COMPRESS ?= 300
REPLAY_DIR ?= .replay
REPLAY_ARGS ?=  # e.g. --port-offset 500, beside another dev cluster
replay: build
	$(BIN)/pip install --quiet -e ".[replay]"
	mkdir -p $(REPLAY_DIR)
	$(BIN)/jupyterhub-gpu replay generate --spec $(SPEC) --team 20 --seed 1 -o $(REPLAY_DIR)/week.jsonl
	$(BIN)/jupyterhub-gpu replay run $(REPLAY_DIR)/week.jsonl --spec $(SPEC) \
	  --compress $(REPLAY_COMPRESS) --state-dir $(REPLAY_DIR) --plot $(REPLAY_DIR)/week.png \
	  $(REPLAY_ARGS)

# The Monday of that week replayed at 30x, 100x and 300x (about 48, 14 and 5 minutes),
# side by side with the 1x model and the fixed timings' size at each speed
# (.replay/speeds/speeds.txt; docs/replay.md, "The same day at several speeds").
REPLAY_SPEEDS ?= 30 100 300
replay-speeds: build
	$(BIN)/pip install --quiet -e ".[replay]"
	mkdir -p $(REPLAY_DIR)
	$(BIN)/jupyterhub-gpu replay generate --spec $(SPEC) --team 20 --seed 1 -o $(REPLAY_DIR)/week.jsonl
	$(BIN)/jupyterhub-gpu replay speeds $(REPLAY_DIR)/week.jsonl --spec $(SPEC) \
	  --from 2026-01-05T00:00Z --until 2026-01-06T00:00Z --compress $(REPLAY_SPEEDS) \
	  --state-dir $(REPLAY_DIR)/speeds $(REPLAY_ARGS)

# Two pytest processes: each tier loads its own kubeconfig (see tests/conftest.py). The
# binaries first, so that the unit tests that read them (Kueue's CRDs, Helm) run on a
# fresh machine too instead of skipping.
test: build test-unit test-cluster

clean:
	rm -rf $(VENV) .venv-checkov .pytest_cache .hypothesis docs/_build
