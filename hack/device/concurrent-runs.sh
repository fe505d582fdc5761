#!/bin/bash
# concurrent-runs.sh runs issue 19's BenchmarkConcurrentRuns100x8 side by
# side (signet of BASE, then of the working tree; hack/device-bundle.sh)
# on a machine without Go, from the repository root there: the control
# plane, etcd, both signet builds and the reconciler test binary come from
# .devcarry/bundle.tar.xz, and a stand-in `go` answers the two questions
# the harness asks of it (where the MPI Operator's CRD is, and `build
# ./cmd/signet`: the carried binary). The test binary finds bin/ and the
# sources where they were when it was built (/work/main): a link there.
# RUNS (default 100), LIMIT (seconds, default 540), QPS (this build's
# kubernetes.apiQPS), CONCURRENCY (its admission.concurrency). Results to
# $OUT: bench.txt and both daemons' logs (also when the time ran out).
# Session 27 on 16 cores: 100 runs took 202 s (bed667e) and 112 s.
set -u
ROOT=$PWD
DEV=${DEV:-/tmp/dev}
OUT=${OUT:-/tmp/devout}
mkdir -p "$DEV" "$OUT/logs"
t0=$(date +%s)
if [ ! -x "$DEV/reconciler.test" ]; then
  xz -dc .devcarry/bundle.tar.xz | tar -xf - -C "$DEV" || { echo "unpack failed"; exit 1; }
fi
echo "unpacked in $(( $(date +%s) - t0 ))s"
if [ "$ROOT" != /work/main ]; then
  if [ -e /work/main ] && [ ! -L /work/main ]; then echo "/work/main exists and is not a link"; exit 1; fi
  mkdir -p /work && ln -sfn "$ROOT" /work/main
fi
mkdir -p /work/main/bin
for n in kube-apiserver kube-controller-manager kube-scheduler; do ln -sfn "$DEV/kubeall" "/work/main/bin/$n"; done
ln -sfn "$DEV/etcd" /work/main/bin/etcd
if ! command -v git >/dev/null 2>&1; then
  mkdir -p "$DEV/git" && xz -dc .devcarry/git.xz >"$DEV/git/git" && chmod +x "$DEV/git/git"
  for n in git-upload-pack git-receive-pack git-upload-archive; do ln -sf git "$DEV/git/$n"; done
  export PATH="$DEV/git:$PATH" GIT_EXEC_PATH="$DEV/git"
fi
mpi=$(awk '$1 == "github.com/kubeflow/mpi-operator" { print $2 }' go.mod)
mkdir -p "$DEV/gobin" "$DEV/mpi/manifests/base"
cp .devcarry/kubeflow.org_mpijobs.yaml "$DEV/mpi/manifests/base/"
cat >"$DEV/gobin/go" <<EOF
#!/bin/sh
case "\$1" in
list) echo "$mpi $DEV/mpi" ;;
build) while [ \$# -gt 0 ]; do if [ "\$1" = -o ]; then cp "$DEV/signet-new" "\$2"; exit \$?; fi; shift; done; exit 1 ;;
*) echo "stand-in go: \$*" >&2; exit 1 ;;
esac
EOF
chmod +x "$DEV/gobin/go"
export PATH="$DEV/gobin:$PATH"
echo "cores $(nproc); $(free -g | awk 'NR==2{print $2" GiB"}'); $(git --version)"
cd /work/main/reconciler
SIGNET_BENCH_RUNS=${RUNS:-100} SIGNET_BENCH_KUBE_QPS=${QPS:-} SIGNET_BENCH_CONCURRENCY=${CONCURRENCY:-} \
  SIGNET_BENCH_KEEP_LOGS="$OUT/logs" SIGNET_BENCH_BASELINE="$DEV/signet-old" \
  timeout -k 5 "${LIMIT:-540}" "$DEV/reconciler.test" -test.run '^$' -test.bench '^BenchmarkConcurrentRuns100x8$' \
  -test.benchtime 1x -test.timeout "${LIMIT:-540}s" -test.v 2>&1 | tee "$OUT/bench.txt"
rc=${PIPESTATUS[0]}
echo "rc $rc; total $(( $(date +%s) - t0 ))s"
if [ "$rc" != 0 ]; then
  # Killed: the benchmark kept no logs; the daemons' are still in its
  # temporary directories.
  for f in $(ls -t /tmp/BenchmarkConcurrentRuns100x8*/*/daemon.log 2>/dev/null | head -4); do
    gzip -9 -c "$f" >"$OUT/logs/$(echo "$f" | md5sum | cut -c1-8).daemon.log.gz"
  done
fi
(cd "$OUT/logs" && for f in *.log; do [ -f "$f" ] && gzip -9 "$f"; done; ls -l)
