package kube

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Tests of issue 21 on the real control plane (kubetest: etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager and the MPI
// Operator's own controller; only the kubelet and its container runtime are
// simulated, by kubetest's Agent).
// Each performs an attack as someone who may create pods (and MPIJobs) in
// the checks namespace and asserts that no Pass is recorded.

// attackerImage stands for an image of the attacker's choosing; the Agent
// runs it from this machine's root filesystem (its /bin/sh).
const attackerImage = "registry.invalid/attacker@sha256:3333333333333333333333333333333333333333333333333333333333333333"

// forgedResult is a container that writes a Pass result of check c to its
// termination message and exits 0, without running the check's script.
func forgedResult(t *testing.T, c *backend.CheckRun) corev1.Container {
	t.Helper()
	res, err := json.Marshal(map[string]string{"run": c.Run, "check": c.Check.Name, "nonce": c.Nonce, "verdict": "Pass", "summary": "forged"})
	require.NoError(t, err)
	return corev1.Container{
		Name: checkContainerName, Image: attackerImage,
		// The Agent rewrites a whole-argument /dev/termination-log to the
		// container's termination message file.
		Command: []string{"/bin/sh", "-c", `printf '%s' "$FORGED" > "$1"`, "sh", "/dev/termination-log"},
		Env:     []corev1.EnvVar{{Name: "FORGED", Value: string(res)}, {Name: specs.EnvNonce, Value: c.Nonce}},
	}
}

// assertNoPass requires a report and asserts that no participant passes.
func assertNoPass(t *testing.T, c *backend.CheckRun, rep *backend.CheckReport) {
	t.Helper()
	require.NotNil(t, rep)
	require.Len(t, rep.Participants, len(c.Participants))
	for _, pr := range rep.Participants {
		out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
		t.Logf("%s: %s: %s", pr.Node, out.Verdict, out.Reason)
		assert.NotEqual(t, specs.VerdictPass, out.Verdict, "%s: a forged result was taken", pr.Node)
	}
}

// assertRefusedBy is assertNoPass, and every participant's reason names
// the rule under test (want): several rules refuse most forgeries, and one
// of them refusing must not hide that another is gone.
func assertRefusedBy(t *testing.T, c *backend.CheckRun, rep *backend.CheckReport, want string) {
	t.Helper()
	assertNoPass(t, c, rep)
	for _, pr := range rep.Participants {
		out := specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, pr.Termination, pr.Result)
		assert.Contains(t, out.Reason, want, "%s: not refused by the rule under test", pr.Node)
	}
}

// mpiFindingEnv is a control plane with the MPIJob CRD, the MPI Operator
// and an agent that runs the signet, workload (with its sshd) and attacker
// images; gpu-1 and gpu-2 are reserved for run.
func mpiFindingEnv(t *testing.T, run string, misbehave map[string]kubetest.Misbehaviour) (*kubetest.Env, *kubetest.MPIOperator, *MPIJobBackend, []evidence.Participant) {
	t.Helper()
	ctx := t.Context()
	imgDir := signetImageDir(t)
	env := kubetest.Start(t)
	env.InstallMPIJobCRD(ctx)
	op := env.StartMPIOperator(t)
	workload := t.TempDir()
	kubetest.AddSSHD(t, workload)
	env.StartAgent(t, kubetest.AgentOptions{Images: map[string]string{
		mpiTestSignetImage: imgDir, mpiTestWorkloadImage: workload, attackerImage: "/",
	}, Misbehave: kubetest.MisbehaveByName(misbehave)})
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "signet"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var parts []evidence.Participant
	for _, name := range []string{"gpu-1", "gpu-2", "cpu-1"} {
		gpus := int64(8)
		if name == "cpu-1" {
			gpus = 0
		}
		n := env.CreateNode(ctx, kubetest.NodeOptions{Name: name, GPUs: gpus})
		if gpus == 0 {
			continue
		}
		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ReservationTaintKey, Value: run, Effect: corev1.TaintEffectNoSchedule})
		n, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
		parts = append(parts, evidence.Participant{Node: name, UID: string(n.UID)})
	}
	b := NewMPIJobBackend(env.Dynamic(), env.Client, MPIJobOptions{
		Namespace: "signet", SignetImage: mpiTestSignetImage, PollInterval: 100 * time.Millisecond,
	})
	return env, op, b, parts
}

// TestFinding21_1MPIJobResultForgery: pods labelled as an MPIJob's launcher
// and workers, made by someone who may create pods (and Jobs) in the checks
// namespace, report Pass for a check whose script reports Fail. Before the
// fix the backend picked the launcher and counted workers by their labels
// alone: each attack below was recorded as Pass for both nodes.
func TestFinding21_1MPIJobResultForgery(t *testing.T) {
	ctx := t.Context()
	env, op, b, parts := mpiFindingEnv(t, "forged", nil)
	pods := env.Client.CoreV1().Pods("signet")
	worker := func(name string, i int, owner []metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:            fmt.Sprintf("%s-worker-%d", name, i),
				Labels:          map[string]string{MPIJobNameLabel: name, MPIJobRoleLabel: MPIRoleWorker},
				OwnerReferences: owner,
			},
			Spec: corev1.PodSpec{NodeName: parts[i].Node, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "worker", Image: attackerImage}}},
		}
	}
	launcher := func(c *backend.CheckRun, name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{MPIJobNameLabel: name, MPIJobRoleLabel: MPIRoleLauncher}},
			Spec: corev1.PodSpec{NodeName: "cpu-1", RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{forgedResult(t, c)}},
		}
	}
	// attack runs check run (its script fails) and calls during once its
	// MPIJob exists, with the job's owner reference.
	attack := func(t *testing.T, run, want string, before, during func(name string, owner []metav1.OwnerReference, c *backend.CheckRun)) {
		c := mpiCheckRun(run, mpiPassScript("Fail", 1), 30*time.Second, slices.Clone(parts)...)
		c.IntentAt = time.Now()
		name := MPIJobName(c.Run, c.Index)
		before(name, nil, c)
		done := make(chan *backend.CheckReport, 1)
		go func() {
			rep, err := b.Run(ctx, c)
			assert.NoError(t, err)
			done <- rep
		}()
		var job *unstructured.Unstructured
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var err error
			job, err = env.Dynamic().Resource(MPIJobGVR).Namespace("signet").Get(ctx, name, metav1.GetOptions{})
			assert.NoError(ct, err)
		}, 30*time.Second, 20*time.Millisecond)
		yes := true
		during(name, []metav1.OwnerReference{{APIVersion: MPIJobGVR.GroupVersion().String(), Kind: "MPIJob",
			Name: name, UID: job.GetUID(), Controller: &yes}}, c)
		select {
		case rep := <-done:
			assertRefusedBy(t, c, rep, want)
		case <-time.After(60 * time.Second):
			t.Fatal("Run did not return")
		}
	}
	nothing := func(string, []metav1.OwnerReference, *backend.CheckRun) {}

	t.Run("unowned workers and launcher", func(t *testing.T) {
		// The attack: workers made first (the operator then
		// refuses to build the job), a launcher once the job exists.
		attack(t, "forged", "role worker) has no controller", func(name string, _ []metav1.OwnerReference, c *backend.CheckRun) {
			for i := range parts {
				_, err := pods.Create(ctx, worker(name, i, nil), metav1.CreateOptions{})
				require.NoError(t, err)
			}
		}, func(name string, _ []metav1.OwnerReference, c *backend.CheckRun) {
			tpl := launcher(c, name)
			_, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-launcher-forged", Labels: tpl.Labels}, Spec: tpl.Spec}, metav1.CreateOptions{})
			require.NoError(t, err)
		})
	})

	t.Run("workers claiming the job, launcher without its Job", func(t *testing.T) {
		// The operator is down (stopped: it makes nothing for the job);
		// the workers are what it would make from the job's Worker
		// template and name the MPIJob as their controller (owner
		// references are the creator's to write); the launcher has no
		// controller. Only the launcher chain tells it apart.
		op.Stop()
		attack(t, "forged-b", "role launcher) has no controller", nothing, func(name string, owner []metav1.OwnerReference, c *backend.CheckRun) {
			job, err := env.Dynamic().Resource(MPIJobGVR).Namespace("signet").Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			wtpl := mpiTemplate(t, job, "Worker")
			for i := range parts {
				w := worker(name, i, owner)
				w.Spec = *wtpl.Spec.DeepCopy()
				w.Spec.NodeName = parts[i].Node
				_, err := pods.Create(ctx, w, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			tpl := launcher(c, name)
			_, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-launcher-forged", Labels: tpl.Labels}, Spec: tpl.Spec}, metav1.CreateOptions{})
			require.NoError(t, err)
		})
	})

	t.Run("launcher Job claiming the job, unowned workers", func(t *testing.T) {
		// The operator is down (stopped); a batch/v1 Job names the MPIJob
		// as its controller and the real Job controller makes the launcher
		// pod; the workers have no controller.
		op.Stop()
		attack(t, "forged-c", "role worker) has no controller", nothing, func(name string, owner []metav1.OwnerReference, c *backend.CheckRun) {
			for i := range parts {
				_, err := pods.Create(ctx, worker(name, i, nil), metav1.CreateOptions{})
				require.NoError(t, err)
			}
			zero := int32(0)
			_, err := env.Client.BatchV1().Jobs("signet").Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: name + "-launcher", OwnerReferences: owner},
				Spec:       batchv1.JobSpec{BackoffLimit: &zero, Template: launcher(c, name)},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		})
	})
}

// TestFinding21_4AdoptImposter: after a restart, Adopt meets objects that
// carry the check's names, labels and nonce (none of which is secret) but
// are not what signet created after the intent.
func TestFinding21_4AdoptImposter(t *testing.T) {
	t.Run("pod backend: pods running a forged result", func(t *testing.T) {
		e := startE2E(t, nil)
		c := e.checkRun("imposter", "#!/bin/sh\nexit 1\n", 2*time.Minute)
		c.IntentAt = time.Now()
		r, err := render(c, "default", testSignetImage)
		require.NoError(t, err)
		for _, p := range r.Pods {
			p = p.DeepCopy()
			forged := forgedResult(t, c)
			p.Spec.InitContainers = nil
			if tp := p.Spec.Containers[0].TerminationMessagePath; tp != "" {
				forged.Command[len(forged.Command)-1] = tp
			}
			p.Spec.Containers[0].Image, p.Spec.Containers[0].Command, p.Spec.Containers[0].Args = testWorkloadImage, forged.Command, nil
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, forged.Env[0])
			p.Spec.Containers[0].VolumeMounts = nil
			p.Spec.Volumes = nil
			_, err := e.env.Client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			l, err := e.env.Client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: checkSelector(c)})
			require.NoError(ct, err)
			require.Len(ct, l.Items, 2)
			for _, p := range l.Items {
				assert.Equal(ct, corev1.PodSucceeded, p.Status.Phase)
			}
		}, 60*time.Second, 100*time.Millisecond)
		rep, found, err := e.b.Adopt(t.Context(), c)
		require.NoError(t, err)
		require.True(t, found, "the check's pods exist")
		assertRefusedBy(t, c, rep, "is not the pod signet created: differs from the rendered pod")
	})

	t.Run("mpijob backend: a job made before the intent", func(t *testing.T) {
		ctx := t.Context()
		env, _, b, parts := mpiFindingEnv(t, "early", nil)
		c := mpiCheckRun("early", mpiPassScript("Fail", 1), 2*time.Minute, parts...)
		_, job, err := b.render(c)
		require.NoError(t, err)
		// The attacker's copy: signet's names and labels, a launcher that
		// writes Pass. The operator builds it as it builds any MPIJob.
		tpl := mpiTemplate(t, job, "Launcher")
		tpl.Spec.InitContainers, tpl.Spec.Volumes = nil, nil
		tpl.Spec.Containers = []corev1.Container{forgedResult(t, c)}
		m, err := runtimeToMap(&tpl)
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedMap(job.Object, m, "spec", "mpiReplicaSpecs", "Launcher", "template"))
		wtpl := mpiTemplate(t, job, "Worker")
		wtpl.Spec.Containers[0].Image, wtpl.Spec.Volumes, wtpl.Spec.Containers[0].VolumeMounts = attackerImage, nil, nil
		wtpl.Spec.Containers[0].Command = []string{"sleep", "3600"} // idle: the attacker's image has no sshd
		m, err = runtimeToMap(&wtpl)
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedMap(job.Object, m, "spec", "mpiReplicaSpecs", "Worker", "template"))
		_, err = env.Dynamic().Resource(MPIJobGVR).Namespace("signet").Create(ctx, job, metav1.CreateOptions{})
		require.NoError(t, err)
		name := MPIJobName(c.Run, c.Index)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			l, err := env.Client.CoreV1().Pods("signet").List(ctx, metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + name + "," + MPIJobRoleLabel + "=" + MPIRoleLauncher})
			require.NoError(ct, err)
			require.Len(ct, l.Items, 1)
			assert.Equal(ct, corev1.PodSucceeded, l.Items[0].Status.Phase)
		}, 90*time.Second, 100*time.Millisecond)
		// The reconciler writes its intent now, crashes before creating
		// anything, and adopts after its restart.
		time.Sleep(1100 * time.Millisecond)
		c.IntentAt = time.Now()
		rep, found, err := b.Adopt(ctx, c)
		require.NoError(t, err)
		if found {
			assertNoPass(t, c, rep)
		}
		assert.False(t, found, "a job made before the intent was adopted")
	})
}

func runtimeToMap(o any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(o)
}

// TestFinding21_8SignetPathsListed keeps specs.SignetMountPaths, which
// spec validation refuses as workload mount paths, in step with the paths
// the check container really has.
func TestFinding21_8SignetPathsListed(t *testing.T) {
	for _, p := range []string{binMountPath, scriptMountPath, workMountPath, corev1.TerminationMessagePathDefault} {
		assert.Contains(t, specs.SignetMountPaths, p)
	}
}

// injectInitContainer registers a mutating webhook (served on loopback,
// called by the real kube-apiserver) that appends an init container running
// /bin/true to every pod created with the labels sel, and returns once a
// dry-run create in namespace ns shows it in effect.
func injectInitContainer(t *testing.T, env *kubetest.Env, ns string, sel map[string]string) {
	t.Helper()
	injectPatch(t, env, ns, sel, "/spec/initContainers/-",
		map[string]any{"name": "injected", "image": testWorkloadImage, "command": []string{"/bin/true"}},
		func(p *corev1.Pod) bool { return len(p.Spec.InitContainers) == 2 })
}

// injectPatch is kubetest's PatchPodsAtAdmission under the name "inject":
// a mutating webhook (served on loopback, called by the real
// kube-apiserver) that adds value at path to every pod created with the
// labels sel, in effect once a dry-run create in ns shows it applied.
func injectPatch(t *testing.T, env *kubetest.Env, ns string, sel map[string]string, path string, value any, applied func(*corev1.Pod) bool) {
	t.Helper()
	env.PatchPodsAtAdmission(t, "inject", ns, sel, path, value, applied)
}

// TestFinding21_5MutatedAtAdmission: a mutating webhook (served here on
// loopback, called by the real kube-apiserver) appends an init container
// to every check pod, as one that overwrites /signet-bin/signet after the
// install step would (here it runs /bin/true: what it does cannot be known
// from the outside). Whatever the pod then reports is not the rendered
// pod's result: the participants must not pass, even with a script that
// passes. Before the fix the admitted pod was never compared with the
// rendered one and the result was taken.
func TestFinding21_5MutatedAtAdmission(t *testing.T) {
	e := startE2E(t, nil)
	ctx := t.Context()
	injectInitContainer(t, e.env, "default", map[string]string{"app.kubernetes.io/managed-by": "signet"})

	c := e.checkRun("mutated", resultScript, 2*time.Minute)
	rep, err := e.b.Run(ctx, c)
	require.NoError(t, err)
	assertNoPass(t, c, rep)
	for _, pr := range rep.Participants {
		assert.Contains(t, pr.Termination.Reason, "as admitted differs from the rendered pod", "not refused at admission")
	}
}
