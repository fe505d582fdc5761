package evidence

import (
	"cmp"
	"slices"
	"time"

	"signet.dev/signet/specs"
)

// NodeRun is one node's part in a finished run (one with a receipt), as
// the evidence branch records it: what a standing certification's due
// reasons are computed from by the reconciler and checked against by the
// audit, so both read a node's history the same way.
type NodeRun struct {
	Run     string `json:"run"`
	Profile string `json:"profile"`
	// EndedAt is the run evidence's endedAt.
	EndedAt time.Time     `json:"endedAt"`
	Verdict specs.Verdict `json:"verdict"`
	// CertifiedUntil is the receipt's certifiedUntil when the node passed;
	// zero otherwise.
	CertifiedUntil time.Time `json:"certifiedUntil,omitzero"`
	// Identity is the node as the run's admission snapshot recorded it.
	Identity NodeSnapshot `json:"identity"`
}

// NodeRuns returns each participant's NodeRun of a finished run: its
// admission, the node snapshots the admission binds (by node name), its
// run evidence and its receipt. A participant without a snapshot in snaps
// is left out.
func NodeRuns(adm *Admission, snaps map[string]NodeSnapshot, ev *RunEvidence, rc *Receipt) []NodeRun {
	verdicts := map[string]specs.Verdict{}
	for _, n := range ev.Nodes {
		verdicts[n.Node] = n.Verdict
	}
	var out []NodeRun
	for _, p := range adm.Participants {
		snap, ok := snaps[p.Node]
		if !ok {
			continue
		}
		nr := NodeRun{Run: adm.Run, Profile: adm.Profile.Name, EndedAt: ev.EndedAt, Verdict: verdicts[p.Node], Identity: snap}
		if nr.Verdict == "" {
			nr.Verdict = specs.VerdictError
		}
		if nr.Verdict == specs.VerdictPass {
			nr.CertifiedUntil = rc.CertifiedUntil
		}
		out = append(out, nr)
	}
	return out
}

// LatestRuns keeps each node's latest finished run of each profile: the
// one that ended last, the greater run ID on a tie, so that the order in
// which runs are added does not matter.
type LatestRuns struct {
	byProfile map[string]map[string]NodeRun
}

// Add records nr as its node's latest run of its profile unless a later
// one is known.
func (l *LatestRuns) Add(nr NodeRun) {
	if l.byProfile == nil {
		l.byProfile = map[string]map[string]NodeRun{}
	}
	m := l.byProfile[nr.Profile]
	if m == nil {
		m = map[string]NodeRun{}
		l.byProfile[nr.Profile] = m
	}
	if old, ok := m[nr.Identity.Name]; ok && cmp.Or(old.EndedAt.Compare(nr.EndedAt), cmp.Compare(old.Run, nr.Run)) >= 0 {
		return
	}
	m[nr.Identity.Name] = nr
}

// Latest returns node's latest finished run of profile.
func (l *LatestRuns) Latest(profile, node string) (NodeRun, bool) {
	nr, ok := l.byProfile[profile][node]
	return nr, ok
}

// All returns every node's latest run of every profile, by profile and
// then node name: what LatestRuns holds, for a caller that keeps it (an
// audit checkpoint) and feeds it back with Add.
func (l *LatestRuns) All() []NodeRun {
	var out []NodeRun
	for _, m := range l.byProfile {
		for _, nr := range m {
			out = append(out, nr)
		}
	}
	slices.SortFunc(out, func(a, b NodeRun) int {
		return cmp.Or(cmp.Compare(a.Profile, b.Profile), cmp.Compare(a.Identity.Name, b.Identity.Name))
	})
	return out
}
