#!/usr/bin/env bash
# device-bundle.sh: what hack/device/concurrent-runs.sh needs on a machine
# without Go (the device machine of some sessions: 16 cores, no network),
# packed into .devcarry/ (ignored by git; carry it): the control plane as
# one binary (hack/kube-tools/kubeall), Debian's etcd, signet of BASE
# (default bed667e, the build before concurrent admission) and of the
# working tree, the reconciler test binary, git, and the MPI Operator's
# CRD. One xz archive with a 512 MiB dictionary (the two signet builds
# and the test binary share most of their bytes): about 56 MB, under the
# 64 MiB a device call carries with the working tree. Takes about ten
# minutes on two cores, most of it xz.
#   hack/device-bundle.sh && device run: bash hack/device/concurrent-runs.sh, carry .devcarry
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-bed667e}
GO=${GO:-go}
out=.devcarry
work=$(mktemp -d)
trap 'rm -rf "$work"; git worktree remove --force "$work-base" 2>/dev/null || true' EXIT
mkdir -p "$out"
grep -qxF "/$out/" .git/info/exclude 2>/dev/null || echo "/$out/" >>.git/info/exclude
KUBE_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' hack/kube-tools/go.mod)
minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
(cd hack/kube-tools && CGO_ENABLED=0 $GO build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" -o "$work/kubeall" ./kubeall)
cp "$(command -v etcd)" "$work/etcd"
git worktree add --detach "$work-base" "$BASE" >/dev/null
(cd "$work-base" && $GO build -ldflags='-s -w' -o "$work/signet-old" ./cmd/signet)
$GO build -ldflags='-s -w' -o "$work/signet-new" ./cmd/signet
$GO test -c -ldflags='-s -w' -o "$work/reconciler.test" ./reconciler
tar -C "$work" -cf - kubeall etcd signet-old signet-new reconciler.test | xz -T1 --lzma2=preset=9,dict=512MiB >"$out/bundle.tar.xz"
xz -9 -c "$(command -v git)" >"$out/git.xz"
cp "$($GO list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)/manifests/base/kubeflow.org_mpijobs.yaml" "$out/"
ls -l "$out"
