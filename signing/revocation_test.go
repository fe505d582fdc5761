package signing

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRevokedAfterCommit: revokedAfterCommit is read strictly (a full
// lowercase SHA-1 commit hash), changes the policy's digest, and does
// not change what KeyValidAt decides at a time.
func TestRevokedAfterCommit(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	b := testKey(t, "b", AlgorithmEd25519)
	r := testKey(t, "reconciler", AlgorithmEd25519)
	src := policyYAML(a, b, r)
	withAnchor := func(v string) string {
		line := "    publicKey: " + r.Public().SSHAuthorizedKey()
		require.Contains(t, src, line)
		return strings.Replace(src, line, line+"\n    revokedAfterCommit: \""+v+"\"", 1)
	}
	plain, err := ParseTrustPolicy("policy.yaml", []byte(src))
	require.NoError(t, err)
	assert.Empty(t, plain.RevokedAfterCommit(r.KeyID()))

	anchor := strings.Repeat("0123456789", 4)
	p, err := ParseTrustPolicy("policy.yaml", []byte(withAnchor(anchor)))
	require.NoError(t, err)
	assert.Equal(t, anchor, p.RevokedAfterCommit(r.KeyID()))
	assert.NotEqual(t, plain.Digest(), p.Digest())
	assert.Empty(t, p.KeyValidAt(r.KeyID(), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))

	for _, bad := range []string{"HEAD", strings.ToUpper(strings.Repeat("ab", 20)), strings.Repeat("a", 39), strings.Repeat("a", 64)} {
		_, err := ParseTrustPolicy("policy.yaml", []byte(withAnchor(bad)))
		assert.ErrorContains(t, err, "spec.keys[2].revokedAfterCommit: ", bad)
		assert.ErrorContains(t, err, "is not a commit hash (40 lowercase hex)", bad)
	}
}
