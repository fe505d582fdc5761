#!/usr/bin/env bash
# Builds the stock tools that signet's interop tests drive into bin/, once.
# cosign and kubeconform come from their Go modules (no release downloads on
# CI machines).
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/toolcache.sh
mkdir -p bin
# gdb and strace: the local backend's isolation tests attack one check from
# another by ptrace (reconciler/local, cmd/signet isolation tests).
missing=()
for t in gdb strace; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tools: ${missing[*]} not on PATH; running: apt-get update && apt-get install -y ${missing[*]}" >&2
  SUDO=
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi
COSIGN_VERSION=v2.6.5
if [ ! -x bin/cosign ] || [ "$(cat bin/.cosign-version 2>/dev/null)" != "$COSIGN_VERSION" ]; then
  if ! toolcache_get cosign "cosign-$COSIGN_VERSION" bin/cosign; then
    echo "building cosign $COSIGN_VERSION into bin/ (once)" >&2
    GOBIN="$PWD/bin" CGO_ENABLED=0 go install "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION"
    toolcache_put cosign "cosign-$COSIGN_VERSION" bin/cosign
  fi
  echo "$COSIGN_VERSION" > bin/.cosign-version
fi
KUBECONFORM_VERSION=v0.8.0
if [ ! -x bin/kubeconform ] || [ "$(cat bin/.kubeconform-version 2>/dev/null)" != "$KUBECONFORM_VERSION" ]; then
  if ! toolcache_get kubeconform "kubeconform-$KUBECONFORM_VERSION" bin/kubeconform; then
    echo "building kubeconform $KUBECONFORM_VERSION into bin/ (once)" >&2
    GOBIN="$PWD/bin" CGO_ENABLED=0 go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
    toolcache_put kubeconform "kubeconform-$KUBECONFORM_VERSION" bin/kubeconform
  fi
  echo "$KUBECONFORM_VERSION" > bin/.kubeconform-version
fi
