package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// KueueWorkloadGVR is Kueue's Workload resource (v1beta2, the version
// Kueue v0.17 stores). The mpijob backend reads the Workload of an MPIJob
// Kueue suspended again, for Kueue's reason; it never writes one.
var KueueWorkloadGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// kueueJobUIDLabel is the label Kueue puts on the Workload of a job: the
// job's UID.
const kueueJobUIDLabel = "kueue.x-k8s.io/job-uid"

// suspendedAgain says why the MPIJob name (UID uid), seen running or
// admitted, is suspended again. Kueue evicts a job (preemption, a
// PodsReady timeout, a deactivated queue) by setting spec.runPolicy.suspend
// and records why in its Workload's Evicted condition: with that condition
// the answer begins "stopped by Kueue: "; without it (no queue, no
// Workload, no eviction recorded, or the Workload not readable) it says
// the job was suspended behind signet's back. Either way the check ended
// without a result.
func (b *MPIJobBackend) suspendedAgain(ctx context.Context, name, uid, queue string) string {
	what := fmt.Sprintf("MPIJob %s suspended again after it was admitted (spec.runPolicy.suspend true)", name)
	if queue == "" {
		return what + " behind signet's back: the check names no queue"
	}
	l, err := b.dyn.Resource(KueueWorkloadGVR).Namespace(b.o.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{kueueJobUIDLabel: uid}).String(),
	})
	if err != nil {
		return fmt.Sprintf("%s behind signet's back, or by Kueue: the Workload of queue %q could not be read: %v", what, queue, err)
	}
	for _, w := range l.Items {
		if ev := kueueEvicted(&w); ev != "" {
			return fmt.Sprintf("stopped by Kueue: %s: Workload %s %s", what, w.GetName(), ev)
		}
	}
	return fmt.Sprintf("%s behind signet's back: no Workload of queue %q labelled %s=%s records an eviction", what, queue, kueueJobUIDLabel, uid)
}

// kueueEvicted is a Workload's Evicted condition, "Evicted (<reason>):
// <message>", or "" when it is not True.
func kueueEvicted(w *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	for _, cv := range conds {
		m, _ := cv.(map[string]any)
		if m["type"] == "Evicted" && m["status"] == "True" {
			return fmt.Sprintf("Evicted (%v): %v", m["reason"], m["message"])
		}
	}
	return ""
}
