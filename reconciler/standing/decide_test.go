package standing

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

const week = 7 * 24 * time.Hour

func id(boot string) Identity {
	return Identity{UID: "uid", SystemUUID: "sys", BootID: boot, Kernel: "6.18", GPUProduct: "H200", GPUDriver: "580"}
}

func passed(run string, ended time.Time, until time.Time) *LastRun {
	return &LastRun{Run: run, EndedAt: ended, Verdict: specs.VerdictPass, CertifiedUntil: until, Identity: id("b1")}
}

func weekly(budget, perRun int, triggers ...specs.Trigger) specs.StandingSpec {
	return specs.StandingSpec{Profile: "burn", Selector: map[string]string{"pool": "a"}, NodesPerRun: perRun,
		Every: "168h", Triggers: triggers, Budget: specs.Budget{MaxNodes: budget}}
}

func names(groups [][]Due) [][]string {
	var out [][]string
	for _, g := range groups {
		var ns []string
		for _, d := range g {
			ns = append(ns, d.Node)
		}
		out = append(out, ns)
	}
	return out
}

// TestDecideRollsThePoolWithinBudget: a weekly standing certification over
// 20 never-certified nodes with a budget of 3 fires 3 nodes, then as runs
// finish keeps firing, oldest first, and never holds more than 3, until
// every node is certified; then nothing is due until a week after the
// first ended.
func TestDecideRollsThePoolWithinBudget(t *testing.T) {
	pool := make([]Node, 20)
	for i := range pool {
		pool[i] = Node{Name: fmt.Sprintf("n%02d", i), Identity: id("b1")}
	}
	spec := weekly(3, 1)
	now := t0
	certified := map[string]bool{}
	var order []string
	for round := 0; len(certified) < 20; round++ {
		require.Less(t, round, 20, "the pool never finished")
		d := Decide(spec, 1, pool, now)
		held := 0
		for _, n := range pool {
			if n.Held {
				held++
			}
		}
		require.Equal(t, held, d.InUse)
		fired := 0
		for _, f := range d.Firings {
			fired += len(f)
			for _, due := range f {
				order = append(order, due.Node)
				for i := range pool {
					if pool[i].Name == due.Node {
						pool[i].Held = true
					}
				}
			}
		}
		assert.LessOrEqual(t, d.InUse+fired, 3, "round %d: budget exceeded", round)
		// One hour later, the held nodes pass and are released.
		now = now.Add(time.Hour)
		for i := range pool {
			if pool[i].Held {
				pool[i].Held = false
				pool[i].Last = passed("r-"+pool[i].Name, now, now.Add(2*week))
				certified[pool[i].Name] = true
			}
		}
	}
	want := make([]string, 20)
	for i := range want {
		want[i] = fmt.Sprintf("n%02d", i)
	}
	assert.Equal(t, want, order, "never-certified nodes go in name order, each once")
	d := Decide(spec, 1, pool, now)
	assert.Empty(t, d.Firings)
	assert.Equal(t, t0.Add(time.Hour).Add(week), d.Next, "the first certified node is due a week after its run ended")
	// A week later the oldest three go first.
	d = Decide(spec, 1, pool, t0.Add(time.Hour+week+2*time.Hour))
	assert.Equal(t, [][]string{{"n00"}, {"n01"}, {"n02"}}, names(d.Firings))
	assert.Equal(t, ReasonSchedule, d.Firings[0][0].Reason.Kind)
}

// TestDecideIdentityTriggerFiresThatNodeOnly: a bootID change on one node
// makes that node due at once, with the old and new value; the others stay
// quiet. Without the identity trigger it waits for its schedule.
func TestDecideIdentityTriggerFiresThatNodeOnly(t *testing.T) {
	var pool []Node
	for i := range 5 {
		pool = append(pool, Node{Name: fmt.Sprintf("n%d", i), Identity: id("b1"), Last: passed(fmt.Sprintf("r%d", i), t0, t0.Add(2*week))})
	}
	pool[3].Identity = id("b2")
	now := t0.Add(time.Hour)
	d := Decide(weekly(3, 1, specs.TriggerIdentity), 1, pool, now)
	require.Equal(t, [][]string{{"n3"}}, names(d.Firings))
	r := d.Firings[0][0].Reason
	assert.Equal(t, Reason{Kind: ReasonIdentity, Run: "r3", Detail: `identity changed since run r3: bootID: "b1" → "b2"`}, r)
	assert.Empty(t, Decide(weekly(3, 1), 1, pool, now).Firings)
}

// TestDecideBudgetCountsHeldAndClaimed: nodes reserved or retained by any
// run and nodes a firing claimed count against the budget; a percentage
// budget rounds down and one that rounds to 0 never fires.
func TestDecideBudgetCountsHeldAndClaimed(t *testing.T) {
	var pool []Node
	for i := range 10 {
		pool = append(pool, Node{Name: fmt.Sprintf("n%d", i), Identity: id("b1")})
	}
	pool[0].Held, pool[1].Claimed = true, true
	d := Decide(weekly(3, 1), 1, pool, t0)
	assert.Equal(t, 2, d.InUse)
	assert.Equal(t, [][]string{{"n2"}}, names(d.Firings))
	assert.Contains(t, d.Waiting, "7 due nodes wait: budget 3, 2 held or claimed")

	spec := weekly(0, 1)
	spec.Budget = specs.Budget{MaxPercent: 25}
	assert.Equal(t, 2, Decide(spec, 1, pool, t0).Allowed, "25% of 10 rounds down to 2")
	assert.Empty(t, Decide(spec, 1, pool, t0).Firings, "2 in use of 2 allowed")
	spec.Budget = specs.Budget{MaxPercent: 5}
	d = Decide(spec, 1, pool[2:], t0)
	assert.Equal(t, 0, d.Allowed, "5% of 8 rounds down to 0")
	assert.Empty(t, d.Firings)
}

// TestDecideGroupsAndBusyNodes: nodes fire in groups of nodesPerRun; a last
// group smaller than the profile's minimum waits; a busy node stays due and
// is passed over for the next.
func TestDecideGroupsAndBusyNodes(t *testing.T) {
	var pool []Node
	for i := range 7 {
		pool = append(pool, Node{Name: fmt.Sprintf("n%d", i), Identity: id("b1")})
	}
	pool[1].Busy = true
	d := Decide(weekly(10, 2), 2, pool, t0)
	assert.Equal(t, [][]string{{"n0", "n2"}, {"n3", "n4"}, {"n5", "n6"}}, names(d.Firings))
	d = Decide(weekly(5, 2), 2, pool, t0)
	assert.Equal(t, [][]string{{"n0", "n2"}, {"n3", "n4"}}, names(d.Firings), "the fifth node alone is below the profile's minimum of 2")
	assert.Contains(t, d.Waiting, "1 busy")
}

// TestDecideExpiry: beforeExpiry makes a node due that long before its
// certification expires, expired once it has; the one expiring soonest
// goes first, and Next says when the next becomes due.
func TestDecideExpiry(t *testing.T) {
	pool := []Node{
		{Name: "late", Identity: id("b1"), Last: passed("r1", t0, t0.Add(10*24*time.Hour))},
		{Name: "soon", Identity: id("b1"), Last: passed("r2", t0, t0.Add(2*24*time.Hour))},
		{Name: "gone", Identity: id("b1"), Last: passed("r3", t0, t0.Add(-time.Hour))},
	}
	spec := specs.StandingSpec{NodesPerRun: 1, BeforeExpiry: "72h", Triggers: []specs.Trigger{specs.TriggerExpired}, Budget: specs.Budget{MaxNodes: 5}}
	d := Decide(spec, 1, pool, t0)
	require.Equal(t, [][]string{{"gone"}, {"soon"}}, names(d.Firings))
	assert.Equal(t, ReasonExpired, d.Firings[0][0].Reason.Kind, "expired: due since 72h before its expiry, so first")
	assert.Equal(t, ReasonExpiry, d.Firings[1][0].Reason.Kind)
	assert.Equal(t, t0.Add(7*24*time.Hour), d.Next)
}

// TestDecideFailedNodeOnceReleased: a node whose latest run did not pass
// is never due while it is retained (held: it counts against the budget);
// once an approved release lifts it, it is due at once, whatever the
// schedule, and names that run.
func TestDecideFailedNodeOnceReleased(t *testing.T) {
	failed := &LastRun{Run: "r1", EndedAt: t0, Verdict: specs.VerdictFail, Identity: id("b1")}
	pool := []Node{
		{Name: "n0", Identity: id("b1"), Last: failed, Held: true},
		{Name: "n1", Identity: id("b1"), Last: passed("r2", t0, t0.Add(2*week))},
	}
	now := t0.Add(time.Hour)
	d := Decide(weekly(3, 1), 1, pool, now)
	assert.Empty(t, d.Firings, "a retained node is not due")
	assert.Equal(t, 1, d.InUse)

	pool[0].Held = false
	d = Decide(weekly(3, 1), 1, pool, now)
	require.Equal(t, [][]string{{"n0"}}, names(d.Firings), "released after a Fail, the node is due before its schedule")
	assert.Equal(t, Reason{Kind: ReasonFailed, Run: "r1", Detail: "run r1 ended Fail for the node, which is released and not certified"}, d.Firings[0][0].Reason)
}
