package signing_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/corpus"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

const corpusDir = "testdata/corpus"

// signingReasons are the rejection reasons the signing package states:
// its sentinel errors, its verification failures (verifyErrorf), the
// message of every errors.New and fmt.Errorf and the format of every
// fmt.Sprintf (an approval decision's reasons), less the ones that only
// wrap another error, name a file, or refuse a caller's mistake while
// signing rather than an input (listed in Ignore).
func signingReasons(t *testing.T) []corpus.Reason {
	t.Helper()
	rs, err := corpus.Scan(corpus.Source{
		Dir:       ".",
		Formats:   map[string]int{"verifyErrorf": 2, "errors.New": 0, "fmt.Errorf": 0, "fmt.Sprintf": 0},
		Sentinels: true,
		Ignore: []string{
			// Wrappers: the wrapped error is the reason.
			"%s", "%s: %s", "%s: %w", "envelope: %w", "statement: %w", "approval: %w",
			"approval: subject[%d]: %w", "%s: statement: subject[%d]: %w", "trust policy %s: %w",
			"could not read %s: %w", "%s.publicKey: %w", "%s: verification failed: %v", "%s: %v",
			// Signing, encoding and key generation: a caller's mistake or
			// a crypto library failure, not a refused input.
			"sign: %w", "sign: encoding envelope: %w", "sign: encoding statement: %w", "sign: key %s given twice",
			"sign: key %s: %w", "sign: no key", "sign: no statement", "sign: statement _type %q is not %q",
			"statement: predicate: %w", "encoding private key: %w", "encoding public key for ssh: %w",
			"encoding public key: %w", "encoding trust policy: %w", "encrypting private key: %w",
			"canonicalizing trust policy: %w", "generating ecdsa-p256 key: %w", "generating ed25519 key: %w",
			"algorithm %q is not %s or %s", "loading signer: %w", "loading verifier: %w", "ssh signer: %w",
			"approval file name: %w", "approval file name: no subject",
			// Names and paths built with Sprintf, not reasons.
			"%s-%s-%s.json", "%s-and-%d-more", "%s[%d]", "spec.keys[%d]", "%s.%s", "VerifyKind(%d)",
		},
	})
	require.NoError(t, err)
	require.NotEmpty(t, rs)
	return rs
}

// corpusMessages runs one input through the real parser its name says:
//
//   - X.trust.yaml: signing.ParseTrustPolicy;
//   - X.envelope.json: signing.ParseEnvelope, then Statement;
//   - X.approval.json: signing.ParseApproval (signatures are not checked);
//   - X.key: signing.ParsePrivateKeyPEM, with the passphrase "wrong" when
//     X ends in ".wrongpass";
//   - X.pub: signing.ParsePublicKeyPEM; X.ssh.pub: ParseSSHAuthorizedKey;
//   - X.commit: signing.VerifyCommit by the commit signers of
//     valid.trust.yaml;
//   - X.verify.json: signing.VerifyDSSE of an envelope by the signers of a
//     role ("evidence", "commit") of the policy it names, at its "at";
//   - X.decide.json: TrustPolicy.Decide of a subject and digest over the
//     approvals and under the policy it names, at its "now"; the messages
//     are the decision's reasons;
//   - X.keyvalid.json: TrustPolicy.KeyValidAt of a key id under the policy
//     it names, at its "at";
//   - X.fs.txtar: a file tree (corpus.ReadArchive) written to a temporary
//     directory, then the loader its CALL file names run on a path of it
//     (see fsMessages).
//
// X.repeat and X.tmpl stand for the input X (corpus.ReadInput).
func corpusMessages(t *testing.T, file string) []string {
	t.Helper()
	if strings.HasSuffix(file, ".fs.txtar") {
		return fsMessages(t, file)
	}
	name, b, err := corpus.ReadInput(file)
	require.NoError(t, err)
	errs := func(err error) []string {
		if err != nil {
			return []string{err.Error()}
		}
		return nil
	}
	switch {
	case strings.HasSuffix(name, ".keyvalid.json"):
		var k struct {
			Policy, Key string
			At          time.Time
		}
		require.NoError(t, json.Unmarshal(b, &k))
		p, err := signing.LoadTrustPolicy(filepath.Join(corpusDir, k.Policy))
		require.NoError(t, err)
		if r := p.KeyValidAt(k.Key, k.At); r != "" {
			return []string{r}
		}
		return nil
	case strings.HasSuffix(name, ".trust.yaml"):
		_, err := signing.ParseTrustPolicy(filepath.Base(name), b)
		return errs(err)
	case strings.HasSuffix(name, ".envelope.json"):
		env, err := signing.ParseEnvelope(b)
		if err != nil {
			return errs(err)
		}
		_, err = env.Statement()
		return errs(err)
	case strings.HasSuffix(name, ".approval.json"):
		_, err := signing.ParseApproval(filepath.Base(name), b)
		return errs(err)
	case strings.HasSuffix(name, ".wrongpass.key"):
		_, err := signing.ParsePrivateKeyPEM(b, []byte("wrong"))
		return errs(err)
	case strings.HasSuffix(name, ".key"):
		_, err := signing.ParsePrivateKeyPEM(b, nil)
		return errs(err)
	case strings.HasSuffix(name, ".ssh.pub"):
		_, err := signing.ParseSSHAuthorizedKey(b)
		return errs(err)
	case strings.HasSuffix(name, ".pub"):
		_, err := signing.ParsePublicKeyPEM(b)
		return errs(err)
	case strings.HasSuffix(name, ".commit"):
		p, err := signing.LoadTrustPolicy(filepath.Join(corpusDir, "valid.trust.yaml"))
		require.NoError(t, err)
		_, err = signing.VerifyCommit(b, p.Signers(signing.RoleCommitSigner), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
		return errs(err)
	case strings.HasSuffix(name, ".verify.json"):
		var v struct {
			Policy, Role, Envelope string
			At                     time.Time
		}
		require.NoError(t, json.Unmarshal(b, &v))
		p, err := signing.LoadTrustPolicy(filepath.Join(corpusDir, v.Policy))
		require.NoError(t, err)
		role, ok := map[string]signing.Role{"evidence": signing.RoleEvidenceSigner, "commit": signing.RoleCommitSigner}[v.Role]
		require.True(t, ok, "%s: role %q", name, v.Role)
		env, err := os.ReadFile(filepath.Join(corpusDir, v.Envelope))
		require.NoError(t, err)
		_, err = signing.VerifyDSSE(env, p.Signers(role), v.At)
		return errs(err)
	case strings.HasSuffix(name, ".decide.json"):
		var d struct {
			Policy, Subject, Digest, Cluster string
			Now                              time.Time
			Approvals                        []string
		}
		require.NoError(t, json.Unmarshal(b, &d))
		p, err := signing.LoadTrustPolicy(filepath.Join(corpusDir, d.Policy))
		require.NoError(t, err)
		var approvals []*signing.Approval
		for _, f := range d.Approvals {
			raw, err := os.ReadFile(filepath.Join(corpusDir, f))
			require.NoError(t, err)
			a, err := signing.ParseApproval(f, raw)
			require.NoError(t, err)
			approvals = append(approvals, a)
		}
		digest, err := specs.ParseDigest(d.Digest)
		require.NoError(t, err)
		// An approved decision may still say why an approval did not count.
		return p.Decide(d.Subject, digest, approvals, d.Cluster, d.Now).Reasons
	}
	require.Failf(t, "unknown input kind", "%s", file)
	return nil
}

// fsMessages writes the tree of an X.fs.txtar input to a temporary
// directory and runs the loader its CALL file names, with paths relative
// to the tree ("-" for an empty argument):
//
//   - LoadTrustPolicy PATH
//   - LoadPrivateKey PATH (no passphrase)
//   - ReadPassphrase FILE ENV
//   - LoadApprovals DIR (over os.DirFS of the tree)
//
// Each line of its ENV file, NAME=VALUE or a bare NAME (unset), is set in
// the environment for the call.
func fsMessages(t *testing.T, file string) []string {
	t.Helper()
	fsys, err := corpus.ReadArchive(file, nil)
	require.NoError(t, err)
	take := func(name string) string {
		f, ok := fsys[name]
		if !ok {
			return ""
		}
		delete(fsys, name)
		return strings.TrimSpace(string(f.Data))
	}
	call := strings.Fields(take("CALL"))
	require.NotEmpty(t, call, "%s: no CALL file", file)
	for _, line := range strings.Split(take("ENV"), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		k, v, set := strings.Cut(line, "=")
		t.Setenv(k, v) // restores the variable after the test
		if !set {
			require.NoError(t, os.Unsetenv(k))
		}
	}
	dir := t.TempDir()
	require.NoError(t, corpus.WriteTree(dir, fsys))
	arg := func(i int) string {
		require.Greater(t, len(call), i, "%s: CALL %s needs %d arguments", file, call[0], i)
		return call[i]
	}
	path := func(i int) string {
		if arg(i) == "-" {
			return ""
		}
		return filepath.Join(dir, filepath.FromSlash(arg(i)))
	}
	one := func(err error) []string {
		if err != nil {
			return []string{err.Error()}
		}
		return nil
	}
	switch call[0] {
	case "LoadTrustPolicy":
		_, err := signing.LoadTrustPolicy(path(1))
		return one(err)
	case "LoadPrivateKey":
		_, err := signing.LoadPrivateKey(path(1), nil)
		return one(err)
	case "ReadPassphrase":
		env := arg(2)
		if env == "-" {
			env = ""
		}
		_, err := signing.ReadPassphrase(path(1), env)
		return one(err)
	case "LoadApprovals":
		_, errs := signing.LoadApprovals(os.DirFS(dir), arg(1))
		var out []string
		for _, err := range errs {
			out = append(out, err.Error())
		}
		return out
	}
	require.Failf(t, "unknown CALL", "%s: %q", file, call[0])
	return nil
}

// TestCorpus runs every checked-in bad input and requires the reason the
// manifest names for it.
// strictReasons are the reasons of specs.DecodeStrict, the strict reader
// of every file signet reads, which reads the trust policy: an input may
// be refused for one of them (the specs corpus covers them all).
func strictReasons(t *testing.T) []corpus.Reason {
	t.Helper()
	rs, err := corpus.Scan(corpus.Source{Dir: "../specs", Formats: map[string]int{"d.addf": 2}, Ignore: []string{"%v", "cannot decode into %s", "cannot convert to JSON: %v"}})
	require.NoError(t, err)
	return rs
}

func TestCorpus(t *testing.T) {
	reasons := append(signingReasons(t), strictReasons(t)...)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	for _, e := range entries {
		t.Run(e.Input, func(t *testing.T) {
			msgs := corpusMessages(t, filepath.Join(corpusDir, e.Input))
			if e.Reason == "" { // a control input: valid
				assert.Empty(t, msgs)
				return
			}
			r, ok := corpus.Find(reasons, e.Reason)
			require.True(t, ok, "the manifest names %q, which the signing source no longer states", e.Reason)
			assert.True(t, r.Matches(msgs), "want reason %q (%s); got:\n%s", r.ID, r.Where, strings.Join(msgs, "\n"))
		})
	}
}

// TestCorpusCoverage lists every reason of the signing source that no
// input reaches, and fails when there is one not owned up to in
// testdata/corpus/uncovered.json.
func TestCorpusCoverage(t *testing.T) {
	reasons := signingReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	corpus.RequireCovered(t, corpusDir, reasons, entries)
}
