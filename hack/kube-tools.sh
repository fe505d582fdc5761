#!/usr/bin/env bash
# Builds the Kubernetes control plane that internal/testing/kubetest starts into bin/:
# kube-apiserver, kube-scheduler and kube-controller-manager, and the stock
# kubectl that tests drive against it (deploy/: `kubectl auth can-i --list`),
# all from the separate tools module hack/kube-tools (pinned k8s.io/kubernetes
# version, staging modules replaced by their published versions). Installs
# etcd from Debian's etcd-server package when no etcd is on PATH.
#
# A binary is rebuilt only when it is missing or when the pinned version
# (bin/.kube-version) changed, and then copied from the per-user tools cache
# (hack/lib/toolcache.sh) when this exact build is there. The first build
# takes about 15 minutes on two cores, kubectl up to 9 minutes more (seen on
# a loaded machine); afterwards this script returns at once, and a fresh
# clone copies the binaries in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

if ! command -v etcd >/dev/null 2>&1; then
  echo "kube-tools: etcd not on PATH; running: apt-get update && apt-get install -y etcd-server" >&2
  SUDO=
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y etcd-server
fi
echo "kube-tools: etcd: $(command -v etcd) ($(etcd --version 2>/dev/null | head -n1))" >&2

KUBE_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' hack/kube-tools/go.mod)
if [ -z "$KUBE_VERSION" ]; then
  echo "kube-tools: no 'require k8s.io/kubernetes' line in hack/kube-tools/go.mod" >&2
  exit 1
fi

. hack/lib/toolcache.sh
# The cache key covers the whole tools module (pin and every replaced
# staging module's version) and this script's build flags.
CACHE_KEY="kube-$KUBE_VERSION-$(cat hack/kube-tools/go.mod hack/kube-tools/go.sum hack/kube-tools.sh | sha256sum | cut -c1-16)"

mkdir -p bin
STAMP=bin/.kube-version
stale=false
if [ "$(cat "$STAMP" 2>/dev/null)" != "$KUBE_VERSION" ]; then
  stale=true
fi
built=false
for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  if [ "$stale" = true ] || [ ! -x "bin/$cmd" ]; then
    if ! toolcache_get "$cmd" "$CACHE_KEY" "bin/$cmd"; then
      echo "kube-tools: building $cmd $KUBE_VERSION into bin/ (slow the first time)" >&2
      start=$(date +%s)
      (cd hack/kube-tools && CGO_ENABLED=0 go build -o "../../bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
      mv "bin/$cmd.tmp" "bin/$cmd"
      toolcache_put "$cmd" "$CACHE_KEY" "bin/$cmd"
      echo "kube-tools: built $cmd in $(( $(date +%s) - start ))s" >&2
    fi
    built=true
  fi
done
if [ "$built" = true ] || [ "$stale" = true ]; then
  echo "$KUBE_VERSION" > "$STAMP"
fi
echo "kube-tools: bin/kube-apiserver, bin/kube-scheduler, bin/kube-controller-manager, bin/kubectl at $KUBE_VERSION" >&2
