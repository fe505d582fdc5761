package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestStatusStanding: with --reconciler, signet status shows each standing
// certification of a real reconciler's /status: pool coverage, budget in
// use of allowed, next due time and last firing, in text and JSON; the
// daemon's metrics export the same numbers.
func TestStatusStanding(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("smoke", "", testenv.Check{Name: "smoke", Script: "result Pass; exit 0"})
	repo.AddStanding("daily", "smoke", "nodes: [localhost]", "nodesPerRun: 1", "every: 24h", "budget: {maxNodes: 1}")
	repo.Commit("specs")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/smoke", "StandingCertification/daily")
	reg := prometheus.NewRegistry()
	r, sec := localReconciler(t, repo, keys, reg)
	ctx := t.Context()
	_, err := r.ReconcileOnce(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := r.Wait(wctx, "daily-1")
	require.NoError(t, err)
	require.Equal(t, specs.VerdictPass, run.Verdict)
	_, err = r.ReconcileOnce(ctx) // the pass after the run: certified, not due
	require.NoError(t, err)
	srv := httptest.NewServer(r.Listeners(nil, sec)[0].Handler)
	defer srv.Close()

	out, stderr, code := runSigningCLI(t, "status", "--repo", repo.Dir, "--branch", evidencetest.Branch, "--reconciler", srv.URL, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Standing, 1, out)
	row := st.Standing[0]
	require.NotNil(t, row.StandingStatus, out)
	assert.Equal(t, "east", row.Cluster)
	assert.Equal(t, "daily", row.Name)
	assert.True(t, row.Ready, row.Message)
	assert.Equal(t, reconciler.StandingStatus{Pool: 1, Allowed: 1, Certified: 1, LastFiring: "daily-1", Next: row.Next}, *row.StandingStatus)
	assert.WithinDuration(t, time.Now().Add(24*time.Hour), row.Next, time.Minute, "due a day after its run")

	out, stderr, code = runSigningCLI(t, "status", "--repo", repo.Dir, "--branch", evidencetest.Branch, "--reconciler", srv.URL)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^CLUSTER +STANDING +READY +POOL +CERTIFIED +EXPIRING +FAILED +NEVER +BUDGET +NEXT DUE +LAST FIRING$`, out)
	assert.Regexp(t, `(?m)^east +daily +True +1 +1 +0 +0 +0 +0/1 +\S+Z +daily-1$`, out)

	expected := `
# HELP signet_standing_budget_allowed A standing certification's budget in nodes for its pool, at the last pass.
# TYPE signet_standing_budget_allowed gauge
signet_standing_budget_allowed{standing="daily"} 1
# HELP signet_standing_budget_in_use Pool nodes a standing certification's budget counts as held or claimed, at the last pass.
# TYPE signet_standing_budget_in_use gauge
signet_standing_budget_in_use{standing="daily"} 0
# HELP signet_standing_nodes A standing certification's pool nodes by their latest run of its profile (certified, expiring, failed, never), at the last pass.
# TYPE signet_standing_nodes gauge
signet_standing_nodes{standing="daily",state="certified"} 1
signet_standing_nodes{standing="daily",state="expiring"} 0
signet_standing_nodes{standing="daily",state="failed"} 0
signet_standing_nodes{standing="daily",state="never"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"signet_standing_budget_allowed", "signet_standing_budget_in_use", "signet_standing_nodes"))
	n, err := testutil.GatherAndCount(reg, "signet_standing_next_due_timestamp_seconds")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}
