package kube

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Issue 21, finding 5 (the rest): what ran is compared with what signet
// rendered on every observation, not only at admission; the image IDs the
// container runtime reports are recorded and checked against the pinned
// digests; the MPI Operator's launcher and workers are compared with the
// rendered templates, the operator's own additions allowed. The control
// plane is real; the kubelet's container runtime is kubetest's Agent (its
// WrongImage misbehaviour reports an image ID of other content), the MPI
// Operator kubetest's stand-in.

// assertImagesRecorded requires every image record of id to carry an image
// ID with the pinned digest of its image.
func assertImagesRecorded(t *testing.T, id evidence.Identity, want int) {
	t.Helper()
	require.Len(t, id.Images, want, "%+v", id.Images)
	for _, im := range id.Images {
		assert.Equal(t, afterLastAt(im.Image), afterLastAt(im.ImageID), "%+v", im)
		assert.NotEmpty(t, im.Pod)
	}
}

// TestFinding21_5ImageIDs: a participant whose runtime reports another
// digest than the pinned one for a container it ran gets no result; the
// others' image IDs are recorded in their identities. Before the fix no
// image ID was read: the wrong content's Pass was taken.
func TestFinding21_5ImageIDs(t *testing.T) {
	t.Run("pod", func(t *testing.T) {
		e := startE2E(t, map[string]kubetest.Misbehaviour{podName("wrongimg", 1, 1): kubetest.WrongImage})
		c := e.checkRun("wrongimg", resultScript, 2*time.Minute)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		assert.Equal(t, specs.VerdictPass, evaluate(c, rep.Participants[0]).Verdict)
		assertImagesRecorded(t, rep.Participants[0].Identity, 2)
		p := rep.Participants[1]
		out := evaluate(c, p)
		assert.NotEqual(t, specs.VerdictPass, out.Verdict, "a pod that ran other content passed")
		assert.Contains(t, p.Termination.Reason, "did not run the pinned images")
		assert.Len(t, p.Identity.Images, 2, "what ran is recorded, also when it is wrong")
		e.cleanup(t, c)
	})
	t.Run("mpijob worker", func(t *testing.T) {
		run := "wrongimg-mpi"
		_, _, b, parts := mpiFindingEnv(t, run, map[string]kubetest.Misbehaviour{MPIJobName(run, 1) + "-worker-1": kubetest.WrongImage})
		c := mpiCheckRun(run, mpiPassScript("Pass", 0), time.Minute, parts...)
		rep, err := b.Run(t.Context(), c)
		require.NoError(t, err)
		for _, p := range rep.Participants {
			out := evaluate(c, p)
			assert.NotEqual(t, specs.VerdictPass, out.Verdict, "%s: a worker that ran other content passed", p.Node)
			assert.Contains(t, p.Termination.Reason, "not the pinned")
		}
		// The other worker's container and the launcher's two are
		// recorded with their pinned digests.
		i := slices.IndexFunc(rep.Participants, func(p backend.ParticipantReport) bool {
			return !strings.Contains(p.Identity.Workload, "-worker-1@")
		})
		require.GreaterOrEqual(t, i, 0)
		assertImagesRecorded(t, rep.Participants[i].Identity, 3)
	})
	t.Run("mpijob passes with the pinned images", func(t *testing.T) {
		_, _, b, parts := mpiFindingEnv(t, "rightimg", nil)
		c := mpiCheckRun("rightimg", mpiPassScript("Pass", 0), time.Minute, parts...)
		rep, err := b.Run(t.Context(), c)
		require.NoError(t, err)
		for _, p := range rep.Participants {
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s", p.Node, out.Reason)
			assertImagesRecorded(t, p.Identity, 3)
		}
	})
}

// TestFinding21_5ChangedWhileObserved: the check container's image of a
// running check pod is changed through the API (a pod's container image
// is mutable: the kubelet restarts the container with it). Before the fix
// the spec was compared at admission only and the pod's result was taken.
func TestFinding21_5ChangedWhileObserved(t *testing.T) {
	e := startE2E(t, nil)
	ctx := t.Context()
	script := "#!/bin/sh\nsleep 6\n" + strings.TrimPrefix(resultScript, "#!/bin/sh\n")
	c := e.checkRun("changed", script, 2*time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		name := podName("changed", 1, 1)
		// assert, not require: this is not the test's goroutine.
		assert.EventuallyWithT(t, func(ct *assert.CollectT) {
			p, err := e.env.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			require.NoError(ct, err)
			require.Equal(ct, corev1.PodRunning, p.Status.Phase)
			p.Spec.Containers[0].Image = attackerImage
			_, err = e.env.Client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
			assert.NoError(ct, err)
		}, 30*time.Second, 50*time.Millisecond)
	}()
	rep, err := e.b.Run(ctx, c)
	require.NoError(t, err)
	<-done
	assert.Equal(t, specs.VerdictPass, evaluate(c, rep.Participants[0]).Verdict)
	p := rep.Participants[1]
	assert.NotEqual(t, specs.VerdictPass, evaluate(c, p).Verdict, "a pod changed while observed passed")
	assert.Contains(t, p.Termination.Reason, "as observed differs from the rendered pod")
	assert.Contains(t, p.Termination.Reason, attackerImage)
}

// TestFinding21_5MPIPodsMatchTemplates: a mutating webhook appends an
// environment variable (LD_PRELOAD, as a library that replaces what the
// check's processes do would need) to the check container of the MPI
// launcher pod, made by the real Job controller from the stand-in
// operator's Job; the check must not pass. Before the fix the launcher and
// workers were bound by owner chain only.
func TestFinding21_5MPIPodsMatchTemplates(t *testing.T) {
	env, _, b, parts := mpiFindingEnv(t, "tpl", nil)
	injectPatch(t, env, "signet", map[string]string{MPIJobRoleLabel: MPIRoleLauncher}, "/spec/containers/0/env/-",
		map[string]any{"name": "LD_PRELOAD", "value": "/nonexistent.so"},
		func(p *corev1.Pod) bool { return len(p.Spec.Containers[0].Env) == 2 })
	c := mpiCheckRun("tpl", mpiPassScript("Pass", 0), time.Minute, parts...)
	rep, err := b.Run(t.Context(), c)
	require.NoError(t, err)
	for _, p := range rep.Participants {
		assert.NotEqual(t, specs.VerdictPass, evaluate(c, p).Verdict, "%s: a launcher changed at admission passed", p.Node)
		assert.Contains(t, p.Termination.Reason, "differs from the rendered launcher template")
	}
}

// TestFinding21_5OperatorAdditions: exactly what the real MPI Operator adds
// to a launcher or worker (kubeflow/mpi-operator's newLauncherPodTemplate,
// newWorker, setupSSHOnPod) is allowed; anything else is a difference.
func TestFinding21_5OperatorAdditions(t *testing.T) {
	b := NewMPIJobBackend(nil, nil, MPIJobOptions{Namespace: "signet", SignetImage: mpiTestSignetImage})
	c := mpiCheckRun("ops", "#!/bin/sh\nexit 0\n", time.Minute,
		evidence.Participant{Node: "gpu-a", UID: "uid-a"}, evidence.Participant{Node: "gpu-b", UID: "uid-b"})
	_, job, err := b.render(c)
	require.NoError(t, err)
	tpls, err := templatesOf(job, c.Check.GPUCount)
	require.NoError(t, err)
	name := job.GetName()
	ssh := func(s *corev1.PodSpec) {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "ssh-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-ssh"}}})
		s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "ssh-auth", MountPath: "/root/.ssh"})
	}
	env := func(s *corev1.PodSpec, kv ...string) {
		for i := 0; i < len(kv); i += 2 {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
	}
	operatorLauncher := func(s *corev1.PodSpec) {
		env(s, "K_MPI_JOB_ROLE", "launcher", "OMPI_MCA_orte_keep_fqdn_hostnames", "true",
			"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile", "OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10",
			"OMPI_MCA_orte_set_default_slots", "8", "NVIDIA_VISIBLE_DEVICES", "", "NVIDIA_DRIVER_CAPABILITIES", "")
		ssh(s)
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "mpi-job-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name + "-config"}}}})
		s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "mpi-job-config", MountPath: "/etc/mpi"})
		s.Hostname, s.Subdomain, s.RestartPolicy = name+"-launcher", name+"-worker", corev1.RestartPolicyNever
	}
	operatorWorker := func(s *corev1.PodSpec) {
		env(s, "K_MPI_JOB_ROLE", "worker")
		ssh(s)
		s.Hostname, s.Subdomain = name+"-worker-0", name+"-worker"
	}
	for _, tt := range []struct {
		name, role string
		change     func(s *corev1.PodSpec)
		want       string // "" when allowed
	}{
		{"launcher as the operator makes it", MPIRoleLauncher, operatorLauncher, ""},
		{"worker as the operator makes it", MPIRoleWorker, operatorWorker, ""},
		{"launcher: another environment variable", MPIRoleLauncher, func(s *corev1.PodSpec) {
			operatorLauncher(s)
			env(s, "LD_PRELOAD", "/tmp/x.so")
		}, "environment differs"},
		{"launcher: an operator variable with another value", MPIRoleLauncher, func(s *corev1.PodSpec) {
			env(s, "K_MPI_JOB_ROLE", "worker")
		}, "environment differs"},
		{"launcher: a rendered variable changed", MPIRoleLauncher, func(s *corev1.PodSpec) {
			s.Containers[0].Env[0].Value = "changed"
		}, "environment differs"},
		{"worker: another job's SSH Secret", MPIRoleWorker, func(s *corev1.PodSpec) {
			operatorWorker(s)
			s.Volumes[len(s.Volumes)-1].Secret.SecretName = "other-ssh"
		}, "volumes"},
		{"worker: the SSH Secret mounted elsewhere", MPIRoleWorker, func(s *corev1.PodSpec) {
			operatorWorker(s)
			s.Containers[0].VolumeMounts[len(s.Containers[0].VolumeMounts)-1].MountPath = "/signet-bin"
		}, "volume mounts differ"},
		{"worker: the hostfile volume (launcher only)", MPIRoleWorker, func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "mpi-job-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: name + "-config"}}}})
		}, "volumes"},
		{"worker: another command", MPIRoleWorker, func(s *corev1.PodSpec) {
			s.Containers[0].Command = []string{"/bin/sh", "-c", "echo forged"}
		}, "command"},
		{"worker: sshd with other arguments", MPIRoleWorker, func(s *corev1.PodSpec) {
			operatorWorker(s)
			s.Containers[0].Args = []string{"-f", "/tmp/sshd_config"}
		}, "command"},
		{"launcher: a postStart hook beside the check", MPIRoleLauncher, func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
				Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "echo forged > /dev/termination-log"}}}}
		}, "lifecycle hooks or probes"},
		{"worker: an exec liveness probe", MPIRoleWorker, func(s *corev1.PodSpec) {
			s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/true"}}}}
		}, "lifecycle hooks or probes"},
		{"launcher: an extra init container", MPIRoleLauncher, func(s *corev1.PodSpec) {
			s.InitContainers = append(s.InitContainers, corev1.Container{Name: "injected", Image: attackerImage})
		}, "init containers"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: types.UID("u")}, Spec: *tpls.spec(tt.role).DeepCopy()}
			tt.change(&p.Spec)
			got := tpls.diff(p, tt.role)
			if tt.want == "" {
				assert.Empty(t, got, "the operator's own additions refused")
				return
			}
			assert.Contains(t, got, tt.want, "a change beyond the operator's additions allowed")
		})
	}
	// The template itself is unchanged by the comparison.
	assert.False(t, slices.ContainsFunc(tpls.launcher.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "K_MPI_JOB_ROLE" }))
}
