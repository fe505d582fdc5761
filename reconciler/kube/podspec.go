package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Paths and names inside a check pod. The signet image holds the static
// binary at signetImageBinary; the install init container copies it into
// the binVolume emptyDir, from which the check container runs it as its
// entrypoint. None of these paths shares a leading path element with
// another, so a reader (or a test agent mapping volumes) never mistakes one
// for a prefix of another.
const (
	signetImageBinary = "/signet"
	binVolume         = "signet-bin"
	binMountPath      = "/signet-bin"
	execBinary        = binMountPath + "/signet"
	scriptVolume      = "signet-script"
	scriptMountPath   = "/signet-script"
	workVolume        = "signet-work"
	workMountPath     = "/signet-work"
	terminationLog    = "/dev/termination-log"

	installContainerName = "signet-install"
	checkContainerName   = "check"
)

// Kueue's pod-integration names (kueue.x-k8s.io).
const (
	KueueQueueLabel         = "kueue.x-k8s.io/queue-name"
	KueuePodGroupLabel      = "kueue.x-k8s.io/pod-group-name"
	KueuePodGroupTotalCount = "kueue.x-k8s.io/pod-group-total-count"
	KueueRequiredTopology   = "kueue.x-k8s.io/podset-required-topology"
	// KueueRetriableInGroup "false" tells Kueue no pod of the group is
	// ever replaced (signet never recreates a pod): a stopped or failed
	// group ends, and Kueue drops its finalizers, instead of waiting for
	// replacement pods.
	KueueRetriableInGroup = "kueue.x-k8s.io/retriable-in-group"
	// KueueAdmissionGate is the scheduling gate Kueue's pod webhook puts
	// on every pod of a queue; Kueue lifts it once the pod group is
	// admitted (quota reserved, and with topology, a domain assigned).
	KueueAdmissionGate = "kueue.x-k8s.io/admission"
	// KueueTopologyGate is the gate Kueue's topology-aware scheduling
	// keeps until it has written the pod's domain into its node selector.
	KueueTopologyGate = "kueue.x-k8s.io/topology"
)

// DeadlineAnnotation on a check's objects is the check's wall-clock
// deadline (RFC 3339, UTC), as recorded in its intent.
const DeadlineAnnotation = "signet.dev/deadline"

// nobody is the uid the install init container runs as: it only copies a
// file into an emptyDir (mode 0777) and needs no privilege.
const nobody = 65534

// maxNameLen is the longest object name signet creates: pod names become
// pod hostnames, which are DNS labels.
const maxNameLen = validation.DNS1123LabelMaxLength

// checkBaseName is the ConfigMap's name, the Kueue pod-group name and the
// prefix of the check's pod names: signet-<run>-<NN>, NN the two-digit
// check index. When a pod name built on it would exceed 63 bytes, the run
// part is shortened and followed by a hash of the whole run ID, so names
// stay stable and distinct.
func checkBaseName(run string, index int) string {
	nn := fmt.Sprintf("%02d", index)
	base := "signet-" + run + "-" + nn
	// The longest pod suffix: "-p" and a participant index below 100.
	const podSuffix = len("-p99")
	if len(base)+podSuffix <= maxNameLen {
		return base
	}
	sum := sha256.Sum256([]byte(run))
	h := hex.EncodeToString(sum[:])[:10]
	keep := maxNameLen - podSuffix - len("signet-") - len("-"+h) - len("-"+nn)
	short := strings.TrimRight(run[:min(keep, len(run))], "-")
	return "signet-" + short + "-" + h + "-" + nn
}

// podName is participant p's pod name.
func podName(run string, index, p int) string {
	return checkBaseName(run, index) + "-p" + strconv.Itoa(p)
}

// objectLabels are the labels on every object of check index of run.
func objectLabels(c *backend.CheckRun) map[string]string {
	l := map[string]string{
		RunLabel:        c.Run,
		CheckIndexLabel: strconv.Itoa(c.Index),
		ManagedByLabel:  ManagedBy,
	}
	if c.Cluster != "" {
		l[ClusterLabel] = c.Cluster
	}
	return l
}

// checkSelector selects every object of check index of run.
func checkSelector(c *backend.CheckRun) string {
	return RunLabel + "=" + c.Run + "," + CheckIndexLabel + "=" + strconv.Itoa(c.Index) + "," + ManagedByLabel + "=" + ManagedBy
}

// scriptKey is the ConfigMap key (and file name in the script volume) of
// the check's script: its base name.
func scriptKey(c *backend.CheckRun) (string, error) {
	k := path.Base(c.Check.Script)
	if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
		return "", fmt.Errorf("check %q: script %q: base name is not a ConfigMap key: %s", c.Check.Name, c.Check.Script, strings.Join(errs, "; "))
	}
	return k, nil
}

// scriptConfigMap renders the run-owned immutable ConfigMap holding the
// check's verified script bytes under the script's base name (binaryData
// when the bytes are not UTF-8). It holds nothing else.
func scriptConfigMap(c *backend.CheckRun, ns string) (*corev1.ConfigMap, error) {
	key, err := scriptKey(c)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: checkBaseName(c.Run, c.Index), Namespace: ns,
			Labels:      objectLabels(c),
			Annotations: map[string]string{DeadlineAnnotation: c.Deadline.UTC().Format("2006-01-02T15:04:05Z")},
		},
		Immutable: ptr(true),
	}
	if utf8.Valid(c.Script) {
		cm.Data = map[string]string{key: string(c.Script)}
	} else {
		cm.BinaryData = map[string][]byte{key: c.Script}
	}
	return cm, nil
}

// signetInit renders the init container that copies signet's static binary
// from the digest-pinned signet image into the binVolume emptyDir with
// `signet install` (the image has no shell and no cp). It runs as nobody,
// with no capability and a read-only root filesystem.
func signetInit(signetImage string) corev1.Container {
	return corev1.Container{
		Name:    installContainerName,
		Image:   signetImage,
		Command: []string{signetImageBinary, "install", execBinary},
		VolumeMounts: []corev1.VolumeMount{
			{Name: binVolume, MountPath: binMountPath},
		},
		ImagePullPolicy:          corev1.PullIfNotPresent,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr(int64(nobody)),
			RunAsGroup:               ptr(int64(nobody)),
			RunAsNonRoot:             ptr(true),
			ReadOnlyRootFilesystem:   ptr(true),
			AllowPrivilegeEscalation: ptr(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// execArgs is the check container's command: signet exec on the script in
// the ConfigMap volume, pinned to its digest.
func execArgs(key string, digest specs.Digest) []string {
	return []string{
		execBinary, "exec",
		"--script", scriptMountPath + "/" + key,
		"--digest", string(digest),
		"--work-dir", workMountPath,
		"--termination-log", terminationLog,
	}
}

// checkContainer renders the container that runs the check for one
// participant: the workload's image with `signet exec` as its command,
// env the sorted DESIGN §4 variables, the workload's resources with
// nvidia.com/gpu = gpuCount as request and limit, its read-only host paths,
// and exactly the security context it asks for (see securityContext).
func checkContainer(c *backend.CheckRun, key string, env map[string]string) corev1.Container {
	w := workload(c)
	ctr := corev1.Container{
		Name:                     checkContainerName,
		Image:                    w.Image,
		Command:                  execArgs(key, c.ScriptDigest),
		ImagePullPolicy:          corev1.PullIfNotPresent,
		TerminationMessagePath:   terminationLog,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		Resources:                resources(w.Resources, c.Check.GPUCount),
		SecurityContext:          securityContext(w.SecurityContext),
		VolumeMounts: []corev1.VolumeMount{
			{Name: binVolume, MountPath: binMountPath, ReadOnly: true},
			{Name: scriptVolume, MountPath: scriptMountPath, ReadOnly: true},
			{Name: workVolume, MountPath: workMountPath},
		},
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: k, Value: env[k]})
	}
	for i, hp := range w.HostPaths {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{
			Name: hostPathVolume(i), MountPath: hp.MountPath, ReadOnly: true,
			RecursiveReadOnly: ptr(corev1.RecursiveReadOnlyIfPossible),
		})
	}
	return ctr
}

func hostPathVolume(i int) string { return "host-" + strconv.Itoa(i) }

func workload(c *backend.CheckRun) *specs.Workload {
	if c.Check.Workload == nil {
		return &specs.Workload{}
	}
	return c.Check.Workload
}

// resources converts the workload's requests and limits and sets
// nvidia.com/gpu to gpus in both (omitted when zero; validation keeps it
// out of the workload's own resources).
func resources(r specs.WorkloadResources, gpus int) corev1.ResourceRequirements {
	conv := func(m map[string]resource.Quantity) corev1.ResourceList {
		if len(m) == 0 && gpus == 0 {
			return nil
		}
		out := corev1.ResourceList{}
		for k, v := range m {
			out[corev1.ResourceName(k)] = v.DeepCopy()
		}
		if gpus > 0 {
			out[GPUResource] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		}
		return out
	}
	return corev1.ResourceRequirements{Requests: conv(r.Requests), Limits: conv(r.Limits)}
}

// securityContext is exactly what the workload asks for: privileged or
// not, every capability dropped and then the asked ones added, runAsUser
// and runAsNonRoot when given; privilege escalation is allowed only to a
// privileged container (Kubernetes refuses the other combination).
func securityContext(s *specs.WorkloadSecurity) *corev1.SecurityContext {
	if s == nil {
		s = &specs.WorkloadSecurity{}
	}
	sc := &corev1.SecurityContext{
		Privileged:               ptr(s.Privileged),
		AllowPrivilegeEscalation: ptr(s.Privileged),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	for _, c := range s.Capabilities {
		sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(c))
	}
	if s.RunAsUser != nil {
		sc.RunAsUser = ptr(*s.RunAsUser)
	}
	if s.RunAsNonRoot != nil {
		sc.RunAsNonRoot = ptr(*s.RunAsNonRoot)
	}
	return sc
}

// participantPod renders participant p's pod: pinned to its node by
// required node affinity on the Node's name (metadata.name, which the
// kubernetes.io/hostname label need not equal), tolerating signet's
// reservation taint for this run and the cordon taint, restartPolicy
// Never, activeDeadlineSeconds as a kubelet-side backstop (see below), no
// service-account token and no service links, the workload's host network,
// and with a queue, Kueue's queue label, pod-group label and total-count
// annotation (and the topology annotation when a level is required).
//
// activeDeadlineSeconds is the check's whole deadline, counted by the
// kubelet from the pod's start. It is a function of the durable intent
// only, so the rendered digest recorded there is reproducible; signet
// itself stops observing at the check's wall-clock deadline and reports
// every pod not terminal by then as Error, and Cleanup deletes it.
func participantPod(c *backend.CheckRun, ns, signetImage string, p int) (*corev1.Pod, error) {
	key, err := scriptKey(c)
	if err != nil {
		return nil, err
	}
	w := workload(c)
	part := c.Participants[p]
	labels := objectLabels(c)
	labels[ParticipantLabel] = strconv.Itoa(p)
	annotations := map[string]string{DeadlineAnnotation: c.Deadline.UTC().Format("2006-01-02T15:04:05Z")}
	if w.Queue != "" {
		labels[KueueQueueLabel] = w.Queue
		labels[KueuePodGroupLabel] = checkBaseName(c.Run, c.Index)
		annotations[KueuePodGroupTotalCount] = strconv.Itoa(len(c.Participants))
		annotations[KueueRetriableInGroup] = "false"
		if w.RequiredTopologyLevel != "" {
			annotations[KueueRequiredTopology] = w.RequiredTopologyLevel
		}
	}
	volumes := []corev1.Volume{
		{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: scriptVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: checkBaseName(c.Run, c.Index)},
			DefaultMode:          ptr(int32(0o444)),
		}}},
		{Name: workVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	for i, hp := range w.HostPaths {
		volumes = append(volumes, corev1.Volume{Name: hostPathVolume(i), VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: hp.Path},
		}})
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(c.Run, c.Index, p), Namespace: ns,
			Labels: labels, Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr(int64(c.Check.Deadline)),
			TerminationGracePeriodSeconds: ptr(int64(30)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			HostNetwork:                   w.HostNetwork,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchFields: []corev1.NodeSelectorRequirement{{
							Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{part.Node},
						}},
					}},
				},
			}},
			Tolerations: []corev1.Toleration{
				{Key: ReservationTaintKey, Operator: corev1.TolerationOpEqual, Value: c.Run, Effect: corev1.TaintEffectNoSchedule},
				{Key: UnschedulableTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
			InitContainers: []corev1.Container{signetInit(signetImage)},
			Containers:     []corev1.Container{checkContainer(c, key, c.Env(p))},
			Volumes:        volumes,
		},
	}
	return pod, nil
}

// rendered is a check's backend objects as Run creates them.
type rendered struct {
	ConfigMap *corev1.ConfigMap
	Pods      []*corev1.Pod
}

// render renders the ConfigMap and every participant's pod of c.
func render(c *backend.CheckRun, ns, signetImage string) (*rendered, error) {
	if len(c.Participants) == 0 {
		return nil, errors.New("pod backend: no participants")
	}
	if c.Check.Workload == nil || c.Check.Workload.Image == "" {
		return nil, fmt.Errorf("pod backend: check %q has no workload image", c.Check.Name)
	}
	if signetImage == "" {
		return nil, errors.New("pod backend: no signet image configured")
	}
	if c.Deadline.IsZero() || c.Check.Deadline <= 0 {
		return nil, fmt.Errorf("pod backend: check %q has no deadline", c.Check.Name)
	}
	cm, err := scriptConfigMap(c, ns)
	if err != nil {
		return nil, err
	}
	r := &rendered{ConfigMap: cm}
	for p := range c.Participants {
		pod, err := participantPod(c, ns, signetImage, p)
		if err != nil {
			return nil, err
		}
		r.Pods = append(r.Pods, pod)
	}
	return r, nil
}

// names lists the objects of r: configmap/NAME then pod/NAME in order.
func (r *rendered) names() []string {
	out := []string{"configmap/" + r.ConfigMap.Name}
	for _, p := range r.Pods {
		out = append(out, "pod/"+p.Name)
	}
	return out
}

// digest is the sha256 of the canonical JSON of r with no server-set
// field (status, creationTimestamp): exactly what is sent to create.
func (r *rendered) digest() (specs.Digest, error) {
	objs := []any{r.ConfigMap}
	for _, p := range r.Pods {
		objs = append(objs, p)
	}
	var docs []map[string]any
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return "", fmt.Errorf("render: %w", err)
		}
		delete(u, "status")
		if md, ok := u["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		docs = append(docs, u)
	}
	b, err := specs.CanonicalJSON(docs)
	if err != nil {
		return "", err
	}
	return specs.DigestOf(b), nil
}

func ptr[T any](v T) *T { return &v }
