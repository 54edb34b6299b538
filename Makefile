# Triton reference deployments. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DEPLOYMENT ?=
TARGET ?= cpu
MODE ?= local
BENCH_DURATION ?= 5
PAIR_ROUNDS ?= 3
PYTEST_ARGS ?=
SERVE_ARGS ?=
# pyproject.toml extras: serve (Python-backend models' packages), test, export (exporters, references); all = every one
EXTRAS ?= all
DEPLOYMENT_REQUIREMENTS := $(foreach f,$(wildcard deployments/*/requirements.txt),-r $(f))

.DEFAULT_GOAL := help
.PHONY: help install test test-variants test-tune-smoke tune test-unit list export new refresh deploy deploy-embedding deploy-yolo11 deploy-cn-clip deploy-resnet bench bench-pairs clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "}; /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "Variables: DEPLOYMENT=<name> TARGET=cpu|gpu|npu MODE=local|docker|external BENCH_DURATION=<s> BENCH_ONLY=<benchmark ids>"

# Local distributions installed editable beside the project: triton_helpers (what the deployments'
# Python models share), triton_gate (the front gate in front of tritonserver) and each deployment's own package (a folder with a pyproject.toml one level down).
# The lab (lab/: soak, faults, hostile, peers, scaleout) is installed editable beside them too.
LOCAL_PACKAGES := triton_helpers triton_gate $(patsubst %/pyproject.toml,%,$(wildcard deployments/*/*/pyproject.toml))

$(VENV)/.installed: requirements/no-deps.txt pyproject.toml lab/pyproject.toml $(foreach p,$(LOCAL_PACKAGES),$(p)/pyproject.toml) $(wildcard deployments/*/requirements.txt)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip wheel
	$(PIP) install -e '.[$(EXTRAS)]' -e ./lab $(foreach p,$(LOCAL_PACKAGES),-e ./$(p)) $(DEPLOYMENT_REQUIREMENTS)
	$(PIP) install --no-deps -r requirements/no-deps.txt
	touch $@

install: $(VENV)/.installed ## Create .venv: the project with EXTRAS (default all: serve, test, export) from the registries

# Where the tests are (pyproject's testpaths): the harness, the lab, triton_helpers, triton_gate, each deployment's tests/
# and the tests/ of its own package (deployments/<name>/<package>/tests).
TEST_PATHS := harness/ lab/ triton_helpers/ triton_gate/ $(wildcard deployments/*/tests deployments/*/*/tests)

test: install kubectl ## Run the default suite against real tritonservers (pytest harness/ lab/ triton_helpers/ deployments/*/tests; config-variant benchmark smokes: make test-variants)
	$(PY) -m pytest $(TEST_PATHS) -m 'not variant_benchmark and not tune_smoke' $(PYTEST_ARGS)

test-variants: install ## The benchmark smokes of every config variant (OpenVINO, batching, instances): one server each
	$(PY) -m pytest harness/tests/test_deployments.py -m variant_benchmark $(PYTEST_ARGS)

test-tune-smoke: install ## Every tuning lever's values of each deployment served and checked through tune's gate, no measurement
	HARNESS_TUNE_SMOKE=1 $(PY) -m pytest harness/tests/test_tune.py -m tune_smoke $(PYTEST_ARGS)

test-unit: install kubectl ## Only the unit tests, no tritonserver started, no export (pytest -m 'not server and not exported'; seconds)
	$(PY) -m pytest $(TEST_PATHS) -m 'not server and not exported' $(PYTEST_ARGS)

TUNE_ARGS ?=
tune: install ## Search DEPLOYMENT's config levers, each candidate checked first (TUNE_ARGS="--models M --concurrency 8 --budget-minutes 20 [--apply]")
	@test -n "$(DEPLOYMENT)" || { echo "usage: make tune DEPLOYMENT=<name> [TUNE_ARGS=...]"; exit 2; }
	$(PY) -m harness tune $(DEPLOYMENT) $(TUNE_ARGS)

list: install ## List the deployments the harness discovers
	$(PY) -m harness list

export: install ## Export model files of DEPLOYMENT (e.g. make export DEPLOYMENT=embedding_cpu)
	$(PY) -m harness export $(DEPLOYMENT)

deploy: install ## Serve DEPLOYMENT on TARGET until Ctrl-C (exports what is missing; SERVE_ARGS: more `harness serve` flags)
	$(PY) -m harness serve $(DEPLOYMENT) --mode $(MODE) --target $(TARGET) $(SERVE_ARGS)

deploy-embedding: ## Serve embedding_cpu (embedding_py, embedding_onnx) on :8000/:8001
	$(MAKE) deploy DEPLOYMENT=embedding_cpu

deploy-yolo11: ## Serve yolo11_ensemble on :8000/:8001
	$(MAKE) deploy DEPLOYMENT=yolo11_ensemble

deploy-cn-clip: ## Serve cn_clip on :8000/:8001
	$(MAKE) deploy DEPLOYMENT=cn_clip

deploy-resnet: ## Serve resnet_npu on TARGET (cpu default; TARGET=npu needs an Ascend host)
	$(MAKE) deploy DEPLOYMENT=resnet_npu

new: install ## Copy deployment FROM under a new NAME as your template; MODELS="m ...": only those entry models, RENAME="old=new ...": your model names (docs/adding-a-deployment.md)
	@test -n "$(NAME)" -a -n "$(FROM)" || { echo "usage: make new NAME=<new deployment> FROM=<deployment to copy> [MODELS=\"<entry model> ...\"] [RENAME=\"<old>=<new> ...\"]"; exit 2; }
	$(PY) -m harness new $(NAME) --from $(FROM) $(if $(MODELS),--models $(MODELS)) $(if $(RENAME),--rename $(RENAME))

refresh: install ## Regenerate deployment NAME in order: export, fixtures from the reference, quantization gates
	@test -n "$(NAME)" || { echo "usage: make refresh NAME=<deployment>"; exit 2; }
	$(PY) -m harness refresh $(NAME)

# The deployment make bench-peers measures: its lab/deployments/<d>.toml's [peers] names the models, ceilings and ratios.
PEERS_DEPLOYMENT ?= embedding_cpu
bench: install ## Run benchmark scenarios (all deployments, or DEPLOYMENT=...) into results/records.jsonl, then bench-pairs; locally with PEERS_DEPLOYMENT (embedding_cpu), also bench-peers; locally, all deployments: gate-cost
	$(PY) -m harness bench $(DEPLOYMENT) --mode $(MODE) --target $(TARGET) --duration $(BENCH_DURATION) $(if $(BENCH_ONLY),--only $(BENCH_ONLY))
ifeq ($(BENCH_ONLY)$(filter-out local docker,$(MODE)),)
	$(MAKE) --no-print-directory bench-pairs
endif
ifeq ($(MODE)$(TARGET)$(filter-out $(PEERS_DEPLOYMENT),$(DEPLOYMENT)),localcpu)
	$(MAKE) --no-print-directory bench-peers
endif
ifeq ($(BENCH_ONLY)$(DEPLOYMENT)$(MODE)$(TARGET),localcpu)
	$(MAKE) --no-print-directory gate-cost
endif

bench-pairs: install ## Each JPEG-/text-in entry model vs its model-only path on one server, alternating, PAIR_ROUNDS rounds (DEPLOYMENT=..., MODE=...)
	$(PY) -m harness pair-bench $(DEPLOYMENT) --manifest --mode $(MODE) --target $(TARGET) --duration $(BENCH_DURATION) --rounds $(PAIR_ROUNDS) --record-results

clean: ## Remove exported model files and results (keeps .venv)
	rm -rf results
	find deployments -name '*.onnx' -path '*/model_repository/*' -delete

# --- results matrix (harness/measuring/matrix/) ---
.PHONY: matrix

matrix: install ## Aggregate results/records.jsonl into docs/results.md, results.json, results.csv, docs/plots/ and each deployment README's results block
	$(PY) -m harness matrix

.PHONY: lint
lint: install ## Lint, format check (ruff) and import directions (lint-imports), settings in pyproject.toml; `make format` fixes what it can
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

.PHONY: format
format: install ## Apply ruff's formatting and safe fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

.PHONY: pack-env
pack-env: install ## Pack DEPLOYMENT's Python-backend env for TARGET (cpu|ngc|npu) into deployments/<d>/envs/<target>.tar.gz
	@test -n "$(DEPLOYMENT)" || { echo "usage: make pack-env DEPLOYMENT=<name> [TARGET=cpu|ngc|npu] [PACK_ENV_ARGS=--force]"; exit 2; }
	$(PY) -m harness pack-env $(DEPLOYMENT) --target $(TARGET) $(PACK_ENV_ARGS)

# --- reliability: soak, faults, hostile input (lab/harness_lab/reliability/soak.py, lab/harness_lab/reliability/faults.py) ---
# The deployment soak, faults and gate-cost load: its lab/deployments/<d>.toml's [reliability] names the model.
RELIABILITY_DEPLOYMENT ?= embedding_cpu
SOAK_DURATION ?= 15
SOAK_ARGS ?=
FAULTS_ARGS ?=
.PHONY: soak faults fuzz reliability

soak: install ## Hold concurrency 64 on RELIABILITY_DEPLOYMENT's [reliability] model (embedding_cpu) for SOAK_DURATION s (15): errors, drift, memory
	$(PY) -m harness soak --deployment $(RELIABILITY_DEPLOYMENT) --duration $(SOAK_DURATION) $(SOAK_ARGS)

faults: install ## Kill a stub, unload+reload, restart the server under verified load (RELIABILITY_DEPLOYMENT, embedding_cpu); report recovery
	$(PY) -m harness faults --deployment $(RELIABILITY_DEPLOYMENT) $(FAULTS_ARGS)

fuzz: install ## Property-based hostile-input tests of every pre-processing function and served entry model
	$(PY) -m pytest harness/tests/test_fuzz_preprocessing_*.py $(PYTEST_ARGS)

reliability: install ## Run soak, faults and fuzz, then regenerate the results section of lab/docs/reliability.md
	$(PY) -m harness soak --deployment $(RELIABILITY_DEPLOYMENT) --duration $(SOAK_DURATION) $(SOAK_ARGS)
	$(PY) -m harness faults --deployment $(RELIABILITY_DEPLOYMENT) $(FAULTS_ARGS)
	$(PY) -m pytest harness/tests/test_fuzz_preprocessing_*.py -q $(PYTEST_ARGS)
	$(PY) -m harness faults --write-docs

# --- docker mode: the CPU image and a Docker engine (images/, harness/serving/launchers/docker.py) ---
# IMAGE: the image docker mode serves from (default: the CPU image `make image` builds here).
IMAGE ?= triton-harness/tritonserver-cpu:2.51.0
export TRITON_CPU_IMAGE := $(IMAGE)
DOCKER_DEPLOYMENTS ?= $(notdir $(patsubst %/environment.yml,%,$(wildcard deployments/*/environment.yml)))
.PHONY: image docker-engine docker-engine-stop pack-env-image test-docker

image: ## Build the CPU tritonserver image IMAGE from nothing (mmdebstrap base; skipped when current; needs an engine)
	IMAGE=$(IMAGE) images/cpu/build.sh

docker-engine: ## Install (apt-get) and start dockerd in the background when no engine answers (root, Debian)
	images/docker-engine.sh start

docker-engine-stop: ## Stop the dockerd that `make docker-engine` started; undo its bridge, iptables, ip_forward
	images/docker-engine.sh stop

pack-env-image: install ## Pack every deployment's Python env for the CPU image (TARGET=cpu-image; skipped when current)
	@for d in $(DOCKER_DEPLOYMENTS); do $(PY) -m harness pack-env $$d --target cpu-image $(PACK_ENV_ARGS) || exit 1; done

test-docker: install image scaleout-tools ## Every deployment's correctness checks in docker mode (engine + image + packed envs first), swarm kill + roll of 2 replicas, two nodes: drain + node loss
	$(PY) -m pytest harness/tests/test_deployments.py::test_check harness/tests/test_docker_preflight.py harness/tests/test_docker_serving.py harness/tests/test_docker_packed_envs.py harness/tests/test_docker_gate.py lab/tests/test_scaleout.py lab/tests/test_scaleout_nodes.py --server-mode docker --image $(IMAGE) -rA $(PYTEST_ARGS)

# --- beyond one machine: committed Kubernetes objects and swarm stacks (deploy/), multi-replica runs
# of the stacks (lab/harness_lab/scaleout/, lab/docs/scaling.md) ---
# make scaleout DEPLOYMENT=<d>: deploy/swarm/<d>/stack.yml (default: the deployment whose lab/deployments/<d>.toml
# [scaleout] table names a model). SCALEOUT_ARGS: e.g. --lb nginx, --scenarios kill roll.
# NODES=2: a second swarm node (a dockerd in a container) joins; throughput, drain, node loss and back.
SCALEOUT_ARGS ?=
NODES ?= 1
K8S_DEPLOYMENTS := $(if $(DEPLOYMENT),$(DEPLOYMENT),$(filter-out base,$(notdir $(wildcard deploy/k8s/*))))
.PHONY: kubectl k8s scaleout scaleout-tools scaleout-down

kubectl: ## Install kubectl (Debian's kubernetes-client; root) when missing: make k8s and lab/tests/test_k8s.py render deploy/k8s with it
	@command -v kubectl >/dev/null || { apt-get update -qq && apt-get install -y --no-install-recommends kubernetes-client; }

k8s: kubectl ## Render deploy/k8s/<d> (DEPLOYMENT, default all) into build/k8s/<d>.yaml: what `kubectl apply -k deploy/k8s/<d>` applies
	@mkdir -p build/k8s
	@for d in $(K8S_DEPLOYMENTS); do kubectl kustomize deploy/k8s/$$d > build/k8s/$$d.yaml || exit 1; echo build/k8s/$$d.yaml; done

scaleout-tools: ## The swarm stack's balancer (haproxy + nginx) and Prometheus images, built from Debian packages (skipped when current)
	images/lb/build.sh >/dev/null
	images/prometheus/build.sh >/dev/null

scaleout: install docker-engine image scaleout-tools ## deploy/swarm/<DEPLOYMENT>/stack.yml on Docker swarm, 3 replicas behind haproxy: 1/2/3-replica throughput, kill, roll, roll back (results/scaleout/); NODES=2: on two nodes, drain, node loss; tears the swarm down
	$(PY) -m harness scaleout run $(if $(DEPLOYMENT),--deployment $(DEPLOYMENT)) --nodes $(NODES) $(SCALEOUT_ARGS)

scaleout-down: ## Remove every scaleout stack and node and leave the swarm (after a crashed run)
	$(PY) -m harness scaleout down

# --- front gate (triton_gate/): what the validating proxy in front of tritonserver costs ---
.PHONY: gate-cost
gate-cost: install ## Throughput with and without the front gate at c=8 on RELIABILITY_DEPLOYMENT's [reliability] model and on echo (results/reliability/gate_cost*.json)
	$(PY) -m harness gate-cost --deployment $(RELIABILITY_DEPLOYMENT)
	$(PY) -m harness gate-cost --deployment $(RELIABILITY_DEPLOYMENT) --model echo --json results/reliability/gate_cost_echo.json

.PHONY: gate-bounds
gate-bounds: install ## 2 GiB compressed and chunked bodies to RELIABILITY_DEPLOYMENT's text model, then a burst of GATE_BOUNDS_MODEL's largest requests (results/reliability/gate_bounds.json)
	$(PY) -m harness gate-bounds --deployment $(RELIABILITY_DEPLOYMENT) $(if $(GATE_BOUNDS_MODEL),--burst-model $(GATE_BOUNDS_MODEL))

# --- hostile inputs against a server you run (lab/harness_lab/hostile/ over triton_gate/tests/hostile_cases.py, lab/docs/reliability.md) ---
URL ?= 127.0.0.1:8000
GRPC_URL ?=
HOSTILE_ARGS ?=
.PHONY: hostile
hostile: install ## The project's hostile inputs against the server at URL (loopback; GRPC_URL=host:port adds gRPC, HOSTILE_ARGS=--model M): per class refused cleanly / accepted / server died / hung
	$(PY) -m harness hostile --mode external --url $(URL) $(if $(GRPC_URL),--grpc-url $(GRPC_URL)) $(HOSTILE_ARGS)

# --- embedding serving vs its ceiling and its peers (lab/harness_lab/peers/wrk.py, lab/harness_lab/peers/) ---
INFINITY_VENV ?= .venv-infinity
PEERS_ARGS ?=
.PHONY: wrk peer-infinity bench-peers

wrk: ## Install the wrk HTTP load generator (Debian package; root)
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y --no-install-recommends wrk; }

$(INFINITY_VENV)/.installed: requirements/peers-infinity.txt
	$(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/pip install --quiet --upgrade pip wheel
	$(INFINITY_VENV)/bin/pip install -r requirements/peers-infinity.txt
	touch $@

peer-infinity: $(INFINITY_VENV)/.installed ## Create .venv-infinity: infinity-emb 0.0.78 with the pins that import (requirements/peers-infinity.txt)

bench-peers: install wrk peer-infinity ## PEERS_DEPLOYMENT (embedding_cpu), native and /v1/embeddings behind the gate, vs its in-process ceiling and infinity-emb: wrk, pinned cores, servers alternating (PEERS_ARGS='--no-gate ...')
	$(PY) -m harness peers --deployment $(PEERS_DEPLOYMENT) --duration $(BENCH_DURATION) $(PEERS_ARGS)
