#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue), which the Kubernetes end-to-end tests
# start next to the control plane (internal/testing/kubetest/kueue.go), into
# bin/kueue from its Go module. Its CRDs and webhook manifests are read at
# test time from the same module in the Go module cache (this script
# downloads it), so the binary and its manifests are always one version
# (docs/decisions.md).
#
# The binary is rebuilt only when it is missing or when the pinned version
# (bin/.kueue-version) changed, and then copied from the per-user tools
# cache (hack/lib/toolcache.sh) when this exact build is there. Measured on
# two cores (README): the first build 11 minutes on an idle machine, 52 on
# a loaded one; afterwards this script returns at once, and a fresh clone
# copies the 125 MB binary from the cache in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
. hack/lib/toolcache.sh

# KUEUE_VERSION is also the version internal/testing/kubetest reads the
# manifests of (kubetest.KueueVersion); change both together.
KUEUE_VERSION=v0.17.0
# As hack/tools.sh keys cosign: the version is the whole build (no flags).
CACHE_KEY="kueue-$KUEUE_VERSION"

mkdir -p bin
STAMP=bin/.kueue-version
# The module itself (CRDs, webhook manifests): the tests read it from
# GOMODCACHE; downloading it here keeps a test run offline.
go mod download "sigs.k8s.io/kueue@$KUEUE_VERSION"
if [ ! -x bin/kueue ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$KUEUE_VERSION" ]; then
  if ! toolcache_get kueue "$CACHE_KEY" bin/kueue; then
    echo "kueue-tools: building kueue $KUEUE_VERSION into bin/ (slow the first time)" >&2
    start=$(date +%s)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    GOBIN="$tmp" CGO_ENABLED=0 go install "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
    mv "$tmp/kueue" bin/kueue.tmp
    mv bin/kueue.tmp bin/kueue
    toolcache_put kueue "$CACHE_KEY" bin/kueue
    echo "kueue-tools: built kueue in $(( $(date +%s) - start ))s" >&2
  fi
  echo "$KUEUE_VERSION" > "$STAMP"
fi
echo "kueue-tools: bin/kueue at $KUEUE_VERSION" >&2
