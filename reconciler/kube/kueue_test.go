package kube

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/internal/testing/syncbuf"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// The simulated topology: block a (racks a1, a2) of eight nodes, block b
// (rack b1) of four, eight GPUs each.
const (
	blockLabel = "topology.signet.test/block"
	rackLabel  = "topology.signet.test/rack"
	poolLabel  = "signet.test/pool"
	gpuQueue   = "gpu-queue"
)

type kueueE2E struct {
	env    *kubetest.Env
	kueue  *kubetest.Kueue
	b      *PodBackend
	log    *syncbuf.Buffer
	blockA []evidence.Participant
	blockB []evidence.Participant
}

// startKueueE2E starts the control plane, twelve simulated nodes with
// block and rack labels, the test agent, and real Kueue (KueueVersion) with
// a Topology (block, rack, hostname), a ResourceFlavor of the pool's nodes
// on it, a ClusterQueue of 16 GPUs that preempts lower priorities, and the
// LocalQueue gpu-queue in default.
func startKueueE2E(t *testing.T) *kueueE2E {
	t.Helper()
	img := signetImageDir(t)
	env := kubetest.Start(t)
	ctx := t.Context()
	e := &kueueE2E{env: env, log: &syncbuf.Buffer{}}
	for _, n := range []struct{ name, block, rack string }{
		{"gpu-a1", "a", "a1"}, {"gpu-a2", "a", "a1"}, {"gpu-a3", "a", "a1"}, {"gpu-a4", "a", "a1"},
		{"gpu-a5", "a", "a2"}, {"gpu-a6", "a", "a2"}, {"gpu-a7", "a", "a2"}, {"gpu-a8", "a", "a2"},
		{"gpu-b1", "b", "b1"}, {"gpu-b2", "b", "b1"}, {"gpu-b3", "b", "b1"}, {"gpu-b4", "b", "b1"},
	} {
		node := env.CreateNode(ctx, kubetest.NodeOptions{Name: n.name, GPUs: 8, Labels: map[string]string{
			poolLabel: "gpu", blockLabel: n.block, rackLabel: n.rack,
		}})
		if n.block == "a" {
			e.blockA = append(e.blockA, evidence.Participant{Index: len(e.blockA), Node: n.name, UID: string(node.UID)})
		} else {
			e.blockB = append(e.blockB, evidence.Participant{Index: len(e.blockB), Node: n.name, UID: string(node.UID)})
		}
	}
	env.StartAgent(t, kubetest.AgentOptions{
		Images: map[string]string{testSignetImage: img, testWorkloadImage: "/"},
	})
	e.kueue = env.StartKueue(t, kubetest.KueueOptions{})
	e.kueue.CreateTopology(ctx, "gpu-topology", blockLabel, rackLabel, "kubernetes.io/hostname")
	e.kueue.CreateResourceFlavor(ctx, "gpu", map[string]string{poolLabel: "gpu"}, "gpu-topology")
	e.kueue.CreateClusterQueue(ctx, kubetest.ClusterQueueOptions{Name: "gpu-cq", Flavor: "gpu", GPUs: 16, PreemptWithinClusterQueue: "LowerPriority"})
	e.kueue.CreateLocalQueue(ctx, "default", gpuQueue, "gpu-cq")
	e.b = NewPodBackend(env.Client, PodOptions{
		Namespace: "default", SignetImage: testSignetImage, PollInterval: 200 * time.Millisecond, CleanupTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(e.log, nil)),
	})
	return e
}

// checkRun is a check of run on parts through gpu-queue, gpus each,
// requiring one block.
func (e *kueueE2E) checkRun(run, script string, gpus int, deadline time.Duration, parts []evidence.Participant) *backend.CheckRun {
	c := testCheckRun(run, script, parts...)
	c.Check.GPUCount = gpus
	c.Check.Deadline = specs.Seconds(deadline / time.Second)
	c.Check.Workload = &specs.Workload{Image: testWorkloadImage, Queue: gpuQueue, RequiredTopologyLevel: blockLabel}
	c.Deadline = time.Now().Add(deadline)
	return c
}

func (e *kueueE2E) pods(t *testing.T, c *backend.CheckRun) []corev1.Pod {
	t.Helper()
	l, err := e.env.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: checkSelector(c)})
	require.NoError(t, err)
	return l.Items
}

func (e *kueueE2E) cleanup(t *testing.T, c *backend.CheckRun) {
	t.Helper()
	require.NoError(t, e.b.Cleanup(context.Background(), c))
	assert.Empty(t, e.pods(t, c), "no pod left")
}

// workload is Kueue's Workload of check c's pod group (named after it).
func (e *kueueE2E) workload(t *testing.T, c *backend.CheckRun) *unstructured.Unstructured {
	t.Helper()
	for _, w := range e.kueue.Workloads(context.Background(), "default") {
		for _, o := range w.GetOwnerReferences() {
			if o.Kind == "Pod" && strings.HasPrefix(o.Name, checkBaseName(c.Run, c.Index)) {
				return &w
			}
		}
	}
	return nil
}

// waitRunning waits until every pod of c has its check container running.
func (e *kueueE2E) waitRunning(t *testing.T, c *backend.CheckRun) {
	t.Helper()
	if !assert.Eventually(t, func() bool {
		ps := e.pods(t, c)
		if len(ps) != len(c.Participants) {
			return false
		}
		for _, p := range ps {
			running := false
			for _, cs := range p.Status.ContainerStatuses {
				running = running || (cs.Name == checkContainerName && cs.State.Running != nil)
			}
			if !running {
				return false
			}
		}
		return true
	}, 2*time.Minute, 200*time.Millisecond, "every pod of %s running", c.Run) {
		e.dump(t, c)
		t.FailNow()
	}
}

func conditionsOf(u *unstructured.Unstructured) any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	return conds
}

// dump logs what Kueue and the API server hold of check c, for a failure.
func (e *kueueE2E) dump(t *testing.T, c *backend.CheckRun) {
	t.Helper()
	for _, p := range e.pods(t, c) {
		t.Logf("pod %s: phase %s node %q gates %v nodeSelector %v conditions %+v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Spec.SchedulingGates, p.Spec.NodeSelector, p.Status.Conditions)
	}
	for _, w := range e.kueue.Workloads(context.Background(), "default") {
		st, _ := json.Marshal(conditionsOf(&w))
		t.Logf("workload %s: %s", w.GetName(), st)
	}
	for _, l := range strings.Split(e.kueue.LogTail(1<<20), "\n") {
		if strings.Contains(l, c.Run) {
			t.Logf("kueue: %.800s", l)
		}
	}
}

type runResult struct {
	rep *backend.CheckReport
	err error
}

func (e *kueueE2E) runAsync(c *backend.CheckRun) <-chan runResult {
	ch := make(chan runResult, 1)
	go func() {
		rep, err := e.b.Run(context.Background(), c)
		ch <- runResult{rep, err}
	}()
	return ch
}

// TestPodBackendKueueE2E runs signet's pod backend against real Kueue
// (kubetest.KueueVersion, its own binary, CRDs and webhooks) on the real
// control plane. Only the kubelet is simulated (the test agent runs the
// pods the real scheduler binds, on simulated nodes labelled with a block
// and rack topology): admission, quota, topology assignment, gating and
// preemption are Kueue's own.
func TestPodBackendKueueE2E(t *testing.T) {
	e := startKueueE2E(t)

	t.Run("an 8-node pod group is admitted into one block and passes", func(t *testing.T) {
		c := e.checkRun("tas", resultScript, 1, 3*time.Minute, e.blockA)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 8)
		for i, p := range rep.Participants {
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s (%+v)", p.Node, out.Reason, p.Termination)
			assert.Equal(t, e.blockA[i].Node, p.Identity.Node)
		}
		for _, p := range e.pods(t, c) {
			assert.Equal(t, "true", p.Labels["kueue.x-k8s.io/managed"], "pod %s managed by Kueue", p.Name)
			assert.Empty(t, p.Spec.SchedulingGates, "pod %s ungated by Kueue", p.Name)
			n, err := e.env.Client.CoreV1().Nodes().Get(t.Context(), p.Spec.NodeName, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, "a", n.Labels[blockLabel], "pod %s on node %s of the requested block", p.Name, n.Name)
		}
		w := e.workload(t, c)
		require.NotNil(t, w, "Kueue made a Workload of the pod group")
		assets, _, _ := unstructured.NestedSlice(w.Object, "status", "admission", "podSetAssignments")
		require.NotEmpty(t, assets, "admitted: %v", w.Object["status"])
		for _, a := range assets {
			_, ok := a.(map[string]any)["topologyAssignment"]
			assert.True(t, ok, "topology-aware admission: %v", a)
		}
		e.cleanup(t, c)
	})

	// Kueue's topology-aware scheduling leaves cordoned nodes out of every
	// topology domain, so a Fleet that reserves the participants for a
	// check through such a queue must not cordon them
	// (kubernetes.reserveTaintOnly); with the cordon the same check is
	// never admitted (TestMPIJobKueueE2E's cordoned case).
	t.Run("nodes a Fleet reserved with its taint alone are admitted with topology and pass", func(t *testing.T) {
		fleet := NewFleet(e.env.Client, FleetOptions{Cluster: "kueue", Evidence: "e2e", TaintOnly: true})
		const run = "tas-reserved"
		nodes := make([]backend.Node, len(e.blockA))
		for i, p := range e.blockA {
			nodes[i] = backend.Node{Name: p.Node, UID: p.UID}
		}
		require.NoError(t, fleet.Reserve(t.Context(), run, nodes))
		defer func() {
			for _, n := range nodes {
				assert.NoError(t, fleet.Release(context.Background(), run, n))
			}
		}()
		for _, n := range nodes {
			got, err := e.env.Client.CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
			require.NoError(t, err)
			require.False(t, got.Spec.Unschedulable, "%s cordoned by a taint-only reservation", n.Name)
			assert.True(t, slices.ContainsFunc(got.Spec.Taints, func(tn corev1.Taint) bool { return isOurTaint(tn, run) }), "%s not tainted for %s", n.Name, run)
		}
		c := e.checkRun(run, resultScript, 1, 90*time.Second, e.blockA)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 8)
		for _, p := range rep.Participants {
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "a check through a topology-aware queue on nodes reserved with the taint alone: %s: %s", p.Node, out.Reason)
		}
		e.cleanup(t, c)
	})

	t.Run("a request over the free quota waits for capacity, then runs", func(t *testing.T) {
		// big takes the queue's 16 GPUs (8 nodes x 2) for a few seconds.
		big := e.checkRun("big", "#!/bin/sh\nsleep 6\n"+strings.TrimPrefix(resultScript, "#!/bin/sh\n"), 2, 3*time.Minute, e.blockA)
		bigDone := e.runAsync(big)
		e.waitRunning(t, big)

		small := e.checkRun("small", resultScript, 1, 3*time.Minute, e.blockB[:2])
		smallDone := e.runAsync(small)
		// While big holds the quota, small's pods stay gated and its Run
		// has not returned: waiting, not failed.
		require.Eventually(t, func() bool {
			return strings.Contains(e.log.String(), "check waiting for capacity") && strings.Contains(e.log.String(), "run=small")
		}, 30*time.Second, 100*time.Millisecond, "signet logs small as waiting for capacity")
		for _, p := range e.pods(t, small) {
			assert.Contains(t, p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: KueueAdmissionGate}, "pod %s gated while big holds the quota", p.Name)
		}
		select {
		case r := <-smallDone:
			t.Fatalf("small ended while waiting for quota: %+v %v", r.rep, r.err)
		default:
		}

		r := <-bigDone
		require.NoError(t, r.err)
		for _, p := range r.rep.Participants {
			assert.Equal(t, specs.VerdictPass, evaluate(big, p).Verdict, "%s: %+v", p.Node, p.Termination)
		}
		// Kueue frees big's quota when its pod group succeeds; small runs.
		select {
		case r = <-smallDone:
		case <-time.After(2 * time.Minute):
			e.dump(t, big)
			e.dump(t, small)
			t.Fatal("small not run within 2m of big's end")
		}
		require.NoError(t, r.err)
		for _, p := range r.rep.Participants {
			out := evaluate(small, p)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s (%+v)", p.Node, out.Reason, p.Termination)
		}
		assert.Contains(t, e.log.String(), "check admitted by its queue")
		e.cleanup(t, big)
		e.cleanup(t, small)
	})

	// The pod backend's deadline and cancel cases (TestPodBackendE2E) for
	// a pod group Kueue admitted: its pods run, ungated, and Kueue's
	// finalizers do not keep Cleanup from removing them.
	t.Run("an admitted pod group still running at the deadline is an Error", func(t *testing.T) {
		c := e.checkRun("late", "#!/bin/sh\nsleep 120\n", 1, 20*time.Second, e.blockB[:2])
		done := e.runAsync(c)
		e.waitRunning(t, c)
		var r runResult
		select {
		case r = <-done:
		case <-time.After(time.Minute):
			t.Fatal("Run did not return within 40s of the deadline")
		}
		require.NoError(t, r.err)
		require.Len(t, r.rep.Participants, 2)
		for _, p := range r.rep.Participants {
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", p.Node, out.Reason)
			assert.True(t, p.Termination.DeadlineExceeded, p.Node)
			assert.Contains(t, out.Reason, "still Running at the check deadline")
			assert.NotContains(t, out.Reason, "waiting for capacity", "admitted, not waiting")
			assert.Nil(t, p.Result)
		}
		for _, p := range e.pods(t, c) {
			assert.Equal(t, "true", p.Labels["kueue.x-k8s.io/managed"], "pod %s managed by Kueue", p.Name)
		}
		e.cleanup(t, c)
	})

	t.Run("an admitted pod group whose observation is canceled is Canceled", func(t *testing.T) {
		c := e.checkRun("cancel", "#!/bin/sh\nsleep 120\n", 1, 3*time.Minute, e.blockB[:2])
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan runResult, 1)
		go func() {
			rep, err := e.b.Run(ctx, c)
			done <- runResult{rep, err}
		}()
		e.waitRunning(t, c)
		cancel()
		r := <-done
		require.NoError(t, r.err)
		require.Len(t, r.rep.Participants, 2)
		for _, p := range r.rep.Participants {
			assert.True(t, p.Termination.Canceled, "%s: %+v", p.Node, p.Termination)
			assert.Equal(t, specs.VerdictCanceled, evaluate(c, p).Verdict, p.Node)
			assert.Nil(t, p.Result)
		}
		e.cleanup(t, c)
	})

	t.Run("a pod group Kueue never admits before the deadline is an Error, waiting for capacity", func(t *testing.T) {
		// hog takes the queue's 16 GPUs for the whole case.
		hog := preemptorJob("hog", 2, 8)
		delete(hog.Labels, "kueue.x-k8s.io/priority-class")
		_, err := e.env.Client.BatchV1().Jobs("default").Create(t.Context(), hog, metav1.CreateOptions{})
		require.NoError(t, err)
		defer func() {
			bg := metav1.DeletePropagationBackground
			_ = e.env.Client.BatchV1().Jobs("default").Delete(context.Background(), hog.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		}()
		require.Eventually(t, func() bool {
			for _, w := range e.kueue.Workloads(t.Context(), "default") {
				if strings.HasPrefix(w.GetName(), "job-hog-") && kubetest.Condition(&w, "Admitted") == "True" {
					return true
				}
			}
			return false
		}, time.Minute, 200*time.Millisecond, "Kueue admits hog")

		c := e.checkRun("starved", resultScript, 1, 10*time.Second, e.blockB[:2])
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for _, p := range rep.Participants {
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", p.Node, out.Reason)
			assert.True(t, p.Termination.DeadlineExceeded, p.Node)
			assert.True(t, strings.HasPrefix(p.Termination.Reason, `waiting for capacity: queue "gpu-queue" had not admitted pod`), p.Termination.Reason)
			assert.Nil(t, p.Result)
		}
		e.cleanup(t, c)
	})

	t.Run("a check preempted by Kueue is an Error with Kueue's reason, never rerun", func(t *testing.T) {
		victim := e.checkRun("victim", "#!/bin/sh\nsleep 120\n", 2, 5*time.Minute, e.blockA)
		done := e.runAsync(victim)
		e.waitRunning(t, victim)
		created := map[string]string{}
		for _, p := range e.pods(t, victim) {
			created[p.Name] = string(p.UID)
		}

		// A higher-priority Job needing the whole queue: Kueue preempts
		// the check's pod group to admit it.
		e.kueue.CreateWorkloadPriorityClass(t.Context(), "high", 1000)
		job := preemptorJob("preemptor", 2, 8)
		_, err := e.env.Client.BatchV1().Jobs("default").Create(t.Context(), job, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			bg := metav1.DeletePropagationBackground
			_ = e.env.Client.BatchV1().Jobs("default").Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		})

		var r runResult
		select {
		case r = <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("the preempted check still observed after 2m; kueue log:\n%s", e.kueue.LogTail(4000))
		}
		require.NoError(t, r.err)
		require.Len(t, r.rep.Participants, 8)
		for _, p := range r.rep.Participants {
			out := evaluate(victim, p)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", p.Node, out.Reason)
			assert.Contains(t, out.Reason, "stopped by Kueue")
			assert.Contains(t, out.Reason, "Preempted")
			assert.Nil(t, p.Result)
		}
		// signet never creates the check's pods again: whatever is left is
		// what it created, on its way out.
		time.Sleep(2 * time.Second)
		for _, p := range e.pods(t, victim) {
			assert.Equal(t, created[p.Name], string(p.UID), "pod %s not recreated", p.Name)
		}
		// Kueue drops its finalizer once the stopped pods are Failed (the
		// agent, as a kubelet, puts a pod it deletes into a terminal phase).
		e.cleanup(t, victim)
	})
}

// preemptorJob is a batch Job of gpu-queue at WorkloadPriorityClass high:
// n pods of gpus GPUs each, in one block. Its image is not one the test
// agent runs: admitted, its pods stay Pending, holding the quota.
func preemptorJob(name string, n int32, gpus int64) *batchv1.Job {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{
			KueueQueueLabel: gpuQueue, "kueue.x-k8s.io/priority-class": "high",
		}},
		Spec: batchv1.JobSpec{
			Parallelism: &n, Completions: &n, Suspend: ptr(true),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{KueueRequiredTopology: blockLabel}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "c", Image: "registry.example/preemptor:1",
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{kubetest.GPUResource: q},
							Limits:   corev1.ResourceList{kubetest.GPUResource: q},
						},
					}},
				},
			},
		},
	}
}
