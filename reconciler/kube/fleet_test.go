package kube

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// TestFleet runs every Fleet scenario against one real control plane
// (starting one costs seconds); each subtest uses nodes of its own.
func TestFleet(t *testing.T) {
	env := kubetest.Start(t)
	t.Logf("env start-up: %v", env.StartupTime)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *kubetest.Env)
	}{
		{"Select", testFleetSelect},
		{"SelectGPUPods", testFleetSelectGPUPods},
		{"Snapshot", testFleetSnapshot},
		{"ReserveRelease", testFleetReserveRelease},
		{"ReserveRollback", testFleetReserveRollback},
		{"ReleaseRecreatedNode", testFleetReleaseRecreatedNode},
		{"ReserveRace", testFleetReserveRace},
		{"Certify", testFleetCertify},
	} {
		t.Run(tc.name, func(t *testing.T) {
			begin := time.Now()
			tc.fn(t, env)
			t.Logf("%s took %v", tc.name, time.Since(begin))
		})
	}
}

const testCluster = "test-cluster"

func testFleet(env *kubetest.Env) *Fleet {
	return NewFleet(env.Client, FleetOptions{Cluster: testCluster})
}

// gpuProfile asks for gpus GPUs, 4 cpu and 32Gi memory per node.
func gpuProfile(gpus int, memory string) *specs.CertificationProfile {
	return &specs.CertificationProfile{Spec: specs.ProfileSpec{Checks: []specs.Check{
		{Name: "small", Backend: specs.BackendPod, GPUCount: 1, Workload: &specs.Workload{
			Resources: specs.WorkloadResources{Requests: map[string]resource.Quantity{"cpu": resource.MustParse("4")}},
		}},
		{Name: "big", Backend: specs.BackendPod, GPUCount: gpus, Workload: &specs.Workload{
			Resources: specs.WorkloadResources{Limits: map[string]resource.Quantity{"memory": resource.MustParse(memory)}},
		}},
	}}}
}

func request(name string, nodes ...string) *specs.CertificationRequest {
	return &specs.CertificationRequest{Metadata: specs.ObjectMeta{Name: name}, Spec: specs.RequestSpec{Nodes: nodes}}
}

func selectorRequest(name string, sel map[string]string, count int) *specs.CertificationRequest {
	return &specs.CertificationRequest{Metadata: specs.ObjectMeta{Name: name}, Spec: specs.RequestSpec{Selector: sel, Count: count}}
}

// nodeState is everything of a Node a Fleet could change, plus the parts
// it must never change.
type nodeState struct {
	UID             string
	ResourceVersion string
	Spec            corev1.NodeSpec
	Labels          map[string]string
	Annotations     map[string]string
}

func getState(t *testing.T, cs kubernetes.Interface, name string) nodeState {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return nodeState{string(n.UID), n.ResourceVersion, n.Spec, n.Labels, n.Annotations}
}

// sameAs asserts that a node's spec, labels and annotations equal before;
// untouched additionally asserts no write happened at all.
func sameAs(t *testing.T, before, after nodeState, untouched bool) {
	t.Helper()
	assert.Equal(t, before.UID, after.UID)
	assert.Equal(t, before.Spec, after.Spec)
	assert.Equal(t, before.Labels, after.Labels)
	assert.Equal(t, before.Annotations, after.Annotations)
	if untouched {
		assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "node was written")
	}
}

func asNode(s nodeState, name string) backend.Node { return backend.Node{Name: name, UID: s.UID} }

// createNode creates a Ready GPU node, then cordons it and adds taints
// when asked, as an operator would.
func createNode(t *testing.T, env *kubetest.Env, name string, gpus int64, labels map[string]string, cordon bool, taints ...corev1.Taint) backend.Node {
	t.Helper()
	ctx := t.Context()
	n := env.CreateNode(ctx, kubetest.NodeOptions{Name: name, GPUs: gpus, Labels: labels})
	if cordon || len(taints) > 0 {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Unschedulable = cordon
			n.Spec.Taints = append(n.Spec.Taints, taints...)
			_, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}))
	}
	return backend.Node{Name: name, UID: string(n.UID)}
}

var foreignTaint = corev1.Taint{Key: "example.com/maintenance", Value: "disk", Effect: corev1.TaintEffectNoSchedule}

func testFleetSelect(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	f := testFleet(env)
	pool := map[string]string{"pool": "sel"}
	createNode(t, env, "sel-a", 2, pool, false) // too few GPUs
	createNode(t, env, "sel-b", 8, pool, false)
	createNode(t, env, "sel-c", 8, pool, false)
	d := createNode(t, env, "sel-d", 8, pool, false)
	createNode(t, env, "sel-other", 8, map[string]string{"pool": "elsewhere"}, false)
	require.NoError(t, f.Reserve(ctx, "holder-run", []backend.Node{d}))
	prof := gpuProfile(4, "32Gi")

	t.Run("explicit nodes in order", func(t *testing.T) {
		got, err := f.Select(ctx, prof, request("r1", "sel-c", "sel-b", "sel-other"))
		require.NoError(t, err)
		assert.Equal(t, []string{"sel-c", "sel-b", "sel-other"}, got)
	})
	t.Run("selector and count by name", func(t *testing.T) {
		got, err := f.Select(ctx, prof, selectorRequest("r2", pool, 2))
		require.NoError(t, err)
		assert.Equal(t, []string{"sel-b", "sel-c"}, got)
	})
	for _, tc := range []struct {
		name     string
		prof     *specs.CertificationProfile
		req      *specs.CertificationRequest
		sentinel error
		contains []string
	}{
		{"too few GPUs", prof, request("r3", "sel-b", "sel-a"), backend.ErrIneligible,
			[]string{"node sel-a", "allocatable nvidia.com/gpu is 2, below the profile floor 4"}},
		{"too little memory", gpuProfile(1, "128Gi"), request("r4", "sel-b"), backend.ErrIneligible,
			[]string{"node sel-b", "allocatable memory is 64Gi, below the profile floor 128Gi"}},
		{"missing resource", &specs.CertificationProfile{Spec: specs.ProfileSpec{Checks: []specs.Check{{
			Name: "x", Workload: &specs.Workload{Resources: specs.WorkloadResources{
				Requests: map[string]resource.Quantity{"example.com/fpga": resource.MustParse("1")}}}}}}},
			request("r5", "sel-b"), backend.ErrIneligible, []string{"node sel-b", "no allocatable example.com/fpga"}},
		{"no such node", prof, request("r6", "sel-nope"), backend.ErrIneligible, []string{"node sel-nope", "no such node"}},
		{"reserved", prof, request("r7", "sel-b", "sel-d"), backend.ErrBusy,
			[]string{"node sel-d", `reserved by run "holder-run" of cluster "test-cluster"`}},
		{"ineligible before busy", prof, request("r8", "sel-d", "sel-a"), backend.ErrIneligible, []string{"node sel-a"}},
		{"count short, busy would make it", prof, selectorRequest("r9", pool, 3), backend.ErrBusy,
			[]string{"2 of 3 nodes eligible", "node sel-d", "holder-run", "node sel-a"}},
		{"count short for good", prof, selectorRequest("r10", pool, 4), backend.ErrIneligible,
			[]string{"2 of 4 nodes eligible (4 matching)"}},
		{"nothing matches", prof, selectorRequest("r11", map[string]string{"pool": "none"}, 1), backend.ErrIneligible,
			[]string{"0 of 1 nodes eligible (0 matching)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.Select(ctx, tc.prof, tc.req)
			require.Error(t, err)
			assert.Nil(t, got)
			assert.ErrorIs(t, err, tc.sentinel)
			other := backend.ErrBusy
			if tc.sentinel == backend.ErrBusy {
				other = backend.ErrIneligible
			}
			assert.NotErrorIs(t, err, other)
			for _, s := range tc.contains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	t.Run("not Ready", func(t *testing.T) {
		createNode(t, env, "sel-notready", 8, nil, false)
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, "sel-notready", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			_, err = env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}))
		_, err := f.Select(ctx, prof, request("r12", "sel-notready"))
		assert.ErrorIs(t, err, backend.ErrBusy)
		assert.ErrorContains(t, err, "node sel-notready: node busy: not Ready")
	})
}

func gpuPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:  "train",
				Image: "registry.invalid/never-pulled:1",
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")},
				},
			}},
		},
	}
}

func setPhase(t *testing.T, cs kubernetes.Interface, name string, phase corev1.PodPhase) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = phase
		_, err = cs.CoreV1().Pods("default").UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
		return err
	}))
}

func testFleetSelectGPUPods(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	cs := env.Client
	f := testFleet(env)
	prof := gpuProfile(1, "1Gi")
	createNode(t, env, "pod-busy", 8, nil, false)
	createNode(t, env, "pod-ds", 8, nil, false)

	// A pod bound as admin through spec.nodeName, using a GPU: Pending
	// (bound, not started) and Running make the node busy; Succeeded not.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("trainer", "pod-busy"), metav1.CreateOptions{})
		assert.NoError(c, err) // until the default service account exists
	}, 30*time.Second, 200*time.Millisecond)
	for _, phase := range []corev1.PodPhase{corev1.PodPending, corev1.PodRunning} {
		if phase != corev1.PodPending {
			setPhase(t, cs, "trainer", phase)
		}
		_, err := f.Select(ctx, prof, request("r", "pod-busy"))
		assert.ErrorIs(t, err, backend.ErrBusy, "phase %s", phase)
		assert.ErrorContains(t, err, "node pod-busy: node busy: pod default/trainer ("+string(phase)+") uses nvidia.com/gpu")
	}
	setPhase(t, cs, "trainer", corev1.PodSucceeded)
	_, err := f.Select(ctx, prof, request("r", "pod-busy"))
	assert.NoError(t, err, "a finished pod holds no GPU")

	// A real DaemonSet's pod on pod-ds, bound by the real scheduler and
	// reported Running, does not make the node busy.
	labels := map[string]string{"app": "gpu-exporter"}
	_, err = cs.AppsV1().DaemonSets("default").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-exporter", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": "pod-ds"},
					Containers: []corev1.Container{{
						Name: "exporter", Image: "registry.invalid/never-pulled:1",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")}},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var dsPod string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=gpu-exporter"})
		require.NoError(c, err)
		require.Len(c, pods.Items, 1)
		assert.Equal(c, "pod-ds", pods.Items[0].Spec.NodeName)
		dsPod = pods.Items[0].Name
	}, 60*time.Second, 200*time.Millisecond, "the DaemonSet's pod is bound to pod-ds")
	setPhase(t, cs, dsPod, corev1.PodRunning)
	got, err := f.Select(ctx, prof, request("r", "pod-ds"))
	require.NoError(t, err)
	assert.Equal(t, []string{"pod-ds"}, got)
}

func testFleetSnapshot(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	f := testFleet(env)
	n := env.CreateNode(ctx, kubetest.NodeOptions{Name: "snap-new", GPUs: 8, SystemUUID: "sys-1", BootID: "boot-1", Labels: map[string]string{
		GPUProductLabel: "NVIDIA-H100-80GB-HBM3", GPUDriverVersionLabel: "550.90.07",
		GPUDriverMajorLabel: "550", GPUDriverMinorLabel: "90", GPUDriverRevisionLabel: "06",
	}})
	env.CreateNode(ctx, kubetest.NodeOptions{Name: "snap-old", GPUs: 8, Labels: map[string]string{
		GPUDriverMajorLabel: "535", GPUDriverMinorLabel: "183", GPUDriverRevisionLabel: "06",
	}})

	s, err := f.Snapshot(ctx, "c1", "run-1", "snap-new")
	require.NoError(t, err)
	assert.Equal(t, "c1", s.Cluster)
	assert.Equal(t, "run-1", s.Run)
	assert.Equal(t, "snap-new", s.Name)
	assert.Equal(t, string(n.UID), s.UID)
	assert.Equal(t, "sys-1", s.SystemUUID)
	assert.Equal(t, "boot-1", s.BootID)
	assert.Equal(t, "simulated", s.Kernel)
	assert.Equal(t, "NVIDIA-H100-80GB-HBM3", s.GPUProduct)
	assert.Equal(t, "550.90.07", s.GPUDriver, "the full version wins over the legacy parts")
	want := map[string]string{"cpu": "8", "memory": "64Gi", "ephemeral-storage": "100Gi", "pods": "110", "nvidia.com/gpu": "8"}
	assert.Equal(t, want, s.Capacity)
	assert.Equal(t, want, s.Allocatable)

	s, err = f.Snapshot(ctx, "c1", "run-1", "snap-old")
	require.NoError(t, err)
	assert.Equal(t, "535.183.06", s.GPUDriver)
	assert.Empty(t, s.GPUProduct)

	_, err = f.Snapshot(ctx, "c1", "run-1", "snap-none")
	assert.ErrorIs(t, err, backend.ErrIneligible)
	assert.ErrorContains(t, err, "node snap-none")

	// Snapshots (issue 19: requests per run): the nodes read live in one
	// LIST, each exactly as Snapshot reads it; a node that is missing
	// answers for itself; a node whose hostname label names another node
	// (snap-liar says it is snap-gone, which does not exist) never stands
	// in for it.
	env.CreateNode(ctx, kubetest.NodeOptions{Name: "snap-liar", GPUs: 8, Labels: map[string]string{"kubernetes.io/hostname": "snap-gone"}})
	cs, _, reqs := countedClients(t, env)
	counted := NewFleet(cs, FleetOptions{Cluster: testCluster})
	names := []string{"snap-new", "snap-none", "snap-old", "snap-gone"}
	snaps, errs := counted.Snapshots(ctx, "c1", "run-1", names)
	require.Len(t, snaps, len(names))
	require.Len(t, errs, len(names))
	for i, name := range []string{"snap-new", "snap-old"} {
		want, err := f.Snapshot(ctx, "c1", "run-1", name)
		require.NoError(t, err)
		assert.NoError(t, errs[2*i], name)
		assert.Equal(t, want, snaps[2*i], "Snapshots must read %s as Snapshot does", name)
	}
	for _, i := range []int{1, 3} {
		assert.ErrorIs(t, errs[i], backend.ErrIneligible, names[i])
		assert.ErrorContains(t, errs[i], "node "+names[i])
		assert.Nil(t, snaps[i], "a node whose hostname label names %s stood in for it", names[i])
	}
	got, total := reqs.snapshot()
	assert.Equal(t, 3, total, "one LIST for the four nodes, one GET for each of the two it did not return: %s", got)
}

func testFleetReserveRelease(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	cs := env.Client
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	const evidenceID = "evidence@0123456789ab"
	f := NewFleet(cs, FleetOptions{Cluster: testCluster, Evidence: evidenceID, Now: func() time.Time { return now }})
	names := []string{"rr-1", "rr-2", "rr-3", "rr-4"}
	var nodes []backend.Node
	for _, name := range names {
		// rr-2 was cordoned and tainted by its operator before.
		nodes = append(nodes, createNode(t, env, name, 8, map[string]string{"team": "ml"}, name == "rr-2",
			func() []corev1.Taint {
				if name == "rr-2" {
					return []corev1.Taint{foreignTaint}
				}
				return nil
			}()...))
	}
	before := map[string]nodeState{}
	for _, name := range names {
		before[name] = getState(t, cs, name)
	}
	require.True(t, before["rr-2"].Spec.Unschedulable)
	require.Equal(t, []corev1.Taint{foreignTaint}, before["rr-2"].Spec.Taints)

	require.NoError(t, f.Reserve(ctx, "run-rr", nodes))
	reserved := map[string]nodeState{}
	for _, name := range names {
		s := getState(t, cs, name)
		reserved[name] = s
		assert.True(t, s.Spec.Unschedulable, name)
		ourTaint := corev1.Taint{Key: ReservationTaintKey, Value: "run-rr", Effect: corev1.TaintEffectNoSchedule}
		assert.Equal(t, append(before[name].Spec.Taints, ourTaint), s.Spec.Taints, name)
		assert.Equal(t, before[name].Labels, s.Labels, name)
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(s.Annotations[ReservationAnnotation]), &r), name)
		wantPrior := map[string]any{"unschedulable": false, "taints": nil}
		if name == "rr-2" {
			wantPrior = map[string]any{"unschedulable": true, "taints": []any{
				map[string]any{"key": foreignTaint.Key, "value": foreignTaint.Value, "effect": string(foreignTaint.Effect)},
			}}
		}
		assert.Equal(t, map[string]any{
			"cluster": testCluster, "evidence": evidenceID, "run": "run-rr", "uid": before[name].UID,
			"at": "2026-03-04T05:06:07Z", "prior": wantPrior,
		}, r, name)
	}

	res, err := f.Reservations(ctx)
	require.NoError(t, err)
	var mine []backend.Reservation
	for _, r := range res {
		if r.Run == "run-rr" {
			mine = append(mine, r)
		}
	}
	require.Len(t, mine, 4)
	for i, r := range mine {
		assert.Equal(t, nodes[i], r.Node)
		assert.True(t, now.Equal(r.At))
	}
	other, err := NewFleet(cs, FleetOptions{Cluster: "other-cluster"}).Reservations(ctx)
	require.NoError(t, err)
	assert.Empty(t, other, "another cluster's reconciler lists none of ours")
	// A reconciler that shares the cluster name by mistake but records
	// on another evidence branch must not take these reservations for
	// its own stale ones: it neither lists nor releases them.
	twin := NewFleet(cs, FleetOptions{Cluster: testCluster, Evidence: "evidence@ba9876543210"})
	other, err = twin.Reservations(ctx)
	require.NoError(t, err)
	assert.Empty(t, other, "a reconciler of another evidence branch must list none of ours, even under our cluster name")
	err = twin.Release(ctx, "run-rr", nodes[0])
	assert.ErrorIs(t, err, backend.ErrNotOurs)
	assert.ErrorContains(t, err, "two reconcilers share the cluster name")

	// Reserving again for the same run is a no-op: nothing is written.
	require.NoError(t, f.Reserve(ctx, "run-rr", nodes))
	for _, name := range names {
		sameAs(t, reserved[name], getState(t, cs, name), true)
	}

	// Only this run of this cluster may release.
	err = NewFleet(cs, FleetOptions{Cluster: "other-cluster"}).Release(ctx, "run-rr", nodes[0])
	assert.ErrorIs(t, err, backend.ErrNotOurs)
	assert.ErrorContains(t, err, `node rr-1: node no longer matches the run's reservation: reserved by run "run-rr" of cluster "test-cluster", not run "run-rr" of cluster "other-cluster"`)
	err = f.Release(ctx, "run-else", nodes[0])
	assert.ErrorIs(t, err, backend.ErrNotOurs)
	sameAs(t, reserved["rr-1"], getState(t, cs, "rr-1"), true)

	for _, n := range nodes {
		require.NoError(t, f.Release(ctx, "run-rr", n))
	}
	for _, name := range names {
		sameAs(t, before[name], getState(t, cs, name), false)
	}
	// Releasing again is a no-op (a step retried after a crash).
	released := getState(t, cs, "rr-1")
	require.NoError(t, f.Release(ctx, "run-rr", nodes[0]))
	sameAs(t, released, getState(t, cs, "rr-1"), true)

	t.Run("taints added by others while reserved are kept", func(t *testing.T) {
		require.NoError(t, f.Reserve(ctx, "run-rr2", nodes[:1]))
		added := corev1.Taint{Key: "example.com/repair", Effect: corev1.TaintEffectNoExecute}
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, "rr-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = append(n.Spec.Taints, added)
			_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}))
		require.NoError(t, f.Release(ctx, "run-rr2", nodes[0]))
		after := getState(t, cs, "rr-1")
		assert.False(t, after.Spec.Unschedulable)
		require.Len(t, after.Spec.Taints, 1)
		assert.Equal(t, added.Key, after.Spec.Taints[0].Key)
		assert.NotContains(t, after.Annotations, ReservationAnnotation)
	})
}

func testFleetReserveRollback(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	cs := env.Client
	f := testFleet(env)
	names := []string{"rb-1", "rb-2", "rb-3", "rb-4"}
	var nodes []backend.Node
	for _, name := range names {
		nodes = append(nodes, createNode(t, env, name, 8, map[string]string{"team": "ml"}, name == "rb-1", foreignTaint))
	}
	require.NoError(t, f.Reserve(ctx, "other-run", nodes[2:3]))
	before := map[string]nodeState{}
	for _, name := range names {
		before[name] = getState(t, cs, name)
	}

	err := f.Reserve(ctx, "run-rb", nodes)
	require.Error(t, err)
	assert.ErrorIs(t, err, backend.ErrBusy)
	assert.ErrorContains(t, err, `node rb-3: node busy: reserved by run "other-run" of cluster "test-cluster"`)
	for _, name := range names {
		// rb-1 and rb-2 were reserved and restored; rb-3 and rb-4 never written.
		sameAs(t, before[name], getState(t, cs, name), name == "rb-3" || name == "rb-4")
	}

	t.Run("node re-created since the snapshot", func(t *testing.T) {
		stale := []backend.Node{nodes[0], nodes[1], {Name: "rb-4", UID: "not-the-uid"}}
		err := f.Reserve(ctx, "run-rb", stale)
		assert.ErrorIs(t, err, backend.ErrIneligible)
		assert.ErrorContains(t, err, "node rb-4: node not eligible: UID is "+before["rb-4"].UID+", not not-the-uid")
		for _, name := range names {
			sameAs(t, before[name], getState(t, cs, name), name != "rb-1" && name != "rb-2")
		}
	})
	t.Run("missing node", func(t *testing.T) {
		err := f.Reserve(ctx, "run-rb", []backend.Node{nodes[0], {Name: "rb-none", UID: "x"}})
		assert.ErrorIs(t, err, backend.ErrIneligible)
		assert.ErrorContains(t, err, "node rb-none: node not eligible: no such node")
		sameAs(t, before["rb-1"], getState(t, cs, "rb-1"), false)
	})
}

func testFleetReleaseRecreatedNode(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	cs := env.Client
	f := testFleet(env)
	old := createNode(t, env, "rc-1", 8, nil, false)
	require.NoError(t, f.Reserve(ctx, "run-rc", []backend.Node{old}))

	require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, "rc-1", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Nodes().Get(ctx, "rc-1", metav1.GetOptions{})
		return err != nil
	}, 30*time.Second, 100*time.Millisecond)
	err := f.Release(ctx, "run-rc", old)
	assert.ErrorIs(t, err, backend.ErrNotOurs)
	assert.ErrorContains(t, err, "node rc-1: node no longer matches the run's reservation: no such node")

	// Re-created under the same name, reserved by another run.
	renewed := createNode(t, env, "rc-1", 8, nil, true, foreignTaint)
	require.NotEqual(t, old.UID, renewed.UID)
	require.NoError(t, f.Reserve(ctx, "run-rc", []backend.Node{renewed}))
	before := getState(t, cs, "rc-1")

	err = f.Release(ctx, "run-rc", old)
	assert.ErrorIs(t, err, backend.ErrNotOurs)
	assert.ErrorContains(t, err, "node rc-1: node no longer matches the run's reservation: UID is "+renewed.UID+", not "+old.UID)
	sameAs(t, before, getState(t, cs, "rc-1"), true)
	err = f.Reserve(ctx, "run-rc", []backend.Node{old})
	assert.ErrorIs(t, err, backend.ErrIneligible)
	sameAs(t, before, getState(t, cs, "rc-1"), true)
}

func testFleetReserveRace(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	cs := env.Client
	a := createNode(t, env, "race-a", 8, nil, false)
	b := createNode(t, env, "race-b", 8, nil, false)
	shared := createNode(t, env, "race-shared", 8, nil, true, foreignTaint)
	before := map[string]nodeState{}
	for _, name := range []string{"race-a", "race-b", "race-shared"} {
		before[name] = getState(t, cs, name)
	}
	fa, fb := testFleet(env), testFleet(env)
	wins := map[string]int{}
	for round := range 5 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		var errA, errB error
		wg.Add(2)
		go func() { defer wg.Done(); <-start; errA = fa.Reserve(ctx, "run-a", []backend.Node{a, shared}) }()
		go func() { defer wg.Done(); <-start; errB = fb.Reserve(ctx, "run-b", []backend.Node{b, shared}) }()
		close(start)
		wg.Wait()

		require.True(t, (errA == nil) != (errB == nil), "round %d: exactly one wins: %v / %v", round, errA, errB)
		winner, loser, loserNode, loserErr, wf := "run-a", "race-b", b, errB, fa
		winNode := a
		if errB == nil {
			winner, loser, loserNode, loserErr, wf = "run-b", "race-a", a, errA, fb
			winNode = b
		}
		wins[winner]++
		assert.ErrorIs(t, loserErr, backend.ErrBusy)
		assert.ErrorContains(t, loserErr, `node race-shared: node busy: reserved by run "`+winner+`"`)
		sameAs(t, before[loser], getState(t, cs, loser), false)
		assert.Equal(t, loserNode.Name, loser)
		s := getState(t, cs, "race-shared")
		assert.Contains(t, s.Annotations[ReservationAnnotation], `"run":"`+winner+`"`)

		require.NoError(t, wf.Release(ctx, winner, winNode))
		require.NoError(t, wf.Release(ctx, winner, shared))
		for name, st := range before {
			sameAs(t, st, getState(t, cs, name), false)
		}
	}
	t.Logf("wins: %v", wins)
}

func testFleetCertify(t *testing.T, env *kubetest.Env) {
	ctx := t.Context()
	cs := env.Client
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	clock := func() time.Time { return now }
	f := NewFleet(cs, FleetOptions{Cluster: testCluster, Now: clock, Certify: &CertifyOptions{TTL: 24 * time.Hour}})
	foreign := map[string]string{"team": "ml", "example.com/certified-until": "keep"}
	boot := createNode(t, env, "cert-boot", 8, foreign, false, foreignTaint)
	exp := createNode(t, env, "cert-exp", 8, foreign, false)
	origBoot := getState(t, cs, "cert-boot")

	// Labelling off: nothing is written.
	off := testFleet(env)
	require.NoError(t, off.Certify(ctx, boot, "burnin", "run-c", now.Add(time.Hour)))
	require.NoError(t, off.Uncertify(ctx, boot))
	require.NoError(t, off.SweepCertified(ctx, nil))
	sameAs(t, origBoot, getState(t, cs, "cert-boot"), true)

	// Another UID: nothing is written.
	require.NoError(t, f.Certify(ctx, backend.Node{Name: "cert-boot", UID: "other"}, "burnin", "run-c", time.Time{}))
	sameAs(t, origBoot, getState(t, cs, "cert-boot"), true)

	require.NoError(t, f.Certify(ctx, boot, "burnin", "run-c", time.Time{}))
	require.NoError(t, f.Certify(ctx, exp, "burnin", "run-c", now.Add(time.Hour)))
	n, err := cs.CoreV1().Nodes().Get(ctx, "cert-boot", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "burnin", n.Labels[CertifiedProfileLabel])
	assert.Equal(t, "run-c", n.Labels[CertifiedRunLabel])
	assert.Equal(t, "20260507T070809Z", n.Labels[CertifiedUntilLabel], "now + TTL")
	assert.Equal(t, string(n.UID)+"/"+n.Status.NodeInfo.BootID, n.Annotations[CertifiedIdentityAnnotation])
	assert.Equal(t, origBoot.Spec, n.Spec)
	certified := getState(t, cs, "cert-boot")
	certifiedExp := getState(t, cs, "cert-exp")
	assert.Equal(t, "20260506T080809Z", certifiedExp.Labels[CertifiedUntilLabel])

	// Nothing stale yet: the sweep writes nothing.
	require.NoError(t, f.SweepCertified(ctx, nil))
	sameAs(t, certified, getState(t, cs, "cert-boot"), true)
	sameAs(t, certifiedExp, getState(t, cs, "cert-exp"), true)
	// What the metrics report: both certifications, each with its expiry;
	// with labelling off, none.
	certs, err := f.Certifications(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []backend.Certification{
		{Node: "cert-boot", Profile: "burnin", Run: "run-c", Until: now.Add(24 * time.Hour)},
		{Node: "cert-exp", Profile: "burnin", Run: "run-c", Until: now.Add(time.Hour)},
	}, certs)
	certs, err = off.Certifications(ctx)
	require.NoError(t, err)
	assert.Empty(t, certs)

	// cert-boot reboots (new bootID); an hour later cert-exp expires.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, "cert-boot", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.NodeInfo.BootID = "rebooted"
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}))
	certs, err = f.Certifications(ctx)
	require.NoError(t, err)
	assert.Equal(t, []backend.Certification{{Node: "cert-exp", Profile: "burnin", Run: "run-c", Until: now.Add(time.Hour)}}, certs, "a rebooted node's certification no longer counts, even before the sweep")
	require.NoError(t, f.SweepCertified(ctx, nil))
	sameAs(t, origBoot, getState(t, cs, "cert-boot"), false)
	sameAs(t, certifiedExp, getState(t, cs, "cert-exp"), true)
	now = now.Add(time.Hour)
	require.NoError(t, f.SweepCertified(ctx, nil))
	after := getState(t, cs, "cert-exp")
	assert.Equal(t, foreign["team"], after.Labels["team"])
	assert.Equal(t, "keep", after.Labels["example.com/certified-until"])
	assert.NotContains(t, after.Labels, CertifiedUntilLabel)
	assert.NotContains(t, after.Labels, CertifiedProfileLabel)
	assert.NotContains(t, after.Labels, CertifiedRunLabel)
	assert.NotContains(t, after.Annotations, CertifiedIdentityAnnotation)

	// Uncertify after a later non-Pass.
	require.NoError(t, f.Certify(ctx, boot, "burnin", "run-d", now.Add(time.Hour)))
	require.NoError(t, f.Uncertify(ctx, boot))
	sameAs(t, origBoot, getState(t, cs, "cert-boot"), false)

	var ne *NodeError
	assert.False(t, errors.As(f.Uncertify(ctx, backend.Node{Name: "cert-none", UID: "x"}), &ne), "a missing node is left alone")
}
