package backend

import (
	"context"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// Family is one backend family (DESIGN §7): a Fleet of nodes and the
// backends that run checks on them, by check kind. A run belongs to the
// one family that serves every check of its profile; the reconciler asks
// only that family's Fleet to select, reserve and release the run's
// nodes, and only its backends to run the run's checks.
type Family struct {
	// Name names the family in errors and logs ("local", "kubernetes").
	Name string
	// Fleet selects, snapshots, reserves and releases the family's nodes.
	Fleet Fleet
	// Backends runs checks, by the check kind (specs.Check.Backend) each
	// serves. No two families of one reconciler serve the same kind.
	Backends map[specs.Backend]Backend
}

// Serves reports whether every check of prof runs on one of f's
// backends; a profile without checks is served by no family.
func (f *Family) Serves(prof *specs.CertificationProfile) bool {
	for _, c := range prof.Spec.Checks {
		if _, ok := f.Backends[c.Backend]; !ok {
			return false
		}
	}
	return len(prof.Spec.Checks) > 0
}

// Unreserved is the part of a Fleet whose nodes carry no reservation of
// their own outside the reconciler: the reconciler's in-process holds are
// the only reservation (a one-machine fleet, a fake). Reserve, Release,
// Certify, Uncertify and SweepCertified do nothing and return nil;
// Reservations lists none. Embed it and provide Select and Snapshot.
type Unreserved struct{}

// Reserve does nothing: the reconciler's holds already keep the nodes.
func (Unreserved) Reserve(context.Context, string, []Node) error { return nil }

// Release does nothing and never reports a node as not ours.
func (Unreserved) Release(context.Context, string, Node) error { return nil }

// Reservations returns none: nothing outlives the reconciler's process.
func (Unreserved) Reservations(context.Context) ([]Reservation, error) { return nil, nil }

// Certify does nothing: there is nowhere to label.
func (Unreserved) Certify(context.Context, Node, string, string, time.Time) error { return nil }

// Uncertify does nothing.
func (Unreserved) Uncertify(context.Context, Node) error { return nil }

// SweepCertified does nothing.
func (Unreserved) SweepCertified(context.Context, Vouched) error { return nil }

// snapshotter is the part of a Fleet that Unreserved leaves to the
// embedding type; it is here so that the compiler checks the split.
type snapshotter interface {
	Select(ctx context.Context, prof *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error)
	Snapshot(ctx context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error)
}

var _ Fleet = struct {
	Unreserved
	snapshotter
}{}
