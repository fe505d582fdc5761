package kube

import (
	"context"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
	// TaintOnly reserves a node with the reservation taint alone, without
	// cordoning it (spec.unschedulable): Kueue's topology-aware
	// scheduling leaves cordoned nodes out of every topology domain, so a
	// check through such a queue is never admitted on cordoned
	// participants. Pods that tolerate every taint may then still be
	// scheduled onto a reserved node.
	TaintOnly bool
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
	live     liveView
	cached   *cachedView // nil until StartCache
	cluster  string
	evidence string
	now      func() time.Time
	certify  *CertifyOptions
	log      *slog.Logger
	// taintOnly: FleetOptions.TaintOnly.
	taintOnly bool
}

var _ backend.Fleet = (*Fleet)(nil)

// NewFleet returns a Fleet reaching the cluster through client.
func NewFleet(client kubernetes.Interface, o FleetOptions) *Fleet {
	f := &Fleet{client: client, live: liveView{client}, cluster: o.Cluster, evidence: o.Evidence, now: o.Now, certify: o.Certify, log: o.Logger, taintOnly: o.TaintOnly}
	if f.now == nil {
		f.now = time.Now
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	return f
}

// StartCache starts shared informers over the cluster's nodes and its
// bound, unfinished pods, stopped when ctx is done; once they have listed,
// Select and Pool read them instead of the API server (see cachedView). It
// waits for that first list until ctx is done or wait has passed, and
// reports whether the cache is ready; until it is, selection reads the
// API server. Reserve always decides on what it reads from the API server.
func (f *Fleet) StartCache(ctx context.Context, wait time.Duration) bool {
	if f.cached == nil {
		f.cached = startCachedView(ctx, f.client)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return f.cached.waitReady(wctx)
}

// wrote tells the cache, when there is one, of a node this Fleet has just
// written (as the API server returned it).
func (f *Fleet) wrote(n *corev1.Node) {
	if f.cached != nil {
		f.cached.wrote(n)
	}
}

// CachedNodeUID returns the UID of node name as the Fleet's cache holds
// it; ok is false when the cache is not ready or does not hold the node
// (the caller reads the API server). The pod backend records it in a
// participant's identity (PodOptions.NodeUIDs).
func (f *Fleet) CachedNodeUID(name string) (uid string, ok bool) {
	if f.cached == nil || !f.cached.ready() {
		return "", false
	}
	n, err := f.cached.node(context.Background(), name)
	if err != nil || n.UID == "" {
		return "", false
	}
	return string(n.UID), true
}

// selectView is the view selection reads: the cache once it is ready, the
// API server before.
func (f *Fleet) selectView() nodeView {
	if f.cached != nil && f.cached.ready() {
		return f.cached
	}
	return f.live
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

// ---- Select ----

// Select implements backend.Fleet. With spec.nodes every named node is
// checked and the first problem (ineligible before busy) is returned. With
// spec.selector and spec.count the first count eligible nodes by name are
// chosen; when fewer are eligible the error wraps ErrBusy if the busy ones
// would make up the count once free, ErrIneligible otherwise.
func (f *Fleet) Select(ctx context.Context, prof *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error) {
	floor := prof.Floor()
	view := f.selectView()
	if len(req.Spec.Nodes) > 0 {
		seen := map[string]bool{}
		var firstBusy error
		for _, name := range req.Spec.Nodes {
			if seen[name] {
				return nil, ineligible(name, "named twice in spec.nodes")
			}
			seen[name] = true
			n, err := view.node(ctx, name)
			if apierrors.IsNotFound(err) {
				return nil, ineligible(name, "no such node")
			}
			if err != nil {
				return nil, apiError(name, "get", err)
			}
			if err := f.eligibleNow(ctx, view, n, floor); err != nil {
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
	items, err := view.nodes(ctx, sel)
	if err != nil {
		return nil, err
	}
	var chosen []string
	var busyErrs, inelErrs []string
	for i := range items {
		if len(chosen) == req.Spec.Count {
			break
		}
		err := f.eligibleNow(ctx, view, items[i], floor)
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
// (not Ready, reserved, a running GPU pod), reading n's pods from view.
func (f *Fleet) eligible(ctx context.Context, view nodeView, n *corev1.Node, floor map[string]resource.Quantity) error {
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
	return f.available(ctx, view, n)
}

// available returns nil when n is Ready, reserved by nobody and runs no
// non-DaemonSet pod using GPUs (its pods read from view); otherwise a
// *NodeError wrapping ErrBusy.
func (f *Fleet) available(ctx context.Context, view nodeView, n *corev1.Node) error {
	if !ready(n) {
		return busy(n.Name, "not Ready")
	}
	if h := holder(n); h != "" {
		return busy(n.Name, "%s", h)
	}
	return f.noGPUPods(ctx, view, n.Name)
}

// eligibleNow is eligible, except that a node the cache calls busy is
// read again from the API server: the cache may not yet have the end of a
// GPU pod, a release, or a node's Ready again (changes made by others
// arrive through the watch), so a node is passed over only on what the
// API server says. A node the cache calls free is offered as it is: the
// reservation decides on the live node.
func (f *Fleet) eligibleNow(ctx context.Context, view nodeView, n *corev1.Node, floor map[string]resource.Quantity) error {
	err := f.eligible(ctx, view, n, floor)
	if !errors.Is(err, backend.ErrBusy) || view == nodeView(f.live) {
		return err
	}
	live, gerr := f.live.node(ctx, n.Name)
	if apierrors.IsNotFound(gerr) {
		return ineligible(n.Name, "no such node")
	}
	if gerr != nil {
		return apiError(n.Name, "get", gerr)
	}
	return f.eligible(ctx, f.live, live, floor)
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
func (f *Fleet) noGPUPods(ctx context.Context, view nodeView, node string) error {
	pods, err := view.podsOn(ctx, node)
	if err != nil {
		return apiError(node, "list pods", err)
	}
	for _, p := range pods {
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

// ---- Pool ----

// Pool implements backend.Pooler: the named nodes that exist, in order, or
// every node matching selector, by name; each with its identity and, when
// it is not eligible for prof now (too small, not Ready, reserved, a
// running GPU pod), why.
func (f *Fleet) Pool(ctx context.Context, prof *specs.CertificationProfile, nodes []string, selector map[string]string) ([]backend.PoolMember, error) {
	// The pool's nodes are read from the API server (one request with a
	// selector): a standing certification's triggers compare their
	// identities, and a reboot must be seen by the pass that follows it.
	// Their pods may come from the cache (see available).
	view := f.selectView()
	var items []*corev1.Node
	if len(nodes) > 0 {
		for _, name := range nodes {
			n, err := f.live.node(ctx, name)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, apiError(name, "get", err)
			}
			items = append(items, n)
		}
	} else {
		var err error
		if items, err = f.live.nodes(ctx, labels.SelectorFromSet(selector)); err != nil {
			return nil, err
		}
	}
	floor := prof.Floor()
	out := make([]backend.PoolMember, 0, len(items))
	for _, n := range items {
		m := backend.PoolMember{Identity: *snapshotOf(n, "", "")}
		if err := f.eligibleNow(ctx, view, n, floor); err != nil {
			if !errors.Is(err, backend.ErrBusy) && !errors.Is(err, backend.ErrIneligible) {
				return nil, err
			}
			m.Busy = err.Error()
		}
		out = append(out, m)
	}
	return out, nil
}

var _ backend.Pooler = (*Fleet)(nil)

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
	return snapshotOf(n, cluster, run), nil
}

// Snapshots implements backend.SnapshotBatcher: the identities of nodes
// for run in cluster, read live (a LIST without a resourceVersion is as
// fresh as a GET) in one request, the nodes whose kubernetes.io/hostname
// label names one of them (the kubelet sets it to the node's name). Only
// a node whose name is the one asked counts: a node whose label names
// another, or is missing or too long for a label value, is read by
// Snapshot, one request each, so a label cannot stand in for a node; so
// is every node when the LIST fails.
func (f *Fleet) Snapshots(ctx context.Context, cluster, run string, nodes []string) ([]*evidence.NodeSnapshot, []error) {
	byName := map[string]*corev1.Node{}
	if len(nodes) > 1 {
		if req, err := labels.NewRequirement(corev1.LabelHostname, selection.In, nodes); err == nil {
			list, err := f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String()})
			if err == nil {
				for i := range list.Items {
					byName[list.Items[i].Name] = &list.Items[i]
				}
			}
		}
	}
	snaps, errs := make([]*evidence.NodeSnapshot, len(nodes)), make([]error, len(nodes))
	for i, node := range nodes {
		if n := byName[node]; n != nil {
			snaps[i] = snapshotOf(n, cluster, run)
			continue
		}
		snaps[i], errs[i] = f.Snapshot(ctx, cluster, run, node)
	}
	return snaps, errs
}

var _ backend.SnapshotBatcher = (*Fleet)(nil)

// snapshotOf is node n's identity for run in cluster.
func snapshotOf(n *corev1.Node, cluster, run string) *evidence.NodeSnapshot {
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
	}
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
