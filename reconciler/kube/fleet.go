package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Labels of NVIDIA GPU feature discovery (GFD) that a node snapshot
// records. GFD publishes the driver version both as
// nvidia.com/cuda.driver-version.{full,major,minor,revision} (current) and
// as nvidia.com/cuda.driver.{major,minor,rev} (older releases, still
// published); the snapshot takes the full version and, on nodes labelled
// by an older GFD, joins the three legacy parts with dots.
const (
	GPUProductLabel        = "nvidia.com/gpu.product"
	GPUDriverVersionLabel  = "nvidia.com/cuda.driver-version.full"
	GPUDriverMajorLabel    = "nvidia.com/cuda.driver.major"
	GPUDriverMinorLabel    = "nvidia.com/cuda.driver.minor"
	GPUDriverRevisionLabel = "nvidia.com/cuda.driver.rev"
)

// CertifiedUntilFormat is the layout of CertifiedUntilLabel's value (UTC);
// a label value cannot hold ':'.
const CertifiedUntilFormat = "20060102T150405Z"

// conflictRetry bounds how often one node write is retried after a
// resourceVersion conflict; every retry re-reads the node and re-checks it.
var conflictRetry = retry.DefaultRetry // 5 steps

// FleetOptions configures NewFleet.
type FleetOptions struct {
	// Cluster is this reconciler's cluster name; a reservation annotation
	// naming another cluster is never this Fleet's to release or list.
	Cluster string
	// Evidence identifies the evidence branch this reconciler records its
	// runs on (EvidenceID). It is written into every reservation, and a
	// reservation recorded for another evidence branch is never this
	// Fleet's to release or list, even under the same cluster name: two
	// reconcilers that share a cluster name by mistake must not lift each
	// other's reservations as stale.
	Evidence string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Certify enables certification labels; nil leaves nodes unlabelled
	// and makes Certify, Uncertify and SweepCertified no-ops.
	Certify *CertifyOptions
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// CertifyOptions enables certification labels.
type CertifyOptions struct {
	// TTL is how long a certification lasts when Certify is given no
	// expiry (a zero until).
	TTL time.Duration
}

// Fleet is the backend.Fleet of a Kubernetes cluster. It writes a Node
// only with Update (never Patch), so that every write carries the
// resourceVersion it was decided on and a concurrent change makes it fail
// with a conflict, after which the node is read and checked again. It
// changes nothing on a Node but ReservationAnnotation,
// ReservationTaintKey's taint, spec.unschedulable, the certification
// labels and CertifiedIdentityAnnotation.
type Fleet struct {
	client   kubernetes.Interface
	cluster  string
	evidence string
	now      func() time.Time
	certify  *CertifyOptions
	log      *slog.Logger
}

var _ backend.Fleet = (*Fleet)(nil)

// NewFleet returns a Fleet reaching the cluster through client.
func NewFleet(client kubernetes.Interface, o FleetOptions) *Fleet {
	f := &Fleet{client: client, cluster: o.Cluster, evidence: o.Evidence, now: o.Now, certify: o.Certify, log: o.Logger}
	if f.now == nil {
		f.now = time.Now
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	return f
}

// NodeError says why one node cannot be selected, reserved or released. It
// unwraps to backend.ErrBusy, backend.ErrIneligible, backend.ErrNotOurs or
// the API error.
type NodeError struct {
	Node   string
	Reason string
	Err    error
}

func (e *NodeError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("node %s: %v", e.Node, e.Err)
	}
	return fmt.Sprintf("node %s: %v: %s", e.Node, e.Err, e.Reason)
}

func (e *NodeError) Unwrap() error { return e.Err }

func busy(node, format string, a ...any) *NodeError {
	return &NodeError{Node: node, Reason: fmt.Sprintf(format, a...), Err: backend.ErrBusy}
}

func ineligible(node, format string, a ...any) *NodeError {
	return &NodeError{Node: node, Reason: fmt.Sprintf(format, a...), Err: backend.ErrIneligible}
}

func notOurs(node, format string, a ...any) *NodeError {
	return &NodeError{Node: node, Reason: fmt.Sprintf(format, a...), Err: backend.ErrNotOurs}
}

func apiError(node, what string, err error) *NodeError {
	return &NodeError{Node: node, Reason: what, Err: err}
}

// reservation is ReservationAnnotation's JSON value.
type reservation struct {
	Cluster  string    `json:"cluster"`
	Evidence string    `json:"evidence,omitempty"` // FleetOptions.Evidence of the reserving reconciler
	Run      string    `json:"run"`
	UID      string    `json:"uid"`
	At       time.Time `json:"at"`
	Prior    prior     `json:"prior"`
}

// prior is what a reservation changed: the node's cordon and its whole
// taint list, as they were just before it.
type prior struct {
	Unschedulable bool           `json:"unschedulable"`
	Taints        []corev1.Taint `json:"taints"`
}

// readReservation returns the node's reservation annotation, nil when
// there is none; a value that is not a reservation is an error.
func readReservation(n *corev1.Node) (*reservation, error) {
	v, ok := n.Annotations[ReservationAnnotation]
	if !ok {
		return nil, nil
	}
	var r reservation
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", ReservationAnnotation, err)
	}
	if r.Run == "" || r.Cluster == "" {
		return nil, fmt.Errorf("annotation %s: no cluster or run", ReservationAnnotation)
	}
	return &r, nil
}

// holder describes who holds a reserved node, or "" when it is not
// reserved by anyone (no annotation, no reservation taint).
func holder(n *corev1.Node) string {
	r, err := readReservation(n)
	switch {
	case err != nil:
		return fmt.Sprintf("unreadable reservation (%v)", err)
	case r != nil:
		if r.Evidence != "" {
			return fmt.Sprintf("reserved by run %q of cluster %q (evidence %s) since %s", r.Run, r.Cluster, r.Evidence, r.At.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("reserved by run %q of cluster %q since %s", r.Run, r.Cluster, r.At.UTC().Format(time.RFC3339))
	}
	for _, t := range n.Spec.Taints {
		if t.Key == ReservationTaintKey {
			return fmt.Sprintf("reserved by run %q (taint %s without annotation)", t.Value, ReservationTaintKey)
		}
	}
	return ""
}

func (f *Fleet) ours(r *reservation, run string) bool {
	return r != nil && r.Cluster == f.cluster && r.Evidence == f.evidence && r.Run == run
}

// ---- Select ----

// Select implements backend.Fleet. With spec.nodes every named node is
// checked and the first problem (ineligible before busy) is returned. With
// spec.selector and spec.count the first count eligible nodes by name are
// chosen; when fewer are eligible the error wraps ErrBusy if the busy ones
// would make up the count once free, ErrIneligible otherwise.
func (f *Fleet) Select(ctx context.Context, prof *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error) {
	floor := prof.Floor()
	if len(req.Spec.Nodes) > 0 {
		seen := map[string]bool{}
		var firstBusy error
		for _, name := range req.Spec.Nodes {
			if seen[name] {
				return nil, ineligible(name, "named twice in spec.nodes")
			}
			seen[name] = true
			n, err := f.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, ineligible(name, "no such node")
			}
			if err != nil {
				return nil, apiError(name, "get", err)
			}
			if err := f.eligible(ctx, n, floor); err != nil {
				if !errors.Is(err, backend.ErrBusy) {
					return nil, err
				}
				if firstBusy == nil {
					firstBusy = err
				}
			}
		}
		if firstBusy != nil {
			return nil, firstBusy
		}
		return slices.Clone(req.Spec.Nodes), nil
	}

	if len(req.Spec.Selector) == 0 || req.Spec.Count < 1 {
		return nil, fmt.Errorf("%w: request %s names no nodes and no selector with a count", backend.ErrIneligible, req.Metadata.Name)
	}
	sel := labels.SelectorFromSet(req.Spec.Selector)
	list, err := f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list nodes matching %s: %w", sel, err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	var chosen []string
	var busyErrs, inelErrs []string
	for i := range items {
		if len(chosen) == req.Spec.Count {
			break
		}
		err := f.eligible(ctx, &items[i], floor)
		switch {
		case err == nil:
			chosen = append(chosen, items[i].Name)
		case errors.Is(err, backend.ErrBusy):
			busyErrs = append(busyErrs, err.Error())
		case errors.Is(err, backend.ErrIneligible):
			inelErrs = append(inelErrs, err.Error())
		default:
			return nil, err
		}
	}
	if len(chosen) == req.Spec.Count {
		return chosen, nil
	}
	why := strings.Join(append(busyErrs, inelErrs...), "; ")
	if why == "" {
		why = "no other node matches"
	}
	sentinel := backend.ErrIneligible
	if len(chosen)+len(busyErrs) >= req.Spec.Count {
		sentinel = backend.ErrBusy
	}
	return nil, fmt.Errorf("%w: selector %s: %d of %d nodes eligible (%d matching): %s",
		sentinel, sel, len(chosen), req.Spec.Count, len(items), why)
}

// eligible returns nil when n can take part in a run of a profile with
// floor, or a *NodeError wrapping ErrIneligible (too small) or ErrBusy
// (not Ready, reserved, a running GPU pod).
func (f *Fleet) eligible(ctx context.Context, n *corev1.Node, floor map[string]resource.Quantity) error {
	names := make([]string, 0, len(floor))
	for name := range floor {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		want := floor[name]
		have, ok := n.Status.Allocatable[corev1.ResourceName(name)]
		if !ok {
			return ineligible(n.Name, "no allocatable %s, profile floor is %s", name, want.String())
		}
		if have.Cmp(want) < 0 {
			return ineligible(n.Name, "allocatable %s is %s, below the profile floor %s", name, have.String(), want.String())
		}
	}
	return f.available(ctx, n)
}

// available returns nil when n is Ready, reserved by nobody and runs no
// non-DaemonSet pod using GPUs; otherwise a *NodeError wrapping ErrBusy.
func (f *Fleet) available(ctx context.Context, n *corev1.Node) error {
	if !ready(n) {
		return busy(n.Name, "not Ready")
	}
	if h := holder(n); h != "" {
		return busy(n.Name, "%s", h)
	}
	return f.noGPUPods(ctx, n.Name)
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// noGPUPods returns a *NodeError wrapping ErrBusy naming the first pod
// bound to node that is Pending or Running, requests nvidia.com/gpu and is
// not owned by a DaemonSet (device plugins, exporters and the like).
func (f *Fleet) noGPUPods(ctx context.Context, node string) error {
	pods, err := f.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return apiError(node, "list pods", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodPending && p.Status.Phase != corev1.PodRunning {
			continue
		}
		if daemonSetOwned(p) || !usesGPU(p) {
			continue
		}
		return busy(node, "pod %s/%s (%s) uses %s", p.Namespace, p.Name, p.Status.Phase, GPUResource)
	}
	return nil
}

func daemonSetOwned(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

func usesGPU(p *corev1.Pod) bool {
	gpu := corev1.ResourceName(GPUResource)
	uses := func(cs []corev1.Container) bool {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				if q, ok := l[gpu]; ok && q.Sign() > 0 {
					return true
				}
			}
		}
		return false
	}
	return uses(p.Spec.InitContainers) || uses(p.Spec.Containers)
}

// ---- Snapshot ----

// Snapshot implements backend.Fleet. A missing node is an error wrapping
// ErrIneligible.
func (f *Fleet) Snapshot(ctx context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error) {
	n, err := f.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, ineligible(node, "no such node")
	}
	if err != nil {
		return nil, apiError(node, "get", err)
	}
	return &evidence.NodeSnapshot{
		Cluster:     cluster,
		Run:         run,
		Name:        n.Name,
		UID:         string(n.UID),
		SystemUUID:  n.Status.NodeInfo.SystemUUID,
		BootID:      n.Status.NodeInfo.BootID,
		Kernel:      n.Status.NodeInfo.KernelVersion,
		GPUProduct:  n.Labels[GPUProductLabel],
		GPUDriver:   gpuDriver(n.Labels),
		Capacity:    quantities(n.Status.Capacity),
		Allocatable: quantities(n.Status.Allocatable),
	}, nil
}

func gpuDriver(l map[string]string) string {
	if v := l[GPUDriverVersionLabel]; v != "" {
		return v
	}
	maj, mnr, rev := l[GPUDriverMajorLabel], l[GPUDriverMinorLabel], l[GPUDriverRevisionLabel]
	if maj == "" {
		return ""
	}
	v := maj
	for _, p := range []string{mnr, rev} {
		if p == "" {
			break
		}
		v += "." + p
	}
	return v
}

func quantities(l corev1.ResourceList) map[string]string {
	if len(l) == 0 {
		return nil
	}
	m := make(map[string]string, len(l))
	for k, q := range l {
		m[string(k)] = q.String()
	}
	return m
}

// ---- Reserve and Release ----

// Reserve implements backend.Fleet. Each node is written with one Update
// adding the annotation, the taint and the cordon; a conflict re-reads the
// node and goes on only while it is still available. On failure every node
// this call changed is restored (see restore) and the returned error
// names the failing node; a failed restore is joined to it.
//
// A pod bound to a node after the node was found free and before the
// cordon is written is not seen; the device plugin's accounting still
// keeps two pods from holding the same GPU.
func (f *Fleet) Reserve(ctx context.Context, run string, nodes []backend.Node) error {
	var changed []backend.Node
	for _, want := range nodes {
		did, err := f.reserveOne(ctx, run, want)
		if err != nil {
			if rb := f.rollback(ctx, run, changed); rb != nil {
				return errors.Join(err, rb)
			}
			return err
		}
		if did {
			changed = append(changed, want)
		}
	}
	return nil
}

// reserveOne reserves one node; did is false when it was already reserved
// for run (nothing written).
func (f *Fleet) reserveOne(ctx context.Context, run string, want backend.Node) (did bool, err error) {
	nodes := f.client.CoreV1().Nodes()
	err = retry.RetryOnConflict(conflictRetry, func() error {
		did = false
		n, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ineligible(want.Name, "no such node")
		}
		if err != nil {
			return apiError(want.Name, "get", err)
		}
		if string(n.UID) != want.UID {
			return ineligible(want.Name, "UID is %s, not %s (deleted and re-created)", n.UID, want.UID)
		}
		if r, _ := readReservation(n); f.ours(r, run) && r.UID == want.UID {
			return nil // already reserved for run
		}
		if err := f.available(ctx, n); err != nil {
			return err
		}
		rec := reservation{
			Cluster: f.cluster, Evidence: f.evidence, Run: run, UID: string(n.UID), At: f.now().UTC(),
			Prior: prior{Unschedulable: n.Spec.Unschedulable, Taints: slices.Clone(n.Spec.Taints)},
		}
		val, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[ReservationAnnotation] = string(val)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ReservationTaintKey, Value: run, Effect: corev1.TaintEffectNoSchedule})
		n.Spec.Unschedulable = true
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return err // retried by RetryOnConflict
			}
			return apiError(want.Name, "reserve", err)
		}
		did = true
		return nil
	})
	if apierrors.IsConflict(err) {
		err = apiError(want.Name, fmt.Sprintf("reserve: still conflicting after %d attempts", conflictRetry.Steps), err)
	}
	if err == nil && did {
		f.log.InfoContext(ctx, "node reserved", "run", run, "node", want.Name)
	}
	return did, err
}

func isOurTaint(t corev1.Taint, run string) bool {
	return t.Key == ReservationTaintKey && t.Value == run && t.Effect == corev1.TaintEffectNoSchedule
}

// rollback restores, newest first, the nodes one Reserve call changed.
func (f *Fleet) rollback(ctx context.Context, run string, changed []backend.Node) error {
	// The caller's context may be canceled: a rollback must still happen.
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(changed) - 1; i >= 0; i-- {
		if err := f.restore(ctx, run, changed[i]); err != nil {
			errs = append(errs, fmt.Errorf("roll back: %w", err))
			f.log.ErrorContext(ctx, "roll back reservation", "run", run, "node", changed[i].Name, "err", err)
			continue
		}
		f.log.InfoContext(ctx, "reservation rolled back", "run", run, "node", changed[i].Name)
	}
	return errors.Join(errs...)
}

// Release implements backend.Fleet (see restore for what is restored). It
// is idempotent: a node with n.UID that carries no reservation returns nil.
func (f *Fleet) Release(ctx context.Context, run string, n backend.Node) error {
	if err := f.restore(ctx, run, n); err != nil {
		return err
	}
	f.log.InfoContext(ctx, "node released", "run", run, "node", n.Name)
	return nil
}

// errNotReserved stops restore's retry loop when there is nothing to do.
var errNotReserved = errors.New("not reserved")

// restore undoes run's reservation of want with one Update, re-read and
// re-checked on conflict. It changes nothing and returns a *NodeError
// wrapping ErrNotOurs when the node is gone, has another UID, or its
// annotation is unreadable or names another run, cluster or UID. A node
// with want.UID and no reservation annotation is already restored: nil,
// nothing written (so a release retried after a crash succeeds).
//
// spec.unschedulable and every taint of the recorded prior come back
// exactly (value, effect, timeAdded, order). Taints added since the
// reservation by someone else (a key and effect neither in the prior nor
// ours) are kept after them: they are another controller's or an
// operator's decision about the node, taken while it was reserved, which a
// release must not undo. Two taints are not kept: our reservation taint,
// and node.kubernetes.io/unschedulable when the node was not cordoned
// before, since the node lifecycle controller added it only because of our
// cordon. When nobody else touched the node it is restored exactly as it
// was.
func (f *Fleet) restore(ctx context.Context, run string, want backend.Node) error {
	nodes := f.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(conflictRetry, func() error {
		n, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return notOurs(want.Name, "no such node")
		}
		if err != nil {
			return apiError(want.Name, "get", err)
		}
		if string(n.UID) != want.UID {
			return notOurs(want.Name, "UID is %s, not %s (deleted and re-created)", n.UID, want.UID)
		}
		r, err := readReservation(n)
		switch {
		case err != nil:
			return notOurs(want.Name, "%v", err)
		case r == nil:
			return errNotReserved
		case r.Cluster == f.cluster && r.Evidence != f.evidence:
			return notOurs(want.Name, "reserved by run %q of cluster %q for evidence %q, not this reconciler's %q (two reconcilers share the cluster name)", r.Run, r.Cluster, r.Evidence, f.evidence)
		case !f.ours(r, run):
			return notOurs(want.Name, "reserved by run %q of cluster %q, not run %q of cluster %q", r.Run, r.Cluster, run, f.cluster)
		case r.UID != want.UID:
			return notOurs(want.Name, "reservation names UID %s, not %s", r.UID, want.UID)
		}
		n.Spec.Unschedulable = r.Prior.Unschedulable
		n.Spec.Taints = restoredTaints(r.Prior, n.Spec.Taints, run)
		delete(n.Annotations, ReservationAnnotation)
		if len(n.Annotations) == 0 {
			n.Annotations = nil
		}
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return apiError(want.Name, "release", err)
		}
		return nil
	})
	if errors.Is(err, errNotReserved) {
		return nil
	}
	if apierrors.IsConflict(err) {
		err = apiError(want.Name, fmt.Sprintf("release: still conflicting after %d attempts", conflictRetry.Steps), err)
	}
	return err
}

// restoredTaints is the prior taint list followed by the taints others
// added meanwhile (see restore).
func restoredTaints(p prior, now []corev1.Taint, run string) []corev1.Taint {
	type id struct {
		key    string
		effect corev1.TaintEffect
	}
	inPrior := map[id]bool{}
	for _, t := range p.Taints {
		inPrior[id{t.Key, t.Effect}] = true
	}
	out := slices.Clone(p.Taints)
	for _, t := range now {
		switch {
		case inPrior[id{t.Key, t.Effect}], isOurTaint(t, run):
		case t.Key == UnschedulableTaintKey && !p.Unschedulable:
		default:
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Reservations implements backend.Fleet: every node whose annotation names
// this cluster and evidence branch, by node name. A node with an unreadable annotation is
// logged and left out.
func (f *Fleet) Reservations(ctx context.Context) ([]backend.Reservation, error) {
	list, err := f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []backend.Reservation
	for i := range list.Items {
		n := &list.Items[i]
		r, err := readReservation(n)
		if err != nil {
			f.log.WarnContext(ctx, "unreadable reservation", "node", n.Name, "err", err)
			continue
		}
		if r == nil || r.Cluster != f.cluster {
			continue
		}
		if r.Evidence != f.evidence {
			f.log.WarnContext(ctx, "node reserved under this cluster name for another evidence branch: two reconcilers share the cluster name; left alone",
				"node", n.Name, "run", r.Run, "cluster", r.Cluster, "evidence", r.Evidence, "ours", f.evidence)
			continue
		}
		out = append(out, backend.Reservation{
			Node: backend.Node{Name: n.Name, UID: string(n.UID)},
			Run:  r.Run,
			At:   r.At,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node.Name < out[j].Node.Name })
	return out, nil
}

// ---- Certification labels ----

// Certify implements backend.Fleet. A zero until means now plus
// CertifyOptions.TTL. It sets the three certification labels and
// CertifiedIdentityAnnotation ("<uid>/<bootID>" as read now); a node that
// is gone or has another UID is left alone (nil).
func (f *Fleet) Certify(ctx context.Context, n backend.Node, profile, run string, until time.Time) error {
	if f.certify == nil {
		return nil
	}
	if until.IsZero() {
		if f.certify.TTL <= 0 {
			return fmt.Errorf("certify node %s: no expiry and no TTL", n.Name)
		}
		until = f.now().Add(f.certify.TTL)
	}
	untilLabel := until.UTC().Format(CertifiedUntilFormat)
	return f.updateIfOurs(ctx, n, "certify", func(node *corev1.Node) bool {
		want := map[string]string{
			CertifiedProfileLabel: profile,
			CertifiedRunLabel:     run,
			CertifiedUntilLabel:   untilLabel,
		}
		identity := string(node.UID) + "/" + node.Status.NodeInfo.BootID
		same := node.Annotations[CertifiedIdentityAnnotation] == identity
		for k, v := range want {
			same = same && node.Labels[k] == v
		}
		if same {
			return false
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for k, v := range want {
			node.Labels[k] = v
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[CertifiedIdentityAnnotation] = identity
		return true
	})
}

// Uncertify implements backend.Fleet: it removes the certification labels
// and annotation; a node that is gone or has another UID is left alone.
func (f *Fleet) Uncertify(ctx context.Context, n backend.Node) error {
	if f.certify == nil {
		return nil
	}
	return f.updateIfOurs(ctx, n, "uncertify", uncertify)
}

// uncertify removes the certification labels and annotation from n and
// says whether there was anything to remove.
func uncertify(n *corev1.Node) bool {
	changed := false
	for _, k := range []string{CertifiedProfileLabel, CertifiedRunLabel, CertifiedUntilLabel} {
		if _, ok := n.Labels[k]; ok {
			delete(n.Labels, k)
			changed = true
		}
	}
	if _, ok := n.Annotations[CertifiedIdentityAnnotation]; ok {
		delete(n.Annotations, CertifiedIdentityAnnotation)
		changed = true
		if len(n.Annotations) == 0 {
			n.Annotations = nil
		}
	}
	return changed
}

// updateIfOurs reads want's node, lets mutate change it and writes it back
// when mutate says it changed, retrying on conflict; a missing node or one
// with another UID is left alone.
func (f *Fleet) updateIfOurs(ctx context.Context, want backend.Node, what string, mutate func(*corev1.Node) bool) error {
	nodes := f.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(conflictRetry, func() error {
		n, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if string(n.UID) != want.UID || !mutate(n) {
			return nil
		}
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return apiError(want.Name, what, err)
	}
	return nil
}

// SweepCertified implements backend.Fleet: it removes the certification
// labels and annotation of every node whose UID or bootID differs from the
// recorded identity, whose identity or expiry is missing or unreadable, or
// whose expiry has passed. Every node is re-checked on each re-read.
func (f *Fleet) SweepCertified(ctx context.Context) error {
	if f.certify == nil {
		return nil
	}
	list, err := f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var errs []error
	for i := range list.Items {
		n := &list.Items[i]
		if f.staleCertification(n) == "" {
			continue
		}
		var why string
		err := f.updateIfOurs(ctx, backend.Node{Name: n.Name, UID: string(n.UID)}, "sweep certification", func(n *corev1.Node) bool {
			why = f.staleCertification(n)
			return why != "" && uncertify(n)
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if why != "" {
			f.log.InfoContext(ctx, "certification removed", "node", n.Name, "reason", why)
		}
	}
	return errors.Join(errs...)
}

// staleCertification says why n's certification no longer holds, or ""
// when it holds or n carries none.
func (f *Fleet) staleCertification(n *corev1.Node) string {
	id, hasID := n.Annotations[CertifiedIdentityAnnotation]
	until, hasUntil := n.Labels[CertifiedUntilLabel]
	_, hasProfile := n.Labels[CertifiedProfileLabel]
	_, hasRun := n.Labels[CertifiedRunLabel]
	if !hasID && !hasUntil && !hasProfile && !hasRun {
		return ""
	}
	uid, boot, ok := strings.Cut(id, "/")
	switch {
	case !hasID || !ok:
		return "no readable identity"
	case uid != string(n.UID):
		return "UID changed"
	case boot != n.Status.NodeInfo.BootID:
		return "bootID changed"
	case !hasUntil:
		return "no expiry"
	}
	t, err := time.Parse(CertifiedUntilFormat, until)
	if err != nil {
		return "unreadable expiry"
	}
	if !f.now().Before(t) {
		return "expired"
	}
	return ""
}
