package kubetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

func pinnedPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{
							Key:      "kubernetes.io/hostname",
							Operator: corev1.NodeSelectorOpIn,
							Values:   []string{node},
						}},
					}},
				},
			}},
			Containers: []corev1.Container{{
				Name:  "check",
				Image: "registry.invalid/never-pulled:1",
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")},
				},
			}},
		},
	}
}

// TestSmoke starts the whole control plane and checks what the Kubernetes
// backends rely on: RBAC applies to the unprivileged identities, the real
// scheduler binds a pod pinned to a simulated GPU node, and refuses a
// cordoned node to a pod without the node.kubernetes.io/unschedulable
// toleration.
func TestSmoke(t *testing.T) {
	env := Start(t)
	t.Logf("env start-up: %v", env.StartupTime)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := env.Client

	// An unprivileged identity is authenticated but holds no grant.
	_, err := env.ClientFor("alice").CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "alice has no RBAC grant: %v", err)

	node := env.CreateNode(ctx, NodeOptions{Name: "gpu-node-1", GPUs: 8, SystemUUID: "uuid-1", BootID: "boot-1"})
	assert.Empty(t, node.Spec.Taints)
	gpus := node.Status.Allocatable[GPUResource]
	assert.Equal(t, int64(8), gpus.Value())
	assert.Equal(t, "uuid-1", node.Status.NodeInfo.SystemUUID)
	assert.Equal(t, "boot-1", node.Status.NodeInfo.BootID)

	// The real scheduler binds a pod pinned to the node.
	_, err = cs.CoreV1().Pods("default").Create(ctx, pinnedPod("bound", node.Name), metav1.CreateOptions{})
	require.NoError(t, err)
	begin := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "bound", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, node.Name, p.Spec.NodeName)
	}, 60*time.Second, 200*time.Millisecond, "the scheduler binds the pod to %s", node.Name)
	t.Logf("bound after %v", time.Since(begin))

	// Cordoned, the node is refused to a pod that does not tolerate
	// node.kubernetes.io/unschedulable.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Unschedulable = true
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}))
	_, err = cs.CoreV1().Pods("default").Create(ctx, pinnedPod("refused", node.Name), metav1.CreateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "refused", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Empty(c, p.Spec.NodeName)
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodScheduled {
				cond = &p.Status.Conditions[i]
			}
		}
		require.NotNil(c, cond, "PodScheduled condition")
		assert.Equal(c, corev1.ConditionFalse, cond.Status)
		assert.Equal(c, corev1.PodReasonUnschedulable, cond.Reason)
		assert.Contains(c, cond.Message, "1 node(s) were unschedulable")

		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=refused,reason=FailedScheduling",
		})
		require.NoError(c, err)
		found := false
		for _, ev := range evs.Items {
			found = found || strings.Contains(ev.Message, "1 node(s) were unschedulable")
		}
		assert.True(c, found, "a FailedScheduling event naming the cordon")
	}, 60*time.Second, 200*time.Millisecond)
	// And it stays unscheduled.
	time.Sleep(2 * time.Second)
	p, err := cs.CoreV1().Pods("default").Get(ctx, "refused", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, p.Spec.NodeName)
}

// TestLogWindow: tailLines then limitBytes, as the kubelet applies them.
func TestLogWindow(t *testing.T) {
	log := []byte("one\ntwo\nthree\n")
	for _, tc := range []struct {
		tail, limit int64
		want        string
	}{
		{-1, -1, "one\ntwo\nthree\n"},
		{0, -1, ""},
		{1, -1, "three\n"},
		{2, -1, "two\nthree\n"},
		{9, -1, "one\ntwo\nthree\n"},
		{-1, 5, "one\nt"},
		{2, 5, "two\nt"},
	} {
		assert.Equal(t, tc.want, string(logWindow(log, tc.tail, tc.limit)), "tail %d limit %d", tc.tail, tc.limit)
	}
	assert.Equal(t, "b", string(logWindow([]byte("a\nb"), 1, -1)), "a last line without a newline is a line")
	assert.Empty(t, logWindow(nil, 3, -1))
}
