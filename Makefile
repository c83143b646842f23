# Orchestra — the two commands a newcomer needs are `make run` and `make test`.
#
# The cargo target directory lives outside the clone so that a fresh clone does
# not rebuild RocksDB (about 9 minutes on 2 cores) every time.

export CARGO_TARGET_DIR ?= $(HOME)/.cache/orchestra-target
# No incremental compilation unless asked for (CARGO_INCREMENTAL=1): its
# session state takes gigabytes, and `make test`, `make run` and CI then
# build with one setting, so each reuses the others' build.
export CARGO_INCREMENTAL ?= 0
CARGO ?= cargo

.PHONY: all deps build run store-demo test proptest-long bench bench-quick bench-apiserver bench-apiserver-quick bench-auth bench-auth-quick bench-handler-instructions lint doc

## Where `make run` keeps the cluster's data (store, certificates, kubeconfig).
DATA_DIR ?= $(CURDIR)/.orchestra

all: build

## Installs the system packages the build needs (apt-get), if missing.
deps:
	@./scripts/deps.sh

## Builds with exactly the features `make test` and `make lint` resolve
## (every package, every feature, the tests' dev-dependencies included), so
## that the three share one build of the dependencies: any other package
## selection resolves other features and rebuilds much of them. The tests'
## build includes the `orchestra` binary.
build: deps
	$(CARGO) test --workspace --all-features --no-run

## Runs the reference assembly: a whole cluster in one process (store, API
## server over HTTPS on 127.0.0.1:6443, scheduler, controller manager and 3
## node agents running containers as host processes). It prints the
## `export KUBECONFIG=...` line to use with kubectl once it is ready.
run: build
	$(CARGO_TARGET_DIR)/debug/orchestra up --data-dir $(DATA_DIR)

## The durable store alone: writes, watches, paginates, expires a TTL key, restarts.
store-demo: build
	$(CARGO_TARGET_DIR)/debug/orchestra store-demo

## Every test of the workspace: formatting, unit, integration (the store
## conformance suite on both backends, the crash test), doc tests, then
## clippy and the API documentation, both with warnings as errors.
test: deps
	$(CARGO) fmt --all --check
	$(CARGO) test --workspace --all-features
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --all-features

## The property tests of the parsers and evaluators (selectors, tokens,
## RBAC, ABAC, merge patches) with 64 times their usual cases; `make test`
## runs each with 256.
PROPTEST_LONG_CASES ?= 16384
proptest-long: deps
	PROPTEST_CASES=$(PROPTEST_LONG_CASES) $(CARGO) test --workspace --all-features --lib -- properties::

## The benchmarks against their baselines (etcd for the store, the bare
## store for the API server, the Kubernetes limits and SLOs for the nodes).
bench: deps
	$(CARGO) bench -p orchestra-benches --bench store
	$(CARGO) bench -p orchestra-benches --bench apiserver
	$(CARGO) bench -p orchestra-benches --bench handler
	$(CARGO) bench -p orchestra-benches --bench scheduler
	$(CARGO) bench -p orchestra-benches --bench controllers
	$(CARGO) bench -p orchestra-benches --bench node
	$(CARGO) bench -p orchestra-benches --bench auth

## The same, each in under a minute and a half.
bench-quick: deps
	$(CARGO) bench -p orchestra-benches --bench store -- --quick
	$(CARGO) bench -p orchestra-benches --bench apiserver -- --quick
	$(CARGO) bench -p orchestra-benches --bench handler -- --quick
	$(CARGO) bench -p orchestra-benches --bench scheduler -- --quick
	$(CARGO) bench -p orchestra-benches --bench controllers -- --quick
	$(CARGO) bench -p orchestra-benches --bench node -- --quick
	$(CARGO) bench -p orchestra-benches --bench auth -- --quick

## The API server against the bare store only.
bench-apiserver: deps
	$(CARGO) bench -p orchestra-benches --bench apiserver

bench-apiserver-quick: deps
	$(CARGO) bench -p orchestra-benches --bench apiserver -- --quick

## Authentication, RBAC decisions, and a create through Node,RBAC and the
## default admission chain against one with neither.
bench-auth: deps
	$(CARGO) bench -p orchestra-benches --bench auth

bench-auth-quick: deps
	$(CARGO) bench -p orchestra-benches --bench auth -- --quick

## Instructions per create in the API handler (valgrind; exact, unlike time).
## HANDLER_ARGS="--pods --secured": pods through Node,RBAC and admission.
bench-handler-instructions: deps
	./scripts/handler-instructions.sh $(HANDLER_ARGS)

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --all-features

doc: deps
	$(CARGO) doc --workspace --no-deps --all-features
