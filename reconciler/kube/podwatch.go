package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podWatch is a client-go informer over the pods of one check (its label
// selector in the backend's namespace): one list and one watch for the
// whole observation instead of a list every PollInterval, and a signal on
// every change, so that a pod's end is seen within the watch's latency
// rather than at the next poll (issue 19).
type podWatch struct {
	store   cache.Store
	synced  func() bool
	changed chan struct{} // one pending signal at most
	stop    context.CancelFunc
}

// watchPods starts the informer of the check pods selected by selector;
// it runs until ctx is done or stop is called.
func (b *PodBackend) watchPods(ctx context.Context, selector string) *podWatch {
	return watchPods(ctx, b.client, b.o.Namespace, selector, make(chan struct{}, 1))
}

// watchPods starts the informer of the pods of namespace ns selected by
// the label selector selector; every change is signalled on changed (a
// channel of capacity one, never blocked on). It runs until ctx is done
// or stop is called.
func watchPods(ctx context.Context, client kubernetes.Interface, ns, selector string, changed chan struct{}) *podWatch {
	pods := client.CoreV1().Pods(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	ictx, cancel := context.WithCancel(ctx)
	store, synced := runInformer(ictx, lw, &corev1.Pod{}, changed)
	return &podWatch{store: store, synced: synced, changed: changed, stop: cancel}
}

// runInformer runs an informer of objects like obj over lw until ctx is
// done, signalling every addition, update and deletion on changed without
// blocking (one pending signal at most). It returns the informer's store
// and whether its first list has arrived.
func runInformer(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, changed chan struct{}) (cache.Store, func() bool) {
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { signal() },
			UpdateFunc: func(any, any) { signal() },
			DeleteFunc: func(any) { signal() },
		},
	})
	go ctrl.RunWithContext(ctx)
	return store, ctrl.HasSynced
}

// pods returns copies of the pods the watch shows now, false until its
// first list has arrived.
func (w *podWatch) pods() ([]corev1.Pod, bool) {
	if w == nil || !w.synced() {
		return nil, false
	}
	var out []corev1.Pod
	for _, o := range w.store.List() {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, *p.DeepCopy())
		}
	}
	return out, true
}
