package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// allCommands is every command under root, root and hidden ones included.
func allCommands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, allCommands(c)...)
	}
	return out
}

// TestRepoFlagEveryCommand: every command that reads a repository takes
// it as --repo, with the same default and the same help text, and no other
// command has the flag (issue 17: one flag, one default, one meaning).
func TestRepoFlagEveryCommand(t *testing.T) {
	readers := []string{"approvals", "audit", "diff", "logs", "render", "report", "run", "sign", "status", "validate", "verify"}
	var have []string
	for _, c := range allCommands(newRootCmd()) {
		f := c.Flags().Lookup("repo")
		if f == nil {
			continue
		}
		have = append(have, c.Name())
		t.Run(c.Name(), func(t *testing.T) {
			assert.Equal(t, ".", f.DefValue, "default of --repo")
			assert.Equal(t, repoUsage, f.Usage, "help text of --repo")
			assert.NotContains(t, c.Use, "--repo", "usage line: --repo is optional")
		})
	}
	slices.Sort(have)
	assert.Equal(t, readers, have, "commands with --repo")
}

// TestHelpEveryCommand: every command's help has examples, signet
// --version prints the version, and every --output that offers json offers
// yaml too.
func TestHelpEveryCommand(t *testing.T) {
	root := newRootCmd()
	require.NotEmpty(t, root.Version)
	for _, c := range allCommands(root) {
		t.Run(c.CommandPath(), func(t *testing.T) {
			assert.NotEmpty(t, c.Example, "Example")
			if f := c.Flags().Lookup("output"); f != nil {
				list, ok := strings.CutPrefix(f.Usage, "output format: ")
				require.True(t, ok, f.Usage)
				formats := strings.Split(list, ", ")
				if slices.Contains(formats, "json") {
					assert.Contains(t, formats, "yaml")
				}
			}
		})
	}
	out, _, code := runSpecsCLI(t, "--version")
	assert.Equal(t, 0, code)
	assert.Equal(t, "signet "+versionString()+"\n", out)
}

// specRefsOf returns the sorted KIND/NAME refs in a list of refs, actions
// ("…#release") left out.
func specRefsOf(refs []string) []string {
	var out []string
	for _, r := range refs {
		if !strings.Contains(r, "#") {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// cliJSON runs signet with args plus -o json, requires one of the exit
// codes and decodes stdout into v.
func cliJSON(t *testing.T, v any, codes []int, args ...string) {
	t.Helper()
	out, stderr, code := runSpecsCLI(t, append(args, "-o", "json")...)
	require.Contains(t, codes, code, "signet %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), v), out)
}

// specSubtreeRepo commits an empty commit, then examples/spec-repo under
// specs/ of a fresh Git work tree, and returns the work tree and the spec
// repository (its specs/ directory).
func specSubtreeRepo(t *testing.T) (string, string) {
	t.Helper()
	top := filepath.Join(t.TempDir(), "top")
	specsDir := filepath.Join(top, "specs")
	require.NoError(t, os.CopyFS(specsDir, os.DirFS(filepath.Join("..", "..", "examples", "spec-repo"))))
	gittest.Git(t, top, "init", "--quiet", "-b", "main")
	gittest.Git(t, top, "commit", "--quiet", "--no-gpg-sign", "--allow-empty", "-m", "empty")
	gittest.Git(t, top, "add", "-A")
	gittest.Git(t, top, "commit", "--quiet", "--no-gpg-sign", "-m", "specs")
	return top, specsDir
}

// TestSpecPathMeansTheSame: for validate, render, approvals, sign and diff
// the positional PATH is the same spec path inside --repo, so that each
// command sees the same objects; `signet X PATH` in the repository is
// `signet X --repo DIR PATH` from anywhere; and a --repo below the top of
// a Git work tree is that subtree for every command (diff and approvals
// read it from the commit, the others from the working tree).
func TestSpecPathMeansTheSame(t *testing.T) {
	_, repo := specSubtreeRepo(t)
	keys := t.TempDir()
	alice, _ := newTestKey(t, keys, "alice")
	trust := writeTrust(t, keys, nil, alice)
	var seen [][]string
	for _, specPath := range []string{".", "overlays/cluster-b"} {
		t.Run(specPath, func(t *testing.T) {
			var v validateReport
			cliJSON(t, &v, []int{0}, "validate", "--repo", repo, specPath)
			var want []string
			for _, o := range v.Objects {
				want = append(want, o.Ref)
			}
			want = specRefsOf(want)
			require.NotEmpty(t, want)
			seen = append(seen, want)

			var r renderReport
			cliJSON(t, &r, []int{0}, "render", "--repo", repo, specPath)
			var got []string
			for _, o := range r.Objects {
				got = append(got, o.Ref)
			}
			assert.Equal(t, want, specRefsOf(got), "render")

			var a approvalsReport
			cliJSON(t, &a, []int{0, exitNotApproved}, "approvals", "--repo", repo, specPath, "--trust", trust)
			assert.NotEmpty(t, a.Revision, "approvals reads the commit of the subtree")
			got = nil
			for _, o := range a.Objects {
				got = append(got, o.Subject)
			}
			assert.Equal(t, want, specRefsOf(got), "approvals")

			var d diffReport
			cliJSON(t, &d, []int{exitDiffNeedsApproval}, "diff", "HEAD~1", "HEAD", specPath, "--repo", repo)
			got = nil
			for _, c := range d.Changes {
				assert.Equal(t, "added", strings.ToLower(c.Change), c.Ref)
				got = append(got, c.Ref)
			}
			assert.Equal(t, want, specRefsOf(got), "diff")

			// In the repository, the default --repo "." is the same.
			t.Chdir(repo)
			var here validateReport
			cliJSON(t, &here, []int{0}, "validate", specPath)
			assert.Equal(t, v.Objects, here.Objects, "validate PATH in the repository")
			var dHere diffReport
			cliJSON(t, &dHere, []int{exitDiffNeedsApproval}, "diff", "HEAD~1", "HEAD", specPath)
			assert.Equal(t, d.Changes, dHere.Changes, "diff PATH in the repository")

			// sign last: it writes an approval under PATH.
			var s signJSON
			cliJSON(t, &s, []int{0}, "sign", specPath, "--key", alice+".key")
			got = nil
			for _, sub := range s.Subjects {
				got = append(got, sub.Name)
			}
			assert.Equal(t, want, specRefsOf(got), "sign")
			assert.Equal(t, filepath.Join(".", specPath, ".signet", "approvals"), filepath.Dir(s.File), "sign writes under PATH of --repo")
		})
	}
	require.Len(t, seen, 2)
	assert.NotEqual(t, seen[0], seen[1], "the two spec paths render different objects")
}

// TestOldRepoArgument: the old positional REPO form. Given the root of
// another Git repository as PATH, every spec command refuses it naming the
// value and the flag to use; a PATH outside --repo is refused naming it;
// and a plain directory holding a spec repository of its own renders with
// findings (its bundles are not under --repo's root), never valid, with a
// note naming --repo.
func TestOldRepoArgument(t *testing.T) {
	top, _ := specSubtreeRepo(t)
	t.Chdir(filepath.Dir(top))
	for _, args := range [][]string{
		{"validate", "top"},
		{"render", "top"},
		{"approvals", "top", "--trust", "trust.yaml"},
		{"sign", "top", "--key", "alice.key"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, stderr, code := runSpecsCLI(t, args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			assert.Contains(t, stderr, `PATH "top" is the root of another Git repository, not a spec path inside --repo ".": give it as --repo top`)
		})
	}
	for _, args := range [][]string{
		{"validate", "--repo", "top/specs", "../specs"},
		{"render", "--repo", "top/specs", "../specs"},
		{"approvals", "--repo", "top/specs", "../specs", "--trust", "trust.yaml"},
		{"sign", "--repo", "top/specs", "../specs", "--key", "alice.key"},
		{"diff", "HEAD~1", "HEAD", "../specs", "--repo", "top/specs"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, stderr, code := runSpecsCLI(t, args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			assert.Contains(t, stderr, `PATH "../specs" is outside --repo "top/specs"`)
		})
	}

	// A spec repository that is a plain directory (no .git): read as a
	// spec path of ".", its bundle paths resolve from the wrong root.
	t.Chdir(filepath.Join(top, ".."))
	require.NoError(t, os.CopyFS("plain", os.DirFS(filepath.Join(top, "specs"))))
	out, stderr, code := runSpecsCLI(t, "validate", "plain")
	assert.Equal(t, exitFindings, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	assert.Contains(t, out, "does not exist in the repository")
	assert.Contains(t, stderr, "give it as --repo plain")
	out, stderr, code = runSpecsCLI(t, "validate", "--repo", "plain")
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
}
