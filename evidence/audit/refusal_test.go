package audit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// TestRefusalRules: each way an evidence document fails to verify falls
// under its documented rule, and the finding states the verifier's cause.
func TestRefusalRules(t *testing.T) {
	key := func() *signing.PrivateKey {
		k, err := signing.GenerateKey(signing.AlgorithmEd25519)
		require.NoError(t, err)
		return k
	}
	rec, approver, stranger := key(), key(), key()
	rk := signing.KeySpec(rec.Public())
	rk.RevokedAt = "2026-12-01T00:00:00Z"
	policy, err := signing.NewTrustPolicy("test", signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(approver.Public()), rk},
		Approvers:       []string{approver.KeyID()},
		EvidenceSigners: []string{rec.KeyID()},
	})
	require.NoError(t, err)
	sign := func(k *signing.PrivateKey, name string) []byte {
		st, err := signing.NewStatement(evidence.PredicateCheck, []signing.Subject{signing.SubjectFor(name, specs.DigestOf([]byte(name)))}, map[string]any{})
		require.NoError(t, err)
		b, err := signing.SignStatement(st, k)
		require.NoError(t, err)
		return b
	}
	// A forgery: the reconciler's signature of another statement.
	var env, other signing.Envelope
	require.NoError(t, json.Unmarshal(sign(rec, "a"), &env))
	require.NoError(t, json.Unmarshal(sign(rec, "b"), &other))
	env.Signatures = other.Signatures
	forged, err := json.Marshal(env)
	require.NoError(t, err)

	committed := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		doc  []byte
		at   time.Time
		rule string
		msg  string
	}{
		{"not an envelope", []byte(`{}`), committed, RuleSignature, "envelope: payloadType is empty"},
		{"forged", forged, committed, RuleSignature, "no signature verifies with an evidence signer of the trust policy (forged or corrupted)"},
		{"signed by an approver", sign(approver, "a"), committed, RuleUntrustedSigner, "signed by key " + approver.KeyID()[:12] + ", which is not allowed to sign evidence"},
		{"signed by a key outside the policy", sign(stranger, "a"), committed, RuleUntrustedSigner, "signed by key " + stranger.Public().DSSEKeyID() + ", which is not an evidence signer of the trust policy"},
		{"committed after its key was revoked", sign(rec, "a"), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), RuleUntrustedSigner,
			"key " + rec.KeyID()[:16] + " was revoked at 2026-12-01T00:00:00Z (committed 2026-12-02T00:00:00Z)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := signing.VerifyDSSE(tc.doc, policy.Signers(signing.RoleEvidenceSigner), tc.at)
			require.Error(t, err)
			assert.Equal(t, tc.rule, refusalRule(err), "%s falls under the wrong rule", tc.name)
			assert.EqualError(t, refusalMessage(err), tc.msg)
		})
	}
}
