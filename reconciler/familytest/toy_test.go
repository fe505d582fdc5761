package familytest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// The one registration: no other line of this test touches the
// reconciler's wiring, and no file of the reconciler names the toy.
func init() {
	reconciler.RegisterFamily("toy", func(context.Context, reconciler.FamilyEnv) (*backend.Family, error) {
		return &backend.Family{Name: "toy", Fleet: toy, Backends: map[specs.Backend]backend.Backend{specs.BackendPod: toy}}, nil
	})
}

// toy is a family whose nodes are names and whose checks pass without
// running anything: it serves the pod kind (spec validation knows no
// other kinds, and no other family is registered in this test binary)
// and records every call the reconciler makes of it.
var toy = &toyFamily{reserved: map[string]string{}}

type toyFamily struct {
	backend.Unreserved // Uncertify, SweepCertified

	mu       sync.Mutex
	calls    []string
	reserved map[string]string // node → run
}

var (
	_ backend.Fleet   = (*toyFamily)(nil)
	_ backend.Backend = (*toyFamily)(nil)
)

func (f *toyFamily) record(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *toyFamily) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *toyFamily) Select(_ context.Context, _ *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error) {
	return req.Spec.Nodes, nil
}

func (f *toyFamily) Snapshot(_ context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error) {
	return &evidence.NodeSnapshot{Cluster: cluster, Run: run, Name: node, UID: "uid-" + node}, nil
}

func (f *toyFamily) Reserve(_ context.Context, run string, nodes []backend.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range nodes {
		f.reserved[n.Name] = run
		f.calls = append(f.calls, "reserve "+run+" "+n.Name+" "+n.UID)
	}
	return nil
}

func (f *toyFamily) Release(_ context.Context, run string, n backend.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reserved[n.Name] != run {
		return backend.ErrNotOurs
	}
	delete(f.reserved, n.Name)
	f.calls = append(f.calls, "release "+run+" "+n.Name)
	return nil
}

func (f *toyFamily) Reservations(context.Context) ([]backend.Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []backend.Reservation
	for node, run := range f.reserved {
		out = append(out, backend.Reservation{Node: backend.Node{Name: node, UID: "uid-" + node}, Run: run})
	}
	return out, nil
}

func (f *toyFamily) Certify(_ context.Context, n backend.Node, _, run string, _ time.Time) error {
	f.record("certify %s %s", run, n.Name)
	return nil
}

func (f *toyFamily) Describe(c *backend.CheckRun) ([]string, specs.Digest, error) {
	rendered, err := json.Marshal(c.LauncherEnv())
	return []string{"toy:" + c.Run + "/" + c.Check.Name}, specs.DigestOf(rendered), err
}

func (f *toyFamily) Run(_ context.Context, c *backend.CheckRun) (*backend.CheckReport, error) {
	f.record("run %s %s", c.Run, c.Check.Name)
	result, err := json.Marshal(map[string]string{"run": c.Run, "check": c.Check.Name, "nonce": c.Nonce, "verdict": "Pass", "summary": "toy"})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	rep := &backend.CheckReport{StartedAt: now, EndedAt: now}
	for _, p := range c.Participants {
		rep.Participants = append(rep.Participants, backend.ParticipantReport{
			Node: p.Node, Identity: evidence.Identity{Node: p.Node, NodeUID: p.UID, Workload: "toy:" + p.Node},
			Termination: specs.Termination{Started: true, Exited: true}, Result: result,
		})
	}
	return rep, nil
}

func (f *toyFamily) Adopt(context.Context, *backend.CheckRun) (*backend.CheckReport, bool, error) {
	return nil, false, nil
}

func (f *toyFamily) Cleanup(_ context.Context, c *backend.CheckRun) error {
	f.record("cleanup %s %s", c.Run, c.Check.Name)
	return nil
}

// TestToyFamilyEndToEnd: an approved request of a profile served only by
// the toy family goes through admission, the toy's reservation of both
// nodes, its check, evidence, the toy's release and the receipt, on a real
// evidence branch that then audits clean.
func TestToyFamilyEndToEnd(t *testing.T) {
	const image = "images.invalid/cuda@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	keys, repo := testenv.NewKeys(t), testenv.NewRepo(t)
	repo.AddProfileFor("toy", 2, "", testenv.Check{Name: "burn", Script: "exit 1", Backend: "pod", Workload: fmt.Sprintf("{image: %q}", image)})
	repo.AddRequestFor("toy-1", "toy", []string{"toy-a", "toy-b"})
	repo.Commit("specs")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/toy", "CertificationRequest/toy-1")

	cfg := &reconciler.Config{
		TypeMeta: specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:  "toyland", Spec: reconciler.SourceConfig{URL: repo.Dir, Branch: "main"},
		TrustPolicy: keys.TrustFile, SigningKey: keys.ReconcilerFile, StateDir: filepath.Join(t.TempDir(), "state"),
		Ceiling: reconciler.Ceiling{Registries: []string{"images.invalid"}},
	}
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(t, err)
	r, store, err := reconciler.Build(t.Context(), cfg, sec, slog.New(slog.DiscardHandler), nil, reconciler.Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Close(ctx)
		_ = store.Close()
	})
	require.NoError(t, r.Recover(t.Context()))

	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"toy-1"}, res.Admitted, "status: %+v", r.Status().Objects)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := r.Wait(ctx, "toy-1")
	require.NoError(t, err)
	assert.Equal(t, specs.VerdictPass, st.Verdict)

	assert.Equal(t, []string{
		"reserve toy-1 toy-a uid-toy-a", "reserve toy-1 toy-b uid-toy-b",
		"run toy-1 burn", "cleanup toy-1 burn",
		"release toy-1 toy-a", "release toy-1 toy-b",
		"certify toy-1 toy-a", "certify toy-1 toy-b",
	}, toy.recorded(), "the toy fleet reserves before the check and releases after it")
	assert.Empty(t, toy.reserved, "every reservation is released")

	ev := testenv.NewEvidence(t, repo.Dir, evidence.DefaultBranch, keys.Reconciler.Public())
	var rc evidence.Receipt
	ev.Document(path.Join(ev.RunDir("toyland", "toy-1"), evidence.ReceiptFile), evidence.PredicateReceipt, &rc)
	assert.Equal(t, []string{"toy-a", "toy-b"}, rc.Released)
	policy, err := signing.LoadTrustPolicy(keys.TrustFile)
	require.NoError(t, err)
	report, err := audit.Branch(t.Context(), audit.Options{Repo: repo.Dir, Policy: policy})
	require.NoError(t, err)
	assert.True(t, report.Clean(), "audit findings: %v", report.Findings)
	assert.Len(t, report.Runs, 1)
}
