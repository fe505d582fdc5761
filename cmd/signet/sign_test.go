package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/signing"
)

// copySpecRepo copies examples/spec-repo into a fresh directory.
func copySpecRepo(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "examples", "spec-repo")
	dst := filepath.Join(t.TempDir(), "spec-repo")
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
	return dst
}

// newTestKey runs signet keygen and returns the key prefix and its id.
func newTestKey(t *testing.T, dir, name string, extra ...string) (string, string) {
	t.Helper()
	prefix := filepath.Join(dir, name)
	out, stderr, code := runSigningCLI(t, append([]string{"keygen", "--out", prefix}, extra...)...)
	require.Equal(t, 0, code, stderr)
	return prefix, strings.SplitN(out, "\n", 2)[0]
}

// writeTrust writes a trust policy whose approvers are the keys at prefixes.
func writeTrust(t *testing.T, dir string, mutate func(*signing.TrustPolicySpec), prefixes ...string) string {
	t.Helper()
	var spec signing.TrustPolicySpec
	for _, p := range prefixes {
		b, err := os.ReadFile(p + ".pub")
		require.NoError(t, err)
		pub, err := signing.ParsePublicKeyPEM(b)
		require.NoError(t, err)
		spec.Keys = append(spec.Keys, signing.KeySpec(pub))
		spec.Approvers = append(spec.Approvers, pub.KeyID())
	}
	if mutate != nil {
		mutate(&spec)
	}
	p, err := signing.NewTrustPolicy("test", spec)
	require.NoError(t, err)
	y, err := p.MarshalYAML()
	require.NoError(t, err)
	path := filepath.Join(dir, "trust.yaml")
	require.NoError(t, os.WriteFile(path, y, 0o600))
	return path
}

func approvalFiles(t *testing.T, repo string) []string {
	t.Helper()
	var out []string
	_ = fs.WalkDir(os.DirFS(repo), ".signet/approvals", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, filepath.Join(repo, p))
		}
		return nil
	})
	return out
}

func TestSign(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	alice, aliceID := newTestKey(t, dir, "alice")

	out, stderr, code := runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key", "--object", "CertificationProfile/local-smoke",
		"--object", "request/local-smoke-localhost", "--clusters", "east,west", "--expires", "720h", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var got signJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, aliceID, got.KeyID)
	assert.Equal(t, []string{"east", "west"}, got.Clusters)
	require.Len(t, got.Subjects, 2)
	assert.Equal(t, "CertificationProfile/local-smoke", got.Subjects[0].Name)
	assert.Equal(t, "CertificationRequest/local-smoke-localhost", got.Subjects[1].Name)
	assert.Equal(t, filepath.Join(repo, ".signet", "approvals"), filepath.Dir(got.File))

	raw, err := os.ReadFile(got.File)
	require.NoError(t, err)
	a, err := signing.ParseApproval(got.File, raw)
	require.NoError(t, err)
	assert.Equal(t, []string{"east", "west"}, a.Clusters)
	assert.False(t, a.Expires.IsZero())

	// An action approval names the request with #release.
	out, stderr, code = runSigningCLI(t, "sign", "--repo", repo, "--key", alice+".key", "--object", "CertificationRequest/local-smoke-localhost", "--action", "release", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, "CertificationRequest/local-smoke-localhost#release", got.Subjects[0].Name)
	assert.Len(t, approvalFiles(t, repo), 2)
}

func TestSignRefuses(t *testing.T) {
	dir := t.TempDir()
	repo := copySpecRepo(t)
	alice, _ := newTestKey(t, dir, "alice")
	t.Setenv("SIGNET_TEST_PASS_SIGN", "zebra-pass")
	enc, _ := newTestKey(t, dir, "enc", "--passphrase-env", "SIGNET_TEST_PASS_SIGN")

	broken := copySpecRepo(t)
	p := filepath.Join(broken, "profiles", "local-smoke.yaml")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(b), "deadline: 30s", "deadline: 30", 1)), 0o644))

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no key", []string{"sign", "--repo", repo}, 2, "required: --key"},
		{"unknown object", []string{"sign", "--repo", repo, "--key", alice + ".key", "--object", "CertificationProfile/nope"}, 2, `no CertificationProfile named "nope"`},
		{"bad kind", []string{"sign", "--repo", repo, "--key", alice + ".key", "--object", "Pod/x"}, 2, "kind \"Pod\""},
		{"action on a profile", []string{"sign", "--repo", repo, "--key", alice + ".key", "--object", "CertificationProfile/local-smoke", "--action", "cancel"}, 2, "--action applies to CertificationRequest objects (and release to StandingCertification)"},
		{"cancel on a standing certification", []string{"sign", "--repo", repo, "--key", alice + ".key", "--object", "StandingCertification/local-smoke-daily", "--action", "cancel"}, 2, "--action applies to CertificationRequest objects (and release to StandingCertification)"},
		{"release of no firing", []string{"sign", "--repo", repo, "--key", alice + ".key", "--object", "standing/local-smoke-daily", "--action", "release"}, 2, "--action release approves the firings its spec.release lists, and it lists none"},
		{"action without object", []string{"sign", "--repo", repo, "--key", alice + ".key", "--action", "cancel"}, 2, "--action needs --object"},
		{"bad action", []string{"sign", "--repo", repo, "--key", alice + ".key", "--object", "request/local-smoke-localhost", "--action", "stop"}, 2, `--action: "stop"`},
		{"expiry in the past", []string{"sign", "--repo", repo, "--key", alice + ".key", "--expires", "2001-01-01T00:00:00Z"}, 2, "not in the future"},
		{"bad cluster", []string{"sign", "--repo", repo, "--key", alice + ".key", "--clusters", "East"}, 2, "not a DNS label"},
		{"findings", []string{"sign", "--repo", broken, "--key", alice + ".key"}, 1, "finding(s)"},
		{"encrypted key without passphrase", []string{"sign", "--repo", repo, "--key", enc + ".key"}, 2, "passphrase is required (give it with --passphrase-file or --passphrase-env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runSigningCLI(t, tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
	assert.Empty(t, approvalFiles(t, repo), "a refused sign writes nothing")

	_, stderr, code := runSigningCLI(t, "sign", "--repo", repo, "--key", enc+".key", "--passphrase-env", "SIGNET_TEST_PASS_SIGN")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "zebra")
}
