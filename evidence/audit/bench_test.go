package audit_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/hiddeco/sshsig"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
)

// Bench sizes: about 20 signed documents per run (admission, approval
// copy, 8 intents, 8 check evidences, run evidence, receipt), one commit
// per lifecycle step as the reconciler writes them.
const (
	benchRuns   = 20
	benchChecks = 8
)

// rawSig is one signature as audit must verify it, decoded up front.
type rawSig struct {
	pub     any    // *ecdsa.PublicKey or ed25519.PublicKey
	msg     []byte // the DSSE PAE
	sig     []byte
	commit  *sshsig.Signature
	payload []byte
	sshPub  ssh.PublicKey
}

func (r *rawSig) verify() bool {
	if r.commit != nil {
		return sshsig.Verify(bytes.NewReader(r.payload), r.commit, r.sshPub, r.commit.HashAlgorithm, "git") == nil
	}
	switch k := r.pub.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(r.msg)
		return ecdsa.VerifyASN1(k, sum[:], r.sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, r.msg, r.sig)
	}
	return false
}

// collectSigs reads every signature audit verifies on the branch: every
// document and approval envelope, and (with commits) every commit.
func collectSigs(b *testing.B, repo string, keys []*signing.PublicKey, commits bool) (docs, all []*rawSig) {
	r, err := git.PlainOpen(repo)
	require.NoError(b, err)
	ref, err := r.Reference(plumbing.NewBranchReferenceName(evidence.DefaultBranch), true)
	require.NoError(b, err)
	tip, err := r.CommitObject(ref.Hash())
	require.NoError(b, err)
	tree, err := tip.Tree()
	require.NoError(b, err)
	byFP := map[string]*signing.PublicKey{}
	for _, k := range keys {
		byFP[k.DSSEKeyID()] = k
	}
	require.NoError(b, tree.Files().ForEach(func(f *object.File) error {
		parts := strings.Split(f.Name, "/")
		if parts[0] != "runs" || len(parts) < 8 || parts[7] == "nodes" || parts[7] == "logs" || path.Ext(f.Name) != ".json" {
			return nil
		}
		data, err := f.Contents()
		require.NoError(b, err)
		env, err := signing.ParseEnvelope([]byte(data))
		require.NoError(b, err)
		payload, err := env.PayloadBytes()
		require.NoError(b, err)
		sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
		require.NoError(b, err)
		k := byFP[env.Signatures[0].KeyID]
		require.NotNil(b, k, f.Name)
		docs = append(docs, &rawSig{pub: k.CryptoPublicKey(), msg: signing.PAE(env.PayloadType, payload), sig: sig})
		return nil
	}))
	all = append(all, docs...)
	if commits {
		iter, err := r.Log(&git.LogOptions{From: ref.Hash()})
		require.NoError(b, err)
		require.NoError(b, iter.ForEach(func(c *object.Commit) error {
			o := &plumbing.MemoryObject{}
			require.NoError(b, c.Encode(o))
			rd, _ := o.Reader()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(rd)
			payload, armored, err := signing.SplitCommitSignature(buf.Bytes())
			require.NoError(b, err)
			sig, err := sshsig.Unarmor(armored)
			require.NoError(b, err)
			all = append(all, &rawSig{commit: sig, payload: payload, sshPub: sig.PublicKey})
			return nil
		}))
	}
	return docs, all
}

// verifyAll verifies sigs on workers goroutines, like the audit's pool.
func verifyAll(b *testing.B, sigs []*rawSig, workers int) {
	var wg sync.WaitGroup
	ch := make(chan *rawSig, 4*workers)
	for range workers {
		wg.Go(func() {
			for s := range ch {
				if !s.verify() {
					b.Error("signature does not verify")
				}
			}
		})
	}
	for _, s := range sigs {
		ch <- s
	}
	close(ch)
	wg.Wait()
}

// BenchmarkAudit measures audit throughput in signed documents per second
// against the raw signature-verification bound on the same keys, at the
// same parallelism (GOMAXPROCS workers):
//
//   - audit: audit.Branch of the whole branch (history walk, tree diffs,
//     blob reads, envelope and predicate parsing, every check of the
//     audit, commit signatures included);
//   - raw-verify: only the signature verifications of the same document
//     and approval envelopes (PAE and signature decoded up front);
//   - raw-verify+commits: the same plus every commit's SSH signature,
//     which audit verifies too (the reconciler commits each lifecycle
//     step on its own, so there is about one commit per document).
//
// Ratio: audit docs/s ÷ raw docs/s.
func BenchmarkAudit(b *testing.B) {
	ctx := b.Context()
	key, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(b, err)
	approver, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(b, err)
	s, err := evidencetest.Synthesize(ctx, b.TempDir(), benchRuns, benchChecks, key, approver)
	require.NoError(b, err)
	workers := runtime.GOMAXPROCS(0)
	rep, err := audit.Branch(ctx, audit.Options{Repo: s.Remote, Policy: s.Policy})
	require.NoError(b, err)
	require.Empty(b, rep.Findings)
	require.Equal(b, s.Documents, rep.Documents)
	docs, all := collectSigs(b, s.Remote, append(s.Policy.EvidenceSigners(), s.Policy.Approvers()...), true)
	require.Len(b, docs, s.Documents)
	b.Logf("%d runs, %d signed documents, %d signatures with commits, %d workers", s.Runs, len(docs), len(all), workers)
	// docs/s is wall-clock throughput; cpu-docs/s divides by the CPU time
	// the process used, which is what to compare on a shared machine.
	report := func(b *testing.B, start time.Time, cpu0 time.Duration) {
		el := time.Since(start).Seconds()
		b.ReportMetric(float64(s.Documents*b.N)/el, "docs/s")
		b.ReportMetric(float64(s.Documents*b.N)/(cpuTime()-cpu0).Seconds(), "cpu-docs/s")
	}
	// What an auditor reads: a clone, whose objects are in one pack file.
	// The remote as pushed holds one loose object file per object (until
	// git gc packs them), which go-git reads several times slower.
	packed := filepath.Join(b.TempDir(), "clone.git")
	_, err = evidencetest.Git("", nil, "clone", "-q", "--bare", "--no-local", s.Remote, packed)
	require.NoError(b, err)
	for _, tc := range []struct{ name, repo string }{{"audit", packed}, {"audit-loose-objects", s.Remote}} {
		b.Run(tc.name, func(b *testing.B) {
			start, cpu0 := time.Now(), cpuTime()
			for b.Loop() {
				if _, err := audit.Branch(ctx, audit.Options{Repo: tc.repo, Policy: s.Policy, Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
			report(b, start, cpu0)
		})
	}
	b.Run("raw-verify", func(b *testing.B) {
		start, cpu0 := time.Now(), cpuTime()
		for b.Loop() {
			verifyAll(b, docs, workers)
		}
		report(b, start, cpu0)
	})
	b.Run("raw-verify+commits", func(b *testing.B) {
		start, cpu0 := time.Now(), cpuTime()
		for b.Loop() {
			verifyAll(b, all, workers)
		}
		report(b, start, cpu0)
	})
}

// cpuTime is the user and system CPU time the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
