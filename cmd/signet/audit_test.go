package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/pagetable"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/evidencetest/reconciled"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

var (
	fixtureOnce sync.Once
	fixture     *evidencetest.Fixture
	fixtureErr  error
	fixtureDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

// evidenceFixture is one evidence branch written by the real reconciler
// (runs run-a and run-b of a two-check local profile), built once. It is
// the writer/auditor cross-check: the auditor's own tests build branches
// without the reconciler (evidencetest.Build), and TestAuditTamper's
// "clean" case requires the real reconciler's branch to audit clean.
func evidenceFixture(t *testing.T) *evidencetest.Fixture {
	t.Helper()
	fixtureOnce.Do(func() {
		fixtureDir, fixtureErr = os.MkdirTemp("", "signet-audit-fixture-")
		if fixtureErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		fixture, fixtureErr = reconciled.Build(ctx, fixtureDir, "run-a", "run-b")
	})
	require.NoError(t, fixtureErr)
	return fixture
}

// auditJSON runs signet audit -o json and decodes its report.
func auditJSON(t *testing.T, args ...string) (*audit.Report, int, string) {
	t.Helper()
	out, stderr, code := runSigningCLI(t, append([]string{"audit", "-o", "json"}, args...)...)
	var rep audit.Report
	if code < 2 {
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out+stderr)
	}
	return &rep, code, stderr
}

func hasFinding(rep *audit.Report, rule, run, p string) bool {
	for _, f := range rep.Findings {
		if f.Rule == rule && (run == "" || f.Run == run) && (p == "" || f.Path == p) {
			return true
		}
	}
	return false
}

// TestAuditTamper: every way of tampering with the evidence branch makes
// signet audit exit 1 with a finding that names the rule, the run and
// the path; the untouched branch exits 0.
func TestAuditTamper(t *testing.T) {
	auditorTrust, auditorKey := auditorPolicy(t, evidenceFixture(t))
	f := evidenceFixture(t)
	other, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(t, err)
	runDir := func(c *evidencetest.Copy, run string) string {
		p, err := c.Find("runs/", "/"+run+"/admission.json")
		require.NoError(t, err)
		return path.Dir(p)
	}
	read := func(c *evidencetest.Copy, p string) []byte {
		b, err := c.Read("refs/heads/"+evidencetest.Branch, p)
		require.NoError(t, err)
		return b
	}
	landed := func(c *evidencetest.Copy, p string) string {
		h, err := c.Landed(p)
		require.NoError(t, err)
		return h
	}
	resign := func(b []byte, k *signing.PrivateKey, edit func(map[string]any)) []byte {
		out, err := evidencetest.Resign(b, k, edit)
		require.NoError(t, err)
		return out
	}
	link := func(run, receiptPath string, receipt []byte) []byte {
		b, err := json.Marshal(evidence.ChainLink{Run: run, Receipt: evidence.FileRef{Path: receiptPath, Digest: specs.DigestOf(receipt)}})
		require.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		name string
		// tamper returns the flags to add, the rule, run and path expected.
		tamper func(t *testing.T, c *evidencetest.Copy) (flags []string, rule, run, path string)
	}{
		{"clean", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			return nil, "", "", ""
		}},
		{"document changed in a later commit", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-a") + "/checks/00-first.json"
			changed := resign(read(c, p), f.Reconciler, func(pred map[string]any) { pred["reason"] = "rewritten later" })
			_, err := c.Append(map[string][]byte{p: changed})
			require.NoError(t, err)
			return nil, audit.RuleAppendOnly, "run-a", p
		}},
		{"document deleted", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-b") + "/receipt.json"
			_, err := c.Append(map[string][]byte{p: nil})
			require.NoError(t, err)
			return nil, audit.RuleAppendOnly, "run-b", p
		}},
		{"forged signature", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-a") + "/checks/01-second.intent.json"
			forged, err := evidencetest.FlipSignature(read(c, p))
			require.NoError(t, err)
			_, err = c.Rewrite(landed(c, p), map[string][]byte{p: forged})
			require.NoError(t, err)
			return nil, audit.RuleSignature, "run-a", p
		}},
		{"signed by a key outside the trust policy", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-a") + "/checks/01-second.json"
			_, err := c.Rewrite(landed(c, p), map[string][]byte{p: resign(read(c, p), other, nil)})
			require.NoError(t, err)
			return nil, audit.RuleUntrustedSigner, "run-a", p
		}},
		{"receipt evidence digest does not match", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-b") + "/receipt.json"
			rc := resign(read(c, p), f.Reconciler, func(pred map[string]any) {
				pred["evidence"].(map[string]any)["digest"] = string(specs.DigestOf([]byte("other evidence")))
			})
			lp := evidence.ChainPath(evidencetest.Cluster, 2)
			_, err := c.Rewrite(landed(c, p), map[string][]byte{p: rc, lp: link("run-b", p, rc)})
			require.NoError(t, err)
			return nil, audit.RuleDigestBinding, "run-b", p
		}},
		{"receipt chain with a gap", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-b") + "/receipt.json"
			rc := resign(read(c, p), f.Reconciler, func(pred map[string]any) { pred["sequence"] = 3 })
			_, err := c.Rewrite(landed(c, p), map[string][]byte{
				p: rc, evidence.ChainPath(evidencetest.Cluster, 2): nil, evidence.ChainPath(evidencetest.Cluster, 3): link("run-b", p, rc),
			})
			require.NoError(t, err)
			return nil, audit.RuleReceiptChain, "", evidence.ChainPath(evidencetest.Cluster, 2)
		}},
		{"receipt chain with a fork", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-b") + "/receipt.json"
			rc := resign(read(c, p), f.Reconciler, func(pred map[string]any) {
				pred["sequence"] = 1
				delete(pred, "previous")
			})
			_, err := c.Rewrite(landed(c, p), map[string][]byte{p: rc, evidence.ChainPath(evidencetest.Cluster, 2): link("run-b", p, rc)})
			require.NoError(t, err)
			return nil, audit.RuleReceiptChain, "run-b", p
		}},
		{"history rewritten and force-pushed", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			pinned, err := c.Tip()
			require.NoError(t, err)
			commits, err := c.Commits()
			require.NoError(t, err)
			// Drop the last receipt's commit and write another one: a
			// clean-looking history that no longer holds the pinned tip.
			p := runDir(c, "run-b") + "/receipt.json"
			_, err = c.Rewrite(commits[len(commits)-1], map[string][]byte{p: read(c, p)})
			require.NoError(t, err)
			_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, commits[len(commits)-2])
			require.NoError(t, err)
			return []string{"--since", pinned}, audit.RuleHistoryRewritten, "", ""
		}},
		{"admission backed by an approval of a key that may not approve", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			p := runDir(c, "run-a") + "/" + evidence.AdmissionFile
			ap, err := c.Find("/run-a/approvals/")
			require.NoError(t, err)
			forged := resign(read(c, ap), other, nil)
			adm := resign(read(c, p), f.Reconciler, func(pred map[string]any) {
				pred["approvals"].([]any)[0].(map[string]any)["digest"] = string(specs.DigestOf(forged))
			})
			_, err = c.Rewrite(landed(c, p), map[string][]byte{ap: forged, p: adm})
			require.NoError(t, err)
			return nil, audit.RuleApproval, "run-a", p
		}},
		{"run evidence says Pass where a check failed", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			dir := runDir(c, "run-b")
			cp, evp, rcp := dir+"/checks/01-second.json", dir+"/"+evidence.EvidenceFile, dir+"/"+evidence.ReceiptFile
			failed := resign(read(c, cp), f.Reconciler, func(pred map[string]any) {
				pred["verdict"] = "Fail"
				pred["participants"].([]any)[0].(map[string]any)["verdict"] = "Fail"
			})
			// The run evidence still says Pass and binds the failed check.
			ev := resign(read(c, evp), f.Reconciler, func(pred map[string]any) {
				pred["checks"].([]any)[1].(map[string]any)["evidence"].(map[string]any)["digest"] = string(specs.DigestOf(failed))
			})
			rc := resign(read(c, rcp), f.Reconciler, func(pred map[string]any) {
				pred["evidence"].(map[string]any)["digest"] = string(specs.DigestOf(ev))
			})
			_, err := c.Rewrite(landed(c, cp), map[string][]byte{cp: failed, evp: ev, rcp: rc, evidence.ChainPath(evidencetest.Cluster, 2): link("run-b", rcp, rc)})
			require.NoError(t, err)
			return nil, audit.RuleRunSummary, "run-b", evp
		}},
		{"run evidence lists a node verdict its checks do not imply", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			dir := runDir(c, "run-b")
			evp, rcp := dir+"/"+evidence.EvidenceFile, dir+"/"+evidence.ReceiptFile
			ev := resign(read(c, evp), f.Reconciler, func(pred map[string]any) {
				pred["nodes"].([]any)[0].(map[string]any)["verdict"] = "Fail"
			})
			rc := resign(read(c, rcp), f.Reconciler, func(pred map[string]any) {
				pred["evidence"].(map[string]any)["digest"] = string(specs.DigestOf(ev))
				pred["retained"], pred["released"] = pred["released"], []any{}
			})
			_, err := c.Rewrite(landed(c, evp), map[string][]byte{evp: ev, rcp: rc, evidence.ChainPath(evidencetest.Cluster, 2): link("run-b", rcp, rc)})
			require.NoError(t, err)
			return nil, audit.RuleRunSummary, "run-b", evp
		}},
		{"document copied from another run's directory", func(t *testing.T, c *evidencetest.Copy) ([]string, string, string, string) {
			from := runDir(c, "run-a") + "/checks/00-first.intent.json"
			p := runDir(c, "run-b") + "/checks/00-first.intent.json"
			_, err := c.Rewrite(landed(c, p), map[string][]byte{p: read(c, from)})
			require.NoError(t, err)
			return nil, audit.RuleCopiedDocument, "run-b", p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			flags, rule, run, p := tc.tamper(t, c)
			rep, code, stderr := auditJSON(t, append([]string{"--repo", c.Dir, "--trust", f.TrustFile}, flags...)...)
			if rule == "" {
				require.Equal(t, 0, code, "%v\n%s", rep.Findings, stderr)
				assert.Empty(t, rep.Findings)
				assert.Len(t, rep.Runs, 2)
				return
			}
			require.Equal(t, 1, code, stderr)
			t.Log("\n" + findingLines(rep))
			assert.True(t, hasFinding(rep, rule, run, p), "want %s run %q path %q, got:\n%s", rule, run, p, findingLines(rep))
			// The text output names the same rule, run and path.
			out, _, code := runSigningCLI(t, append([]string{"audit", "--repo", c.Dir, "--trust", f.TrustFile}, flags...)...)
			assert.Equal(t, 1, code)
			assert.Contains(t, out, rule)
			assert.Contains(t, out, p)
			// A chain of incremental audits, each from the checkpoint of
			// the last clean one, reports the same at every commit.
			agreeIncrementally(t, c, auditorTrust, auditorKey, flags)
		})
	}
}

// auditorPolicy writes a trust policy of fixture f with an auditor key
// added, and returns the policy file and the key's file.
func auditorPolicy(t *testing.T, f *evidencetest.Fixture) (trust, key string) {
	t.Helper()
	dir := t.TempDir()
	_, stderr, code := runSigningCLI(t, "keygen", "--out", filepath.Join(dir, "auditor"), "--algorithm", "ed25519")
	require.Equal(t, 0, code, stderr)
	pub, err := os.ReadFile(filepath.Join(dir, "auditor.pub"))
	require.NoError(t, err)
	auditorPub, err := signing.ParsePublicKeyPEM(pub)
	require.NoError(t, err)
	policy, err := signing.NewTrustPolicy("fixture", signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(f.Approver.Public()), signing.KeySpec(f.Reconciler.Public()), signing.KeySpec(auditorPub)},
		Approvers:       []string{f.Approver.KeyID()},
		EvidenceSigners: []string{f.Reconciler.KeyID()},
		Auditors:        []string{auditorPub.KeyID()},
	})
	require.NoError(t, err)
	y, err := policy.MarshalYAML()
	require.NoError(t, err)
	trust = filepath.Join(dir, "trust.yaml")
	require.NoError(t, os.WriteFile(trust, y, 0o600))
	return trust, filepath.Join(dir, "auditor.key")
}

// agreeIncrementally moves c's branch to each commit of its first-parent
// history in turn and requires signet audit from the checkpoint of the
// last clean audit (--checkpoint, its pages beside it) to report the
// findings and exit status of the full audit there, each clean one
// writing the next checkpoint. A branch whose every commit has a finding
// has no checkpoint to start from: each audit is then full.
func agreeIncrementally(t *testing.T, c *evidencetest.Copy, trust, key string, flags []string) {
	t.Helper()
	commits, err := c.Commits()
	require.NoError(t, err)
	tip := commits[len(commits)-1]
	defer func() { _, _ = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, tip) }()
	base := append([]string{"--repo", c.Dir, "--trust", trust}, flags...)
	dir := t.TempDir()
	checkpoint, used := "", 0
	for i, h := range commits {
		_, err := c.Git("update-ref", "refs/heads/"+evidencetest.Branch, h)
		require.NoError(t, err)
		full, code, stderr := auditJSON(t, base...)
		require.Less(t, code, 2, stderr)
		next := filepath.Join(dir, fmt.Sprintf("%d.ckpt", i))
		args := append([]string{"--write-checkpoint", next, "--checkpoint-key", key}, base...)
		if checkpoint != "" {
			args = append(args, "--checkpoint", checkpoint)
			used++
		}
		incr, icode, stderr := auditJSON(t, args...)
		require.Equal(t, code, icode, "commit %d: exit status\n%s", i, stderr)
		require.Equal(t, full.Findings, incr.Findings, "commit %d %s: the incremental audit disagrees with the full one", i, h)
		if icode == 0 {
			checkpoint = next
		}
	}
	if checkpoint == "" {
		t.Logf("no commit audits clean (the tamper is in the first, or --since pins another history): every audit was full")
		return
	}
	require.Positive(t, used, "no audit started from a checkpoint")
}

func findingLines(rep *audit.Report) string {
	s := ""
	for _, f := range rep.Findings {
		s += fmt.Sprintln(f)
	}
	return s
}

// TestAuditUsage: missing flags and unreadable inputs exit 2.
func TestAuditUsage(t *testing.T) {
	f := evidenceFixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no repo", []string{"audit", "--trust", f.TrustFile}},
		{"no trust", []string{"audit", "--repo", f.Repo}},
		{"bad output", []string{"audit", "--repo", f.Repo, "--trust", f.TrustFile, "-o", "xml"}},
		{"missing repo", []string{"audit", "--repo", filepath.Join(t.TempDir(), "nope"), "--trust", f.TrustFile}},
		{"missing branch", []string{"audit", "--repo", f.Repo, "--branch", "nope", "--trust", f.TrustFile}},
		{"missing trust file", []string{"audit", "--repo", f.Repo, "--trust", filepath.Join(t.TempDir(), "nope.yaml")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runSigningCLI(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
		})
	}
}

// TestFinding6AuditPinnedTips: an audit without --since used to call a
// rolled-back branch clean and gave the auditor nothing to pin. A clean
// audit now ends with the tip and its committer time to pin (text and
// JSON); --since takes a pins file of tips per branch, and a branch that
// does not descend from its pinned tip is a finding.
func TestFinding6AuditPinnedTips(t *testing.T) {
	f := evidenceFixture(t)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	tip, err := c.Tip()
	require.NoError(t, err)
	when, err := c.CommitTime(tip)
	require.NoError(t, err)
	base := []string{"--repo", c.Dir, "--trust", f.TrustFile}

	rep, code, stderr := auditJSON(t, base...)
	require.Equal(t, 0, code, stderr)
	require.NotNil(t, rep.Pin, "a clean audit gives the tip to pin")
	assert.Equal(t, audit.Pin{Branch: evidencetest.Branch, Commit: tip, Committed: when.UTC()}, *rep.Pin)
	out, _, code := runSigningCLI(t, append([]string{"audit"}, base...)...)
	require.Equal(t, 0, code)
	line := fmt.Sprintf("pin: %s %s %s\n", evidencetest.Branch, tip, when.UTC().Format(time.RFC3339))
	assert.True(t, strings.HasSuffix(out, "audit: clean\n"+line), "the text ends with the pin:\n%s", out)

	pins := filepath.Join(t.TempDir(), "pins")
	require.NoError(t, os.WriteFile(pins, []byte("# tips pinned after clean audits\n"+strings.TrimPrefix(line, "pin: ")+
		"other/evidence "+strings.Repeat("0", 40)+"\n"), 0o600))
	rep, code, stderr = auditJSON(t, append(base, "--since", pins)...)
	require.Equal(t, 0, code, "%v %s", rep.Findings, stderr)
	assert.Equal(t, tip, rep.Since)

	commits, err := c.Commits()
	require.NoError(t, err)
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, commits[len(commits)-3])
	require.NoError(t, err)
	rep, code, stderr = auditJSON(t, append(base, "--since", pins)...)
	require.Equal(t, 1, code, stderr)
	assert.True(t, hasFinding(rep, audit.RuleHistoryRewritten, "", ""), "got:\n%s", findingLines(rep))
	assert.Nil(t, rep.Pin, "nothing to pin after findings")

	for name, text := range map[string]string{
		"branch not pinned": "other/evidence " + strings.Repeat("0", 40) + "\n",
		"short commit":      evidencetest.Branch + " " + tip[:12] + "\n",
		"pinned twice":      evidencetest.Branch + " " + tip + "\n" + evidencetest.Branch + " " + tip + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "pins")
			require.NoError(t, os.WriteFile(bad, []byte(text), 0o600))
			_, stderr, code := runSigningCLI(t, append([]string{"audit", "--since", bad}, base...)...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, bad)
		})
	}
}

// TestAuditCheckpoint: a clean audit writes a checkpoint signed by an
// auditor key; the next audit starts from it and reads only what came
// after; a checkpoint that does not verify is exit 2, never clean; a key
// outside spec.auditors cannot write one.
func TestAuditCheckpoint(t *testing.T) {
	defer pagetable.SetPageSize(128)() // many pages from a small branch
	f := evidenceFixture(t)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	commits, err := c.Commits()
	require.NoError(t, err)
	trust, auditorKey := auditorPolicy(t, f)
	base := []string{"--repo", c.Dir, "--trust", trust}
	ckpt := filepath.Join(t.TempDir(), "audit.ckpt")

	// The branch one commit before its tip, audited in full.
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, commits[len(commits)-2])
	require.NoError(t, err)
	out, stderr, code := runSigningCLI(t, append([]string{"audit", "--write-checkpoint", ckpt, "--checkpoint-key", auditorKey}, base...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "checkpoint: "+ckpt+"\n")
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, commits[len(commits)-1])
	require.NoError(t, err)

	rep, code, stderr := auditJSON(t, append(base, "--checkpoint", ckpt)...)
	require.Equal(t, 0, code, stderr)
	require.NotNil(t, rep.From)
	assert.Equal(t, commits[len(commits)-2], rep.From.Tip)
	assert.Equal(t, 1, rep.Commits, "only the commit after the checkpoint is read")
	assert.Equal(t, commits[len(commits)-1], rep.Pin.Commit)

	t.Run("state pages", func(t *testing.T) {
		// The checkpoint's state pages are beside it, in ckpt.pages: the
		// next checkpoint links the pages it keeps, and one written over
		// its predecessor leaves only its own.
		listed := func(file string) map[string]bool {
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			digests, err := audit.CheckpointPages(b, &pagetable.DirStore{Dir: file + ".pages"})
			require.NoError(t, err)
			out := map[string]bool{}
			for _, d := range digests {
				out[d] = true
			}
			return out
		}
		inDir := func(dir string) map[string]bool {
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			out := map[string]bool{}
			for _, e := range entries {
				out[e.Name()] = true
			}
			return out
		}
		require.Equal(t, listed(ckpt), inDir(ckpt+".pages"))
		next := filepath.Join(t.TempDir(), "next.ckpt")
		_, stderr, code := runSigningCLI(t, append([]string{"audit", "--checkpoint", ckpt, "--write-checkpoint", next, "--checkpoint-key", auditorKey}, base...)...)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, listed(next), inDir(next+".pages"))
		kept, linked := 0, 0
		for d := range listed(next) {
			if listed(ckpt)[d] {
				a, err := os.Stat(filepath.Join(ckpt+".pages", d))
				require.NoError(t, err)
				b, err := os.Stat(filepath.Join(next+".pages", d))
				require.NoError(t, err)
				kept++
				if os.SameFile(a, b) {
					linked++ // else a rewritten page that came out the same
				}
			}
		}
		t.Logf("the next checkpoint keeps %d of its %d pages, %d of them linked", kept, len(listed(next)), linked)
		require.Positive(t, linked, "the next checkpoint linked no page of its predecessor")
		rep, code, stderr := auditJSON(t, append(base, "--checkpoint", next)...)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, 0, rep.Commits)

		// Over itself: the pages it replaced go.
		again := filepath.Join(t.TempDir(), "again.ckpt")
		require.NoError(t, os.CopyFS(again+".pages", os.DirFS(ckpt+".pages")))
		b, err := os.ReadFile(ckpt)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(again, b, 0o600))
		_, stderr, code = runSigningCLI(t, append([]string{"audit", "--checkpoint", again, "--write-checkpoint", again, "--checkpoint-key", auditorKey}, base...)...)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, listed(again), inDir(again+".pages"))

		// Its pages gone: refused, exit 2, naming the state pages. (A
		// page is read, and checked, when a key in it is looked up.)
		require.NoError(t, os.RemoveAll(again+".pages"))
		out, stderr, code := runSigningCLI(t, append([]string{"audit", "--checkpoint", again}, base...)...)
		assert.Equal(t, 2, code, stderr)
		assert.NotContains(t, out, "audit: clean")
		assert.Contains(t, stderr, "--checkpoint: evidence: audit checkpoint refused: "+again+": state.pages: ")
	})
	t.Run("tampered checkpoint", func(t *testing.T) {
		b, err := os.ReadFile(ckpt)
		require.NoError(t, err)
		var env signing.Envelope
		require.NoError(t, json.Unmarshal(b, &env))
		env.Payload = "AAAA" + env.Payload[4:]
		bad, err := json.Marshal(env)
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "bad.ckpt")
		require.NoError(t, os.WriteFile(file, bad, 0o600))
		out, stderr, code := runSigningCLI(t, append([]string{"audit", "--checkpoint", file}, base...)...)
		assert.Equal(t, 2, code, stderr)
		assert.NotContains(t, out, "audit: clean")
		assert.Contains(t, stderr, "--checkpoint: evidence: audit checkpoint refused: "+file+": ")
	})
	t.Run("key outside spec.auditors", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "x.ckpt")
		_, stderr, code := runSigningCLI(t, append([]string{"audit", "--write-checkpoint", file, "--checkpoint-key", f.KeyFile}, base...)...)
		assert.Equal(t, 2, code, stderr)
		assert.Contains(t, stderr, "is not in the trust policy's spec.auditors")
		assert.NoFileExists(t, file)
	})
	t.Run("write without a key", func(t *testing.T) {
		_, stderr, code := runSigningCLI(t, append([]string{"audit", "--write-checkpoint", filepath.Join(t.TempDir(), "x.ckpt")}, base...)...)
		assert.Equal(t, 2, code, stderr)
	})
}

// TestAuditProgress: with --progress-interval an audit says on stderr
// where it is, phase by phase, and stdout stays the report a machine
// reads; by default a quick audit prints no progress at all, and a
// negative interval is a usage error naming the flag. The report command
// takes the same flag.
func TestAuditProgress(t *testing.T) {
	f := evidenceFixture(t)
	base := []string{"--repo", f.Repo, "--trust", f.TrustFile}

	rep, code, stderr := auditJSON(t, append(base, "--progress-interval", "1ns")...)
	require.Equal(t, 0, code, stderr)
	assert.NotEmpty(t, rep.Runs, "stdout is still the JSON report")
	var lines []string
	for line := range strings.Lines(stderr) {
		if strings.HasPrefix(line, "audit: ") {
			lines = append(lines, line)
		}
	}
	require.Len(t, lines, 3, "one line per phase of a branch under %d commits:\n%s", audit.ProgressEvery, stderr)
	assert.Contains(t, lines[0], "audit: reading the history: 0 commits back from the tip (")
	assert.Contains(t, lines[1], fmt.Sprintf("audit: checking commit 0 of %d (0%%), 0 finished runs checked (", rep.Commits))
	assert.Contains(t, lines[2], "audit: whole-branch checks, ")

	_, stderr, code = runSigningCLI(t, append([]string{"audit"}, base...)...)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "audit: ", "a quick audit printed progress under the default interval")

	for _, args := range [][]string{{"audit"}, {"report", "--out", t.TempDir()}} {
		_, stderr, code = runSigningCLI(t, append(append(args, "--progress-interval", "-1s"), base...)...)
		assert.Equal(t, 2, code, stderr)
		assert.Contains(t, stderr, "--progress-interval -1s: want 0 (never) or a positive duration", args[0])
	}
	_, stderr, code = runSigningCLI(t, append([]string{"report", "--out", t.TempDir(), "--progress-interval", "1ns"}, base...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "audit: whole-branch checks, ", "signet report shows its audit's progress")
}
