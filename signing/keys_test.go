package signing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	gossh "golang.org/x/crypto/ssh"
)

func TestKeysRoundTrip(t *testing.T) {
	for _, alg := range []string{AlgorithmECDSAP256, AlgorithmEd25519} {
		t.Run(alg, func(t *testing.T) {
			k, err := GenerateKey(alg)
			require.NoError(t, err)
			assert.Equal(t, alg, k.Algorithm())
			assert.Regexp(t, `^[0-9a-f]{64}$`, k.KeyID())

			plain, err := k.MarshalPEM(nil)
			require.NoError(t, err)
			assert.Contains(t, string(plain), "-----BEGIN PRIVATE KEY-----")
			k2, err := ParsePrivateKeyPEM(plain, nil)
			require.NoError(t, err)
			assert.Equal(t, k.KeyID(), k2.KeyID())

			enc, err := k.MarshalPEM([]byte("correct horse"))
			require.NoError(t, err)
			assert.Contains(t, string(enc), "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
			k3, err := ParsePrivateKeyPEM(enc, []byte("correct horse"))
			require.NoError(t, err)
			assert.Equal(t, k.KeyID(), k3.KeyID())

			_, err = ParsePrivateKeyPEM(enc, nil)
			assert.ErrorIs(t, err, ErrPassphraseRequired)
			_, err = ParsePrivateKeyPEM(enc, []byte("hunter2-zebra"))
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "hunter2", "the passphrase never appears in errors")

			// sigstore's own reader agrees on the encrypted format.
			raw, err := cryptoutils.UnmarshalPEMToPrivateKey(enc, cryptoutils.StaticPasswordFunc([]byte("correct horse")))
			require.NoError(t, err)
			assert.NotNil(t, raw)

			pub, err := ParsePublicKeyPEM(k.Public().MarshalPEM())
			require.NoError(t, err)
			assert.Equal(t, k.KeyID(), pub.KeyID())

			ssh, err := ParseSSHAuthorizedKey([]byte(k.Public().SSHAuthorizedKey() + " someone\n"))
			require.NoError(t, err)
			assert.Equal(t, k.KeyID(), ssh.KeyID())
			s, err := k.SSHSigner()
			require.NoError(t, err)
			assert.Equal(t, k.Public().SSHAuthorizedKey(), strings.TrimSpace(string(sshMarshal(s))))
		})
	}
}

func TestKeyRefusals(t *testing.T) {
	rsaPriv, rsaPub, err := cryptoutils.GeneratePEMEncodedRSAKeyPair(2048, nil)
	require.NoError(t, err)
	k := testKey(t, "a", AlgorithmECDSAP256)
	for _, tc := range []struct {
		name string
		fn   func() error
		want string
	}{
		{"unknown algorithm", func() error { _, err := GenerateKey("rsa"); return err }, `algorithm "rsa"`},
		{"rsa private key", func() error { _, err := ParsePrivateKeyPEM(rsaPriv, nil); return err }, "not ecdsa-p256 or ed25519"},
		{"rsa public key", func() error { _, err := ParsePublicKeyPEM(rsaPub); return err }, "not ecdsa-p256 or ed25519"},
		{"not PEM", func() error { _, err := ParsePublicKeyPEM([]byte("hello")); return err }, "no PEM block"},
		{"private key as public", func() error {
			b, _ := k.MarshalPEM(nil)
			_, err := ParsePublicKeyPEM(b)
			return err
		}, `"PRIVATE KEY" is not "PUBLIC KEY"`},
		{"public key as private", func() error { _, err := ParsePrivateKeyPEM(k.Public().MarshalPEM(), nil); return err }, `"PUBLIC KEY" is not`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadPrivateKeyNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k.key")
	require.NoError(t, os.WriteFile(p, []byte("garbage"), 0o600))
	_, err := LoadPrivateKey(p, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
	_, err = LoadPrivateKey(filepath.Join(t.TempDir(), "missing"), nil)
	assert.ErrorContains(t, err, "could not read")
}

func sshMarshal(s interface{ PublicKey() gossh.PublicKey }) []byte {
	return gossh.MarshalAuthorizedKey(s.PublicKey())
}
