package deploy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/kube"
)

// TestKueueOverlay builds deploy/kueue and applies it, with Kueue's CRDs
// (kubetest.KueueVersion), to a real API server: the LocalQueue is valid
// under Kueue's own schema and feeds the ClusterQueue it names, and the
// reconciler's ServiceAccount (a real token) can get and list Kueue's
// Workloads in the checks' namespace, the read the mpijob backend makes
// for Kueue's reason when it suspends a running check's MPIJob, and can
// write none of them, nor read them in another namespace.
func TestKueueOverlay(t *testing.T) {
	objs := renderDir(t, "kueue")
	find(t, objs, "Deployment", systemNS, "signet-reconciler") // the base
	lq := find(t, objs, "LocalQueue", checksNS, "gpu-certification")
	cq, _, _ := unstructured.NestedString(lq.Object, "spec", "clusterQueue")
	assert.Equal(t, "gpu-certification", cq)

	env := kubetest.Start(t)
	ctx := t.Context()
	env.InstallMPIJobCRD(ctx)
	env.InstallKueueCRDs(ctx)
	apply(t, env, objs)
	_, err := env.Dynamic().Resource(kubetest.KueueLocalQueueGVR).Namespace(checksNS).Get(ctx, "gpu-certification", metav1.GetOptions{})
	require.NoError(t, err, "the LocalQueue was created")

	cfg, _ := reconcilerIdentity(t, env)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	wl := dyn.Resource(kube.KueueWorkloadGVR)

	t.Run("reads Workloads in the checks' namespace", func(t *testing.T) {
		_, err := wl.Namespace(checksNS).List(ctx, metav1.ListOptions{LabelSelector: "kueue.x-k8s.io/job-uid=0b7c1e6e-0000-4000-8000-000000000000"})
		assert.NoError(t, err, "list by the job-uid label")
		_, err = wl.Namespace(checksNS).Get(ctx, "mpijob-signet-run-01-abcde", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "get: want NotFound, got %v", err)
	})

	t.Run("writes no Workload and reads none elsewhere", func(t *testing.T) {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
			"metadata": map[string]any{"name": "forged", "namespace": checksNS},
			"spec": map[string]any{"queueName": "gpu-certification", "podSets": []any{map[string]any{
				"name": "main", "count": int64(1),
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}},
			}}},
		}}
		_, err := wl.Namespace(checksNS).Create(ctx, w, metav1.CreateOptions{})
		assert.True(t, apierrors.IsForbidden(err), "create: want Forbidden, got %v", err)
		err = wl.Namespace(checksNS).Delete(ctx, "any", metav1.DeleteOptions{})
		assert.True(t, apierrors.IsForbidden(err), "delete: want Forbidden, got %v", err)
		_, err = wl.Namespace("default").List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "list in default: want Forbidden, got %v", err)
		_, err = dyn.Resource(kubetest.KueueLocalQueueGVR).Namespace(checksNS).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "list localqueues: want Forbidden, got %v", err)
	})
}
