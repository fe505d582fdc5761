package signing

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/specs"
)

// cosignPath returns the module's bin/cosign; the test fails (never skips)
// when it is missing.
func cosignPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(moduleRoot(t), "bin", "cosign")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run make tools (hack/tools.sh builds cosign from its Go module)", p)
	}
	return p
}

// TestCosignVerifiesApproval: a stock cosign verify-blob-attestation accepts
// signet's approval envelope with the same PEM public key, for the blob
// whose sha256 is the subject digest, and refuses another blob.
func TestCosignVerifiesApproval(t *testing.T) {
	cosign := cosignPath(t)
	for _, alg := range []string{AlgorithmECDSAP256, AlgorithmEd25519} {
		t.Run(alg, func(t *testing.T) {
			dir := t.TempDir()
			k := testKey(t, "cosign", alg)
			canonical := []byte(`{"apiVersion":"signet.dev/v1alpha1","kind":"CertificationProfile","metadata":{"name":"h100"}}`)
			env, err := SignApproval([]Subject{SubjectFor("CertificationProfile/h100", specs.DigestOf(canonical))},
				ApprovalPredicate{Clusters: []string{"east"}, Expires: "2030-01-01T00:00:00Z"}, k)
			require.NoError(t, err)
			write := func(name string, b []byte) string {
				p := filepath.Join(dir, name)
				require.NoError(t, os.WriteFile(p, b, 0o600))
				return p
			}
			pub := write("key.pub", k.Public().MarshalPEM())
			sig := write("approval.json", env)
			blob := write("blob", canonical)
			other := write("other", []byte("something else"))
			run := func(blob string) (string, error) {
				cmd := exec.CommandContext(t.Context(), cosign, "verify-blob-attestation", "--key", pub, "--signature", sig,
					"--type", ApprovalPredicateType, "--insecure-ignore-tlog=true", blob)
				cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"))
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				return out.String(), err
			}
			out, err := run(blob)
			require.NoError(t, err, out)
			assert.Contains(t, out, "Verified OK")
			out, err = run(other)
			assert.Error(t, err, out)
			assert.Contains(t, out, "no matching subject digest found")
		})
	}
}

// TestCommitSignatureGate: a commit signed by stock git with an SSH key
// (gpg.format=ssh) verifies when that key is a commit signer in the trust
// policy, and is refused when signed by a key outside it.
func TestCommitSignatureGate(t *testing.T) {
	dir := t.TempDir()
	keygen := func(name string) (keyFile string, pub *PublicKey) {
		keyFile = filepath.Join(dir, name)
		out, err := exec.CommandContext(t.Context(), "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", keyFile).CombinedOutput()
		require.NoError(t, err, string(out))
		line, err := os.ReadFile(keyFile + ".pub")
		require.NoError(t, err)
		pub, err = ParseSSHAuthorizedKey(line)
		require.NoError(t, err)
		return keyFile, pub
	}
	trustedFile, trusted := keygen("trusted")
	untrustedFile, _ := keygen("untrusted")
	approver := testKey(t, "a", AlgorithmECDSAP256)

	spec := TrustPolicySpec{
		Keys:          []TrustedKeySpec{KeySpec(approver.Public()), {ID: trusted.KeyID(), PublicKey: trusted.SSHAuthorizedKey()}},
		Approvers:     []string{approver.KeyID()},
		CommitSigners: []string{trusted.KeyID()},
	}
	p, err := NewTrustPolicy("gate", spec)
	require.NoError(t, err)
	spec.Keys[1].RevokedAt = "2026-01-01T00:00:00Z"
	revoked, err := NewTrustPolicy("gate-revoked", spec)
	require.NoError(t, err)

	repo := filepath.Join(dir, "repo")
	gittest.Git(t, "", "init", "--quiet", repo)
	commit := func(keyFile, msg string) []byte {
		require.NoError(t, os.WriteFile(filepath.Join(repo, "f.txt"), []byte(msg), 0o600))
		gittest.Git(t, repo, "add", "f.txt")
		gittest.Git(t, repo, "-c", "gpg.format=ssh", "-c", "user.signingkey="+keyFile, "commit", "-q", "-S", "-m", msg)
		raw := gittest.Git(t, repo, "cat-file", "commit", "HEAD")
		return []byte(raw + "\n")
	}
	good := commit(trustedFile, "signed by a trusted key")
	bad := commit(untrustedFile, "signed by an untrusted key")
	gittest.Git(t, repo, "commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", "unsigned")
	unsigned := []byte(gittest.Git(t, repo, "cat-file", "commit", "HEAD") + "\n")

	id, err := VerifyCommit(good, p.Signers(RoleCommitSigner), time.Now())
	require.NoError(t, err)
	assert.Equal(t, trusted.KeyID(), id)

	for _, tc := range []struct {
		name   string
		raw    []byte
		policy *TrustPolicy
		kind   VerifyKind
		want   string
	}{
		{"untrusted key", bad, p, KindUnknownKey, "which is not a commit signer"},
		{"unsigned", unsigned, p, KindUnsigned, "commit is not signed"},
		{"tampered message", bytes.Replace(good, []byte("signed by a trusted key"), []byte("signed by a trusted kez"), 1), p, KindBadSignature, "bad signature"},
		{"revoked key", good, revoked, KindKeyNotValid, "revoked at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyCommit(tc.raw, tc.policy.Signers(RoleCommitSigner), time.Now())
			require.ErrorIs(t, err, ErrVerification, "%s must be refused", tc.name)
			var ve *VerifyError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, tc.kind, ve.Kind)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// The payload signet checks is what git signed: stock git verifies it too.
	allowed := filepath.Join(dir, "allowed_signers")
	require.NoError(t, os.WriteFile(allowed, []byte("gittest@example.invalid namespaces=\"git\" "+trusted.SSHAuthorizedKey()+"\n"), 0o600))
	gittest.Git(t, repo, "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "HEAD~2")
	assert.True(t, strings.HasPrefix(string(good), "tree "))
}
