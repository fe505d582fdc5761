// Package backend holds the contract between the reconciler and the
// backend families (Family: a Fleet and its Backends by check kind) that
// run checks and reserve nodes (DESIGN §4, §5, §7). The
// reconciler owns the lifecycle and the evidence; a backend only creates,
// observes and removes what runs a check, and a Fleet only selects,
// reserves and releases nodes. Both are built from durable records (the
// admission and the intent), never from the spec repository's current
// state.
package backend

import (
	"context"
	"errors"
	"strconv"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// CheckRun is everything a backend needs to run one check of one run. It
// is built from the durable admission record and intent, never from the
// spec repository's current state.
type CheckRun struct {
	Cluster      string
	Run          string
	Index        int
	Check        specs.Check
	Script       []byte // verified against ScriptDigest
	ScriptDigest specs.Digest
	Nonce        string
	Deadline     time.Time
	Participants []evidence.Participant
	// IntentAt is the intent's createdAt: a backend takes a result only
	// from objects created at or after it (whole seconds, as the API
	// server stamps creationTimestamp). Zero disables that check.
	IntentAt time.Time
}

// Env returns DESIGN §4's environment for participant index p, without
// SIGNET_RESULT_FILE, which the backend sets. The stage variable is set
// only for staged checks, and never for an MPI launcher (see LauncherEnv).
func (c *CheckRun) Env(p int) map[string]string {
	env := c.LauncherEnv()
	env[specs.EnvParticipantIndex] = strconv.Itoa(p)
	if c.Check.Stage != "" {
		env[specs.EnvStageName] = c.Check.Stage
	}
	return env
}

// LauncherEnv is the environment of an MPI launcher: DESIGN §4's variables
// with participant index 0 and never the stage variable.
func (c *CheckRun) LauncherEnv() map[string]string {
	return map[string]string{
		specs.EnvRunID:            c.Run,
		specs.EnvCheckName:        c.Check.Name,
		specs.EnvCheckIndex:       strconv.Itoa(c.Index),
		specs.EnvNonce:            c.Nonce,
		specs.EnvParticipantIndex: "0",
		specs.EnvParticipants:     strconv.Itoa(len(c.Participants)),
		specs.EnvGPUCount:         strconv.Itoa(c.Check.GPUCount),
	}
}

// ParticipantReport is what a backend observed of one participant. For an
// MPIJob, the launcher's termination and result stand for every
// participant (the outcome covers the whole group), and Identity is the
// worker that ran on the participant's node.
type ParticipantReport struct {
	Node        string
	Identity    evidence.Identity
	Termination specs.Termination
	Result      []byte // nil when no result was produced
	Stdout      []byte
	Stderr      []byte
}

// CheckReport is what a backend observed of one check.
type CheckReport struct {
	StartedAt    time.Time
	EndedAt      time.Time
	Participants []ParticipantReport
}

// Backend runs checks. A backend is never asked to create the backend
// object of one (run, check) twice: the reconciler calls Run only right
// after writing the intent, and Adopt after a restart.
type Backend interface {
	// Describe returns the names of the backend objects Run will create and
	// the digest of the rendered backend object, recorded in the intent.
	Describe(c *CheckRun) (names []string, rendered specs.Digest, err error)
	// Run creates the backend object and waits for a terminal state, the
	// deadline, or ctx's cancellation (cancel). It leaves the object in
	// place for Cleanup.
	Run(ctx context.Context, c *CheckRun) (*CheckReport, error)
	// Adopt finds the backend object of an intent written before a
	// restart. found is false when nothing is left to observe: the check
	// was interrupted and must be recorded as Error, never re-run.
	Adopt(ctx context.Context, c *CheckRun) (report *CheckReport, found bool, err error)
	// Cleanup removes what Run left, after the check evidence is durable.
	Cleanup(ctx context.Context, c *CheckRun) error
}

// Node names one participant node by name and the UID the API server gave
// it; a node deleted and created again under the same name is another node.
type Node struct {
	Name string
	UID  string
}

// Reservation is one node reserved by this cluster's reconciler, as read
// back from the cluster.
type Reservation struct {
	Node Node
	Run  string
	// At is when the reservation was made.
	At time.Time
}

// Errors of a Fleet.
var (
	// ErrBusy: a node is reserved by another run or not eligible now; the
	// request waits. Nothing was changed.
	ErrBusy = errors.New("node busy")
	// ErrNotOurs: the node's UID or reservation no longer matches the run
	// (deleted and re-created, or reserved by someone else); it was left
	// untouched.
	ErrNotOurs = errors.New("node no longer matches the run's reservation")
	// ErrIneligible: a requested node cannot take part (missing, too small,
	// not matching the selector). Nothing was changed.
	ErrIneligible = errors.New("node not eligible")
)

// Fleet is the set of nodes a reconciler certifies and how it reserves
// them (DESIGN §5 step 2, §7). Every write is guarded by the node's
// resourceVersion; a Fleet never changes a node field other than its own
// annotation, taint, labels and spec.unschedulable.
type Fleet interface {
	// Select resolves a request's participants: spec.nodes in order, or
	// spec.count nodes matching spec.selector (by name order). Every node
	// must be eligible for prof: allocatable at or above the profile's
	// floor, no running non-DaemonSet pod using GPUs, not reserved. The
	// error wraps ErrIneligible or ErrBusy and names the node and why.
	Select(ctx context.Context, prof *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error)
	// Snapshot returns node's identity for run in cluster (DESIGN §6).
	Snapshot(ctx context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error)
	// Reserve reserves every node for run, or none: annotation naming the
	// run (with the node's previous cordon and taints), the NoSchedule
	// reservation taint, and cordon. Each node's UID must equal the given
	// one. On any failure the nodes already changed are restored and the
	// error wraps ErrBusy, ErrIneligible or the API error. Reserving a node
	// already reserved for run (same UID) is a no-op.
	Reserve(ctx context.Context, run string, nodes []Node) error
	// Release restores the node's previous cordon and taints exactly and
	// removes the reservation, only when the node's UID is n.UID and its
	// annotation names run; otherwise it changes nothing and returns an
	// error wrapping ErrNotOurs (a node gone, re-created with another UID,
	// or reserved by another run). Release is idempotent: a node with
	// n.UID that no longer carries any reservation returns nil, so a step
	// retried after a crash does not report a released node as lost.
	Release(ctx context.Context, run string, n Node) error
	// Reservations lists the nodes this cluster has reserved.
	Reservations(ctx context.Context) ([]Reservation, error)
	// Certify labels a node that passed with its certification (profile,
	// run, expiry) when labelling is enabled; Uncertify removes those
	// labels (a later non-Pass). Both are no-ops when the node's UID is not
	// n.UID. A zero until leaves the expiry to the Fleet (its own TTL from
	// the pass time); the reconciler passes the run evidence's endedAt plus
	// the certification TTL, which its receipt records. SweepCertified removes labels whose node UID or bootID changed
	// since certification, that expired, whose expiry lies beyond the
	// Fleet's TTL from now, or, when vouched is not nil, whose run, node
	// and profile vouched does not confirm from the evidence branch.
	Certify(ctx context.Context, n Node, profile, run string, until time.Time) error
	Uncertify(ctx context.Context, n Node) error
	SweepCertified(ctx context.Context, vouched Vouched) error
}

// SnapshotBatcher is implemented by a Fleet that reads several nodes'
// identities in fewer requests than one Snapshot each (issue 19: API
// requests per run). Snapshots answers for each node, in the order of
// nodes, as fresh as Snapshot would: its identity, or (errs[i]) why it
// has none, as Snapshot's error would say it.
type SnapshotBatcher interface {
	Snapshots(ctx context.Context, cluster, run string, nodes []string) (snaps []*evidence.NodeSnapshot, errs []error)
}

// Snapshots returns the identities of nodes for run in cluster, in order,
// and for each node without one why: through fleet's SnapshotBatcher when
// it has one, one Snapshot each otherwise.
func Snapshots(ctx context.Context, fleet Fleet, cluster, run string, nodes []string) ([]*evidence.NodeSnapshot, []error) {
	if b, ok := fleet.(SnapshotBatcher); ok {
		return b.Snapshots(ctx, cluster, run, nodes)
	}
	snaps, errs := make([]*evidence.NodeSnapshot, len(nodes)), make([]error, len(nodes))
	for i, node := range nodes {
		snaps[i], errs[i] = fleet.Snapshot(ctx, cluster, run, node)
	}
	return snaps, errs
}

// Pooler is implemented by a Fleet that can serve standing
// certifications: Pool lists the nodes of a pool, spec.nodes (those that
// exist, in order) or the nodes matching spec.selector (by name), each
// with its identity now and, when it could not be reserved for prof now,
// why (not Ready, too small, a running GPU pod, reserved). The reconciler
// decides firings from it (reconciler/standing.Decide).
type Pooler interface {
	Pool(ctx context.Context, prof *specs.CertificationProfile, nodes []string, selector map[string]string) ([]PoolMember, error)
}

// PoolMember is one node of a standing certification's pool.
type PoolMember struct {
	// Identity is the node as a snapshot records it (no cluster or run).
	Identity evidence.NodeSnapshot
	// Busy says why the node cannot be reserved now; empty when it can.
	Busy string
}

// Vouched says whether the evidence branch backs a certification label:
// run passed on node under profile, or run is still unfinished (it will
// certify or uncertify the node itself).
type Vouched func(run, node, profile string) bool

// Certification is one node's certification as its Fleet records it.
type Certification struct {
	Node, Profile, Run string
	Until              time.Time
}

// CertificationLister is implemented by a Fleet that labels certified
// nodes: Certifications returns the certifications that hold now (not
// expired, identity unchanged), none when labelling is off. The
// reconciler's metrics read it at scrape time; a Fleet without it has no
// certified nodes to report.
type CertificationLister interface {
	Certifications(ctx context.Context) ([]Certification, error)
}
