// Package reconciled builds an evidencetest.Fixture by running the real
// reconciler: a spec repository with an approved local profile and
// requests, each run through admission, local checks, evidence and
// receipt. It is for the tests that cross-check the writer against the
// auditor; the auditor's own tests use evidencetest.Build, which needs no
// reconciler.
package reconciled

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/reconciler"
	_ "signet.dev/signet/reconciler/local" // the family the fixture's config enables
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

const script = `#!/bin/sh
# signet check: always passes, and says so on stdout.
printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass","summary":"ok"}\n' \
	"$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" >"$SIGNET_RESULT_FILE"
echo "check $SIGNET_CHECK_NAME of $SIGNET_RUN_ID passed"
exit 0
`

// Build makes a fixture under dir and runs each of runs (request names)
// to its receipt, one after the other.
func Build(ctx context.Context, dir string, runs ...string) (*evidencetest.Fixture, error) {
	f, err := evidencetest.NewFixture(dir)
	if err != nil {
		return nil, err
	}
	f.Repo = filepath.Join(dir, "spec")
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
	if err := writeSpecs(f, runs); err != nil {
		return nil, err
	}
	for _, run := range runs {
		if err := Run(ctx, f, run); err != nil {
			return nil, fmt.Errorf("run %s: %w", run, err)
		}
		f.Runs = append(f.Runs, run)
	}
	return f, nil
}

func writeSpecs(f *evidencetest.Fixture, runs []string) error {
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
	if _, err := evidencetest.Git(f.Repo, nil, "init", "-q", "-b", "main"); err != nil {
		return err
	}
	if _, err := evidencetest.Git(f.Repo, nil, "add", "-A"); err != nil {
		return err
	}
	_, err = evidencetest.Git(f.Repo, nil, "commit", "-q", "-m", "specs")
	return err
}

// Run runs request name of f's spec repository to its receipt with the
// real reconciler.
func Run(ctx context.Context, f *evidencetest.Fixture, name string) error {
	cfg := &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     evidencetest.Cluster,
		Spec:        reconciler.SourceConfig{URL: f.Repo, Branch: "main", Path: "."},
		Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: f.Repo, Branch: evidencetest.Branch}},
		TrustPolicy: f.TrustFile, SigningKey: f.KeyFile,
		StateDir: filepath.Join(f.Dir, "state"),
		Backends: reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true}},
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
