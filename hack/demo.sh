#!/usr/bin/env bash
# make demo: signet's main job on the embedded example, from a fresh clone.
#
#  1. generate an approver key, the reconciler's key and a trust policy;
#  2. copy examples/spec-repo into a throwaway Git repository;
#  3. approve the local profile and request with `signet sign` (a signed commit);
#  4. run the local request with `signet run`: admission, checks as local
#     processes, signed evidence and a receipt on the signet/evidence branch;
#     then release its node and let the reconciler daemon fire the daily
#     standing certification once;
#  5. audit the evidence branch and check it with stock git;
#  6. write its HTML report (signet report) and print the path of its index.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SIGNET=${SIGNET:-$ROOT/bin/signet}
DEMO=${DEMO_DIR:-$ROOT/demo}
rm -rf "$DEMO"
mkdir -p "$DEMO"
cd "$DEMO"
export GIT_AUTHOR_NAME="signet demo" GIT_AUTHOR_EMAIL=demo@signet.invalid
export GIT_COMMITTER_NAME="signet demo" GIT_COMMITTER_EMAIL=demo@signet.invalid

step() { printf '\n== %s\n' "$*"; }

step "validate the example spec repository"
"$SIGNET" validate --repo "$ROOT/examples/spec-repo"

step "keys: an approver (certification owner) and the reconciler"
approver=$("$SIGNET" keygen --out approver | head -n1)
"$SIGNET" keygen --out reconciler --algorithm ed25519 -o json > reconciler.json
reconciler=$(sed -n 's/.*"keyID": "\([0-9a-f]*\)".*/\1/p' reconciler.json)
reconciler_ssh=$(sed -n 's/.*"sshPublicKey": "\([^"]*\)".*/\1/p' reconciler.json)
echo "approver key id:   $approver"
echo "reconciler key id: $reconciler"

step "trust policy (the operator's, never read from the spec repository)"
{
  echo "apiVersion: signet.dev/v1alpha1"
  echo "kind: TrustPolicy"
  echo "metadata:"
  echo "  name: demo"
  echo "spec:"
  echo "  keys:"
  for k in approver reconciler; do
    id=$([ $k = approver ] && echo "$approver" || echo "$reconciler")
    echo "  - id: $id"
    echo "    owner: $k"
    echo "    publicKey: |"
    sed 's/^/      /' "$k.pub"
  done
  echo "  approvers: [$approver]"
  echo "  evidenceSigners: [$reconciler]"
} > trust.yaml
cat trust.yaml

step "spec repository: a copy of examples/spec-repo in a fresh Git repository"
cp -r "$ROOT/examples/spec-repo" spec
git -C spec init -q -b main
git -C spec add -A
git -C spec commit -q -m "Add signet example specs"
git -C spec log --oneline

step "approve the local profile and request (signet sign), as a reviewed PR would"
"$SIGNET" sign --repo spec --key approver.key \
  --object CertificationProfile/local-smoke \
  --object CertificationRequest/local-smoke-localhost
git -C spec add -A
git -C spec commit -q -m "Approve local-smoke"
"$SIGNET" approvals --repo spec --trust trust.yaml --cluster demo || true

step "run the local request: admission, checks, evidence, receipt"
set +e
"$SIGNET" run --repo spec --request local-smoke-localhost --trust trust.yaml \
  --key reconciler.key --cluster demo --state-dir state
rc=$?
set -e
echo "signet run exit status: $rc (0 Pass, 10 Fail, 11 Error, 12 Inconclusive; signet help exit-codes)"
case $rc in 0|10|11|12) ;; *) echo "demo: signet run did not reach a verdict" >&2; exit 1 ;; esac

step "standing certification: the daily smoke test, approved once, fired by the reconciler daemon"
# The run above left this machine retained (not a Pass without GPUs): an
# approved release lifts it, then the daemon's first pass fires
# local-smoke-daily-1 (the node's latest run did not pass: due at once).
echo "  release: true" >> spec/requests/local-smoke-localhost.yaml
"$SIGNET" sign --repo spec --key approver.key --object CertificationRequest/local-smoke-localhost --action release 2>/dev/null
"$SIGNET" sign --repo spec --key approver.key --object StandingCertification/local-smoke-daily 2>/dev/null
git -C spec add -A
git -C spec commit -q -m "Release the smoke test's node; approve the daily smoke test"
port=$((20000 + RANDOM % 20000))
cat > reconciler.yaml <<EOF
apiVersion: signet.dev/v1alpha1
kind: ReconcilerConfig
cluster: demo
spec: {url: $DEMO/spec, branch: main}
trustPolicy: $DEMO/trust.yaml
signingKey: $DEMO/reconciler.key
stateDir: $DEMO/state
interval: 5s
listen: 127.0.0.1:$port
backends: {local: {enabled: true}}
EOF
cat reconciler.yaml
"$SIGNET" reconcile --config reconciler.yaml > daemon.log 2>&1 &
daemon=$!
fired=
for _ in $(seq 1 90); do
  if git -C spec ls-tree -r --name-only signet/evidence | grep '/local-smoke-daily-1/receipt.json$' >/dev/null; then fired=1; break; fi
  sleep 1
done
"$SIGNET" status --repo spec --reconciler "http://127.0.0.1:$port" | sed -n '/STANDING/,$p' || true
kill -TERM "$daemon"
wait "$daemon" || true
if [ -z "$fired" ]; then
  echo "demo: the daemon did not fire local-smoke-daily-1; its log:" >&2
  cat daemon.log >&2
  exit 1
fi
echo "fired and finished: local-smoke-daily-1 (firing.json, admission, checks, receipt)"

step "the evidence branch, as stock git sees it"
git -C spec log --oneline -n 20 signet/evidence
git -C spec ls-tree -r --name-only signet/evidence | sed -n 1,40p

step "stock git: fsck and the reconciler's commit signatures"
git -C spec fsck --strict --no-progress
printf 'reconciler namespaces="git" %s\n' "$reconciler_ssh" > allowed_signers
tip=$(git -C spec rev-parse signet/evidence)
git -C spec -c gpg.format=ssh -c gpg.ssh.allowedSignersFile="$DEMO/allowed_signers" verify-commit "$tip"
echo "git verify-commit $tip: OK"

if "$SIGNET" audit --help >/dev/null 2>&1; then
  step "audit the evidence branch"
  "$SIGNET" audit --repo spec --trust trust.yaml
fi
step "report: a static HTML site of the evidence branch, every verdict verified by the audit"
index=$("$SIGNET" report --repo spec --trust trust.yaml --out "$DEMO/report")
step "done: evidence in $DEMO/spec (branch signet/evidence)"
echo "report: $index"
