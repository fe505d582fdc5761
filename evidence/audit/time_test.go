package audit_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// Finding 2 of issue 15, "Revoking an evidence key does not stop it": an
// attacker holding the reconciler's key after its revocation at T signs
// commits whose committer time says before T, and documents that state a
// time after their own commit's. These tests perform it with stock git
// (gpg.format=ssh, GIT_COMMITTER_DATE) on a branch written by
// evidence.Store.

// revokingPolicy is the fixture's trust policy, as an operator writes it,
// with the reconciler's key revoked at revokedAt (none when zero) and
// after commit anchor (none when "").
func revokingPolicy(t *testing.T, f *evidencetest.Fixture, revokedAt time.Time, anchor string) *signing.TrustPolicy {
	t.Helper()
	key := func(k *signing.PublicKey) string {
		pem := strings.TrimSpace(string(k.MarshalPEM()))
		return fmt.Sprintf("  - id: %s\n    publicKey: |\n      %s\n", k.KeyID(), strings.ReplaceAll(pem, "\n", "\n      "))
	}
	var b strings.Builder
	b.WriteString("apiVersion: signet.dev/v1alpha1\nkind: TrustPolicy\nmetadata:\n  name: revoking\nspec:\n  keys:\n")
	b.WriteString(key(f.Approver.Public()))
	b.WriteString(key(f.Reconciler.Public()))
	if !revokedAt.IsZero() {
		fmt.Fprintf(&b, "    revokedAt: %s\n", revokedAt.UTC().Format(time.RFC3339))
	}
	if anchor != "" {
		fmt.Fprintf(&b, "    revokedAfterCommit: %s\n", anchor)
	}
	fmt.Fprintf(&b, "  approvers: [%s]\n  evidenceSigners: [%s]\n", f.Approver.KeyID(), f.Reconciler.KeyID())
	p, err := signing.ParseTrustPolicy("revoking.yaml", []byte(b.String()))
	require.NoError(t, err)
	return p
}

// timeFixture is a branch of two finished runs written by evidence.Store,
// a copy of it to tamper with, and the copy's tip and its committer time.
func timeFixture(t *testing.T) (*evidencetest.Fixture, *evidencetest.Copy, string, time.Time) {
	t.Helper()
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	tip, err := c.Tip()
	require.NoError(t, err)
	when, err := c.CommitTime(tip)
	require.NoError(t, err)
	return f, c, tip, when
}

func withRule(fs []audit.Finding, rule, commit, path string) []audit.Finding {
	var out []audit.Finding
	for _, f := range fs {
		if f.Rule == rule && (commit == "" || f.Commit == commit) && (path == "" || f.Path == path) {
			out = append(out, f)
		}
	}
	return out
}

// resignReceipt rewrites run's receipt (and its chain link, sequence seq)
// where it landed, re-signed by the reconciler's key with its at set by
// at (from the receipt commit's time), the commit's time kept. It returns
// the receipt's path and the new receipt commit.
func resignReceipt(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy, run string, seq int64, at func(commit time.Time) time.Time) (string, string) {
	t.Helper()
	p, err := c.Find("/" + run + "/receipt.json")
	require.NoError(t, err)
	landed, err := c.Landed(p)
	require.NoError(t, err)
	when, err := c.CommitTime(landed)
	require.NoError(t, err)
	old, err := c.Read("refs/heads/"+evidencetest.Branch, p)
	require.NoError(t, err)
	rc, err := evidencetest.Resign(old, f.Reconciler, func(pred map[string]any) {
		pred["at"] = at(when).UTC().Format(time.RFC3339Nano)
	})
	require.NoError(t, err)
	link := fmt.Sprintf(`{"run":%q,"receipt":{"path":%q,"digest":%q}}`, run, p, specs.DigestOf(rc))
	tip, err := c.Rewrite(landed, map[string][]byte{p: rc, evidence.ChainPath(evidencetest.Cluster, seq): []byte(link)})
	require.NoError(t, err)
	return p, tip
}

// TestFinding2DecreasingCommitTimes: after the revocation at T, a commit
// signed by the revoked key and dated before its parent (so before T) is
// refused, the key's validity being judged at a time that cannot run
// backwards.
func TestFinding2DecreasingCommitTimes(t *testing.T) {
	f, c, _, tipTime := timeFixture(t)
	policy := revokingPolicy(t, f, tipTime.Add(time.Hour), "")
	h, err := c.AppendDated(tipTime.Add(-time.Hour), nil)
	require.NoError(t, err)
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy})
	require.NoError(t, err)
	assert.NotEmpty(t, withRule(rep.Findings, audit.RuleCommitTimeOrder, h, ""), "want a commit-time-order finding for the backdated commit; got %v", rep.Findings)
}

// TestFinding2DocumentTimeAfterItsCommit: a document stating a time after
// its commit's (after T, in a commit dated before T) is refused, and the
// revoked key is judged at that time.
func TestFinding2DocumentTimeAfterItsCommit(t *testing.T) {
	f, c, _, tipTime := timeFixture(t)
	policy := revokingPolicy(t, f, tipTime.Add(time.Hour), "")
	p, h := resignReceipt(t, f, c, "run-b", 2, func(commit time.Time) time.Time { return commit.Add(2 * time.Hour) })
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy})
	require.NoError(t, err)
	assert.NotEmpty(t, withRule(rep.Findings, audit.RuleDocumentTime, h, p), "want a document-time finding for the postdated receipt; got %v", rep.Findings)
	assert.NotEmpty(t, withRule(rep.Findings, audit.RuleUntrustedSigner, h, p), "want the receipt's key judged at its stated time; got %v", rep.Findings)
	run, err := audit.Verify(t.Context(), audit.VerifyOptions{Repo: c.Dir, Run: "run-b", Policy: policy})
	require.NoError(t, err)
	assert.NotEmpty(t, withRule(run.Findings, audit.RuleDocumentTime, h, p), "%v", run.Findings)
}

// TestFinding2BackdatedCommitAfterRevocation: with the revocation anchored
// at a commit of the branch (revokedAfterCommit), what the key signed
// after it is refused whatever time it states; revokedAt alone cannot
// tell a commit dated between the last legitimate one and T from a
// legitimate one.
func TestFinding2BackdatedCommitAfterRevocation(t *testing.T) {
	f, c, tip, tipTime := timeFixture(t)
	ctx := t.Context()

	t.Run("commit after the anchor", func(t *testing.T) {
		h, err := c.AppendDated(tipTime, nil) // not before its parent, before T
		require.NoError(t, err)
		policy := revokingPolicy(t, f, tipTime.Add(time.Hour), tip)
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: policy})
		require.NoError(t, err)
		got := withRule(rep.Findings, audit.RuleCommitSignature, h, "")
		require.Len(t, got, 1, "want the commit after the anchor refused; got %v", rep.Findings)
		assert.Contains(t, got[0].Message, "revoked after commit "+tip[:12])
		assert.Empty(t, withRule(rep.Findings, audit.RuleCommitSignature, tip, ""), "the anchor itself still counts")
	})

	t.Run("documents after the anchor", func(t *testing.T) {
		// Revoked after run-a's receipt: all of run-b is refused, also
		// by Verify, which reads only run-b's history and finds the
		// anchor further back.
		pa, err := c.Find("/run-a/receipt.json")
		require.NoError(t, err)
		anchor, err := c.Landed(pa)
		require.NoError(t, err)
		policy := revokingPolicy(t, f, time.Time{}, anchor)
		pb, err := c.Find("/run-b/receipt.json")
		require.NoError(t, err)
		landed, err := c.Landed(pb)
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: policy})
		require.NoError(t, err)
		assert.NotEmpty(t, withRule(rep.Findings, audit.RuleUntrustedSigner, landed, pb), "want run-b's receipt refused; got %v", rep.Findings)
		assert.Empty(t, withRule(rep.Findings, audit.RuleUntrustedSigner, "", pa), "run-a was signed before the anchor")
		run, err := audit.Verify(ctx, audit.VerifyOptions{Repo: c.Dir, Run: "run-b", Policy: policy})
		require.NoError(t, err)
		assert.NotEmpty(t, withRule(run.Findings, audit.RuleUntrustedSigner, landed, pb), "%v", run.Findings)
		assert.Empty(t, withRule(run.Findings, audit.RuleRevocationAnchor, "", ""))
	})

	t.Run("anchor not on the history", func(t *testing.T) {
		elsewhere := strings.Repeat("ab", 20)
		policy := revokingPolicy(t, f, time.Time{}, elsewhere)
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: policy})
		require.NoError(t, err)
		assert.NotEmpty(t, withRule(rep.Findings, audit.RuleRevocationAnchor, elsewhere, ""), "%v", rep.Findings)
		run, err := audit.Verify(ctx, audit.VerifyOptions{Repo: c.Dir, Run: "run-a", Policy: policy})
		require.NoError(t, err)
		assert.NotEmpty(t, withRule(run.Findings, audit.RuleRevocationAnchor, elsewhere, ""), "%v", run.Findings)
	})
}

// TestFinding2CleanBranchStaysClean: what evidence.Store writes passes
// every time rule, under a policy revoking the key later and after the
// tip; a document time inside its commit's second passes (committer times
// are whole seconds).
func TestFinding2CleanBranchStaysClean(t *testing.T) {
	f, c, tip, tipTime := timeFixture(t)
	ctx := t.Context()
	policy := revokingPolicy(t, f, tipTime.Add(time.Hour), tip)
	rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: policy})
	require.NoError(t, err)
	assert.Empty(t, rep.Findings)
	for _, r := range f.Runs {
		run, err := audit.Verify(ctx, audit.VerifyOptions{Repo: f.Repo, Run: r, Policy: policy})
		require.NoError(t, err)
		assert.Empty(t, run.Findings)
	}

	resignReceipt(t, f, c, "run-b", 2, func(commit time.Time) time.Time { return commit.Add(999 * time.Millisecond) })
	rep, err = audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: f.Policy})
	require.NoError(t, err)
	assert.Empty(t, rep.Findings)
}
