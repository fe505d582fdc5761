package kube

import (
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// render builds the script ConfigMap and the MPIJob of c. It is a pure
// function of c and the options, so that Describe digests exactly what Run
// creates.
func (b *MPIJobBackend) render(c *backend.CheckRun) (*corev1.ConfigMap, *unstructured.Unstructured, error) {
	w := c.Check.Workload
	switch {
	case w == nil:
		return nil, nil, fmt.Errorf("mpijob backend: check %q has no workload", c.Check.Name)
	case c.Check.GPUCount < 1:
		return nil, nil, fmt.Errorf("mpijob backend: check %q: gpuCount %d, an mpijob needs at least 1", c.Check.Name, c.Check.GPUCount)
	case len(c.Participants) == 0:
		return nil, nil, fmt.Errorf("mpijob backend: check %q has no participants", c.Check.Name)
	case b.o.SignetImage == "":
		return nil, nil, errors.New("mpijob backend: no signet image configured")
	case b.o.Namespace == "":
		return nil, nil, errors.New("mpijob backend: no namespace configured")
	}
	name := MPIJobName(c.Run, c.Index)
	lbl := objectLabels(c)
	cm, err := scriptConfigMap(c, b.o.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("mpijob backend: %w", err)
	}
	key, err := scriptKey(c)
	if err != nil {
		return nil, nil, fmt.Errorf("mpijob backend: %w", err)
	}
	launcher, err := mpiTemplateObject(b.launcherTemplate(c, name, cm.Name, key, lbl))
	if err != nil {
		return nil, nil, err
	}
	worker, err := mpiTemplateObject(b.workerTemplate(c, name, lbl))
	if err != nil {
		return nil, nil, err
	}
	jobLabels := mpiCopyLabels(lbl)
	if w.Queue != "" {
		jobLabels[KueueQueueLabel] = w.Queue
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": MPIJobGVR.GroupVersion().String(),
		"kind":       "MPIJob",
		"metadata": map[string]any{
			"name":        name,
			"namespace":   b.o.Namespace,
			"labels":      mpiStringMap(jobLabels),
			"annotations": map[string]any{DeadlineAnnotation: c.Deadline.UTC().Format(time.RFC3339)},
		},
		"spec": map[string]any{
			"slotsPerWorker":         int64(c.Check.GPUCount),
			"launcherCreationPolicy": "WaitForWorkersReady",
			"runPolicy": map[string]any{
				// signet removes the pods itself, after the evidence.
				"cleanPodPolicy": "None",
				// c.Deadline is the intent's time plus the check's
				// deadline; the operator counts from the job's start,
				// which comes later, so the job is never stopped before
				// c.Deadline, and signet stops observing at c.Deadline.
				// Derived from c alone so that Describe's digest holds.
				"activeDeadlineSeconds": int64(c.Check.Deadline),
				"backoffLimit":          int64(0),
			},
			// Each replica's restart policy is set here, where the
			// operator reads it, and not in its pod template: the
			// operator overwrites the template's with the replica's
			// and records a Warning Event on the MPIJob for every
			// launcher template that has one.
			"mpiReplicaSpecs": map[string]any{
				"Launcher": map[string]any{
					"replicas":      int64(1),
					"restartPolicy": string(corev1.RestartPolicyNever),
					"template":      launcher,
				},
				"Worker": map[string]any{
					"replicas":      int64(len(c.Participants)),
					"restartPolicy": string(corev1.RestartPolicyNever),
					"template":      worker,
				},
			},
		},
	}}
	return cm, job, nil
}

// launcherTemplate is the launcher: the pod backend's check container
// (signet exec on the verified script, copied in by the signet install init
// container; its exit code and termination message are the check's) with
// LauncherEnv, and unpinned, without GPUs, host paths, stage variable, Kueue
// topology annotation or service-account token. It gets the workload's
// image, cpu and memory and its user, never its privilege or capabilities:
// the launcher runs on whatever node the scheduler picks.
func (b *MPIJobBackend) launcherTemplate(c *backend.CheckRun, name, cmName, key string, lbl map[string]string) corev1.PodTemplateSpec {
	l := mpiCopyLabels(lbl)
	l[MPIJobNameLabel], l[MPIJobRoleLabel] = name, MPIRoleLauncher
	lc := *c
	lc.Check.GPUCount = 0
	w := *workload(c)
	w.HostPaths = nil
	lc.Check.Workload = &w
	ctr := checkContainer(&lc, key, c.LauncherEnv())
	sec := &specs.WorkloadSecurity{}
	if s := w.SecurityContext; s != nil {
		sec.RunAsUser, sec.RunAsNonRoot = s.RunAsUser, s.RunAsNonRoot
	}
	ctr.SecurityContext = securityContext(sec)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(30)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			InitContainers:                []corev1.Container{signetInit(b.o.SignetImage)},
			Containers:                    []corev1.Container{ctr},
			Volumes: []corev1.Volume{
				{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: scriptVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cmName},
					DefaultMode:          ptr(int32(0o444)),
				}}},
				{Name: workVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// workerTemplate is one worker per participant: required node affinity to
// exactly the participant nodes, required anti-affinity among the job's
// workers on hostname, the reservation and cordon tolerations, the check's
// GPUs and the workload's image, security context, host network and
// read-only host paths. Its command is MPIWorkerCommand, the sshd the
// launcher's mpirun connects to: what the MPI Operator would give a worker
// rendered without one (the image's entrypoint never runs), rendered here
// so that Describe's digest, the checks admission policy and the
// comparison with the created pods cover it. The restart policy is the
// replica's (render).
func (b *MPIJobBackend) workerTemplate(c *backend.CheckRun, name string, lbl map[string]string) corev1.PodTemplateSpec {
	w := c.Check.Workload
	l := mpiCopyLabels(lbl)
	l[MPIJobNameLabel], l[MPIJobRoleLabel] = name, MPIRoleWorker
	var ann map[string]string
	if w.RequiredTopologyLevel != "" {
		ann = map[string]string{KueueRequiredTopology: w.RequiredTopologyLevel}
	}
	nodes := make([]string, 0, len(c.Participants))
	for _, p := range c.Participants {
		nodes = append(nodes, p.Node)
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, hp := range w.HostPaths {
		vols = append(vols, corev1.Volume{Name: hostPathVolume(i), VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: hp.Path},
		}})
		mounts = append(mounts, corev1.VolumeMount{
			Name: hostPathVolume(i), MountPath: hp.MountPath, ReadOnly: true,
			RecursiveReadOnly: ptr(corev1.RecursiveReadOnlyIfPossible),
		})
	}
	var env []corev1.EnvVar
	if c.Check.Stage != "" {
		// The stage reaches participants only (DESIGN §2): here the
		// workers, never the launcher.
		env = []corev1.EnvVar{{Name: specs.EnvStageName, Value: c.Check.Stage}}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: ann},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(30)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			HostNetwork:                   w.HostNetwork,
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
							Key: mpiHostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: nodes,
						}}}},
					},
				},
				PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
							MPIJobNameLabel: name, MPIJobRoleLabel: MPIRoleWorker,
						}},
						TopologyKey: mpiHostnameLabel,
					}},
				},
			},
			Tolerations: []corev1.Toleration{
				{Key: ReservationTaintKey, Operator: corev1.TolerationOpEqual, Value: c.Run, Effect: corev1.TaintEffectNoSchedule},
				{Key: UnschedulableTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
			Containers: []corev1.Container{{
				Name:            mpiWorkerContainer,
				Image:           w.Image,
				Command:         slices.Clone(MPIWorkerCommand),
				Env:             env,
				Resources:       resources(w.Resources, c.Check.GPUCount),
				SecurityContext: securityContext(w.SecurityContext),
				VolumeMounts:    mounts,
			}},
			Volumes: vols,
		},
	}
}

func mpiTemplateObject(t corev1.PodTemplateSpec) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&t)
	if err != nil {
		return nil, fmt.Errorf("mpijob backend: pod template: %w", err)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return m, nil
}

func mpiCopyLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l)+2)
	for k, v := range l {
		out[k] = v
	}
	return out
}

func mpiStringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
