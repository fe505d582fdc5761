package reconciler_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	_ "signet.dev/signet/reconciler/kube" // the families Build enables from the config
	_ "signet.dev/signet/reconciler/local"
	"signet.dev/signet/specs"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(passProcessEnv); cfg != "" {
		os.Exit(passProcess(cfg))
	}
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

const cluster = "acceptance"

// env is one spec repository (which also holds the evidence branch), its
// keys and trust policy, and a reconciler state directory.
type env struct {
	t     *testing.T
	keys  *testenv.Keys
	repo  *testenv.Repo
	state string
	host  string
	work  string // the local backend's work root, searchable by the check user
	// now, when set, is the reconciler's clock (Options.Now).
	now func() time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	return &env{t: t, keys: testenv.NewKeys(t), repo: testenv.NewRepo(t), state: filepath.Join(t.TempDir(), "state"), host: host, work: filepath.Join(testenv.WorldDir(t), "work")}
}

// config is a reconciler config for the repository with the local backend
// enabled, a 1 s grace and a short poll interval.
func (e *env) config() *reconciler.Config {
	return &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     cluster,
		Spec:        reconciler.SourceConfig{URL: e.repo.Dir, Branch: "main"},
		TrustPolicy: e.keys.TrustFile,
		SigningKey:  e.keys.ReconcilerFile,
		StateDir:    e.state,
		Interval:    1,
		Backends:    reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, Grace: 1, WorkRoot: e.work}},
	}
}

// build wires a reconciler for cfg; it is closed when the test ends.
func (e *env) build(cfg *reconciler.Config) *reconciler.Reconciler {
	e.t.Helper()
	r, _ := e.buildStoppable(cfg)
	return r
}

// buildStoppable is build that also returns a function stopping the
// reconciler and releasing its state directory (as a process exit would),
// so that another reconciler can take over.
func (e *env) buildStoppable(cfg *reconciler.Config) (*reconciler.Reconciler, func()) {
	e.t.Helper()
	return e.buildStoppableWith(cfg, reconciler.Options{Now: e.now}, nil)
}

// buildStoppableWith is buildStoppable with options o and, when logTo is
// not nil, the reconciler's log from level Info written there too.
func (e *env) buildStoppableWith(cfg *reconciler.Config, o reconciler.Options, logTo io.Writer) (*reconciler.Reconciler, func()) {
	e.t.Helper()
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(e.t, err)
	level := slog.LevelWarn
	if os.Getenv("SIGNET_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	var w io.Writer = testWriter{e.t}
	if logTo != nil {
		w = io.MultiWriter(w, logTo)
		level = min(level, slog.LevelInfo)
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	r, store, err := reconciler.Build(e.t.Context(), cfg, sec, log, nil, o)
	require.NoError(e.t, err)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = r.Close(ctx)
			_ = store.Close()
		})
	}
	e.t.Cleanup(stop)
	require.NoError(e.t, r.Recover(e.t.Context()))
	return r, stop
}

// reconcileAndWait runs one pass and waits for every run it admitted.
func (e *env) reconcileAndWait(r *reconciler.Reconciler) map[string]*reconciler.RunStatus {
	e.t.Helper()
	res, err := r.ReconcileOnce(e.t.Context())
	require.NoError(e.t, err)
	out := map[string]*reconciler.RunStatus{}
	for _, id := range res.Admitted {
		out[id] = e.wait(r, id)
	}
	return out
}

func (e *env) wait(r *reconciler.Reconciler, id string) *reconciler.RunStatus {
	e.t.Helper()
	return e.waitFor(r, id, 90*time.Second)
}

func (e *env) waitFor(r *reconciler.Reconciler, id string, d time.Duration) *reconciler.RunStatus {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), d)
	defer cancel()
	st, err := r.Wait(ctx, id)
	require.NoError(e.t, err, "run %s", id)
	return st
}

func (e *env) evidence() *testenv.Evidence {
	return testenv.NewEvidence(e.t, e.repo.Dir, evidence.DefaultBranch, e.keys.Reconciler.Public())
}

// object returns the status of kind/name after the last pass.
func object(t *testing.T, r *reconciler.Reconciler, kind, name string) reconciler.ObjectStatus {
	t.Helper()
	for _, o := range r.Status().Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	require.Failf(t, "no status", "%s/%s is not in the status", kind, name)
	return reconciler.ObjectStatus{}
}

// readyReason is the reason of an object's Ready condition.
func readyReason(o reconciler.ObjectStatus) (reason, msg string) {
	for _, c := range o.Conditions {
		if c.Type == "Ready" {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

// runDocs are the documents of one run read back from the evidence branch.
type runDocs struct {
	dir      string
	checks   map[string]evidence.CheckEvidence
	intents  map[string]evidence.CheckIntent
	evidence evidence.RunEvidence
	receipt  evidence.Receipt
}

// readRun reads and verifies every document of run; it requires the
// admission, evidence and receipt to exist.
func (e *env) readRun(run string) *runDocs {
	e.t.Helper()
	ev := e.evidence()
	dir := ev.RunDir(cluster, run)
	require.NotEmpty(e.t, dir, "run %s is not on the evidence branch", run)
	d := readCheckDocs(ev, dir)
	var adm evidence.Admission
	ev.Document(path.Join(dir, evidence.AdmissionFile), evidence.PredicateAdmission, &adm)
	ev.Document(path.Join(dir, evidence.EvidenceFile), evidence.PredicateEvidence, &d.evidence)
	ev.Document(path.Join(dir, evidence.ReceiptFile), evidence.PredicateReceipt, &d.receipt)
	return d
}

// readCheckDocs reads and verifies the check intents and check evidence
// of the run directory dir.
func readCheckDocs(ev *testenv.Evidence, dir string) *runDocs {
	d := &runDocs{dir: dir, checks: map[string]evidence.CheckEvidence{}, intents: map[string]evidence.CheckIntent{}}
	for _, f := range ev.Under(path.Join(dir, "checks")) {
		if strings.HasSuffix(path.Base(f), ".intent.json") {
			var in evidence.CheckIntent
			ev.Document(f, evidence.PredicateCheckIntent, &in)
			d.intents[in.Check] = in
			continue
		}
		var ce evidence.CheckEvidence
		ev.Document(f, evidence.PredicateCheck, &ce)
		d.checks[ce.Check] = ce
	}
	return d
}

// audit runs `signet audit` on the evidence branch and requires it clean.
func (e *env) audit() {
	e.t.Helper()
	out, err := exec.CommandContext(e.t.Context(), testenv.Signet(e.t), "audit", "--repo", e.repo.Dir, "--trust", e.keys.TrustFile).CombinedOutput()
	assert.NoError(e.t, err, "signet audit:\n%s", out)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
