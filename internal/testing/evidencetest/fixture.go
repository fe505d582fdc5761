// Package evidencetest builds a real evidence branch for tests: keys, a
// trust policy, a spec repository with an approved local profile and
// requests, and runs driven through the real reconciler (admission, local
// checks, evidence, receipt), then helpers to tamper with the branch using
// stock git plumbing only.
package evidencetest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"signet.dev/signet/reconciler"
	_ "signet.dev/signet/reconciler/local" // the family the fixture's config enables
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// Branch is the evidence branch the fixture writes.
const Branch = "signet/evidence"

// Cluster is the fixture's cluster name.
const Cluster = "fixture"

// Fixture is a spec repository whose evidence branch holds finished runs.
type Fixture struct {
	// Dir holds everything below.
	Dir string
	// Repo is the spec repository (not bare) with branch signet/evidence.
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

const script = `#!/bin/sh
# signet check: always passes, and says so on stdout.
printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass","summary":"ok"}\n' \
	"$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" >"$SIGNET_RESULT_FILE"
echo "check $SIGNET_CHECK_NAME of $SIGNET_RUN_ID passed"
exit 0
`

// Build makes a fixture under dir and runs each of runs (request names)
// to its receipt, one after the other.
func Build(ctx context.Context, dir string, runs ...string) (*Fixture, error) {
	f := &Fixture{Dir: dir, Repo: filepath.Join(dir, "spec"), TrustFile: filepath.Join(dir, "trust.yaml")}
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
	f.Policy, err = signing.NewTrustPolicy("fixture", signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(f.Approver.Public()), signing.KeySpec(f.Reconciler.Public())},
		Approvers:       []string{f.Approver.KeyID()},
		EvidenceSigners: []string{f.Reconciler.KeyID()},
	})
	if err != nil {
		return nil, err
	}
	y, err := f.Policy.MarshalYAML()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.TrustFile, y, 0o600); err != nil {
		return nil, err
	}
	if err := f.writeSpecs(runs); err != nil {
		return nil, err
	}
	for _, run := range runs {
		if err := f.Run(ctx, run); err != nil {
			return nil, fmt.Errorf("run %s: %w", run, err)
		}
		f.Runs = append(f.Runs, run)
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

func (f *Fixture) writeSpecs(runs []string) error {
	files := map[string]string{
		"bundles/quick/ok.sh": script,
	}
	for _, run := range runs {
		files["requests/"+run+".yaml"] = fmt.Sprintf("apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: %s\nspec:\n  profile: quick\n  nodes: [localhost]\n", run)
	}
	for name, body := range files {
		p := filepath.Join(f.Repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			return err
		}
	}
	d, _, err := specs.BundleDigest(os.DirFS(f.Repo), "bundles/quick")
	if err != nil {
		return err
	}
	profile := fmt.Sprintf(`apiVersion: signet.dev/v1alpha1
kind: CertificationProfile
metadata:
  name: quick
spec:
  bundle:
    path: bundles/quick
    digest: %s
  participants:
    min: 1
    max: 1
  checks:
  - name: first
    script: ok.sh
    backend: local
    deadline: 20s
  - name: second
    script: ok.sh
    backend: local
    deadline: 20s
`, d)
	if err := os.MkdirAll(filepath.Join(f.Repo, "profiles"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(f.Repo, "profiles", "quick.yaml"), []byte(profile), 0o644); err != nil {
		return err
	}
	r, err := specs.Render(os.DirFS(f.Repo), ".")
	if err != nil {
		return err
	}
	if !r.Valid() {
		return fmt.Errorf("fixture specs: %v", r.Findings)
	}
	var subjects []signing.Subject
	for _, o := range r.Objects {
		subjects = append(subjects, signing.SubjectFor(o.Ref(), o.Digest))
	}
	st, err := signing.NewApprovalStatement(subjects, signing.ApprovalPredicate{SignedAt: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	env, err := signing.SignStatement(st, f.Approver)
	if err != nil {
		return err
	}
	name, err := signing.ApprovalFileName(st, f.Approver.Public())
	if err != nil {
		return err
	}
	adir := filepath.Join(f.Repo, filepath.FromSlash(signing.ApprovalsDir))
	if err := os.MkdirAll(adir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(adir, name), env, 0o644); err != nil {
		return err
	}
	if _, err := Git(f.Repo, nil, "init", "-q", "-b", "main"); err != nil {
		return err
	}
	if _, err := Git(f.Repo, nil, "add", "-A"); err != nil {
		return err
	}
	_, err = Git(f.Repo, nil, "commit", "-q", "-m", "specs")
	return err
}

// Run runs request name to its receipt with the real reconciler.
func (f *Fixture) Run(ctx context.Context, name string) error {
	cfg := &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     Cluster,
		Spec:        reconciler.SourceConfig{URL: f.Repo, Branch: "main", Path: "."},
		Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: f.Repo, Branch: Branch}},
		TrustPolicy: f.TrustFile, SigningKey: f.KeyFile,
		StateDir: filepath.Join(f.Dir, "state"),
		Backends: reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, User: "nobody"}},
	}
	sec, err := reconciler.LoadSecrets(cfg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, store, err := reconciler.Build(ctx, cfg, sec, log, nil, reconciler.Options{Only: name})
	if err != nil {
		return err
	}
	defer store.Close()
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.Close(c)
	}()
	if err := r.Recover(ctx); err != nil {
		return err
	}
	if _, err := r.ReconcileOnce(ctx); err != nil {
		return err
	}
	st := r.Status()
	for _, o := range st.Objects {
		if o.Kind != specs.KindRequest || o.Name != name {
			continue
		}
		if o.Run == "" {
			return fmt.Errorf("not admitted: %+v", o.Conditions)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		rs, err := r.Wait(wctx, o.Run)
		if err != nil {
			return err
		}
		if rs.Verdict != specs.VerdictPass {
			return fmt.Errorf("verdict %s", rs.Verdict)
		}
		return nil
	}
	return fmt.Errorf("request %s not in the status", name)
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
