package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

const (
	mpiTestSignetImage   = "registry.invalid/signet@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	mpiTestWorkloadImage = "registry.invalid/nccl-tests@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// mpiCheckRun is an mpijob check of run on the participant nodes, each with
// the given UID, running script.
func mpiCheckRun(run, script string, deadline time.Duration, nodes ...evidence.Participant) *backend.CheckRun {
	for i := range nodes {
		nodes[i].Index = i
	}
	return &backend.CheckRun{
		Cluster: "test", Run: run, Index: 1,
		Check: specs.Check{
			Name: "allreduce", Script: "scripts/allreduce.sh", Backend: specs.BackendMPIJob, GPUCount: 8,
			Deadline: specs.Seconds(deadline / time.Second), Stage: "burn-in",
			Workload: &specs.Workload{Image: mpiTestWorkloadImage},
		},
		Script: []byte(script), ScriptDigest: specs.DigestOf([]byte(script)),
		Nonce: "nonce-" + run, Deadline: time.Now().Add(deadline), Participants: nodes,
	}
}

// mpiTemplate decodes one replica's pod template of a rendered MPIJob.
func mpiTemplate(t *testing.T, job *unstructured.Unstructured, replica string) corev1.PodTemplateSpec {
	t.Helper()
	m, found, err := unstructured.NestedMap(job.Object, "spec", "mpiReplicaSpecs", replica, "template")
	require.NoError(t, err)
	require.True(t, found, "no %s template", replica)
	var tpl corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &tpl))
	return tpl
}

func TestMPIJobRender(t *testing.T) {
	b := NewMPIJobBackend(nil, nil, MPIJobOptions{Namespace: "signet", SignetImage: mpiTestSignetImage})
	c := mpiCheckRun("r1", "#!/bin/sh\nexit 0\n", time.Minute,
		evidence.Participant{Node: "gpu-a", UID: "uid-a"}, evidence.Participant{Node: "gpu-b", UID: "uid-b"})
	c.Check.Workload.Queue, c.Check.Workload.RequiredTopologyLevel = "gpu-queue", "rack"
	c.Check.Workload.HostPaths = []specs.HostPathMount{{Path: "/dev/infiniband", MountPath: "/dev/infiniband"}}
	c.Check.Workload.HostNetwork = true
	c.Check.Workload.SecurityContext = &specs.WorkloadSecurity{Capabilities: []string{"IPC_LOCK"}}

	cm, job, err := b.render(c)
	require.NoError(t, err)
	assert.Equal(t, "signet-r1-01", job.GetName())
	assert.Equal(t, "signet-r1-01", cm.Name)
	assert.Equal(t, "gpu-queue", job.GetLabels()[KueueQueueLabel])
	assert.Equal(t, "r1", job.GetLabels()[RunLabel])
	slots, _, _ := unstructured.NestedInt64(job.Object, "spec", "slotsPerWorker")
	assert.EqualValues(t, 8, slots)
	for _, replica := range []string{"Launcher", "Worker"} {
		p, _, _ := unstructured.NestedString(job.Object, "spec", "mpiReplicaSpecs", replica, "restartPolicy")
		assert.Equal(t, "Never", p, replica)
		// The operator overwrites a template's restart policy with the
		// replica's and warns (an Event) for every launcher template
		// that sets one.
		assert.Empty(t, mpiTemplate(t, job, replica).Spec.RestartPolicy, replica)
	}
	policy, _, _ := unstructured.NestedMap(job.Object, "spec", "runPolicy")
	assert.Equal(t, map[string]any{"cleanPodPolicy": "None", "activeDeadlineSeconds": int64(60), "backoffLimit": int64(0)}, policy)

	t.Run("launcher", func(t *testing.T) {
		l := mpiTemplate(t, job, "Launcher")
		replicas, _, _ := unstructured.NestedInt64(job.Object, "spec", "mpiReplicaSpecs", "Launcher", "replicas")
		assert.EqualValues(t, 1, replicas)
		assert.Nil(t, l.Spec.Affinity, "the launcher is unpinned")
		assert.Empty(t, l.Spec.NodeSelector)
		assert.Empty(t, l.Spec.Tolerations)
		assert.NotContains(t, l.Annotations, KueueRequiredTopology)
		assert.False(t, l.Spec.HostNetwork)
		require.NotNil(t, l.Spec.AutomountServiceAccountToken)
		assert.False(t, *l.Spec.AutomountServiceAccountToken)
		require.Len(t, l.Spec.InitContainers, 1)
		assert.Equal(t, mpiTestSignetImage, l.Spec.InitContainers[0].Image)
		require.Len(t, l.Spec.Containers, 1)
		ctr := l.Spec.Containers[0]
		assert.Equal(t, execArgs("allreduce.sh", c.ScriptDigest), ctr.Command)
		for _, rl := range []corev1.ResourceList{ctr.Resources.Requests, ctr.Resources.Limits} {
			assert.NotContains(t, rl, corev1.ResourceName(GPUResource))
		}
		env := map[string]string{}
		for _, e := range ctr.Env {
			env[e.Name] = e.Value
		}
		assert.Equal(t, c.LauncherEnv(), env)
		assert.NotContains(t, env, specs.EnvStageName)
		for _, m := range ctr.VolumeMounts {
			assert.NotEqual(t, "/dev/infiniband", m.MountPath, "no host path in the launcher")
		}
		require.NotNil(t, ctr.SecurityContext)
		assert.Empty(t, ctr.SecurityContext.Capabilities.Add, "the launcher gets no capability")
	})

	t.Run("workers", func(t *testing.T) {
		w := mpiTemplate(t, job, "Worker")
		replicas, _, _ := unstructured.NestedInt64(job.Object, "spec", "mpiReplicaSpecs", "Worker", "replicas")
		assert.EqualValues(t, 2, replicas)
		assert.Equal(t, "rack", w.Annotations[KueueRequiredTopology])
		require.NotNil(t, w.Spec.Affinity)
		terms := w.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		assert.Equal(t, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-a", "gpu-b"},
		}}}}, terms)
		anti := w.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		require.Len(t, anti, 1)
		assert.Equal(t, "kubernetes.io/hostname", anti[0].TopologyKey)
		assert.Equal(t, map[string]string{MPIJobNameLabel: "signet-r1-01", MPIJobRoleLabel: MPIRoleWorker}, anti[0].LabelSelector.MatchLabels)
		sel, err := metav1.LabelSelectorAsSelector(anti[0].LabelSelector)
		require.NoError(t, err)
		assert.True(t, sel.Matches(labels.Set(w.Labels)), "the anti-affinity selects the workers themselves")
		assert.ElementsMatch(t, []corev1.Toleration{
			{Key: ReservationTaintKey, Operator: corev1.TolerationOpEqual, Value: "r1", Effect: corev1.TaintEffectNoSchedule},
			{Key: UnschedulableTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		}, w.Spec.Tolerations)
		assert.True(t, w.Spec.HostNetwork)
		require.NotNil(t, w.Spec.AutomountServiceAccountToken)
		assert.False(t, *w.Spec.AutomountServiceAccountToken)
		require.Len(t, w.Spec.Containers, 1)
		ctr := w.Spec.Containers[0]
		assert.Equal(t, mpiTestWorkloadImage, ctr.Image)
		assert.Equal(t, []string{"/usr/sbin/sshd", "-De"}, ctr.Command, "the command the MPI Operator would give it, rendered")
		assert.Empty(t, ctr.Args)
		assert.Equal(t, "8", ctr.Resources.Requests.Name(GPUResource, "").String())
		assert.Equal(t, "8", ctr.Resources.Limits.Name(GPUResource, "").String())
		assert.Equal(t, []corev1.Capability{"IPC_LOCK"}, ctr.SecurityContext.Capabilities.Add)
		require.Len(t, ctr.VolumeMounts, 1)
		assert.Equal(t, "/dev/infiniband", ctr.VolumeMounts[0].MountPath)
		assert.True(t, ctr.VolumeMounts[0].ReadOnly)
	})

	t.Run("no queue, no topology", func(t *testing.T) {
		c2 := *c
		w := *c.Check.Workload
		w.Queue, w.RequiredTopologyLevel = "", ""
		c2.Check.Workload = &w
		_, job, err := b.render(&c2)
		require.NoError(t, err)
		assert.NotContains(t, job.GetLabels(), KueueQueueLabel)
		assert.NotContains(t, mpiTemplate(t, job, "Worker").Annotations, KueueRequiredTopology)
	})

	t.Run("describe", func(t *testing.T) {
		names, d1, err := b.Describe(c)
		require.NoError(t, err)
		assert.Equal(t, []string{"configmap/signet-r1-01", "mpijob/signet-r1-01"}, names)
		_, again, err := b.Describe(c)
		require.NoError(t, err)
		assert.Equal(t, d1, again, "Describe is deterministic")
		c2 := *c
		c2.Script = []byte("#!/bin/sh\nexit 1\n")
		c2.ScriptDigest = specs.DigestOf(c2.Script)
		_, d2, err := b.Describe(&c2)
		require.NoError(t, err)
		assert.NotEqual(t, d1, d2, "the digest covers the script")
	})

	t.Run("long run names", func(t *testing.T) {
		run := strings.Repeat("a", 63)
		n := MPIJobName(run, 3)
		assert.LessOrEqual(t, len(n+"-worker-63"), 63)
		assert.True(t, strings.HasPrefix(n, "signet-aaa") && strings.HasSuffix(n, "-03"), n)
		assert.NotEqual(t, n, MPIJobName(strings.Repeat("a", 62)+"b", 3))
	})

	t.Run("refused", func(t *testing.T) {
		c2 := *c
		c2.Check.GPUCount = 0
		_, _, err := b.Describe(&c2)
		assert.ErrorContains(t, err, "gpuCount 0")
	})
}

func mpiPassScript(verdict string, code int) string {
	return fmt.Sprintf(`#!/bin/sh
echo "launcher on $(hostname) for $SIGNET_PARTICIPANTS participants, stage=${SIGNET_STAGE_NAME:-none}"
printf '{"run":"%%s","check":"%%s","nonce":"%%s","verdict":"%s","summary":"allreduce ok"}' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" > "$SIGNET_RESULT_FILE"
exit %d
`, verdict, code)
}

func TestMPIJobOnAPIServer(t *testing.T) {
	ctx := t.Context()
	imgDir := signetImageDir(t)
	env := kubetest.Start(t)
	env.InstallMPIJobCRD(ctx)
	op := env.StartMPIOperator(t)
	top := t
	workload := t.TempDir()
	kubetest.AddSSHD(t, workload) // the workers' command, MPIWorkerCommand
	env.StartAgent(t, kubetest.AgentOptions{Images: map[string]string{
		mpiTestSignetImage:   imgDir,
		mpiTestWorkloadImage: workload,
	}})
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "signet"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// gpu-1 and gpu-2 are the participants, reserved as a Fleet reserves
	// them (taint and cordon); gpu-3 has GPUs but takes no part; cpu-1 has
	// none and is where the unpinned launcher can go.
	nodes := map[string]*corev1.Node{}
	for _, n := range []struct {
		name string
		gpus int64
	}{{"gpu-1", 8}, {"gpu-2", 8}, {"gpu-3", 8}, {"cpu-1", 0}} {
		nodes[n.name] = env.CreateNode(ctx, kubetest.NodeOptions{Name: n.name, GPUs: n.gpus})
	}
	// A reservation for the run r: the workers tolerate exactly it.
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
	participants := func() []evidence.Participant {
		return []evidence.Participant{
			{Node: "gpu-1", UID: string(nodes["gpu-1"].UID)},
			{Node: "gpu-2", UID: string(nodes["gpu-2"].UID)},
		}
	}
	b := NewMPIJobBackend(env.Dynamic(), env.Client, MPIJobOptions{
		Namespace: "signet", SignetImage: mpiTestSignetImage, PollInterval: 100 * time.Millisecond,
	})
	pods := env.Client.CoreV1().Pods("signet")
	jobs := env.Dynamic().Resource(MPIJobGVR).Namespace("signet")
	workersOf := func(t *testing.T, name string) []corev1.Pod {
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name + "," + MPIJobRoleLabel + "=" + MPIRoleWorker})
		require.NoError(t, err)
		return pl.Items
	}
	assertCleanedUp := func(t *testing.T, c *backend.CheckRun) {
		t.Helper()
		begin := time.Now()
		require.NoError(t, b.Cleanup(ctx, c))
		t.Logf("cleanup took %v", time.Since(begin).Round(time.Millisecond))
		name := MPIJobName(c.Run, c.Index)
		_, err := jobs.Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "MPIJob left: %v", err)
		_, err = env.Client.CoreV1().ConfigMaps("signet").Get(ctx, checkBaseName(c.Run, c.Index), metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "ConfigMap left: %v", err)
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name})
		require.NoError(t, err)
		assert.Empty(t, pl.Items)
	}

	t.Run("pass", func(t *testing.T) {
		reserve(t, "pass")
		c := mpiCheckRun("pass", mpiPassScript("Pass", 0), 90*time.Second, participants()...)
		begin := time.Now()
		rep, err := b.Run(ctx, c)
		require.NoError(t, err)
		t.Logf("run took %v", time.Since(begin).Round(time.Millisecond))
		require.Len(t, rep.Participants, 2)
		workers := map[string]corev1.Pod{}
		for _, w := range workersOf(t, MPIJobName("pass", 1)) {
			workers[w.Spec.NodeName] = w
		}
		for i, pr := range rep.Participants {
			part := c.Participants[i]
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s", part.Node, out.Reason)
			w, ok := workers[part.Node]
			require.True(t, ok, "no worker on %s", part.Node)
			id := pr.Identity
			id.Images = nil
			assert.Equal(t, evidence.Identity{Workload: workerIdentity(&w), Node: part.Node, NodeUID: part.UID}, id)
			assert.Contains(t, pr.Identity.Workload, string(w.UID))
			// Its worker's container, then the launcher's install and check
			// containers (issue 21, finding 5).
			require.Len(t, pr.Identity.Images, 3)
			assert.Equal(t, w.Name, pr.Identity.Images[0].Pod)
			assert.Equal(t, []string{mpiWorkerContainer, installContainerName, checkContainerName},
				[]string{pr.Identity.Images[0].Container, pr.Identity.Images[1].Container, pr.Identity.Images[2].Container})
		}
		// The launcher's log, read through pods/log from its node's kubelet
		// API, is the first participant's stdout.
		assert.Contains(t, string(rep.Participants[0].Stdout), "launcher on ")
		assert.Contains(t, string(rep.Participants[0].Stdout), " for 2 participants, stage=none")
		// The launcher ran unpinned, with no stage, off the reserved nodes.
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + MPIJobName("pass", 1) + "," + MPIJobRoleLabel + "=" + MPIRoleLauncher})
		require.NoError(t, err)
		require.Len(t, pl.Items, 1)
		assert.NotContains(t, []string{"gpu-1", "gpu-2"}, pl.Items[0].Spec.NodeName)

		// The operator warned about nothing in signet's MPIJob (it records
		// a Warning Event for a launcher template with a restart policy,
		// and for a job it finds invalid).
		evs, err := env.Client.CoreV1().Events("signet").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=MPIJob,involvedObject.name=" + MPIJobName("pass", 1),
		})
		require.NoError(t, err)
		require.NotEmpty(t, evs.Items, "the operator records Events on the MPIJob")
		for _, ev := range evs.Items {
			assert.NotEqual(t, corev1.EventTypeWarning, ev.Type, "%s: %s", ev.Reason, ev.Message)
		}

		// A restarted reconciler adopts the finished job and sees the same.
		again, found, err := b.Adopt(ctx, c)
		require.NoError(t, err)
		require.True(t, found)
		for i, pr := range again.Participants {
			assert.Equal(t, rep.Participants[i].Identity, pr.Identity)
			assert.Equal(t, rep.Participants[i].Result, pr.Result)
		}
		assertCleanedUp(t, c)
	})

	// The backend watches the MPIJob and its pods (issue 19): with a
	// PollInterval of an hour it still notices the launcher's end at once.
	// Each case counts the API requests of its Run (not of Cleanup) and
	// how long after the launcher's end (seen by a watch of the test's
	// own) Run returned.
	for _, tc := range []struct {
		name  string
		poll  time.Duration
		sleep int // seconds the launcher runs
		bound time.Duration
	}{
		{name: "event-driven", poll: time.Hour, sleep: 20, bound: 20 * time.Second},
		{name: "default poll interval"},
		{name: "default poll interval 20s launcher", sleep: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := strings.ReplaceAll(strings.ReplaceAll(tc.name, "default poll interval", "dpi"), " ", "-")
			reserve(t, run)
			cs, dyn, reqs := countedClients(t, env)
			wb := NewMPIJobBackend(dyn, cs, MPIJobOptions{Namespace: "signet", SignetImage: mpiTestSignetImage, PollInterval: tc.poll})
			script := mpiPassScript("Pass", 0)
			if tc.sleep > 0 {
				script = fmt.Sprintf("#!/bin/sh\nsleep %d\n", tc.sleep) + strings.TrimPrefix(script, "#!/bin/sh\n")
			}
			c := mpiCheckRun(run, script, 60*time.Second, participants()...)
			ended := launcherEnd(ctx, t, env, MPIJobName(c.Run, c.Index))
			begin := time.Now()
			rep, err := wb.Run(ctx, c)
			returned := time.Now()
			require.NoError(t, err)
			byKind, total := reqs.snapshot()
			end := ended()
			for _, pr := range rep.Participants {
				out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
				assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s", pr.Node, out.Reason)
			}
			require.False(t, end.IsZero(), "the test's watch never saw the launcher end")
			latency := returned.Sub(end)
			t.Logf("run took %v; Run returned %v after the launcher's end; %d API requests: %s",
				returned.Sub(begin).Round(time.Millisecond), latency.Round(time.Millisecond), total, byKind)
			if tc.bound > 0 {
				assert.Less(t, latency, tc.bound, "the launcher's end was noticed only %v after it, with a PollInterval of %v", latency, tc.poll)
			}
			assertCleanedUp(t, c)
		})
	}

	// The pod watch's cache shows the launcher exited 0 with a Pass result
	// while it still runs (sleep 60): an observation that ended on the
	// cache's word would record a Pass the launcher never reported. The
	// backend confirms every ending on the API server, which shows the
	// launcher running, and the canceled check is no Pass.
	t.Run("stale cache", func(t *testing.T) {
		reserve(t, "stale")
		c := mpiCheckRun("stale", "#!/bin/sh\nsleep 60\n", 90*time.Second, participants()...)
		stale := &staleLauncherCache{result: fmt.Sprintf(`{"run":%q,"check":%q,"nonce":%q,"verdict":"Pass","summary":"only in the cache"}`, c.Run, c.Check.Name, c.Nonce)}
		sb := NewMPIJobBackend(env.Dynamic(), env.Client, MPIJobOptions{Namespace: "signet", SignetImage: mpiTestSignetImage, PollInterval: 100 * time.Millisecond})
		sb.watchStarted = func(w *mpiWatch) {
			stale.Store = w.pods.store
			w.pods.store = stale
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			// Cancel 3 s after the cache first showed the launcher ended.
			for rctx.Err() == nil && !stale.served.Load() {
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(3 * time.Second)
			cancel()
		}()
		rep, err := sb.Run(rctx, c)
		require.NoError(t, err)
		require.True(t, stale.served.Load(), "the cache never showed the launcher ended: this case proves nothing")
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			t.Logf("%s: %s: %s", pr.Node, out.Verdict, out.Reason)
			assert.NotEqual(t, specs.VerdictPass, out.Verdict, "a stale cache passed: %s: %s", pr.Node, out.Reason)
		}
		assertCleanedUp(t, c)
	})

	// The launcher's Job stops being the MPIJob's (its controller
	// reference dropped, by anyone who may update Jobs) after the backend
	// has checked the chain on the cache's first look at the launcher: the
	// live look that ends the observation reads the Job again, and the
	// launcher's Pass is refused.
	t.Run("launcher Job re-parented", func(t *testing.T) {
		reserve(t, "reparent")
		c := mpiCheckRun("reparent", "#!/bin/sh\nsleep 10\n"+strings.TrimPrefix(mpiPassScript("Pass", 0), "#!/bin/sh\n"), 90*time.Second, participants()...)
		name := MPIJobName(c.Run, c.Index)
		done := make(chan struct{})
		var rep *backend.CheckReport
		var runErr error
		go func() {
			defer close(done)
			rep, runErr = b.Run(ctx, c)
		}()
		var launcher corev1.Pod
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name + "," + MPIJobRoleLabel + "=" + MPIRoleLauncher})
			require.NoError(ct, err)
			require.Len(ct, pl.Items, 1)
			require.Equal(ct, corev1.PodRunning, pl.Items[0].Status.Phase)
			launcher = pl.Items[0]
		}, 60*time.Second, 100*time.Millisecond)
		ref := metav1.GetControllerOf(&launcher)
		require.NotNil(t, ref)
		lj, err := env.Client.BatchV1().Jobs("signet").Get(ctx, ref.Name, metav1.GetOptions{})
		require.NoError(t, err)
		for i := range lj.OwnerReferences {
			lj.OwnerReferences[i].Controller = nil
		}
		_, err = env.Client.BatchV1().Jobs("signet").Update(ctx, lj, metav1.UpdateOptions{})
		require.NoError(t, err)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("Run did not return after the launcher ended")
		}
		require.NoError(t, runErr)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			t.Logf("%s: %s: %s", pr.Node, out.Verdict, out.Reason)
			assert.NotEqual(t, specs.VerdictPass, out.Verdict, "a launcher whose Job left the MPIJob passed: %s: %s", pr.Node, out.Reason)
		}
		assertCleanedUp(t, c)
	})

	// Worker 0 is bound to gpu-3, which takes no part, when it is created:
	// a mutating webhook sets its spec.nodeName past the scheduler (and so
	// past the workers' affinity, the reservation taint and the cordon), as
	// a faulty operator or a hostile admission plugin could. The launcher
	// still runs and reports Pass; the check must not.
	t.Run("worker on a non-participant node", func(t *testing.T) {
		reserve(t, "wrong")
		env.PatchPodsAtAdmission(t, "wrong-node", "signet",
			map[string]string{MPIJobNameLabel: MPIJobName("wrong", 1), kubetest.MPIReplicaIndexLabel: "0"},
			"/spec/nodeName", "gpu-3", func(p *corev1.Pod) bool { return p.Spec.NodeName == "gpu-3" })
		c := mpiCheckRun("wrong", mpiPassScript("Pass", 0), 90*time.Second, participants()...)
		rep, err := b.Run(ctx, c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			t.Logf("%s: %s: %s", pr.Node, out.Verdict, out.Reason)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", pr.Node, out.Reason)
			assert.Contains(t, out.Reason, "gpu-3", pr.Node)
			assert.Nil(t, pr.Result)
		}
		// The participant left without a worker is identified by the
		// worker that went astray, so the evidence says where it ran.
		var astray int
		for _, pr := range rep.Participants {
			if pr.Identity.Node == "gpu-3" {
				astray++
				assert.Equal(t, string(nodes["gpu-3"].UID), pr.Identity.NodeUID)
			}
		}
		assert.Equal(t, 1, astray)
		assertCleanedUp(t, c)
	})

	// A launcher still running at the deadline is Error; one whose
	// observation is canceled is Canceled. Both leave the job for Cleanup.
	for _, tc := range []struct {
		run      string
		deadline time.Duration
		cancel   bool
		want     specs.Verdict
		reason   string
	}{
		{run: "late", deadline: 6 * time.Second, want: specs.VerdictError, reason: "deadline exceeded"},
		{run: "stop", deadline: 90 * time.Second, cancel: true, want: specs.VerdictCanceled, reason: "canceled"},
	} {
		t.Run(tc.run, func(t *testing.T) {
			reserve(t, tc.run)
			c := mpiCheckRun(tc.run, "#!/bin/sh\nsleep 60\n", tc.deadline, participants()...)
			name := MPIJobName(c.Run, c.Index)
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if tc.cancel {
				go func() {
					// Cancel once the launcher runs.
					for rctx.Err() == nil {
						pl, err := pods.List(rctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name + "," + MPIJobRoleLabel + "=" + MPIRoleLauncher})
						if err == nil && len(pl.Items) == 1 && pl.Items[0].Status.Phase == corev1.PodRunning {
							cancel()
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
			rep, err := b.Run(rctx, c)
			require.NoError(t, err)
			for _, pr := range rep.Participants {
				out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
				assert.Equal(t, tc.want, out.Verdict, "%s: %s", pr.Node, out.Reason)
				assert.Contains(t, out.Reason, tc.reason)
				assert.NotEmpty(t, pr.Identity.Workload, "the workers are identified")
			}
			_, err = jobs.Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err, "the MPIJob is left for Cleanup")
			assertCleanedUp(t, c)
		})
	}

	t.Run("fail", func(t *testing.T) {
		reserve(t, "fail")
		c := mpiCheckRun("fail", mpiPassScript("Fail", 1), 90*time.Second, participants()...)
		rep, err := b.Run(ctx, c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictFail, out.Verdict, "%s: %s", pr.Node, out.Reason)
			assert.NotEmpty(t, pr.Identity.Workload, "the workers are identified")
		}
		assertCleanedUp(t, c)
	})

	// The operator is down for the whole check: nothing is made for the
	// MPIJob, and the check ends Error at its deadline, never Pass. A new
	// operator then serves the cases after this one.
	t.Run("operator down", func(t *testing.T) {
		reserve(t, "down")
		op.Stop()
		defer func() { op = env.StartMPIOperator(top) }()
		c := mpiCheckRun("down", mpiPassScript("Pass", 0), 5*time.Second, participants()...)
		rep, err := b.Run(ctx, c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictError, out.Verdict, "%s: %s", pr.Node, out.Reason)
			assert.True(t, pr.Termination.DeadlineExceeded, pr.Node)
			assert.Nil(t, pr.Result)
		}
		assertCleanedUp(t, c)
	})

	t.Run("deleted behind signet's back", func(t *testing.T) {
		reserve(t, "gone")
		c := mpiCheckRun("gone", "#!/bin/sh\nsleep 60\n", 90*time.Second, participants()...)
		name := MPIJobName(c.Run, c.Index)
		done := make(chan struct{})
		var rep *backend.CheckReport
		var runErr error
		go func() {
			defer close(done)
			rep, runErr = b.Run(ctx, c)
		}()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name + "," + MPIJobRoleLabel + "=" + MPIRoleLauncher})
			require.NoError(ct, err)
			require.Len(ct, pl.Items, 1)
			assert.Equal(ct, corev1.PodRunning, pl.Items[0].Status.Phase)
		}, 60*time.Second, 100*time.Millisecond)
		require.NoError(t, jobs.Delete(ctx, name, metav1.DeleteOptions{}))
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after the MPIJob was deleted")
		}
		require.NoError(t, runErr)
		for _, pr := range rep.Participants {
			out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
			assert.Equal(t, specs.VerdictError, out.Verdict)
			assert.Contains(t, out.Reason, "behind signet's back")
		}
		// Nothing is recreated: the job stays gone and so do its pods once
		// the garbage collector has removed them.
		time.Sleep(time.Second)
		_, err = jobs.Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "MPIJob recreated: %v", err)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name})
			require.NoError(ct, err)
			assert.Empty(ct, pl.Items)
		}, 60*time.Second, 200*time.Millisecond)
		_, found, err := b.Adopt(ctx, c)
		require.NoError(t, err)
		assert.False(t, found, "Adopt finds nothing to observe and creates nothing")
		_, err = jobs.Get(ctx, name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err))
		assertCleanedUp(t, c)
	})
}
