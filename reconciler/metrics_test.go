package reconciler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// certFleet is a Fleet that lists the certifications it is given (or
// fails with err).
type certFleet struct {
	harnessFleet
	certs []backend.Certification
	err   error
}

func (f certFleet) Certifications(context.Context) ([]backend.Certification, error) {
	return f.certs, f.err
}

var _ backend.CertificationLister = certFleet{}

// TestCertifiedNodesMetrics: signet_certified_nodes counts, per profile,
// the certifications every Fleet lists, 0 for a profile of the last pass
// with none; signet_certified_nodes_expiring_24h counts those whose
// expiry is less than 24 hours away (not those 24 hours away or more). A
// Fleet that cannot list its certifications leaves the others counted.
func TestCertifiedNodesMetrics(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	fams := []*backend.Family{
		{Name: "a", Fleet: certFleet{certs: []backend.Certification{
			{Node: "n1", Profile: "h100", Run: "r1", Until: now.Add(ExpiringWithin - time.Second)},
			{Node: "n2", Profile: "h100", Run: "r1", Until: now.Add(ExpiringWithin)},
			{Node: "n3", Profile: "h200", Run: "r2", Until: now.Add(90 * 24 * time.Hour)},
		}}},
		{Name: "b", Fleet: certFleet{err: errors.New("apiserver unreachable")}},
	}
	r, err := New(&Config{Cluster: "c1"}, Options{Families: fams, Metrics: NewMetrics(reg), Now: func() time.Time { return now }})
	require.NoError(t, err)
	r.publish("rev", map[string]ObjectStatus{
		"CertificationProfile/h100": {Kind: specs.KindProfile, Name: "h100"},
		"CertificationProfile/idle": {Kind: specs.KindProfile, Name: "idle"},
	})
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if !strings.HasPrefix(mf.GetName(), "signet_certified_nodes") {
				continue
			}
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{
		"signet_certified_nodes/h100": 2, "signet_certified_nodes_expiring_24h/h100": 1,
		"signet_certified_nodes/h200": 1, "signet_certified_nodes_expiring_24h/h200": 0,
		"signet_certified_nodes/idle": 0, "signet_certified_nodes_expiring_24h/idle": 0,
	}, got)
}

// TestStatusCertified: /status lists every Fleet's certifications (node,
// profile, run, expiry in UTC, by node name), and names the family whose
// certifications could not be listed instead of failing the whole status.
func TestStatusCertified(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	until := now.Add(48 * time.Hour).In(time.FixedZone("CET", 3600))
	fams := []*backend.Family{
		{Name: "a", Fleet: certFleet{certs: []backend.Certification{
			{Node: "n2", Profile: "h100", Run: "r1", Until: until},
			{Node: "n1", Profile: "h200", Run: "r2", Until: until},
		}}},
		{Name: "b", Fleet: certFleet{err: errors.New("apiserver unreachable")}},
	}
	r, err := New(&Config{Cluster: "c1"}, Options{Families: fams, Now: func() time.Time { return now }})
	require.NoError(t, err)
	st := r.Status()
	assert.Equal(t, []CertifiedNode{
		{Node: "n1", Profile: "h200", Run: "r2", Until: until.UTC()},
		{Node: "n2", Profile: "h100", Run: "r1", Until: until.UTC()},
	}, st.Certified)
	assert.Equal(t, "backend family b: listing certified nodes: apiserver unreachable", st.CertifiedError)
}

// countFleet counts its Certifications calls.
type countFleet struct {
	harnessFleet
	calls *int
}

func (f countFleet) Certifications(context.Context) ([]backend.Certification, error) {
	*f.calls++
	return nil, nil
}

// TestCertificationsListedOncePerTTL: clients polling /status and scrapes
// within certificationsTTL share one listing of the cluster's nodes; after
// it the next status lists again.
func TestCertificationsListedOncePerTTL(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	calls := 0
	fams := []*backend.Family{{Name: "a", Fleet: countFleet{calls: &calls}}}
	r, err := New(&Config{Cluster: "c1"}, Options{Families: fams, Now: func() time.Time { return now }})
	require.NoError(t, err)
	for range 5 {
		r.Status()
	}
	assert.Equal(t, 1, calls, "five polls within the TTL list once")
	now = now.Add(certificationsTTL)
	r.Status()
	assert.Equal(t, 2, calls, "a poll after the TTL lists again")
}
