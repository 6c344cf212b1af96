# AgentJet Swarm: `make demo` runs the main job, `make test` runs the test suite.
# Both set up .venv on a fresh machine first (CPU torch from the machine's wheel, then the project).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.ajet-installed
# a client machine's install: the SDK + proxy + monitor, no torch (tests/test_client_install.py)
CLIENT := .venv-client
CLIENT_STAMP := $(CLIENT)/.ajet-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export OMP_NUM_THREADS ?= 1

.PHONY: setup setup-client demo test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel
	# CPU torch first, so no dependency can pull a CUDA build
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[all,dev]'
	$(PY) -c "import torch, verl.trainer.ppo.core_algos, ajet, ajet_proxy, ajet_trainer, ajet_trainer.verl_backend.trainer; print('setup ok, torch', torch.__version__)"
	touch $(STAMP)

setup-client: $(CLIENT_STAMP)

# built from a wheel, as a user installs it: the README's install line, tested
CLIENT_SRC := $(shell find sdk proxy -name '*.py' -o -name '*.md' -o -name '*.tmpl' 2>/dev/null)

$(CLIENT_STAMP): pyproject.toml Makefile $(CLIENT_SRC)
	test -x $(CLIENT)/bin/python || $(PYTHON) -m venv $(CLIENT)
	$(CLIENT)/bin/python -m pip install --upgrade pip setuptools wheel
	rm -rf $(CLIENT)/dist
	$(CLIENT)/bin/python -m pip wheel --no-deps -w $(CLIENT)/dist .
	$(CLIENT)/bin/python -m pip install --force-reinstall --no-deps $(CLIENT)/dist/agentjet_swarm-*.whl
	$(CLIENT)/bin/python -m pip install "$$(ls $(CLIENT)/dist/agentjet_swarm-*.whl)[proxy]"
	$(CLIENT)/bin/python -c "import ajet, ajet_proxy.app, ajet_store, ajet_swarm.cli; print('client setup ok')"
	! $(CLIENT)/bin/python -c "import torch" 2>/dev/null
	touch $(CLIENT_STAMP)

demo: setup
	$(PY) scripts/run_demo.py

test: setup setup-client
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PIP) install -e '.[bench]'
	$(PY) bench/proxy_overhead.py
	$(PY) bench/trainer_vs_trl.py

clean:
	rm -rf $(VENV) $(CLIENT) experiments .pytest_cache
