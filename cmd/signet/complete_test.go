package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompletionFromRepos invokes cobra's __complete as the shell does:
// run IDs (verify RUN, logs RUN) come from the evidence branch's index,
// request names (run --request) and object references (sign --object;
// with --action, requests only) from the spec repository; what is typed
// narrows them, and a source that cannot be read offers nothing.
func TestCompletionFromRepos(t *testing.T) {
	f := evidenceFixture(t)
	complete := func(args ...string) []string {
		t.Helper()
		out, stderr, code := runSpecsCLI(t, append([]string{"__complete"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(l, ":") || strings.HasPrefix(l, "Completion ended") {
				continue
			}
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		return got
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"verify run IDs", []string{"verify", "--repo", f.Repo, ""}, []string{"run-a", "run-b"}},
		{"logs run IDs narrowed", []string{"logs", "--repo", f.Repo, "run-b"}, []string{"run-b"}},
		{"run IDs of another cluster", []string{"verify", "--repo", f.Repo, "--cluster", "elsewhere", ""}, nil},
		{"run IDs without a branch", []string{"verify", "--repo", t.TempDir(), ""}, nil},
		{"run IDs only for the first argument", []string{"verify", "run-a", "--repo", f.Repo, ""}, nil},
		{"run --request", []string{"run", "--repo", f.Repo, "--request", ""}, []string{"run-a", "run-b"}},
		{"sign --object", []string{"sign", "--repo", f.Repo, "--object", ""}, []string{"CertificationProfile/quick", "CertificationRequest/run-a", "CertificationRequest/run-b"}},
		{"sign --object narrowed", []string{"sign", "--repo", f.Repo, "--object", "CertificationRequest/run-b"}, []string{"CertificationRequest/run-b"}},
		{"get resources", []string{"get", ""}, []string{"nodes", "requests", "runs"}},
		{"sign --action --object", []string{"sign", "--repo", f.Repo, "--action", "release", "--object", ""}, []string{"CertificationRequest/run-a", "CertificationRequest/run-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, complete(tc.args...))
		})
	}
}
