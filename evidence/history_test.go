package evidence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"signet.dev/signet/evidence"
)

// TestLatestRuns: a node's latest run of a profile is the one that ended
// last, the greater run ID on a tie, whatever the order runs are added
// in; All lists every node's latest of every profile, by profile and
// node, and feeding it back gives the same.
func TestLatestRuns(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nr := func(run, profile, node string, ended time.Duration) evidence.NodeRun {
		return evidence.NodeRun{Run: run, Profile: profile, EndedAt: t0.Add(ended), Identity: evidence.NodeSnapshot{Name: node}}
	}
	runs := []evidence.NodeRun{
		nr("a", "quick", "n1", 0), nr("b", "quick", "n1", time.Hour), nr("c", "quick", "n1", time.Hour),
		nr("d", "quick", "n2", 0), nr("e", "burn", "n1", 2*time.Hour),
	}
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}} {
		var l evidence.LatestRuns
		for _, i := range order {
			l.Add(runs[i])
		}
		got, ok := l.Latest("quick", "n1")
		assert.True(t, ok)
		assert.Equal(t, "c", got.Run, "order %v", order)
		_, ok = l.Latest("burn", "n2")
		assert.False(t, ok)
		all := l.All()
		assert.Equal(t, []evidence.NodeRun{runs[4], runs[2], runs[3]}, all, "order %v", order)
		var again evidence.LatestRuns
		for _, r := range all {
			again.Add(r)
		}
		assert.Equal(t, all, again.All())
	}
}
