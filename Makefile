# signet — build, test and demo targets. See README.md.
SHELL := /bin/bash
GO ?= go
GO_TEST_ARGS ?= -race
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)
FUZZTIME ?= 10s
MUTATE_JOBS ?= 2

.PHONY: all build test lint vet fmt-check fuzz-smoke demo bench tools kube-tools kueue-tools browser-tools clean mutations image bench-scale

all: build

build:
	$(GO) build -o $(BIN)/signet ./cmd/signet

## image: signet's container image from scratch (static binary at /signet),
## written as an OCI image layout to bin/image; prints its digest
## (internal/tools/ociimage, docs/deploy.md). SOURCE_DATE_EPOCH sets its time.
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o $(BIN)/signet-linux-amd64 ./cmd/signet
	$(GO) run ./internal/tools/ociimage/cmd/ociimage -binary $(BIN)/signet-linux-amd64 -out $(BIN)/image

## tools: stock tools the interop tests drive (cosign), built once into bin/.
tools:
	./hack/tools.sh

## kube-tools: etcd (Debian's etcd-server) and kube-apiserver, kube-scheduler,
## kube-controller-manager built from hack/kube-tools into bin/, once, for
## internal/testing/kubetest.
kube-tools:
	./hack/kube-tools.sh

## kueue-tools: Kueue (sigs.k8s.io/kueue) built from its Go module into
## bin/kueue, once, and its module (CRDs, webhook manifests) downloaded,
## for the Kubernetes end-to-end tests (internal/testing/kubetest/kueue.go).
kueue-tools:
	./hack/kueue-tools.sh

## browser-tools: Debian's chromium, which the report's browser tests drive
## (chromedp), installed with apt-get when missing.
browser-tools:
	./hack/browser-tools.sh

## test: every test, race detector on, plus lint. This is what CI runs.
test: lint tools kube-tools kueue-tools browser-tools
	$(GO) test $(GO_TEST_ARGS) -count=1 -timeout 30m ./...

lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## fuzz-smoke: every fuzz target for $(FUZZTIME).
fuzz-smoke:
	./hack/fuzz-smoke.sh $(FUZZTIME)

## demo: signet's main job on the embedded example, verified at the end.
demo: build
	./hack/demo.sh

## bench: the benchmarks named in the issues.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 60m ./...

## bench-scale: issue 19's measurements on a long branch (SCALE_RUNS, default
## 10^5): audit peak RSS and time, reconciler start-up, local check overhead,
## each its own process (hack/bench-scale.sh; about an hour more the first time: the branch
## is synthesized and cached under TMPDIR, /dev/shm by default).
bench-scale:
	GO=$(GO) hack/bench-scale.sh

## mutations: every mutation of hack/mutations.yaml must be caught by the test
## named for it (internal/tools/mutate). One only: make mutations MUTATION=<id>[,<id>…].
## MUTATE_JOBS mutations run at once (default 2): those of .go files through
## go test -overlay, the others (files tests read at run time) in place, alone.
## MUTATE_JOBS=1 applies every mutation in place, one at a time;
## MUTATE_ARGS=-overlay never writes the working tree (.go mutations only).
mutations:
	$(GO) build -o $(BIN)/mutate ./internal/tools/mutate/cmd/mutate
	$(BIN)/mutate -list hack/mutations.yaml -jobs $(MUTATE_JOBS) $(if $(MUTATION),-only $(MUTATION)) $(MUTATE_ARGS)

clean:
	rm -rf $(BIN) demo
