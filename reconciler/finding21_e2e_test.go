package reconciler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"signet.dev/signet/reconciler/kube"
	"signet.dev/signet/specs"
)

// TestFinding21_7NodeRebootedMidRun: while a check's pod runs (the
// kubelet's container runtime is simulated by kubetest's agent), the
// node's bootID changes, as after a reboot. The check's script passes. The node must not pass, be released
// or be certified: the evidence's snapshot records the old boot. Before
// issue 21 the run passed and the certification was written for the new
// boot.
func TestFinding21_7NodeRebootedMidRun(t *testing.T) {
	w := startKubeWorld(t)
	e := newEnv(t)
	nodes := w.nodes(t, "r", 1)
	e.repo.AddProfileFor("reboot", 1, "", gpuCheck("reboot", "pod", "sleep 4; result Pass; exit 0", 60))
	e.repo.AddRequestFor("reboot-1", "reboot", nodes)
	e.repo.Commit("specs")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"reboot", requestRef+"reboot-1")
	cfg := e.kubeConfig(w)
	cfg.Kubernetes.CertifyTTL = 3600
	r := e.build(cfg)

	ctx := t.Context()
	go func() {
		// Once the check's pod runs, the node reboots.
		for ctx.Err() == nil {
			pods, err := w.kube.Client.CoreV1().Pods(checksNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.RunLabel + "=reboot-1"})
			if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		assert.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := w.kube.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.NodeInfo.BootID = "rebooted-" + n.Status.NodeInfo.BootID
			_, err = w.kube.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}))
	}()

	st := e.reconcileAndWait(r)["reboot-1"]
	require.NotNil(t, st)
	assert.NotEqual(t, specs.VerdictPass, st.Verdict, "a node rebooted mid-run passed")
	docs := e.readRun("reboot-1")
	ce := docs.checks["reboot"]
	require.Len(t, ce.Participants, 1)
	assert.Equal(t, specs.VerdictError, ce.Participants[0].Verdict)
	assert.Contains(t, ce.Participants[0].Reason, "bootID")
	assert.Empty(t, docs.receipt.Released, "the rebooted node is not released")
	assert.NotContains(t, w.state(t, nodes[0])[nodes[0]].Labels, kube.CertifiedRunLabel, "certified for a boot the evidence did not record")
}
