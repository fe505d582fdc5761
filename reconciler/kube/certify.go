package kube

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/reconciler/backend"
)

// CertifiedUntilFormat is the layout of CertifiedUntilLabel's value (UTC);
// a label value cannot hold ':'.
const CertifiedUntilFormat = "20060102T150405Z"

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
// with another UID is left alone. The first attempt takes the node from
// the Fleet's cache when mutate would change it there (cachedToWrite):
// the write carries the cached resourceVersion, so a stale cache ends in
// a conflict and the retry reads the node live; nothing to do is decided
// on a live read.
func (f *Fleet) updateIfOurs(ctx context.Context, want backend.Node, what string, mutate func(*corev1.Node) bool) error {
	nodes := f.client.CoreV1().Nodes()
	first := true
	err := retry.RetryOnConflict(conflictRetry, func() error {
		n := f.cachedToWrite(want, first, func(n *corev1.Node) bool { return mutate(n.DeepCopy()) })
		first = false
		if n != nil {
			mutate(n)
		} else {
			var err error
			n, err = nodes.Get(ctx, want.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			if string(n.UID) != want.UID || !mutate(n) {
				return nil
			}
		}
		updated, err := nodes.Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			f.wrote(updated)
		}
		return err
	})
	if err != nil {
		return apiError(want.Name, what, err)
	}
	return nil
}

// SweepCertified implements backend.Fleet: it removes the certification
// labels and annotation of every node whose UID or bootID differs from the
// recorded identity, whose identity or expiry is missing or unreadable,
// whose expiry has passed or lies beyond CertifyOptions.TTL from now, or,
// with vouched, whose run, node and profile the evidence branch does not
// back (issue 21, finding 10: hand-made labels naming a run that never
// ran, expiring in 2099, were kept). Every node is re-checked on each
// re-read.
func (f *Fleet) SweepCertified(ctx context.Context, vouched backend.Vouched) error {
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
		if f.staleCertification(n, vouched) == "" {
			continue
		}
		var why string
		err := f.updateIfOurs(ctx, backend.Node{Name: n.Name, UID: string(n.UID)}, "sweep certification", func(n *corev1.Node) bool {
			why = f.staleCertification(n, vouched)
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
func (f *Fleet) staleCertification(n *corev1.Node, vouched backend.Vouched) string {
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
	switch {
	case !f.now().Before(t):
		return "expired"
	case f.certify.TTL > 0 && t.After(f.now().Add(f.certify.TTL)):
		return "expiry beyond the configured TTL"
	case vouched != nil && !vouched(n.Labels[CertifiedRunLabel], n.Name, n.Labels[CertifiedProfileLabel]):
		return "the evidence branch does not record run " + strconv.Quote(n.Labels[CertifiedRunLabel]) + " passing on this node"
	}
	return ""
}

var _ backend.CertificationLister = (*Fleet)(nil)

// Certifications implements backend.CertificationLister: the nodes that
// carry the certification labels and that SweepCertified would keep
// without the evidence branch's say (identity unchanged, expiry readable,
// in the future and within the TTL), read with one label-selected list;
// nil when labelling is off.
func (f *Fleet) Certifications(ctx context.Context) ([]backend.Certification, error) {
	if f.certify == nil {
		return nil, nil
	}
	list, err := f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: CertifiedProfileLabel})
	if err != nil {
		return nil, fmt.Errorf("list certified nodes: %w", err)
	}
	var out []backend.Certification
	for i := range list.Items {
		n := &list.Items[i]
		if f.staleCertification(n, nil) != "" {
			continue
		}
		until, _ := time.Parse(CertifiedUntilFormat, n.Labels[CertifiedUntilLabel])
		out = append(out, backend.Certification{Node: n.Name, Profile: n.Labels[CertifiedProfileLabel], Run: n.Labels[CertifiedRunLabel], Until: until})
	}
	return out, nil
}
