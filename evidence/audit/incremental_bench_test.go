package audit_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/pagetable"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
)

// incrBenchRuns is the branch length of BenchmarkIncrementalAudit: runs
// of two checks (8 signed documents and 8 commits each).
// SIGNET_BENCH_INCR_RUNS=N audits instead the cached synthetic branch of
// N runs of four checks (evidencetest.SynthesizeCached, as make
// bench-scale; 10^5 runs take hours to write the first time) and skips
// the full audit's sub-benchmark (tens of minutes at 10^5: the
// checkpoint's own audit is one). SIGNET_BENCH_INCR_DIR keeps the clone,
// the auditor key, the checkpoint and its pages in that directory and
// uses them again when they are there and of the same branch and
// checkpoint format (its stamp file): to profile or compare builds at
// 10^5 without auditing the branch each time.
const incrBenchRuns = 200

// BenchmarkIncrementalAudit: one new run on a branch of incrBenchRuns
// runs, audited from the checkpoint of the branch before it
// (incremental, its state pages read from a directory, as signet audit
// --checkpoint reads them), against auditing that run alone (verify-run:
// audit.Verify, which replays only the run directory's history) and the
// full audit of the same branch (full). The goal: incremental ≤
// 2× verify-run, measured on interleaved pairs (interleaved: the
// incremental/verify-run metric), so that the load of a shared machine
// weighs on both alike.
func BenchmarkIncrementalAudit(b *testing.B) {
	ctx := b.Context()
	keep := os.Getenv("SIGNET_BENCH_INCR_DIR")
	work := keep
	if work == "" {
		work = b.TempDir()
	} else {
		require.NoError(b, os.MkdirAll(work, 0o700))
	}
	auditor, err := signing.LoadPrivateKey(filepath.Join(work, "auditor.key"), nil)
	if err != nil {
		auditor, err = signing.GenerateKey(signing.AlgorithmEd25519)
		require.NoError(b, err)
		pem, err := auditor.MarshalPEM(nil)
		require.NoError(b, err)
		require.NoError(b, os.WriteFile(filepath.Join(work, "auditor.key"), pem, 0o600))
	}
	runs, cached := incrBenchRuns, os.Getenv("SIGNET_BENCH_INCR_RUNS")
	var s *evidencetest.Synthetic
	var keys []*signing.PublicKey
	var approvers, signers []string
	if cached != "" {
		runs, err = strconv.Atoi(cached)
		require.NoError(b, err)
		s, err = evidencetest.SynthesizeCached(ctx, runs, 4)
		require.NoError(b, err)
		keys = append(s.Policy.Approvers(), s.Policy.EvidenceSigners()...)
		for _, k := range s.Policy.Approvers() {
			approvers = append(approvers, k.KeyID())
		}
		for _, k := range s.Policy.EvidenceSigners() {
			signers = append(signers, k.KeyID())
		}
	} else {
		key, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
		require.NoError(b, err)
		approver, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
		require.NoError(b, err)
		s, err = evidencetest.Synthesize(ctx, b.TempDir(), runs, 2, key, approver)
		require.NoError(b, err)
		keys = []*signing.PublicKey{approver.Public(), key.Public()}
		approvers, signers = []string{approver.KeyID()}, []string{key.KeyID()}
	}
	spec := signing.TrustPolicySpec{Approvers: approvers, EvidenceSigners: signers, Auditors: []string{auditor.KeyID()}}
	for _, k := range append(keys, auditor.Public()) {
		spec.Keys = append(spec.Keys, signing.KeySpec(k))
	}
	policy, err := signing.NewTrustPolicy("bench", spec)
	require.NoError(b, err)
	// A packed clone, as an auditor reads it.
	repo := filepath.Join(work, "clone.git")
	if _, err := os.Stat(repo); err != nil || keep == "" {
		_, err = evidencetest.Git("", nil, "clone", "-q", "--bare", "--no-local", s.Remote, repo)
		require.NoError(b, err)
	}
	c := &evidencetest.Copy{Dir: repo}
	last := fmt.Sprintf("run-%06d", runs-1)
	adm, err := c.Find("/" + last + "/admission.json")
	require.NoError(b, err)
	first, err := evidencetest.Git(repo, nil, "rev-list", "--reverse", "--first-parent", "refs/heads/"+evidencetest.Branch, "--", path.Dir(adm), evidence.IndexPath("synthetic", last))
	require.NoError(b, err)
	tip, err := c.Tip()
	require.NoError(b, err)
	// The checkpoint: the branch up to the commit before the last run's
	// first (its index entry or admission).
	before, err := evidencetest.Git(repo, nil, "rev-parse", strings.Fields(first)[0]+"^")
	require.NoError(b, err)
	before = strings.TrimSpace(before)
	now := time.Now()
	pages, err := pagetable.NewDirStore(filepath.Join(work, "checkpoint.pages"))
	require.NoError(b, err)
	stampFile, stamp := filepath.Join(work, "stamp"), before+" "+audit.PredicateCheckpoint
	checkpoint, err := os.ReadFile(filepath.Join(work, "checkpoint.json"))
	if old, serr := os.ReadFile(stampFile); err != nil || serr != nil || string(old) != stamp || keep == "" {
		_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, before)
		require.NoError(b, err)
		start := time.Now()
		rep, err := audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now, CheckpointKey: auditor, WritePages: pages})
		require.NoError(b, err)
		require.Empty(b, rep.Findings)
		b.Logf("the checkpoint's audit (the branch but the last run): %v", time.Since(start))
		checkpoint = rep.Checkpoint
		require.NoError(b, pages.Sync())
		require.NoError(b, os.WriteFile(filepath.Join(work, "checkpoint.json"), checkpoint, 0o600))
		require.NoError(b, os.WriteFile(stampFile, []byte(stamp), 0o600))
		_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, tip)
		require.NoError(b, err)
	} else {
		b.Logf("the checkpoint of %s kept in %s", before, work)
	}
	incremental := func() (*audit.Report, error) {
		return audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now, Checkpoint: checkpoint, CheckpointPages: pages, CheckpointName: "bench"})
	}
	rep, err := incremental()
	require.NoError(b, err)
	require.Empty(b, rep.Findings)
	require.Len(b, rep.Runs, 1)
	require.NotNil(b, rep.From, "the audit started from the checkpoint")
	list, err := audit.CheckpointPages(checkpoint, pages)
	require.NoError(b, err)
	b.Logf("%d runs, %d documents; checkpoint %d bytes naming %d state pages; the new run: %d commits", runs, s.Documents, len(checkpoint), len(list), rep.Commits)

	verifyRun := func() error {
		_, err := audit.Verify(ctx, audit.VerifyOptions{Repo: repo, Run: last, Policy: policy, Now: now})
		return err
	}
	b.Run("incremental", func(b *testing.B) {
		for b.Loop() {
			if _, err := incremental(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify-run", func(b *testing.B) {
		for b.Loop() {
			if err := verifyRun(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		var incr, alone time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := incremental(); err != nil {
				b.Fatal(err)
			}
			incr += time.Since(start)
			start = time.Now()
			if err := verifyRun(); err != nil {
				b.Fatal(err)
			}
			alone += time.Since(start)
		}
		b.ReportMetric(float64(incr)/float64(alone), "incremental/verify-run")
	})
	if cached != "" {
		b.Logf("full: not run on the cached branch (the checkpoint's audit above is one)")
		return
	}
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if _, err := audit.Branch(ctx, audit.Options{Repo: repo, Policy: policy, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
