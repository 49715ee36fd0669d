# Capstan. `make` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

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

.PHONY: test
test: lint ## Lint, then every test (a test fails when generated files are stale)
	$(CARGO) test --workspace

.PHONY: bench
bench: ## Benchmarks (release builds; medians and ratios, never asserted)
	$(CARGO) bench -p capstan-api --bench parse
