package kube

import (
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/kubetest"
)

const tipNamespace, tipName = "signet-system", "signet-evidence-tip"

// tipObject creates the empty tip ConfigMap as the admin and grants the
// reconciler's identity exactly get and update of it (as deploy/base
// does); it returns a keeper acting as that identity.
func tipObject(t *testing.T, env *kubetest.Env) *TipKeeper {
	t.Helper()
	env.OwnConfigMap(t, tipNamespace, tipName, "signet-reconciler")
	return NewTipKeeper(env.ClientFor("signet-reconciler"), tipNamespace, tipName)
}

func keptIn(t *testing.T, env *kubetest.Env) string {
	t.Helper()
	cm, err := env.Client.CoreV1().ConfigMaps(tipNamespace).Get(t.Context(), tipName, metav1.GetOptions{})
	require.NoError(t, err)
	return cm.Data[TipKeyTip]
}

// TestFinding6TipConfigMapCompareAndSwap: two writers of the tip
// ConfigMap on a real API server. The keeper whose record is stale loses
// and overwrites nothing; a store whose view of the object is stale
// re-reads it and refuses the branch its rival's kept tip rolls back.
func TestFinding6TipConfigMapCompareAndSwap(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	a := tipObject(t, env)
	b := NewTipKeeper(env.ClientFor("signet-reconciler"), tipNamespace, tipName)

	t.Run("keepers", func(t *testing.T) {
		fromA, err := a.LoadTip(ctx)
		require.NoError(t, err)
		fromB, err := b.LoadTip(ctx)
		require.NoError(t, err)
		require.Equal(t, fromA.Version, fromB.Version)
		newer := evidence.KeptTip{URL: "file:///e.git", Branch: "signet/evidence", Tip: "2222222222222222222222222222222222222222"}
		_, err = a.SwapTip(ctx, fromA, newer)
		require.NoError(t, err)
		older := newer
		older.Tip = "1111111111111111111111111111111111111111"
		_, err = b.SwapTip(ctx, fromB, older)
		require.ErrorIs(t, err, evidence.ErrTipConflict, "the stale writer loses")
		assert.Equal(t, newer.Tip, keptIn(t, env), "and overwrites nothing")
		// Reset for the stores below.
		cm, err := env.Client.CoreV1().ConfigMaps(tipNamespace).Get(ctx, tipName, metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data = nil
		_, err = env.Client.CoreV1().ConfigMaps(tipNamespace).Update(ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
	})

	t.Run("stores", func(t *testing.T) {
		remote := filepath.Join(t.TempDir(), "evidence.git")
		gittest.InitBare(t, remote)
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		signer, err := ssh.NewSignerFromKey(priv)
		require.NoError(t, err)
		open := func(k evidence.TipKeeper) (*evidence.Store, error) {
			return evidence.Open(ctx, evidence.StoreOptions{URL: remote, CommitSigner: signer, Author: "signet", Email: "signet@example.invalid",
				StateDir: t.TempDir(), Timeout: time.Minute, Keeper: k})
		}
		add := func(s *evidence.Store, p string) string {
			c, err := s.Append(ctx, "", []evidence.File{{Path: p, Data: []byte(p + "\n")}})
			require.NoError(t, err)
			return c
		}
		sa, err := open(a)
		require.NoError(t, err)
		defer sa.Close()
		one := add(sa, "a/one")
		sb, err := open(b)
		require.NoError(t, err, "the kept tip anchors the second writer")
		defer sb.Close()
		two := add(sa, "a/two")
		require.Equal(t, two, keptIn(t, env))

		gittest.Git(t, remote, "update-ref", "refs/heads/"+evidence.DefaultBranch, one)
		require.ErrorIs(t, sb.Refresh(ctx), evidence.ErrRolledBack, "the stale store re-reads the kept tip")
		assert.Equal(t, two, keptIn(t, env), "the kept tip is never moved back")
	})
}
