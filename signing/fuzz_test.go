package signing

import (
	"testing"
	"time"
)

func fuzzSeedEnvelope(f *testing.F) []byte {
	k := testKey(f, "fuzz", AlgorithmEd25519)
	env, err := SignApproval([]Subject{SubjectFor("CertificationProfile/p", digestOf("p"))},
		ApprovalPredicate{Clusters: []string{"east"}, Expires: "2030-01-01T00:00:00Z"}, k)
	if err != nil {
		f.Fatal(err)
	}
	return env
}

// FuzzParseEnvelope: no input panics, and an accepted envelope re-verifies
// without panicking.
func FuzzParseEnvelope(f *testing.F) {
	f.Add(fuzzSeedEnvelope(f))
	f.Add([]byte(`{"payloadType":"x","payload":"eA==","signatures":[{"keyid":"","sig":"eA=="}]}`))
	f.Add([]byte(`{"payloadType":"x","payloadType":"y"}`))
	k := testKey(f, "fuzz", AlgorithmEd25519)
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := ParseEnvelope(b)
		if err != nil {
			return
		}
		if len(env.Signatures) == 0 || len(env.Signatures) > MaxSignatures {
			t.Fatalf("accepted %d signatures", len(env.Signatures))
		}
		_ = env.VerifiedKeyIDs(k.Public())
		if _, err := ParseApproval("f.json", b); err == nil {
			p := testPolicy(t, []*PrivateKey{k}, nil, nil)
			_ = p.Decide("CertificationProfile/p", digestOf("p"), nil, "east", time.Now())
		}
	})
}

// FuzzStatement: statement decoding never panics and accepts only in-toto
// v1 statements with valid subjects.
func FuzzStatement(f *testing.F) {
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"sha256":"` + digestOf("x").Hex() + `"}}],"predicateType":"p","predicate":{}}`))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"p","predicate":{"a":{"b":[1,2,{"c":null}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStatement(b)
		if err != nil {
			return
		}
		if st.Type != StatementType || len(st.Subject) == 0 {
			t.Fatalf("accepted %+v", st)
		}
		for _, s := range st.Subject {
			if len(s.Digest["sha256"]) != 64 {
				t.Fatalf("accepted digest %v", s.Digest)
			}
		}
	})
}

// FuzzParseTrustPolicy: policy parsing never panics, and an accepted policy
// round-trips to the same digest.
func FuzzParseTrustPolicy(f *testing.F) {
	a := testKey(f, "a", AlgorithmECDSAP256)
	b := testKey(f, "b", AlgorithmEd25519)
	f.Add([]byte(policyYAML(a, b, testKey(f, "reconciler", AlgorithmEd25519))))
	f.Add([]byte("a: &x 1\nb: *x\n"))
	f.Add([]byte("apiVersion: signet.dev/v1alpha1\nkind: TrustPolicy\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := ParseTrustPolicy("fuzz.yaml", in)
		if err != nil {
			return
		}
		out, err := p.MarshalYAML()
		if err != nil {
			t.Fatal(err)
		}
		p2, err := ParseTrustPolicy("again.yaml", out)
		if err != nil {
			t.Fatalf("round trip refused: %v\n%s", err, out)
		}
		if p.Digest() != p2.Digest() {
			t.Fatalf("digest changed on round trip")
		}
	})
}
