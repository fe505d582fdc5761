package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/reconciler/backend"
)

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
	first := true
	err = retry.RetryOnConflict(conflictRetry, func() error {
		did = false
		n := f.cachedToWrite(want, first, func(n *corev1.Node) bool { return ready(n) && holder(n) == "" })
		first = false
		var err error
		if n == nil {
			n, err = nodes.Get(ctx, want.Name, metav1.GetOptions{})
		}
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
		// Decided on the node's current version (read live, or cached
		// and proven current by the write's resourceVersion) and its
		// live pods, never on pods the cache selection read: a stale
		// cache fails a reservation, it never reserves a busy node.
		if err := f.available(ctx, f.live, n); err != nil {
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
		if !f.taintOnly {
			n.Spec.Unschedulable = true // cordoned too (FleetOptions.TaintOnly)
		}
		updated, err := nodes.Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			if apierrors.IsConflict(err) {
				return err // retried by RetryOnConflict
			}
			return apiError(want.Name, "reserve", err)
		}
		f.wrote(updated)
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

// cachedToWrite returns, on the first attempt of a node write and when
// the cache is ready, a copy of the cached node want when it has want's
// UID and writable says the write would go ahead on it; nil otherwise, and
// the caller reads the node from the API server. The write carries the
// cached resourceVersion, so it succeeds only if the cache held the
// node's current version: a stale cache ends in a conflict, and the retry
// decides on a live read. Every outcome without a write (busy, not ours,
// another UID, nothing to do) is thereby decided on a live read, never on
// the cache.
func (f *Fleet) cachedToWrite(want backend.Node, first bool, writable func(*corev1.Node) bool) *corev1.Node {
	if !first || f.cached == nil || !f.cached.ready() {
		return nil
	}
	n, err := f.cached.node(context.Background(), want.Name)
	if err != nil || string(n.UID) != want.UID || n.ResourceVersion == "" || !writable(n) {
		return nil
	}
	return n.DeepCopy()
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
// It removes only what the reservation added (issue 21, findings 2 and 9):
// the annotation, run's reservation taint, and the cordon when the node was
// not cordoned before. Every other taint stays as it is now: a prior taint
// whose owner changed or removed it meanwhile is not set back, a taint
// someone added is kept, and node.kubernetes.io/unschedulable, which the
// node lifecycle controller adds to a cordoned node, is left for that
// controller to lift once the cordon goes (removing it would be a change
// of another controller's taint, which the shipped node policy refuses).
// A node that was cordoned before stays cordoned. When nobody else touched
// the node it ends as it was before the reservation, but for that
// controller's taint until it lifts it.
func (f *Fleet) restore(ctx context.Context, run string, want backend.Node) error {
	nodes := f.client.CoreV1().Nodes()
	first := true
	err := retry.RetryOnConflict(conflictRetry, func() error {
		n := f.cachedToWrite(want, first, func(n *corev1.Node) bool {
			r, err := readReservation(n)
			return err == nil && f.ours(r, run) && r.UID == want.UID
		})
		first = false
		var err error
		if n == nil {
			n, err = nodes.Get(ctx, want.Name, metav1.GetOptions{})
		}
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
		if !r.Prior.Unschedulable {
			n.Spec.Unschedulable = false
		}
		n.Spec.Taints = withoutReservationTaint(n.Spec.Taints, run)
		delete(n.Annotations, ReservationAnnotation)
		if len(n.Annotations) == 0 {
			n.Annotations = nil
		}
		updated, err := nodes.Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return apiError(want.Name, "release", err)
		}
		f.wrote(updated)
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

// withoutReservationTaint is now without run's reservation taint, every
// other taint in its order; nil when none is left.
func withoutReservationTaint(now []corev1.Taint, run string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range now {
		if !isOurTaint(t, run) {
			out = append(out, t)
		}
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
