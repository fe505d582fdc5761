package signing

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func indentPEM(pub *PublicKey) string {
	return "      " + strings.ReplaceAll(strings.TrimSpace(string(pub.MarshalPEM())), "\n", "\n      ")
}

// policyYAML trusts a and b as approvers (b also signs commits) and r as
// the evidence signer.
func policyYAML(a, b, r *PrivateKey) string {
	return fmt.Sprintf(`apiVersion: signet.dev/v1alpha1
kind: TrustPolicy
metadata:
  name: prod
spec:
  keys:
  - id: %s
    owner: alice
    publicKey: |
%s
    notBefore: 2026-01-01T00:00:00Z
    notAfter: 2027-01-01T00:00:00Z
  - id: %s
    publicKey: %s
    revokedAt: 2026-12-01T00:00:00Z
  - id: %s
    publicKey: %s
  approvers: [%s, %s]
  thresholds:
    CertificationProfile: 2
  evidenceSigners: [%s]
  commitSigners: [%s]
`, a.KeyID(), indentPEM(a.Public()), b.KeyID(), b.Public().SSHAuthorizedKey(), r.KeyID(), r.Public().SSHAuthorizedKey(), a.KeyID(), b.KeyID(), r.KeyID(), b.KeyID())
}

func TestParseTrustPolicy(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	b := testKey(t, "b", AlgorithmEd25519)
	r := testKey(t, "reconciler", AlgorithmEd25519)
	src := policyYAML(a, b, r)
	p, err := ParseTrustPolicy("policy.yaml", []byte(src))
	require.NoError(t, err)
	assert.Equal(t, "prod", p.Name())
	assert.Equal(t, Thresholds{CertificationProfile: new(2), CertificationRequest: new(1), Cancel: new(1), Release: new(1)}, p.Thresholds())
	assert.Equal(t, "alice", p.Owner(a.KeyID()))
	assert.Len(t, p.Approvers(), 2)
	require.Len(t, p.EvidenceSigners(), 1)
	assert.Equal(t, r.KeyID(), p.EvidenceSigners()[0].KeyID())

	// Round trip keeps the digest; any change changes it.
	out, err := p.MarshalYAML()
	require.NoError(t, err)
	p2, err := ParseTrustPolicy("again.yaml", out)
	require.NoError(t, err)
	assert.Equal(t, p.Digest(), p2.Digest())
	p3, err := ParseTrustPolicy("revoked.yaml", []byte(strings.Replace(src, "revokedAt: 2026-12-01T00:00:00Z", "revokedAt: 2026-11-01T00:00:00Z", 1)))
	require.NoError(t, err)
	assert.NotEqual(t, p.Digest(), p3.Digest())

	// Validity windows.
	assert.Empty(t, p.KeyValidAt(a.KeyID(), testNow))
	assert.Contains(t, p.KeyValidAt(a.KeyID(), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)), "not valid before")
	assert.Contains(t, p.KeyValidAt(a.KeyID(), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)), "expired at")
	assert.Empty(t, p.KeyValidAt(b.KeyID(), testNow))
	assert.Contains(t, p.KeyValidAt(b.KeyID(), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), "revoked at")
	assert.Contains(t, p.KeyValidAt("00", testNow), "not in the trust policy")

	// LoadTrustPolicy names the file.
	path := filepath.Join(t.TempDir(), "trust.yaml")
	require.NoError(t, os.WriteFile(path, []byte(src+"bogus: 1\n"), 0o600))
	_, err = LoadTrustPolicy(path)
	assert.ErrorContains(t, err, path)
}

func TestParseTrustPolicyRefuses(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	b := testKey(t, "b", AlgorithmEd25519)
	c := testKey(t, "c", AlgorithmECDSAP256)
	r := testKey(t, "reconciler", AlgorithmEd25519)
	src := policyYAML(a, b, r)
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"unknown field", strings.Replace(src, "  approvers:", "  approver: []\n  approvers:", 1), `spec.approver: unknown field; did you mean "approvers"?`},
		{"duplicate key", strings.Replace(src, "kind: TrustPolicy\n", "kind: TrustPolicy\nkind: TrustPolicy\n", 1), "policy.yaml:3:1: kind: duplicate key"},
		{"alias", strings.Replace(strings.Replace(src, "  approvers: [", "  approvers: &ids [", 1), "  evidenceSigners: ["+r.KeyID()+"]", "  evidenceSigners: *ids", 1), "spec.approvers: YAML anchors are not allowed (&ids)"},
		{"two documents", src + "---\n" + src, "holds more than one YAML document"},
		{"wrong kind", strings.Replace(src, "kind: TrustPolicy", "kind: Policy", 1), `kind: "Policy" is not "TrustPolicy"`},
		{"wrong apiVersion", strings.Replace(src, "signet.dev/v1alpha1", "v1", 1), `apiVersion: "v1"`},
		{"id mismatch", strings.Replace(src, "- id: "+a.KeyID(), "- id: "+c.KeyID(), 1), "does not match its public key"},
		{"uppercase id", strings.Replace(src, "- id: "+a.KeyID(), "- id: "+strings.ToUpper(a.KeyID()), 1), "spec.keys[0].id"},
		{"unknown approver", strings.Replace(src, "  approvers: ["+a.KeyID(), "  approvers: ["+c.KeyID(), 1), "spec.approvers[0]"},
		{"duplicate approver", strings.Replace(src, "  approvers: ["+a.KeyID()+", "+b.KeyID(), "  approvers: ["+a.KeyID()+", "+a.KeyID(), 1), "appears twice"},
		{"threshold above approvers", strings.Replace(src, "CertificationProfile: 2", "CertificationProfile: 3", 1), "spec.thresholds.CertificationProfile: 3 is more than the 2 approvers"},
		{"negative threshold", strings.Replace(src, "CertificationProfile: 2", "CertificationProfile: -1", 1), "not a positive number"},
		{"bad time", strings.Replace(src, "notAfter: 2027-01-01T00:00:00Z", "notAfter: tomorrow", 1), `spec.keys[0].notAfter: "tomorrow"`},
		{"window reversed", strings.Replace(src, "notAfter: 2027-01-01T00:00:00Z", "notAfter: 2025-01-01T00:00:00Z", 1), "is not before notAfter"},
		{"bad PEM", strings.Replace(src, "-----BEGIN PUBLIC KEY-----", "-----BEGIN PUBLIC KEX-----", 1), "spec.keys[0].publicKey"},
		{"empty", "", "policy.yaml: is empty"},
		{"evidence signer also approver", strings.Replace(src, "  evidenceSigners: ["+r.KeyID()+"]", "  evidenceSigners: ["+a.KeyID()+"]", 1), "spec.evidenceSigners[0]: key " + a.KeyID()[:16] + " is also an approver"},
		{"evidence signer also auditor", strings.Replace(src, "  evidenceSigners: ["+r.KeyID()+"]", "  evidenceSigners: ["+r.KeyID()+"]\n  auditors: ["+r.KeyID()+"]", 1), "spec.evidenceSigners[0]: key " + r.KeyID()[:16] + " is also an auditor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrustPolicy("policy.yaml", []byte(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "policy.yaml:")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestFinding9ThresholdZeroRefused (issue 15, finding 9): a threshold
// written as 0 is refused, naming the field, in the YAML and in the Go
// API; it is never turned into the default of 1. An omitted threshold
// still means 1.
func TestFinding9ThresholdZeroRefused(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	b := testKey(t, "b", AlgorithmEd25519)
	r := testKey(t, "reconciler", AlgorithmEd25519)
	src := policyYAML(a, b, r)
	for _, field := range []string{"CertificationProfile", "CertificationRequest", "cancel", "release"} {
		t.Run("yaml/"+field, func(t *testing.T) {
			in := strings.Replace(src, "  thresholds:\n    CertificationProfile: 2\n", "  thresholds:\n    "+field+": 0\n", 1)
			require.Contains(t, in, field+": 0")
			_, err := ParseTrustPolicy("policy.yaml", []byte(in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "policy.yaml: spec.thresholds."+field+": 0 is not a positive number of keys")
		})
	}
	t.Run("go api", func(t *testing.T) {
		_, err := NewTrustPolicy("zero", TrustPolicySpec{
			Keys:       []TrustedKeySpec{KeySpec(a.Public())},
			Approvers:  []string{a.KeyID()},
			Thresholds: Thresholds{Release: new(0)},
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec.thresholds.release: 0 is not a positive number of keys")
	})
	t.Run("omitted means 1", func(t *testing.T) {
		in := strings.Replace(src, "  thresholds:\n    CertificationProfile: 2\n", "", 1)
		require.NotContains(t, in, "thresholds")
		p, err := ParseTrustPolicy("policy.yaml", []byte(in))
		require.NoError(t, err)
		assert.Equal(t, Thresholds{CertificationProfile: new(1), CertificationRequest: new(1), Cancel: new(1), Release: new(1)}, p.Thresholds())
	})
}

// TestVerifyDSSE: evidence counts only when an evidence signer, valid at
// the time judged, signed it; every other envelope is refused with the kind
// its caller decides on, and a parse error is not a verification failure.
func TestVerifyDSSE(t *testing.T) {
	rec := testKey(t, "reconciler", AlgorithmECDSAP256)
	alice := testKey(t, "a", AlgorithmECDSAP256)
	stranger := testKey(t, "stranger", AlgorithmEd25519)
	p := testPolicy(t, []*PrivateKey{alice}, []*PrivateKey{rec}, func(s *TrustPolicySpec) {
		s.Keys[1].RevokedAt = "2026-12-01T00:00:00Z"
	})
	st, err := NewStatement("https://signet.dev/evidence/v1", []Subject{SubjectFor("nodes/n1.json", digestOf("n1"))}, map[string]int{"x": 1})
	require.NoError(t, err)
	sign := func(k *PrivateKey) []byte {
		b, err := SignStatement(st, k)
		require.NoError(t, err)
		return b
	}
	byRec := sign(rec)

	got, err := VerifyDSSE(byRec, p.Signers(RoleEvidenceSigner), testNow)
	require.NoError(t, err)
	assert.Equal(t, []string{rec.KeyID()}, got.Keys)
	assert.Equal(t, st.Subject, got.Statement.Subject)

	for _, tc := range []struct {
		name string
		env  []byte
		at   time.Time
		kind VerifyKind
		want string
	}{
		{"an approver key may not sign evidence", sign(alice), testNow, KindNotAllowed, "signed by key " + alice.KeyID()[:12] + ", which is not allowed to sign evidence"},
		{"a key outside the policy", sign(stranger), testNow, KindUnknownKey, "signed by key " + stranger.Public().DSSEKeyID() + ", which is not an evidence signer of the trust policy"},
		{"revoked when committed", byRec, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), KindKeyNotValid, "key " + rec.KeyID()[:16] + " was revoked at 2026-12-01T00:00:00Z (committed 2026-12-02T00:00:00Z)"},
		{"forged", resign(t, byRec, stranger), testNow, KindBadSignature, "no signature verifies with an evidence signer of the trust policy (forged or corrupted)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyDSSE(tc.env, p.Signers(RoleEvidenceSigner), tc.at)
			require.ErrorIs(t, err, ErrVerification, "%s must be refused", tc.name)
			var ve *VerifyError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, tc.kind, ve.Kind)
			assert.Equal(t, tc.want, ve.Err.Error())
		})
	}
	_, err = VerifyDSSE(byRec[:20], p.Signers(RoleEvidenceSigner), testNow)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrVerification, "a parse error is not a verification failure")

	_, err = VerifyDSSE(byRec, KeySigners("this reconciler's key", stranger.Public()), testNow)
	assert.ErrorContains(t, err, "which is not this reconciler's key")
	got, err = VerifyDSSE(byRec, KeySigners("this reconciler's key", rec.Public()), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err, "a key the caller holds counts at any time")
	assert.Equal(t, []string{rec.KeyID()}, got.Keys)
}

// resign returns env with its signature replaced by one of k over other
// bytes, keeping env's keyid: a forgery naming the original signer.
func resign(t *testing.T, env []byte, k *PrivateKey) []byte {
	t.Helper()
	var e Envelope
	require.NoError(t, json.Unmarshal(env, &e))
	sig, err := k.sign([]byte("something else"))
	require.NoError(t, err)
	e.Signatures[0].Sig = encodeSig(sig)
	out, err := json.Marshal(e)
	require.NoError(t, err)
	return out
}

// signedEvidence is a trust policy, a statement and its envelope signed
// by the policy's evidence signer.
func signedEvidence(t *testing.T) (*TrustPolicy, *Statement, []byte) {
	t.Helper()
	rec := testKey(t, "reconciler", AlgorithmECDSAP256)
	alice := testKey(t, "a", AlgorithmECDSAP256)
	p := testPolicy(t, []*PrivateKey{alice}, []*PrivateKey{rec}, nil)
	st, err := NewStatement("https://signet.dev/evidence/v1", []Subject{SubjectFor("nodes/n1.json", digestOf("n1"))}, map[string]int{"x": 1})
	require.NoError(t, err)
	raw, err := SignStatement(st, rec)
	require.NoError(t, err)
	return p, st, raw
}

// TestVerifyDSSEEscapedPayload: a payload whose JSON string carries
// escapes (valid JSON, though no signet writer makes one) reads as the
// same bytes as the plain string, whichever reader decodes it; one that
// unescapes to something else, or to more than base64, is refused.
func TestVerifyDSSEEscapedPayload(t *testing.T) {
	p, st, raw := signedEvidence(t)
	plain, err := ParseEnvelope(raw)
	require.NoError(t, err)
	escape := func(payload string) []byte {
		return []byte(strings.Replace(string(raw), `"payload":"`+plain.Payload+`"`, `"payload":"`+payload+`"`, 1))
	}
	escaped := `\u00` + fmt.Sprintf("%02x", plain.Payload[0]) + strings.ReplaceAll(plain.Payload[1:], "/", `\/`)
	require.NotEqual(t, raw, escape(escaped))

	env, err := ParseEnvelope(escape(escaped))
	require.NoError(t, err)
	assert.Equal(t, plain.Payload, env.Payload)
	got, err := VerifyDSSE(escape(escaped), p.Signers(RoleEvidenceSigner), testNow)
	require.NoError(t, err, "an escaped payload is the same payload")
	assert.Equal(t, st.Subject, got.Statement.Subject)

	for name, payload := range map[string]string{
		"escape of another character": `\u0041` + plain.Payload[1:],
		"escaped quote":               `\"` + plain.Payload[1:],
		"escaped non-base64":          `\u0021` + plain.Payload[1:],
	} {
		_, err := VerifyDSSE(escape(payload), p.Signers(RoleEvidenceSigner), testNow)
		require.Error(t, err, "%s: must be refused", name)
		_, err = ParseEnvelope(escape(payload))
		if name == "escape of another character" && plain.Payload[0] != 'A' {
			require.NoError(t, err, "%s: still base64, only the signature fails", name)
			continue
		}
		require.ErrorContains(t, err, "payload is not standard base64", name)
	}
}

// TestBase64LineBreaksRefused: Go's base64 decoder skips line breaks even
// in strict mode, so a payload or signature with a JSON "\n" or "\r\n"
// escaped into its text would decode, and verify, as the original: the
// envelope's bytes changed while what they prove did not. Each is refused.
func TestBase64LineBreaksRefused(t *testing.T) {
	p, _, raw := signedEvidence(t)
	_, err := VerifyDSSE(raw, p.Signers(RoleEvidenceSigner), testNow)
	require.NoError(t, err)
	plain, err := ParseEnvelope(raw)
	require.NoError(t, err)
	sig := plain.Signatures[0].Sig

	for name, c := range map[string]struct{ old, new, want string }{
		"payload with \\n":    {`"` + plain.Payload + `"`, `"` + plain.Payload[:8] + `\n` + plain.Payload[8:] + `"`, "payload is not standard base64: a line break at byte 8"},
		"payload with \\r\\n": {`"` + plain.Payload + `"`, `"` + plain.Payload[:4] + `\r\n` + plain.Payload[4:] + `"`, "payload is not standard base64: a line break at byte 4"},
		"signature with \\n":  {`"` + sig + `"`, `"` + sig[:12] + `\n` + sig[12:] + `"`, "no signature verifies"},
	} {
		t.Run(name, func(t *testing.T) {
			b := []byte(strings.Replace(string(raw), c.old, c.new, 1))
			require.NotEqual(t, raw, b)
			_, err := VerifyDSSE(b, p.Signers(RoleEvidenceSigner), testNow)
			require.Error(t, err, "%s: the same signed bytes in another encoding must be refused", name)
			require.ErrorContains(t, err, c.want)
		})
	}

	// An envelope built in Go with such a payload is refused as well.
	env := *plain
	env.Payload = plain.Payload[:8] + "\n" + plain.Payload[8:]
	_, err = env.PayloadBytes()
	require.ErrorContains(t, err, "a line break at byte 8", "a payload set with a line break must be refused")
}
