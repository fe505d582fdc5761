package signing

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// keyCache avoids regenerating keys for every subtest.
var keyCache = map[string]*PrivateKey{}

func testKey(t testing.TB, name, alg string) *PrivateKey {
	t.Helper()
	if k, ok := keyCache[name+"/"+alg]; ok {
		return k
	}
	k, err := GenerateKey(alg)
	require.NoError(t, err)
	keyCache[name+"/"+alg] = k
	return k
}

// testPolicy returns a policy trusting approvers as approvers and evidence
// as evidence signers, thresholds 1 unless mutate changes them.
func testPolicy(t testing.TB, approvers []*PrivateKey, evidence []*PrivateKey, mutate func(*TrustPolicySpec)) *TrustPolicy {
	t.Helper()
	var spec TrustPolicySpec
	seen := map[string]bool{}
	add := func(k *PrivateKey) {
		if !seen[k.KeyID()] {
			seen[k.KeyID()] = true
			spec.Keys = append(spec.Keys, KeySpec(k.Public()))
		}
	}
	for _, k := range approvers {
		add(k)
		spec.Approvers = append(spec.Approvers, k.KeyID())
	}
	for _, k := range evidence {
		add(k)
		spec.EvidenceSigners = append(spec.EvidenceSigners, k.KeyID())
	}
	if mutate != nil {
		mutate(&spec)
	}
	p, err := NewTrustPolicy("test", spec)
	require.NoError(t, err)
	return p
}

func approval(t testing.TB, subjects []Subject, pred ApprovalPredicate, keys ...*PrivateKey) *Approval {
	t.Helper()
	if pred.SignedAt == "" {
		pred.SignedAt = testNow.Add(-time.Hour).Format(time.RFC3339)
	}
	env, err := SignApproval(subjects, pred, keys...)
	require.NoError(t, err)
	a, err := ParseApproval("approvals/test.json", env)
	require.NoError(t, err)
	return a
}

func digestOf(s string) specs.Digest { return specs.DigestOf([]byte(s)) }

// moduleRoot walks up from the test's directory to the directory holding
// go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test directory")
		dir = parent
	}
}
