package report_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	_ "signet.dev/signet/reconciler/local" // the family the fixture's runs use
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// diag and nccl are the fixture's two checks (after testenv.Prelude);
// what they report depends on the run's name, so one profile gives
// every verdict.
const diag = `case "$SIGNET_RUN_ID" in
error-*) echo "dcgmi: cannot open /dev/nvidia3" >&2; exit 0 ;;
inconc-*) echo "no GPU visible to the check" >&2; SUMMARY="no GPU visible" result Inconclusive; exit 2 ;;
esac
printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass","summary":"8 GPUs healthy","measurements":{"gpus":8,"eccErrors":0}}' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" > "$SIGNET_RESULT_FILE"
echo "dcgmi diag -r 3: all tests PASS"
exit 0`

const nccl = `case "$SIGNET_RUN_ID" in
fail-*) printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Fail","summary":"busbw 180.2 GB/s below 400 GB/s","measurements":{"busbwGBps":180.2}}' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" > "$SIGNET_RESULT_FILE"
  echo "all_reduce_perf: busbw 180.2 GB/s"; echo "NVLink 3 degraded" >&2; exit 1 ;;
cancel-*) sleep 30 ;;
esac
printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass","summary":"busbw 412.5 GB/s","measurements":{"busbwGBps":412.5}}' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" > "$SIGNET_RESULT_FILE"
echo "all_reduce_perf: busbw 412.5 GB/s"
exit 0`

// branch is an evidence branch written by the real reconciler.
type branch struct {
	Repo  string // the spec repository, holding signet/evidence
	Keys  *testenv.Keys
	Host  string // the second node's name: this machine's hostname
	Trust *signing.TrustPolicy
	// SSHKey is the reconciler's key in OpenSSH form, for tampering.
	SSHKey string
}

// fixtureRun is one request of the fixture: its cluster, node, and
// whether it is canceled or released after it ends.
type fixtureRun struct {
	name, cluster, node string
	cancel, release     bool
	want                specs.Verdict
}

// buildBranch runs, with the real reconciler and the local backend, runs
// of profile gpu-burn (checks diag, nccl) and smoke in clusters alpha,
// beta and gamma on two node names (localhost and the hostname): Pass,
// Fail (then released), Inconclusive, Error and Canceled. Both names are
// this machine, so a cluster's run that retains it comes last.
func buildBranch(t testing.TB) *branch {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	b := &branch{Keys: testenv.NewKeys(t), Host: host}
	repo := testenv.NewRepo(t)
	b.Repo = repo.Dir
	b.Trust, err = signing.LoadTrustPolicy(b.Keys.TrustFile)
	require.NoError(t, err)
	// Name the keys' owners, as an operator's trust policy does.
	y, err := os.ReadFile(b.Keys.TrustFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(b.Keys.TrustFile, []byte(nameOwners(string(y), b.Keys)), 0o600))
	b.Trust, err = signing.LoadTrustPolicy(b.Keys.TrustFile)
	require.NoError(t, err)
	dir := t.TempDir()
	b.SSHKey = filepath.Join(dir, "reconciler.ssh")
	require.NoError(t, evidencetest.WriteKeyFiles(b.Keys.Reconciler, filepath.Join(dir, "reconciler.key"), b.SSHKey, filepath.Join(dir, "reconciler.pub")))

	repo.AddProfile("gpu-burn", "", testenv.Check{Name: "diag", Script: diag}, testenv.Check{Name: "nccl", Script: nccl, Deadline: 40})
	repo.AddProfile("smoke", "", testenv.Check{Name: "smoke", Script: "echo smoke ok; SUMMARY='node answers' result Pass; exit 0"})
	runs := []fixtureRun{
		{name: "pass-1", cluster: "alpha", node: "localhost", want: specs.VerdictPass},
		{name: "pass-2", cluster: "alpha", node: host, want: specs.VerdictPass},
		{name: "fail-1", cluster: "alpha", node: host, release: true, want: specs.VerdictFail},
		{name: "inconc-1", cluster: "alpha", node: host, want: specs.VerdictInconclusive},
		{name: "smoke-1", cluster: "beta", node: "localhost", want: specs.VerdictPass},
		{name: "error-1", cluster: "beta", node: "localhost", want: specs.VerdictError},
		{name: "cancel-1", cluster: "gamma", node: "localhost", cancel: true, want: specs.VerdictCanceled},
	}
	objects := []string{"CertificationProfile/gpu-burn", "CertificationProfile/smoke"}
	for _, r := range runs {
		prof := "gpu-burn"
		if strings.HasPrefix(r.name, "smoke") {
			prof = "smoke"
		}
		repo.AddRequestFor(r.name, prof, []string{r.node})
		objects = append(objects, "CertificationRequest/"+r.name)
	}
	repo.Commit("specs")
	repo.Approve(b.Keys.ApproverFile, "", objects...)
	state := filepath.Join(t.TempDir(), "state")
	work := testenv.WorldDir(t)
	for _, fr := range runs {
		st := b.run(t, repo, fr, state, work)
		require.Equal(t, fr.want, st.Verdict, "run %s", fr.name)
	}
	return b
}

// nameOwners adds owners to the trust policy's keys: the reconciler's
// key is "reconciler", the approvers "alice" and "bob".
func nameOwners(y string, k *testenv.Keys) string {
	for id, owner := range map[string]string{k.Reconciler.KeyID(): "reconciler", k.Approver.KeyID(): "alice", k.Approver2.KeyID(): "bob"} {
		y = strings.Replace(y, "id: "+id+"\n", "id: "+id+"\n    owner: "+owner+"\n", 1)
	}
	return y
}

func (b *branch) config(cluster, state, work string) *reconciler.Config {
	return &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     cluster,
		Spec:        reconciler.SourceConfig{URL: b.Repo, Branch: "main"},
		Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: b.Repo, Branch: evidencetest.Branch}},
		TrustPolicy: b.Keys.TrustFile, SigningKey: b.Keys.ReconcilerFile,
		StateDir: filepath.Join(state, cluster),
		Interval: 1,
		Backends: reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, Grace: 1, WorkRoot: filepath.Join(work, "work-"+cluster)}},
	}
}

// run runs one request to its receipt (and its cancel or release).
func (b *branch) run(t testing.TB, repo *testenv.Repo, fr fixtureRun, state, work string) *reconciler.RunStatus {
	t.Helper()
	ctx := t.Context()
	cfg := b.config(fr.cluster, state, work)
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, store, err := reconciler.Build(ctx, cfg, sec, log, nil, reconciler.Options{Only: fr.name, AcceptCurrentTip: true})
	require.NoError(t, err)
	defer store.Close()
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.Close(c)
	}()
	require.NoError(t, r.Recover(ctx))
	if fr.cancel {
		r.Start(ctx)
		require.Eventually(t, func() bool {
			for _, e := range repo.Effects() {
				if e == fr.name+"/nccl" {
					return true
				}
			}
			return false
		}, 60*time.Second, 50*time.Millisecond, "the nccl check of %s never started", fr.name)
		repo.AddRequestFor(fr.name, "gpu-burn", []string{fr.node}, "cancel: true")
		repo.Commit("cancel " + fr.name)
		repo.Approve(b.Keys.ApproverFile, "cancel", "CertificationRequest/"+fr.name)
	} else {
		res, err := r.ReconcileOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{fr.name}, res.Admitted)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := r.Wait(wctx, fr.name)
	require.NoError(t, err)
	if fr.release {
		repo.AddRequestFor(fr.name, "gpu-burn", []string{fr.node}, "release: true")
		repo.Commit("release " + fr.name)
		repo.Approve(b.Keys.Approver2File, "release", "CertificationRequest/"+fr.name)
		require.Eventually(t, func() bool {
			_, err := r.ReconcileOnce(ctx)
			require.NoError(t, err)
			out := gittest.Git(t, b.Repo, "ls-tree", "-r", "--name-only", evidencetest.Branch)
			return strings.Contains(out, "/"+fr.name+"/"+evidence.ReleaseFile)
		}, 60*time.Second, 200*time.Millisecond, "no release of %s", fr.name)
	}
	return st
}
