package kube

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"signet.dev/signet/evidence"
)

// What a check's pods are observed to be, compared with what signet
// rendered (issue 21, finding 5): the images the container runtime ran, and
// for the MPI Operator's pods, the rendered templates plus exactly what the
// operator adds to every launcher and worker.

// podImages records every container of p that ran (its status shows it
// running or terminated, now or before a restart, or carries an image ID)
// and says how each one's image ID differs from the digest pinned in the
// container of the same name in want, the rendered spec. An image ID is
// checked by the digest after its last "@" (containerd and CRI-O report
// the repository digest, "registry/repo@sha256:…"); one with no "@" (a
// bare config digest) cannot be checked and counts as a difference.
func podImages(p *corev1.Pod, want *corev1.PodSpec) ([]evidence.ContainerImage, []string) {
	var out []evidence.ContainerImage
	var bad []string
	check := func(what string, init bool, statuses []corev1.ContainerStatus, rendered []corev1.Container) {
		for _, cs := range statuses {
			ran := cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil || cs.ImageID != ""
			if !ran {
				continue
			}
			out = append(out, evidence.ContainerImage{Pod: p.Name, Container: cs.Name, Init: init, Image: cs.Image, ImageID: cs.ImageID})
			i := slices.IndexFunc(rendered, func(c corev1.Container) bool { return c.Name == cs.Name })
			if i < 0 {
				bad = append(bad, fmt.Sprintf("%s %s of pod %s ran and is not in the rendered pod", what, cs.Name, p.Name))
				continue
			}
			pinned := afterLastAt(rendered[i].Image)
			if got := afterLastAt(cs.ImageID); got == "" || got != pinned {
				bad = append(bad, fmt.Sprintf("%s %s of pod %s ran image ID %q, not the pinned %s", what, cs.Name, p.Name, cs.ImageID, pinned))
			}
		}
	}
	if want == nil {
		want = &corev1.PodSpec{}
	}
	check("init container", true, p.Status.InitContainerStatuses, want.InitContainers)
	check("container", false, p.Status.ContainerStatuses, want.Containers)
	return out, bad
}

// afterLastAt is what follows the last "@" of ref, "" when it has none.
func afterLastAt(ref string) string {
	i := strings.LastIndex(ref, "@")
	if i < 0 {
		return ""
	}
	return ref[i+1:]
}

// What the MPI Operator (kubeflow/mpi-operator v2beta1 controller) adds to
// the pod templates signet renders, and nothing else is allowed: to the
// first container of every launcher and worker, the environment variable
// K_MPI_JOB_ROLE and the ssh-auth Secret volume (<job>-ssh) mounted at
// /root/.ssh (signet sets no sshAuthMountPath); to the launcher, the MPI
// implementations' hostfile and slot variables, NVIDIA_VISIBLE_DEVICES and
// NVIDIA_DRIVER_CAPABILITIES emptied, and the mpi-job-config ConfigMap
// volume (<job>-config) mounted at /etc/mpi. Hostname, subdomain, restart
// policy, DNS policy and scheduler name are not compared (podSpecDiff).
const (
	mpiSSHVolume       = "ssh-auth"
	mpiSSHMountPath    = "/root/.ssh"
	mpiConfigVolume    = "mpi-job-config"
	mpiConfigMountPath = "/etc/mpi"
	mpiRSHArgs         = "-o ConnectionAttempts=10"
)

// MPIWorkerCommand is every MPIJob worker's command: the workload image's
// sshd in the foreground, logging to stderr. It is the command the MPI
// Operator gives a worker rendered without command and args; signet renders
// it, so the operator adds no command and none is allowed as its addition.
var MPIWorkerCommand = []string{"/usr/sbin/sshd", "-De"}

// mpiOperatorEnv is the environment the operator appends to a role's first
// container, name to value.
func mpiOperatorEnv(role string, slots int) map[string]string {
	env := map[string]string{"K_MPI_JOB_ROLE": role}
	if role != MPIRoleLauncher {
		return env
	}
	hostfile := mpiConfigMountPath + "/hostfile"
	s := strconv.Itoa(slots)
	for k, v := range map[string]string{
		"OMPI_MCA_orte_keep_fqdn_hostnames":     "true",
		"OMPI_MCA_orte_default_hostfile":        hostfile,
		"OMPI_MCA_plm_rsh_args":                 mpiRSHArgs,
		"OMPI_MCA_orte_set_default_slots":       s,
		"I_MPI_HYDRA_HOST_FILE":                 hostfile,
		"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": mpiRSHArgs,
		"I_MPI_PERHOST":                         s,
		"HYDRA_HOST_FILE":                       hostfile,
		"HYDRA_LAUNCH_EXTRA_ARGS":               mpiRSHArgs,
		"NVIDIA_VISIBLE_DEVICES":                "",
		"NVIDIA_DRIVER_CAPABILITIES":            "",
	} {
		env[k] = v
	}
	return env
}

// withoutOperatorAdditions returns a copy of got, the spec of an MPIJob's
// pod of role, with exactly the operator's additions to want (the rendered
// template) removed: each only where the operator puts it (appended after
// the rendered entries) and with the operator's values. Anything else stays,
// for podSpecDiff to report.
func withoutOperatorAdditions(want, got *corev1.PodSpec, role, job string, slots int) *corev1.PodSpec {
	g := got.DeepCopy()
	if len(g.Containers) == 0 || len(want.Containers) == 0 {
		return g
	}
	c, w := &g.Containers[0], &want.Containers[0]
	if len(c.Env) > len(w.Env) {
		allowed := mpiOperatorEnv(role, slots)
		kept := slices.Clone(c.Env[:len(w.Env)])
		for _, e := range c.Env[len(w.Env):] {
			if v, ok := allowed[e.Name]; ok && e.ValueFrom == nil && e.Value == v {
				continue
			}
			kept = append(kept, e)
		}
		c.Env = kept
	}
	opVolume := func(v corev1.Volume) bool {
		switch v.Name {
		case mpiSSHVolume:
			return v.Secret != nil && v.Secret.SecretName == job+"-ssh"
		case mpiConfigVolume:
			return role == MPIRoleLauncher && v.ConfigMap != nil && v.ConfigMap.Name == job+"-config"
		}
		return false
	}
	if len(g.Volumes) > len(want.Volumes) {
		g.Volumes = append(slices.Clone(g.Volumes[:len(want.Volumes)]), slices.DeleteFunc(slices.Clone(g.Volumes[len(want.Volumes):]), opVolume)...)
	}
	opMount := func(m corev1.VolumeMount) bool {
		switch {
		case m.SubPath != "" || m.SubPathExpr != "":
			return false
		case m.Name == mpiSSHVolume:
			return m.MountPath == mpiSSHMountPath
		case m.Name == mpiConfigVolume:
			return role == MPIRoleLauncher && m.MountPath == mpiConfigMountPath
		}
		return false
	}
	if len(c.VolumeMounts) > len(w.VolumeMounts) {
		c.VolumeMounts = append(slices.Clone(c.VolumeMounts[:len(w.VolumeMounts)]), slices.DeleteFunc(slices.Clone(c.VolumeMounts[len(w.VolumeMounts):]), opMount)...)
	}
	return g
}

// mpiTemplates are the rendered pod specs of an MPIJob's launcher and
// workers.
type mpiTemplates struct {
	launcher, worker *corev1.PodSpec
	job              string
	slots            int
}

// templatesOf reads the launcher and worker pod specs of a rendered MPIJob.
func templatesOf(job *unstructured.Unstructured, slots int) (*mpiTemplates, error) {
	t := &mpiTemplates{job: job.GetName(), slots: slots}
	for replica, into := range map[string]**corev1.PodSpec{"Launcher": &t.launcher, "Worker": &t.worker} {
		m, found, err := unstructured.NestedMap(job.Object, "spec", "mpiReplicaSpecs", replica, "template")
		if err != nil || !found {
			return nil, fmt.Errorf("mpijob backend: rendered MPIJob has no %s template (%v)", replica, err)
		}
		var tpl corev1.PodTemplateSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &tpl); err != nil {
			return nil, fmt.Errorf("mpijob backend: %s template: %w", replica, err)
		}
		*into = &tpl.Spec
	}
	return t, nil
}

// spec is the rendered spec of role.
func (t *mpiTemplates) spec(role string) *corev1.PodSpec {
	if role == MPIRoleLauncher {
		return t.launcher
	}
	return t.worker
}

// diff says how pod p of role differs from its rendered template beyond the
// operator's additions; "" when it does not.
func (t *mpiTemplates) diff(p *corev1.Pod, role string) string {
	want := t.spec(role)
	if d := podSpecDiff(want, withoutOperatorAdditions(want, &p.Spec, role, t.job, t.slots)); len(d) > 0 {
		return "differs from the rendered " + role + " template: " + strings.Join(d, "; ")
	}
	return ""
}
