package audit_test

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/specs"
)

// historySpec is the standing certification of historyFixture: due every
// 168h, 24h before expiry, on identity changes and expiry.
const historySpec = "  nodesPerRun: 1\n  every: 168h\n  beforeExpiry: 24h\n  triggers: [identity, expired]\n  budget: {maxNodes: 1}\n"

// historyFixture is a standing certification's history of days on node
// localhost, each firing for a reason the runs before it show: pool-1
// joined (no run yet); pool-2 expired (pool-1 certified it for 10h, 20h
// before); pool-3 expiry (pool-2's certification ends within 24h);
// pool-4 schedule (pool-3 ended 170h before, every 168h; the node kept its
// UID); pool-5 identity (a new UID), 1h ago, certifying the node for
// 100h; pool-6 identity, fired and not admitted yet.
func historyFixture(t *testing.T) *evidencetest.Fixture {
	t.Helper()
	h := time.Hour
	f, err := evidencetest.BuildStanding(t.Context(), t.TempDir(), historySpec,
		evidencetest.Run{Name: "pool-1", Fired: true, Ago: 400 * h, TTL: 10 * h},
		evidencetest.Run{Name: "pool-2", Fired: true, Ago: 380 * h, TTL: 30 * h, Reason: evidence.DueReason{Kind: evidence.DueExpired}},
		evidencetest.Run{Name: "pool-3", Fired: true, Ago: 370 * h, Reason: evidence.DueReason{Kind: evidence.DueExpiry}},
		evidencetest.Run{Name: "pool-4", Fired: true, Ago: 200 * h, SameUID: true},
		evidencetest.Run{Name: "pool-5", Fired: true, Ago: h, TTL: 100 * h},
		evidencetest.Run{Name: "pool-6", FiredOnly: true})
	require.NoError(t, err)
	return f
}

// resignFiring rewrites the copy's branch with run's firing re-signed by
// the evidence key after edit, and returns its path. An admission that
// binds it then binds another digest (digest-binding, on the admission).
func resignFiring(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy, run string, edit func(pred map[string]any)) string {
	t.Helper()
	p, err := c.Find("/" + run + "/" + evidence.FiringFile)
	require.NoError(t, err)
	b, err := c.Read("refs/heads/"+evidencetest.Branch, p)
	require.NoError(t, err)
	forged, err := evidencetest.Resign(b, f.Reconciler, edit)
	require.NoError(t, err)
	at, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(at, map[string][]byte{p: forged})
	require.NoError(t, err)
	return p
}

// messageRE matches msg exactly, each %s in it standing for a time
// (RFC 3339, UTC).
func messageRE(msg string) string {
	parts := strings.Split(msg, "%s")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return "^" + strings.Join(parts, `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`) + "$"
}

// reason sets chosen[0]'s due reason in a firing's predicate.
func reason(kind, run string) func(pred map[string]any) {
	return func(pred map[string]any) {
		pred["chosen"].([]any)[0].(map[string]any)["reason"] = map[string]any{"kind": kind, "run": run, "detail": "forged"}
	}
}

// TestAuditFiringHistory: every chosen node's due reason is real in the
// branch's own history before its firing (firing-trigger-unproven): a
// clean history fires for each kind of reason; each forged reason the
// runs before it do not show is a finding naming the node, the reason
// and what the history shows.
func TestAuditFiringHistory(t *testing.T) {
	f := historyFixture(t)
	t.Run("clean", func(t *testing.T) {
		var mu sync.Mutex
		kinds := map[string]string{}
		rep, err := audit.Branch(t.Context(), audit.Options{Repo: f.Repo, Policy: f.Policy, Observe: func(d *audit.RunDocuments) {
			mu.Lock()
			defer mu.Unlock()
			if d.Firing != nil {
				kinds[d.Run] = d.Firing.Chosen[0].Reason.Kind
			}
		}})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings)
		assert.Equal(t, map[string]string{"pool-1": "joined", "pool-2": "expired", "pool-3": "expiry", "pool-4": "schedule", "pool-5": "identity", "pool-6": "identity"}, kinds)
	})
	for _, tc := range []struct {
		name, run string
		edit      func(pred map[string]any)
		want      string
	}{
		{"schedule naming a run that ended 1h before", "pool-6", reason("schedule", "pool-5"),
			"chosen[0] localhost: due reason schedule, but run pool-5 ended at %s: with every 168h the node is due at %s, after the firing time %s"},
		{"joined for a node with a finished run", "pool-6", reason("joined", ""),
			"chosen[0] localhost: due reason joined, but run pool-5 of profile quick covers the node (ended at %s)"},
		{"reason naming a run that is not the latest", "pool-6", reason("identity", "pool-4"),
			"chosen[0] localhost: due reason identity names run pool-4, but the node's latest finished run of profile quick before the firing is pool-5"},
		{"expiry before the certification is within beforeExpiry", "pool-6", reason("expiry", "pool-5"),
			"chosen[0] localhost: due reason expiry, but run pool-5 certified the node until %s: with beforeExpiry 24h it is due at %s, after the firing time %s"},
		{"expired before the certification expired", "pool-6", reason("expired", "pool-5"),
			"chosen[0] localhost: due reason expired, but run pool-5 certified the node until %s, after the firing time %s"},
		{"expired naming a run that certified nothing", "pool-5", reason("expired", "pool-4"),
			"chosen[0] localhost: due reason expired, but run pool-4 certified the node until no time (its receipt records no certifiedUntil for it)"},
		{"failed naming a run that passed", "pool-6", reason("failed", "pool-5"),
			"chosen[0] localhost: due reason failed, but run pool-5 passed on the node"},
		{"identity with identical snapshots", "pool-4", reason("identity", "pool-3"),
			"chosen[0] localhost: due reason identity, but the node's snapshot in run pool-3 and its admission snapshot in this run agree in uid, systemUUID, bootID, kernel, gpuProduct and gpuDriver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			p := resignFiring(t, f, c, tc.run, tc.edit)
			rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy})
			require.NoError(t, err)
			got := findingsAt(rep, audit.RuleFiringTriggerUnproven, p)
			require.Len(t, got, 1, "%v", rep.Findings)
			assert.Regexp(t, messageRE(tc.want), got[0].Message)
		})
	}
}

// budgetSpec is the standing certification of budgetFixture: every 24h,
// two nodes of the pool at once.
const budgetSpec = "  nodesPerRun: 1\n  every: 24h\n  budget: {maxNodes: 2}\n"

// budgetFixture holds node localhost every way signet holds a node, at
// its tip: chosen by firing pool-1 (not admitted yet), retained by run-a
// (canceled), admitted by run-c (no receipt yet); run-b retained it and
// an approved release let it go, run-d passed.
func budgetFixture(t *testing.T) *evidencetest.Fixture {
	t.Helper()
	f, err := evidencetest.BuildStanding(t.Context(), t.TempDir(), budgetSpec,
		evidencetest.Run{Name: "pool-1", FiredOnly: true},
		evidencetest.Run{Name: "run-a", Canceled: true},
		evidencetest.Run{Name: "run-b", Canceled: true, Released: true},
		evidencetest.Run{Name: "run-c", Open: true},
		evidencetest.Run{Name: "run-d"})
	require.NoError(t, err)
	return f
}

// appendFiring appends firing seq of the fixture's standing certification
// as evidence.Store.AppendFiring does (decided on the tip, fired now, with
// its index entry and approval copy): pool-1's firing changed by edit and
// re-signed by the evidence key. It returns the firing's path.
func appendFiring(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy, seq int, edit func(pred map[string]any)) string {
	t.Helper()
	branch := "refs/heads/" + evidencetest.Branch
	tip, err := c.Tip()
	require.NoError(t, err)
	tmpl, err := c.Find("/pool-1/" + evidence.FiringFile)
	require.NoError(t, err)
	b, err := c.Read(branch, tmpl)
	require.NoError(t, err)
	ap, err := c.Find("/pool-1/approvals/")
	require.NoError(t, err)
	approval, err := c.Read(branch, ap)
	require.NoError(t, err)
	run, firedAt := fmt.Sprintf("pool-%d", seq), time.Now().UTC()
	dir := evidence.RunDir(evidencetest.Cluster, run, firedAt)
	apPath := evidence.ApprovalPath(dir, path.Base(ap))
	forged, err := evidencetest.Resign(b, f.Reconciler, func(pred map[string]any) {
		pred["run"], pred["sequence"], pred["tip"], pred["firedAt"] = run, seq, tip, firedAt.Format(time.RFC3339Nano)
		pred["approvals"] = []any{map[string]any{"path": apPath, "digest": string(specs.DigestOf(approval))}}
		edit(pred)
	})
	require.NoError(t, err)
	idx := evidence.IndexEntry(evidencetest.Cluster, run, firedAt)
	p := path.Join(dir, evidence.FiringFile)
	_, err = c.Append(map[string][]byte{p: forged, idx.Path: idx.Data, apPath: approval})
	require.NoError(t, err)
	return p
}

// poolOf sets a firing's pool (localhost, as pool-1 recorded it, and
// others), in-use and chosen nodes (each joined).
func poolOf(others, inUse, chosen []string) func(pred map[string]any) {
	return func(pred map[string]any) {
		pool := pred["pool"].([]any)
		for _, n := range others {
			pool = append(pool, map[string]any{"node": n, "uid": "uid-" + n})
		}
		pred["pool"] = pool
		use := []any{}
		for _, n := range inUse {
			use = append(use, n)
		}
		pred["inUse"] = use
		var ch []any
		for _, n := range chosen {
			ch = append(ch, map[string]any{"node": n, "uid": "uid-" + n, "reason": map[string]any{"kind": "joined", "detail": "no run of the profile covers the node"}})
		}
		pred["chosen"] = ch
	}
}

// TestAuditFiringBudgetHistory: a firing's in-use nodes include every
// pool node signet held at its tip (budget-exceeded): chosen by a firing
// or admitted by a run without receipt, or retained without an approved
// release. A firing that leaves the held node out, and so takes more of
// the pool than the budget allows, is a finding naming who holds it; one
// that counts it is clean.
func TestAuditFiringBudgetHistory(t *testing.T) {
	f := budgetFixture(t)
	rep, err := audit.Branch(t.Context(), audit.Options{Repo: f.Repo, Policy: f.Policy})
	require.NoError(t, err)
	require.Empty(t, rep.Findings, "the fixture is clean")

	t.Run("firing that hides a held node", func(t *testing.T) {
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		p := appendFiring(t, f, c, 2, poolOf([]string{"gpu-2", "gpu-3"}, nil, []string{"gpu-2", "gpu-3"}))
		rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy})
		require.NoError(t, err)
		got := findingsAt(rep, audit.RuleBudgetExceeded, p)
		require.Len(t, got, 1, "%v", rep.Findings)
		assert.Equal(t, "in-use nodes [] leave out pool nodes signet held at the firing's tip: localhost (admitted by run run-c, no receipt yet; "+
			"chosen by firing pool-1, no receipt yet; retained by run run-a, not released); counting them, 1 nodes in use and 2 chosen, and the budget allows 2 of a pool of 3", got[0].Message)
		assert.Len(t, rep.Findings, 1, "%v", rep.Findings)
	})
	t.Run("firing that counts the held node", func(t *testing.T) {
		c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		appendFiring(t, f, c, 2, poolOf([]string{"gpu-2", "gpu-3"}, []string{"localhost"}, []string{"gpu-2"}))
		rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy})
		require.NoError(t, err)
		assert.Empty(t, rep.Findings)
	})
}

// resignReceiptWith rewrites the copy's branch with run's receipt (chain
// sequence seq) re-signed by the evidence key after edit, its chain link
// following it, and returns its path.
func resignReceiptWith(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy, run string, seq int64, edit func(pred map[string]any)) string {
	t.Helper()
	p, err := c.Find("/" + run + "/" + evidence.ReceiptFile)
	require.NoError(t, err)
	old, err := c.Read("refs/heads/"+evidencetest.Branch, p)
	require.NoError(t, err)
	rc, err := evidencetest.Resign(old, f.Reconciler, edit)
	require.NoError(t, err)
	link := fmt.Sprintf(`{"run":%q,"receipt":{"path":%q,"digest":%q}}`, run, p, specs.DigestOf(rc))
	landed, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(landed, map[string][]byte{p: rc, evidence.ChainPath(evidencetest.Cluster, seq): []byte(link)})
	require.NoError(t, err)
	return p
}

// TestAuditReceiptCertifiedUntil: a receipt's certifiedUntil is zero when
// no node passed, and otherwise after the run evidence's endedAt (rule
// verdict): what a standing certification's expiry reasons are judged by.
func TestAuditReceiptCertifiedUntil(t *testing.T) {
	hf, bf := historyFixture(t), budgetFixture(t)
	for _, tc := range []struct {
		name string
		f    *evidencetest.Fixture
		run  string
		at   func(endedAt time.Time) time.Time
		want string
	}{
		{"certified until before the run ended", hf, "pool-1", func(e time.Time) time.Time { return e.Add(-time.Hour) }, "is not after the run evidence's endedAt"},
		{"certified until the run's end", hf, "pool-1", func(e time.Time) time.Time { return e }, "is not after the run evidence's endedAt"},
		{"certified with no node passing", bf, "run-a", func(e time.Time) time.Time { return e.Add(time.Hour) }, "but no node passed: the run certified none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			p := resignReceiptWith(t, tc.f, c, tc.run, 1, func(pred map[string]any) {
				ended, err := time.Parse(time.RFC3339Nano, pred["at"].(string)) // the fixture's runs end when their receipt is written
				require.NoError(t, err)
				pred["certifiedUntil"] = tc.at(ended).Format(time.RFC3339Nano)
			})
			rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: tc.f.Policy})
			require.NoError(t, err)
			got := findingsAt(rep, audit.RuleVerdict, p)
			require.Len(t, got, 1, "%v", rep.Findings)
			assert.Contains(t, got[0].Message, tc.want)
		})
	}
}

// TestIncrementalAuditAgreesOnFirings: the rules that replay the history
// before each firing report, from a chain of incremental audits (the
// checkpoint carrying each node's latest run, the held nodes and the
// identity reasons waiting for an admission), exactly the findings of the
// full audit at every commit.
func TestIncrementalAuditAgreesOnFirings(t *testing.T) {
	hf, bf := historyFixture(t), budgetFixture(t)
	// A firing for an identity change the node did not go through, fired
	// now: the audit at its firing is clean (its admission proves the
	// reason, within the admission bound), the one at its admission not.
	idf, err := evidencetest.BuildRuns(t.Context(), t.TempDir(),
		evidencetest.Run{Name: "run-a"},
		evidencetest.Run{Name: "pool-1", Fired: true, SameUID: true, Reason: evidence.DueReason{Kind: evidence.DueIdentity}})
	require.NoError(t, err)
	auditor := newKey(t)
	for _, tc := range []struct {
		name     string
		f        *evidencetest.Fixture
		tamper   func(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy)
		findings bool
	}{
		{"clean history", hf, nil, false},
		{"schedule naming a run that ended 1h before", hf, func(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy) {
			resignFiring(t, f, c, "pool-6", reason("schedule", "pool-5"))
		}, true},
		{"identity with identical snapshots, admitted after a checkpoint", idf, nil, true},
		{"clean holds", bf, nil, false},
		{"firing that hides a held node", bf, func(t *testing.T, f *evidencetest.Fixture, c *evidencetest.Copy) {
			appendFiring(t, f, c, 2, poolOf([]string{"gpu-2", "gpu-3"}, nil, []string{"gpu-2", "gpu-3"}))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
			require.NoError(t, err)
			if tc.tamper != nil {
				tc.tamper(t, tc.f, c)
			}
			policy := checkpointPolicy(t, tc.f, auditor, time.Time{}, "")
			assert.Positive(t, agreeAtEveryCommit(t, c, policy, auditor, time.Now(), tc.findings))
		})
	}
}
