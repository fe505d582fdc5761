package kube

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"signet.dev/signet/internal/testing/kubetest"
)

// requestCounter counts the requests sent by the clients countedClients
// makes, by Kubernetes verb and resource ("get mpijobs", "watch pods").
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// countedClients returns admin clients of env whose requests reqs counts.
func countedClients(t *testing.T, env *kubetest.Env) (kubernetes.Interface, dynamic.Interface, *requestCounter) {
	t.Helper()
	reqs := &requestCounter{n: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			reqs.mu.Lock()
			reqs.n[verb(req)+" "+resourceOf(req.URL.Path)]++
			reqs.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	return cs, dyn, reqs
}

// resourceOf is the resource (and subresource) a request path names.
func resourceOf(p string) string {
	parts, ok := resourceParts(p)
	if !ok {
		return p
	}
	if len(parts) >= 3 {
		return parts[0] + "/" + parts[2]
	}
	if len(parts) == 0 {
		return p
	}
	return parts[0]
}

// snapshot returns the counts so far, their sum, and resets them.
func (r *requestCounter) snapshot() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	total := 0
	for k, v := range r.n {
		keys = append(keys, fmt.Sprintf("%s=%d", k, v))
		total += v
	}
	sort.Strings(keys)
	r.n = map[string]int{}
	return strings.Join(keys, ", "), total
}

// launcherEnd watches, through its own watch, the launcher pod of MPIJob
// name and returns a function that says when it was first seen terminal
// (zero when it was not within 10 s of the call).
func launcherEnd(ctx context.Context, t *testing.T, env *kubetest.Env, name string) func() time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	sel := MPIJobNameLabel + "=" + name + "," + MPIJobRoleLabel + "=" + MPIRoleLauncher
	// Listed from the API server's watch cache (resourceVersion 0) and
	// watched from there, as an informer does: a watch from etcd's latest
	// version can time out waiting for the watch cache to catch up
	// (Debian's etcd 3.4 sends it no progress notifications).
	pods := env.Client.CoreV1().Pods("signet")
	l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: "0"})
	require.NoError(t, err)
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
	require.NoError(t, err)
	var at atomic.Pointer[time.Time]
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if ok && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
				now := time.Now()
				at.Store(&now)
				return
			}
		}
	}()
	return func() time.Time {
		// The backend may have read the end before this watch delivered
		// it: wait for it a while.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		cancel()
		<-done
		if p := at.Load(); p != nil {
			return *p
		}
		return time.Time{}
	}
}

// staleLauncherCache is a pod watch's store that shows a running launcher
// as terminal, its check container exited 0 with result: the cache says
// Pass where the API server does not (yet).
type staleLauncherCache struct {
	cache.Store
	result string
	served atomic.Bool
}

func (s *staleLauncherCache) List() []any {
	out := s.Store.List()
	for i, o := range out {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Labels[MPIJobRoleLabel] != MPIRoleLauncher || p.Status.Phase != corev1.PodRunning {
			continue
		}
		d := p.DeepCopy()
		d.Status.Phase = corev1.PodSucceeded
		for j := range d.Status.ContainerStatuses {
			cs := &d.Status.ContainerStatuses[j]
			if cs.Name == checkContainerName && cs.State.Running != nil {
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", Message: s.result,
					StartedAt: cs.State.Running.StartedAt, FinishedAt: metav1.Now(),
				}}
				cs.Ready = false
			}
		}
		out[i] = d
		s.served.Store(true)
	}
	return out
}
