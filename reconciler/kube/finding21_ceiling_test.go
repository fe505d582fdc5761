package kube

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// The shipped ceiling's images (deploy/base/checks-policy.yaml's
// signet-ceiling ConfigMap): the test runs with those parameters unchanged.
const (
	shippedSignetImage   = "registry.example.invalid/signet@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	shippedWorkloadImage = "registry.example.invalid/gpu-certification/nccl@sha256:4444444444444444444444444444444444444444444444444444444444444444"
	checksPolicyDenied   = "ValidatingAdmissionPolicy 'signet-reconciler-checks'"
	shippedChecksNS      = "signet-checks"
)

// installChecksPolicy creates deploy/base/checks-policy.yaml unchanged (its
// parameters ConfigMap in signet-system, the policy and its binding),
// grants reconcilerUser the checks Role of deploy/base/rbac.yaml in
// signet-checks, and returns once the policy refuses, as reconcilerUser, a
// pod it must refuse. The client returned acts as reconcilerUser (see
// asReconciler).
func installChecksPolicy(t *testing.T, env *kubetest.Env) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	ctx := t.Context()
	sa := asReconciler(t, env)
	raw, err := os.ReadFile("../../deploy/base/checks-policy.yaml")
	require.NoError(t, err)
	docs := strings.Split(string(raw), "\n---\n")
	require.Len(t, docs, 3)
	var params corev1.ConfigMap
	var vap admissionv1.ValidatingAdmissionPolicy
	var bind admissionv1.ValidatingAdmissionPolicyBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &params))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &vap))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[2]), &bind))
	for _, ns := range []string{params.Namespace, shippedChecksNS} {
		_, err = env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = env.Client.CoreV1().ConfigMaps(params.Namespace).Create(ctx, &params, metav1.CreateOptions{})
	require.NoError(t, err)
	ar := env.Client.AdmissionregistrationV1()
	_, err = ar.ValidatingAdmissionPolicies().Create(ctx, &vap, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = ar.ValidatingAdmissionPolicyBindings().Create(ctx, &bind, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().Roles(shippedChecksNS).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "signet-reconciler-checks"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "list", "delete"}},
			{APIGroups: []string{"kubeflow.org"}, Resources: []string{"mpijobs"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().RoleBindings(shippedChecksNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "signet-reconciler-checks"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "signet-reconciler-checks"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: reconcilerUser}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: reconcilerUser}
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)

	// The policy is active once it refuses a dry run of a pod that breaks
	// many of its rules at once (so that it is refused with any one rule
	// broken by a mutation).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := sa.CoreV1().Pods(shippedChecksNS).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"},
			Spec: corev1.PodSpec{NodeName: "policy-probe", HostPID: true, HostIPC: true,
				Containers: []corev1.Container{{Name: "c", Image: "attacker"}}},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.ErrorContains(ct, err, checksPolicyDenied)
	}, 30*time.Second, 200*time.Millisecond)
	return sa, dyn
}

// ceilingCheckRun is a check within the shipped ceiling: its workload image
// is of the shipped registry, it mounts an allowed host path.
func ceilingCheckRun(run, script string, parts ...evidence.Participant) *backend.CheckRun {
	c := testCheckRun(run, script, parts...)
	c.Check.GPUCount = 1
	c.Check.Workload = &specs.Workload{Image: shippedWorkloadImage}
	c.Deadline = time.Now().Add(2 * time.Minute)
	c.Check.Deadline = 120
	return c
}

// TestFinding21_3CeilingEnforcedByAPIServer: as the reconciler's
// ServiceAccount (its username, impersonated by the admin), the real
// kube-apiserver (started with --allow-privileged=true, as real clusters
// run) refuses each property of the finding's pod on its own — nodeName,
// host namespaces, root with SYS_ADMIN, a writable or non-allowed host path,
// an unpinned or foreign image, a Secret or token volume — through
// deploy/base/checks-policy.yaml, applied unchanged with its shipped
// parameters; signet's own rendered pods and MPIJobs are admitted. The
// namespace itself allows privileged pods (Pod Security `privileged`, as
// shipped): the policy is what refuses. The kubelet's container runtime is
// simulated by kubetest's Agent and the MPI Operator by its stand-in; the
// control plane is real.
func TestFinding21_3CeilingEnforcedByAPIServer(t *testing.T) {
	ctx := t.Context()
	env := kubetest.Start(t)
	env.InstallMPIJobCRD(ctx)
	sa, saDyn := installChecksPolicy(t, env)
	parts := []evidence.Participant{{Index: 0, Node: "gpu-a"}, {Index: 1, Node: "gpu-b"}}
	for i := range parts {
		n := env.CreateNode(ctx, kubetest.NodeOptions{Name: parts[i].Node, GPUs: 8})
		parts[i].UID = string(n.UID)
	}

	c := ceilingCheckRun("ceiling", "#!/bin/sh\nexit 0\n", parts...)
	c.Check.Workload.HostPaths = []specs.HostPathMount{{Path: "/usr/lib/nvidia", MountPath: "/usr/local/nvidia"}}
	r, err := render(c, shippedChecksNS, shippedSignetImage)
	require.NoError(t, err)
	base := r.Pods[0]
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	check := func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }
	sc := func(p *corev1.Pod) *corev1.SecurityContext { return check(p).SecurityContext }
	other := "registry.invalid/attacker@sha256:" + strings.Repeat("3", 64)

	t.Run("signet's rendered pod is admitted", func(t *testing.T) {
		_, err := sa.CoreV1().Pods(shippedChecksNS).Create(ctx, base.DeepCopy(), dryRun)
		require.NoError(t, err)
	})

	for _, tt := range []struct {
		name   string
		change func(p *corev1.Pod)
		want   string // "" when admitted
	}{
		{"nodeName", func(p *corev1.Pod) { p.Spec.NodeName = "gpu-a" }, "may not set a pod's nodeName"},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "hostPID, hostIPC or a hostPort"},
		{"hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, "hostPID, hostIPC or a hostPort"},
		{"hostPort", func(p *corev1.Pod) {
			check(p).Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}}
		}, "hostPID, hostIPC or a hostPort"},
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "may not create a pod with hostNetwork"},
		{"runAsUser 0 keeping no capability", func(p *corev1.Pod) { sc(p).RunAsUser = ptr(int64(0)) }, ""},
		{"runAsUser 0 with the runtime's default capabilities", func(p *corev1.Pod) {
			sc(p).RunAsUser, sc(p).Capabilities = ptr(int64(0)), nil
		}, "drop ALL capabilities"},
		{"SYS_ADMIN", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} }, "drop ALL capabilities"},
		{"privileged", func(p *corev1.Pod) {
			sc(p).Privileged, sc(p).AllowPrivilegeEscalation = ptr(true), ptr(true)
		}, "may not create privileged containers"},
		{"privilege escalation", func(p *corev1.Pod) { sc(p).AllowPrivilegeEscalation = nil }, "may not create privileged containers"},
		{"seccomp unconfined", func(p *corev1.Pod) {
			sc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, "may not set sysctls, SELinux, seccomp"},
		{"pod sysctls", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "0"}}}
		}, "may not set sysctls, SELinux, seccomp"},
		{"writable allowed host path", func(p *corev1.Pod) {
			for i := range check(p).VolumeMounts {
				if strings.HasPrefix(check(p).VolumeMounts[i].Name, "host-") {
					check(p).VolumeMounts[i].ReadOnly, check(p).VolumeMounts[i].RecursiveReadOnly = false, nil
				}
			}
		}, "host paths read-only only"},
		{"host path root read-only", func(p *corev1.Pod) {
			for i := range p.Spec.Volumes {
				if hp := p.Spec.Volumes[i].HostPath; hp != nil {
					hp.Path = "/"
				}
			}
		}, "only host paths at or under"},
		{"host path beside an allowed one", func(p *corev1.Pod) {
			for i := range p.Spec.Volumes {
				if hp := p.Spec.Volumes[i].HostPath; hp != nil {
					hp.Path = "/usr/lib/nvidia-evil"
				}
			}
		}, "only host paths at or under"},
		{"unpinned image", func(p *corev1.Pod) {
			check(p).Image = "registry.example.invalid/gpu-certification/nccl:latest"
		}, "pinned by digest"},
		{"image of another registry", func(p *corev1.Pod) { check(p).Image = other }, "images of the ceiling's registries"},
		{"implicit Docker Hub image", func(p *corev1.Pod) {
			check(p).Image = "gpu-certification/nccl@sha256:" + strings.Repeat("4", 64)
		}, "images of the ceiling's registries"},
		{"signet image as the check container", func(p *corev1.Pod) { check(p).Image = shippedSignetImage }, "images of the ceiling's registries"},
		{"foreign init container image", func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = other }, "images of the ceiling's registries"},
		{"secret volume", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: "signet-reconciler-key"}}})
		}, "emptyDir, configMap and hostPath volumes only"},
		{"service-account token volume", func(p *corev1.Pod) {
			p.Spec.ServiceAccountName = "default" // else the API server's validation refuses it first
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "t", VolumeSource: corev1.VolumeSource{
				Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
		}, "emptyDir, configMap and hostPath volumes only"},
		{"token automounted", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, "automountServiceAccountToken false"},
		{"another ServiceAccount", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "signet-reconciler" }, "automountServiceAccountToken false"},
		{"owner reference", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: MPIJobGVR.GroupVersion().String(), Kind: "MPIJob",
				Name: "signet-x-01", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427", Controller: ptr(true)}}
		}, "with ownerReferences"},
		{"the finding's pod", func(p *corev1.Pod) {
			p.Spec.NodeName, p.Spec.HostPID, p.Spec.HostNetwork, p.Spec.HostIPC = "gpu-a", true, true, true
			sc(p).RunAsUser, sc(p).Capabilities.Add = ptr(int64(0)), []corev1.Capability{"SYS_ADMIN"}
			p.Spec.Volumes = append(p.Spec.Volumes,
				corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
				corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "signet-git-token"}}})
			check(p).VolumeMounts = append(check(p).VolumeMounts, corev1.VolumeMount{Name: "root", MountPath: "/host"})
			check(p).Image = "registry.example.invalid/gpu-certification/nccl:latest"
		}, "may not set a pod's nodeName"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := base.DeepCopy()
			tt.change(p)
			_, err := sa.CoreV1().Pods(shippedChecksNS).Create(ctx, p, dryRun)
			if tt.want == "" {
				require.NoError(t, err, "refused within the ceiling")
				return
			}
			require.Error(t, err, "admitted beyond the ceiling")
			assert.ErrorContains(t, err, checksPolicyDenied)
			assert.ErrorContains(t, err, tt.want)
			// The namespace is privileged: the policy, not Pod Security,
			// refuses, and only the reconciler's creates.
			_, err = env.Client.CoreV1().Pods(shippedChecksNS).Create(ctx, p, dryRun)
			assert.NoError(t, err, "the admin's create is not the policy's business")
		})
	}

	t.Run("mpijob", func(t *testing.T) {
		b := NewMPIJobBackend(saDyn, sa, MPIJobOptions{Namespace: shippedChecksNS, SignetImage: shippedSignetImage})
		mc := ceilingCheckRun("mpi-ceiling", "#!/bin/sh\nexit 0\n", parts...)
		mc.Check.Backend, mc.Check.GPUCount = specs.BackendMPIJob, 8
		mc.Check.Workload.HostPaths = []specs.HostPathMount{{Path: "/dev/infiniband", MountPath: "/dev/infiniband"}}
		_, job, err := b.render(mc)
		require.NoError(t, err)
		jobs := saDyn.Resource(MPIJobGVR).Namespace(shippedChecksNS)
		_, err = jobs.Create(ctx, job.DeepCopy(), dryRun)
		require.NoError(t, err, "signet's rendered MPIJob refused")
		for _, tt := range []struct {
			name, replica string
			change        func(s *corev1.PodSpec)
			want          string
		}{
			{"worker hostPID", "Worker", func(s *corev1.PodSpec) { s.HostPID = true }, "hostPID, hostIPC or a hostPort"},
			{"worker nodeName", "Worker", func(s *corev1.PodSpec) { s.NodeName = "gpu-a" }, "nodeName"},
			{"worker writable host path", "Worker", func(s *corev1.PodSpec) { s.Containers[0].VolumeMounts[0].ReadOnly = false }, "read-only only"},
			{"worker unpinned image", "Worker", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example.invalid/gpu-certification/nccl" }, "pinned by digest"},
			{"launcher secret volume", "Launcher", func(s *corev1.PodSpec) {
				s.Volumes = append(s.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}})
			}, "emptyDir, configMap and hostPath volumes only"},
			{"launcher privileged", "Launcher", func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext.Privileged = ptr(true)
			}, "may not create privileged containers"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				j := job.DeepCopy()
				tpl := mpiTemplate(t, j, tt.replica)
				tt.change(&tpl.Spec)
				m, err := runtimeToMap(&tpl)
				require.NoError(t, err)
				require.NoError(t, unstructured.SetNestedMap(j.Object, m, "spec", "mpiReplicaSpecs", tt.replica, "template"))
				_, err = jobs.Create(ctx, j, dryRun)
				require.Error(t, err, "admitted beyond the ceiling")
				assert.ErrorContains(t, err, checksPolicyDenied)
				assert.ErrorContains(t, err, tt.want)
			})
		}
	})

	t.Run("signet's checks run through the policy", func(t *testing.T) {
		img := signetImageDir(t)
		workload := t.TempDir()
		kubetest.AddSSHD(t, workload) // the MPIJob workers' command
		env.StartAgent(t, kubetest.AgentOptions{Images: map[string]string{shippedSignetImage: img, shippedWorkloadImage: workload}})
		env.StartMPIOperator(t)

		t.Run("pod", func(t *testing.T) {
			b := NewPodBackend(sa, PodOptions{Namespace: shippedChecksNS, SignetImage: shippedSignetImage, PollInterval: 200 * time.Millisecond, CleanupTimeout: time.Minute})
			c := ceilingCheckRun("through", resultScript, parts...)
			rep, err := b.Run(ctx, c)
			require.NoError(t, err)
			require.Len(t, rep.Participants, len(parts))
			for _, p := range rep.Participants {
				out := evaluate(c, p)
				assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s", p.Node, out.Reason)
			}
			require.NoError(t, b.Cleanup(ctx, c))
		})
		t.Run("mpijob", func(t *testing.T) {
			b := NewMPIJobBackend(saDyn, sa, MPIJobOptions{Namespace: shippedChecksNS, SignetImage: shippedSignetImage, PollInterval: 100 * time.Millisecond})
			c := mpiCheckRun("through-mpi", mpiPassScript("Pass", 0), 2*time.Minute, parts...)
			c.Check.Workload.Image = shippedWorkloadImage
			c.IntentAt = time.Now().Add(-time.Second)
			rep, err := b.Run(ctx, c)
			require.NoError(t, err)
			for _, p := range rep.Participants {
				out := evaluate(c, p)
				assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s", p.Node, out.Reason)
			}
		})
	})

	// The parameters changed by the admin (as an overlay would): registry
	// entries match whole components of an image that names its registry,
	// as the reconciler's ceiling does (finding 11).
	params := env.Client.CoreV1().ConfigMaps("signet-system")
	t.Run("registry entries name registries explicitly", func(t *testing.T) {
		cm, err := params.Get(ctx, "signet-ceiling", metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data["registries"] = "registry.example.invalid/gpu-certification\nregistry.example.invalid\nnvidia\n"
		_, err = params.Update(ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		withImage := func(image string) *corev1.Pod {
			p := base.DeepCopy()
			check(p).Image = image
			return p
		}
		digest := "@sha256:" + strings.Repeat("5", 64)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := sa.CoreV1().Pods(shippedChecksNS).Create(ctx, withImage("registry.example.invalid/other"+digest), dryRun)
			assert.NoError(ct, err, "the new entry is not in effect yet")
		}, 30*time.Second, 200*time.Millisecond)
		for _, image := range []string{"registry.example.invalid" + digest, "nvidia/cuda" + digest, "registry.example.invalid.evil/x" + digest} {
			_, err := sa.CoreV1().Pods(shippedChecksNS).Create(ctx, withImage(image), dryRun)
			require.Error(t, err, "%s: admitted beyond the ceiling", image)
			assert.ErrorContains(t, err, "images of the ceiling's registries")
		}
	})

	t.Run("without its parameters every create is refused", func(t *testing.T) {
		require.NoError(t, params.Delete(ctx, "signet-ceiling", metav1.DeleteOptions{}))
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := sa.CoreV1().Pods(shippedChecksNS).Create(ctx, base.DeepCopy(), dryRun)
			assert.ErrorContains(ct, err, checksPolicyDenied, "admitted beyond the ceiling without parameters")
		}, 30*time.Second, 200*time.Millisecond)
	})
}
