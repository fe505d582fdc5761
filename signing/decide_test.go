package signing

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

// TestDecideTamper covers the acceptance list: each tampered or
// out-of-scope approval is refused with its reason.
func TestDecideTamper(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	bob := testKey(t, "b", AlgorithmEd25519)
	mallory := testKey(t, "m", AlgorithmECDSAP256)
	rec := testKey(t, "reconciler", AlgorithmECDSAP256)
	policy := testPolicy(t, []*PrivateKey{alice, bob}, []*PrivateKey{rec}, func(s *TrustPolicySpec) {
		s.Thresholds.CertificationProfile = new(2)
		s.Keys[1].RevokedAt = "2026-11-30T00:00:00Z" // bob revoked before testNow
	})
	policy1 := testPolicy(t, []*PrivateKey{alice, bob}, []*PrivateKey{rec}, nil)

	const prof = "CertificationProfile/h100"
	const req = "CertificationRequest/batch-7"
	profD := digestOf("profile h100 v1")
	reqD := digestOf("request batch-7")
	editedD := digestOf("profile h100 v2")
	subj := func(name string, d specs.Digest) []Subject { return []Subject{SubjectFor(name, d)} }
	future := testNow.Add(24 * time.Hour).Format(time.RFC3339)

	type tc struct {
		name      string
		policy    *TrustPolicy
		subject   string
		digest    specs.Digest
		approvals func(t *testing.T) []*Approval
		cluster   string
		approved  bool
		keys      []string
		reason    string // a reason that must be given
	}
	cases := []tc{
		{
			name: "approved request", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{}, alice)}
			},
			approved: true, keys: []string{alice.KeyID()},
		},
		{
			name: "approved object edited afterwards", policy: policy1, subject: prof, digest: editedD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(prof, profD), ApprovalPredicate{}, alice)}
			},
			reason: "changed since approval",
		},
		{
			name: "release added without a release approval", policy: policy1, subject: req + "#release", digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{}, alice)}
			},
			reason: "no approval names CertificationRequest/batch-7#release",
		},
		{
			name: "release with its approval", policy: policy1, subject: req + "#release", digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req+"#release", reqD), ApprovalPredicate{}, alice)}
			},
			approved: true, keys: []string{alice.KeyID()},
		},
		{
			name: "approval past its expiry", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{Expires: testNow.Add(-time.Minute).Format(time.RFC3339)}, alice)}
			},
			reason: "expired at",
		},
		{
			name: "approval before its expiry", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{Expires: future}, alice)}
			},
			approved: true, keys: []string{alice.KeyID()},
		},
		{
			name: "approval for another cluster", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{Clusters: []string{"west"}}, alice)}
			},
			reason: "for other clusters (west), not east",
		},
		{
			name: "cluster-scoped approval without a cluster", policy: policy1, subject: req, digest: reqD, cluster: "",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{Clusters: []string{"east"}}, alice)}
			},
			reason: "no cluster was given",
		},
		{
			name: "approval for this cluster", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{Clusters: []string{"west", "east"}}, alice)}
			},
			approved: true, keys: []string{alice.KeyID()},
		},
		{
			name: "key used after its revocation", policy: policy, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{}, bob)}
			},
			reason: "was revoked at 2026-11-30T00:00:00Z",
		},
		{
			name: "signature by a key outside the policy", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{}, mallory)}
			},
			reason: "untrusted key",
		},
		{
			name: "signature by an evidence key", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{}, rec)}
			},
			reason: "is not an approver",
		},
		{
			name: "same key signing twice counts once", policy: policy, subject: prof, digest: profD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{
					approval(t, subj(prof, profD), ApprovalPredicate{}, alice),
					approval(t, subj(prof, profD), ApprovalPredicate{SignedAt: testNow.Format(time.RFC3339)}, alice),
					duplicateSignature(t, approval(t, subj(prof, profD), ApprovalPredicate{}, alice)),
				}
			},
			keys: []string{alice.KeyID()}, reason: "threshold not met: 1 of 2 distinct keys",
		},
		{
			name: "bad signature", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{flipSignature(t, approval(t, subj(req, reqD), ApprovalPredicate{}, alice))}
			},
			reason: "bad signature",
		},
		{
			name: "signature over another payload type", policy: policy1, subject: req, digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{signedOverPayloadType(t, "application/json", subj(req, reqD), alice)}
			},
			reason: "bad signature",
		},
		{
			name: "statement whose subject names another object with the right digest", policy: policy1, subject: prof, digest: profD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj("CertificationProfile/other", profD), ApprovalPredicate{}, alice)}
			},
			reason: "no approval names CertificationProfile/h100",
		},
		{
			name: "request approval does not approve its cancel", policy: policy1, subject: req + "#cancel", digest: reqD, cluster: "east",
			approvals: func(t *testing.T) []*Approval {
				return []*Approval{approval(t, subj(req, reqD), ApprovalPredicate{}, alice)}
			},
			reason: "no approval names CertificationRequest/batch-7#cancel",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.policy.Decide(c.subject, c.digest, c.approvals(t), c.cluster, testNow)
			assert.Equal(t, c.approved, d.Approved, "reasons: %v", d.Reasons)
			if c.keys == nil {
				c.keys = []string{}
			}
			assert.Equal(t, c.keys, d.Keys)
			if c.reason != "" {
				assert.Contains(t, strings.Join(d.Reasons, "\n"), c.reason)
			}
			if c.approved {
				assert.NotEmpty(t, d.Relied)
			}
		})
	}
}

// TestDecideRequestStaysApprovedWithRelease: adding release: true does not
// change the request's digest (execution fields only), so the request stays
// approved while the release action is not.
func TestDecideRequestStaysApprovedWithRelease(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	p := testPolicy(t, []*PrivateKey{alice}, nil, nil)
	reqD := digestOf("execution fields")
	as := []*Approval{approval(t, []Subject{SubjectFor("CertificationRequest/r", reqD)}, ApprovalPredicate{}, alice)}
	assert.True(t, p.Decide("CertificationRequest/r", reqD, as, "c", testNow).Approved)
	assert.False(t, p.Decide("CertificationRequest/r#release", reqD, as, "c", testNow).Approved)
}

func TestDecideThresholdTwoKeys(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	bob := testKey(t, "b", AlgorithmEd25519)
	p := testPolicy(t, []*PrivateKey{alice, bob}, nil, func(s *TrustPolicySpec) { s.Thresholds.CertificationProfile = new(2) })
	d0 := digestOf("p")
	s := []Subject{SubjectFor("CertificationProfile/p", d0)}
	both := approval(t, s, ApprovalPredicate{}, alice, bob)
	dec := p.Decide("CertificationProfile/p", d0, []*Approval{both}, "c", testNow)
	assert.True(t, dec.Approved)
	assert.Len(t, dec.Keys, 2)
	split := []*Approval{approval(t, s, ApprovalPredicate{}, alice), approval(t, s, ApprovalPredicate{}, bob)}
	dec = p.Decide("CertificationProfile/p", d0, split, "c", testNow)
	assert.True(t, dec.Approved)
	assert.Len(t, dec.Relied, 2)
	// The same approvals, under a policy that revokes bob: decided again at once.
	p2 := testPolicy(t, []*PrivateKey{alice, bob}, nil, func(s *TrustPolicySpec) {
		s.Thresholds.CertificationProfile = new(2)
		s.Keys[1].Revoked = true
	})
	assert.NotEqual(t, p.Digest(), p2.Digest())
	dec = p2.Decide("CertificationProfile/p", d0, split, "c", testNow)
	assert.False(t, dec.Approved)
	assert.Contains(t, strings.Join(dec.Reasons, "\n"), "is revoked")
}

func TestParseApprovalRefuses(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	d0 := digestOf("x")
	sign := func(predType string, subjects []Subject, pred any) []byte {
		st, err := NewStatement(predType, subjects, pred)
		require.NoError(t, err)
		b, err := SignStatement(st, alice)
		require.NoError(t, err)
		return b
	}
	ok := ApprovalPredicate{SignedAt: testNow.Format(time.RFC3339)}
	good := sign(ApprovalPredicateType, []Subject{SubjectFor("CertificationProfile/p", d0)}, ok)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"wrong predicate type", sign("https://signet.dev/evidence/v1", []Subject{SubjectFor("CertificationProfile/p", d0)}, ok), `predicateType "https://signet.dev/evidence/v1" is not "https://signet.dev/approval/v1"`},
		{"unknown predicate field", sign(ApprovalPredicateType, []Subject{SubjectFor("CertificationProfile/p", d0)}, map[string]any{"signedAt": ok.SignedAt, "note": "x"}), `unknown field "note"`},
		{"no signedAt", sign(ApprovalPredicateType, []Subject{SubjectFor("CertificationProfile/p", d0)}, map[string]any{}), "signedAt: required"},
		{"bad expiry", sign(ApprovalPredicateType, []Subject{SubjectFor("CertificationProfile/p", d0)}, map[string]any{"signedAt": ok.SignedAt, "expires": "soon"}), `predicate.expires: "soon"`},
		{"bad cluster", sign(ApprovalPredicateType, []Subject{SubjectFor("CertificationProfile/p", d0)}, map[string]any{"signedAt": ok.SignedAt, "clusters": []string{"East"}}), "not a DNS label"},
		{"bad subject", sign(ApprovalPredicateType, []Subject{SubjectFor("Pod/p", d0)}, ok), `subject "Pod/p"`},
		{"action on a profile", sign(ApprovalPredicateType, []Subject{SubjectFor("CertificationProfile/p#release", d0)}, ok), "actions are cancel and release on a CertificationRequest"},
		{"truncated", good[:len(good)-10], "approvals/x.json: envelope"},
		{"garbled", []byte(strings.Replace(string(good), `"sig":"`, `"sig":"%`, 1)), "signatures[0].sig is not standard base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseApproval("approvals/x.json", tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "approvals/x.json")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// duplicateSignature repeats a's first signature, as an attacker padding an
// envelope would.
func duplicateSignature(t *testing.T, a *Approval) *Approval {
	t.Helper()
	env := *a.Envelope
	env.Signatures = append(env.Signatures, env.Signatures[0])
	b, err := json.Marshal(env)
	require.NoError(t, err)
	out, err := ParseApproval(a.Path, b)
	require.NoError(t, err)
	return out
}

// flipSignature corrupts one byte of a's first signature.
func flipSignature(t *testing.T, a *Approval) *Approval {
	t.Helper()
	env := *a.Envelope
	env.Signatures = append([]Signature(nil), env.Signatures...)
	raw, err := decodeSig(env.Signatures[0].Sig)
	require.NoError(t, err)
	raw[len(raw)-1] ^= 1
	env.Signatures[0].Sig = encodeSig(raw)
	b, err := json.Marshal(env)
	require.NoError(t, err)
	out, err := ParseApproval(a.Path, b)
	require.NoError(t, err)
	return out
}

// DecideRendering decides every object and requested action exactly as
// Decide does one by one.
func TestDecideRendering(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	p := testPolicy(t, []*PrivateKey{alice}, nil, nil)
	prof := &specs.Object{Kind: specs.KindProfile, Name: "p", Digest: digestOf("p"), Profile: &specs.CertificationProfile{}}
	req := &specs.Object{Kind: specs.KindRequest, Name: "r", Digest: digestOf("r"),
		Request: &specs.CertificationRequest{Spec: specs.RequestSpec{Profile: "p", Cancel: true, Release: true}}}
	r := &specs.Rendering{Objects: []*specs.Object{prof, req}}
	as := []*Approval{
		approval(t, []Subject{SubjectFor("CertificationProfile/p", prof.Digest), SubjectFor("CertificationRequest/r#cancel", req.Digest)}, ApprovalPredicate{}, alice),
		approval(t, []Subject{SubjectFor("CertificationRequest/r", digestOf("old"))}, ApprovalPredicate{}, alice),
	}
	got := p.DecideRendering(r, as, "c", testNow)
	want := []string{"CertificationProfile/p", "CertificationRequest/r", "CertificationRequest/r#cancel", "CertificationRequest/r#release"}
	require.Len(t, got, len(want))
	for i, d := range got {
		assert.Equal(t, want[i], d.Subject)
		one := p.Decide(want[i], d.Digest, as, "c", testNow)
		assert.Equal(t, one.Approved, d.Approved, d.Subject)
		assert.Equal(t, one.Reasons, d.Reasons, d.Subject)
	}
	assert.True(t, got[0].Approved)
	assert.False(t, got[1].Approved)
	assert.True(t, got[2].Approved)
	assert.False(t, got[3].Approved)
}

// signedOverPayloadType returns an approval whose signature was made over
// the PAE of payloadType while the envelope claims the in-toto type.
func signedOverPayloadType(t *testing.T, payloadType string, subjects []Subject, k *PrivateKey) *Approval {
	t.Helper()
	st, err := NewApprovalStatement(subjects, ApprovalPredicate{SignedAt: testNow.Format(time.RFC3339)})
	require.NoError(t, err)
	payload, err := json.Marshal(st)
	require.NoError(t, err)
	raw, err := signPayload(payloadType, payload, k)
	require.NoError(t, err)
	_, err = ParseApproval("approvals/other-type.json", raw)
	require.ErrorContains(t, err, `payloadType "`+payloadType+`" is not "application/vnd.in-toto+json"`)
	env, err := ParseEnvelope(raw)
	require.NoError(t, err)
	env.PayloadType = PayloadType
	b, err := json.Marshal(env)
	require.NoError(t, err)
	a, err := ParseApproval("approvals/other-type.json", b)
	require.NoError(t, err)
	return a
}

// TestApprovalVerifyAsParsed: Verify checks the envelope an approval was
// parsed from; an approver's signature of another statement put into its
// Envelope afterwards never approves the subjects it was parsed with.
func TestApprovalVerifyAsParsed(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	mallory := testKey(t, "m", AlgorithmECDSAP256)
	rec := testKey(t, "reconciler", AlgorithmECDSAP256)
	policy := testPolicy(t, []*PrivateKey{alice}, []*PrivateKey{rec}, nil)
	const prof = "CertificationProfile/h100"
	forged := approval(t, []Subject{SubjectFor(prof, digestOf("v1"))}, ApprovalPredicate{}, mallory)
	genuine := approval(t, []Subject{SubjectFor("CertificationProfile/other", digestOf("v1"))}, ApprovalPredicate{}, alice)
	forged.Envelope.Payload, forged.Envelope.Signatures = genuine.Envelope.Payload, genuine.Envelope.Signatures

	v, err := forged.Verify(policy)
	require.NotNil(t, v)
	assert.Empty(t, v.Keys, "a signature put into Envelope after parsing must not count")
	assert.ErrorIs(t, err, ErrVerification)
	assert.False(t, policy.Decide(prof, digestOf("v1"), []*Approval{forged}, "", testNow).Approved)

	v, err = genuine.Verify(policy)
	require.NoError(t, err)
	assert.Equal(t, []string{alice.KeyID()}, v.Keys)
}
