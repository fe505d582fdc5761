package reconciler_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/faultproxy"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/reconciler/local"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// The fault rig's bounds. remoteTimeout is the evidence store's and the
// spec source's Timeout; faultWindow how long a fault lasts, longer than
// remoteTimeout so that a wait inside it must end by its deadline.
const (
	remoteTimeout = 3 * time.Second
	faultWindow   = 5 * time.Second
	faultSlack    = 5 * time.Second
)

// faultRig is a reconciler whose spec repository and evidence branch are
// both reached through a fault proxy in front of a real Git HTTP server.
type faultRig struct {
	e       *env
	srv     *gittest.Server
	proxy   *faultproxy.Proxy
	specURL string // on the server, not through the proxy
	bareDir string // the server's repository
	comp    *faultproxy.Competitor
	r       *reconciler.Reconciler
	reg     *prometheus.Registry

	mu     sync.Mutex
	events map[string]time.Time // "<check> started|done" → first time seen
}

// gateScript waits until the test creates $SIDE/go, then passes.
const gateScript = `while [ ! -e "$SIDE/go" ]; do sleep 0.05; done
result Pass; exit 0`

func newFaultRig(t *testing.T) *faultRig {
	t.Helper()
	e := newEnv(t)
	e.repo.AddProfile("gated", "", testenv.Check{Name: "gate", Script: gateScript, Deadline: 120}, testenv.Check{Name: "after", Script: "result Pass; exit 0"})
	e.repo.AddRequest("r1", "gated")
	e.repo.Commit("gated")
	e.repo.Approve(e.keys.ApproverFile, "", "CertificationProfile/gated", "CertificationRequest/r1")

	g := &faultRig{e: e, srv: gittest.NewHTTPServer(t), events: map[string]time.Time{}}
	g.specURL, g.bareDir = g.srv.NewRepo("spec")
	gittest.Git(t, e.repo.Dir, "push", "-q", g.specURL, "main")
	g.proxy = faultproxy.New(t, g.srv.URL())
	g.comp = faultproxy.NewCompetitor(t, g.specURL, evidence.DefaultBranch)

	// Wired as Build does, with remoteTimeout instead of the daemon's
	// two minutes so that the test sees each deadline pass.
	cfg := e.config()
	cfg.Spec.URL = g.proxy.URL() + "/spec.git"
	key, err := signing.LoadPrivateKey(cfg.SigningKey, nil)
	require.NoError(t, err)
	signer, err := key.SSHSigner()
	require.NoError(t, err)
	src, err := reconciler.OpenGitSource(filepath.Join(cfg.StateDir, "spec.git"), cfg.Spec.URL, "main", reconciler.SourceAuth{})
	require.NoError(t, err)
	src.Timeout = remoteTimeout
	store, err := evidence.Open(t.Context(), evidence.StoreOptions{
		URL: cfg.Spec.URL, CommitSigner: signer, Author: "signet reconciler (test)", Email: "signet@test",
		StateDir: filepath.Join(cfg.StateDir, "evidence"), Timeout: remoteTimeout,
	})
	require.NoError(t, err)
	lb, err := local.NewBackend(reconciler.LocalConfig{Enabled: true, Grace: 1})
	require.NoError(t, err)
	lb.WorkRoot = localWorkRoot(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g.reg = prometheus.NewRegistry()
	g.r, err = reconciler.New(cfg, reconciler.Options{
		Logger: log, Store: store, Source: src, Key: key, Metrics: reconciler.NewMetrics(g.reg),
		Families: []*backend.Family{local.FamilyOf(lb)},
		Observer: g.observe,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		stop, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		_ = g.r.Close(stop)
		_ = store.Close()
	})
	require.NoError(t, g.r.Recover(t.Context()))
	g.r.Start(ctx)
	return g
}

func (g *faultRig) observe(ev reconciler.Event) {
	k := ev.Check
	switch {
	case ev.Started:
		k += " started"
	case ev.Done:
		k += " done"
	default:
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.events[k]; !ok {
		g.events[k] = time.Now()
	}
}

// when waits up to d for event k and returns when it happened.
func (g *faultRig) when(t *testing.T, k string, d time.Duration) time.Time {
	t.Helper()
	var at time.Time
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		at = g.events[k]
		return !at.IsZero()
	}, d, 10*time.Millisecond, "event %q", k)
	return at
}

// TestFaultReconcile runs a complete reconcile (local backend, a gated
// script) while the Git remote misbehaves right when the first check's
// evidence is to be written, heals it, and requires that the run finishes
// on its own, without a restart, with every document on the branch
// exactly once and each check run exactly once. It logs how long the
// reconciler took to write the held-up evidence after the remote healed:
// fault=<name> resume_after=<duration>.
func TestFaultReconcile(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, g *faultRig)
		fault   func(g *faultRig) faultproxy.Fault
		// mayLand: the held-up evidence may land while the fault lasts.
		mayLand bool
	}{
		{name: "refuse", fault: func(*faultRig) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Refuse} }},
		{name: "stall", fault: func(*faultRig) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Stall} }},
		{
			// Both remotes moved with a large file: fetching either needs
			// a pack, and the connection is reset in its middle.
			name: "reset-mid-pack",
			prepare: func(t *testing.T, g *faultRig) {
				big := make([]byte, 256<<10)
				_, err := rand.Read(big)
				require.NoError(t, err)
				require.NoError(t, g.comp.PushFile("big/blob", big))
				g.e.repo.WriteFile("notes/big", string(big))
				g.e.repo.Commit("a large unrelated file")
				gittest.Git(t, g.e.repo.Dir, "push", "-q", g.specURL, "main")
			},
			fault: func(*faultRig) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Reset, After: 32 << 10} },
		},
		{
			// Pushes land, their answers are lost.
			name:    "reset-push-answer",
			fault:   func(*faultRig) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Reset, After: 0} },
			mayLand: true,
		},
		{
			// Pushes are answered "200 OK" with an empty body and dropped.
			name:  "swallow-push",
			fault: func(*faultRig) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Swallow} },
		},
		{
			// Every push loses the compare-and-swap to a competing writer.
			name: "race",
			fault: func(g *faultRig) faultproxy.Fault {
				return faultproxy.Fault{Kind: faultproxy.Race, Race: g.comp.Push}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFaultRig(t)
			g.when(t, "gate started", 90*time.Second)
			if tt.prepare != nil {
				tt.prepare(t, g)
			}

			g.proxy.Set(tt.fault(g))
			require.NoError(t, os.WriteFile(filepath.Join(g.e.repo.Side, "go"), nil, 0o644))
			if tt.name == "stall" {
				// A pass against a remote that never answers ends by the
				// spec source's deadline, not never.
				start := time.Now()
				_, err := g.r.ReconcileOnce(context.Background())
				require.Error(t, err)
				assert.Less(t, time.Since(start), remoteTimeout+faultSlack, "ReconcileOnce against a stalled remote")
			}
			time.Sleep(faultWindow)
			if tt.name != "refuse" {
				assert.Positive(t, g.proxy.Faulted(), "the fault was never applied")
			}

			g.proxy.Heal()
			healed := time.Now()
			done := g.when(t, "gate done", 2*time.Minute)
			resume := done.Sub(healed)
			if resume < 0 {
				assert.True(t, tt.mayLand, "the evidence of check gate landed while the remote was %s", tt.name)
				resume = 0
			}
			t.Logf("fault=%s resume_after=%s", tt.name, resume.Round(time.Millisecond))

			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			st, err := g.r.Wait(ctx, "r1")
			require.NoError(t, err)
			assert.Equal(t, specs.VerdictPass, st.Verdict)
			if tt.name == "refuse" {
				// Refused for longer than the store's deadline: an
				// evidence append failed, and an alert can see it.
				assert.Positive(t, g.counter(t, "signet_evidence_push_failures_total"), "a failed evidence push was not counted")
			}
			// The spec source works again too: a full pass succeeds.
			_, err = g.r.ReconcileOnce(t.Context())
			require.NoError(t, err)

			assert.ElementsMatch(t, []string{"r1/gate", "r1/after"}, g.e.repo.Effects(), "each check runs exactly once")
			g.checkBranch(t)
		})
	}
}

// counter is the value of the unlabelled counter name in the rig's
// registry.
func (g *faultRig) counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	require.Failf(t, "no such metric", "%s", name)
	return 0
}

// checkBranch verifies the evidence branch on the server with stock git:
// fsck --strict clean, linear, append-only, every path added by exactly
// one commit, and every document of run r1 there.
func (g *faultRig) checkBranch(t *testing.T) {
	t.Helper()
	dir, branch := g.bareDir, evidence.DefaultBranch
	gittest.Git(t, dir, "fsck", "--strict", "--no-dangling")
	assert.Empty(t, gittest.Git(t, dir, "rev-list", "--merges", branch), "merge commits")
	assert.Empty(t, gittest.Git(t, dir, "log", "--diff-filter=MDRT", "--name-status", "--format=", branch), "a commit changed or deleted a file")
	files := strings.Split(gittest.Git(t, dir, "ls-tree", "-r", "--name-only", branch), "\n")
	added := strings.Fields(gittest.Git(t, dir, "log", "--diff-filter=A", "--name-only", "--format=", branch))
	slices.Sort(added)
	assert.Equal(t, len(files), len(added), "a path was added more than once")
	assert.ElementsMatch(t, files, slices.Compact(added))

	ev := testenv.NewEvidence(t, dir, branch, g.e.keys.Reconciler.Public())
	run := ev.RunDir(cluster, "r1")
	require.NotEmpty(t, run)
	want := []string{
		evidence.IndexPath(cluster, "r1"),
		path.Join(run, evidence.AdmissionFile),
		path.Join(run, "checks/00-gate.intent.json"), path.Join(run, "checks/00-gate.json"),
		path.Join(run, "checks/01-after.intent.json"), path.Join(run, "checks/01-after.json"),
		path.Join(run, evidence.EvidenceFile), path.Join(run, evidence.ReceiptFile),
		evidence.ChainPath(cluster, 1),
	}
	for _, w := range want {
		assert.Contains(t, files, w)
	}
	assert.Len(t, ev.Under(path.Join("chain", cluster)), 1, "one receipt, one chain link")
	for _, f := range files {
		inRun := strings.HasPrefix(f, run+"/")
		ok := inRun || f == want[0] || f == want[len(want)-1] || slices.Contains(g.comp.Files(), f)
		assert.True(t, ok, "unexpected file %s on the branch", f)
	}
}

// localWorkRoot is a work root for a local backend made by hand, under a
// directory every check user can search, as the family makes one.
func localWorkRoot(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testenv.WorldDir(t), "work")
	require.NoError(t, local.EnsureWorkRoot(dir, os.Geteuid() == 0))
	return dir
}
