# Two commands do all the set-up on a fresh machine:
#   make demo   the local GPU hub on http://127.0.0.1:8000 (Ctrl-C stops everything)
#   make test   unit tests, then the cluster tests against the real local control plane
# Go binaries and the proxy are cached in ~/.cache/jupyterhub-gpu/ (first build: ~8 min).

PYTHON ?= python3
VENV ?= .venv
SPEC ?= config/platform.yaml
BIN := $(VENV)/bin

.PHONY: install build demo test test-unit test-cluster clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,demo]"
	touch $@

install: $(VENV)/.installed

build: install
	$(BIN)/jupyterhub-gpu devcluster build

demo: build
	$(BIN)/jupyterhub-gpu demo --spec $(SPEC)

test-unit: install
	$(BIN)/python -m pytest tests/unit

test-cluster: build
	$(BIN)/python -m pytest tests/integration

# Two pytest processes: each tier loads its own kubeconfig (see tests/conftest.py).
test: test-unit test-cluster

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
