package reconciler_test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/internal/testing/syncbuf"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/reconciler/kube"
	"signet.dev/signet/specs"
)

// Images of the Kubernetes end-to-end tests. No registry serves them: the
// test agent maps each to a local directory standing for its root
// filesystem (the signet image holds the signet binary under test).
const (
	testSignetImage = "images.invalid/signet@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testCUDAImage   = "images.invalid/cuda@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	checksNamespace = "signet-checks"
)

// kubeWorld is one real control plane (etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager) and the MPI Operator's own
// controller (kubetest.MPIOperatorVersion, in-process), shared by the
// Kubernetes end-to-end tests. Only what cannot run here is simulated (see
// internal/testing/kubetest): the kubelet and its container runtime,
// played by the test agent, which runs each pod's containers as local
// processes of this machine. Nodes are API
// objects with GPU capacity; the scheduler, the garbage collector and the
// API server's admission are real.
type kubeWorld struct {
	kube       *kubetest.Env
	kubeconfig string
	mu         sync.Mutex
	misbehave  map[string]kubetest.Misbehaviour // pod name → fault
}

func startKubeWorld(t testing.TB) *kubeWorld {
	t.Helper()
	k := kubetest.Start(t)
	w := &kubeWorld{kube: k, misbehave: map[string]kubetest.Misbehaviour{}}
	ctx := t.Context()
	k.InstallMPIJobCRD(ctx)
	_, err := k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: checksNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	img := t.TempDir()
	bin, err := os.ReadFile(testenv.Signet(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(img, "signet"), bin, 0o755))
	// The CUDA image has the sshd an MPI image ships: MPIJob workers run
	// /usr/sbin/sshd -De. Here it idles, as a worker's sshd does until the
	// launcher connects.
	cuda := t.TempDir()
	kubetest.AddSSHD(t, cuda)
	k.StartAgent(t, kubetest.AgentOptions{
		Images: map[string]string{testSignetImage: img, testCUDAImage: cuda},
		Misbehave: func(p *corev1.Pod) kubetest.Misbehaviour {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.misbehave[p.Name]
		},
	})
	k.StartMPIOperator(t)
	w.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(w.kubeconfig, k.Kubeconfig(kubetest.AdminUser), 0o600))
	return w
}

// nodes creates GPU nodes named prefix-0 … prefix-(n-1).
func (w *kubeWorld) nodes(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		w.kube.CreateNode(t.Context(), kubetest.NodeOptions{Name: name, GPUs: 8})
		names = append(names, name)
	}
	return names
}

// prepare cordons node and gives it a taint of its own, as an operator
// would before signet is asked to certify it. The taint is
// PreferNoSchedule so that check pods can still land on the node.
func (w *kubeWorld) prepare(t *testing.T, name string) {
	t.Helper()
	w.updateNode(t, name, func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectPreferNoSchedule})
	})
}

func (w *kubeWorld) updateNode(t *testing.T, name string, change func(*corev1.Node)) {
	t.Helper()
	nodes := w.kube.Client.CoreV1().Nodes()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = nodes.Update(t.Context(), n, metav1.UpdateOptions{})
		return err
	}))
}

// nodeState is what signet may change on a node and must restore.
type nodeState struct {
	UID         string
	Spec        corev1.NodeSpec
	Annotations map[string]string
	Labels      map[string]string
}

func (w *kubeWorld) state(t *testing.T, names ...string) map[string]nodeState {
	t.Helper()
	out := map[string]nodeState{}
	for _, name := range names {
		n, err := w.kube.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		out[name] = nodeState{UID: string(n.UID), Spec: n.Spec, Annotations: n.Annotations, Labels: n.Labels}
	}
	return out
}

func (w *kubeWorld) setMisbehaviour(pod string, m kubetest.Misbehaviour) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.misbehave[pod] = m
}

// kubeConfig is e's reconciler config with the pod and mpijob backends on
// the world's cluster, as its admin.
func (e *env) kubeConfig(w *kubeWorld) *reconciler.Config {
	cfg := e.config()
	cfg.Backends.Pod.Enabled = true
	cfg.Backends.MPIJob.Enabled = true
	cfg.Kubernetes = reconciler.KubernetesConfig{Kubeconfig: w.kubeconfig, SignetImage: testSignetImage}
	cfg.Ceiling = reconciler.Ceiling{Namespace: checksNamespace, Registries: []string{"images.invalid"}, MaxGPUs: 8}
	return cfg
}

// gpuCheck is a check of backend be with one GPU per participant.
func gpuCheck(name, be, script string, deadline int) testenv.Check {
	return testenv.Check{Name: name, Backend: be, GPUCount: 1, Deadline: deadline, Script: script,
		Workload: fmt.Sprintf("{image: %q}", testCUDAImage)}
}

// participantLog is the participant's log of stream ("stdout", "stderr")
// on the evidence branch, its digest checked against the signed check
// evidence that names it; the test fails when there is none.
func participantLog(t *testing.T, e *env, p evidence.ParticipantOutcome, stream string) string {
	t.Helper()
	for _, l := range p.Logs {
		if strings.HasSuffix(l.Path, "."+stream+".log") {
			data := e.evidence().Read(l.Path)
			require.Equal(t, l.Digest, specs.DigestOf(data), "%s: digest", l.Path)
			return string(data)
		}
	}
	t.Fatalf("participant %s: no %s log in the evidence (logs %v, reason %q)", p.Node, stream, p.Logs, p.Reason)
	return ""
}

// reserved reports whether node carries run's reservation: annotation,
// taint and cordon.
func reserved(t *testing.T, w *kubeWorld, node, run string) bool {
	t.Helper()
	n, err := w.kube.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	taint := false
	for _, tn := range n.Spec.Taints {
		taint = taint || (tn.Key == kube.ReservationTaintKey && tn.Value == run && tn.Effect == corev1.TaintEffectNoSchedule)
	}
	return taint && n.Spec.Unschedulable && strings.Contains(n.Annotations[kube.ReservationAnnotation], `"`+run+`"`)
}

// TestKubernetes runs the Kubernetes acceptance scenarios of the pod and
// mpijob backends end to end: a real reconciler, a real Git spec
// repository and evidence branch, and a real control plane whose kubelets
// and MPI Operator are simulated (see kubeWorld).
func TestKubernetes(t *testing.T) {
	w := startKubeWorld(t)

	// A 4-node pod profile passes and every node gets back exactly the
	// cordon and taints it had before.
	t.Run("PodProfilePassesAndReleases", func(t *testing.T) {
		e := newEnv(t)
		nodes := w.nodes(t, "p", 4)
		w.prepare(t, "p-1")
		before := w.state(t, nodes...)
		e.repo.AddProfileFor("burn", 4, "", gpuCheck("burn", "pod", `echo "burn log of participant $SIGNET_PARTICIPANT_INDEX"; result Pass; exit 0`, 60))
		e.repo.AddRequestFor("burn-1", "burn", nodes)
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", requestRef+"burn-1")
		r := e.build(e.kubeConfig(w))
		st := e.reconcileAndWait(r)["burn-1"]
		require.NotNil(t, st)
		assert.Equal(t, specs.VerdictPass, st.Verdict)
		assert.Equal(t, before, w.state(t, nodes...), "every node must be restored exactly")
		docs := e.readRun("burn-1")
		ce := docs.checks["burn"]
		require.Len(t, ce.Participants, 4)
		for i, p := range ce.Participants {
			assert.Equal(t, nodes[i], p.Node)
			assert.Equal(t, nodes[i], p.Identity.Node)
			assert.Equal(t, before[nodes[i]].UID, p.Identity.NodeUID)
			assert.NotEmpty(t, p.Identity.Workload, "the pod's API-assigned UID")
			assert.Equal(t, specs.VerdictPass, p.Verdict)
			assertImagesInEvidence(t, p.Identity, "signet-install", "check")
			// The pod's log, read through the API server's pods/log from
			// the node's kubelet API, is the participant's log evidence.
			assert.NotContains(t, p.Reason, "logs not read")
			assert.Contains(t, participantLog(t, e, p, "stdout"), fmt.Sprintf("burn log of participant %d\n", i))
		}
		assert.ElementsMatch(t, nodes, docs.receipt.Released)
		pods, err := w.kube.Client.CoreV1().Pods(checksNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: kube.RunLabel + "=burn-1"})
		require.NoError(t, err)
		assert.Empty(t, pods.Items, "cleanup removes the check's pods")
		e.audit()
	})

	// A node whose check exits 1 with a valid Fail result fails the run and
	// stays reserved until an approved release; the passing nodes are
	// released at once with their previous cordon and taints.
	t.Run("FailingNodeRetainedUntilApprovedRelease", func(t *testing.T) {
		e := newEnv(t)
		nodes := w.nodes(t, "f", 4)
		w.prepare(t, "f-0")
		before := w.state(t, nodes...)
		script := `if [ "$SIGNET_PARTICIPANT_INDEX" = 2 ]; then SUMMARY=ecc result Fail; exit 1; fi; result Pass; exit 0`
		e.repo.AddProfileFor("burn", 4, "", gpuCheck("burn", "pod", script, 60))
		e.repo.AddRequestFor("fail-1", "burn", nodes)
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", requestRef+"fail-1")
		r := e.build(e.kubeConfig(w))
		st := e.reconcileAndWait(r)["fail-1"]
		require.NotNil(t, st)
		assert.Equal(t, specs.VerdictFail, st.Verdict)
		after := w.state(t, nodes...)
		for _, n := range []string{"f-0", "f-1", "f-3"} {
			assert.Equal(t, before[n], after[n], "passing node %s must be restored exactly", n)
		}
		assert.True(t, reserved(t, w, "f-2", "fail-1"), "the failing node stays reserved")
		docs := e.readRun("fail-1")
		assert.Equal(t, []string{"f-2"}, docs.receipt.Retained)

		// Still reserved after another pass without an approved release.
		e.repo.AddRequestFor("fail-1", "burn", nodes, "release: true")
		e.repo.Commit("release without approval")
		_, err := r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		assert.True(t, reserved(t, w, "f-2", "fail-1"), "release: true without its approval changes nothing")

		e.repo.Approve(e.keys.ApproverFile, "release", requestRef+"fail-1")
		_, err = r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		assert.Equal(t, before, w.state(t, nodes...), "after the approved release every node is as before")
		assert.Contains(t, e.evidence().Files(), path.Join(docs.dir, evidence.ReleaseFile))
		e.audit()
	})

	// An MPIJob passes on its participants; one whose worker lands on a
	// node that is not a participant makes the check Error.
	t.Run("MPIJobCoverage", func(t *testing.T) {
		e := newEnv(t)
		w.nodes(t, "m", 5)
		w.kube.CreateNode(t.Context(), kubetest.NodeOptions{Name: "m-cpu"})
		// Worker 0 of mpi-bad's MPIJob is bound to m-2, which takes no
		// part, at its creation (a mutating webhook sets spec.nodeName
		// past the scheduler), as a faulty operator or admission plugin
		// could.
		w.kube.PatchPodsAtAdmission(t, "mpi-bad-node", checksNamespace,
			map[string]string{kubetest.MPIJobNameLabel: "signet-mpi-bad-00", kubetest.MPIReplicaIndexLabel: "0"},
			"/spec/nodeName", "m-2", func(p *corev1.Pod) bool { return p.Spec.NodeName == "m-2" })
		e.repo.AddProfileFor("nccl", 2, "", gpuCheck("nccl", "mpijob", "result Pass; exit 0", 60))
		e.repo.AddRequestFor("mpi-ok", "nccl", []string{"m-0", "m-1"})
		e.repo.AddRequestFor("mpi-bad", "nccl", []string{"m-3", "m-4"})
		approve := []string{profileRef + "nccl", requestRef + "mpi-ok", requestRef + "mpi-bad"}
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", approve...)
		r := e.build(e.kubeConfig(w))
		sts := e.reconcileAndWait(r)
		require.Len(t, sts, len(approve)-1)
		assert.Equal(t, specs.VerdictPass, sts["mpi-ok"].Verdict)
		assert.Equal(t, specs.VerdictError, sts["mpi-bad"].Verdict)
		bad := e.readRun("mpi-bad").checks["nccl"]
		assert.Contains(t, bad.Reason+participantReasons(bad), "m-2", "the reason names the non-participant node")
		ok := e.readRun("mpi-ok").checks["nccl"]
		for _, p := range ok.Participants {
			assert.NotEmpty(t, p.Identity.Workload, "each participant is covered by a worker pod")
			assertImagesInEvidence(t, p.Identity, "worker", "signet-install", "check")
		}
		e.audit()
	})

	// When a node of the group is already reserved by another run,
	// nothing is admitted, written or changed; the request waits.
	t.Run("BusyNodeChangesNothing", func(t *testing.T) {
		e := newEnv(t)
		nodes := w.nodes(t, "b", 4)
		other := kube.NewFleet(w.kube.Client, kube.FleetOptions{Cluster: "other-cluster"})
		st := w.state(t, "b-2")
		require.NoError(t, other.Reserve(t.Context(), "someone-else", []backend.Node{{Name: "b-2", UID: st["b-2"].UID}}))
		before := w.state(t, nodes...)
		e.repo.AddProfileFor("burn", 4, "", gpuCheck("burn", "pod", "result Pass; exit 0", 60))
		e.repo.AddRequestFor("busy-1", "burn", nodes)
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", requestRef+"busy-1")
		r := e.build(e.kubeConfig(w))
		res, err := r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		assert.Empty(t, res.Admitted)
		reason, msg := readyReason(object(t, r, specs.KindRequest, "busy-1"))
		assert.Equal(t, "NodesBusy", reason)
		assert.Contains(t, msg, "b-2")
		assert.Equal(t, before, w.state(t, nodes...), "no node may be left changed")
		assert.Empty(t, e.evidence().RunDir(cluster, "busy-1"), "nothing is written for a run that was not admitted")
	})

	// A node deleted and created again under the same name during the run
	// (a new UID) is never released by the old run, not even after an
	// approved release.
	t.Run("RecreatedNodeNeverReleased", func(t *testing.T) {
		e := newEnv(t)
		nodes := w.nodes(t, "r", 2)
		script := `if [ "$SIGNET_PARTICIPANT_INDEX" = 1 ]; then sleep 6; fi; result Pass; exit 0`
		e.repo.AddProfileFor("burn", 2, "", gpuCheck("burn", "pod", script, 60))
		e.repo.AddRequestFor("recreate-1", "burn", nodes)
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", requestRef+"recreate-1")
		r := e.build(e.kubeConfig(w))
		res, err := r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, []string{"recreate-1"}, res.Admitted)
		require.Eventually(t, func() bool { return reserved(t, w, "r-1", "recreate-1") }, 30*time.Second, 100*time.Millisecond)
		old := w.state(t, "r-1")["r-1"]
		require.NoError(t, w.kube.Client.CoreV1().Nodes().Delete(t.Context(), "r-1", metav1.DeleteOptions{}))
		require.Eventually(t, func() bool {
			_, err := w.kube.Client.CoreV1().Nodes().Get(t.Context(), "r-1", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, 100*time.Millisecond)
		w.kube.CreateNode(t.Context(), kubetest.NodeOptions{Name: "r-1", GPUs: 8})
		w.prepare(t, "r-1") // the operator cordons the new machine
		fresh := w.state(t, "r-1")["r-1"]
		require.NotEqual(t, old.UID, fresh.UID)

		st := e.wait(r, "recreate-1")
		assert.NotEqual(t, specs.VerdictPass, st.Verdict)
		assert.Equal(t, fresh, w.state(t, "r-1")["r-1"], "the old run must not touch the new node")

		e.repo.AddRequestFor("recreate-1", "burn", nodes, "release: true")
		e.repo.Commit("release")
		e.repo.Approve(e.keys.ApproverFile, "release", requestRef+"recreate-1")
		_, err = r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		docs := e.readRun("recreate-1")
		assert.Contains(t, e.evidence().Files(), path.Join(docs.dir, evidence.ReleaseFile))
		assert.Equal(t, fresh, w.state(t, "r-1")["r-1"], "an approved release of the old run must not touch the new node")
		e.audit()
	})

	// A pod deleted behind signet's back is recorded as Error and never
	// created again.
	t.Run("PodDeletedBehindBackIsError", func(t *testing.T) {
		e := newEnv(t)
		nodes := w.nodes(t, "d", 2)
		w.setMisbehaviour("signet-lost-1-00-p1", kubetest.LosePod)
		script := `sleep 2; result Pass; exit 0`
		e.repo.AddProfileFor("burn", 2, "", gpuCheck("burn", "pod", script, 60))
		e.repo.AddRequestFor("lost-1", "burn", nodes)
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", requestRef+"lost-1")
		watcher, err := w.kube.Client.CoreV1().Pods(checksNamespace).Watch(t.Context(), metav1.ListOptions{LabelSelector: kube.RunLabel + "=lost-1"})
		require.NoError(t, err)
		defer watcher.Stop()
		created := map[string]int{}
		var wmu sync.Mutex
		go func() {
			for ev := range watcher.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
					wmu.Lock()
					created[p.Name]++
					wmu.Unlock()
				}
			}
		}()
		r := e.build(e.kubeConfig(w))
		st := e.reconcileAndWait(r)["lost-1"]
		require.NotNil(t, st)
		assert.Equal(t, specs.VerdictError, st.Verdict)
		ce := e.readRun("lost-1").checks["burn"]
		require.Len(t, ce.Participants, 2)
		assert.Equal(t, specs.VerdictError, ce.Participants[1].Verdict)
		assert.Contains(t, strings.ToLower(ce.Participants[1].Reason), "deleted")
		wmu.Lock()
		defer wmu.Unlock()
		for name, n := range created {
			assert.Equal(t, 1, n, "pod %s was created %d times", name, n)
		}
		e.audit()
	})

	// A reconciler that stops while a check's pods run adopts them after
	// its restart and records their result; pods deleted while it was
	// down cannot be proven and make the check Error. Neither is created
	// twice.
	t.Run("RestartAdoptsOrRecords", func(t *testing.T) {
		e := newEnv(t)
		w.nodes(t, "a", 2)
		script := `sleep 4; result Pass; exit 0`
		e.repo.AddProfileFor("slow", 1, "", gpuCheck("slow", "pod", script, 60))
		e.repo.AddRequestFor("adopt-1", "slow", []string{"a-0"})
		e.repo.AddRequestFor("orphan-1", "slow", []string{"a-1"})
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"slow", requestRef+"adopt-1", requestRef+"orphan-1")
		created := countPodCreations(t, w, checksNamespace)

		r, stop := e.buildStoppable(e.kubeConfig(w))
		res, err := r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"adopt-1", "orphan-1"}, res.Admitted)
		pods := w.kube.Client.CoreV1().Pods(checksNamespace)
		require.Eventually(t, func() bool {
			l, err := pods.List(t.Context(), metav1.ListOptions{LabelSelector: kube.ManagedByLabel + "=" + kube.ManagedBy})
			require.NoError(t, err)
			running := 0
			for _, p := range l.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == 2
		}, 30*time.Second, 50*time.Millisecond)
		stop()
		// While the reconciler is down, orphan-1's pod disappears.
		require.NoError(t, pods.DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: kube.RunLabel + "=orphan-1"}))
		require.Eventually(t, func() bool {
			l, err := pods.List(t.Context(), metav1.ListOptions{LabelSelector: kube.RunLabel + "=orphan-1"})
			require.NoError(t, err)
			return len(l.Items) == 0
		}, 30*time.Second, 50*time.Millisecond)

		r2 := e.build(e.kubeConfig(w))
		assert.Equal(t, specs.VerdictPass, e.wait(r2, "adopt-1").Verdict, "the live pod is adopted and its result recorded")
		assert.Equal(t, specs.VerdictError, e.wait(r2, "orphan-1").Verdict, "a check that cannot be proven is Error")
		orphan := e.readRun("orphan-1").checks["slow"]
		assert.Contains(t, orphan.Participants[0].Reason+orphan.Reason, "interrupted")
		for name, n := range created() {
			assert.Equal(t, 1, n, "pod %s was created %d times", name, n)
		}
		e.audit()
	})

	// With certification labels on, a node that passed is labelled with
	// its profile, run and expiry; a later non-Pass removes the labels.
	t.Run("CertificationLabels", func(t *testing.T) {
		e := newEnv(t)
		nodes := w.nodes(t, "l", 1)
		e.repo.AddProfileFor("good", 1, "", gpuCheck("good", "pod", "result Pass; exit 0", 60))
		e.repo.AddProfileFor("bad", 1, "", gpuCheck("bad", "pod", "result Fail; exit 1", 60))
		e.repo.AddRequestFor("label-1", "good", nodes)
		e.repo.Commit("specs")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"good", profileRef+"bad", requestRef+"label-1")
		cfg := e.kubeConfig(w)
		cfg.Kubernetes.CertifyTTL = 3600
		r := e.build(cfg)
		st := e.reconcileAndWait(r)["label-1"]
		require.NotNil(t, st)
		require.Equal(t, specs.VerdictPass, st.Verdict)
		labels := w.state(t, "l-0")["l-0"].Labels
		assert.Equal(t, "good", labels[kube.CertifiedProfileLabel])
		assert.Equal(t, "label-1", labels[kube.CertifiedRunLabel])
		until, err := time.Parse(kube.CertifiedUntilFormat, labels[kube.CertifiedUntilLabel])
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(time.Hour), until, 5*time.Minute)

		e.repo.AddRequestFor("label-2", "bad", nodes)
		e.repo.Commit("a later run")
		e.repo.Approve(e.keys.ApproverFile, "", requestRef+"label-2")
		st = e.reconcileAndWait(r)["label-2"]
		require.NotNil(t, st)
		require.Equal(t, specs.VerdictFail, st.Verdict)
		labels = w.state(t, "l-0")["l-0"].Labels
		for _, l := range []string{kube.CertifiedProfileLabel, kube.CertifiedRunLabel, kube.CertifiedUntilLabel} {
			assert.NotContains(t, labels, l, "a later non-Pass removes the certification")
		}
	})

	// The daemon killed at every Kubernetes-only crash point (between the
	// group's reservation and its admission record) leaves a reservation
	// the evidence branch does not know; the next start repairs it, admits
	// the request and runs it once.
	for i, point := range crash.KubePoints {
		t.Run("Crash/"+point, func(t *testing.T) {
			e := newEnv(t)
			nodes := w.nodes(t, fmt.Sprintf("crash%d", i), 2)
			w.prepare(t, nodes[0])
			before := w.state(t, nodes...)
			e.repo.AddProfileFor("burn", 2, "", gpuCheck("burn", "pod", "result Pass; exit 0", 60))
			e.repo.AddRequestFor("crash-k", "burn", nodes)
			e.repo.Commit("specs")
			e.repo.Approve(e.keys.ApproverFile, "", profileRef+"burn", requestRef+"crash-k")
			cfg := e.kubeConfig(w)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			cfg.Listen = ln.Addr().String()
			require.NoError(t, ln.Close())
			b, err := yaml.Marshal(cfg)
			require.NoError(t, err)
			file := filepath.Join(t.TempDir(), "config.yaml")
			require.NoError(t, os.WriteFile(file, b, 0o600))

			cmd := exec.CommandContext(t.Context(), testenv.Signet(t), "reconcile", "--config", file)
			cmd.Env = append(os.Environ(), crash.EnvVar+"="+point)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "the daemon was not killed at %s:\n%s", point, out)
			ws, _ := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the daemon was not killed at %s:\n%s", point, out)
			for _, n := range nodes {
				assert.True(t, reserved(t, w, n, "crash-k"), "node %s reserved before the crash", n)
			}
			require.Empty(t, e.evidence().RunDir(cluster, "crash-k"), "no admission was recorded")

			d := exec.Command(testenv.Signet(t), "reconcile", "--config", file)
			var logs syncbuf.Buffer
			d.Stdout, d.Stderr = &logs, &logs
			require.NoError(t, d.Start())
			exited := make(chan error, 1)
			go func() { exited <- d.Wait() }()
			t.Cleanup(func() {
				_ = d.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					_ = d.Process.Kill()
					<-exited
				}
			})
			require.Eventually(t, func() bool {
				dir := e.evidence().RunDir(cluster, "crash-k")
				return dir != "" && slices.Contains(e.evidence().Files(), path.Join(dir, evidence.ReceiptFile))
			}, 3*time.Minute, 250*time.Millisecond, "the run never finished after the restart:\n%s", &logs)
			docs := e.readRun("crash-k")
			assert.Equal(t, specs.VerdictPass, docs.evidence.Verdict)
			assert.Contains(t, logs.String(), "stale reservation repaired")
			assert.Equal(t, before, w.state(t, nodes...), "every node is restored exactly")
			assert.Equal(t, 1, countSuffix(e.evidence().Files(), "/"+evidence.AdmissionFile), "one admission")
			e.audit()
		})
	}

	t.Run("StandingPool", func(t *testing.T) { standingPool(t, w) })
	t.Run("StandingTwoReconcilers", func(t *testing.T) { standingTwoReconcilers(t, w) })
	t.Run("StandingCrash", func(t *testing.T) { standingCrash(t, w) })
}

// countPodCreations counts, from now on, how many times each pod name of
// signet's is created in ns; the returned function reads the counts.
func countPodCreations(t *testing.T, w *kubeWorld, ns string) func() map[string]int {
	t.Helper()
	watcher, err := w.kube.Client.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: kube.ManagedByLabel + "=" + kube.ManagedBy})
	require.NoError(t, err)
	t.Cleanup(watcher.Stop)
	var mu sync.Mutex
	created := map[string]int{}
	go func() {
		for ev := range watcher.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				created[p.Name]++
				mu.Unlock()
			}
		}
	}()
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(created)
	}
}

func participantReasons(ce evidence.CheckEvidence) string {
	var b strings.Builder
	for _, p := range ce.Participants {
		b.WriteString(p.Reason + "\n")
	}
	return b.String()
}

// assertImagesInEvidence: the signed check evidence records the containers
// that ran, in order, each with the image ID the runtime reported, whose
// digest is the one the image pins (issue 21, finding 5).
func assertImagesInEvidence(t *testing.T, id evidence.Identity, containers ...string) {
	t.Helper()
	var got []string
	for _, im := range id.Images {
		got = append(got, im.Container)
		_, pinned, _ := strings.Cut(im.Image, "@")
		assert.True(t, strings.HasSuffix(im.ImageID, "@"+pinned), "%+v", im)
	}
	assert.Equal(t, containers, got, "the containers recorded in the evidence")
}
