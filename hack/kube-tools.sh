#!/usr/bin/env bash
# Builds the Kubernetes control plane that internal/testing/kubetest starts into bin/:
# kube-apiserver, kube-scheduler and kube-controller-manager, and the stock
# kubectl that tests drive against it (deploy/: `kubectl auth can-i --list`),
# all from the separate tools module hack/kube-tools (pinned k8s.io/kubernetes
# version, staging modules replaced by their published versions). Installs
# etcd from Debian's etcd-server package when no etcd is on PATH.
#
# kube-apiserver is built with its version stamped from the pin (-ldflags
# -X k8s.io/component-base/version.gitVersion=…): a plain `go build` reports
# v0.0.0-master+$Format:%H$, which Kueue's version check refuses.
#
# A binary is rebuilt only when it is missing or when its build stamp
# (bin/.kube-version: the pinned version and each binary's build flags)
# changed, and then copied from the per-user tools cache
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

# kube-apiserver's version, stamped from the pin (see above).
KUBE_MINOR=$(echo "$KUBE_VERSION" | cut -d. -f2)
KUBE_MAJOR=$(echo "$KUBE_VERSION" | cut -d. -f1 | tr -d v)
APISERVER_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=$KUBE_MAJOR -X k8s.io/component-base/version.gitMinor=$KUBE_MINOR"
ldflags() {
  if [ "$1" = kube-apiserver ]; then printf '%s' "$APISERVER_LDFLAGS"; fi
}

. hack/lib/toolcache.sh
# cache_key CMD: covers the whole tools module (pin and every replaced
# staging module's version) and CMD's build flags.
cache_key() {
  echo "kube-$KUBE_VERSION-$( (cat hack/kube-tools/go.mod hack/kube-tools/go.sum; echo "$1 $(ldflags "$1")") | sha256sum | cut -c1-16)"
}

mkdir -p bin
# The stamp holds one line per binary: its name, the pin and a digest of its
# build flags; a binary whose line differs is rebuilt (or copied from the
# cache), the others are kept. A stamp of the older form (the pinned version
# alone) still covers the binaries built without flags.
STAMP=bin/.kube-version
stamp_line() {
  echo "$1 $KUBE_VERSION $(ldflags "$1" | sha256sum | cut -c1-16)"
}
current() {
  [ -x "bin/$1" ] || return 1
  grep -qxF "$(stamp_line "$1")" "$STAMP" 2>/dev/null && return 0
  [ -z "$(ldflags "$1")" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$KUBE_VERSION" ]
}
new_stamp=""
for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  line=$(stamp_line "$cmd")
  if ! current "$cmd"; then
    if [ -L "bin/$cmd" ]; then rm "bin/$cmd"; fi
    if ! toolcache_get "$cmd" "$(cache_key "$cmd")" "bin/$cmd"; then
      echo "kube-tools: building $cmd $KUBE_VERSION into bin/ (slow the first time)" >&2
      start=$(date +%s)
      (cd hack/kube-tools && CGO_ENABLED=0 go build -ldflags "$(ldflags "$cmd")" -o "../../bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
      mv "bin/$cmd.tmp" "bin/$cmd"
      toolcache_put "$cmd" "$(cache_key "$cmd")" "bin/$cmd"
      echo "kube-tools: built $cmd in $(( $(date +%s) - start ))s" >&2
    fi
  fi
  new_stamp+="$line"$'\n'
done
printf '%s' "$new_stamp" > "$STAMP"
echo "kube-tools: bin/kube-apiserver, bin/kube-scheduler, bin/kube-controller-manager, bin/kubectl at $KUBE_VERSION" >&2
