package specs

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
)

// APIVersion is the apiVersion of every signet kind.
const APIVersion = "signet.dev/v1alpha1"

// Kind names.
const (
	KindProfile  = "CertificationProfile"
	KindRequest  = "CertificationRequest"
	KindStanding = "StandingCertification"
)

// Kinds are the signet kinds, in the order findings list them.
var Kinds = []string{KindProfile, KindRequest, KindStanding}

func isKind(kind string) bool { return slices.Contains(Kinds, kind) }

// TypeMeta is the apiVersion and kind of a document.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ObjectMeta is the Kubernetes-style metadata signet reads: only the name
// (a DNS label). Labels and annotations are accepted so that kustomize
// overlays may add them; they never change what a run does.
type ObjectMeta struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CertificationProfile says what a certification is: a digest-pinned bundle
// of scripts and the ordered checks that run them.
type CertificationProfile struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta  `json:"metadata"`
	Spec     ProfileSpec `json:"spec"`
}

// ProfileSpec is the body of a CertificationProfile.
type ProfileSpec struct {
	Bundle       BundleRef    `json:"bundle"`
	Participants Participants `json:"participants"`
	OnFailure    OnFailure    `json:"onFailure,omitempty"`
	Checks       []Check      `json:"checks"`
}

// BundleRef names a directory of the spec repository and pins its aggregate
// digest (DESIGN §3).
type BundleRef struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// Participants bounds how many nodes take part in one run:
// 1 ≤ Min ≤ Max ≤ MaxParticipants.
type Participants struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// MaxParticipants is the largest group one profile may certify.
const MaxParticipants = 64

// OnFailure decides whether later checks run after one fails.
type OnFailure string

// OnFailure values; empty means OnFailureContinue.
const (
	OnFailureContinue OnFailure = "continue"
	OnFailureStop     OnFailure = "stop"
)

// Backend is where a check runs.
type Backend string

// Backend values.
const (
	BackendLocal  Backend = "local"
	BackendPod    Backend = "pod"
	BackendMPIJob Backend = "mpijob"
)

// Check is one step of a profile, run serially in list order.
type Check struct {
	Name     string    `json:"name"`
	Script   string    `json:"script"`
	Backend  Backend   `json:"backend"`
	GPUCount int       `json:"gpuCount,omitempty"`
	Deadline Seconds   `json:"deadline"`
	Stage    string    `json:"stage,omitempty"`
	Workload *Workload `json:"workload,omitempty"`
}

// Seconds is a whole, positive number of seconds written "600s". It is
// decoded only from that form (see ParseSeconds) and encoded back to it.
type Seconds int64

// Workload is the bounded, typed request of a pod or mpijob check. There is
// no free-form pass-through: anything not listed here cannot be asked for.
type Workload struct {
	// Image is pinned by digest: repo@sha256:<hex>.
	Image                 string            `json:"image"`
	Resources             WorkloadResources `json:"resources,omitempty"`
	SecurityContext       *WorkloadSecurity `json:"securityContext,omitempty"`
	HostNetwork           bool              `json:"hostNetwork,omitempty"`
	HostPaths             []HostPathMount   `json:"hostPaths,omitempty"`
	Queue                 string            `json:"queue,omitempty"`
	RequiredTopologyLevel string            `json:"requiredTopologyLevel,omitempty"`
}

// WorkloadResources are per-participant requests and limits
// (cpu, memory, ephemeral-storage, nvidia.com/gpu, …).
type WorkloadResources struct {
	Requests map[string]resource.Quantity `json:"requests,omitempty"`
	Limits   map[string]resource.Quantity `json:"limits,omitempty"`
}

// WorkloadSecurity is the part of a container security context a profile
// may ask for; the reconciler's ceiling decides what is allowed.
type WorkloadSecurity struct {
	Privileged   bool     `json:"privileged,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	RunAsUser    *int64   `json:"runAsUser,omitempty"`
	RunAsNonRoot *bool    `json:"runAsNonRoot,omitempty"`
}

// HostPathMount mounts a host path read-only into the check container.
type HostPathMount struct {
	Path      string `json:"path"`
	MountPath string `json:"mountPath"`
}

// CertificationRequest asks for one run of a profile on a set of nodes.
type CertificationRequest struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta  `json:"metadata"`
	Spec     RequestSpec `json:"spec"`
}

// RequestSpec is the body of a CertificationRequest. Everything but Cancel
// and Release is an execution field, frozen once the run is admitted.
type RequestSpec struct {
	Profile  string            `json:"profile"`
	Nodes    []string          `json:"nodes,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	Count    int               `json:"count,omitempty"`
	Cancel   bool              `json:"cancel,omitempty"`
	Release  bool              `json:"release,omitempty"`
}

// StandingCertification keeps a pool of nodes certified with one profile:
// approved once, it fires runs of NodesPerRun due nodes (docs/design.md,
// Standing certification) while the pool's nodes held by signet stay
// within Budget. Every field but Release is part of its digest.
type StandingCertification struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta   `json:"metadata"`
	Spec     StandingSpec `json:"spec"`
}

// StandingSpec is the body of a StandingCertification.
type StandingSpec struct {
	// Profile is the CertificationProfile every firing runs.
	Profile string `json:"profile"`
	// Nodes names the pool explicitly (for a local profile: this machine,
	// its hostname or localhost).
	Nodes []string `json:"nodes,omitempty"`
	// Selector names the pool as the nodes carrying these labels when a
	// firing is decided; exactly one of Nodes and Selector.
	Selector map[string]string `json:"selector,omitempty"`
	// NodesPerRun is how many due nodes one firing certifies together,
	// within the profile's participants.
	NodesPerRun int `json:"nodesPerRun"`
	// Every makes a node due when its latest run of the profile ended this
	// long ago ("168h"; at least 10m).
	Every Interval `json:"every,omitempty"`
	// BeforeExpiry makes a node due when its certification label expires
	// within this long ("24h").
	BeforeExpiry Interval `json:"beforeExpiry,omitempty"`
	// Triggers are the events that make a node due at once: identity (its
	// UID, systemUUID, bootID, kernel, GPU product or driver changed since
	// its latest run), joined (no run of the profile yet), expired (its
	// certification expired). At least one of every, beforeExpiry and
	// triggers is set.
	Triggers []Trigger `json:"triggers,omitempty"`
	// Budget bounds the pool's nodes signet holds at once.
	Budget Budget `json:"budget"`
	// Release names firings (run IDs "<name>-<sequence>") whose retained
	// nodes may be released; an action approved on its own
	// (StandingCertification/<name>#release), outside the digest.
	Release []string `json:"release,omitempty"`
}

// Interval is a positive duration of whole seconds written as Go writes
// durations, e.g. "168h" or "90m" (docs/reference/standingcertification.md).
type Interval string

// Trigger is an event that makes a pool node due for certification.
type Trigger string

// Trigger values.
const (
	// TriggerIdentity: the node's UID, systemUUID, bootID, kernel, GPU
	// product or driver differs from its latest run's snapshot.
	TriggerIdentity Trigger = "identity"
	// TriggerJoined: the node has no run of the profile yet.
	TriggerJoined Trigger = "joined"
	// TriggerExpired: the node's certification expired.
	TriggerExpired Trigger = "expired"
)

// Budget bounds the pool's nodes signet holds at once (reserved by a run
// without a receipt, or retained after a non-Pass until an approved
// release): exactly one of MaxNodes or MaxPercent of the pool, rounded
// down.
type Budget struct {
	// MaxNodes is the most pool nodes held at once.
	MaxNodes int `json:"maxNodes,omitempty"`
	// MaxPercent is the most pool nodes held at once as a percentage of
	// the pool's size at each firing (1 to 100, rounded down; a budget that
	// rounds to 0 does not fire).
	MaxPercent int `json:"maxPercent,omitempty"`
}
