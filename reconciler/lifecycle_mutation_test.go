package reconciler

// Tests written for `make mutations` (hack/mutations.yaml): each asserts
// exactly the outcome one lifecycle rule forbids, on the real evidence
// store (a bare Git repository) with a fake backend that records what the
// reconciler asked of it.

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// fakeBackend is a Backend of function fields; nil fields do the obvious.
type fakeBackend struct {
	run     func(ctx context.Context, c *CheckRun) (*CheckReport, error)
	adopt   func(ctx context.Context, c *CheckRun) (*CheckReport, bool, error)
	cleanup func(ctx context.Context, c *CheckRun) error
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Describe(c *CheckRun) ([]string, specs.Digest, error) {
	return []string{c.Run + "-" + c.Check.Name}, specs.DigestOf([]byte(c.Check.Name)), nil
}

func (f *fakeBackend) Run(ctx context.Context, c *CheckRun) (*CheckReport, error) {
	return f.run(ctx, c)
}

func (f *fakeBackend) Adopt(ctx context.Context, c *CheckRun) (*CheckReport, bool, error) {
	if f.adopt == nil {
		return nil, false, nil
	}
	return f.adopt(ctx, c)
}

func (f *fakeBackend) Cleanup(ctx context.Context, c *CheckRun) error {
	if f.cleanup == nil {
		return nil
	}
	return f.cleanup(ctx, c)
}

type fsSource struct{ fsys fs.FS }

func (s fsSource) Revision(context.Context) (string, error)        { return "rev", nil }
func (s fsSource) Checkout(context.Context, string) (fs.FS, error) { return s.fsys, nil }

// verdicts maps "check/node" to what the fake backend reports (Pass when
// absent).
func reportingBackend(verdicts map[string]specs.Verdict) func(ctx context.Context, c *CheckRun) (*CheckReport, error) {
	return func(ctx context.Context, c *CheckRun) (*CheckReport, error) {
		rep := &CheckReport{StartedAt: time.Now(), EndedAt: time.Now()}
		for _, p := range c.Participants {
			v, ok := verdicts[c.Check.Name+"/"+p.Node]
			if !ok {
				v = specs.VerdictPass
			}
			code := map[specs.Verdict]int{specs.VerdictPass: 0, specs.VerdictFail: 1, specs.VerdictInconclusive: 2}[v]
			res, _ := json.Marshal(specs.Result{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce, Verdict: v, Summary: "fake"})
			rep.Participants = append(rep.Participants, ParticipantReport{
				Node:        p.Node,
				Identity:    evidence.Identity{Workload: "w-" + p.Node, Node: p.Node, NodeUID: p.UID},
				Termination: specs.Termination{Started: true, Exited: true, ExitCode: code},
				Result:      res,
			})
		}
		return rep, nil
	}
}

type harness struct {
	store *evidence.Store
	key   *signing.PrivateKey
	adm   evidence.Admission
	dir   string
	src   fsSource
}

// newHarness opens an evidence store on a fresh bare repository and builds
// the admission of run r1 over nodes n1 and n2 with the given checks.
func newHarness(t *testing.T, onFailure specs.OnFailure, checks ...string) *harness {
	t.Helper()
	remote := filepath.Join(t.TempDir(), "evidence.git")
	gittest.InitBare(t, remote)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	store, err := evidence.Open(t.Context(), evidence.StoreOptions{
		URL: remote, CommitSigner: signer, Author: "signet", Email: "signet@example.invalid",
		StateDir: t.TempDir(), Timeout: time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	key, err := signing.GenerateKey(signing.AlgorithmEd25519)
	require.NoError(t, err)

	script := []byte("#!/bin/sh\nexit 0\n")
	mapfs := fstest.MapFS{}
	prof := specs.CertificationProfile{Spec: specs.ProfileSpec{OnFailure: onFailure}}
	var files []evidence.FileRef
	for _, name := range checks {
		mapfs["bundle/"+name+".sh"] = &fstest.MapFile{Data: script, Mode: 0o755}
		files = append(files, evidence.FileRef{Path: name + ".sh", Digest: specs.DigestOf(script)})
		prof.Spec.Checks = append(prof.Spec.Checks, specs.Check{Name: name, Script: name + ".sh", Backend: specs.BackendLocal, Deadline: 60})
	}
	adm := evidence.Admission{
		Cluster: "c1", Run: "r1", AdmittedAt: time.Now(), SpecCommit: "rev",
		ProfileObject: prof,
		Bundle:        evidence.BundleRecord{Path: "bundle", Files: files},
	}
	// The node snapshots are on the branch, as admission leaves them: the
	// lifecycle re-reads each node's identity against its snapshot when a
	// check ends (issue 21, finding 7).
	var snaps []evidence.File
	for i, n := range []string{"n1", "n2"} {
		b, err := json.Marshal(evidence.NodeSnapshot{Cluster: "c1", Run: "r1", Name: n, UID: "uid-" + n})
		require.NoError(t, err)
		path := "nodes/" + n + ".json"
		snaps = append(snaps, evidence.File{Path: path, Data: b})
		adm.Participants = append(adm.Participants, evidence.Participant{
			Index: i, Node: n, UID: "uid-" + n,
			Snapshot: evidence.FileRef{Path: path, Digest: specs.DigestOf(b)},
		})
	}
	_, err = store.Append(t.Context(), "node snapshots", snaps)
	require.NoError(t, err)
	return &harness{store: store, key: key, adm: adm, dir: evidence.RunDir("c1", "r1", adm.AdmittedAt), src: fsSource{mapfs}}
}

// reconciler is a fresh Reconciler on h's store, as after a restart.
func (h *harness) reconciler(t *testing.T, be Backend) *Reconciler {
	t.Helper()
	r, err := New(&Config{Cluster: "c1"}, Options{
		Store: h.store, Key: h.key, Source: h.src,
		Families: []*backend.Family{{Name: "harness", Fleet: harnessFleet{}, Backends: map[specs.Backend]Backend{specs.BackendLocal: be}}},
	})
	require.NoError(t, err)
	return r
}

// harnessFleet is the Fleet of the harness's admission, already written:
// it is never asked to select, reserves nothing, and snapshots a node as
// the admission recorded it (no node changes under the harness).
type harnessFleet struct{ backend.Unreserved }

func (harnessFleet) Select(context.Context, *specs.CertificationProfile, *specs.CertificationRequest) ([]string, error) {
	panic("harness: admission is already written")
}

func (harnessFleet) Snapshot(_ context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error) {
	return &evidence.NodeSnapshot{Cluster: cluster, Run: run, Name: node, UID: "uid-" + node}, nil
}

var _ backend.Fleet = harnessFleet{}

func (h *harness) runState() *runState {
	return newRunState(h.dir, h.adm, evidence.FileRef{Path: h.dir + "/admission.json", Digest: specs.DigestOf([]byte("adm"))})
}

// TestCheckEvidenceDurableBeforeCleanup: the backend's objects are cleaned
// up only once the check evidence is on the evidence branch (DESIGN §5.3).
func TestCheckEvidenceDurableBeforeCleanup(t *testing.T) {
	h := newHarness(t, specs.OnFailureContinue, "a", "b")
	var mu sync.Mutex
	var early []string
	var cleaned int
	be := &fakeBackend{run: reportingBackend(nil)}
	be.cleanup = func(ctx context.Context, c *CheckRun) error {
		ok, err := h.store.Exists(ctx, evidence.CheckPath(h.dir, c.Index, c.Check.Name))
		mu.Lock()
		defer mu.Unlock()
		cleaned++
		if err != nil || !ok {
			early = append(early, c.Check.Name)
		}
		return nil
	}
	r := h.reconciler(t, be)
	require.NoError(t, driveWithin(t, r, h.runState(), time.Minute))
	assert.Equal(t, 2, cleaned, "every check's backend is cleaned up")
	assert.Empty(t, early, "backend cleaned up before its check evidence was durable")
}

// TestIntentWithoutBackendIsNotRunAgain: after a restart, an intent with no
// backend to adopt is recorded as Error (interrupted); the backend is never
// created a second time for the same (run, check) (DESIGN §5).
func TestIntentWithoutBackendIsNotRunAgain(t *testing.T) {
	h := newHarness(t, specs.OnFailureContinue, "a")
	ck := h.adm.ProfileObject.Spec.Checks[0]

	// First life: the intent is written, the backend starts, and the
	// reconciler stops before any evidence.
	ctx, cancel := context.WithCancel(t.Context())
	first := &fakeBackend{run: func(context.Context, *CheckRun) (*CheckReport, error) {
		cancel()
		return nil, errors.New("reconciler stopped")
	}}
	_, err := h.reconciler(t, first).runCheck(ctx, h.runState(), 0, ck, false)
	require.ErrorIs(t, err, context.Canceled)
	ok, err := h.store.Exists(t.Context(), evidence.CheckIntentPath(h.dir, 0, ck.Name))
	require.NoError(t, err)
	require.True(t, ok, "the intent is durable")

	// Second life: nothing to adopt.
	var created int
	second := &fakeBackend{
		run: func(ctx context.Context, c *CheckRun) (*CheckReport, error) {
			created++
			return reportingBackend(nil)(ctx, c)
		},
		adopt: func(context.Context, *CheckRun) (*CheckReport, bool, error) { return nil, false, nil },
	}
	sum, err := h.reconciler(t, second).runCheck(t.Context(), h.runState(), 0, ck, false)
	require.NoError(t, err)
	assert.Zero(t, created, "a backend was created again for a (run, check) whose intent was already recorded")
	assert.Equal(t, specs.VerdictError, sum.Verdict)
}

// TestNodesOfNonPassingRunAreRetained runs a profile with onFailure stop
// where the first check fails on n2 only, so the second check is skipped:
// n1 was not covered by every check, so it must not pass, and no node whose
// verdict is not Pass is released (DESIGN §4, §5.5).
func TestNodesOfNonPassingRunAreRetained(t *testing.T) {
	h := newHarness(t, specs.OnFailureStop, "a", "b")
	be := &fakeBackend{run: reportingBackend(map[string]specs.Verdict{"a/n2": specs.VerdictFail})}
	r := h.reconciler(t, be)
	rs := h.runState()
	require.NoError(t, r.holds.reserve(rs.id, []string{"n1", "n2"}))
	require.NoError(t, driveWithin(t, r, rs, time.Minute))

	assert.Equal(t, specs.VerdictFail, rs.verdict)
	nodes := map[string]specs.Verdict{}
	for _, n := range rs.nodes {
		nodes[n.Node] = n.Verdict
	}
	assert.NotEqual(t, specs.VerdictPass, nodes["n1"], "node n1 passed though check b, skipped, never covered it")
	assert.Equal(t, specs.VerdictFail, nodes["n2"])
	held := r.holds.snapshot()
	for _, n := range []string{"n1", "n2"} {
		assert.Equal(t, "r1", held[n], "node %s released after a run verdict of %s", n, rs.verdict)
	}
	assert.Equal(t, []string{"n1", "n2"}, r.holds.retainedBy("r1"))
}

// driveWithin runs the step list once, failing the test instead of hanging
// when it does not return within d.
func driveWithin(t *testing.T, r *Reconciler, rs *runState, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.driveOnce(t.Context(), rs) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("the run's steps did not return within %v: a deadlock?", d)
		return nil
	}
}

// TestPassingNodesAreReleased is the counterpart: a node whose verdict is
// Pass is released, the others retained.
func TestPassingNodesAreReleased(t *testing.T) {
	h := newHarness(t, specs.OnFailureContinue, "a")
	be := &fakeBackend{run: reportingBackend(map[string]specs.Verdict{"a/n2": specs.VerdictFail})}
	r := h.reconciler(t, be)
	rs := h.runState()
	require.NoError(t, r.holds.reserve(rs.id, []string{"n1", "n2"}))
	require.NoError(t, driveWithin(t, r, rs, time.Minute))
	held := r.holds.snapshot()
	assert.NotContains(t, held, "n1", "node n1 passed every check and is released")
	assert.Equal(t, "r1", held["n2"], "node n2 released after a Fail verdict")
}

// TestHoldsNeverShareANode: a node held by one run is refused to another,
// and a refused reservation takes none of the group (DESIGN §5.2).
func TestHoldsNeverShareANode(t *testing.T) {
	h := newHolds()
	require.NoError(t, h.reserve("r1", []string{"n1", "n2"}))
	err := h.reserve("r2", []string{"n3", "n2"})
	require.Error(t, err, "node n2 reserved by two runs")
	assert.ErrorContains(t, err, `node "n2" is held by run "r1"`)
	assert.Equal(t, map[string]string{"n1": "r1", "n2": "r1"}, h.snapshot(), "a refused reservation took part of the group")

	h.release("r2", []string{"n1", "n2"})
	assert.Equal(t, map[string]string{"n1": "r1", "n2": "r1"}, h.snapshot(), "run r2 released nodes held by run r1")
	h.retain("r1", []string{"n2"}, "CertificationRequest/r1")
	h.release("r1", []string{"n1"})
	require.Error(t, h.reserve("r2", []string{"n2"}), "a retained node was given to another run")
	assert.Equal(t, []string{"n2"}, h.retainedBy("r1"))
}

// TestIntentDurableBeforeBackend: the backend is created only once the
// check's intent is on the evidence branch (DESIGN §5.3), so that a restart
// always knows what may exist.
func TestIntentDurableBeforeBackend(t *testing.T) {
	h := newHarness(t, specs.OnFailureContinue, "a")
	var missing []string
	be := &fakeBackend{}
	be.run = func(ctx context.Context, c *CheckRun) (*CheckReport, error) {
		ok, err := h.store.Exists(ctx, evidence.CheckIntentPath(h.dir, c.Index, c.Check.Name))
		if err != nil || !ok {
			missing = append(missing, c.Check.Name)
		}
		return reportingBackend(nil)(ctx, c)
	}
	_, err := h.reconciler(t, be).runCheck(t.Context(), h.runState(), 0, h.adm.ProfileObject.Spec.Checks[0], false)
	require.NoError(t, err)
	assert.Empty(t, missing, "backend created before the check's intent was durable")
}

// TestScriptNotMatchingAdmissionIsNotRun: a script whose bytes at the
// admitted spec commit do not hash to the admitted digest is never handed to
// a backend.
func TestScriptNotMatchingAdmissionIsNotRun(t *testing.T) {
	h := newHarness(t, specs.OnFailureContinue, "a")
	h.src.fsys.(fstest.MapFS)["bundle/a.sh"] = &fstest.MapFile{Data: []byte("#!/bin/sh\nrm -rf /\n"), Mode: 0o755}
	var created int
	be := &fakeBackend{run: func(ctx context.Context, c *CheckRun) (*CheckReport, error) {
		created++
		return reportingBackend(nil)(ctx, c)
	}}
	_, err := h.reconciler(t, be).runCheck(t.Context(), h.runState(), 0, h.adm.ProfileObject.Spec.Checks[0], false)
	assert.ErrorContains(t, err, "does not match the admitted")
	assert.Zero(t, created, "a script that does not match its admitted digest was run")
}

// TestEvidenceSignedByAnotherKeyIsNotTrusted: check evidence on the branch
// counts only when this reconciler's key signed it; a planted Pass signed by
// another key is refused, not taken as the check's verdict.
func TestEvidenceSignedByAnotherKeyIsNotTrusted(t *testing.T) {
	h := newHarness(t, specs.OnFailureContinue, "a")
	ck := h.adm.ProfileObject.Spec.Checks[0]
	other, err := signing.GenerateKey(signing.AlgorithmEd25519)
	require.NoError(t, err)
	st, err := signing.NewStatement(evidence.PredicateCheck, []signing.Subject{signing.SubjectFor("nodes/n1.json", specs.DigestOf([]byte("n1")))},
		evidence.CheckEvidence{Run: "r1", Check: ck.Name, Verdict: specs.VerdictPass, Covered: true})
	require.NoError(t, err)
	planted, err := signing.SignStatement(st, other)
	require.NoError(t, err)
	_, err = h.store.Append(t.Context(), "planted", []evidence.File{{Path: evidence.CheckPath(h.dir, 0, ck.Name), Data: planted}})
	require.NoError(t, err)

	be := &fakeBackend{run: reportingBackend(nil)}
	sum, err := h.reconciler(t, be).runCheck(t.Context(), h.runState(), 0, ck, false)
	assert.NotEqual(t, specs.VerdictPass, sum.Verdict, "check evidence signed by another key was taken as the check's verdict")
	assert.ErrorIs(t, err, signing.ErrVerification)
	assert.ErrorContains(t, err, "which is not this reconciler's key")
}
