package kube

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// nodeView reads nodes and the pods bound to them, either from the API
// server (liveView) or from the Fleet's informer cache (cachedView).
// Selection may read either; a reservation decides on the live view only
// (reserveOne), so a stale cache can make a reservation fail, never
// reserve a busy node.
type nodeView interface {
	// node returns the named node; a missing one is an apierrors NotFound.
	node(ctx context.Context, name string) (*corev1.Node, error)
	// nodes returns the nodes matching sel, by name. The caller must not
	// change them.
	nodes(ctx context.Context, sel labels.Selector) ([]*corev1.Node, error)
	// podsOn returns the pods bound to node; from the cache only those
	// Pending or Running. The caller must not change them.
	podsOn(ctx context.Context, node string) ([]*corev1.Pod, error)
}

// liveView reads through the API server, a request per call.
type liveView struct{ client kubernetes.Interface }

func (v liveView) node(ctx context.Context, name string) (*corev1.Node, error) {
	return v.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (v liveView) nodes(ctx context.Context, sel labels.Selector) ([]*corev1.Node, error) {
	list, err := v.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list nodes matching %s: %w", sel, err)
	}
	out := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	sortNodes(out)
	return out, nil
}

func (v liveView) podsOn(ctx context.Context, node string) ([]*corev1.Pod, error) {
	list, err := v.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func sortNodes(ns []*corev1.Node) {
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
}

// cacheResync is how often the informers hand every cached object to
// their (absent) handlers again; the watch keeps the cache current.
const cacheResync = 10 * time.Minute

// podsByNode indexes the cached pods by spec.nodeName.
const podsByNode = "nodeName"

// cachedView reads client-go shared informers over every node and over the
// pods bound to a node and not yet finished (the only ones that can make
// a node busy): one list and one watch each for the life of the
// reconciler instead of a node list and a pod list per node per request.
// What it keeps is trimmed to what eligibility reads (no managed fields,
// no container images of a node, a pod's containers only as resources),
// so that its memory follows the fleet's size, not its pods' specs.
//
// The Fleet's own node writes are laid over the informer's nodes (a
// client-go MutationCache keyed by resourceVersion) as soon as the API
// server answers them, so that the next selection, even before the watch
// delivers the change, sees a node this Fleet just reserved as reserved.
type cachedView struct {
	nodeStore cache.Indexer
	nodeMut   cache.MutationCache
	pods      cache.Indexer
	synced    []cache.InformerSynced
}

// startCachedView starts the informers, stopped when ctx is done. It does
// not wait for them: ready reports when both have listed once.
func startCachedView(ctx context.Context, client kubernetes.Interface) *cachedView {
	nf := informers.NewSharedInformerFactory(client, cacheResync)
	ni := nf.Core().V1().Nodes()
	_ = ni.Informer().SetTransform(trimNode)

	// Pods that can make a node busy: bound, and neither Succeeded nor
	// Failed. A pod leaving that set arrives as a deletion.
	pf := informers.NewSharedInformerFactoryWithOptions(client, cacheResync, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.AndSelectors(
			fields.OneTermNotEqualSelector("spec.nodeName", ""),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
		).String()
	}))
	pi := pf.Core().V1().Pods().Informer()
	_ = pi.SetTransform(trimPod)
	_ = pi.AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{p.Spec.NodeName}, nil
	}})
	nodeStore := ni.Informer().GetIndexer()
	v := &cachedView{
		nodeStore: nodeStore,
		nodeMut: cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.FromContext(ctx), nodeStore, cache.MutationCacheOptions{
			TTL: cacheResync, MaxCacheSize: 4096,
		}),
		pods:   pi.GetIndexer(),
		synced: []cache.InformerSynced{ni.Informer().HasSynced, pi.HasSynced},
	}
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	return v
}

// ready reports whether both informers have listed once.
func (v *cachedView) ready() bool {
	for _, s := range v.synced {
		if !s() {
			return false
		}
	}
	return true
}

// waitReady waits until ready or ctx is done, and reports ready.
func (v *cachedView) waitReady(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), v.synced...)
}

func (v *cachedView) node(_ context.Context, name string) (*corev1.Node, error) {
	obj, ok, err := v.nodeMut.GetByKey(name)
	if err != nil {
		return nil, err
	}
	n, isNode := obj.(*corev1.Node)
	if !ok || !isNode {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return n, nil
}

func (v *cachedView) nodes(ctx context.Context, sel labels.Selector) ([]*corev1.Node, error) {
	var out []*corev1.Node
	for _, name := range v.nodeStore.ListKeys() {
		n, err := v.node(ctx, name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cached node %s: %w", name, err)
		}
		if sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	sortNodes(out)
	return out, nil
}

// wrote lays n, as the API server returned it from this Fleet's write,
// over the cached node until the watch delivers it or a newer version.
func (v *cachedView) wrote(n *corev1.Node) {
	if n != nil {
		v.nodeMut.Mutation(n)
	}
}

func (v *cachedView) podsOn(_ context.Context, node string) ([]*corev1.Pod, error) {
	objs, err := v.pods.ByIndex(podsByNode, node)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// trimNode drops what eligibility and snapshots never read from a cached
// node: managed fields and the list of container images on it.
func trimNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status.Images = nil
	}
	return obj, nil
}

// trimPod keeps of a cached pod what noGPUPods reads: its name, namespace
// and owners, node, phase and its containers' resources.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	resources := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Resources: c.Resources}
		}
		return out
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			OwnerReferences: p.OwnerReferences,
		},
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			InitContainers: resources(p.Spec.InitContainers),
			Containers:     resources(p.Spec.Containers),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}, nil
}
