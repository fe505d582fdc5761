// Package kube is signet's Kubernetes side (DESIGN §5, §7): the Fleet that
// selects, reserves and releases nodes, the `pod` and `mpijob` backends,
// and the `signet exec` entrypoint that runs a check inside a pod. It talks
// to the API server through client-go (typed clients for core objects, the
// dynamic client for MPIJobs: no dependency on the MPI Operator's module).
// It registers itself as the "kubernetes" backend family (family.go), built
// from the configuration's kubernetes and backends.pod/mpijob sections, and
// counts its API requests in signet_kube_requests_total (metrics.go). It
// also registers the keeper of the evidence tip (tipkeeper.go): one
// ConfigMap, config evidence.tipConfigMap, written only by an update
// guarded by the resourceVersion read, never created or deleted.
package kube

// Names signet puts on Kubernetes objects. They are part of signet's
// contract with operators and with deploy/'s ValidatingAdmissionPolicy,
// which lets the reconciler change only these on a Node.
const (
	// ReservationAnnotation on a Node holds the reservation as JSON
	// (cluster, run, node UID, time, and the node's previous cordon and
	// taints).
	ReservationAnnotation = "signet.dev/reservation"
	// ReservationTaintKey is the NoSchedule taint of a reserved node; its
	// value is the run ID.
	ReservationTaintKey = "signet.dev/reserved"
	// Certification labels (optional): profile, run and expiry
	// (UTC, CertifiedUntilFormat: "20060102T150405Z") of a node's last Pass, and the annotation
	// holding the identity (UID and bootID) it was certified with.
	CertifiedProfileLabel       = "signet.dev/certified-profile"
	CertifiedRunLabel           = "signet.dev/certified-run"
	CertifiedUntilLabel         = "signet.dev/certified-until"
	CertifiedIdentityAnnotation = "signet.dev/certified-identity"

	// Labels on every object a backend creates.
	RunLabel        = "signet.dev/run"
	ClusterLabel    = "signet.dev/cluster"
	CheckIndexLabel = "signet.dev/check-index"
	// ParticipantLabel is a participant pod's index.
	ParticipantLabel = "signet.dev/participant"
	// ManagedByLabel is app.kubernetes.io/managed-by=signet.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "signet"

	// UnschedulableTaintKey is the taint the node lifecycle controller puts
	// on a cordoned node; check pods tolerate it.
	UnschedulableTaintKey = "node.kubernetes.io/unschedulable"
	// GPUResource is NVIDIA's device plugin resource.
	GPUResource = "nvidia.com/gpu"
)
