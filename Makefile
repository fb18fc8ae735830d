# Everything a fresh machine needs: `make demo` and `make test` create the venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: unit fuzz host-packages test test-versions test-counter-rules test-held-long test-probe-flood test-karpenter lint demo demo-node bench bench-scale clean

$(STAMP): pyproject.toml constraints.txt harness/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e ./harness
	@touch $@

# deploy/*.yaml must be the Helm chart's output: render_manifests.py --check builds helm
# like the e2e binaries (once, cached beside them) and compares. promtool, built the same
# way, checks the alert rules the chart ships (tests/e2e/test_monitoring.py unit-tests them).
RULES := deploy/helm/neuron-dra/rules/neuron-dra.rules.yaml
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@if command -v shellcheck >/dev/null; then shellcheck scripts/*.sh; \
	else echo "shellcheck not installed: scripts/*.sh not checked (CI installs it)"; fi
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/generate_protos.py --check
	$(BIN)/python scripts/render_manifests.py --check
	$(BIN)/python scripts/chart_readme.py --check
	@if command -v go >/dev/null; then \
		promtool=$$($(BIN)/python -m neuron_dra_harness.build --promtool) && "$$promtool" check rules $(RULES); \
	else echo "go not installed: $(RULES) not checked with promtool"; fi

# Fake sysfs trees are thousands of small files; on tmpfs creating and deleting
# them is ~40x faster than on a disk mounted with `discard`.
TEST_TMPDIR := $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo /tmp)

# A contributor's quick check, no Go needed: ruff, mypy, the import layers, the
# generated protobuf code, and every test that runs without a control plane.
unit: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/generate_protos.py --check
	TMPDIR=$(TEST_TMPDIR) $(BIN)/pytest -m "not e2e" -q

# The fuzz tests on fresh examples (CI replays fixed ones): a new seed each run,
# printed so a failure can be run again with FUZZ_SEED=<seed>.
fuzz: $(STAMP)
	@seed=$${FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "fuzz seed $$seed (again: make fuzz FUZZ_SEED=$$seed)"; \
	NEURON_DRA_FUZZ_FRESH=1 TMPDIR=$(TEST_TMPDIR) $(BIN)/pytest -q -p no:cacheprovider \
		--hypothesis-seed=$$seed tests/reliability/test_fuzz.py

# The Debian packages the real-node tests and shellcheck need: installed where this
# user may (root, or sudo without a password), else named with the command to run.
host-packages:
	@scripts/test-packages.sh

# Everything on the newest Kubernetes release, then the tests that differ between
# releases on the oldest one.
test: host-packages lint
	TMPDIR=$(TEST_TMPDIR) $(BIN)/pytest
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python -m tests.e2e.versions --oldest

# The tests that differ between releases on every supported one (and a 1.33
# kubelet), and the compatibility table in docs/operators/kubernetes-releases.md.
test-versions: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) NEURON_DRA_UPGRADE_TO=v1.36.3 \
		$(BIN)/python -m tests.e2e.versions --table docs/operators/kubernetes-releases.md

# The NeuronCore end-to-end tests (device-plugin-style core pods among them) on
# kube-scheduler three ways: the release's ("stock"), and with its allocator patched by
# bench/upstream/counters-fail-closed.patch or counters-at-allocation.patch (each built
# once, a few minutes of CPU cold, and cached).
COUNTER_RULES ?= stock counters-fail-closed counters-at-allocation
COUNTER_TESTS := tests/e2e/test_cores.py tests/e2e/test_random_held_cores.py \
	tests/e2e/test_counter_rules.py
test-counter-rules: $(STAMP)
	@set -e; for rule in $(COUNTER_RULES); do \
		echo "== kube-scheduler: $$rule"; \
		patch=$$rule; test "$$rule" != stock || patch=; \
		TMPDIR=$(TEST_TMPDIR) NEURON_DRA_SCHEDULER_PATCH=$$patch \
			$(BIN)/pytest -m e2e $(COUNTER_TESTS); \
	done

# The held-cores property test (tests/e2e/test_random_held_cores.py) at length:
# HELD_SEEDS seeds from HELD_FIRST_SEED, HELD_STEPS random steps each (300 by default;
# `make test` runs 3 seeds of 12), on the kube-scheduler SCHEDULER_PATCH names (empty:
# the release's; e.g. counters-at-allocation, see test-counter-rules). Every seed runs
# even when one fails; each failure names its seed and step.
HELD_FIRST_SEED ?= 1
HELD_SEEDS ?= 10
HELD_STEPS ?= 30
SCHEDULER_PATCH ?= $(NEURON_DRA_SCHEDULER_PATCH)
# The connection flood of the plugin's health port for FLOOD_S seconds (ten minutes),
# against a plugin process and against the real node's kubelet; `make test` holds it
# for 15 and 45 s.
FLOOD_S ?= 600
test-probe-flood: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) NEURON_DRA_PROBE_FLOOD_S=$(FLOOD_S) $(BIN)/pytest -s \
		tests/neuron_dra/agent/kubelet/test_probe_flood.py tests/e2e/test_realnode_probes.py

test-held-long: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) NEURON_DRA_SCHEDULER_PATCH=$(SCHEDULER_PATCH) \
		NEURON_DRA_RANDOM_SEED=$(HELD_FIRST_SEED) NEURON_DRA_HELD_SEEDS=$(HELD_SEEDS) \
		NEURON_DRA_HELD_STEPS=$(HELD_STEPS) \
		$(BIN)/pytest -m e2e tests/e2e/test_random_held_cores.py

# Real Karpenter (KWOK cloud provider, DRA simulation on) provisioning simulated Neuron
# nodes for pending pods' claims from the driver's catalog (tests/e2e/test_karpenter.py).
# Not in `test`: Karpenter builds with Go 1.27 (fetched as GOTOOLCHAIN=go1.27.3, cached
# beside the Kubernetes binaries) and the cases take minutes.
test-karpenter: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) NEURON_DRA_KARPENTER=1 $(BIN)/pytest -m e2e tests/e2e/test_karpenter.py

demo: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python scripts/demo.py

# The same on a real node: kubelet, containerd and runc on this machine (root), the
# driver's own image installed by scripts/install-dra-driver.sh, a pod printing its devices.
demo-node: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python scripts/demo.py --real-node

bench: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python bench/run.py
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python bench/concurrency.py
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python bench/cel.py
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python bench/footprint.py
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python bench/scheduler.py

# The real scheduler over 1,000, 2,000 and 5,000 simulated nodes, empty and 90% full, for
# each way of publishing NeuronCores: tens of minutes and most of the machine's memory.
# BENCH_SCALE_ARGS picks sizes and layouts, e.g. "--sizes 1000 --layouts devices,partitions".
BENCH_SCALE_ARGS ?=
bench-scale: $(STAMP)
	TMPDIR=$(TEST_TMPDIR) $(BIN)/python bench/scale.py $(BENCH_SCALE_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
