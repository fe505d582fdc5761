package kube

import (
	"context"
	"encoding/json"
	"log/slog"
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

// TestMPIJobKueueE2E runs the mpijob backend against the real MPI Operator
// and real Kueue (kubetest.KueueVersion, with its kubeflow.org/mpijob
// integration and webhooks) on the real control plane; only the kubelet is
// simulated. The check's MPIJob names the queue of its workload: Kueue's
// webhook creates it suspended, and Kueue admits it (unsuspending it and
// writing its flavor's node labels into both pod templates) once the
// ClusterQueue's 16 GPUs are free.
func TestMPIJobKueueE2E(t *testing.T) {
	ctx := t.Context()
	imgDir := signetImageDir(t)
	env := kubetest.Start(t)
	env.InstallMPIJobCRD(ctx)
	env.StartMPIOperator(t)
	workload := t.TempDir()
	kubetest.AddSSHD(t, workload)
	env.StartAgent(t, kubetest.AgentOptions{Images: map[string]string{
		mpiTestSignetImage:   imgDir,
		mpiTestWorkloadImage: workload,
	}})
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "signet"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// gpu-1 and gpu-2 are the participants; cpu-1, in the same pool, is
	// where the unpinned launcher goes. All three carry the flavor's label.
	nodes := map[string]*corev1.Node{}
	for _, n := range []struct {
		name string
		gpus int64
	}{{"gpu-1", 8}, {"gpu-2", 8}, {"cpu-1", 0}} {
		nodes[n.name] = env.CreateNode(ctx, kubetest.NodeOptions{Name: n.name, GPUs: n.gpus, Labels: map[string]string{
			poolLabel: "gpu", blockLabel: "a", rackLabel: "a1",
		}})
	}
	// The default integrations: batch/job, pod (the harness probes its
	// webhook) and kubeflow.org/mpijob.
	k := env.StartKueue(t, kubetest.KueueOptions{})
	k.CreateResourceFlavor(ctx, "gpu", map[string]string{poolLabel: "gpu"}, "")
	k.CreateClusterQueue(ctx, kubetest.ClusterQueueOptions{Name: "gpu-cq", Flavor: "gpu", GPUs: 16, PreemptWithinClusterQueue: "LowerPriority"})
	k.CreateLocalQueue(ctx, "signet", gpuQueue, "gpu-cq")
	k.CreateWorkloadPriorityClass(ctx, "high", 1000)
	// A second queue over the same nodes with topology-aware scheduling.
	k.CreateTopology(ctx, "gpu-topology", blockLabel, rackLabel, "kubernetes.io/hostname")
	k.CreateResourceFlavor(ctx, "gpu-tas", map[string]string{poolLabel: "gpu"}, "gpu-topology")
	k.CreateClusterQueue(ctx, kubetest.ClusterQueueOptions{Name: "tas-cq", Flavor: "gpu-tas", GPUs: 16})
	k.CreateLocalQueue(ctx, "signet", "tas-queue", "tas-cq")

	log := &syncbuf.Buffer{}
	b := NewMPIJobBackend(env.Dynamic(), env.Client, MPIJobOptions{
		Namespace: "signet", SignetImage: mpiTestSignetImage, PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	jobs := env.Dynamic().Resource(MPIJobGVR).Namespace("signet")
	pods := env.Client.CoreV1().Pods("signet")
	// reserve taints and cordons the participants for run, as a Fleet
	// does: the blockers' pods never bind there, only the check's workers.
	reserve := func(t *testing.T, run string) {
		for _, name := range []string{"gpu-1", "gpu-2"} {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			n.Spec.Unschedulable = true
			n.Spec.Taints = []corev1.Taint{{Key: ReservationTaintKey, Value: run, Effect: corev1.TaintEffectNoSchedule}}
			_, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
	}
	check := func(run, script string, deadline time.Duration) *backend.CheckRun {
		c := mpiCheckRun(run, script, deadline,
			evidence.Participant{Node: "gpu-1", UID: string(nodes["gpu-1"].UID)},
			evidence.Participant{Node: "gpu-2", UID: string(nodes["gpu-2"].UID)})
		c.Check.Workload.Queue = gpuQueue
		return c
	}
	// block takes the queue's 16 GPUs with a Job of priority (a
	// WorkloadPriorityClass name, or "" for 0); its pods never run. With
	// admitted, it returns once Kueue has admitted the Job: a check created
	// earlier could take the quota first.
	block := func(t *testing.T, name, priority string, admitted bool) {
		job := quotaJob(name, priority)
		_, err := env.Client.BatchV1().Jobs("signet").Create(ctx, job, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { deleteJob(env, name) })
		if !admitted {
			return
		}
		require.Eventually(t, func() bool {
			for _, w := range k.Workloads(ctx, "signet") {
				if strings.HasPrefix(w.GetName(), "job-"+name+"-") && kubetest.Condition(&w, "Admitted") == "True" {
					return true
				}
			}
			return false
		}, time.Minute, 100*time.Millisecond, "Kueue admits Job %s", name)
	}
	runAsync := func(c *backend.CheckRun) <-chan runResult {
		ch := make(chan runResult, 1)
		go func() {
			rep, err := b.Run(context.Background(), c)
			ch <- runResult{rep, err}
		}()
		return ch
	}
	podsOf := func(t *testing.T, c *backend.CheckRun) []corev1.Pod {
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + MPIJobName(c.Run, c.Index)})
		require.NoError(t, err)
		return pl.Items
	}
	suspended := func(t *testing.T, c *backend.CheckRun) bool {
		job, err := jobs.Get(ctx, MPIJobName(c.Run, c.Index), metav1.GetOptions{})
		require.NoError(t, err)
		s, _, _ := unstructured.NestedBool(job.Object, "spec", "runPolicy", "suspend")
		return s
	}
	waiting := func(t *testing.T, c *backend.CheckRun) {
		require.Eventually(t, func() bool {
			return strings.Contains(log.String(), "check waiting for capacity") && strings.Contains(log.String(), "run="+c.Run+" ")
		}, 60*time.Second, 100*time.Millisecond, "signet logs %s as waiting for capacity", c.Run)
	}
	cleanup := func(t *testing.T, c *backend.CheckRun) {
		require.NoError(t, b.Cleanup(ctx, c))
		assert.Empty(t, podsOf(t, c), "no pod left")
	}

	t.Run("suspended by Kueue while the quota is taken, resumed when it frees, then Pass", func(t *testing.T) {
		reserve(t, "resume")
		block(t, "hog", "", true)
		c := check("resume", mpiPassScript("Pass", 0), 3*time.Minute)
		done := runAsync(c)
		waiting(t, c)
		// Suspended by Kueue's webhook, held by Kueue: the operator made
		// no pod, and Run has not returned.
		assert.True(t, suspended(t, c), "spec.runPolicy.suspend")
		assert.Empty(t, podsOf(t, c), "no pod while suspended")
		select {
		case r := <-done:
			t.Fatalf("the check ended while waiting for quota: %+v %v", r.rep, r.err)
		default:
		}

		deleteJob(env, "hog")
		var r runResult
		select {
		case r = <-done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the check did not end within 3m of the quota freeing; kueue log:\n%s", k.LogTail(4000))
		}
		require.NoError(t, r.err)
		assert.Contains(t, log.String(), "check admitted by its queue")
		// Kueue admitted it, writing its flavor's node labels into the
		// templates: signet accepted exactly that.
		job, err := jobs.Get(ctx, MPIJobName(c.Run, c.Index), metav1.GetOptions{})
		require.NoError(t, err)
		sel, _, _ := unstructured.NestedStringMap(job.Object, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "nodeSelector")
		assert.Equal(t, map[string]string{poolLabel: "gpu"}, sel, "Kueue's flavor node labels on the workers")
		workers := map[string]corev1.Pod{}
		for _, p := range podsOf(t, c) {
			if p.Labels[MPIJobRoleLabel] == MPIRoleWorker {
				workers[p.Spec.NodeName] = p
			}
		}
		require.Len(t, r.rep.Participants, 2)
		for i, pr := range r.rep.Participants {
			part := c.Participants[i]
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s", part.Node, out.Reason)
			w, ok := workers[part.Node]
			require.True(t, ok, "no worker on %s", part.Node)
			id := pr.Identity
			id.Images = nil
			assert.Equal(t, evidence.Identity{Workload: workerIdentity(&w), Node: part.Node, NodeUID: part.UID}, id, "coverage from the worker that ran there")
		}
		cleanup(t, c)
	})

	t.Run("still suspended at the deadline: Error, waiting for capacity", func(t *testing.T) {
		reserve(t, "starved")
		block(t, "hog2", "", true)
		c := check("starved", mpiPassScript("Pass", 0), 10*time.Second)
		rep, err := b.Run(ctx, c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", pr.Node, out.Reason)
			t.Logf("%s: %s", pr.Node, pr.Termination.Reason)
			assert.True(t, strings.HasPrefix(pr.Termination.Reason, "waiting for capacity: "), "waiting for capacity first, not: %s", pr.Termination.Reason)
			assert.True(t, pr.Termination.DeadlineExceeded)
			assert.Nil(t, pr.Result)
		}
		assert.True(t, suspended(t, c))
		cleanup(t, c)
		deleteJob(env, "hog2")
	})

	// Kueue v0.17.0's topology-aware scheduling leaves cordoned nodes out
	// of every topology domain (its TAS node cache keeps only schedulable,
	// Ready nodes), and signet's reservation cordons the participants: a
	// check asking for a topology level is never admitted on its reserved
	// nodes (Kueue's condition then reads "failed to assign flavors to pod
	// set launcher: no TAS flavor assigned"; the same check on the same
	// nodes uncordoned is admitted). It waits for capacity and is an Error
	// at its deadline, never a Pass (decisions.md, issue 18).
	t.Run("topology-aware queue on cordoned participants: never admitted, Error waiting for capacity", func(t *testing.T) {
		reserve(t, "tas")
		c := check("tas", mpiPassScript("Pass", 0), 15*time.Second)
		c.Check.Workload.Queue, c.Check.Workload.RequiredTopologyLevel = "tas-queue", blockLabel
		rep, err := b.Run(ctx, c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", pr.Node, out.Reason)
			assert.True(t, strings.HasPrefix(pr.Termination.Reason, "waiting for capacity: "), "waiting for capacity first, not: %s", pr.Termination.Reason)
			assert.Nil(t, pr.Result)
		}
		for _, w := range k.Workloads(ctx, "signet") {
			if strings.Contains(w.GetName(), "signet-tas-") {
				st, _ := json.Marshal(conditionsOf(&w))
				t.Logf("workload %s: %s", w.GetName(), st)
				assert.NotEqual(t, "True", kubetest.Condition(&w, "Admitted"), "Kueue admitted %s", w.GetName())
			}
		}
		cleanup(t, c)
	})

	t.Run("suspended again by Kueue's preemption once running: Error, never rerun", func(t *testing.T) {
		reserve(t, "victim")
		c := check("victim", "#!/bin/sh\nsleep 120\n", time.Minute)
		done := runAsync(c)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var running int
			for _, p := range podsOf(t, c) {
				if p.Labels[MPIJobRoleLabel] == MPIRoleLauncher && p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			assert.Equal(ct, 1, running)
		}, 2*time.Minute, 200*time.Millisecond, "the launcher runs")
		job, err := jobs.Get(ctx, MPIJobName(c.Run, c.Index), metav1.GetOptions{})
		require.NoError(t, err)
		uid := job.GetUID()
		block(t, "preemptor", "high", false)
		var r runResult
		select {
		case r = <-done:
		case <-time.After(90 * time.Second):
			t.Fatalf("the preempted check still observed after 90s; kueue log:\n%s", k.LogTail(4000))
		}
		require.NoError(t, r.err)
		require.Len(t, r.rep.Participants, 2)
		for _, pr := range r.rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", pr.Node, out.Reason)
			t.Logf("%s: %s", pr.Node, pr.Termination.Reason)
			assert.True(t, strings.HasPrefix(pr.Termination.Reason, "stopped by Kueue: "), "stopped by Kueue first, not: %s", pr.Termination.Reason)
			assert.Contains(t, pr.Termination.Reason, "Preempted")
			assert.Nil(t, pr.Result)
		}
		assert.True(t, suspended(t, c), "Kueue suspended the MPIJob")
		// signet never creates the MPIJob again: the one left is the one
		// it created, for Cleanup.
		job, err = jobs.Get(ctx, MPIJobName(c.Run, c.Index), metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, uid, job.GetUID(), "MPIJob not recreated")
		cleanup(t, c)
	})
}

// quotaJob is a batch Job of gpu-queue in signet taking the queue's 16
// GPUs (2 pods of 8) at WorkloadPriorityClass priority ("" for none). No
// node it could bind to is free of the participants' reservation: once
// admitted, its pods stay Pending, holding the quota.
func quotaJob(name, priority string) *batchv1.Job {
	n := int32(2)
	q := *resource.NewQuantity(8, resource.DecimalSI)
	l := map[string]string{KueueQueueLabel: gpuQueue}
	if priority != "" {
		l["kueue.x-k8s.io/priority-class"] = priority
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "signet", Labels: l},
		Spec: batchv1.JobSpec{
			Parallelism: &n, Completions: &n, Suspend: ptr(true),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "c", Image: "registry.example/quota:1",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{kubetest.GPUResource: q},
						Limits:   corev1.ResourceList{kubetest.GPUResource: q},
					},
				}},
			}},
		},
	}
}

func deleteJob(env *kubetest.Env, name string) {
	bg := metav1.DeletePropagationBackground
	_ = env.Client.BatchV1().Jobs("signet").Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg})
}
