# Capstan. `make` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Run the demo: two demo providers and a sidecar, walked through what Capstan gives an assistant
	examples/demo

.PHONY: build
build: ## Build every crate (debug)
	$(CARGO) build --workspace --all-targets

.PHONY: generate
generate: ## Regenerate committed files: config/crd/*.yaml, the CRD chart's copy, docs/configuration.md
	$(CARGO) run -q -p capstan-api --features crdgen --bin crdgen -- config/crd
	$(CARGO) run -q -p capstan-api --features crdgen --bin crdgen -- charts/capstan-crds/files
	CAPSTAN_UPDATE_DOCS=1 $(CARGO) test -q -p capstan-controller -p capstan-sidecar --lib the_configuration_reference

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: lint
lint: ## cargo fmt --check, clippy with warnings as errors, and the layout rules (no import cycles, thin mains)
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	scripts/check-layout

.PHONY: image
# The release build of the two binaries the images hold: the node suite (e2e/tests/node.rs)
# runs this same command, so the images it runs on its node are the ones this target makes.
image: ## Build the OCI images (capstan-controller, capstan-sidecar) with buildah: no daemon, no base image
	$(CARGO) build --release -p capstan-controller -p capstan-sidecar --bins
	scripts/build-image --smoke --keep

.PHONY: tools
tools: ## Build (once) the pinned kube-apiserver, etcd, helm, the node's components, the Python and TypeScript MCP SDKs and the MCP conformance suite into ~/.cache/capstan
	e2e/build-tools
	e2e/python-env
	e2e/node-env
	e2e/conformance/env > /dev/null

# One build per run: `cargo test --workspace` builds every binary with the tests' own feature
# set, and the test harness uses those binaries instead of building its own
# (examples/demo-provider/src/harness.rs).
.PHONY: test
test: lint tools ## Lint, then every test: unit, integration, e2e on a real apiserver
	CAPSTAN_BINARIES_PREBUILT=1 $(CARGO) test --workspace

.PHONY: e2e
e2e: tools ## Only the e2e suites (each starts and stops its own control plane)
	$(CARGO) test -p capstan-e2e

# NODE=1: a whole single-node cluster (kubelet, containerd, kube-proxy, CoreDNS) in network and
# mount namespaces of its own; needs root and e2e/kubenode/packages. Run kubectl and helm in it
# with `e2e/kubenode/node exec kubectl ...`.
# No `tools` prerequisite: both scripts build what they start, and print only export lines, so
# `eval "$(make -s cluster-up)"` evaluates nothing else.
.PHONY: cluster-up
cluster-up: ## Start a control plane for manual use (NODE=1: a whole node, as root); prints export lines to eval
	@if [[ -n "$(NODE)" ]]; then e2e/kubenode/node up; else e2e/control-plane up; fi

.PHONY: cluster-down
cluster-down: ## Stop what cluster-up started (NODE=1 for the node) and delete its state
	@if [[ -n "$(NODE)" ]]; then e2e/kubenode/node down; else e2e/control-plane down; fi

# One build, one feature set: the binaries the benchmarks start and the benchmarks themselves.
BENCHES := --bench parse --bench select --bench toolsearch --bench compose --bench plan_token --bench sidecar --bench base_tools --bench authorization --bench upstream_auth --bench controller --bench fleet

.PHONY: bench
bench: tools ## Benchmarks (release builds; medians and ratios, never asserted), written to docs/benchmarks.md
	$(CARGO) build --profile bench --workspace --bins --benches
	git describe --always --dirty --exclude '*' > target/bench-commit.txt
	CAPSTAN_BINARIES_PREBUILT=1 $(CARGO) bench --workspace $(BENCHES) | tee target/bench-output.txt
	scripts/bench-report target/bench-output.txt docs/benchmarks.md

# Coverage-guided fuzzing with libFuzzer (cargo-fuzz). The toolchain is stable: cargo-fuzz's
# instrumentation flags are nightly-only, which RUSTC_BOOTSTRAP=1 allows. Targets are safe
# Rust, so no sanitizer is added (-s none builds in minutes instead of tens of minutes); what
# libFuzzer finds is a panic, a failed property, a hang (-timeout) or runaway memory.
FUZZ_TARGETS := parse guard identity plan_token route relay search
FUZZ_SECONDS ?= 60

.PHONY: conformance
conformance: ## The official MCP conformance suite against its reference server, directly and through a sidecar (table in target/conformance/)
	$(CARGO) build -p capstan-sidecar --bin capstan-sidecar
	e2e/conformance/run target/debug/capstan-sidecar

.PHONY: mutants
mutants: ## Mutation testing of the pure and security-critical code (cargo-mutants; MUTANTS_IN_DIFF=<git rev> for changed lines only); docs/reliability.md
	scripts/mutants $(if $(MUTANTS_IN_DIFF),--in-diff $(MUTANTS_IN_DIFF)) $(MUTANTS_SETS)

.PHONY: fuzz
fuzz: ## Fuzz every target for FUZZ_SECONDS (60) each; a crash is copied to fuzz/regressions/<target>/
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	@set -e; for target in $(FUZZ_TARGETS); do \
	  corpus=target/fuzz-corpus/$$target; mkdir -p $$corpus fuzz/regressions/$$target; \
	  echo "==> fuzz $$target for $(FUZZ_SECONDS) s"; \
	  if (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none $$target ../$$corpus seeds/$$target -- \
	        -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
	        -artifact_prefix=../fuzz/regressions/$$target/ > ../target/fuzz-$$target.log 2>&1); then \
	    grep -E '^(Done|stat::number_of_executed_units|#[0-9]+.*DONE)' target/fuzz-$$target.log | tail -3; \
	  else \
	    tail -40 target/fuzz-$$target.log; \
	    echo "fuzz $$target: crash saved in fuzz/regressions/$$target/ (make test replays it)"; exit 1; \
	  fi; \
	done

.PHONY: soak
soak: tools ## Soak the sidecar (200 sessions, SOAK_SECONDS 600) and the controller (5,000 bindings under churn, SOAK_CONTROLLER_SECONDS 300)
	$(CARGO) build --profile bench --workspace --bins --benches
	CAPSTAN_BINARIES_PREBUILT=1 $(CARGO) bench --workspace --bench soak
	CAPSTAN_BINARIES_PREBUILT=1 $(CARGO) bench --workspace --bench soak_controller
