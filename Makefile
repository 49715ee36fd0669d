# Capstan. `make` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Run the demo: demo provider + sidecar on the StreamCo fixture, compose and one tool call
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
image: ## Build the OCI images (capstan-controller, capstan-sidecar) with buildah: no daemon, no base image
	$(CARGO) build --release --workspace --bins
	scripts/build-image --smoke --keep

.PHONY: tools
tools: ## Build (once) the pinned kube-apiserver, etcd, helm and the Python and TypeScript MCP SDKs into ~/.cache/capstan
	e2e/build-tools
	e2e/python-env
	e2e/node-env

# One build per run: `cargo test --workspace` builds every binary with the tests' own feature
# set, and the test harness uses those binaries instead of building its own
# (examples/demo-provider/src/harness.rs).
.PHONY: test
test: lint tools ## Lint, then every test: unit, integration, e2e on a real apiserver
	CAPSTAN_BINARIES_PREBUILT=1 $(CARGO) test --workspace

.PHONY: e2e
e2e: tools ## Only the e2e suites (each starts and stops its own control plane)
	$(CARGO) test -p capstan-e2e

.PHONY: cluster-up
cluster-up: tools ## Start a control plane for manual use; prints export lines to eval
	@e2e/control-plane up

.PHONY: cluster-down
cluster-down: ## Stop the control plane started by cluster-up and delete its state
	@e2e/control-plane down

# One build, one feature set: the binaries the benchmarks start and the benchmarks themselves.
BENCHES := --bench parse --bench select --bench compose --bench plan_token --bench sidecar --bench base_tools --bench controller

.PHONY: bench
bench: tools ## Benchmarks (release builds; medians and ratios, never asserted)
	$(CARGO) build --profile bench --workspace --bins --benches
	CAPSTAN_BINARIES_PREBUILT=1 $(CARGO) bench --workspace $(BENCHES)
