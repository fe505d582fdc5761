package kube

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Binding a result to the objects signet created (issue 21, findings 1 and
// 4). Labels, names and the nonce are not secret: anyone who may create
// pods in the checks namespace can write them. A result is therefore read
// only from an object whose controller chain leads to the object signet
// created (its UID pinned when first seen), that was created no earlier
// than the check's intent, and, where signet rendered the pod itself,
// whose containers and volumes are the rendered ones.

// createdBeforeIntent says why o cannot be an object of a check whose intent
// was written at intent: it was created earlier. "" when it was not, or
// when intent is zero. creationTimestamp has whole seconds, so the intent
// time is truncated first.
func createdBeforeIntent(o metav1.Object, intent time.Time) string {
	if intent.IsZero() {
		return ""
	}
	at := o.GetCreationTimestamp().Time
	if at.Before(intent.Truncate(time.Second)) {
		return fmt.Sprintf("created at %s, before the check's intent (%s)", at.UTC().Format(time.RFC3339), intent.UTC().Format(time.RFC3339))
	}
	return ""
}

// controlledBy says why o is not controlled by the object of kind and uid:
// its controller reference is missing or names another object. "" when it
// is.
func controlledBy(o metav1.Object, kind string, uid types.UID) string {
	ref := metav1.GetControllerOf(o)
	switch {
	case ref == nil:
		return "has no controller"
	case ref.Kind != kind || ref.UID != uid:
		return fmt.Sprintf("is controlled by %s %s (uid %s), not by %s uid %s", ref.Kind, ref.Name, ref.UID, kind, uid)
	}
	return ""
}

// podSpecDiff lists how the containers and volumes of an observed pod
// differ from the rendered spec: container and init container names, images,
// commands, args, env, volume mounts, security contexts, working
// directories, lifecycle hooks and probes, and the volumes' names and
// sources (kind, ConfigMap name, host path). Fields the API server defaults
// are not compared (signet renders no hook or probe, which the API server
// would default). Empty when they are the same.
func podSpecDiff(want, got *corev1.PodSpec) []string {
	var diff []string
	diff = append(diff, containersDiff("init container", want.InitContainers, got.InitContainers)...)
	diff = append(diff, containersDiff("container", want.Containers, got.Containers)...)
	vols := func(vs []corev1.Volume) []string {
		var out []string
		for _, v := range vs {
			out = append(out, volumeKey(v))
		}
		return out
	}
	if w, g := vols(want.Volumes), vols(got.Volumes); !slices.Equal(w, g) {
		diff = append(diff, fmt.Sprintf("volumes %v, rendered %v", g, w))
	}
	if want.HostNetwork != got.HostNetwork || want.HostPID != got.HostPID || want.HostIPC != got.HostIPC {
		diff = append(diff, "host namespaces differ from the rendered ones")
	}
	return diff
}

func containersDiff(what string, want, got []corev1.Container) []string {
	names := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if w, g := names(want), names(got); !slices.Equal(w, g) {
		return []string{fmt.Sprintf("%ss %v, rendered %v", what, g, w)}
	}
	var diff []string
	for i := range want {
		w, g := &want[i], &got[i]
		switch {
		case w.Image != g.Image:
			diff = append(diff, fmt.Sprintf("%s %s: image %q, rendered %q", what, w.Name, g.Image, w.Image))
		case !slices.Equal(w.Command, g.Command) || !slices.Equal(w.Args, g.Args):
			diff = append(diff, fmt.Sprintf("%s %s: command %q %q, rendered %q %q", what, w.Name, g.Command, g.Args, w.Command, w.Args))
		case !slices.EqualFunc(w.Env, g.Env, func(a, b corev1.EnvVar) bool {
			return a.Name == b.Name && a.Value == b.Value && a.ValueFrom == nil && b.ValueFrom == nil
		}) || len(g.EnvFrom) != len(w.EnvFrom):
			diff = append(diff, fmt.Sprintf("%s %s: environment differs from the rendered one", what, w.Name))
		case !slices.EqualFunc(w.VolumeMounts, g.VolumeMounts, func(a, b corev1.VolumeMount) bool {
			return a.Name == b.Name && a.MountPath == b.MountPath && a.SubPath == b.SubPath && a.ReadOnly == b.ReadOnly
		}):
			diff = append(diff, fmt.Sprintf("%s %s: volume mounts differ from the rendered ones", what, w.Name))
		case !securityEqual(w.SecurityContext, g.SecurityContext):
			diff = append(diff, fmt.Sprintf("%s %s: security context differs from the rendered one", what, w.Name))
		case w.WorkingDir != g.WorkingDir || !equality.Semantic.DeepEqual(w.Lifecycle, g.Lifecycle) ||
			!equality.Semantic.DeepEqual(w.LivenessProbe, g.LivenessProbe) || !equality.Semantic.DeepEqual(w.ReadinessProbe, g.ReadinessProbe) ||
			!equality.Semantic.DeepEqual(w.StartupProbe, g.StartupProbe):
			// Hooks and exec probes run commands in the container beside
			// the check; signet renders none of them.
			diff = append(diff, fmt.Sprintf("%s %s: working directory, lifecycle hooks or probes differ from the rendered ones", what, w.Name))
		}
	}
	return diff
}

// securityEqual compares the privilege-bearing fields of two security
// contexts.
func securityEqual(a, b *corev1.SecurityContext) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	eqb := func(x, y *bool) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	eqi := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	var ca, cb []corev1.Capability
	if a.Capabilities != nil {
		ca = a.Capabilities.Add
	}
	if b.Capabilities != nil {
		cb = b.Capabilities.Add
	}
	return eqb(a.Privileged, b.Privileged) && eqb(a.AllowPrivilegeEscalation, b.AllowPrivilegeEscalation) &&
		eqi(a.RunAsUser, b.RunAsUser) && eqi(a.RunAsGroup, b.RunAsGroup) && slices.Equal(ca, cb)
}

// volumeKey names a volume and its source as far as it decides what a
// container sees.
func volumeKey(v corev1.Volume) string {
	switch {
	case v.ConfigMap != nil:
		return v.Name + "=configMap:" + v.ConfigMap.Name
	case v.EmptyDir != nil:
		return v.Name + "=emptyDir"
	case v.HostPath != nil:
		return v.Name + "=hostPath:" + v.HostPath.Path
	}
	return v.Name + "=other"
}
