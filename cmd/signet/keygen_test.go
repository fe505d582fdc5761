package main

import (
	"bytes"
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

// runSigningCLI runs the root command with args and returns stdout, stderr
// and the exit code main would use.
func runSigningCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	if err != nil {
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), reportError(err)
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	passFile := filepath.Join(dir, "pass")
	require.NoError(t, os.WriteFile(passFile, []byte("s3cret-zebra\n"), 0o600))
	t.Setenv("SIGNET_TEST_PASS", "env-zebra")
	for _, tc := range []struct {
		name      string
		args      []string
		pass      []byte
		algorithm string
	}{
		{"default", nil, nil, signing.AlgorithmECDSAP256},
		{"ed25519", []string{"--algorithm", "ed25519"}, nil, signing.AlgorithmEd25519},
		{"passphrase file", []string{"--passphrase-file", passFile}, []byte("s3cret-zebra"), signing.AlgorithmECDSAP256},
		{"passphrase env", []string{"--passphrase-env", "SIGNET_TEST_PASS"}, []byte("env-zebra"), signing.AlgorithmECDSAP256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			out, stderr, code := runSigningCLI(t, append([]string{"keygen", "--out", prefix, "-o", "json"}, tc.args...)...)
			require.Equal(t, 0, code, stderr)
			var got keygenJSON
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			assert.Equal(t, tc.algorithm, got.Algorithm)
			assert.Equal(t, tc.pass != nil, got.Encrypted)
			assert.NotContains(t, out+stderr, "zebra", "a passphrase is never printed")

			st, err := os.Stat(prefix + ".key")
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o600), st.Mode().Perm())
			k, err := signing.LoadPrivateKey(prefix+".key", tc.pass)
			require.NoError(t, err)
			assert.Equal(t, got.KeyID, k.KeyID())
			pubPEM, err := os.ReadFile(prefix + ".pub")
			require.NoError(t, err)
			pub, err := signing.ParsePublicKeyPEM(pubPEM)
			require.NoError(t, err)
			assert.Equal(t, got.KeyID, pub.KeyID())

			// Never overwrites.
			_, stderr, code = runSigningCLI(t, "keygen", "--out", prefix)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, "already exists")
		})
	}
}

func TestKeygenUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no out", []string{"keygen"}, "required: --out"},
		{"bad algorithm", []string{"keygen", "--out", filepath.Join(dir, "k"), "--algorithm", "rsa"}, `--algorithm: "rsa"`},
		{"passphrase as a flag value", []string{"keygen", "--out", filepath.Join(dir, "k"), "--passphrase", "x"}, "unknown flag"},
		{"both passphrase sources", []string{"keygen", "--out", filepath.Join(dir, "k"), "--passphrase-file", "f", "--passphrase-env", "E"}, "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runSigningCLI(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}
