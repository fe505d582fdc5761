package audit_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
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
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// checkpointPolicy is the fixture's trust policy with auditor allowed to
// sign audit checkpoints, the reconciler's key revoked at revokedAt (none
// when zero) and after commit anchor (none when "").
func checkpointPolicy(t *testing.T, f *evidencetest.Fixture, auditor *signing.PrivateKey, revokedAt time.Time, anchor string) *signing.TrustPolicy {
	t.Helper()
	rk := signing.KeySpec(f.Reconciler.Public())
	if !revokedAt.IsZero() {
		rk.RevokedAt = revokedAt.UTC().Format(time.RFC3339)
	}
	rk.RevokedAfterCommit = anchor
	p, err := signing.NewTrustPolicy("checkpointing", signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(f.Approver.Public()), rk, signing.KeySpec(auditor.Public())},
		Approvers:       []string{f.Approver.KeyID()},
		EvidenceSigners: []string{f.Reconciler.KeyID()},
		Auditors:        []string{auditor.KeyID()},
	})
	require.NoError(t, err)
	return p
}

func newKey(t *testing.T) *signing.PrivateKey {
	t.Helper()
	k, err := signing.GenerateKey(signing.AlgorithmEd25519)
	require.NoError(t, err)
	return k
}

// TestIncrementalAuditAgrees: on every tamper case of the audit's tests,
// a chain of incremental audits (each starting from the checkpoint of the
// last clean one, one commit further) reports at every commit of the
// first-parent history exactly the findings of the full audit of the
// branch at that commit.
func TestIncrementalAuditAgrees(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	auditor := newKey(t)
	read := func(t *testing.T, c *evidencetest.Copy, p string) []byte {
		b, err := c.Read("refs/heads/"+evidencetest.Branch, p)
		require.NoError(t, err)
		return b
	}
	find := func(t *testing.T, c *evidencetest.Copy, parts ...string) string {
		p, err := c.Find(parts...)
		require.NoError(t, err)
		return p
	}
	appendFiles := func(t *testing.T, c *evidencetest.Copy, files map[string][]byte) {
		_, err := c.Append(files)
		require.NoError(t, err)
	}
	rewrite := func(t *testing.T, c *evidencetest.Copy, p string, changes map[string][]byte) {
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, changes)
		require.NoError(t, err)
	}
	tipTime := func(t *testing.T, c *evidencetest.Copy) (string, time.Time) {
		tip, err := c.Tip()
		require.NoError(t, err)
		when, err := c.CommitTime(tip)
		require.NoError(t, err)
		return tip, when
	}
	plain := func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
		return checkpointPolicy(t, f, auditor, time.Time{}, "")
	}
	for _, tc := range []struct {
		name string
		// tamper changes the copy and returns the policy to audit it
		// under; later is how long after now the audits run.
		tamper func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy
		later  time.Duration
	}{
		{"clean", plain, 0},
		{"stray file in a finished run", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			adm := find(t, c, "/run-a/"+evidence.AdmissionFile)
			appendFiles(t, c, map[string][]byte{path.Join(path.Dir(adm), "nodes", "extra.json"): []byte(`{"node":"extra"}`)})
			return plain(t, c)
		}, 0},
		{"document of a finished run deleted", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			appendFiles(t, c, map[string][]byte{find(t, c, "/run-a/checks/00-first.json"): nil})
			return plain(t, c)
		}, 0},
		{"document of a finished run replaced", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			other := read(t, c, find(t, c, "/run-b/checks/01-second.json"))
			appendFiles(t, c, map[string][]byte{find(t, c, "/run-b/checks/00-first.json"): other})
			return plain(t, c)
		}, 0},
		{"cancel added after the receipt", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			adm := find(t, c, "/run-a/"+evidence.AdmissionFile)
			appendFiles(t, c, map[string][]byte{path.Join(path.Dir(adm), evidence.CancelFile): read(t, c, find(t, c, "/run-c/"+evidence.EvidenceFile))})
			return plain(t, c)
		}, 0},
		{"document copied from a run before the checkpoint", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			adm := find(t, c, "/run-c/"+evidence.AdmissionFile)
			appendFiles(t, c, map[string][]byte{path.Join(path.Dir(adm), "copy.json"): read(t, c, find(t, c, "/run-a/checks/00-first.json"))})
			return plain(t, c)
		}, 0},
		{"chain link forking a receipt before the checkpoint", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			p := find(t, c, "/run-a/"+evidence.ReceiptFile)
			link := fmt.Sprintf(`{"run":"run-a","receipt":{"path":%q,"digest":%q}}`, p, specs.DigestOf(read(t, c, p)))
			appendFiles(t, c, map[string][]byte{evidence.ChainPath(evidencetest.Cluster, 4): []byte(link)})
			return plain(t, c)
		}, 0},
		{"receipt naming a previous receipt before the checkpoint", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			// run-c's receipt claims sequence 4 after run-a's (sequence
			// 1): a fork with run-b's, which names run-a's too, found
			// only by asking the past which receipt names that one.
			prev := find(t, c, "/run-a/"+evidence.ReceiptFile)
			digest := specs.DigestOf(read(t, c, prev))
			p := find(t, c, "/run-c/"+evidence.ReceiptFile)
			rc, err := evidencetest.Resign(read(t, c, p), f.Reconciler, func(pred map[string]any) {
				pred["sequence"] = 4
				pred["previous"] = map[string]any{"path": prev, "digest": string(digest)}
			})
			require.NoError(t, err)
			link := fmt.Sprintf(`{"run":"run-c","receipt":{"path":%q,"digest":%q}}`, p, specs.DigestOf(rc))
			// Its link is the only one after run-b's: nothing else leads
			// the audit to run-b.
			rewrite(t, c, p, map[string][]byte{p: rc, evidence.ChainPath(evidencetest.Cluster, 3): nil, evidence.ChainPath(evidencetest.Cluster, 4): []byte(link)})
			return plain(t, c)
		}, 0},
		{"index entry of a run before the checkpoint changed", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			// run-a's entry now points at run-b: run-a has none any more,
			// which only a rule that sees the change as a whole can say.
			other := find(t, c, "/run-b/"+evidence.AdmissionFile)
			appendFiles(t, c, map[string][]byte{evidence.IndexPath(evidencetest.Cluster, "run-a"): []byte(path.Dir(other) + "\n")})
			return plain(t, c)
		}, 0},
		{"index entry of a run before the checkpoint in another shard", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			adm := find(t, c, "/run-a/"+evidence.AdmissionFile)
			appendFiles(t, c, map[string][]byte{"ids/" + evidencetest.Cluster + "/zz/run-a": []byte(path.Dir(adm) + "\n")})
			return plain(t, c)
		}, 0},
		{"forged signature", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			p := find(t, c, "/run-b/checks/00-first.json")
			forged, err := evidencetest.FlipSignature(read(t, c, p))
			require.NoError(t, err)
			rewrite(t, c, p, map[string][]byte{p: forged})
			return plain(t, c)
		}, 0},
		{"receipt missing past the deadline", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			p := find(t, c, "/run-b/receipt.json")
			rewrite(t, c, p, map[string][]byte{p: nil, evidence.ChainPath(evidencetest.Cluster, 2): nil})
			return plain(t, c)
		}, 24 * time.Hour},
		{"lifecycle order", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			p := find(t, c, "/run-a/checks/00-first.json")
			rewrite(t, c, p, map[string][]byte{p: nil})
			return plain(t, c)
		}, 0},
		{"decreasing commit time", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			_, when := tipTime(t, c)
			_, err := c.AppendDated(when.Add(-time.Hour), nil)
			require.NoError(t, err)
			return checkpointPolicy(t, f, auditor, when.Add(time.Hour), "")
		}, 0},
		{"document time after its commit", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			_, when := tipTime(t, c)
			resignReceipt(t, f, c, "run-b", 2, func(commit time.Time) time.Time { return commit.Add(2 * time.Hour) })
			return checkpointPolicy(t, f, auditor, when.Add(time.Hour), "")
		}, 0},
		{"commit after the revocation anchor", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			tip, when := tipTime(t, c)
			_, err := c.AppendDated(when, nil)
			require.NoError(t, err)
			return checkpointPolicy(t, f, auditor, when.Add(time.Hour), tip)
		}, 0},
		{"documents after the revocation anchor", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			anchor, err := c.Landed(find(t, c, "/run-a/receipt.json"))
			require.NoError(t, err)
			return checkpointPolicy(t, f, auditor, time.Time{}, anchor)
		}, 0},
		{"revocation anchor not on the history", func(t *testing.T, c *evidencetest.Copy) *signing.TrustPolicy {
			return checkpointPolicy(t, f, auditor, time.Time{}, strings.Repeat("ab", 20))
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			policy := tc.tamper(t, c)
			used := agreeAtEveryCommit(t, c, policy, auditor, time.Now().Add(tc.later), tc.name != "clean")
			if tc.name != "revocation anchor not on the history" {
				assert.Positive(t, used, "no incremental audit ran")
			}
		})
	}
}

// agreeAtEveryCommit moves the copy's branch to each commit of its
// first-parent history in turn and requires a chain of incremental audits
// (each from the checkpoint of the last clean one, signed by auditor) to
// report there exactly the findings of the full audit, at now, as must a
// full audit that checks and compacts every run as soon as its receipt
// lands (its files then only in the spill file, its receipt only as its
// place in the chain); tampered:
// the full audit at the tip has findings. It returns how many incremental
// audits started from a checkpoint.
func agreeAtEveryCommit(t *testing.T, c *evidencetest.Copy, policy *signing.TrustPolicy, auditor *signing.PrivateKey, now time.Time, tampered bool) int {
	t.Helper()
	commits, err := c.Commits()
	require.NoError(t, err)
	tip := commits[len(commits)-1]
	defer func() { _, _ = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, tip) }()
	var checkpoint []byte
	var pages pagetable.Store
	used := 0
	for i, h := range commits {
		_, err := c.Git("update-ref", "refs/heads/"+evidencetest.Branch, h)
		require.NoError(t, err)
		full, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: now})
		require.NoError(t, err)
		restore := audit.SetClosedRunBatch(1)
		compacted, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: now})
		restore()
		require.NoError(t, err)
		require.Equal(t, full.Findings, compacted.Findings, "commit %d %s: the audit that compacts every run at once disagrees with the full one", i, h)
		incr, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: now,
			Checkpoint: checkpoint, CheckpointPages: pages, CheckpointName: "checkpoint.json", CheckpointKey: auditor})
		require.NoError(t, err, "commit %d", i)
		require.Equal(t, full.Findings, incr.Findings, "commit %d %s: the incremental audit disagrees with the full one", i, h)
		assert.Equal(t, full.Pin, incr.Pin, "commit %d", i)
		// As must one that compacts each run it checks at once (its
		// files then in the spill file, beside the references).
		restore = audit.SetClosedRunBatch(1)
		incrCompacted, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: now,
			Checkpoint: checkpoint, CheckpointPages: pages, CheckpointName: "checkpoint.json", CheckpointKey: auditor})
		restore()
		require.NoError(t, err, "commit %d", i)
		require.Equal(t, full.Findings, incrCompacted.Findings, "commit %d %s: the incremental audit that compacts every run at once disagrees with the full one", i, h)
		if i%2 == 1 {
			incr = incrCompacted // the next audit starts from its checkpoint: tables written from the spill file
		}
		if i == len(commits)-1 && tampered {
			require.NotEmpty(t, full.Findings, "the tamper is found at the tip")
		}
		if checkpoint != nil {
			used++
			if incr.From == nil {
				// Only a change to a file before makes it read the
				// whole branch.
				require.NotEmpty(t, incr.FullAudit, "commit %d: an audit from a checkpoint names it or why it read the whole branch", i)
				require.NotEmpty(t, findings(full, audit.RuleAppendOnly), "commit %d: the whole branch was read without a file changed", i)
			} else {
				require.Empty(t, incr.FullAudit)
			}
		}
		if incr.Clean() {
			require.NotEmpty(t, incr.Checkpoint, "a clean audit writes its checkpoint")
			checkpoint, pages = incr.Checkpoint, incr.CheckpointPages
		} else {
			require.Empty(t, incr.Checkpoint, "an audit with findings writes no checkpoint")
		}
	}
	return used
}

// TestCheckpointRefused: a checkpoint that cannot be trusted for this
// branch is an error wrapping ErrCheckpoint naming the field, never a
// report.
func TestCheckpointRefused(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	auditor := newKey(t)
	policy := checkpointPolicy(t, f, auditor, time.Time{}, "")
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	commits, err := c.Commits()
	require.NoError(t, err)
	// The checkpoint of the branch one commit before its tip.
	tip := commits[len(commits)-1]
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, commits[len(commits)-2])
	require.NoError(t, err)
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, CheckpointKey: auditor})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%v", rep.Findings)
	good, pages := rep.Checkpoint, rep.CheckpointPages
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, tip)
	require.NoError(t, err)

	// resign edits the checkpoint's predicate and signs it with key.
	resign := func(key *signing.PrivateKey, edit func(cp map[string]any)) []byte {
		b, err := evidencetest.Resign(good, key, edit)
		require.NoError(t, err)
		return b
	}
	var env signing.Envelope
	require.NoError(t, json.Unmarshal(good, &env))
	env.Payload = env.Payload[:len(env.Payload)-8] + "AAAAAAA="
	tampered, err := json.Marshal(env)
	require.NoError(t, err)
	other := checkpointPolicy(t, f, auditor, time.Now().Add(1000*time.Hour), "")
	// v1 is the checkpoint as version 1, without the firing replay's state.
	var genv signing.Envelope
	require.NoError(t, json.Unmarshal(good, &genv))
	payload, err := base64.StdEncoding.DecodeString(genv.Payload)
	require.NoError(t, err)
	var st signing.Statement
	require.NoError(t, json.Unmarshal(payload, &st))
	st.PredicateType = "https://signet.dev/AuditCheckpoint/v1"
	v1, err := signing.SignStatement(&st, auditor)
	require.NoError(t, err)

	for _, tc := range []struct {
		name       string
		checkpoint []byte
		branch     string
		policy     *signing.TrustPolicy
		rewrite    bool
		want       string
	}{
		{"signed by the evidence signer", resign(f.Reconciler, nil), "", policy, false, "checkpoint.json: signature: signed by key " + f.Reconciler.KeyID()[:12] + ", which is not allowed to sign audit checkpoints"},
		{"signed by a key outside the policy", resign(newKey(t), nil), "", policy, false, "checkpoint.json: signature: signed by key"},
		{"state tampered after signing", tampered, "", policy, false, "checkpoint.json: signature:"},
		{"state edited and re-signed by a stranger", resign(newKey(t), func(cp map[string]any) { cp["state"].(map[string]any)["runs"] = []any{} }), "", policy, false, "checkpoint.json: signature:"},
		{"other branch", resign(auditor, func(cp map[string]any) { cp["branch"] = "signet/other" }), "", policy, false, `checkpoint.json: branch: "signet/other", but the audit reads branch "signet/evidence"`},
		{"other trust policy", good, "", other, false, "checkpoint.json: trustPolicyDigest:"},
		{"tip not on the branch", good, "", policy, true, "checkpoint.json: tip: " + commits[len(commits)-2] + " is not on the first-parent history"},
		{"state that does not hold together", resign(auditor, func(cp map[string]any) {
			st := cp["state"].(map[string]any)
			files := st["files"].([]any)
			_, rest, _ := strings.Cut(files[0].(string), " ")
			files[0] = "100000 " + rest
		}), "", policy, false, `checkpoint.json: state.files line 1: landed "100000" is not a commit of the checkpoint's history`},
		{"version 1, without the firing replay's state", v1, "", policy, false, "checkpoint.json: predicateType: \"https://signet.dev/AuditCheckpoint/v1\" is a checkpoint without the state that proves standing certifications' firings"},
		{"latest run that does not decode", resign(auditor, func(cp map[string]any) {
			cp["state"].(map[string]any)["latest"] = []any{"fixture !!"}
		}), "", policy, false, "checkpoint.json: state.latest line 1: a node's run of cluster fixture does not decode"},
		{"held node that is not held", resign(auditor, func(cp map[string]any) {
			cp["state"].(map[string]any)["held"] = []any{"fixture localhost run-a lent"}
		}), "", policy, false, `checkpoint.json: state.held line 1: "fixture localhost run-a lent" is not a cluster, node, run and chosen, admitted or retained`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := c.Dir
			if tc.rewrite {
				r, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
				require.NoError(t, err)
				p, err := r.Find("/run-a/checks/00-first.json")
				require.NoError(t, err)
				at, err := r.Landed(p)
				require.NoError(t, err)
				_, err = r.Rewrite(at, map[string][]byte{p + ".extra": []byte("x")})
				require.NoError(t, err)
				repo = r.Dir
			}
			rep, err := audit.Branch(t.Context(), audit.Options{Repo: repo, Policy: tc.policy, Checkpoint: tc.checkpoint, CheckpointPages: pages, CheckpointName: "checkpoint.json"})
			require.ErrorIs(t, err, audit.ErrCheckpoint, "the checkpoint must be refused")
			assert.Nil(t, rep, "a refused checkpoint gives no report")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Its state pages: each read is checked against the digest the
	// signed checkpoint names.
	list, err := audit.CheckpointPages(good, pages)
	require.NoError(t, err)
	require.NotEmpty(t, list)
	for _, tc := range []struct {
		name  string
		pages func() pagetable.Store
		want  string
	}{
		{"state page changed", func() pagetable.Store {
			changed, n := pagetable.NewMemStore(), 0
			for _, d := range list {
				b, err := pages.Get(d)
				require.NoError(t, err)
				if c := bytes.Replace(b, []byte("\n"+"r/"), []byte("\n"+"r/x"), 1); !bytes.Equal(c, b) { // a finished run moved
					b, n = c, n+1
				}
				require.NoError(t, changed.Put(d, b))
			}
			require.Positive(t, n, "no page holds a finished run after another record")
			return changed
		}, "checkpoint.json: state.pages: pagetable: page does not match its listing"},
		{"state page missing", func() pagetable.Store { return pagetable.NewMemStore() }, "checkpoint.json: state.pages: "},
		{"no state pages given", func() pagetable.Store { return nil }, "checkpoint.json: state.pages: no store of the checkpoint's state pages was given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Checkpoint: good, CheckpointPages: tc.pages(), CheckpointName: "checkpoint.json"})
			require.ErrorIs(t, err, audit.ErrCheckpoint, "the checkpoint must be refused")
			assert.Nil(t, rep, "a refused checkpoint gives no report")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// The same checkpoint, untouched, is used.
	rep, err = audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Checkpoint: good, CheckpointPages: pages, CheckpointName: "checkpoint.json"})
	require.NoError(t, err)
	assert.True(t, rep.Clean(), "%v", rep.Findings)
	require.NotNil(t, rep.From)
	assert.Equal(t, commits[len(commits)-2], rep.From.Tip)
	assert.Equal(t, 1, rep.Commits, "only the commit after the checkpoint's tip is read")
}

// TestCheckpointOpenRunFlaggedLater: a run still open at the checkpoint
// (admitted, no receipt yet, inside its deadline) is not vouched for: an
// audit from the checkpoint past the run's deadline flags it, even with
// no commit after the checkpoint's tip.
func TestCheckpointOpenRunFlaggedLater(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	auditor := newKey(t)
	policy := checkpointPolicy(t, f, auditor, time.Time{}, "")
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	adm, err := c.Find("/run-b/" + evidence.AdmissionFile)
	require.NoError(t, err)
	landed, err := c.Landed(adm)
	require.NoError(t, err)
	_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, landed)
	require.NoError(t, err)
	now := time.Now()
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: now, CheckpointKey: auditor})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%v", rep.Findings)
	require.NotEmpty(t, rep.Checkpoint)

	later := now.Add(24 * time.Hour)
	rep, err = audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: later, Checkpoint: rep.Checkpoint, CheckpointPages: rep.CheckpointPages, CheckpointName: "checkpoint.json"})
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Commits)
	got := findings(rep, audit.RuleIncompleteRun)
	require.Len(t, got, 1, "the run open at the checkpoint must be flagged past its deadline: %v", rep.Findings)
	assert.Equal(t, "run-b", got[0].Run)
	full, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: policy, Now: later})
	require.NoError(t, err)
	assert.Equal(t, full.Findings, rep.Findings)
}

// countingPages counts the distinct pages an audit reads.
type countingPages struct {
	pagetable.Store
	mu   sync.Mutex
	read map[string]bool
}

func (c *countingPages) Get(digest string) ([]byte, error) {
	c.mu.Lock()
	c.read[digest] = true
	c.mu.Unlock()
	return c.Store.Get(digest)
}

// TestIncrementalAuditReadsWhatIsNew: an audit from a checkpoint reads
// the state pages of the keys its new commits touch, not the state: with
// the tables cut into small pages (1 KiB: about two a run, and an index
// of about a page for every ten), an audit of the last run from the
// checkpoint before it reads about an index page and a data page for
// each of its documents and of the keys it looks up, about as many
// whether the branch holds 40 runs or 120. (At 10^5 runs the tables are hundreds of
// megabytes: BenchmarkIncrementalAudit.)
func TestIncrementalAuditReadsWhatIsNew(t *testing.T) {
	defer pagetable.SetPageSize(1 << 10)()
	auditor := newKey(t)
	reads := map[int]int{}
	for _, runs := range []int{40, 120} {
		key, approver := newKey(t), newKey(t)
		s, err := evidencetest.Synthesize(t.Context(), t.TempDir(), runs, 2, key, approver)
		require.NoError(t, err)
		policy, err := signing.NewTrustPolicy("pages", signing.TrustPolicySpec{
			Keys:            []signing.TrustedKeySpec{signing.KeySpec(approver.Public()), signing.KeySpec(key.Public()), signing.KeySpec(auditor.Public())},
			Approvers:       []string{approver.KeyID()},
			EvidenceSigners: []string{key.KeyID()},
			Auditors:        []string{auditor.KeyID()},
		})
		require.NoError(t, err)
		c := &evidencetest.Copy{Dir: s.Remote}
		last := fmt.Sprintf("run-%06d", runs-1)
		adm, err := c.Find("/" + last + "/" + evidence.AdmissionFile)
		require.NoError(t, err)
		first, err := evidencetest.Git(s.Remote, nil, "rev-list", "--reverse", "--first-parent", "refs/heads/"+evidencetest.Branch, "--", path.Dir(adm), evidence.IndexPath("synthetic", last))
		require.NoError(t, err)
		tip, err := c.Tip()
		require.NoError(t, err)
		_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, strings.Fields(first)[0]+"^")
		require.NoError(t, err)
		now := time.Now()
		rep, err := audit.Branch(t.Context(), audit.Options{Repo: s.Remote, Policy: policy, Now: now, CheckpointKey: auditor})
		require.NoError(t, err)
		require.True(t, rep.Clean(), "%v", rep.Findings)
		list, err := audit.CheckpointPages(rep.Checkpoint, rep.CheckpointPages)
		require.NoError(t, err)
		_, err = c.Git("update-ref", "refs/heads/"+evidencetest.Branch, tip)
		require.NoError(t, err)
		pages := &countingPages{Store: rep.CheckpointPages, read: map[string]bool{}}
		incr, err := audit.Branch(t.Context(), audit.Options{Repo: s.Remote, Policy: policy, Now: now, Checkpoint: rep.Checkpoint, CheckpointPages: pages, CheckpointName: "checkpoint.json"})
		require.NoError(t, err)
		require.True(t, incr.Clean(), "%v", incr.Findings)
		require.NotNil(t, incr.From)
		require.Len(t, incr.Runs, 1)
		t.Logf("%d runs: %d state pages, the audit of the last run read %d", runs, len(list), len(pages.read))
		reads[runs] = len(pages.read)
		require.Greater(t, len(list), 2*runs, "%d runs: %d pages, the tables are not cut small", runs, len(list))
	}
	// Which pages a run's documents land in is chance (their digests),
	// so the counts vary by a few; reading in proportion to the branch
	// would triple them.
	assert.Less(t, reads[120], 2*reads[40], "the pages read grow with the branch: %v", reads)
	assert.LessOrEqual(t, reads[120], 32, "the audit of one run reads more than an index and a data page for each of its lookups")
}
