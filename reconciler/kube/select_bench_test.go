package kube

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
)

// BenchmarkSelectReserve is issue 19's selection scale: one selector-based
// request of 8 nodes selected and reserved per op (released again outside
// the timer), with 100 and then 1,000 simulated GPU nodes registered on a
// real API server, selection reading the API server (view=api, as before
// the informer cache) or the Fleet's informer cache (view=cache). Run it
// with -benchtime 100x for the 100 requests; the goal is the
// per-request time at 1,000 nodes within 1.5× of that at 100. Only the
// kubelets' registration and status reports are simulated
// (kubetest.CreateNode).
func BenchmarkSelectReserve(b *testing.B) {
	env := kubetest.Start(b)
	pool := map[string]string{"pool": "bench"}
	var created int
	grow := func(n int) {
		names := make(chan string)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for name := range names {
					env.CreateNode(b.Context(), kubetest.NodeOptions{Name: name, GPUs: 8, Labels: pool})
				}
			}()
		}
		for ; created < n; created++ {
			names <- fmt.Sprintf("bench-%04d", created)
		}
		close(names)
		wg.Wait()
	}
	prof := gpuProfile(1, "1Gi")
	for _, nodes := range []int{100, 1000} {
		for _, view := range []string{"api", "cache"} {
			b.Run(fmt.Sprintf("nodes=%d/view=%s", nodes, view), func(b *testing.B) {
				grow(nodes)
				f := NewFleet(env.Client, FleetOptions{Cluster: testCluster, Logger: slog.New(slog.DiscardHandler)})
				if view == "cache" {
					require.True(b, f.StartCache(b.Context(), time.Minute))
				}
				var spent time.Duration
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					run := fmt.Sprintf("bench-%d-%s-%d", nodes, view, i)
					b.StartTimer()
					start := time.Now()
					names, err := f.Select(b.Context(), prof, selectorRequest(run, pool, 8))
					require.NoError(b, err)
					chosen := make([]backend.Node, len(names))
					for j, name := range names {
						n, err := f.selectView().node(b.Context(), name)
						require.NoError(b, err)
						chosen[j] = backend.Node{Name: name, UID: string(n.UID)}
					}
					require.NoError(b, f.Reserve(b.Context(), run, chosen))
					spent += time.Since(start)
					b.StopTimer()
					for _, n := range chosen {
						require.NoError(b, f.Release(b.Context(), run, n))
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(spent.Microseconds())/1000/float64(b.N), "ms/request")
			})
		}
	}
}
