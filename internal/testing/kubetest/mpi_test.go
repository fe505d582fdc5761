package kubetest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// mpiJobYAML is an OpenMPI MPIJob of two workers whose launcher prints
// its hostfile and environment. WORKERCMD is the worker's command: the
// operator turns a worker without command and args into /usr/sbin/sshd
// -De, which testImage does not have.
const mpiJobYAML = `
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: NAME
  namespace: default
spec:
  slotsPerWorker: 1
  runPolicy:
    cleanPodPolicy: None
    backoffLimit: 0
    activeDeadlineSeconds: DEADLINE
  mpiImplementation: OpenMPI
  launcherCreationPolicy: AtStartup
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: launcher
            image: IMAGE
            command: [sh, -c, 'cat "$1"; echo "role=$K_MPI_JOB_ROLE hostfile=$OMPI_MCA_orte_default_hostfile"; sleep SLEEP', sh, /etc/mpi/hostfile]
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: worker
            image: IMAGE
            WORKERCMD
            resources:
              limits:
                nvidia.com/gpu: 1
`

// createMPIJob creates mpiJobYAML named name; the launcher sleeps
// for sleep seconds after printing, under activeDeadlineSeconds deadline.
func createMPIJob(t *testing.T, env *Env, name string, workerCmd bool, sleep, deadline int) *unstructured.Unstructured {
	t.Helper()
	cmd := "command: [sleep, '3600']"
	if !workerCmd {
		cmd = ""
	}
	var obj map[string]any
	src := strings.NewReplacer("NAME", name, "IMAGE", testImage, "WORKERCMD", cmd,
		"SLEEP", strconv.Itoa(sleep), "DEADLINE", strconv.Itoa(deadline)).Replace(mpiJobYAML)
	require.NoError(t, yaml.Unmarshal([]byte(src), &obj))
	u, err := env.Dynamic().Resource(MPIJobGVR).Namespace("default").Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	require.NoError(t, err)
	return u
}

// mpiConditions returns the status of each condition of MPIJob name in
// default, by type.
func mpiConditions(c require.TestingT, env *Env, name string) map[string]any {
	u, err := env.Dynamic().Resource(MPIJobGVR).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(c, err)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	got := map[string]any{}
	for _, x := range conds {
		m := x.(map[string]any)
		got[m["type"].(string)] = m["status"]
	}
	return got
}

// TestMPIOperator runs MPIJobs through the MPI Operator's own controller
// (StartMPIOperator) and the agent playing the kubelet, with the faults the
// MPIJob tests inject: a worker bound at admission, the operator down.
func TestMPIOperator(t *testing.T) {
	env := Start(t)
	ctx := t.Context()
	env.InstallMPIJobCRD(ctx)
	for _, n := range []string{"gpu-1", "gpu-2"} {
		env.CreateNode(ctx, NodeOptions{Name: n, GPUs: 1})
	}
	// A node without GPUs that the scheduler never picks for a worker.
	env.CreateNode(ctx, NodeOptions{Name: "spare"})
	a := env.StartAgent(t, AgentOptions{Images: map[string]string{testImage: imageDir(t)}})
	op := env.StartMPIOperator(t)
	top := t

	job := createMPIJob(t, env, "pi", true, 0, 120)
	controlled := func(t *testing.T, refs []metav1.OwnerReference) {
		t.Helper()
		require.Len(t, refs, 1)
		assert.Equal(t, "MPIJob", refs[0].Kind)
		assert.Equal(t, job.GetUID(), refs[0].UID)
		assert.True(t, *refs[0].Controller)
	}

	t.Run("Service, hostfile, ssh Secret, workers and launcher Job; Succeeded", func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			u, err := env.Dynamic().Resource(MPIJobGVR).Namespace("default").Get(ctx, "pi", metav1.GetOptions{})
			require.NoError(c, err)
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			got := map[string]any{}
			for _, x := range conds {
				m := x.(map[string]any)
				got[m["type"].(string)] = m["status"]
			}
			assert.Equal(c, "True", got["Created"])
			assert.Equal(c, "True", got["Succeeded"], "conditions %v", conds)
		}, 90*time.Second, 200*time.Millisecond)

		svc, err := env.Client.CoreV1().Services("default").Get(ctx, "pi", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
		assert.Equal(t, map[string]string{MPIOperatorNameLabel: MPIOperatorName, MPIJobNameLabel: "pi"}, svc.Spec.Selector)
		controlled(t, svc.OwnerReferences)

		cm, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "pi-config", metav1.GetOptions{})
		require.NoError(t, err)
		hostfile := "pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n"
		assert.Equal(t, hostfile, cm.Data["hostfile"])
		assert.Contains(t, cm.Data, "discover_hosts.sh")
		controlled(t, cm.OwnerReferences)

		sec, err := env.Client.CoreV1().Secrets("default").Get(ctx, "pi-ssh", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, corev1.SecretTypeSSHAuth, sec.Type)
		controlled(t, sec.OwnerReferences)

		lj, err := env.Client.BatchV1().Jobs("default").Get(ctx, "pi-launcher", metav1.GetOptions{})
		require.NoError(t, err)
		controlled(t, lj.OwnerReferences)

		launcher, workers := mpiJobPods(t, env, "default", "pi")
		require.Len(t, launcher, 1)
		assert.True(t, strings.HasPrefix(launcher[0].Name, "pi-launcher-"), launcher[0].Name)
		assert.Equal(t, corev1.PodSucceeded, launcher[0].Status.Phase)
		// The agent maps /etc/mpi to the pod's volume directory, in the
		// environment too.
		out := a.Logs("default", launcher[0].Name, "launcher")
		assert.True(t, strings.HasPrefix(out, hostfile+"role=launcher hostfile=/"), out)
		assert.True(t, strings.HasSuffix(out, "/mpi-job-config/hostfile\n"), out)
		vars := map[string]string{}
		for _, e := range lj.Spec.Template.Spec.Containers[0].Env {
			vars[e.Name] = e.Value
		}
		assert.Equal(t, "/etc/mpi/hostfile", vars["OMPI_MCA_orte_default_hostfile"])
		assert.Equal(t, "launcher", vars["K_MPI_JOB_ROLE"])
		require.Len(t, workers, 2)
		nodes := map[string]bool{}
		for i, name := range []string{"pi-worker-0", "pi-worker-1"} {
			w, ok := workers[name]
			require.True(t, ok, name)
			assert.Equal(t, strconv.Itoa(i), w.Labels[MPIReplicaIndexLabel])
			controlled(t, w.OwnerReferences)
			assert.Equal(t, corev1.PodRunning, w.Status.Phase)
			assert.Equal(t, name, w.Spec.Hostname)
			assert.Equal(t, "pi", w.Spec.Subdomain)
			nodes[w.Spec.NodeName] = true
		}
		assert.Equal(t, map[string]bool{"gpu-1": true, "gpu-2": true}, nodes)

		// It records Events on the MPIJob, which the stand-in never did.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			evs, err := env.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=pi"})
			require.NoError(c, err)
			reasons := map[string]bool{}
			for _, ev := range evs.Items {
				reasons[ev.Reason] = true
			}
			assert.True(c, reasons["MPIJobCreated"] && reasons["MPIJobSucceeded"], "reasons %v", reasons)
		}, 10*time.Second, 200*time.Millisecond)
	})

	t.Run("a worker without command runs sshd -De", func(t *testing.T) {
		require.NoError(t, env.Dynamic().Resource(MPIJobGVR).Namespace("default").Delete(ctx, "pi", metav1.DeleteOptions{}))
		createMPIJob(t, env, "sshd", false, 0, 120)
		w := waitPod(t, env, "sshd-worker-0", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {})
		assert.Equal(t, []string{"/usr/sbin/sshd", "-De"}, w.Spec.Containers[0].Command)
		require.NoError(t, env.Dynamic().Resource(MPIJobGVR).Namespace("default").Delete(ctx, "sshd", metav1.DeleteOptions{}))
	})

	t.Run("a worker bound to a node at admission", func(t *testing.T) {
		// GPUs for this job's workers and the next ones' (deleted jobs'
		// workers free theirs only once the garbage collector has deleted
		// them).
		for _, n := range []string{"gpu-3", "gpu-4", "gpu-5", "gpu-6"} {
			env.CreateNode(ctx, NodeOptions{Name: n, GPUs: 1})
		}
		sel := map[string]string{MPIJobNameLabel: "stray", MPIReplicaIndexLabel: "0"}
		env.PatchPodsAtAdmission(t, "stray-node", "default", sel, "/spec/nodeName", "spare",
			func(p *corev1.Pod) bool { return p.Spec.NodeName == "spare" })
		createMPIJob(t, env, "stray", true, 0, 120)
		w := waitPod(t, env, "stray-worker-0", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			assert.Equal(c, corev1.PodRunning, p.Status.Phase)
		})
		assert.Equal(t, "spare", w.Spec.NodeName)
		other := waitPod(t, env, "stray-worker-1", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			assert.NotEmpty(c, p.Spec.NodeName)
		})
		assert.NotEqual(t, "spare", other.Spec.NodeName, "the scheduler never picks the GPU-less node")
		require.NoError(t, env.Dynamic().Resource(MPIJobGVR).Namespace("default").Delete(ctx, "stray", metav1.DeleteOptions{}))
	})

	t.Run("stopped, it acts on nothing; started again, it builds the job", func(t *testing.T) {
		op.Stop()
		op.Stop() // idempotent
		createMPIJob(t, env, "later", true, 0, 120)
		time.Sleep(2 * time.Second)
		assert.Empty(t, mpiConditions(t, env, "later"), "a stopped operator set a condition")
		launcher, workers := mpiJobPods(t, env, "default", "later")
		assert.Empty(t, launcher)
		assert.Empty(t, workers, "a stopped operator made workers")
		op = env.StartMPIOperator(top) // for the cases after this one too
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "True", mpiConditions(c, env, "later")["Succeeded"])
		}, 90*time.Second, 200*time.Millisecond)
	})

	// The launcher Job's activeDeadlineSeconds is runPolicy's: the Job
	// controller stops the launcher, the operator copies the Job's Failed
	// reason, and with cleanPodPolicy None it deletes no worker.
	t.Run("launcher past its deadline", func(t *testing.T) {
		createMPIJob(t, env, "late", true, 600, 3)
		var failed map[string]any
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			u, err := env.Dynamic().Resource(MPIJobGVR).Namespace("default").Get(ctx, "late", metav1.GetOptions{})
			require.NoError(c, err)
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			failed = nil
			for _, x := range conds {
				if m := x.(map[string]any); m["type"] == "Failed" && m["status"] == "True" {
					failed = m
				}
			}
			assert.NotNil(c, failed, "conditions %v", conds)
		}, 60*time.Second, 200*time.Millisecond)
		assert.Equal(t, "DeadlineExceeded", failed["reason"])
		for _, name := range []string{"late-worker-0", "late-worker-1"} {
			w, err := env.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Nil(t, w.DeletionTimestamp, name)
		}
	})
}
