package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/signing"
)

func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), old)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644))
}

func approvalsJSON(t *testing.T, args ...string) (approvalsReport, int) {
	t.Helper()
	out, stderr, code := runSigningCLI(t, append([]string{"approvals"}, append(args, "-o", "json")...)...)
	require.Contains(t, []int{0, exitNotApproved}, code, stderr)
	var rep approvalsReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	return rep, code
}

func decisionFor(t *testing.T, rep approvalsReport, subject string) objectApproval {
	t.Helper()
	for _, o := range rep.Objects {
		if o.Subject == subject {
			return o
		}
	}
	t.Fatalf("no decision for %s", subject)
	return objectApproval{}
}

func TestApprovals(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	alice, aliceID := newTestKey(t, dir, "alice")
	bob, _ := newTestKey(t, dir, "bob", "--algorithm", "ed25519")
	mallory, _ := newTestKey(t, dir, "mallory")
	trust := writeTrust(t, dir, nil, alice, bob)

	// Nothing signed yet: nothing approved.
	rep, code := approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, exitNotApproved, code)
	assert.Contains(t, strings.Join(decisionFor(t, rep, "CertificationProfile/local-smoke").Reasons, "\n"), "no approval names")

	// alice approves everything.
	_, stderr, code := runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key")
	require.Equal(t, 0, code, stderr)
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, 0, code)
	d := decisionFor(t, rep, "CertificationProfile/local-smoke")
	assert.True(t, d.Approved)
	assert.Equal(t, []string{aliceID}, d.Keys)
	assert.Len(t, d.ReliedOn, 1)
	assert.Equal(t, signing.ApprovalPredicateType, "https://signet.dev/approval/v1")

	// mallory (outside the policy) signs too: reported, changes nothing.
	_, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", mallory+".key", "--object", "profile/local-smoke")
	require.Equal(t, 0, code, stderr)
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, 0, code)
	assert.Contains(t, strings.Join(decisionFor(t, rep, "CertificationProfile/local-smoke").Reasons, "\n"), "untrusted key")

	// The approved profile is edited afterwards.
	editFile(t, filepath.Join(repo, "profiles", "local-smoke.yaml"), "deadline: 30s", "deadline: 45s")
	// The request asks for release without a release approval.
	editFile(t, filepath.Join(repo, "requests", "local-smoke-localhost.yaml"), "nodes: [localhost]", "nodes: [localhost]\n  release: true")
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, exitNotApproved, code)
	d = decisionFor(t, rep, "CertificationProfile/local-smoke")
	assert.False(t, d.Approved)
	assert.Contains(t, strings.Join(d.Reasons, "\n"), "changed since approval")
	assert.True(t, decisionFor(t, rep, "CertificationRequest/local-smoke-localhost").Approved, "release is not an execution field")
	rel := decisionFor(t, rep, "CertificationRequest/local-smoke-localhost#release")
	assert.False(t, rel.Approved)
	assert.Contains(t, strings.Join(rel.Reasons, "\n"), "no approval names CertificationRequest/local-smoke-localhost#release")

	// bob approves the edited profile and the release for cluster west only.
	_, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", bob+".key", "--object", "profile/local-smoke")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", bob+".key", "--object", "request/local-smoke-localhost", "--action", "release", "--clusters", "west")
	require.Equal(t, 0, code, stderr)
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, exitNotApproved, code)
	assert.True(t, decisionFor(t, rep, "CertificationProfile/local-smoke").Approved)
	assert.Contains(t, strings.Join(decisionFor(t, rep, "CertificationRequest/local-smoke-localhost#release").Reasons, "\n"), "for other clusters (west), not east")
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "west")
	assert.Equal(t, 0, code)

	// Revoking bob in the policy takes effect at once.
	revoked := writeTrust(t, t.TempDir(), func(s *signing.TrustPolicySpec) {
		s.Keys[1].RevokedAt = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	}, alice, bob)
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", revoked, "--cluster", "west")
	assert.Equal(t, exitNotApproved, code)
	assert.Contains(t, strings.Join(decisionFor(t, rep, "CertificationProfile/local-smoke").Reasons, "\n"), "was revoked at")

	// A garbled approval file is reported by name; the others still count.
	require.NoError(t, os.WriteFile(filepath.Join(repo, ".signet", "approvals", "garbled.json"), []byte(`{"payloadType":`), 0o644))
	rep, code = approvalsJSON(t, "--repo", repo, "--trust", trust, "--cluster", "west")
	assert.Equal(t, exitNotApproved, code)
	require.Len(t, rep.ApprovalErrors, 1)
	assert.Contains(t, rep.ApprovalErrors[0], "garbled.json")
	assert.True(t, decisionFor(t, rep, "CertificationProfile/local-smoke").Approved)

	// Text output names why.
	out, _, code := runSigningCLI(t, "approvals", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, exitNotApproved, code)
	assert.Contains(t, out, "SUBJECT")
	assert.Contains(t, out, "CertificationRequest/local-smoke-localhost#release (")
	assert.Contains(t, out, "for other clusters (west), not east")
	assert.Contains(t, out, "garbled.json")
}

func TestApprovalsUsage(t *testing.T) {
	_, stderr, code := runSigningCLI(t, "approvals", "--repo", copySpecRepo(t))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "required: --trust")
	_, stderr, code = runSigningCLI(t, "approvals", "--repo", copySpecRepo(t), "--trust", filepath.Join(t.TempDir(), "missing.yaml"))
	assert.Equal(t, exitUsage, code) // an unreadable trust policy: nothing was decided
	assert.Contains(t, stderr, "could not read")
}

func TestApprovalFindings(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	alice, _ := newTestKey(t, dir, "alice")
	trust := writeTrust(t, dir, nil, alice)
	_, stderr, code := runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key", "--object", "profile/local-smoke")
	require.Equal(t, 0, code, stderr)
	p, err := signing.LoadTrustPolicy(trust)
	require.NoError(t, err)
	r, fsys, sub, err := renderForApprovals(repo, ".")
	require.NoError(t, err)
	findings := approvalFindings(r, fsys, sub, p, "east", time.Now())
	require.NotEmpty(t, findings)
	for _, f := range findings {
		assert.NotContains(t, f.Message, "CertificationProfile/local-smoke ")
		assert.Contains(t, f.Message, "is not approved")
	}
}

// signet validate --trust reports unapproved objects as findings (exit 1)
// and is valid once everything is approved.
func TestValidateTrust(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	alice, _ := newTestKey(t, dir, "alice")
	trust := writeTrust(t, dir, nil, alice)

	out, stderr, code := runSigningCLI(t, "validate", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, out, "CertificationProfile/local-smoke is not approved")

	_, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key", "--clusters", "east")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = runSigningCLI(t, "validate", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, 0, code, out+stderr)
	out, _, code = runSigningCLI(t, "validate", "--repo", repo, "--trust", trust, "--cluster", "west")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "for other clusters (east), not west")
	out, _, code = runSigningCLI(t, "validate", "--repo", repo)
	assert.Equal(t, 0, code, "without --trust approvals are not checked: %s", out)

	_, stderr, code = runSigningCLI(t, "validate", "--repo", repo, "--cluster", "east")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--cluster needs --trust")
	_, stderr, code = runSigningCLI(t, "validate", "--repo", repo, "--trust", filepath.Join(dir, "missing.yaml"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "could not read")
}

// TestApprovalsReadTheCommit: signet approvals decides the commit HEAD
// names, as signet run does, so an approval signed but not committed is
// not shown approved; the note names the uncommitted files, and
// --working-tree decides the files as they are. validate and sign say
// when the working tree differs too.
func TestApprovalsReadTheCommit(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	alice, _ := newTestKey(t, dir, "alice")
	trust := writeTrust(t, dir, nil, alice)
	gittest.Git(t, repo, "init", "-q", "-b", "main")
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "-q", "-m", "specs")
	head := gittest.Git(t, repo, "rev-parse", "HEAD")

	_, stderr, code := runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "differs from HEAD", "nothing was uncommitted before signing")

	// The approval file is in the working tree only.
	out, stderr, code := runSigningCLI(t, "approvals", "--repo", repo, "--trust", trust, "--cluster", "east", "-o", "json")
	require.Equal(t, exitNotApproved, code, "an approval that is not committed counted; stderr:\n%s", stderr)
	var rep approvalsReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, head, rep.Revision)
	require.NotEmpty(t, rep.WorkingTreeChanges)
	assert.Contains(t, rep.WorkingTreeChanges[0], "untracked .signet/approvals/")
	assert.Contains(t, stderr, "note: the working tree differs from HEAD ("+head[:12]+"): untracked .signet/approvals/")
	assert.Contains(t, stderr, "this command read HEAD "+head[:12])

	_, stderr, code = runSigningCLI(t, "approvals", "--repo", repo, "--trust", trust, "--cluster", "east", "--working-tree")
	assert.Equal(t, 0, code, "--working-tree decides the uncommitted approval: %s", stderr)
	assert.Contains(t, stderr, "this command read the working tree")

	_, stderr, code = runSigningCLI(t, "validate", "--repo", repo)
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "untracked .signet/approvals/")

	// Committed, the approval counts and nothing differs.
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "-q", "-m", "approve")
	_, stderr, code = runSigningCLI(t, "approvals", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "differs from HEAD")

	// An edit not yet committed: HEAD's object is still the approved one.
	editFile(t, filepath.Join(repo, "profiles", "local-smoke.yaml"), "deadline: 30s", "deadline: 45s")
	_, stderr, code = runSigningCLI(t, "approvals", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "modified profiles/local-smoke.yaml")
	_, _, code = runSigningCLI(t, "approvals", "--repo", repo, "--trust", trust, "--cluster", "east", "--working-tree")
	assert.Equal(t, exitNotApproved, code, "the edited profile in the working tree is not the approved one")
}
