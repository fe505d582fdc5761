package audit_test

import (
	"fmt"
	"maps"
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

// firingsAt returns the findings of rule at path p.
func findingsAt(rep *audit.Report, rule, p string) []audit.Finding {
	var out []audit.Finding
	for _, f := range findings(rep, rule) {
		if f.Path == p {
			out = append(out, f)
		}
	}
	return out
}

// TestAuditFiring: a standing certification's firings on the evidence
// branch, written through evidence.Store.AppendFiring: one admitted and
// finished (pool-1), one fired and not admitted (pool-2). The audit
// accepts them, reports pool-2 as Fired, flags it past its admission
// bound, and flags each forgery of a firing or of the admission that
// follows one.
func TestAuditFiring(t *testing.T) {
	ctx := t.Context()
	f, err := evidencetest.BuildRuns(ctx, t.TempDir(),
		evidencetest.Run{Name: "run-a"},
		evidencetest.Run{Name: "pool-1", Fired: true, TTL: time.Millisecond},
		evidencetest.Run{Name: "pool-2", FiredOnly: true})
	require.NoError(t, err)
	tip := "refs/heads/" + evidencetest.Branch

	// clone returns a copy of the branch and the paths of pool-1's
	// firing and admission and pool-2's firing on it.
	clone := func(t *testing.T) (c *evidencetest.Copy, fir1, adm1, fir2 string) {
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		fir1, err = c.Find("/pool-1/" + evidence.FiringFile)
		require.NoError(t, err)
		adm1, err = c.Find("/pool-1/" + evidence.AdmissionFile)
		require.NoError(t, err)
		fir2, err = c.Find("/pool-2/" + evidence.FiringFile)
		require.NoError(t, err)
		return c, fir1, adm1, fir2
	}
	// resign rewrites the branch from the commit that added p with p's
	// document re-signed by key after edit, and returns the new bytes.
	resign := func(t *testing.T, c *evidencetest.Copy, p string, key *signing.PrivateKey, edit func(map[string]any)) []byte {
		b, err := c.Read(tip, p)
		require.NoError(t, err)
		forged, err := evidencetest.Resign(b, key, edit)
		require.NoError(t, err)
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, map[string][]byte{p: forged})
		require.NoError(t, err)
		return forged
	}
	auditCopy := func(t *testing.T, c *evidencetest.Copy) *audit.Report {
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: f.Policy})
		require.NoError(t, err)
		return rep
	}

	t.Run("clean", func(t *testing.T) {
		rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings)
		require.Len(t, rep.Runs, 3)
		phases := map[string]evidence.Phase{}
		for _, r := range rep.Runs {
			phases[r.Run] = r.Phase
		}
		assert.Equal(t, map[string]evidence.Phase{"run-a": evidence.PhaseDone, "pool-1": evidence.PhaseDone, "pool-2": evidence.PhaseFired}, phases)
		for _, r := range rep.Runs {
			require.Len(t, r.Nodes, 1, r.Run)
			assert.Equal(t, "localhost", r.Nodes[0].Node, r.Run)
			assert.Equal(t, r.Run != "run-a", !r.FiredAt.IsZero(), r.Run)
		}
		out, err := evidencetest.Git(f.Repo, nil, "fsck", "--strict", "--no-progress", "--no-dangling")
		require.NoError(t, err, out)

		vr, err := audit.Verify(ctx, audit.VerifyOptions{Repo: f.Repo, Run: "pool-2", Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, vr.Findings)
		assert.Equal(t, evidence.PhaseFired, vr.Phase)
		for _, b := range vr.Bindings {
			assert.True(t, b.OK, "%+v", b)
		}

		st, err := audit.Status(ctx, audit.StatusOptions{Repo: f.Repo})
		require.NoError(t, err)
		require.Len(t, st.Runs, 3)
		for _, r := range st.Runs {
			assert.Empty(t, r.Problem, r.Run)
			if r.Run == "pool-2" {
				assert.Equal(t, evidence.PhaseFired, r.Phase)
				assert.False(t, r.FiredAt.IsZero())
				require.Len(t, r.Nodes, 1)
				assert.Equal(t, "localhost", r.Nodes[0].Node)
			} else {
				assert.Equal(t, evidence.PhaseDone, r.Phase, r.Run)
			}
		}
	})

	t.Run("fired and not admitted past its bound", func(t *testing.T) {
		late := time.Now().Add(evidence.FiringAdmissionBound + audit.DefaultGrace + time.Minute)
		rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: f.Policy, Now: late})
		require.NoError(t, err)
		got := findings(rep, audit.RuleIncompleteRun)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Equal(t, "pool-2", got[0].Run)
		assert.Equal(t, evidence.FiringFile, path.Base(got[0].Path))
		rep, err = audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: f.Policy, Now: time.Now().Add(evidence.FiringAdmissionBound)})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings, "inside its bound a firing waits for its admission")
	})

	t.Run("incremental audit from a checkpoint with the firing open", func(t *testing.T) {
		auditor := newKey(t)
		policy := checkpointPolicy(t, f, auditor, time.Time{}, "")
		now := time.Now()
		rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: policy, Now: now, CheckpointKey: auditor})
		require.NoError(t, err)
		require.True(t, rep.Clean(), "%v", rep.Findings)
		late := now.Add(evidence.FiringAdmissionBound + audit.DefaultGrace + time.Minute)
		inc, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: policy, Now: late, Checkpoint: rep.Checkpoint, CheckpointPages: rep.CheckpointPages, CheckpointName: "checkpoint.json"})
		require.NoError(t, err)
		full, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: policy, Now: late})
		require.NoError(t, err)
		require.Len(t, findings(full, audit.RuleIncompleteRun), 1, "%v", full.Findings)
		assert.Equal(t, full.Findings, inc.Findings)
	})

	t.Run("firing signed by a key that is not an evidence signer", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Approver, nil)
		rep := auditCopy(t, c)
		assert.NotEmpty(t, findingsAt(rep, audit.RuleUntrustedSigner, fir2), "%v", rep.Findings)
	})

	t.Run("firing of a standing certification nobody approved", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Reconciler, func(pred map[string]any) {
			pred["standing"].(map[string]any)["digest"] = string(specs.DigestOf([]byte("another spec")))
		})
		rep := auditCopy(t, c)
		assert.Len(t, findingsAt(rep, audit.RuleFiringUnapproved, fir2), 1, "%v", rep.Findings)
	})

	t.Run("firing after its approval's key was revoked", func(t *testing.T) {
		ak := signing.KeySpec(f.Approver.Public())
		ak.RevokedAt = "2020-01-01T00:00:00Z"
		p, err := signing.NewTrustPolicy("revoked", signing.TrustPolicySpec{
			Keys:            []signing.TrustedKeySpec{ak, signing.KeySpec(f.Reconciler.Public())},
			Approvers:       []string{f.Approver.KeyID()},
			EvidenceSigners: []string{f.Reconciler.KeyID()},
		})
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: f.Repo, Policy: p})
		require.NoError(t, err)
		var fired []string
		for _, fd := range findings(rep, audit.RuleFiringUnapproved) {
			fired = append(fired, fd.Run)
		}
		assert.ElementsMatch(t, []string{"pool-1", "pool-2"}, fired, "%v", rep.Findings)
	})

	t.Run("firing with another copy of its standing certification", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Reconciler, func(pred map[string]any) {
			pred["standingObject"].(map[string]any)["spec"].(map[string]any)["budget"] = map[string]any{"maxNodes": 5}
		})
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleDigestBinding, fir2)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, "standingObject")
	})

	t.Run("firing decided from another tip", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Reconciler, func(pred map[string]any) { pred["tip"] = strings.Repeat("a", 40) })
		rep := auditCopy(t, c)
		assert.Len(t, findingsAt(rep, audit.RuleFiringTip, fir2), 1, "%v", rep.Findings)
	})

	t.Run("firing over its budget", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Reconciler, func(pred map[string]any) {
			pred["pool"] = append(pred["pool"].([]any), map[string]any{"node": "gpu-2", "uid": "uid-gpu-2"})
			pred["inUse"] = []any{"gpu-2"}
		})
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleBudgetExceeded, fir2)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, "1 nodes in use and 1 chosen, but the budget allows 1 of a pool of 2")
	})

	t.Run("firing of a node outside its pool", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Reconciler, func(pred map[string]any) {
			pred["chosen"].([]any)[0].(map[string]any)["node"] = "gpu-9"
		})
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleBudgetExceeded, fir2)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, `"gpu-9"`)
	})

	t.Run("firing that names another run", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		resign(t, c, fir2, f.Reconciler, func(pred map[string]any) { pred["sequence"] = 7 })
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleDigestBinding, fir2)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, "firing 7 of StandingCertification/pool")
	})

	// forge returns pool-2's firing re-signed as firing seq (run
	// pool-<seq>) and the files that add it with its index entry.
	forge := func(t *testing.T, c *evidencetest.Copy, fir2 string, seq int) (string, map[string][]byte) {
		b, err := c.Read(tip, fir2)
		require.NoError(t, err)
		run := fmt.Sprintf("pool-%d", seq)
		var firedAt time.Time
		forged, err := evidencetest.Resign(b, f.Reconciler, func(pred map[string]any) {
			pred["run"], pred["sequence"] = run, seq
			firedAt, err = time.Parse(time.RFC3339Nano, pred["firedAt"].(string))
			require.NoError(t, err)
		})
		require.NoError(t, err)
		idx := evidence.IndexEntry(evidencetest.Cluster, run, firedAt)
		p := evidence.FiringPath(evidencetest.Cluster, run, firedAt)
		return p, map[string][]byte{p: forged, idx.Path: idx.Data}
	}

	t.Run("firing after a gap in the sequence", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		auditor := newKey(t)
		policy := checkpointPolicy(t, f, auditor, time.Time{}, "")
		clean, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: policy, CheckpointKey: auditor})
		require.NoError(t, err)
		require.True(t, clean.Clean(), "%v", clean.Findings)
		p, files := forge(t, c, fir2, 5)
		_, err = c.Append(files)
		require.NoError(t, err)
		rep, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: policy})
		require.NoError(t, err)
		got := findings(rep, audit.RuleFiringSequence)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Equal(t, p, got[0].Path)
		assert.Contains(t, got[0].Message, "no firing 4")
		// An incremental audit from the clean checkpoint, which holds
		// pool-1 and pool-2 only as restored state, agrees.
		inc, err := audit.Branch(ctx, audit.Options{Repo: c.Dir, Policy: policy, Checkpoint: clean.Checkpoint, CheckpointPages: clean.CheckpointPages, CheckpointName: "checkpoint.json"})
		require.NoError(t, err)
		assert.Equal(t, rep.Findings, inc.Findings)
	})

	t.Run("two firings in one commit", func(t *testing.T) {
		c, _, _, fir2 := clone(t)
		_, files := forge(t, c, fir2, 3)
		p4, more := forge(t, c, fir2, 4)
		maps.Copy(files, more)
		_, err := c.Append(files)
		require.NoError(t, err)
		rep := auditCopy(t, c)
		got := findings(rep, audit.RuleFiringSequence)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Equal(t, p4, got[0].Path)
		assert.Contains(t, got[0].Message, "not after firing 3")
	})

	// Each forged reason is one the history before the firing shows
	// (pool-1 certified the node for 1 ms; gpu-2 never ran): only the
	// standing certification's own rules refuse it.
	for name, chosen := range map[string]map[string]any{
		"firing for a trigger its standing certification lacks": {"node": "localhost", "reason": map[string]any{"kind": "expired", "run": "pool-1", "detail": "certification expired"}},
		"firing for a schedule naming no run":                   {"node": "localhost", "reason": map[string]any{"kind": "schedule", "detail": "ended long ago"}},
		"firing for joined naming a run":                        {"node": "gpu-2", "uid": "uid-gpu-2", "reason": map[string]any{"kind": "joined", "run": "run-a", "detail": "new node"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, _, _, fir2 := clone(t)
			resign(t, c, fir2, f.Reconciler, func(pred map[string]any) {
				maps.Copy(pred["chosen"].([]any)[0].(map[string]any), chosen)
				pred["pool"] = append(pred["pool"].([]any), map[string]any{"node": "gpu-2", "uid": "uid-gpu-2"})
			})
			rep := auditCopy(t, c)
			assert.Len(t, findingsAt(rep, audit.RuleFiringTriggerUnproven, fir2), 1, "%v", rep.Findings)
			assert.Len(t, rep.Findings, 1, "%v", rep.Findings)
		})
	}

	t.Run("admission names another firing", func(t *testing.T) {
		c, _, adm1, _ := clone(t)
		resign(t, c, adm1, f.Reconciler, func(pred map[string]any) {
			pred["firing"].(map[string]any)["digest"] = string(specs.DigestOf([]byte("another firing")))
		})
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleDigestBinding, adm1)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, evidence.FiringFile)
	})

	t.Run("admission of a fired run without its firing", func(t *testing.T) {
		c, _, adm1, _ := clone(t)
		resign(t, c, adm1, f.Reconciler, func(pred map[string]any) { delete(pred, "firing") })
		rep := auditCopy(t, c)
		assert.Len(t, findingsAt(rep, audit.RuleFiringAdmission, adm1), 1, "%v", rep.Findings)
	})

	t.Run("admitted request not the one the firing derives", func(t *testing.T) {
		c, _, adm1, _ := clone(t)
		// The admission keeps the firing's nodes but records a request
		// of its own (a selector and count the firing never chose),
		// consistently digested: only the derivation shows it.
		resign(t, c, adm1, f.Reconciler, func(pred map[string]any) {
			ro := pred["requestObject"].(map[string]any)
			spec := ro["spec"].(map[string]any)
			spec["selector"] = map[string]any{"pool": "a"}
			spec["count"] = float64(1)
			req := specs.CertificationRequest{
				Metadata: specs.ObjectMeta{Name: ro["metadata"].(map[string]any)["name"].(string)},
				Spec:     specs.RequestSpec{Profile: spec["profile"].(string), Selector: map[string]string{"pool": "a"}, Count: 1},
			}
			for _, n := range spec["nodes"].([]any) {
				req.Spec.Nodes = append(req.Spec.Nodes, n.(string))
			}
			canon, err := specs.CanonicalRequest(&req)
			require.NoError(t, err)
			pred["request"].(map[string]any)["digest"] = string(specs.DigestOf(canon))
		})
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleFiringAdmission, adm1)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, "is not the request the firing derives")
	})

	t.Run("admission of other nodes than the firing chose", func(t *testing.T) {
		c, fir1, adm1, _ := clone(t)
		// The firing chose another node; the admission, re-signed to
		// bind that firing, admits the node it admitted before.
		forged := resign(t, c, fir1, f.Reconciler, func(pred map[string]any) {
			chosen := pred["chosen"].([]any)
			chosen[0].(map[string]any)["node"] = "gpu-7"
		})
		resign(t, c, adm1, f.Reconciler, func(pred map[string]any) {
			pred["firing"].(map[string]any)["digest"] = string(specs.DigestOf(forged))
		})
		rep := auditCopy(t, c)
		got := findingsAt(rep, audit.RuleFiringAdmission, adm1)
		require.Len(t, got, 2, "%v", rep.Findings)
		assert.Contains(t, got[0].Message, "admits localhost (uid uid-1), but the firing chose gpu-7 (uid uid-1)")
		assert.Contains(t, got[1].Message, "is not the request the firing derives", "the admitted request names other nodes than the firing derives")
		assert.Empty(t, findingsAt(rep, audit.RuleDigestBinding, adm1), "the admission binds the forged firing by its digest")
	})
}
