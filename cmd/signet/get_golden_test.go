package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestGetAndWaitGolden pins what `signet get` and `signet reconcile --now
// --wait` print for a fixed /status: each table in text, and a watch
// read that prints only the row that changed; each pass outcome.
func TestGetAndWaitGolden(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cond := func(status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(at)}}
	}
	st := &reconciler.Status{
		Cluster: "east",
		Objects: []reconciler.ObjectStatus{
			{Kind: specs.KindProfile, Name: "h100"},
			{Kind: specs.KindRequest, Name: "batch-1", Run: "batch-1", Conditions: cond(metav1.ConditionFalse, "Failed", "run batch-1 finished: Fail")},
			{Kind: specs.KindRequest, Name: "batch-2", Conditions: cond(metav1.ConditionFalse, "NodesBusy", `node "gpu-1" is held by run "batch-1"`)},
		},
		Runs: []reconciler.RunStatus{
			{ID: "batch-1", Phase: evidence.PhaseDone, Verdict: specs.VerdictFail, Nodes: []string{"gpu-1", "gpu-2"}, Retained: []string{"gpu-1"}, Released: []string{"gpu-2"}, Conditions: cond(metav1.ConditionFalse, "Failed", "run batch-1 finished: Fail")},
		},
		Holds: map[string]string{"gpu-1": "batch-1"},
	}
	var out bytes.Buffer
	o := &getOptions{Output: outputOptions{Format: "text"}}
	for _, build := range []func(*reconciler.Status) table{requestsTable, runsTable, nodesTable} {
		require.NoError(t, o.print(&out, build(st), nil, true))
		out.WriteString("\n")
	}
	// A watch read: batch-2 admitted; only its row is printed again.
	before := requestsTable(st)
	st.Objects[2].Run, st.Objects[2].Conditions = "batch-2", cond(metav1.ConditionFalse, "Progressing", "run batch-2 is Admitted")
	require.NoError(t, o.print(&out, requestsTable(st), &before, false))
	out.WriteString("\n")
	for _, ps := range []*reconciler.PassStatus{
		{Number: 7, StartedAt: at, FinishedAt: at.Add(1200 * time.Millisecond), Revision: "0123456789abcdef0123", Admitted: []string{"batch-2", "batch-3"}},
		{Number: 8, StartedAt: at, FinishedAt: at.Add(30 * time.Millisecond), Revision: "0123456789abcdef0123"},
		{Number: 9, StartedAt: at, FinishedAt: at.Add(5 * time.Millisecond), Revision: "0123456789abcdef0123", Noop: true},
		{Number: 10, StartedAt: at, FinishedAt: at.Add(2 * time.Second), Error: "spec repository: connection refused"},
	} {
		printPass(&out, ps)
	}
	golden(t, "get.golden", out.String())
}
