package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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
	pods := b.client.CoreV1().Pods(b.o.Namespace)
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
	w := &podWatch{changed: make(chan struct{}, 1)}
	signal := func() {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { signal() },
			UpdateFunc: func(any, any) { signal() },
			DeleteFunc: func(any) { signal() },
		},
	})
	ictx, cancel := context.WithCancel(ctx)
	go ctrl.RunWithContext(ictx)
	w.store, w.synced, w.stop = store, ctrl.HasSynced, cancel
	return w
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
