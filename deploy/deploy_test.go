package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/kube"
)

// The names deploy/base gives the reconciler's identity and its policy.
const (
	systemNS       = "signet-system"
	checksNS       = "signet-checks"
	serviceAccount = "signet-reconciler"
	policyName     = "signet-reconciler-node-writes"
	// checksPolicyName is the policy on the reconciler's pods and MPIJobs
	// (checks-policy.yaml); ceilingParams its parameters ConfigMap.
	checksPolicyName = "signet-reconciler-checks"
	ceilingParams    = "signet-ceiling"
	// policyDenied is how the API server starts a denial by the policy.
	policyDenied = "ValidatingAdmissionPolicy '" + policyName + "'"
)

var vapGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}

// render builds deploy/base with kustomize in-process.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return renderDir(t, "base")
}

// apply server-side applies every object as the harness's admin, in
// kustomize's order (Namespaces first).
func apply(t *testing.T, env *kubetest.Env, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := t.Context()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s", gvk)
		body, err := json.Marshal(u.Object)
		require.NoError(t, err)
		_, err = env.Dynamic().Resource(m.Resource).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "signet-deploy-test"})
		require.NoError(t, err, "apply %s %s/%s", gvk.Kind, u.GetNamespace(), u.GetName())
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetNamespace() == namespace && u.GetName() == name {
			return u
		}
	}
	require.Failf(t, "object missing from deploy/base", "%s %s/%s", kind, namespace, name)
	return nil
}

// reconcilerIdentity returns a client configuration and a kubeconfig file
// for the reconciler's real ServiceAccount: a token from the TokenRequest
// API, as the Deployment's projected volume would hold.
func reconcilerIdentity(t *testing.T, env *kubetest.Env) (*rest.Config, string) {
	t.Helper()
	exp := int64(3600)
	tr, err := env.Client.CoreV1().ServiceAccounts(systemNS).CreateToken(t.Context(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := &rest.Config{
		Host:            env.Host(),
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData},
		UserAgent:       "deploy-test/" + serviceAccount,
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: env.Host(), CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: serviceAccount, Namespace: "default"}
	kc.CurrentContext = "kubetest"
	b, err := clientcmd.Write(*kc)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	return cfg, file
}

// TestDeployBase applies deploy/base to a real API server and checks, as
// the reconciler's ServiceAccount (a real token, not a test user the
// manifests were rewritten for), what the RBAC rules and the Node policy
// let it do.
func TestDeployBase(t *testing.T) {
	kubectl := filepath.Join(kubetest.ModuleRoot(), "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%s missing: run make kube-tools (%v)", kubectl, err)
	}
	objs := render(t)
	env := kubetest.Start(t)
	ctx := t.Context()
	env.InstallMPIJobCRD(ctx) // the checks' Role names kubeflow.org mpijobs
	apply(t, env, objs)

	t.Run("config", func(t *testing.T) {
		cm := find(t, objs, "ConfigMap", systemNS, "signet-config")
		data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
		file := filepath.Join(t.TempDir(), "config.yaml")
		require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
		cfg, err := reconciler.LoadConfig(file)
		require.NoError(t, err)
		assert.Equal(t, checksNS, cfg.Ceiling.Namespace)
		require.NotNil(t, cfg.Kubernetes.LeaderElection)
		assert.Equal(t, reconciler.LeaderElectionConfig{Namespace: systemNS, Name: serviceAccount}, *cfg.Kubernetes.LeaderElection,
			"rbac.yaml grants get/update on the Lease by this name")
	})

	t.Run("deployment passes restricted pod security", func(t *testing.T) {
		d := find(t, objs, "Deployment", systemNS, "signet-reconciler")
		tmpl, _, _ := unstructured.NestedMap(d.Object, "spec", "template")
		b, err := json.Marshal(tmpl)
		require.NoError(t, err)
		var pod corev1.Pod
		require.NoError(t, json.Unmarshal(b, &pod))
		pod.Name = "restricted-probe"
		require.NotNil(t, pod.Spec.AutomountServiceAccountToken)
		assert.False(t, *pod.Spec.AutomountServiceAccountToken)
		sa := find(t, objs, "ServiceAccount", systemNS, serviceAccount)
		automount, found, _ := unstructured.NestedBool(sa.Object, "automountServiceAccountToken")
		assert.True(t, found && !automount, "ServiceAccount mounts a token by default")
		_, err = env.Client.CoreV1().Pods(systemNS).Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "the reconciler's pod is refused by the namespace's pod security level")
	})

	for _, name := range []string{policyName, checksPolicyName} {
		t.Run("policy type-checks: "+name, func(t *testing.T) {
			var warnings []any
			require.Eventually(t, func() bool {
				u, err := env.Dynamic().Resource(vapGVR).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false
				}
				observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
				if observed != u.GetGeneration() {
					return false
				}
				warnings, _, _ = unstructured.NestedSlice(u.Object, "status", "typeChecking", "expressionWarnings")
				return true
			}, 30*time.Second, 100*time.Millisecond)
			assert.Empty(t, warnings, "type-checking warnings")
		})
	}

	// A GPU node with an operator's own label and taint.
	const nodeName = "gpu-0"
	env.CreateNode(ctx, kubetest.NodeOptions{Name: nodeName, GPUs: 8, Labels: map[string]string{"example.com/pool": "gpu"}})
	n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	require.NoError(t, err)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	n.Annotations = map[string]string{"example.com/owner": "ml-infra"}
	_, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)

	cfg, kubeconfig := reconcilerIdentity(t, env)
	rc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	// The policy takes effect once the API server has loaded it: probe
	// with a dry run of a change it forbids.
	require.Eventually(t, func() bool {
		n, err := rc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		n.Spec.Taints[len(n.Spec.Taints)-1].Value = "probe"
		_, err = rc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), policyDenied)
	}, 30*time.Second, 200*time.Millisecond, "the node policy never refused a dry-run change of another taint")

	t.Run("node writes", func(t *testing.T) { nodeWrites(t, env, rc, nodeName) })
	t.Run("rbac", func(t *testing.T) { rbac(t, rc, nodeName) })
	t.Run("kubectl auth can-i", func(t *testing.T) { canI(t, kubectl, kubeconfig) })
	t.Run("evidence tip ConfigMap", func(t *testing.T) { tipConfigMap(t, rc) })
}

// tipConfigMap: as the reconciler, the keeper of the shipped config reads
// the shipped (empty) tip ConfigMap and swaps a tip into it; a stale swap
// is refused; no other ConfigMap of the namespace can be read.
func tipConfigMap(t *testing.T, rc kubernetes.Interface) {
	ctx := t.Context()
	k := kube.NewTipKeeper(rc, systemNS, tipConfigMapName)
	empty, err := k.LoadTip(ctx)
	require.NoError(t, err)
	assert.Empty(t, empty.Tip, "shipped without a tip")
	next := evidence.KeptTip{URL: "https://git.example.invalid/fleet/specs.git", Branch: "signet/evidence", Tip: strings.Repeat("1", 40)}
	_, err = k.SwapTip(ctx, empty, next)
	require.NoError(t, err)
	_, err = k.SwapTip(ctx, empty, next)
	require.ErrorIs(t, err, evidence.ErrTipConflict)
	_, err = rc.CoreV1().ConfigMaps(systemNS).Get(ctx, "signet-config", metav1.GetOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
}

const tipConfigMapName = "signet-evidence-tip"

// TestFinding6ShippedTipKept: the shipped deployment keeps stateDir on an
// emptyDir, so its configuration must keep the evidence tip in an object
// that outlives the pod: a ConfigMap the base ships, in the reconciler's
// namespace, empty (the reconciler fills it).
func TestFinding6ShippedTipKept(t *testing.T) {
	objs := render(t)
	cm := find(t, objs, "ConfigMap", systemNS, "signet-config")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	file := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
	cfg, err := reconciler.LoadConfig(file)
	require.NoError(t, err)

	var dep appsv1.Deployment
	decode(t, find(t, objs, "Deployment", systemNS, "signet-reconciler"), &dep)
	var stateVolume string
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == cfg.StateDir {
			stateVolume = m.Name
		}
	}
	require.NotEmpty(t, stateVolume, "stateDir %s is on no volume", cfg.StateDir)
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == stateVolume && v.PersistentVolumeClaim != nil {
			return // a persistent StateDir keeps the tip itself
		}
	}
	require.NotNil(t, cfg.Evidence.TipConfigMap, "stateDir is lost with the pod and evidence.tipConfigMap is unset: a restart forgets the evidence tip")
	assert.Equal(t, reconciler.ObjectRef{Namespace: systemNS, Name: tipConfigMapName}, *cfg.Evidence.TipConfigMap, "rbac.yaml grants get/update on this name")
	tip := find(t, objs, "ConfigMap", systemNS, tipConfigMapName)
	_, hasData := tip.Object["data"]
	assert.False(t, hasData, "the shipped tip ConfigMap holds data: a re-apply would overwrite the kept tip")
}

// nodeWrites checks what the policy lets the reconciler change on a Node.
func nodeWrites(t *testing.T, env *kubetest.Env, rc kubernetes.Interface, nodeName string) {
	ctx := t.Context()
	signetTaint := corev1.Taint{Key: kube.ReservationTaintKey, Value: "run-1", Effect: corev1.TaintEffectNoSchedule}
	withoutSignetTaint := func(ts []corev1.Taint) []corev1.Taint {
		return slices.DeleteFunc(slices.Clone(ts), func(t corev1.Taint) bool { return t.Key == kube.ReservationTaintKey })
	}
	type tc struct {
		name   string
		mutate func(n *corev1.Node)
		patch  string // a strategic merge patch instead of mutate + Update
		// refused is the policy's message for a refused change; "" when
		// the change is allowed.
		refused string
	}
	const (
		msgTaint      = "may change no taint of a Node but signet.dev/reserved"
		msgLabel      = "may change no label of a Node but"
		msgAnnotation = "may change no annotation of a Node but"
		msgSpec       = "may change no field of a Node's spec but"
		msgMeta       = "may change no finalizer, owner reference or generateName"
	)
	cases := []tc{
		{name: "reserve: taint, annotation, cordon", mutate: func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, signetTaint)
			n.Annotations[kube.ReservationAnnotation] = `{"run":"run-1"}`
			n.Spec.Unschedulable = true
		}},
		{name: "certify: labels and identity annotation", mutate: func(n *corev1.Node) {
			n.Labels[kube.CertifiedProfileLabel] = "h100"
			n.Labels[kube.CertifiedRunLabel] = "run-1"
			n.Labels[kube.CertifiedUntilLabel] = "20300101T000000Z"
			n.Annotations[kube.CertifiedIdentityAnnotation] = `{"uid":"u","bootID":"b"}`
		}},
		{name: "change another taint", refused: msgTaint, mutate: func(n *corev1.Node) {
			for i := range n.Spec.Taints {
				if n.Spec.Taints[i].Key == "example.com/dedicated" {
					n.Spec.Taints[i].Value = "cpu"
				}
			}
		}},
		{name: "remove another taint", refused: msgTaint, mutate: func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "example.com/dedicated" })
		}},
		{name: "add another taint", refused: msgTaint, mutate: func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute})
		}},
		{name: "reorder the other taints", refused: msgTaint, mutate: func(n *corev1.Node) {
			others := withoutSignetTaint(n.Spec.Taints)
			slices.Reverse(others)
			n.Spec.Taints = append(others, slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key != kube.ReservationTaintKey })...)
		}},
		{name: "add another label", refused: msgLabel, mutate: func(n *corev1.Node) {
			n.Labels["example.com/team"] = "a"
		}},
		{name: "add another label by patch", refused: msgLabel, patch: `{"metadata":{"labels":{"example.com/team":"a"}}}`},
		{name: "change another label", refused: msgLabel, mutate: func(n *corev1.Node) {
			n.Labels["example.com/pool"] = "cpu"
		}},
		{name: "add a label under signet.dev/ that is not signet's", refused: msgLabel, mutate: func(n *corev1.Node) {
			n.Labels["signet.dev/certified-other"] = "x"
		}},
		{name: "remove another annotation", refused: msgAnnotation, mutate: func(n *corev1.Node) {
			delete(n.Annotations, "example.com/owner")
		}},
		{name: "change the provider ID", refused: msgSpec, mutate: func(n *corev1.Node) {
			n.Spec.ProviderID = "fake://elsewhere"
		}},
		{name: "add a finalizer", refused: msgMeta, mutate: func(n *corev1.Node) {
			n.Finalizers = append(n.Finalizers, "example.com/hold")
		}},
		{name: "release: taint, annotation, cordon by patch", patch: `{"metadata":{"annotations":{"signet.dev/reservation":null}},"spec":{"unschedulable":null}}`},
		{name: "release: remove signet's taint", mutate: func(n *corev1.Node) {
			n.Spec.Taints = withoutSignetTaint(n.Spec.Taints)
		}},
	}
	// Give the node a second taint of its own so that reordering can be
	// tried.
	n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	require.NoError(t, err)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/second", Effect: corev1.TaintEffectPreferNoSchedule})
	_, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, err := rc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			require.NoError(t, err)
			if before.Labels == nil {
				before.Labels = map[string]string{}
			}
			if before.Annotations == nil {
				before.Annotations = map[string]string{}
			}
			if c.patch != "" {
				_, err = rc.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(c.patch), metav1.PatchOptions{})
			} else {
				n := before.DeepCopy()
				c.mutate(n)
				_, err = rc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			}
			after, gerr := rc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			require.NoError(t, gerr)
			if c.refused == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
			assert.ErrorContains(t, err, policyDenied)
			assert.ErrorContains(t, err, c.refused)
			assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the refused change was stored")
		})
	}

	final, err := rc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, final.Spec.Unschedulable)
	assert.NotContains(t, final.Annotations, kube.ReservationAnnotation)
	assert.Equal(t, []string{"example.com/dedicated", "example.com/second"}, taintKeys(final.Spec.Taints))

	t.Run("the policy binds only the reconciler", func(t *testing.T) {
		n := final.DeepCopy()
		n.Labels["example.com/team"] = "a"
		_, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err, "the admin's change of another label was refused")
	})
}

func taintKeys(ts []corev1.Taint) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Key)
	}
	return out
}

// rbac checks requests RBAC refuses the reconciler, and that it may do
// what the backends need.
func rbac(t *testing.T, rc kubernetes.Interface, nodeName string) {
	ctx := t.Context()
	forbidden := func(t *testing.T, err error, want string) {
		t.Helper()
		require.Error(t, err)
		assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
		assert.ErrorContains(t, err, want)
	}
	t.Run("delete a node", func(t *testing.T) {
		err := rc.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
		forbidden(t, err, `cannot delete resource "nodes"`)
	})
	t.Run("create a node", func(t *testing.T) {
		_, err := rc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rogue"}}, metav1.CreateOptions{})
		forbidden(t, err, `cannot create resource "nodes"`)
	})
	t.Run("update node status", func(t *testing.T) {
		n, err := rc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		require.NoError(t, err)
		_, err = rc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		forbidden(t, err, `cannot update resource "nodes/status"`)
	})
	for _, ns := range []string{systemNS, checksNS, "default"} {
		t.Run("get secrets in "+ns, func(t *testing.T) {
			_, err := rc.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			forbidden(t, err, `cannot list resource "secrets"`)
		})
	}
	t.Run("pods outside the checks namespace", func(t *testing.T) {
		_, err := rc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		forbidden(t, err, `cannot create resource "pods"`)
	})
	t.Run("a check pod and its ConfigMap in the checks namespace", func(t *testing.T) {
		_, err := rc.CoreV1().ConfigMaps(checksNS).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "run-1-script"},
			Immutable:  ptr(true),
			Data:       map[string]string{"check.sh": "exit 0\n"},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "run-1-check-0"},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false),
				RestartPolicy:                corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "check", Image: "registry.example.invalid/gpu-certification/check@sha256:" + strings.Repeat("0", 64),
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr(false),
						Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
			},
		}
		_, err = rc.CoreV1().Pods(checksNS).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		// The checks policy binds the real ServiceAccount (issue 21,
		// finding 3): the same pod on a node of its choosing, with the
		// node's PID namespace, is refused.
		pod.Spec.NodeName, pod.Spec.HostPID = nodeName, true
		_, err = rc.CoreV1().Pods(checksNS).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.Error(t, err)
		assert.ErrorContains(t, err, "ValidatingAdmissionPolicy '"+checksPolicyName+"'")
		require.NoError(t, rc.CoreV1().ConfigMaps(checksNS).Delete(ctx, "run-1-script", metav1.DeleteOptions{}))
	})
	t.Run("the leader-election Lease", func(t *testing.T) {
		_, err := rc.CoordinationV1().Leases(systemNS).List(ctx, metav1.ListOptions{})
		forbidden(t, err, `cannot list resource "leases"`)
		_, err = rc.CoordinationV1().Leases(systemNS).Get(ctx, "someone-else", metav1.GetOptions{})
		forbidden(t, err, `cannot get resource "leases"`)
	})
}

func ptr[T any](v T) *T { return &v }

// canI runs the stock kubectl as the reconciler. The resource rules of
// `auth can-i --list` must be exactly these: everything the reconciler may
// do, per namespace, and nothing more. (Non-resource URLs come from the API
// server's default discovery roles; they are checked to be read-only.)
func canI(t *testing.T, kubectl, kubeconfig string) {
	// The self-review rules every authenticated user has
	// (system:basic-user) appear in every listing.
	selfReviews := []string{
		"selfsubjectreviews.authentication.k8s.io [] [] [create]",
		"selfsubjectaccessreviews.authorization.k8s.io [] [] [create]",
		"selfsubjectrulesreviews.authorization.k8s.io [] [] [create]",
	}
	clusterWide := []string{
		"nodes [] [] [get list watch update patch]",
		"pods [] [] [get list watch]",
	}
	want := map[string][]string{
		// "default": a namespace where nothing is granted — the
		// cluster-wide rules alone.
		"default": slices.Concat(selfReviews, clusterWide),
		// kubectl merges the cluster-wide and the namespace's pods rules.
		checksNS: slices.Concat(selfReviews, clusterWide[:1], []string{
			"pods [] [] [get list watch create delete]",
			"pods/log [] [] [get]",
			"configmaps [] [] [create get list delete]",
			"mpijobs.kubeflow.org [] [] [create get list watch delete]",
			"jobs.batch [] [] [get]",
		}),
		systemNS: slices.Concat(selfReviews, clusterWide, []string{
			"leases.coordination.k8s.io [] [signet-reconciler] [get update]",
			"leases.coordination.k8s.io [] [] [create]",
			"events [] [] [create patch]",
			"configmaps [] [signet-evidence-tip] [get update]",
		}),
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", t.TempDir()}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		if stderr.Len() > 0 {
			t.Logf("kubectl %v stderr: %s", args, stderr.String())
		}
		return string(out), cmd.ProcessState.ExitCode()
	}

	for ns, rules := range want {
		t.Run("list -n "+ns, func(t *testing.T) {
			out, code := run("auth", "can-i", "--list", "--no-headers", "-n", ns)
			require.Equal(t, 0, code, out)
			var resources []string
			for line := range strings.Lines(out) {
				fields := strings.Fields(line)
				if len(fields) == 0 {
					continue
				}
				if strings.HasPrefix(fields[0], "[") {
					// A non-resource URL rule: "[/path …] [] [verbs]".
					assert.Equal(t, "[get]", fields[len(fields)-1], "non-resource rule %q", line)
					continue
				}
				resources = append(resources, strings.Join(fields, " "))
			}
			assert.ElementsMatch(t, rules, resources, "kubectl auth can-i --list -n %s:\n%s", ns, out)
		})
	}

	checks := []struct {
		args []string
		yes  bool
	}{
		{[]string{"update", "nodes"}, true},
		{[]string{"patch", "nodes"}, true},
		{[]string{"delete", "nodes"}, false},
		{[]string{"create", "nodes"}, false},
		{[]string{"update", "nodes", "--subresource=status"}, false},
		{[]string{"create", "pods", "-n", checksNS}, true},
		{[]string{"delete", "pods", "-n", checksNS}, true},
		{[]string{"create", "pods", "-n", systemNS}, false},
		{[]string{"create", "pods", "-n", "default"}, false},
		{[]string{"create", "pods", "--subresource=exec", "-n", checksNS}, false},
		{[]string{"create", "pods", "--subresource=attach", "-n", checksNS}, false},
		{[]string{"create", "pods", "--subresource=portforward", "-n", checksNS}, false},
		{[]string{"create", "pods", "--subresource=eviction", "-n", checksNS}, false},
		{[]string{"get", "secrets", "--all-namespaces"}, false},
		{[]string{"list", "secrets", "-n", systemNS}, false},
		{[]string{"get", "secrets", "-n", checksNS}, false},
		{[]string{"create", "mpijobs.kubeflow.org", "-n", checksNS}, true},
		{[]string{"create", "mpijobs.kubeflow.org", "-n", systemNS}, false},
		{[]string{"update", "leases.coordination.k8s.io/signet-reconciler", "-n", systemNS}, true},
		{[]string{"update", "leases.coordination.k8s.io/other", "-n", systemNS}, false},
		{[]string{"create", "configmaps", "-n", systemNS}, false},
		{[]string{"update", "configmaps/signet-evidence-tip", "-n", systemNS}, true},
		{[]string{"delete", "configmaps/signet-evidence-tip", "-n", systemNS}, false},
		{[]string{"update", "configmaps/other", "-n", systemNS}, false},
		{[]string{"update", "configmaps", "-n", checksNS}, false},
		{[]string{"*", "*", "--all-namespaces"}, false},
	}
	for _, c := range checks {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, code := run(append([]string{"auth", "can-i"}, c.args...)...)
			if c.yes {
				assert.Equal(t, 0, code, "kubectl auth can-i %v: %s", c.args, out)
				assert.Equal(t, "yes\n", out)
			} else {
				assert.Equal(t, 1, code, "kubectl auth can-i %v: %s", c.args, out)
				assert.Equal(t, "no\n", out)
			}
		})
	}
}

// decode converts a rendered object into its typed form.
func decode(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	b, err := json.Marshal(u.Object)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, into))
}

// port returns the port of a listen address as a number.
func port(t *testing.T, field, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, "%s: %q", field, addr)
	n, err := strconv.ParseInt(p, 10, 32)
	require.NoError(t, err, "%s: %q", field, addr)
	return int32(n)
}

// TestFinding7ShippedDaemonExposure renders deploy/base and checks what
// of the daemon the shipped manifests expose: status and the trigger on
// loopback with a trigger token, a NetworkPolicy that admits the webhook
// and metrics ports and nothing else, the probes on their own port, and
// every secret the configuration names mounted.
func TestFinding7ShippedDaemonExposure(t *testing.T) {
	objs := render(t)
	cm := find(t, objs, "ConfigMap", systemNS, "signet-config")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	file := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
	cfg, err := reconciler.LoadConfig(file)
	require.NoError(t, err)

	var dep appsv1.Deployment
	decode(t, find(t, objs, "Deployment", systemNS, "signet-reconciler"), &dep)
	require.Len(t, dep.Spec.Template.Spec.Containers, 1)
	c := dep.Spec.Template.Spec.Containers[0]
	t.Run("status and trigger on loopback, with a token", func(t *testing.T) {
		host, _, err := net.SplitHostPort(cfg.Listen)
		require.NoError(t, err)
		ip := net.ParseIP(host)
		assert.True(t, host == "localhost" || (ip != nil && ip.IsLoopback()), "listen: %q is not loopback", cfg.Listen)
		assert.NotEmpty(t, cfg.TriggerTokenFile, "triggerTokenFile")
		assert.NotEmpty(t, cfg.Webhook.GitHubSecretFile+cfg.Webhook.GitLabTokenFile, "a webhook receiver")
	})
	webhook, metrics, probe := port(t, "webhook.listen", cfg.Webhook.Listen), port(t, "metricsListen", cfg.MetricsListen), port(t, "probeListen", cfg.ProbeListen)

	t.Run("network policy admits webhook and metrics only", func(t *testing.T) {
		var np networkingv1.NetworkPolicy
		decode(t, find(t, objs, "NetworkPolicy", systemNS, "signet-reconciler"), &np)
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		require.NoError(t, err)
		assert.False(t, sel.Empty(), "the policy selects every pod of the namespace")
		assert.True(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)), "the policy does not select the reconciler's pod")
		assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
		var admitted []int32
		for _, rule := range np.Spec.Ingress {
			require.NotEmpty(t, rule.Ports, "an ingress rule without ports admits every port")
			for _, p := range rule.Ports {
				require.NotNil(t, p.Port)
				require.Nil(t, p.EndPort, "a port range")
				require.Equal(t, intstr.Int, p.Port.Type, "port %s: name it by number, as config.yaml does", p.Port)
				admitted = append(admitted, p.Port.IntVal)
			}
		}
		assert.ElementsMatch(t, []int32{webhook, metrics}, admitted)
	})
	t.Run("container ports and probes", func(t *testing.T) {
		var ports []int32
		named := map[string]int32{}
		for _, p := range c.Ports {
			ports = append(ports, p.ContainerPort)
			named[p.Name] = p.ContainerPort
		}
		assert.ElementsMatch(t, []int32{webhook, metrics, probe}, ports)
		for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			require.NotNil(t, pr, name)
			require.NotNil(t, pr.HTTPGet, name)
			p := pr.HTTPGet.Port.IntVal
			if pr.HTTPGet.Port.Type == intstr.String {
				p = named[pr.HTTPGet.Port.StrVal]
			}
			assert.Equal(t, probe, p, "%s probe is not on probeListen", name)
		}
		// A new pod fetches the whole evidence branch before /healthz
		// answers: the liveness probe must not restart it meanwhile.
		sp := c.StartupProbe
		window := time.Duration(sp.PeriodSeconds) * time.Duration(sp.FailureThreshold) * time.Second
		assert.GreaterOrEqual(t, window, 30*time.Minute, "the startup probe gives a first fetch of the evidence branch only %s", window)
	})
	t.Run("secrets named in the config are mounted", func(t *testing.T) {
		for field, f := range map[string]string{"triggerTokenFile": cfg.TriggerTokenFile, "webhook.githubSecretFile": cfg.Webhook.GitHubSecretFile} {
			assert.True(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return filepath.Dir(f) == m.MountPath
			}), "%s: %s is on no volume", field, f)
		}
	})
}

// TestFinding21_3ShippedCeilingAgrees: the checks policy's parameters
// (checks-policy.yaml, ConfigMap signet-ceiling) are the ceiling and signet
// image of the shipped config.yaml, so the API server enforces the bound
// the reconciler checks; and the checks namespace enforces the strictest
// Pod Security level that ceiling allows (baseline forbids every hostPath,
// host network, privileged and capabilities beyond its list).
func TestFinding21_3ShippedCeilingAgrees(t *testing.T) {
	objs := render(t)
	cm := find(t, objs, "ConfigMap", systemNS, "signet-config")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	file := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
	cfg, err := reconciler.LoadConfig(file)
	require.NoError(t, err)
	var params corev1.ConfigMap
	decode(t, find(t, objs, "ConfigMap", systemNS, ceilingParams), &params)
	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	ceil := cfg.Ceiling
	const differs = "%s: the policy's parameter differs from config.yaml"
	assert.Equal(t, cfg.Kubernetes.SignetImage, params.Data["signetImage"], differs, "signetImage")
	assert.Equal(t, ceil.Registries, lines(params.Data["registries"]), differs, "registries")
	assert.Equal(t, ceil.HostPaths, lines(params.Data["hostPaths"]), differs, "hostPaths")
	assert.Equal(t, ceil.Capabilities, lines(params.Data["capabilities"]), differs, "capabilities")
	assert.Equal(t, strconv.FormatBool(ceil.AllowPrivileged), params.Data["allowPrivileged"], differs, "allowPrivileged")
	assert.Equal(t, strconv.FormatBool(ceil.HostNetwork), params.Data["hostNetwork"], differs, "hostNetwork")
	assert.Len(t, params.Data, 6, "a parameter the policy does not read, or one config.yaml does not have")

	var ns corev1.Namespace
	decode(t, find(t, objs, "Namespace", "", ceil.Namespace), &ns)
	// Pod Security baseline's capability list (the Kubernetes docs,
	// "Pod Security Standards").
	baselineCaps := []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
	want := "baseline"
	if len(ceil.HostPaths) > 0 || ceil.HostNetwork || ceil.AllowPrivileged ||
		slices.ContainsFunc(ceil.Capabilities, func(c string) bool { return !slices.Contains(baselineCaps, c) }) {
		want = "privileged"
	}
	assert.Equal(t, want, ns.Labels["pod-security.kubernetes.io/enforce"], "the checks namespace's Pod Security level for this ceiling")
}
