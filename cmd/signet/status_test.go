package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestStatus: signet status lists the runs with phase, verdict and
// receipt sequence, each node's latest verdict, and Kubernetes-style
// conditions per run in JSON.
func TestStatus(t *testing.T) {
	f := evidenceFixture(t)
	out, stderr, code := runSigningCLI(t, "status", "--repo", f.Repo, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Runs, 2)
	for i, r := range st.Runs {
		assert.Equal(t, f.Runs[i], r.Run)
		assert.Equal(t, evidence.PhaseDone, r.Phase)
		assert.Equal(t, specs.VerdictPass, r.Verdict)
		assert.Equal(t, int64(i+1), r.ReceiptSequence)
		require.Len(t, r.Conditions, 1)
		assert.Equal(t, meta.ReadyCondition, r.Conditions[0].Type)
		assert.Equal(t, metav1.ConditionTrue, r.Conditions[0].Status)
		assert.Equal(t, meta.SucceededReason, r.Conditions[0].Reason)
	}
	require.Len(t, st.Nodes, 1)
	assert.Equal(t, "run-b", st.Nodes[0].Run)

	out, _, code = runSigningCLI(t, "status", "--repo", f.Repo, "--cluster", evidencetest.Cluster)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "run-a")
	assert.Contains(t, out, "#2")

	_, _, code = runSigningCLI(t, "status")
	assert.Equal(t, 2, code)
}

// TestStatusConditions: conditions follow the phase a run reached.
func TestStatusConditions(t *testing.T) {
	now := mustTime(t, "2026-11-30T12:00:00Z")
	for _, tc := range []struct {
		name   string
		run    audit.RunStatus
		types  []string
		reason string
	}{
		{"passed", audit.RunStatus{Phase: evidence.PhaseDone, Verdict: specs.VerdictPass}, []string{meta.ReadyCondition}, meta.SucceededReason},
		{"failed", audit.RunStatus{Phase: evidence.PhaseDone, Verdict: specs.VerdictFail}, []string{meta.ReadyCondition, meta.StalledCondition}, meta.FailedReason},
		{"running", audit.RunStatus{Phase: evidence.PhaseChecking, Deadline: now.Add(1)}, []string{meta.ReadyCondition, meta.ReconcilingCondition}, meta.ProgressingReason},
		{"past deadline", audit.RunStatus{Phase: evidence.PhaseChecking, Deadline: now.Add(-audit.DefaultGrace - 1)}, []string{meta.ReadyCondition, meta.StalledCondition}, "DeadlineExceeded"},
		{"unreadable", audit.RunStatus{Phase: evidence.PhaseUnknown, Problem: "admission.json: bad"}, []string{meta.ReadyCondition, meta.StalledCondition}, meta.FailedReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := runConditions(tc.run, now)
			var types []string
			for _, c := range cs {
				types = append(types, c.Type)
			}
			assert.Equal(t, tc.types, types)
			assert.Equal(t, tc.reason, cs[0].Reason)
			if tc.run.Problem == "" && tc.name != "past deadline" {
				// signet status and the daemon's /status agree.
				want := reconciler.RunConditions(tc.run.Run, tc.run.Phase, tc.run.Verdict, now)
				assert.Equal(t, want, cs)
			}
		})
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v
}

// TestStatusFilters: --limit keeps the newest runs, --verdict, --profile,
// --node and --since narrow them, a bad --since is a usage error, and
// retained nodes are the non-Pass nodes of finished runs not released.
func TestStatusFilters(t *testing.T) {
	f := evidenceFixture(t)
	runs := func(args ...string) []string {
		t.Helper()
		out, stderr, code := runSigningCLI(t, append([]string{"status", "--repo", f.Repo, "-o", "json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		var ids []string
		for _, r := range st.Runs {
			ids = append(ids, r.Run)
		}
		return ids
	}
	assert.Equal(t, []string{"run-b"}, runs("--limit", "1"))
	assert.Empty(t, runs("--verdict", "Fail"))
	assert.Equal(t, []string{"run-a", "run-b"}, runs("--verdict", "pass", "--since", "24h"))
	assert.Empty(t, runs("--since", "2999-01-01T00:00:00Z"))
	assert.Empty(t, runs("--profile", "other"))
	assert.Empty(t, runs("--node", "no-such-node"))
	_, stderr, code := runSigningCLI(t, "status", "--repo", f.Repo, "--since", "yesterday")
	assert.Equal(t, 2, code, stderr)

	retained := retainedNodes([]audit.RunStatus{
		{Cluster: "c", Run: "failed", Phase: evidence.PhaseDone, Verdict: specs.VerdictFail, Nodes: []audit.NodeReport{{Node: "a", Verdict: specs.VerdictFail}, {Node: "b", Verdict: specs.VerdictPass}}},
		{Cluster: "c", Run: "released", Phase: evidence.PhaseDone, Released: true, Verdict: specs.VerdictError, Nodes: []audit.NodeReport{{Node: "c", Verdict: specs.VerdictError}}},
		{Cluster: "c", Run: "open", Phase: evidence.PhaseChecking, Nodes: []audit.NodeReport{{Node: "d"}}},
	})
	assert.Equal(t, []retainedNode{{Cluster: "c", Node: "a", Run: "failed", Verdict: specs.VerdictFail}}, retained)
}

// localReconciler builds a real reconciler of cluster "east" over repo
// (spec and evidence branch) with the local backend, its metrics on reg
// (nil: none), recovered; it is closed when the test ends.
func localReconciler(t *testing.T, repo *testenv.Repo, keys *testenv.Keys, reg prometheus.Registerer) (*reconciler.Reconciler, *reconciler.Secrets) {
	t.Helper()
	cfg := &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     "east",
		Spec:        reconciler.SourceConfig{URL: repo.Dir, Branch: "main"},
		Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: repo.Dir, Branch: evidencetest.Branch}},
		TrustPolicy: keys.TrustFile, SigningKey: keys.ReconcilerFile,
		StateDir: filepath.Join(t.TempDir(), "state"), Interval: 1,
		Backends: reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, Grace: 1, WorkRoot: filepath.Join(testenv.WorldDir(t), "work")}},
	}
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(t, err)
	ctx := t.Context()
	r, store, err := reconciler.Build(ctx, cfg, sec, slog.New(slog.NewTextHandler(io.Discard, nil)), reg, reconciler.Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.Close(c)
		_ = store.Close()
	})
	require.NoError(t, r.Recover(ctx))
	return r, sec
}

// TestStatusWaiting: with --reconciler, signet status lists the requests a
// real reconciler's /status (served by its own handler) shows not
// admitted: one waiting for nodes (its node held by the running run,
// named) and one waiting for approval (the missing approval named), in
// text and JSON; a request that runs is not waiting, and an unreachable
// daemon is exit 2.
func TestStatusWaiting(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("long", "", testenv.Check{Name: "wait", Script: "echo started; exec sleep 60", Deadline: 120})
	for _, name := range []string{"first", "queued", "unapproved"} {
		repo.AddRequestFor(name, "long", []string{"localhost"})
	}
	repo.Commit("specs")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/long", "CertificationRequest/first", "CertificationRequest/queued")
	r, sec := localReconciler(t, repo, keys, nil)
	ctx := t.Context()
	// "first" is admitted and runs; the pass that admits it looks at
	// "queued" after it (name order), whose node "first" now holds.
	res, err := r.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"first"}, res.Admitted)
	srv := httptest.NewServer(r.Listeners(nil, sec)[0].Handler)
	defer srv.Close()

	out, stderr, code := runSigningCLI(t, "status", "--repo", repo.Dir, "--reconciler", srv.URL, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Waiting, 2, out)
	queued, unapproved := st.Waiting[0], st.Waiting[1]
	assert.Equal(t, reconciler.WaitingRequest{Cluster: "east", Request: "queued", For: reconciler.WaitingForNodes, Reason: "NodesBusy", Message: queued.Message}, queued)
	assert.Contains(t, queued.Message, `is held by run "first"`)
	assert.Equal(t, reconciler.WaitingRequest{Cluster: "east", Request: "unapproved", For: reconciler.WaitingForApproval, Reason: "NotApproved", Message: unapproved.Message}, unapproved)
	assert.Contains(t, unapproved.Message, "no approval names CertificationRequest/unapproved")

	out, stderr, code = runSigningCLI(t, "status", "--repo", repo.Dir, "--reconciler", srv.URL)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^east +queued +nodes +NodesBusy +node "[^"]+" is held by run "first"`, out)
	assert.Regexp(t, `(?m)^east +unapproved +approval +NotApproved +.*no approval names CertificationRequest/unapproved`, out)

	_, stderr, code = runSigningCLI(t, "status", "--repo", repo.Dir, "--reconciler", "127.0.0.1:1")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--reconciler "127.0.0.1:1"`)
}
