package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// TestNodeState: a node's state from its latest run, judged at the
// report's "as of" time with its TTL and expiring window.
func TestNodeState(t *testing.T) {
	asOf := time.Date(2026, 6, 30, 0, 0, 0, 0, time.UTC)
	m := &model{AsOf: asOf, TTL: 30 * 24 * time.Hour, Expiring: 7 * 24 * time.Hour}
	ended := func(daysAgo int) *run { return &run{EndedAt: asOf.Add(-time.Duration(daysAgo) * 24 * time.Hour)} }
	for _, tc := range []struct {
		name string
		nr   *nodeRun
		want nodeState
	}{
		{"fresh pass", &nodeRun{Run: ended(1), Verdict: specs.VerdictPass}, stateCertified},
		{"pass in its last week", &nodeRun{Run: ended(25), Verdict: specs.VerdictPass}, stateExpiring},
		{"pass past its TTL", &nodeRun{Run: ended(31), Verdict: specs.VerdictPass}, stateNone},
		{"fail, released", &nodeRun{Run: ended(1), Verdict: specs.VerdictFail, Released: true}, stateFailing},
		{"error, retained", &nodeRun{Run: ended(1), Verdict: specs.VerdictError, Retained: true}, stateRetained},
		{"still running", &nodeRun{Run: &run{}}, stateOpen},
		{"withheld", &nodeRun{Run: &run{Withheld: true}, Verdict: specs.VerdictPass}, stateUnproven},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := m.state(tc.nr)
			assert.Equal(t, tc.want, got)
		})
	}
	m.TTL = -1
	got, _ := m.state(&nodeRun{Run: ended(400), Verdict: specs.VerdictPass})
	assert.Equal(t, stateCertified, got, "a negative TTL never expires")
}

// TestIdentityChanges names the identity fields that differ between two
// snapshots of a node.
func TestIdentityChanges(t *testing.T) {
	a := &evidence.NodeSnapshot{UID: "u1", SystemUUID: "s1", BootID: "b1", Kernel: "6.1", GPUProduct: "H100", GPUDriver: "550"}
	b := *a
	b.BootID, b.GPUDriver = "b2", "560"
	assert.Equal(t, []string{"bootID", "driver"}, identityChanges(a, &b))
	assert.Empty(t, identityChanges(a, a))
	assert.Empty(t, identityChanges(nil, a))
}
