package kube

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler"
)

func init() { reconciler.RegisterTipKeeper(newTipKeeper) }

// The keys of the tip ConfigMap's data.
const (
	TipKeyURL    = "url"
	TipKeyBranch = "branch"
	TipKeyTip    = "tip"
)

// TipKeeper keeps an evidence branch's last known tip in one ConfigMap
// that must exist (deploy/base ships it empty; the reconciler may not
// create it). It writes only by Update guarded by the resourceVersion it
// read, so a stale writer's swap fails with evidence.ErrTipConflict and
// changes nothing; it touches no key of the data but its own three.
type TipKeeper struct {
	client          kubernetes.Interface
	namespace, name string
}

var _ evidence.TipKeeper = (*TipKeeper)(nil)

// NewTipKeeper keeps the tip in ConfigMap namespace/name through client.
func NewTipKeeper(client kubernetes.Interface, namespace, name string) *TipKeeper {
	return &TipKeeper{client: client, namespace: namespace, name: name}
}

func newTipKeeper(_ context.Context, cfg *reconciler.Config) (evidence.TipKeeper, error) {
	rc, err := RESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	ref := cfg.Evidence.TipConfigMap
	return NewTipKeeper(client, ref.Namespace, ref.Name), nil
}

func (k *TipKeeper) String() string { return "ConfigMap " + k.namespace + "/" + k.name }

// LoadTip reads the ConfigMap; its resourceVersion is the record's
// Version. A missing ConfigMap is an error, never "nothing kept": an
// attacker who can delete it must not thereby erase the tip.
func (k *TipKeeper) LoadTip(ctx context.Context) (evidence.KeptTip, error) {
	cm, err := k.client.CoreV1().ConfigMaps(k.namespace).Get(ctx, k.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return evidence.KeptTip{}, fmt.Errorf("%s does not exist: create it empty (deploy/base ships it); the reconciler may not create it", k)
	}
	if err != nil {
		return evidence.KeptTip{}, err
	}
	return evidence.KeptTip{URL: cm.Data[TipKeyURL], Branch: cm.Data[TipKeyBranch], Tip: cm.Data[TipKeyTip], Version: cm.ResourceVersion}, nil
}

// SwapTip writes next when the ConfigMap is still at old.Version; a
// newer resourceVersion, read or refused by the API server's
// precondition, is evidence.ErrTipConflict.
func (k *TipKeeper) SwapTip(ctx context.Context, old, next evidence.KeptTip) (evidence.KeptTip, error) {
	cms := k.client.CoreV1().ConfigMaps(k.namespace)
	cm, err := cms.Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		return evidence.KeptTip{}, err
	}
	if cm.ResourceVersion != old.Version {
		return evidence.KeptTip{}, fmt.Errorf("%w: %s is at resourceVersion %s, not %s", evidence.ErrTipConflict, k, cm.ResourceVersion, old.Version)
	}
	cm.Data = maps.Clone(cm.Data)
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[TipKeyURL], cm.Data[TipKeyBranch], cm.Data[TipKeyTip] = next.URL, next.Branch, next.Tip
	upd, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "signet-reconciler"})
	if apierrors.IsConflict(err) {
		return evidence.KeptTip{}, fmt.Errorf("%w: %s: %w", evidence.ErrTipConflict, k, err)
	}
	if err != nil {
		return evidence.KeptTip{}, err
	}
	return evidence.KeptTip{URL: next.URL, Branch: next.Branch, Tip: next.Tip, Version: upd.ResourceVersion}, nil
}
