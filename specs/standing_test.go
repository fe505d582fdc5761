package specs_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/specs"
)

// TestStandingDigest: the approved digest covers every field but release
// (an action approved on its own) and reads intervals by their value, so
// "168h" and "10080m" digest alike while any other change needs a new
// approval.
func TestStandingDigest(t *testing.T) {
	base := func() *specs.StandingCertification {
		return &specs.StandingCertification{
			TypeMeta: specs.TypeMeta{APIVersion: specs.APIVersion, Kind: specs.KindStanding},
			Metadata: specs.ObjectMeta{Name: "pool-a"},
			Spec: specs.StandingSpec{Profile: "burn", Selector: map[string]string{"pool": "a"}, NodesPerRun: 1,
				Every: "168h", Triggers: []specs.Trigger{specs.TriggerIdentity}, Budget: specs.Budget{MaxNodes: 3}},
		}
	}
	digest := func(s *specs.StandingCertification) specs.Digest {
		b, err := specs.CanonicalStanding(s)
		require.NoError(t, err)
		return specs.DigestOf(b)
	}
	want := digest(base())

	same := base()
	same.Spec.Every = "10080m"
	same.Spec.Release = []string{"pool-a-3"}
	assert.Equal(t, want, digest(same), "an equal interval and a release leave the digest")

	for name, change := range map[string]func(*specs.StandingCertification){
		"every":        func(s *specs.StandingCertification) { s.Spec.Every = "24h" },
		"beforeExpiry": func(s *specs.StandingCertification) { s.Spec.BeforeExpiry = "24h" },
		"budget":       func(s *specs.StandingCertification) { s.Spec.Budget.MaxNodes = 4 },
		"percent":      func(s *specs.StandingCertification) { s.Spec.Budget = specs.Budget{MaxPercent: 3} },
		"nodesPerRun":  func(s *specs.StandingCertification) { s.Spec.NodesPerRun = 2 },
		"selector":     func(s *specs.StandingCertification) { s.Spec.Selector["pool"] = "b" },
		"triggers":     func(s *specs.StandingCertification) { s.Spec.Triggers = nil },
		"profile":      func(s *specs.StandingCertification) { s.Spec.Profile = "other" },
		"name":         func(s *specs.StandingCertification) { s.Metadata.Name = "pool-b" },
	} {
		s := base()
		change(s)
		assert.NotEqual(t, want, digest(s), "changing %s needs a new approval", name)
	}
}

// TestFiringRunID: a firing's run ID is "<name>-<sequence>" and reads back
// only for that name and a positive sequence without leading zeros.
func TestFiringRunID(t *testing.T) {
	assert.Equal(t, "pool-a-17", specs.FiringRunID("pool-a", 17))
	seq, ok := specs.FiringSequence("pool-a", "pool-a-17")
	assert.True(t, ok)
	assert.Equal(t, int64(17), seq)
	for _, run := range []string{"pool-a", "pool-a-", "pool-a-0", "pool-a-07", "pool-b-1", "pool-a-1-2", "pool-a-x"} {
		_, ok := specs.FiringSequence("pool-a", run)
		assert.False(t, ok, run)
	}
}
