package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/specdiff"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/specs"
)

func diffJSON(t *testing.T, args ...string) (diffReport, int) {
	t.Helper()
	out, stderr, code := runSigningCLI(t, append([]string{"diff"}, append(args, "-o", "json")...)...)
	var rep diffReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout %q stderr %q", out, stderr)
	assert.Equal(t, rep.ExitCode, code)
	return rep, code
}

func changeOf(rep diffReport, ref string) *specdiff.ObjectChange {
	for i := range rep.Changes {
		if rep.Changes[i].Ref == ref {
			return &rep.Changes[i]
		}
	}
	return nil
}

func fieldNotes(c *specdiff.ObjectChange) string {
	var b strings.Builder
	for _, f := range c.Fields {
		b.WriteString(f.Field + " " + f.Note + " " + f.Old + " -> " + f.New + "\n")
	}
	return b.String()
}

func TestDiff(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	gittest.Git(t, repo, "init", "--quiet", "-b", "main")
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "--quiet", "--no-gpg-sign", "-m", "base")

	alice, _ := newTestKey(t, dir, "alice")
	trust := writeTrust(t, dir, nil, alice)
	_, stderr, code := runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key")
	require.Equal(t, 0, code, stderr)
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "--quiet", "--no-gpg-sign", "-m", "approve everything")

	// Same tree: no change, exit 0.
	rep, code := diffJSON(t, "HEAD~1", "HEAD", "--repo", repo)
	assert.Equal(t, exitDiffClean, code)
	assert.Empty(t, rep.Changes)

	// The change under review.
	prof := filepath.Join(repo, "profiles", "gpu-burnin.yaml")
	editFile(t, prof, "deadline: 300s", "deadline: 360s")
	editFile(t, prof, "gpuCount: 8\n    deadline: 1800s", "gpuCount: 4\n    deadline: 1800s")
	script := filepath.Join(repo, "bundles", "gpu-burnin", "burn.sh")
	f, err := os.OpenFile(script, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("# tuned\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	newDigest, _, err := specs.BundleDigest(os.DirFS(filepath.Join(repo, "bundles", "gpu-burnin")), ".")
	require.NoError(t, err)
	b, err := os.ReadFile(prof)
	require.NoError(t, err)
	oldDigest := strings.Fields(strings.Split(string(b), "digest: ")[1])[0]
	editFile(t, prof, oldDigest, string(newDigest))
	// Reorder two checks of local-smoke.
	ls := filepath.Join(repo, "profiles", "local-smoke.yaml")
	editFile(t, ls, "  - name: cpu-info\n    script: cpu-info.sh\n    backend: local\n    deadline: 30s\n", "")
	editFile(t, ls, "  - name: gpu-visible", "  - name: cpu-info\n    script: cpu-info.sh\n    backend: local\n    deadline: 30s\n  - name: gpu-visible")
	// A new request and a release on an existing one.
	require.NoError(t, os.WriteFile(filepath.Join(repo, "requests", "local-smoke-again.yaml"), []byte(
		"apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: local-smoke-again\nspec:\n  profile: local-smoke\n  nodes: [localhost]\n"), 0o644))
	editFile(t, filepath.Join(repo, "requests", "kustomization.yaml"), "- gpu-burnin-pool-a.yaml", "- gpu-burnin-pool-a.yaml\n- local-smoke-again.yaml")
	editFile(t, filepath.Join(repo, "requests", "gpu-burnin-rack12.yaml"), "spec:\n", "spec:\n  release: true\n")
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "--quiet", "--no-gpg-sign", "-m", "change")

	rep, code = diffJSON(t, "HEAD~1", "HEAD", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, exitDiffNeedsApproval, code)
	gb := changeOf(rep, "CertificationProfile/gpu-burnin")
	require.NotNil(t, gb)
	notes := fieldNotes(gb)
	assert.Contains(t, notes, "spec.checks[gpu-inventory].deadline  300s -> 360s")
	assert.Contains(t, notes, "spec.checks[dcgm-diag].gpuCount  8 -> 4")
	assert.Contains(t, notes, "spec.bundle.digest  "+oldDigest+" -> "+string(newDigest))
	assert.Contains(t, notes, "bundle:burn.sh script changed")
	assert.NotContains(t, notes, "bundle:dcgm-diag.sh")
	lsc := changeOf(rep, "CertificationProfile/local-smoke")
	require.NotNil(t, lsc)
	assert.Contains(t, fieldNotes(lsc), "checks reordered")
	added := changeOf(rep, "CertificationRequest/local-smoke-again")
	require.NotNil(t, added)
	assert.Equal(t, specdiff.Added, added.Change)
	rel := changeOf(rep, "CertificationRequest/gpu-burnin-rack12-2026-11")
	require.NotNil(t, rel)
	assert.Equal(t, []string{"release"}, rel.Actions)

	assert.ElementsMatch(t, []string{
		"CertificationProfile/gpu-burnin", "CertificationProfile/local-smoke",
		"CertificationRequest/gpu-burnin-rack12-2026-11#release", "CertificationRequest/local-smoke-again",
	}, rep.NeedsApproval)
	var inval []string
	for _, a := range rep.Invalidated {
		inval = append(inval, a.Subject)
	}
	assert.ElementsMatch(t, []string{"CertificationProfile/gpu-burnin", "CertificationProfile/local-smoke"}, inval)
	assert.Empty(t, rep.WouldStart, "the new request is not approved yet")

	// Approving at HEAD: the new request would start a run; exit 0.
	_, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key", "--object", "request/gpu-burnin-rack12-2026-11", "--action", "release")
	require.Equal(t, 0, code, stderr)
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "--quiet", "--no-gpg-sign", "-m", "approve")
	rep, code = diffJSON(t, "HEAD~2", "HEAD", "--repo", repo, "--trust", trust, "--cluster", "east")
	assert.Equal(t, exitDiffClean, code, "%v", rep.NeedsApproval)
	assert.Equal(t, []string{"CertificationRequest/local-smoke-again"}, rep.WouldStart)

	// Without --trust every change needs approval; text output names them.
	out, _, code := runSigningCLI(t, "diff", "HEAD~2", "HEAD", "--repo", repo)
	assert.Equal(t, exitDiffNeedsApproval, code)
	assert.Contains(t, out, "changed CertificationProfile/gpu-burnin")
	assert.Contains(t, out, "bundle:burn.sh: script changed")
	assert.Contains(t, out, "approvals this change invalidates")

	// --require-signed-commit: the unsigned HEAD fails the gate.
	rep, code = diffJSON(t, "HEAD~2", "HEAD", "--repo", repo, "--trust", trust, "--require-signed-commit")
	assert.Equal(t, exitDiffUnsigned, code)
	assert.Contains(t, rep.CommitError, "commit is not signed")

	// Errors.
	_, stderr, code = runSigningCLI(t, "diff", "nope", "HEAD", "--repo", repo)
	assert.Equal(t, exitDiffError, code)
	assert.Contains(t, stderr, `revision "nope"`)
	_, _, code = runSigningCLI(t, "diff", "HEAD")
	assert.Equal(t, 2, code)
}

// A symlink in HEAD's tree is never followed: it is a finding (exit 1).
func TestDiffRefusesSymlink(t *testing.T) {
	repo := copySpecRepo(t)
	gittest.Git(t, repo, "init", "--quiet", "-b", "main")
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "--quiet", "--no-gpg-sign", "-m", "base")
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(repo, "profiles", "evil.yaml")))
	editFile(t, filepath.Join(repo, "profiles", "kustomization.yaml"), "resources:\n", "resources:\n- evil.yaml\n")
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "--quiet", "--no-gpg-sign", "-m", "symlink")
	rep, code := diffJSON(t, "HEAD~1", "HEAD", "--repo", repo)
	assert.Equal(t, exitDiffFindings, code)
	require.NotEmpty(t, rep.Findings)
	assert.Contains(t, rep.Findings[0].String(), "symlink")
}
