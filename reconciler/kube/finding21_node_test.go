package kube

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
)

// reconcilerUser is the username of deploy/base's ServiceAccount, which the
// shipped node policy matches.
const reconcilerUser = "system:serviceaccount:signet-system:signet-reconciler"

// asReconciler installs deploy/base/node-policy.yaml unchanged, grants
// reconcilerUser what deploy/base's ClusterRole grants on nodes and pods,
// and returns a client acting as that user (the admin impersonates it, so
// the policy's matchCondition on the username applies). It returns once the
// policy refuses a change it must refuse.
func asReconciler(t *testing.T, env *kubetest.Env) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	raw, err := os.ReadFile("../../deploy/base/node-policy.yaml")
	require.NoError(t, err)
	docs := strings.Split(string(raw), "\n---\n")
	require.Len(t, docs, 2)
	var vap admissionv1.ValidatingAdmissionPolicy
	var bind admissionv1.ValidatingAdmissionPolicyBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &vap))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &bind))
	ar := env.Client.AdmissionregistrationV1()
	_, err = ar.ValidatingAdmissionPolicies().Create(ctx, &vap, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = ar.ValidatingAdmissionPolicyBindings().Create(ctx, &bind, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "signet-reconciler"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "signet-reconciler"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "signet-reconciler"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: reconcilerUser}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: reconcilerUser}
	sa, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	// The policy is active once it refuses a dry run of a label change.
	probe := env.CreateNode(ctx, kubetest.NodeOptions{Name: "policy-probe"})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		n, err := sa.CoreV1().Nodes().Get(ctx, probe.Name, metav1.GetOptions{})
		require.NoError(ct, err)
		n.Labels["example.com/probe"] = strconv.FormatInt(time.Now().UnixNano(), 10)
		_, err = sa.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.ErrorContains(ct, err, "denied request")
	}, 30*time.Second, 200*time.Millisecond)
	return sa
}

// adminUpdate changes node name as the cluster's admin (an operator or
// another controller).
func adminUpdate(t *testing.T, env *kubetest.Env, name string, change func(n *corev1.Node)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := env.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = env.Client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		return err
	}))
}

func taintOf(n *corev1.Node, key string) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == key {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// TestFinding21_2ReleaseOnRealCluster: with the node lifecycle controller
// running (it taints every cordoned node node.kubernetes.io/unschedulable:
// NoSchedule; kubetest's simulated kubelets send it heartbeats and Lease
// renewals) and the shipped node policy, a reservation made and released
// as the reconciler's identity. Before the fix, release wrote back the prior
// taint list, which drops the controller's taint, and the policy refused
// it: the node stayed reserved and cordoned for ever.
func TestFinding21_2ReleaseOnRealCluster(t *testing.T) {
	ctx := t.Context()
	env := kubetest.StartWith(t, kubetest.Options{NodeLifecycle: true})
	sa := asReconciler(t, env)
	n := env.CreateNode(ctx, kubetest.NodeOptions{Name: "gpu-1", GPUs: 8})
	node := backend.Node{Name: n.Name, UID: string(n.UID)}
	f := NewFleet(sa, FleetOptions{Cluster: "c", Evidence: "e"})
	require.NoError(t, f.Reserve(ctx, "r2", []backend.Node{node}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got, err := env.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		require.NoError(ct, err)
		assert.NotNil(ct, taintOf(got, UnschedulableTaintKey), "the lifecycle controller taints the cordoned node")
	}, 60*time.Second, 200*time.Millisecond)

	require.NoError(t, f.Release(ctx, "r2", node), "release of a node the lifecycle controller tainted")
	got, err := env.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, got.Spec.Unschedulable)
	assert.Nil(t, taintOf(got, ReservationTaintKey))
	assert.NotContains(t, got.Annotations, ReservationAnnotation)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got, err := env.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Nil(ct, taintOf(got, UnschedulableTaintKey), "the lifecycle controller lifts its taint")
		assert.Empty(ct, got.Spec.Taints)
	}, 60*time.Second, 200*time.Millisecond)
}

// TestFinding21_9ReleaseKeepsOthersDecisions: while a node is reserved, the
// owner of a prior taint changes its value and another removes one; release
// must not set them back. Before the fix both were restored (and the
// policy refused the release).
func TestFinding21_9ReleaseKeepsOthersDecisions(t *testing.T) {
	ctx := t.Context()
	env := kubetest.StartWith(t, kubetest.Options{NodeLifecycle: true})
	sa := asReconciler(t, env)
	n := env.CreateNode(ctx, kubetest.NodeOptions{Name: "gpu-1", GPUs: 8})
	adminUpdate(t, env, n.Name, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints,
			corev1.Taint{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectPreferNoSchedule},
			corev1.Taint{Key: "example.com/flaky", Effect: corev1.TaintEffectPreferNoSchedule})
	})
	node := backend.Node{Name: n.Name, UID: string(n.UID)}
	f := NewFleet(sa, FleetOptions{Cluster: "c", Evidence: "e"})
	require.NoError(t, f.Reserve(ctx, "r9", []backend.Node{node}))
	adminUpdate(t, env, n.Name, func(n *corev1.Node) {
		var kept []corev1.Taint
		for _, tn := range n.Spec.Taints {
			switch tn.Key {
			case "example.com/maintenance":
				tn.Value = "now"
			case "example.com/flaky":
				continue
			}
			kept = append(kept, tn)
		}
		n.Spec.Taints = kept
	})
	require.NoError(t, f.Release(ctx, "r9", node))
	got, err := env.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	require.NoError(t, err)
	m := taintOf(got, "example.com/maintenance")
	require.NotNil(t, m)
	assert.Equal(t, "now", m.Value, "the owner's new value is kept")
	assert.Nil(t, taintOf(got, "example.com/flaky"), "a taint its owner removed stays removed")
	assert.Nil(t, taintOf(got, ReservationTaintKey))
}

// TestFinding21_6NodePolicyAllowsOnlyReservation: as the reconciler's
// identity, changes beyond a reservation are refused by the shipped node
// policy. Before the fix each was admitted.
func TestFinding21_6NodePolicyAllowsOnlyReservation(t *testing.T) {
	ctx := t.Context()
	env := kubetest.Start(t)
	sa := asReconciler(t, env)
	env.CreateNode(ctx, kubetest.NodeOptions{Name: "gpu-1", GPUs: 8})
	annotation := `{"cluster":"c","evidence":"e","run":"r6","uid":"u","at":"2026-12-01T00:00:00Z","prior":{"unschedulable":false,"taints":null}}`
	attempt := func(t *testing.T, change func(n *corev1.Node)) {
		t.Helper()
		n, err := sa.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		require.NoError(t, err)
		before := n.DeepCopy()
		change(n)
		_, err = sa.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		assert.ErrorContains(t, err, "denied request", "change admitted")
		after, err := sa.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, before.Spec, after.Spec)
		assert.Equal(t, before.Annotations, after.Annotations)
	}
	reserved := func(value string, effect corev1.TaintEffect, ann bool) func(n *corev1.Node) {
		return func(n *corev1.Node) {
			if ann {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations[ReservationAnnotation] = annotation
			}
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ReservationTaintKey, Value: value, Effect: effect})
		}
	}
	t.Run("NoExecute reservation taint", func(t *testing.T) {
		attempt(t, reserved("r6", corev1.TaintEffectNoExecute, true))
	})
	t.Run("reservation taint without a reservation", func(t *testing.T) {
		attempt(t, reserved("r6", corev1.TaintEffectNoSchedule, false))
	})
	t.Run("reservation taint for another run", func(t *testing.T) {
		attempt(t, reserved("r", corev1.TaintEffectNoSchedule, true))
	})
	t.Run("uncordon an operator's cordon", func(t *testing.T) {
		adminUpdate(t, env, "gpu-1", func(n *corev1.Node) { n.Spec.Unschedulable = true })
		attempt(t, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	})
	t.Run("uncordon while adding a reservation", func(t *testing.T) {
		reserve := reserved("r6", corev1.TaintEffectNoSchedule, true)
		attempt(t, func(n *corev1.Node) { reserve(n); n.Spec.Unschedulable = false })
	})
	t.Run("a reservation is admitted", func(t *testing.T) {
		adminUpdate(t, env, "gpu-1", func(n *corev1.Node) { n.Spec.Unschedulable = false })
		n, err := sa.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		require.NoError(t, err)
		f := NewFleet(sa, FleetOptions{Cluster: "c", Evidence: "e"})
		node := backend.Node{Name: n.Name, UID: string(n.UID)}
		require.NoError(t, f.Reserve(context.WithoutCancel(ctx), "r6", []backend.Node{node}))
		require.NoError(t, f.Release(ctx, "r6", node))
	})
}

// TestFinding21_10HandMadeCertificationSwept: certification labels someone
// wrote by hand (the identity annotation copied correctly) survive the
// start-up sweep unless the evidence branch backs them and their expiry is
// within the configured TTL. Before the fix labels naming a run that never
// ran, expiring in 2099, were kept.
func TestFinding21_10HandMadeCertificationSwept(t *testing.T) {
	ctx := t.Context()
	env := kubetest.Start(t)
	now := time.Now().UTC()
	f := NewFleet(env.Client, FleetOptions{Cluster: "c", Evidence: "e", Now: func() time.Time { return now },
		Certify: &CertifyOptions{TTL: 30 * 24 * time.Hour}})
	// The evidence branch: run "real" passed on every node under profile
	// "burnin".
	vouched := func(run, node, profile string) bool { return run == "real" && profile == "burnin" }
	label := func(name, run, until string) {
		n := env.CreateNode(ctx, kubetest.NodeOptions{Name: name, GPUs: 8})
		adminUpdate(t, env, name, func(n *corev1.Node) {
			n.Labels[CertifiedProfileLabel], n.Labels[CertifiedRunLabel], n.Labels[CertifiedUntilLabel] = "burnin", run, until
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[CertifiedIdentityAnnotation] = string(n.UID) + "/" + n.Status.NodeInfo.BootID
		})
		_ = n
	}
	within := now.Add(24 * time.Hour).Format(CertifiedUntilFormat)
	label("never-ran", "never-ran", within)
	label("far-future", "real", "20991231T000000Z")
	label("genuine", "real", within)
	require.NoError(t, f.SweepCertified(ctx, vouched))
	for name, kept := range map[string]bool{"never-ran": false, "far-future": false, "genuine": true} {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		_, has := n.Labels[CertifiedRunLabel]
		assert.Equal(t, kept, has, "%s: certification kept", name)
	}
}
