package kubetest

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStartKueue starts the real Kueue (KueueVersion, bin/kueue) against
// the real control plane and checks what the Kubernetes tests rely on: its
// pod webhook gates a pod of a queue (Kueue manages it), its Kueue-API
// webhooks and controllers make a queue Active, nothing of the metrics
// certificate it needs in /etc/kueue is left behind, and once the test
// that started it ends its webhook configurations are gone (a pod is
// created ungated again) and its process has exited. Nothing is simulated.
func TestStartKueue(t *testing.T) {
	_, etcErr := os.Stat(kueueMetricsCertDir)
	env := Start(t)
	ctx := context.Background()
	var pid int
	t.Run("running", func(t *testing.T) {
		k := env.StartKueue(t, KueueOptions{})
		pid = k.p.cmd.Process.Pid
		t.Logf("kueue start-up: %v", k.StartupTime)
		_, err := os.Stat(kueueMetricsCertDir)
		assert.Equal(t, os.IsNotExist(etcErr), os.IsNotExist(err), "%s as it was before (%v), now %v", kueueMetricsCertDir, etcErr, err)

		k.CreateResourceFlavor(ctx, "default-flavor", nil, "")
		k.CreateClusterQueue(ctx, ClusterQueueOptions{Name: "cq", Flavor: "default-flavor", GPUs: 1})
		k.CreateLocalQueue(ctx, "default", "lq", "cq")

		p := pinnedPod("queued", "nowhere")
		p.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "lq"}
		got, err := env.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		assert.Equal(t, "true", got.Labels["kueue.x-k8s.io/managed"])
		assert.Contains(t, got.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "kueue.x-k8s.io/admission"})

		// The metrics certificate's files went once Kueue watched them:
		// its watcher gives up 10 s after start when they went too early,
		// and Kueue exits.
		time.Sleep(12 * time.Second)
		assert.NoError(t, syscall.Kill(pid, 0), "kueue still running")
		assert.NotContains(t, k.LogTail(1<<20), "Could not run manager")
	})

	mw, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, mw.Items, "mutating webhook configurations removed")
	vw, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, vw.Items, "validating webhook configurations removed")
	p := pinnedPod("after", "nowhere")
	p.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "lq"}
	got, err := env.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a pod is created with Kueue gone")
	assert.Empty(t, got.Spec.SchedulingGates)
	require.NotZero(t, pid)
	assert.Eventually(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }, 10*time.Second, 100*time.Millisecond, "kueue (pid %d) stopped", pid)
}
