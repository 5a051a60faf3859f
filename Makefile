# The one place the Kubernetes version is pinned (k8s-openapi's feature in Cargo.toml must match).
K8S_VERSION ?= 1.37.2
# The previous supported minor's release, built beside the pin: the version-skew e2e runs the same
# ksched against both, and `make fidelity K8S_VERSION=1.36.3` compares with that minor's scheduler.
K8S_PREVIOUS_VERSION ?= 1.36.3

SHELL := /bin/bash
CACHE_HOME := $(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME),$(HOME)/.cache)
KSCHED_TESTENV_BIN := $(CACHE_HOME)/ksched/testenv/$(K8S_VERSION)/bin
KSCHED_TESTENV_PREVIOUS_BIN := $(CACHE_HOME)/ksched/testenv/$(K8S_PREVIOUS_VERSION)/bin
export KSCHED_TESTENV_BIN KSCHED_TESTENV_PREVIOUS_BIN
export K8S_VERSION K8S_PREVIOUS_VERSION

# ksched's version: Cargo.toml is the one place (`ksched version`, the image tag, the chart's appVersion).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE ?= ksched:$(VERSION)
# The image ships the dist build (fat LTO); IMAGE_PROFILE=release builds faster.
IMAGE_PROFILE ?= dist

.PHONY: all build test testenv crds manifests image lint demo bench bench-profile fidelity k8s-bump check-no-leftovers

all: build

build:
	cargo build --all-targets

## testenv: build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm, kstatus-check (cached) at K8S_VERSION and K8S_PREVIOUS_VERSION; promtool, lua, podman, docker-registry, skopeo
testenv:
	@for v in $(sort $(K8S_PREVIOUS_VERSION) $(K8S_VERSION)); do K8S_VERSION=$$v hack/testenv/build.sh >/dev/null || exit 1; done
	hack/install-lua.sh >/dev/null
	hack/install-prometheus.sh >/dev/null
	hack/install-podman.sh >/dev/null
	hack/install-registry.sh >/dev/null

## crds: regenerate crds/*.yaml from the Rust types
crds:
	cargo run --quiet -- crds --output-dir crds
	cp crds/*.yaml manifests/install/crds/
	cp crds/*.yaml charts/ksched/crds/

## manifests: regenerate manifests/install from the Helm chart charts/ksched
manifests: testenv
	hack/generate-manifests.sh

## image: the ksched image as an OCI archive, target/image/ksched-$(VERSION).tar (podman; no daemon, no registry)
image:
	cargo build --profile $(IMAGE_PROFILE) --locked --bin ksched
	hack/image.sh target/$(if $(filter dev,$(IMAGE_PROFILE)),debug,$(IMAGE_PROFILE))/ksched target/image/ksched-$(VERSION).tar $(IMAGE)

## lint: formatting and clippy, warnings are errors
lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

## test: lint, unit and e2e tests against the real control plane; then no process may be left over
test: testenv lint
	cargo test --no-fail-fast
	@# What the e2e tests collected (events, statuses, ksched logs) must read well.
	cargo test --test readable_messages -- --ignored
	$(MAKE) --no-print-directory check-no-leftovers

check-no-leftovers:
	@# anchored at the start of the command line, so this shell itself does not match
	@left=$$(pgrep -af '^($(KSCHED_TESTENV_BIN)|$(KSCHED_TESTENV_PREVIOUS_BIN))/' || true); \
	if [ -n "$$left" ]; then echo "processes left running by the tests:"; echo "$$left"; exit 1; fi; \
	containers=$$(pgrep -af '^/usr/bin/conmon .*/ksched-testenv-' || true); \
	if [ -n "$$containers" ]; then echo "containers left running by the tests:"; echo "$$containers"; exit 1; fi; \
	echo "no control-plane process or container left running"

## fidelity: the differential test against upstream kube-scheduler on the whole generated corpus (report: target/fidelity/report.txt; `make test` runs its quick subset)
fidelity: testenv
	cargo test --test fidelity -- --ignored --nocapture full

## k8s-bump: move the pin to another Kubernetes release (VERSION=1.38.0): its testenv modules and feature-gate table, K8S_VERSION, a testenv build, then make fidelity against it (ksched emulates its newest minor until it supports the new one): the disagreements are the upgrade's to-do list
k8s-bump:
	@[[ "$(VERSION)" =~ ^1\.[0-9]+\.[0-9]+$$ ]] || { echo "usage: make k8s-bump VERSION=1.38.0" >&2; exit 2; }
	hack/testenv/set-version.sh $(VERSION)
	hack/testenv/feature-gates.sh $(VERSION)
	sed -i -E 's/^K8S_VERSION \?= .*/K8S_VERSION ?= $(VERSION)/' Makefile
	$(MAKE) --no-print-directory fidelity K8S_VERSION=$(VERSION)

# The image the demo's Deployment-mode schedulers run (DEMO_IMAGE_PROFILE=dev reuses the debug build).
DEMO_IMAGE_PROFILE ?= release

## demo: local control plane, host and leaf kwok nodes, the operator (hybrid profile Embedded; the other sample profiles' schedulers run under podman with the image), a workload across host and leaf; DEMO_KEEP=1 keeps it running
demo: testenv
	$(MAKE) --no-print-directory image IMAGE_PROFILE=$(DEMO_IMAGE_PROFILE) IMAGE=ksched:demo
	KSCHED_DEMO_IMAGE=$(CURDIR)/target/image/ksched-$(VERSION).tar cargo run --quiet --example demo

# The ksched build `make bench` measures: the dist build (what the image ships); BENCH_PROFILE=release builds faster.
BENCH_PROFILE ?= dist

## bench: ksched vs upstream kube-scheduler vs the API server's ceiling on upstream's scheduler_perf workloads (BENCH_PRESET=small|default|large|xlarge, BENCH_WORKLOADS=A,B, BENCH_ROUNDS=3; report: target/bench/report.md)
bench: testenv
	cargo build --profile $(BENCH_PROFILE) --bin ksched
	KSCHED_BIN=$(CURDIR)/target/$(if $(filter dev,$(BENCH_PROFILE)),debug,$(BENCH_PROFILE))/ksched cargo bench --bench scheduler_perf -- --preset $(or $(BENCH_PRESET),default)
	cargo bench --bench schedule_cycle

## bench-profile: per workload, ksched alone under a system-wide perf record: samples per process and ksched's busiest functions (BENCH_WORKLOADS=A,B; needs perf; data: target/bench-profile/)
bench-profile: testenv
	cargo build --release --bin ksched
	hack/bench-profile.sh $(BENCH_WORKLOADS)
