// Package evidencetest builds evidence branches for tests: keys, a trust
// policy, and runs written through evidence.Store shaped as the reconciler
// writes them (Build, Synthesize), then helpers to tamper with the branch
// using stock git plumbing only. It never imports the reconciler:
// evidencetest/reconciled builds the same Fixture by running the real one.
package evidencetest

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"

	"signet.dev/signet/signing"
)

// Branch is the evidence branch the fixture writes.
const Branch = "signet/evidence"

// Cluster is the fixture's cluster name.
const Cluster = "fixture"

// Fixture is a repository whose evidence branch holds finished runs, with
// the keys that signed them and the trust policy that admits them.
type Fixture struct {
	// Dir holds everything below.
	Dir string
	// Repo holds branch signet/evidence: a bare repository (Build) or the
	// spec repository (reconciled.Build).
	Repo string
	// TrustFile is the trust policy file; Policy the parsed policy.
	TrustFile string
	Policy    *signing.TrustPolicy
	// Reconciler signs evidence and commits; KeyFile is its PKCS#8 PEM
	// file and SSHKeyFile the same key in OpenSSH form for git -S.
	Reconciler *signing.PrivateKey
	KeyFile    string
	SSHKeyFile string
	PubFile    string
	// Approver approved the profile and requests.
	Approver *signing.PrivateKey
	// Runs are the run IDs, in the order they ran.
	Runs []string
}

// NewFixture generates the fixture's keys under dir: the evidence signer
// (Reconciler, in every form its files need) and the Approver. Repo,
// Policy and the trust file are the builder's to write.
func NewFixture(dir string) (*Fixture, error) {
	f := &Fixture{Dir: dir, TrustFile: filepath.Join(dir, "trust.yaml")}
	var err error
	if f.Approver, err = signing.GenerateKey(signing.AlgorithmECDSAP256); err != nil {
		return nil, err
	}
	if f.Reconciler, err = signing.GenerateKey(signing.AlgorithmECDSAP256); err != nil {
		return nil, err
	}
	f.KeyFile, f.SSHKeyFile, f.PubFile = filepath.Join(dir, "reconciler.key"), filepath.Join(dir, "reconciler.ssh"), filepath.Join(dir, "reconciler.pub")
	if err := WriteKeyFiles(f.Reconciler, f.KeyFile, f.SSHKeyFile, f.PubFile); err != nil {
		return nil, err
	}
	return f, nil
}

// WriteKeyFiles writes k as PKCS#8 PEM (keyFile), in OpenSSH form for git
// (sshFile, mode 0600) and its public PEM (pubFile).
func WriteKeyFiles(k *signing.PrivateKey, keyFile, sshFile, pubFile string) error {
	pemKey, err := k.MarshalPEM(nil)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pemKey, 0o600); err != nil {
		return err
	}
	block, _ := pem.Decode(pemKey)
	raw, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return err
	}
	sshBlock, err := ssh.MarshalPrivateKey(raw, "reconciler")
	if err != nil {
		return err
	}
	if err := os.WriteFile(sshFile, pem.EncodeToMemory(sshBlock), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubFile, k.Public().MarshalPEM(), 0o600)
}

// Git runs stock git in dir with env added and returns its trimmed
// stdout; the error holds stderr.
func Git(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=fixture", "GIT_AUTHOR_EMAIL=fixture@signet.invalid",
		"GIT_COMMITTER_NAME=fixture", "GIT_COMMITTER_EMAIL=fixture@signet.invalid",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}
