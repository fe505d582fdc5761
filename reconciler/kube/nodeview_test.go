package kube

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
)

// TestFleetCache drives a Fleet whose selection reads shared informers
// (StartCache) against a real API server; only the kubelet's status
// reports are simulated (kubetest.CreateNode, setPhase).
func TestFleetCache(t *testing.T) {
	env := kubetest.Start(t)
	t.Run("SelectsFromTheCache", func(t *testing.T) { testFleetCacheSelect(t, env) })
	t.Run("StaleCacheNeverReserves", func(t *testing.T) { testFleetCacheStale(t, env) })
}

// testFleetCacheSelect: selection from the cache sees this Fleet's own
// reservations at once (before the watch delivers them), and a GPU pod
// bound to a node once the watch has delivered it.
func testFleetCacheSelect(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	pool := map[string]string{"pool": "cached"}
	for _, n := range []string{"cached-a", "cached-b", "cached-c", "cached-d", "cached-e"} {
		createNode(t, env, n, 8, pool, false)
	}
	f := testFleet(env)
	require.True(t, f.StartCache(ctx, 30*time.Second), "the informers list once")
	_, isCache := f.selectView().(*cachedView)
	require.True(t, isCache, "selection reads the cache once it is ready")
	prof := gpuProfile(1, "1Gi")

	first, err := f.Select(ctx, prof, selectorRequest("r1", pool, 2))
	require.NoError(t, err)
	require.Equal(t, []string{"cached-a", "cached-b"}, first)
	require.NoError(t, f.Reserve(ctx, "run-1", nodesOf(t, env, first...)))
	// No wait: the Fleet's own writes are laid over the cache.
	second, err := f.Select(ctx, prof, selectorRequest("r2", pool, 2))
	require.NoError(t, err)
	assert.Equal(t, []string{"cached-c", "cached-d"}, second, "a node this Fleet just reserved is never selected again")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("cached-trainer", "cached-c"), metav1.CreateOptions{})
		assert.NoError(c, err) // until the default service account exists
	}, 30*time.Second, 200*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := f.Select(ctx, prof, selectorRequest("r3", pool, 2))
		require.NoError(c, err)
		assert.Equal(c, []string{"cached-d", "cached-e"}, got, "the watch delivers the GPU pod on cached-c")
	}, 10*time.Second, 50*time.Millisecond)
	setPhase(t, env.Client, "cached-trainer", "Succeeded")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := f.Select(ctx, prof, selectorRequest("r4", pool, 1))
		require.NoError(c, err)
		assert.Equal(c, []string{"cached-c"}, got, "a finished pod leaves the cache")
	}, 10*time.Second, 50*time.Millisecond)
}

// testFleetCacheStale is the attack on the cache: it is frozen (its
// informers stopped after listing), then a GPU pod is bound to a node and
// another reconciler's run reserves a second node behind its back.
// Selection from the stale cache still offers both (but not a node the
// Fleet reserved itself: its own writes are laid over the cache); Reserve, which decides
// on the live node and its live pods, must refuse both and change
// nothing.
func testFleetCacheStale(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	pool := map[string]string{"pool": "stale"}
	busyNode := createNode(t, env, "stale-a", 8, pool, false)
	takenNode := createNode(t, env, "stale-b", 8, pool, false)
	oursNode := createNode(t, env, "stale-c", 8, pool, false)
	createNode(t, env, "stale-d", 8, pool, false)
	createNode(t, env, "stale-e", 8, pool, false)
	// A GPU pod on stale-e that the cache lists, and that ends after the
	// cache is frozen.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("stale-ending", "stale-e"), metav1.CreateOptions{})
		assert.NoError(c, err)
	}, 30*time.Second, 200*time.Millisecond)
	f := testFleet(env)
	cacheCtx, stop := context.WithCancel(ctx)
	require.True(t, f.StartCache(cacheCtx, 30*time.Second))
	stop() // the informers stop: the cache keeps what it listed
	time.Sleep(200 * time.Millisecond)
	setPhase(t, env.Client, "stale-ending", "Succeeded")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("stale-trainer", "stale-a"), metav1.CreateOptions{})
		assert.NoError(c, err)
	}, 30*time.Second, 200*time.Millisecond)
	other := NewFleet(env.Client, FleetOptions{Cluster: "other-cluster"})
	require.NoError(t, other.Reserve(ctx, "their-run", []backend.Node{takenNode}))

	// This Fleet's own reservation is seen though the watch is stopped.
	require.NoError(t, f.Reserve(ctx, "our-first-run", []backend.Node{oursNode}))

	prof := gpuProfile(1, "1Gi")
	got, err := f.Select(ctx, prof, selectorRequest("r", pool, 4))
	require.NoError(t, err)
	require.Equal(t, []string{"stale-a", "stale-b", "stale-d", "stale-e"}, got,
		"the frozen cache still offers the two nodes taken behind its back (else this test proves nothing), never the one this Fleet reserved; "+
			"a node whose GPU pod ended after the cache froze is busy only by the cache, and the API server is asked")

	before := getState(t, env.Client, "stale-a")
	err = f.Reserve(ctx, "our-run", []backend.Node{busyNode})
	require.ErrorIs(t, err, backend.ErrBusy, "a GPU pod the cache has not seen still makes the node busy")
	assert.ErrorContains(t, err, "pod default/stale-trainer")
	sameAs(t, before, getState(t, env.Client, "stale-a"), true)

	err = f.Reserve(ctx, "our-run", []backend.Node{takenNode})
	require.ErrorIs(t, err, backend.ErrBusy, "a reservation the cache has not seen still holds the node")
	n, err := env.Client.CoreV1().Nodes().Get(ctx, "stale-b", metav1.GetOptions{})
	require.NoError(t, err)
	r, err := readReservation(n)
	require.NoError(t, err)
	assert.Equal(t, "their-run", r.Run, "the other run keeps its node")

	// This Fleet's reservation changed behind the frozen cache (here by
	// hand, to name another run): the cache still shows it as ours, and
	// a release on the cache's word would lift another run's hold.
	n, err = env.Client.CoreV1().Nodes().Get(ctx, "stale-c", metav1.GetOptions{})
	require.NoError(t, err)
	r, err = readReservation(n)
	require.NoError(t, err)
	r.Run = "someone-else"
	val, err := json.Marshal(r)
	require.NoError(t, err)
	n.Annotations[ReservationAnnotation] = string(val)
	_, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	before = getState(t, env.Client, "stale-c")
	err = f.Release(ctx, "our-first-run", oursNode)
	require.ErrorIs(t, err, backend.ErrNotOurs, "a reservation changed behind the cache is never released on the cache's word")
	sameAs(t, before, getState(t, env.Client, "stale-c"), true)

	// A certification on a frozen cache: the node rebooted behind it (a
	// new boot ID), and the identity recorded must be the one it has now,
	// never the cached one (the write carries the cached resourceVersion,
	// conflicts, and is decided again on a live read).
	bootNode := env.CreateNode(ctx, kubetest.NodeOptions{Name: "stale-boot", GPUs: 8, BootID: "boot-before"})
	cf := NewFleet(env.Client, FleetOptions{Cluster: testCluster, Certify: &CertifyOptions{TTL: time.Hour}})
	certCtx, stopCert := context.WithCancel(ctx)
	require.True(t, cf.StartCache(certCtx, 30*time.Second))
	stopCert()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, "stale-boot", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.NodeInfo.BootID = "boot-after"
		_, err = env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}))
	require.NoError(t, cf.Certify(ctx, backend.Node{Name: "stale-boot", UID: string(bootNode.UID)}, "burnin", "run-c", time.Time{}))
	n, err = env.Client.CoreV1().Nodes().Get(ctx, "stale-boot", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, string(n.UID)+"/boot-after", n.Annotations[CertifiedIdentityAnnotation],
		"a certification decided on the frozen cache recorded the boot ID the node had before it rebooted")
}

func nodesOf(t *testing.T, env *kubetest.Env, names ...string) []backend.Node {
	t.Helper()
	out := make([]backend.Node, len(names))
	for i, name := range names {
		out[i] = asNode(getState(t, env.Client, name), name)
	}
	return out
}
