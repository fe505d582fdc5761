package reconciler_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// passingRequest adds, commits and approves a one-check request that
// passes.
func (e *env) passingRequest(name string) {
	e.repo.AddProfile(name, "", testenv.Check{Name: "ok", Script: "result Pass; exit 0"})
	e.repo.AddRequest(name, name)
	e.repo.Commit(name)
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+name, requestRef+name)
}

// evidenceTip is the evidence branch's tip in the spec repository.
func (e *env) evidenceTip(rev string) string {
	return gittest.Git(e.t, e.repo.Dir, "rev-parse", evidence.DefaultBranch+rev)
}

// tryBuild is reconciler.Build with a logger into log; a store it opens
// is closed when the test ends.
func (e *env) tryBuild(cfg *reconciler.Config, o reconciler.Options, log *bytes.Buffer) (*reconciler.Reconciler, error) {
	e.t.Helper()
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(e.t, err)
	r, store, err := reconciler.Build(e.t.Context(), cfg, sec, slog.New(slog.NewTextHandler(log, nil)), nil, o)
	if err == nil {
		e.t.Cleanup(func() { _ = r.Close(e.t.Context()); _ = store.Close() })
	}
	return r, err
}

// TestFinding6RestartKeepsTipInConfigMap: the shipped deployment keeps
// StateDir on an emptyDir. A reconciler restarted with a fresh StateDir
// used to trust whatever tip it found, so a force-pushed, rolled-back
// evidence branch was accepted. With the tip kept in a ConfigMap on the
// (real) API server, written by the reconciler's identity with get and
// update of that one object only, the restarted reconciler refuses the
// rolled-back branch and writes nothing.
func TestFinding6RestartKeepsTipInConfigMap(t *testing.T) {
	k := kubetest.Start(t)
	ctx := t.Context()
	const ns, name = "signet-system", "signet-evidence-tip"
	k.OwnConfigMap(t, ns, name, "signet-reconciler")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, k.Kubeconfig("signet-reconciler"), 0o600))
	kept := func() string {
		cm, err := k.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return cm.Data["tip"]
	}

	e := newEnv(t)
	e.passingRequest("first")
	cfg := e.config()
	cfg.Kubernetes.Kubeconfig = kubeconfig
	cfg.Evidence.TipConfigMap = &reconciler.ObjectRef{Namespace: ns, Name: name}
	r, stop := e.buildStoppable(cfg)
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r)["first"].Verdict)
	stop()
	tip := e.evidenceTip("")
	require.Equal(t, tip, kept(), "the reconciler keeps its tip in the ConfigMap")

	// The pod restarts (its emptyDir is gone) and someone has reset the
	// branch to an older commit meanwhile.
	rolled := e.evidenceTip("~2")
	gittest.Git(t, e.repo.Dir, "update-ref", "refs/heads/"+evidence.DefaultBranch, rolled)
	e.passingRequest("second")
	cfg.StateDir = filepath.Join(t.TempDir(), "fresh")
	var log bytes.Buffer
	_, err := e.tryBuild(cfg, reconciler.Options{AcceptCurrentTip: true}, &log)
	require.ErrorIs(t, err, evidence.ErrRolledBack, "the tip kept in the ConfigMap outlives StateDir; accepting a tip never overrides it")
	assert.Equal(t, rolled, e.evidenceTip(""), "nothing written")
	assert.Equal(t, tip, kept(), "the kept tip is not moved back")
}

// TestFinding6UnanchoredRefusesUntilAccepted: with no remembered tip
// (a fresh StateDir, no tip ConfigMap) and none pinned, a reconciler
// refuses an existing evidence branch and says what to do; started once
// with --accept-current-tip (Options.AcceptCurrentTip) it logs the tip it
// trusts and goes on; a pinned tip it descends from is enough too.
func TestFinding6UnanchoredRefusesUntilAccepted(t *testing.T) {
	e := newEnv(t)
	e.passingRequest("first")
	r, stop := e.buildStoppable(e.config())
	require.Equal(t, specs.VerdictPass, e.reconcileAndWait(r)["first"].Verdict)
	stop()
	tip := e.evidenceTip("")

	e.passingRequest("second")
	cfg := e.config()
	cfg.StateDir = filepath.Join(t.TempDir(), "fresh")
	var log bytes.Buffer
	_, err := e.tryBuild(cfg, reconciler.Options{}, &log)
	require.ErrorIs(t, err, evidence.ErrUnanchored)
	for _, hint := range []string{"--accept-current-tip", "evidence.pinnedTip", "signet audit --repo " + e.repo.Dir, tip} {
		assert.ErrorContains(t, err, hint)
	}
	assert.Equal(t, tip, e.evidenceTip(""), "nothing written")

	pinned := e.config()
	pinned.StateDir = filepath.Join(t.TempDir(), "pinned")
	pinned.Evidence.PinnedTip = e.evidenceTip("~1")
	_, err = e.tryBuild(pinned, reconciler.Options{}, &log)
	require.NoError(t, err, "a pinned tip the branch descends from anchors it")

	r, err = e.tryBuild(cfg, reconciler.Options{AcceptCurrentTip: true}, &log)
	require.NoError(t, err)
	assert.Contains(t, log.String(), "accepting the branch's current tip")
	assert.Contains(t, log.String(), "tip="+tip)
	require.NoError(t, r.Recover(t.Context()))
	assert.Equal(t, specs.VerdictPass, e.reconcileAndWait(r)["second"].Verdict, "accepted, the reconciler writes")
}
