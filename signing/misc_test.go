package signing

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadPassphrase(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	t.Setenv("SIGNET_TEST_PP", "from-env")
	t.Setenv("SIGNET_TEST_EMPTY", "")
	for _, tc := range []struct {
		name, file, env string
		want            string
		err             string
	}{
		{name: "none"},
		{name: "file with newline", file: write("a", "zebra-one\n"), want: "zebra-one"},
		{name: "file with CRLF", file: write("b", "zebra-two\r\n"), want: "zebra-two"},
		{name: "file keeps inner spaces", file: write("c", " a b \n"), want: " a b "},
		{name: "env", env: "SIGNET_TEST_PP", want: "from-env"},
		{name: "both", file: write("d", "x"), env: "SIGNET_TEST_PP", err: "not both"},
		{name: "empty file", file: write("e", "\n"), err: "is empty"},
		{name: "missing file", file: filepath.Join(dir, "missing"), err: "could not read"},
		{name: "unset env", env: "SIGNET_TEST_UNSET_XYZ", err: "unset or empty"},
		{name: "empty env", env: "SIGNET_TEST_EMPTY", err: "unset or empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadPassphrase(tc.file, tc.env)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.NotContains(t, err.Error(), "zebra")
				return
			}
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, got)
			} else {
				assert.Equal(t, tc.want, string(got))
			}
		})
	}
}

func TestApprovalFileName(t *testing.T) {
	alice := testKey(t, "a", AlgorithmECDSAP256)
	one := []Subject{SubjectFor("CertificationRequest/r#release", digestOf("r"))}
	two := append([]Subject{SubjectFor("CertificationProfile/p", digestOf("p"))}, one...)
	st1, err := NewApprovalStatement(one, ApprovalPredicate{SignedAt: "2026-11-30T00:00:00Z"})
	require.NoError(t, err)
	st2, err := NewApprovalStatement(two, ApprovalPredicate{SignedAt: "2026-11-30T00:00:00Z"})
	require.NoError(t, err)
	n1, err := ApprovalFileName(st1, alice.Public())
	require.NoError(t, err)
	assert.Regexp(t, `^certificationrequest-r-release-[0-9a-f]{12}-[0-9a-f]{16}\.json$`, n1)
	again, err := ApprovalFileName(st1, alice.Public())
	require.NoError(t, err)
	assert.Equal(t, n1, again, "deterministic")
	n2, err := ApprovalFileName(st2, alice.Public())
	require.NoError(t, err)
	assert.Regexp(t, `^certificationprofile-p-and-1-more-`, n2)

	// The payload hash in the name is that of the signed payload.
	env, err := SignStatement(st1, alice)
	require.NoError(t, err)
	e, err := ParseEnvelope(env)
	require.NoError(t, err)
	payload, err := e.PayloadBytes()
	require.NoError(t, err)
	assert.Contains(t, n1, digestOf(string(payload)).Hex()[:16])
	a, err := ParseApproval(n1, env)
	require.NoError(t, err)
	assert.Equal(t, []string{"CertificationRequest/r#release"}, a.Subjects())
	d, ok := a.SubjectDigest("CertificationRequest/r#release")
	assert.True(t, ok)
	assert.Equal(t, digestOf("r"), d)
}
