package kube

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/specs"
)

// TestMPIJobCleanupFollowsDeletion: Cleanup of an MPIJob check follows the
// MPIJob and its pods on watches while they go, instead of reading them
// again every PollInterval, and returns once the last one is gone. The
// API server, etcd and the garbage collector are real; the MPIJob and its
// pods are created by the test (no operator: it would recreate pods) and
// held by a finalizer through ten poll intervals.
func TestMPIJobCleanupFollowsDeletion(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	env.InstallMPIJobCRD(ctx)
	cs, dyn, reqs := countedClients(t, env)
	const ns = "default"
	b := NewMPIJobBackend(dyn, cs, MPIJobOptions{Namespace: ns, SignetImage: testSignetImage, PollInterval: 100 * time.Millisecond})
	c := testCheckRun("mpi-cleanup", "#!/bin/sh\nexit 0\n", twoNodes()...)
	c.Check.Backend = specs.BackendMPIJob
	cm, job, err := b.render(c)
	require.NoError(t, err)
	const hold = "signet.dev/test-hold"
	job.SetNamespace(ns)
	job.SetFinalizers([]string{hold})
	_, err = env.Dynamic().Resource(MPIJobGVR).Namespace(ns).Create(ctx, job, metav1.CreateOptions{})
	require.NoError(t, err)
	cm.Namespace = ns
	_, err = env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	pods := []string{job.GetName() + "-launcher", job.GetName() + "-worker-0"}
	for _, name := range pods {
		_, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: objectLabels(c), Finalizers: []string{hold}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "check", Image: testWorkloadImage}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	reqs.snapshot()

	unhold := []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)
	cleanupHeld(t, func() error { return b.Cleanup(ctx, c) }, b.o.PollInterval, func() {
		for _, name := range pods {
			_, err := env.Client.CoreV1().Pods(ns).Patch(ctx, name, types.JSONPatchType, unhold, metav1.PatchOptions{})
			require.NoError(t, err)
		}
		// The garbage collector added its foregroundDeletion finalizer:
		// drop only the test's.
		j, err := env.Dynamic().Resource(MPIJobGVR).Namespace(ns).Get(ctx, job.GetName(), metav1.GetOptions{})
		require.NoError(t, err)
		var keep []string
		for _, f := range j.GetFinalizers() {
			if f != hold {
				keep = append(keep, f)
			}
		}
		j.SetFinalizers(keep)
		_, err = env.Dynamic().Resource(MPIJobGVR).Namespace(ns).Update(ctx, j, metav1.UpdateOptions{})
		require.NoError(t, err)
	})
	counts, _ := reqs.snapshot()
	// One read of each to delete it, one to start waiting; none again.
	assert.Regexp(t, `(^|, )list pods=2(,|$)`, counts, "Cleanup listed the pods again while waiting")
	assert.Regexp(t, `(^|, )get mpijobs=2(,|$)`, counts, "Cleanup read the MPIJob again while waiting")
	assert.Regexp(t, `(^|, )watch pods=1(,|$)`, counts, "Cleanup did not follow the pods on one watch")
	assert.Regexp(t, `(^|, )watch mpijobs=1(,|$)`, counts, "Cleanup did not follow the MPIJob on one watch")
	_, err = env.Dynamic().Resource(MPIJobGVR).Namespace(ns).Get(ctx, job.GetName(), metav1.GetOptions{})
	assert.Error(t, err, "the MPIJob is still there")
	l, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: checkSelector(c)})
	require.NoError(t, err)
	assert.Empty(t, l.Items)
}
