package evidence

import (
	"time"

	"signet.dev/signet/specs"
)

// Predicate types of the documents a run leaves on the evidence branch
// (DESIGN §6). Every one is the predicate of an in-toto Statement v1 in a
// DSSE envelope signed by the reconciler's key.
const (
	PredicateAdmission   = "https://signet.dev/admission/v1"
	PredicateCheckIntent = "https://signet.dev/check-intent/v1"
	PredicateCheck       = "https://signet.dev/check/v1"
	PredicateEvidence    = "https://signet.dev/evidence/v1"
	PredicateCancel      = "https://signet.dev/cancel/v1"
	PredicateRelease     = "https://signet.dev/release/v1"
	PredicateReceipt     = "https://signet.dev/receipt/v1"
	PredicateFiring      = "https://signet.dev/firing/v1"
)

// FileRef binds a file of the run directory by its digest.
type FileRef struct {
	Path   string       `json:"path"`
	Digest specs.Digest `json:"digest"`
}

// ObjectRef names a rendered spec object and its canonical digest.
type ObjectRef struct {
	Kind   string       `json:"kind"`
	Name   string       `json:"name"`
	Digest specs.Digest `json:"digest"`
}

// Subject is the object's name in approvals and statements
// (specs.SubjectName).
func (o ObjectRef) Subject() string { return specs.SubjectName(o.Kind, o.Name, "") }

// Participant is one node of a run, bound to its snapshot file.
type Participant struct {
	Index    int     `json:"index"`
	Node     string  `json:"node"`
	UID      string  `json:"uid"`
	Snapshot FileRef `json:"snapshot"`
}

// Admission is the predicate of admission.json: everything a run was
// admitted with, frozen. The profile and request are stored as their
// canonical JSON so that a restarted reconciler runs exactly what was
// admitted, whatever the spec repository says now.
type Admission struct {
	Cluster           string                     `json:"cluster"`
	Run               string                     `json:"run"`
	AdmittedAt        time.Time                  `json:"admittedAt"`
	SpecRepository    string                     `json:"specRepository,omitempty"`
	SpecCommit        string                     `json:"specCommit"`
	SpecPath          string                     `json:"specPath"`
	TrustPolicyDigest specs.Digest               `json:"trustPolicyDigest"`
	Request           ObjectRef                  `json:"request"`
	RequestObject     specs.CertificationRequest `json:"requestObject"`
	Profile           ObjectRef                  `json:"profile"`
	ProfileObject     specs.CertificationProfile `json:"profileObject"`
	Bundle            BundleRecord               `json:"bundle"`
	Participants      []Participant              `json:"participants"`
	Approvals         []FileRef                  `json:"approvals"`
	RunDeadline       time.Time                  `json:"runDeadline"`
	// Firing binds the firing record (firing.json of the same run
	// directory) of a standing certification's run; nil for a request's.
	// Such an admission admits exactly the firing's chosen nodes.
	Firing *FileRef `json:"firing,omitempty"`
}

// BundleRecord is the bundle a run was admitted with: its aggregate digest
// and the digest of every file (DESIGN §3).
type BundleRecord struct {
	Path   string       `json:"path"`
	Digest specs.Digest `json:"digest"`
	Files  []FileRef    `json:"files"`
}

// CheckIntent is the predicate of checks/NN-name.intent.json, durable before
// the backend is created. An intent without check evidence after a restart
// means the check was interrupted: it is recorded as Error, never re-run.
type CheckIntent struct {
	Run            string       `json:"run"`
	Check          string       `json:"check"`
	Index          int          `json:"index"`
	Backend        string       `json:"backend"`
	BackendNames   []string     `json:"backendNames"`
	RenderedDigest specs.Digest `json:"renderedDigest"`
	ScriptDigest   specs.Digest `json:"scriptDigest"`
	Nonce          string       `json:"nonce"`
	Deadline       time.Time    `json:"deadline"`
	CreatedAt      time.Time    `json:"createdAt"`
}

// ParticipantOutcome is one participant's outcome of one check.
type ParticipantOutcome struct {
	Node     string        `json:"node"`
	Identity Identity      `json:"identity"`
	Verdict  specs.Verdict `json:"verdict"`
	Reason   string        `json:"reason,omitempty"`
	ExitCode *int          `json:"exitCode,omitempty"`
	Signal   string        `json:"signal,omitempty"`
	Result   *specs.Result `json:"result,omitempty"`
	Logs     []FileRef     `json:"logs,omitempty"`
}

// Identity is how a participant's workload was identified (DESIGN §4
// coverage): the backend-assigned workload id, the node name and node UID.
type Identity struct {
	Workload string `json:"workload"`
	Node     string `json:"node"`
	NodeUID  string `json:"nodeUID"`
	// Images are the containers that ran for this participant and the
	// image IDs their container runtime reported (Kubernetes backends,
	// issue 21 finding 5); absent where a backend runs no images.
	Images []ContainerImage `json:"images,omitempty"`
}

// ContainerImage is one container that ran: its pod, its name, whether it
// is an init container, the image it was given (digest-pinned) and the
// image ID the container runtime reported for it (status.containerStatuses
// [].imageID), which the backend checked against the pinned digest.
type ContainerImage struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Init      bool   `json:"init,omitempty"`
	Image     string `json:"image"`
	ImageID   string `json:"imageID"`
}

// CheckEvidence is the predicate of checks/NN-name.json.
type CheckEvidence struct {
	Run          string               `json:"run"`
	Check        string               `json:"check"`
	Index        int                  `json:"index"`
	Intent       FileRef              `json:"intent"`
	Verdict      specs.Verdict        `json:"verdict"`
	Reason       string               `json:"reason,omitempty"`
	Covered      bool                 `json:"covered"`
	Participants []ParticipantOutcome `json:"participants"`
	StartedAt    time.Time            `json:"startedAt"`
	EndedAt      time.Time            `json:"endedAt"`
}

// CheckSummary is one check's line in the run evidence.
type CheckSummary struct {
	Index    int           `json:"index"`
	Check    string        `json:"check"`
	Verdict  specs.Verdict `json:"verdict"`
	Evidence *FileRef      `json:"evidence,omitempty"`
	Skipped  bool          `json:"skipped,omitempty"`
}

// NodeSummary is one node's verdict in the run evidence.
type NodeSummary struct {
	Node    string        `json:"node"`
	Verdict specs.Verdict `json:"verdict"`
}

// RunEvidence is the predicate of evidence.json.
type RunEvidence struct {
	Run       string         `json:"run"`
	Cluster   string         `json:"cluster"`
	Admission FileRef        `json:"admission"`
	Verdict   specs.Verdict  `json:"verdict"`
	Canceled  bool           `json:"canceled"`
	Covered   bool           `json:"covered"`
	Checks    []CheckSummary `json:"checks"`
	Nodes     []NodeSummary  `json:"nodes"`
	EndedAt   time.Time      `json:"endedAt"`
}

// Action is the predicate of cancel.json and release.json: an approved
// action on a request, with copies of the approvals it relied on.
type Action struct {
	Run       string    `json:"run"`
	Action    string    `json:"action"`
	Request   ObjectRef `json:"request"`
	Approvals []FileRef `json:"approvals"`
	Nodes     []string  `json:"nodes,omitempty"`
	At        time.Time `json:"at"`
}

// Receipt is the predicate of receipt.json: the terminal record of a run,
// chained per cluster by sequence number and the previous receipt's digest.
type Receipt struct {
	Cluster        string        `json:"cluster"`
	Run            string        `json:"run"`
	Sequence       int64         `json:"sequence"`
	Previous       *FileRef      `json:"previous,omitempty"`
	Verdict        specs.Verdict `json:"verdict"`
	Evidence       FileRef       `json:"evidence"`
	EvidenceCommit string        `json:"evidenceCommit"`
	Cleanup        string        `json:"cleanup"`
	Released       []string      `json:"released"`
	Retained       []string      `json:"retained"`
	// ReleaseNotes says, for a released node whose reservation could not
	// be lifted (it was deleted and re-created, or its reservation no
	// longer names the run), why it was left untouched.
	ReleaseNotes []NodeNote `json:"releaseNotes,omitempty"`
	At           time.Time  `json:"at"`
	// CertifiedUntil is when the certification of the released (passing)
	// nodes expires: the run evidence's endedAt plus the reconciler's
	// certification TTL, as the nodes' certified-until label says. Zero
	// when the run certified no node or labelling is off. A standing
	// certification's expiry triggers are judged by it (NodeRun).
	CertifiedUntil time.Time `json:"certifiedUntil,omitzero"`
}

// NodeNote is a remark about one node.
type NodeNote struct {
	Node string `json:"node"`
	Note string `json:"note"`
}

// ChainLink is the content of a ChainPath file.
type ChainLink struct {
	Run     string  `json:"run"`
	Receipt FileRef `json:"receipt"`
}

// Firing is the predicate of firing.json: a standing certification's
// decision to certify some of its pool's nodes, durable before anything is
// admitted or reserved (docs/proposals/standing-certification.md, "Exactly
// once"). Its run is FiringRunID(standing name, Sequence); it is written
// only as a child of Tip, the commit the decision read, so no two firings
// spend the same budget.
type Firing struct {
	Cluster string `json:"cluster"`
	Run     string `json:"run"`
	// Standing is StandingCertification/<name> and its digest
	// (specs.CanonicalStanding: every field but release); StandingObject
	// is the object fired, as the admission copies its request, so that
	// the audit judges the firing's budget and triggers offline.
	Standing       ObjectRef                   `json:"standing"`
	StandingObject specs.StandingCertification `json:"standingObject"`
	// Sequence is the firing's number, from 1; Run ends in it.
	Sequence int64     `json:"sequence"`
	FiredAt  time.Time `json:"firedAt"`
	// Tip is the evidence commit the decision was computed from; empty
	// when the branch did not exist yet.
	Tip string `json:"tip"`
	// Approvals are the copies (under approvals/ of the run directory) of
	// the approvals of the standing certification relied on at FiredAt.
	Approvals []FileRef `json:"approvals"`
	// Pool is every node of the pool at the decision, the budget's
	// denominator.
	Pool []PoolNode `json:"pool"`
	// InUse are the pool nodes signet held or had claimed at the decision.
	InUse []string `json:"inUse"`
	// Chosen are the nodes this firing certifies, in the decided order,
	// each with why it was due.
	Chosen []ChosenNode `json:"chosen"`
}

// PoolNode is a node of a standing certification's pool.
type PoolNode struct {
	Node string `json:"node"`
	UID  string `json:"uid"`
}

// ChosenNode is a node a firing chose and why it was due.
type ChosenNode struct {
	Node   string    `json:"node"`
	UID    string    `json:"uid"`
	Reason DueReason `json:"reason"`
}

// DueReason is why a pool node is due (reconciler/standing.Reason is this
// type): its kind (DueJoined, …), the run it refers to (none for joined)
// and the words a person reads.
type DueReason struct {
	Kind   string `json:"kind"`
	Run    string `json:"run,omitempty"`
	Detail string `json:"detail"`
}

// Kinds of DueReason.
const (
	DueJoined   = "joined"
	DueSchedule = "schedule"
	DueExpiry   = "expiry"
	DueExpired  = "expired"
	DueIdentity = "identity"
	// DueFailed: the node's latest run of the profile did not pass and
	// the node is no longer held (an approved release lifted it): it is
	// recertified at once, whatever the schedule.
	DueFailed = "failed"
)

// Nodes are the names of the firing's chosen nodes, in order.
func (f *Firing) Nodes() []string {
	out := make([]string, len(f.Chosen))
	for i, c := range f.Chosen {
		out[i] = c.Node
	}
	return out
}
