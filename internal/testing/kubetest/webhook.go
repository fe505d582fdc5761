package kubetest

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PatchPodsAtAdmission registers a mutating admission webhook named name,
// served on loopback by this process and called by the real kube-apiserver,
// that applies the JSON patch operation "add" of value at path to every pod
// created (by anyone: a controller, a user) with the labels sel, as a
// cluster's own webhook could. It returns once a dry-run create in namespace
// ns of a pod with those labels satisfies applied, and removes the
// configuration in t.Cleanup.
//
// A patch of /spec/nodeName binds the pod to a node at its creation, past
// the scheduler and so past its affinity, taints and cordons: what a faulty
// operator or a hostile admission plugin can do to an MPIJob's worker.
func (e *Env) PatchPodsAtAdmission(t testing.TB, name, ns string, sel map[string]string, path string, value any, applied func(*corev1.Pod) bool) {
	t.Helper()
	ctx := t.Context()
	patch, err := json.Marshal([]map[string]any{{"op": "add", "path": path, "value": value}})
	if err != nil {
		t.Fatalf("kubetest: webhook %s: %v", name, err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		pt := admissionv1.PatchTypeJSONPatch
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true, Patch: patch, PatchType: &pt}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	url := srv.URL + "/mutate"
	fail, none := admissionregv1.Fail, admissionregv1.SideEffectClassNone
	hooks := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := hooks.Create(ctx, &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name: name + ".kubetest.invalid", ClientConfig: admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: sel},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: webhook %s: %v", name, err)
	}
	// Removed before the server closes (cleanups run last in, first out),
	// so that no pod create of a later step fails on it.
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hooks.Delete(dctx, name, metav1.DeleteOptions{}); err != nil {
			t.Logf("kubetest: delete webhook %s: %v", name, err)
		}
	})
	// The webhook takes effect once the API server has loaded it.
	deadline := time.Now().Add(settleWait)
	for {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-webhook-probe", Labels: sel},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Image: "kubetest.invalid/probe"}},
				Containers: []corev1.Container{{Name: "c", Image: "kubetest.invalid/probe", Env: []corev1.EnvVar{{Name: "E", Value: "e"}}}}}}
		got, err := e.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && applied(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: webhook %s not in effect after %v (last dry run: %v)", name, settleWait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
