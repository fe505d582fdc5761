package kube

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// mpiWatch is what the mpijob backend watches while it observes one
// MPIJob (issue 19): the MPIJob itself (an informer restricted to its name
// by the field selector metadata.name) and the pods labelled with its
// name, launcher and workers (a podWatch). Both signal the one channel
// changed, so that the observation looks again at every change instead
// of only every PollInterval.
//
// The watch is a cache: what it shows may lag the API server. observe
// reads it for every look that only waits, and reads the API server again
// before any look ends the observation (see observe).
type mpiWatch struct {
	job       cache.Store
	jobSynced func() bool
	pods      *podWatch
	changed   chan struct{} // one pending signal at most
	stop      context.CancelFunc
}

// mpiSyncTimeout bounds how long observe waits for the watch's first
// lists before its first look; a look before then reads the API server.
const mpiSyncTimeout = 5 * time.Second

// mpiPodSelector selects the pods of MPIJob name: the MPI Operator's job
// name label, which signet's templates carry too.
func mpiPodSelector(name string) string {
	return labels.SelectorFromSet(labels.Set{MPIJobNameLabel: name}).String()
}

// watch starts the informers of MPIJob name and of its pods; they run
// until ctx is done or stop is called.
func (b *MPIJobBackend) watch(ctx context.Context, name string) *mpiWatch {
	ctx, cancel := context.WithCancel(ctx)
	changed := make(chan struct{}, 1)
	jobs := b.dyn.Resource(MPIJobGVR).Namespace(b.o.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return jobs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return jobs.Watch(ctx, o)
		},
	}
	store, synced := runInformer(ctx, lw, &unstructured.Unstructured{}, changed)
	w := &mpiWatch{
		job: store, jobSynced: synced,
		pods:    watchPods(ctx, b.client, b.o.Namespace, mpiPodSelector(name), changed),
		changed: changed, stop: cancel,
	}
	if b.watchStarted != nil {
		b.watchStarted(w)
	}
	return w
}

// read returns a copy of the MPIJob (nil when the watch shows none) and
// copies of its pods as the watch shows them now; ok is false until both
// informers have listed, and for a nil watch.
func (w *mpiWatch) read() (job *unstructured.Unstructured, pods []corev1.Pod, ok bool) {
	if w == nil || !w.jobSynced() {
		return nil, nil, false
	}
	pods, ok = w.pods.pods()
	if !ok {
		return nil, nil, false
	}
	for _, o := range w.job.List() {
		if u, isJob := o.(*unstructured.Unstructured); isJob {
			job = u.DeepCopy()
		}
	}
	return job, pods, true
}

// waitSynced waits until both informers have listed, at most timeout or
// until ctx is done, and reports whether they have.
func (w *mpiWatch) waitSynced(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !w.jobSynced() || !w.pods.synced() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
