package audit_test

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
)

// incrBenchRuns is the branch length of BenchmarkIncrementalAudit: runs
// of two checks (8 signed documents and 8 commits each). Synthesizing
// it takes about a minute per 100 runs on a shared 2-core machine.
const incrBenchRuns = 200

// BenchmarkIncrementalAudit: one new run on a branch of incrBenchRuns
// runs, audited from the checkpoint of the branch before it
// (incremental), against auditing that run alone (verify-run:
// audit.Verify, which replays only the run directory's history) and the
// full audit of the same branch (full). The goal: incremental ≤
// 2× verify-run; the ratio is logged, measured on interleaved pairs.
func BenchmarkIncrementalAudit(b *testing.B) {
	ctx := b.Context()
	key, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(b, err)
	approver, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(b, err)
	auditor, err := signing.GenerateKey(signing.AlgorithmEd25519)
	require.NoError(b, err)
	s, err := evidencetest.Synthesize(ctx, b.TempDir(), incrBenchRuns, 2, key, approver)
	require.NoError(b, err)
	policy, err := signing.NewTrustPolicy("bench", signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(approver.Public()), signing.KeySpec(key.Public()), signing.KeySpec(auditor.Public())},
		Approvers:       []string{approver.KeyID()},
		EvidenceSigners: []string{key.KeyID()},
		Auditors:        []string{auditor.KeyID()},
	})
	require.NoError(b, err)
	// A packed clone, as an auditor reads it.
	repo := filepath.Join(b.TempDir(), "clone.git")
	_, err = evidencetest.Git("", nil, "clone", "-q", "--bare", "--no-local", s.Remote, repo)
	require.NoError(b, err)
	c := &evidencetest.Copy{Dir: repo}
	last := fmt.Sprintf("run-%06d", incrBenchRuns-1)
	adm, err := c.Find("/" + last + "/admission.json")
	require.NoError(b, err)
	first, err := evidencetest.Git(repo, nil, "rev-list", "--reverse", "--first-parent", "refs/heads/"+evidencetest.Branch, "--", path.Dir(adm), evidence.IndexPath("synthetic", last))
	require.NoError(b, err)
	tip, err := c.Tip()
	require.NoError(b, err)
	// The checkpoint: the branch up to the commit before the last run's
	// first (its index entry or admission).
	var before string
	commits, err := c.Commits()
	require.NoError(b, err)
	for i, h := range commits {
		if h == strings.Fields(first)[0] {
			before = commits[i-1]
		}
	}
	require.NotEmpty(b, before)
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, before)
	require.NoError(b, err)
	now := time.Now()
	rep, err := audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now, CheckpointKey: auditor})
	require.NoError(b, err)
	require.Empty(b, rep.Findings)
	checkpoint, pages := rep.Checkpoint, rep.CheckpointPages
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, tip)
	require.NoError(b, err)
	rep, err = audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now, Checkpoint: checkpoint, CheckpointPages: pages, CheckpointName: "bench"})
	require.NoError(b, err)
	require.Empty(b, rep.Findings)
	require.Len(b, rep.Runs, 1)
	b.Logf("%d runs, %d documents, %d commits; checkpoint %d bytes; the new run: %d commits", incrBenchRuns, s.Documents, len(commits), len(checkpoint), rep.Commits)

	perOp := map[string]time.Duration{}
	audits := []struct {
		name  string
		audit func() error
	}{
		{"incremental", func() error {
			_, err := audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now, Checkpoint: checkpoint, CheckpointPages: pages, CheckpointName: "bench"})
			return err
		}},
		{"verify-run", func() error {
			_, err := audit.Verify(ctx, audit.VerifyOptions{Repo: repo, Run: last, Policy: policy, Now: now})
			return err
		}},
		{"full", func() error {
			_, err := audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now})
			return err
		}},
	}
	for _, tc := range audits {
		b.Run(tc.name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if err := tc.audit(); err != nil {
					b.Fatal(err)
				}
			}
			perOp[tc.name] = time.Since(start) / time.Duration(b.N)
		})
	}
	// The ratio from interleaved pairs, so that the load of a shared
	// machine weighs on both alike.
	var incr, alone time.Duration
	for range 20 {
		start := time.Now()
		require.NoError(b, audits[0].audit())
		incr += time.Since(start)
		start = time.Now()
		require.NoError(b, audits[1].audit())
		alone += time.Since(start)
	}
	b.Logf("incremental %v, verify-run %v, full %v per audit; interleaved: incremental/verify-run = %.2f (goal ≤ 2)",
		perOp["incremental"], perOp["verify-run"], perOp["full"], float64(incr)/float64(alone))
}
