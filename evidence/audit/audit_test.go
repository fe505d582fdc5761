package audit_test

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// moduleRoot walks up from the test's directory to the directory holding
// go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test directory")
		dir = parent
	}
}

func findings(rep *audit.Report, rule string) []audit.Finding {
	var out []audit.Finding
	for _, f := range rep.Findings {
		if f.Rule == rule {
			out = append(out, f)
		}
	}
	return out
}

// TestAuditBranch builds one evidence branch with the real reconciler
// (two runs of a two-check local profile) and checks it with signet's
// audit, verify and status, and with stock git and cosign.
func TestAuditBranch(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	ctx := t.Context()
	tip := evidencetest.Branch

	t.Run("clean", func(t *testing.T) {
		rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings)
		require.Len(t, rep.Runs, 2)
		for i, r := range rep.Runs {
			assert.Equal(t, f.Runs[i], r.Run)
			assert.Equal(t, evidence.PhaseDone, r.Phase)
			assert.Equal(t, specs.VerdictPass, r.Verdict)
			assert.Equal(t, int64(i+1), r.ReceiptSequence)
			assert.Equal(t, []string{f.Reconciler.KeyID()}, r.Signers)
			assert.Equal(t, []string{f.Approver.KeyID()}, r.Approvers)
			require.Len(t, r.Checks, 2)
			for _, c := range r.Checks {
				assert.Equal(t, specs.VerdictPass, c.Verdict)
			}
		}
		// Per run: admission, an intent and evidence per check, run
		// evidence, receipt, and the copied approval.
		assert.Equal(t, 2*8, rep.Documents)
	})

	t.Run("remote URL", func(t *testing.T) {
		rep, err := audit.Branch(ctx, audit.Options{Repo: "file://" + f.Repo, Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings)
		assert.Len(t, rep.Runs, 2)
	})

	t.Run("rewritten history through a remote URL", func(t *testing.T) {
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		pinned, err := c.Tip()
		require.NoError(t, err)
		commits, err := c.Commits()
		require.NoError(t, err)
		// Force the branch back one commit: the pinned tip is gone.
		_, err = c.Git("update-ref", "refs/heads/"+tip, commits[len(commits)-2])
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: "file://" + c.Dir, Policy: f.Policy, Since: pinned})
		require.NoError(t, err)
		got := findings(rep, audit.RuleHistoryRewritten)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Equal(t, pinned, got[0].Commit)
		// Pinned at an ancestor, the same branch is fine.
		rep, err = audit.Branch(ctx, audit.Options{Repo: "file://" + c.Dir, Policy: f.Policy, Since: commits[1]})
		require.NoError(t, err)
		assert.Empty(t, findings(rep, audit.RuleHistoryRewritten))
	})

	t.Run("git fsck --strict", func(t *testing.T) {
		out, err := evidencetest.Git(f.Repo, nil, "fsck", "--strict", "--no-progress", "--no-dangling")
		require.NoError(t, err, out)
	})

	t.Run("git verify-commit", func(t *testing.T) {
		allowed := filepath.Join(t.TempDir(), "allowed_signers")
		line := `reconciler namespaces="git" ` + f.Reconciler.Public().SSHAuthorizedKey() + "\n"
		require.NoError(t, os.WriteFile(allowed, []byte(line), 0o600))
		revs, err := evidencetest.Git(f.Repo, nil, "rev-list", tip)
		require.NoError(t, err)
		commits := strings.Fields(revs)
		require.NotEmpty(t, commits)
		for _, c := range commits {
			out, err := evidencetest.Git(f.Repo, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", c)
			assert.NoError(t, err, "commit %s: %s", c, out)
		}
		// Another key's allowed-signers file refuses them.
		other := filepath.Join(t.TempDir(), "other_signers")
		require.NoError(t, os.WriteFile(other, []byte(`reconciler namespaces="git" `+f.Approver.Public().SSHAuthorizedKey()+"\n"), 0o600))
		_, err = evidencetest.Git(f.Repo, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+other, "verify-commit", commits[0])
		assert.Error(t, err)
	})

	t.Run("cosign verify-blob-attestation", func(t *testing.T) {
		cosign := filepath.Join(moduleRoot(t), "bin", "cosign")
		if _, err := os.Stat(cosign); err != nil {
			t.Fatalf("%s is missing: run make tools (hack/tools.sh builds cosign from its Go module)", cosign)
		}
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		dir := t.TempDir()
		files, err := c.Files()
		require.NoError(t, err)
		var runDirs []string
		for _, p := range files {
			if path.Base(p) == evidence.AdmissionFile {
				runDirs = append(runDirs, path.Dir(p))
			}
		}
		require.Len(t, runDirs, 2)
		write := func(name string, b []byte) string {
			p := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(p, b, 0o600))
			return p
		}
		nodeOf := func(runDir string) []byte {
			for _, p := range files {
				if strings.HasPrefix(p, runDir+"/nodes/") {
					b, err := c.Read("refs/heads/"+tip, p)
					require.NoError(t, err)
					return b
				}
			}
			t.Fatalf("no node snapshot in %s", runDir)
			return nil
		}
		ev, err := c.Read("refs/heads/"+tip, runDirs[0]+"/evidence.json")
		require.NoError(t, err)
		sig := write("evidence.json", ev)
		pub := write("key.pub", f.Reconciler.Public().MarshalPEM())
		own := write("node.json", nodeOf(runDirs[0]))
		other := write("other-node.json", nodeOf(runDirs[1]))
		run := func(blob string) (string, error) {
			cmd := exec.CommandContext(ctx, cosign, "verify-blob-attestation", "--key", pub, "--signature", sig,
				"--type", evidence.PredicateEvidence, "--insecure-ignore-tlog=true", blob)
			cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			return out.String(), err
		}
		out, err := run(own)
		require.NoError(t, err, out)
		assert.Contains(t, out, "Verified OK")
		// Another run's snapshot of the same node is not covered.
		out, err = run(other)
		assert.Error(t, err, out)
		assert.Contains(t, out, "no matching subject digest found")
	})

	t.Run("verify", func(t *testing.T) {
		for _, run := range f.Runs {
			rep, err := audit.Verify(ctx, audit.VerifyOptions{Repo: f.Repo, Run: run, Policy: f.Policy})
			require.NoError(t, err)
			assert.Empty(t, rep.Findings)
			assert.Equal(t, specs.VerdictPass, rep.Verdict)
			assert.Equal(t, evidencetest.Cluster, rep.Cluster)
			require.NotEmpty(t, rep.Bindings)
			for _, b := range rep.Bindings {
				assert.True(t, b.OK, "%+v", b)
			}
			require.Len(t, rep.Nodes, 1)
			assert.Equal(t, specs.VerdictPass, rep.Nodes[0].Verdict)
		}
		_, err := audit.Verify(ctx, audit.VerifyOptions{Repo: f.Repo, Run: "no-such-run", Policy: f.Policy})
		assert.ErrorIs(t, err, audit.ErrRunNotFound)
		_, err = audit.Verify(ctx, audit.VerifyOptions{Repo: f.Repo, Run: "run-a", Cluster: "elsewhere", Policy: f.Policy})
		assert.ErrorIs(t, err, audit.ErrRunNotFound)
	})

	t.Run("verify finds a forged signature in the run", func(t *testing.T) {
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		p, err := c.Find("/run-b/checks/00-first.json")
		require.NoError(t, err)
		b, err := c.Read("refs/heads/"+tip, p)
		require.NoError(t, err)
		forged, err := evidencetest.FlipSignature(b)
		require.NoError(t, err)
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, map[string][]byte{p: forged})
		require.NoError(t, err)
		rep, err := audit.Verify(ctx, audit.VerifyOptions{Repo: c.Dir, Run: "run-b", Policy: f.Policy})
		require.NoError(t, err)
		assert.Contains(t, rep.Findings, audit.Finding{Rule: audit.RuleSignature, Cluster: evidencetest.Cluster, Run: "run-b", Path: p,
			Commit: rep.Findings[slicesIndex(rep.Findings, p)].Commit, Message: "no signature verifies with an evidence signer of the trust policy (forged or corrupted)"})
		// The other run is untouched.
		rep, err = audit.Verify(ctx, audit.VerifyOptions{Repo: c.Dir, Run: "run-a", Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings)
	})

	t.Run("status", func(t *testing.T) {
		st, err := audit.Status(ctx, audit.StatusOptions{Repo: f.Repo})
		require.NoError(t, err)
		require.Len(t, st.Runs, 2)
		for i, r := range st.Runs {
			assert.Equal(t, f.Runs[i], r.Run)
			assert.Equal(t, evidence.PhaseDone, r.Phase)
			assert.Equal(t, specs.VerdictPass, r.Verdict)
			assert.Equal(t, int64(i+1), r.ReceiptSequence)
			assert.Empty(t, r.Problem)
		}
		require.Len(t, st.Nodes, 1)
		assert.Equal(t, "run-b", st.Nodes[0].Run, "the latest run gives the node's verdict")
		assert.Equal(t, specs.VerdictPass, st.Nodes[0].Verdict)
		st, err = audit.Status(ctx, audit.StatusOptions{Repo: f.Repo, Cluster: "elsewhere"})
		require.NoError(t, err)
		assert.Empty(t, st.Runs)
	})

	t.Run("incomplete run", func(t *testing.T) {
		// Rewrite history as if run-b's receipt were never written.
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		p, err := c.Find("/run-b/receipt.json")
		require.NoError(t, err)
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, map[string][]byte{p: nil, evidence.ChainPath(evidencetest.Cluster, 2): nil})
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings, "inside its deadline a run without a receipt is in progress")
		rep, err = audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: f.Policy, Now: time.Now().Add(24 * time.Hour)})
		require.NoError(t, err)
		got := findings(rep, audit.RuleIncompleteRun)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Equal(t, "run-b", got[0].Run)
		assert.Equal(t, evidence.PhaseEvidence, rep.Runs[1].Phase)
	})

	t.Run("lifecycle order", func(t *testing.T) {
		// Without check 0's evidence, the intent of check 1 has no
		// predecessor.
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		p, err := c.Find("/run-a/checks/00-first.json")
		require.NoError(t, err)
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, map[string][]byte{p: nil})
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: f.Policy})
		require.NoError(t, err)
		got := findings(rep, audit.RuleLifecycleOrder)
		require.NotEmpty(t, got, "%v", rep.Findings)
		assert.Equal(t, "run-a", got[0].Run)
		assert.True(t, strings.HasSuffix(got[0].Path, "checks/01-second.intent.json"), got[0].Path)
	})

	t.Run("key outside its validity window", func(t *testing.T) {
		// The same branch under a policy whose evidence key was revoked
		// before the runs: every document and commit is refused.
		rk := signing.KeySpec(f.Reconciler.Public())
		rk.RevokedAt = "2020-01-01T00:00:00Z"
		p, err := signing.NewTrustPolicy("revoked", signing.TrustPolicySpec{
			Keys:            []signing.TrustedKeySpec{signing.KeySpec(f.Approver.Public()), rk},
			Approvers:       []string{f.Approver.KeyID()},
			EvidenceSigners: []string{f.Reconciler.KeyID()},
		})
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: p})
		require.NoError(t, err)
		assert.NotEmpty(t, findings(rep, audit.RuleUntrustedSigner))
		assert.NotEmpty(t, findings(rep, audit.RuleCommitSignature))
	})
}

func slicesIndex(fs []audit.Finding, p string) int {
	for i, f := range fs {
		if f.Path == p && f.Rule == audit.RuleSignature {
			return i
		}
	}
	return 0
}

// TestAuditCanceledRun: a run canceled after its first check, with the
// cancel approved and copied into the run, audits clean: the run evidence
// is Summarize's for a cancel (the second check skipped), the node retained.
func TestAuditCanceledRun(t *testing.T) {
	f, err := evidencetest.BuildRuns(t.Context(), t.TempDir(), evidencetest.Run{Name: "run-a"}, evidencetest.Run{Name: "run-b", Canceled: true})
	require.NoError(t, err)
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: f.Repo, Policy: f.Policy})
	require.NoError(t, err)
	assert.Empty(t, rep.Findings)
	require.Len(t, rep.Runs, 2)
	r := rep.Runs[1]
	assert.Equal(t, "run-b", r.Run)
	assert.True(t, r.Canceled)
	assert.Equal(t, specs.VerdictCanceled, r.Verdict)
	assert.Equal(t, evidence.PhaseDone, r.Phase)
	require.Len(t, r.Checks, 2)
	assert.False(t, r.Checks[0].Skipped)
	assert.True(t, r.Checks[1].Skipped)
	assert.Equal(t, int64(2), r.ReceiptSequence)
}

// TestAuditProgress: Options.Progress sees the phases in order (history,
// replay, whole-branch checks), the commits read counting up within each
// to the history's length, and the runs checked, never more than the
// branch has; it changes nothing in the report.
func TestAuditProgress(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	defer audit.SetProgressEvery(2)()
	defer audit.SetClosedRunBatch(1)()
	var got []audit.Progress
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: f.Repo, Policy: f.Policy, Workers: 1,
		Progress: func(p audit.Progress) { got = append(got, p) }})
	require.NoError(t, err)
	require.Empty(t, rep.Findings)
	want, err := audit.Branch(t.Context(), audit.Options{Repo: f.Repo, Policy: f.Policy, Workers: 1})
	require.NoError(t, err)
	assert.Equal(t, want.Runs, rep.Runs, "a progress callback changed the report")

	phases := []string{audit.PhaseHistory, audit.PhaseReplay, audit.PhaseBranch}
	phase, prev := 0, audit.Progress{Phase: audit.PhaseHistory, Commits: -1}
	for _, p := range got {
		if p.Phase != phases[phase] {
			phase++
			require.Less(t, phase, len(phases), "phase %q out of order in %+v", p.Phase, got)
			require.Equal(t, phases[phase], p.Phase, "%+v", got)
			prev.Commits = -1
		}
		assert.Greater(t, p.Commits, prev.Commits, "%+v", got)
		assert.GreaterOrEqual(t, p.Runs, prev.Runs, "%+v", got)
		assert.LessOrEqual(t, p.Runs, len(f.Runs))
		if p.Phase == audit.PhaseReplay {
			assert.Equal(t, rep.Commits, p.Total)
			assert.Less(t, p.Commits, p.Total)
		}
		prev = p
	}
	require.Equal(t, len(phases)-1, phase, "not every phase was reported: %+v", got)
	var history, replay int
	for _, p := range got {
		switch p.Phase {
		case audit.PhaseHistory:
			history++
		case audit.PhaseReplay:
			replay++
		}
	}
	// One call when the phase begins, then one every two commits.
	assert.Equal(t, 1+(rep.Commits-1)/2, history, "%+v", got)
	assert.Equal(t, 1+(rep.Commits-1)/2, replay, "%+v", got)
	assert.Positive(t, got[len(got)-1].Runs, "no run counted as checked")
}
