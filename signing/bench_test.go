package signing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

const benchObjects = 1000

// BenchmarkVerifyApprovals1000 parses 1,000 approval envelopes (one per
// object, one ECDSA P-256 signature each) and decides all 1,000 objects of
// a rendering (DecideRendering): what a reconcile pays. Compare with BenchmarkRawVerify1000.
func BenchmarkVerifyApprovals1000(b *testing.B) {
	alice := testKey(b, "a", AlgorithmECDSAP256)
	p := testPolicy(b, []*PrivateKey{alice}, nil, nil)
	type obj struct {
		subject string
		digest  specs.Digest
		raw     []byte
	}
	objs := make([]obj, benchObjects)
	r := &specs.Rendering{}
	for i := range objs {
		o := &objs[i]
		name := fmt.Sprintf("r-%d", i)
		o.subject = SubjectName(specs.KindRequest, name, "")
		o.digest = digestOf(o.subject)
		env, err := SignApproval([]Subject{SubjectFor(o.subject, o.digest)}, ApprovalPredicate{}, alice)
		require.NoError(b, err)
		o.raw = env
		r.Objects = append(r.Objects, &specs.Object{Kind: specs.KindRequest, Name: name, Digest: o.digest})
	}
	b.ResetTimer()
	for b.Loop() {
		as := make([]*Approval, 0, benchObjects)
		for _, o := range objs {
			a, err := ParseApproval("a.json", o.raw)
			if err != nil {
				b.Fatal(err)
			}
			as = append(as, a)
		}
		for _, d := range p.DecideRendering(r, as, "c", testNow) {
			if !d.Approved {
				b.Fatal(d.Reasons)
			}
		}
	}
}

// BenchmarkRawVerify1000 is the floor: 1,000 ecdsa.VerifyASN1 of SHA-256
// digests with the standard library alone.
func BenchmarkRawVerify1000(b *testing.B) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(b, err)
	hashes := make([][]byte, benchObjects)
	sigs := make([][]byte, benchObjects)
	for i := range hashes {
		h := sha256.Sum256(fmt.Appendf(nil, "message %d", i))
		hashes[i] = h[:]
		sigs[i], err = ecdsa.SignASN1(rand.Reader, k, h[:])
		require.NoError(b, err)
	}
	b.ResetTimer()
	for b.Loop() {
		for i := range hashes {
			if !ecdsa.VerifyASN1(&k.PublicKey, hashes[i], sigs[i]) {
				b.Fatal("verify failed")
			}
		}
	}
}
