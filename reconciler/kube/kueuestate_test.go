package kube

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"signet.dev/signet/specs"
)

// TestKueueStates covers what the pod backend makes of Kueue's marks on a
// pod, without a cluster: a pod still gated at the deadline is waiting for
// capacity (an Error for the deadline, never a failure of the check), and
// a pod Kueue stopped (TerminationTarget, then deleted) is an Error naming
// Kueue's reason, never a Pass, with no result read.
func TestKueueStates(t *testing.T) {
	b := NewPodBackend(fake.NewClientset(), PodOptions{Namespace: "default", SignetImage: testSignetImage})
	c := testCheckRun("states", resultScript, twoNodes()...)
	c.Check.Workload.Queue = "gpu-queue"
	r, err := render(c, "default", testSignetImage)
	require.NoError(t, err)

	t.Run("gated at the deadline: waiting for capacity", func(t *testing.T) {
		p := r.Pods[0].DeepCopy()
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: KueueAdmissionGate}}
		p.Status.Phase = corev1.PodPending
		w := &watched{name: p.Name, want: &r.Pods[0].Spec, pod: p}
		assert.True(t, gatedByKueue([]*watched{w}))
		pr := b.participantReport(t.Context(), c, 0, w, true, false)
		assert.True(t, pr.Termination.DeadlineExceeded)
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated"}}
		pr = b.participantReport(t.Context(), c, 0, w, true, false)
		assert.True(t, strings.HasPrefix(pr.Termination.Reason, `waiting for capacity: queue "gpu-queue" had not admitted pod`), "the cause leads: %s", pr.Termination.Reason)
		assert.Contains(t, pr.Termination.Reason, "SchedulingGated")
		assert.Equal(t, specs.VerdictError, evaluate(c, pr).Verdict)

		p.Spec.SchedulingGates = nil
		assert.False(t, gatedByKueue([]*watched{w}), "ungated: admitted")
	})

	t.Run("stopped by Kueue: Error with its reason", func(t *testing.T) {
		p := r.Pods[1].DeepCopy()
		p.UID = "uid-1"
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: kueueTerminationTarget, Status: corev1.ConditionTrue,
			Reason: "WorkloadEvicted", Message: "Preempted to accommodate a workload (UID: x) due to prioritization in the ClusterQueue"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: checkContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: `{"verdict":"Pass"}`},
		}}}
		_, err := b.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
		require.NoError(t, err)
		w := &watched{name: p.Name, uid: p.UID, want: &r.Pods[1].Spec}
		require.NoError(t, b.poll(t.Context(), c, []*watched{w}, nil))
		assert.Equal(t, "pod "+p.Name+" stopped by Kueue: WorkloadEvicted: Preempted to accommodate a workload (UID: x) due to prioritization in the ClusterQueue", w.lost)
		pr := b.participantReport(t.Context(), c, 1, w, false, false)
		assert.Nil(t, pr.Result, "a stopped pod's result is never read")
		out := evaluate(c, pr)
		assert.Equal(t, specs.VerdictError, out.Verdict)
		assert.Contains(t, out.Reason, "stopped by Kueue: WorkloadEvicted: Preempted")
	})
}
