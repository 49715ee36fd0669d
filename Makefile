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
generate: ## Regenerate committed files: config/crd/*.yaml
	$(CARGO) run -q -p capstan-api --features crdgen --bin crdgen -- config/crd

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: lint
lint: ## cargo fmt --check and clippy with warnings as errors
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

.PHONY: tools
tools: ## Build (once) the pinned kube-apiserver, etcd, helm and the Python and TypeScript MCP SDKs into ~/.cache/capstan
	e2e/build-tools
	e2e/python-env
	e2e/node-env

.PHONY: test
test: lint tools ## Lint, then every test: unit, integration, e2e on a real apiserver
	$(CARGO) test --workspace

.PHONY: e2e
e2e: tools ## Only the e2e suites (each starts and stops its own control plane)
	$(CARGO) test -p capstan-e2e

.PHONY: cluster-up
cluster-up: tools ## Start a control plane for manual use; prints export lines to eval
	@e2e/control-plane up

.PHONY: cluster-down
cluster-down: ## Stop the control plane started by cluster-up and delete its state
	@e2e/control-plane down

.PHONY: bench
bench: tools ## Benchmarks (release builds; medians and ratios, never asserted)
	$(CARGO) bench -p capstan-api --bench parse
	$(CARGO) bench -p capstan-compose --bench compose
	$(CARGO) bench -p capstan-sidecar --bench sidecar
	$(CARGO) bench -p capstan-e2e --bench controller
